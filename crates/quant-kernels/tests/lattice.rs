//! Lattice-type kernels (IQ3_S, IQ2_XS, IQ2_XXS, IQ3_XXS, IQ2_S × Q8_K): every SIMD backend bit-identical to its
//! scalar twin on both of llama.cpp's paths (vec_dot below 8 tokens, tiled from 8), through
//! the tile kernels, `vec_dot` and `matmul`; the scalar twins against an f64 reference.

use quant_kernels::registry::{kernels_of, Kernel};
use quant_kernels::scalar::act::quantize_q8_k;
use quant_kernels::scalar::iq4::Path;
use quant_kernels::scalar::lattice::{self as s, Format};
use quant_kernels::{matmul, matmul_rowwise, Matrix, Pool, Tile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const IQ3_S: u32 = 21;
const IQ2_XS: u32 = 17;
const IQ2_XXS: u32 = 16;
const IQ3_XXS: u32 = 18;
const IQ2_S: u32 = 22;
const ALL: [u32; 5] = [IQ3_S, IQ2_XS, IQ2_XXS, IQ3_XXS, IQ2_S];
const Q8K_BYTES: usize = 292;

fn fmt(type_id: u32) -> Format {
    match type_id {
        IQ3_S => s::IQ3_S,
        IQ2_XS => s::IQ2_XS,
        IQ2_XXS => s::IQ2_XXS,
        IQ3_XXS => s::IQ3_XXS,
        _ => s::IQ2_S,
    }
}

/// The registered non-scalar kernels of `type_id` this CPU can run.
fn simd_kernels(type_id: u32) -> Vec<&'static Kernel> {
    kernels_of(type_id).iter().filter(|k| k.backend != "scalar" && (k.available)()).copied().collect()
}

#[cfg(target_arch = "x86_64")]
fn expect_simd() -> bool {
    quant_kernels::x86_64::vnni::has_vnni()
}
#[cfg(not(target_arch = "x86_64"))]
fn expect_simd() -> bool {
    false
}

/// Random weight rows: any bytes are a valid block; the fp16 scale is kept finite (both signs).
fn weights(rng: &mut StdRng, f: &Format, rows: usize, cols: usize) -> Vec<u8> {
    let mut w: Vec<u8> = (0..rows * cols / 256 * f.bytes).map(|_| rng.gen()).collect();
    for blk in w.chunks_exact_mut(f.bytes) {
        let h: u16 = rng.gen_range(0x1400..0x2C00) | if rng.gen_bool(0.2) { 0x8000 } else { 0 };
        blk[..2].copy_from_slice(&h.to_le_bytes());
    }
    w
}

/// Activation rows: from ggml's Q8_K quantizer (half the time), or random bytes with a
/// finite scale (`−128` included) and their block sums. (The sums must be right: llama.cpp's
/// tiled VNNI kernel reads them, its AVX2 one does not, and both agree only then.)
fn acts(rng: &mut StdRng, tokens: usize, cols: usize) -> Vec<u8> {
    let row = cols / 256 * Q8K_BYTES;
    let mut xq = vec![0u8; tokens * row];
    if rng.gen_bool(0.5) {
        let xf: Vec<f32> = (0..tokens * cols)
            .map(|_| rng.gen_range(-2.0f32..2.0) * if rng.gen_ratio(1, 50) { 30.0 } else { 1.0 })
            .collect();
        for (src, dst) in xf.chunks_exact(cols).zip(xq.chunks_exact_mut(row)) {
            quantize_q8_k(src, dst);
        }
    } else {
        rng.fill(&mut xq[..]);
        for blk in xq.chunks_exact_mut(Q8K_BYTES) {
            blk[..4].copy_from_slice(&rng.gen_range(1e-4f32..0.1).to_le_bytes());
            for j in 0..16 {
                let sum: i16 = blk[4 + 16 * j..20 + 16 * j].iter().map(|&v| v as i8 as i16).sum();
                blk[260 + 2 * j..262 + 2 * j].copy_from_slice(&sum.to_le_bytes());
            }
        }
    }
    xq
}

#[allow(clippy::too_many_arguments)]
fn tile<'a>(
    n: usize,
    w: &'a [u8],
    wrow: usize,
    rows: usize,
    x: &'a [u8],
    xrow: usize,
    tokens: usize,
    total: usize,
) -> Tile<'a> {
    Tile {
        n,
        w,
        w_stride: wrow,
        rows,
        x,
        x_stride: xrow,
        tokens,
        batched: 0,
        total_tokens: total,
        total_rows: rows,
        expert: false,
    }
}

/// Every SIMD tile kernel against the scalar twin, output by output, byte for byte, on both
/// paths, with random shapes, strides and token counts (including more than one pass).
#[test]
fn tiles_match_scalar_twin_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(91);
    let mut compared = 0usize;
    for type_id in ALL {
        let f = fmt(type_id);
        for k in simd_kernels(type_id) {
            let tile_fn = k.tile.expect("SIMD lattice kernels have a tile");
            for case in 0..60 {
                let cols = 256 * rng.gen_range(1..=6);
                // past 64 rows: the tiled path's decoded row groups (`SUB_ROWS`)
                let rows = if case % 7 == 0 { rng.gen_range(65..=150) } else { rng.gen_range(1..=21) };
                let tokens = if case % 5 == 0 { rng.gen_range(17..=40) } else { rng.gen_range(1..=16) };
                let total = if case % 2 == 0 { tokens.max(8) } else { rng.gen_range(1..=7) };
                // Strides larger than a row: the kernels must honour them.
                let (wrow, xrow) = (cols / 256 * f.bytes, cols / 256 * Q8K_BYTES);
                let (wpad, xpad) = (rng.gen_range(0..3) * 7, rng.gen_range(0..3) * 5);
                let wb = weights(&mut rng, &f, rows, cols);
                let mut w = vec![0u8; rows * (wrow + wpad)];
                for r in 0..rows {
                    w[r * (wrow + wpad)..][..wrow].copy_from_slice(&wb[r * wrow..][..wrow]);
                }
                let xb = acts(&mut rng, tokens, cols);
                let mut x = vec![0u8; tokens * (xrow + xpad)];
                for t in 0..tokens {
                    x[t * (xrow + xpad)..][..xrow].copy_from_slice(&xb[t * xrow..][..xrow]);
                }
                let ys = rows + 3;
                let mut y = vec![f32::NAN; tokens * ys];
                let tl = tile(cols, &w, wrow + wpad, rows, &x, xrow + xpad, tokens, total);
                tile_fn(&tl, &mut y, ys);
                let path = s::path(&tl);
                assert_eq!(path, if total >= 8 { Path::Tiled } else { Path::VecDot });
                for t in 0..tokens {
                    for r in 0..rows {
                        let want = s::dot_path(&f, path, &wb[r * wrow..][..wrow], &xb[t * xrow..][..xrow]);
                        let got = y[t * ys + r];
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "type {type_id} {} {path:?} cols {cols} rows {rows} tokens {tokens}: y[{t}][{r}] = {got} vs {want}",
                            k.backend
                        );
                        compared += 1;
                    }
                    assert!(y[t * ys + rows..(t + 1) * ys].iter().all(|v| v.is_nan()), "padding written");
                }
            }
        }
    }
    if expect_simd() {
        assert!(compared > 25_000, "only {compared} comparisons");
    }
}

/// The registered `vec_dot` of every backend equals the scalar `vec_dot` byte for byte.
#[test]
fn vec_dots_match_scalar_twin_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(92);
    let mut compared = 0usize;
    for type_id in ALL {
        let f = fmt(type_id);
        let scalar = kernels_of(type_id).iter().find(|k| k.backend == "scalar").expect("scalar twin registered");
        for k in simd_kernels(type_id) {
            for _ in 0..300 {
                let cols = 256 * rng.gen_range(1..=8);
                let w = weights(&mut rng, &f, 1, cols);
                let x = acts(&mut rng, 1, cols);
                let (got, want) = ((k.vec_dot)(cols, &w, &x), (scalar.vec_dot)(cols, &w, &x));
                assert_eq!(got.to_bits(), want.to_bits(), "type {type_id} {} cols {cols}: {got} vs {want}", k.backend);
                compared += 1;
            }
        }
    }
    if expect_simd() {
        assert!(compared >= 1500, "only {compared} comparisons");
    }
}

/// `matmul` (the selected kernel, token-block split for a prompt) and `matmul_rowwise`
/// give, for every output, the twin's bits along the path of the whole product.
#[test]
fn matmul_follows_llama_cpp_paths() {
    let mut rng = StdRng::seed_from_u64(93);
    let pool = Pool::new(2);
    for type_id in ALL {
        let f = fmt(type_id);
        for &(rows, cols, n_tokens) in
            &[(40, 512, 1), (37, 768, 5), (24, 256, 8), (50, 1536, 33), (16, 512, 70), (150, 512, 40)]
        {
            let wb = weights(&mut rng, &f, rows, cols);
            let w = Matrix::new(type_id, &wb, rows, cols).unwrap();
            let x: Vec<f32> = (0..n_tokens * cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
            let xrow = cols / 256 * Q8K_BYTES;
            let mut xq = vec![0u8; n_tokens * xrow];
            for (src, dst) in x.chunks_exact(cols).zip(xq.chunks_exact_mut(xrow)) {
                quantize_q8_k(src, dst);
            }
            let wrow = cols / 256 * f.bytes;
            let mut y = vec![0f32; rows * n_tokens];
            matmul(&pool, &w, &x, n_tokens, &mut y).unwrap();
            let mut yr = vec![0f32; rows * n_tokens];
            matmul_rowwise(&pool, &w, &x, n_tokens, &mut yr).unwrap();
            let path = if n_tokens >= 8 { Path::Tiled } else { Path::VecDot };
            for t in 0..n_tokens {
                for r in 0..rows {
                    let (wr, xr) = (&wb[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                    let want = s::dot_path(&f, path, wr, xr);
                    assert_eq!(y[t * rows + r].to_bits(), want.to_bits(), "type {type_id} matmul [{t}][{r}]");
                    let want1 = s::dot_path(&f, Path::VecDot, wr, xr);
                    assert_eq!(yr[t * rows + r].to_bits(), want1.to_bits(), "type {type_id} rowwise [{t}][{r}]");
                }
            }
        }
    }
}

/// Both paths of the scalar twins compute the product of the dequantized weights and
/// activations (f64 reference, relative to Σ|w·x|), and a changed weight block changes it.
#[test]
fn scalar_twins_compute_the_product() {
    let mut rng = StdRng::seed_from_u64(94);
    let mut changed = 0;
    for type_id in ALL {
        let f = fmt(type_id);
        let traits = ggml_quants::lookup_id(type_id).unwrap();
        for _ in 0..100 {
            let cols = 256 * rng.gen_range(1..=4);
            let w = weights(&mut rng, &f, 1, cols);
            let xf: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
            let mut x = vec![0u8; cols / 256 * Q8K_BYTES];
            quantize_q8_k(&xf, &mut x);
            let wd = traits.dequantize_to_vec(&w).unwrap();
            let xd = ggml_quants::lookup_name("q8_K").unwrap().dequantize_to_vec(&x).unwrap();
            let exact: f64 = wd.iter().zip(&xd).map(|(a, b)| *a as f64 * *b as f64).sum();
            let mag: f64 = wd.iter().zip(&xd).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
            for path in [Path::VecDot, Path::Tiled] {
                let got = s::dot_path(&f, path, &w, &x) as f64;
                assert!((got - exact).abs() <= 1e-5 * mag + 1e-30, "type {type_id} {path:?}: {got} vs {exact}");
            }
            let mut w2 = w.clone();
            w2[2] ^= 0x01; // one grid index bit of the first group
            let (a, b) = (s::dot_path(&f, Path::VecDot, &w, &x), s::dot_path(&f, Path::VecDot, &w2, &x));
            let wd2 = traits.dequantize_to_vec(&w2).unwrap();
            let exact2: f64 = wd2.iter().zip(&xd).map(|(a, b)| *a as f64 * *b as f64).sum();
            if (exact2 - exact).abs() > 1e-4 * mag {
                changed += 1;
                assert_ne!(a.to_bits(), b.to_bits(), "type {type_id}: a changed weight left the dot unchanged");
            }
        }
    }
    assert!(changed > 100, "only {changed} changed products checked");
}

/// On a VNNI machine the VNNI kernel is the one `matmul` picks (unless `GGUF_CPU_FEATURES`
/// caps the level), and every x86-64 SIMD level has a kernel for both types.
#[test]
fn simd_kernel_is_selected() {
    for type_id in ALL {
        let info = quant_kernels::kernel_info(type_id);
        if expect_simd() {
            assert_eq!(info, "avx512vnni", "type {type_id}");
        } else {
            assert_ne!(info, "generic-dequant", "type {type_id}");
        }
        #[cfg(target_arch = "x86_64")]
        for backend in ["scalar", "avx2", "avx512vnni"] {
            assert!(kernels_of(type_id).iter().any(|k| k.backend == backend), "type {type_id}: no {backend} kernel");
        }
    }
}

/// The tiled kernels keep decoded weights per thread between calls: a matrix changed in
/// place (same address, same shape) must not be served from that copy.
#[test]
fn weights_changed_in_place_are_decoded_again() {
    let mut rng = StdRng::seed_from_u64(95);
    for type_id in ALL {
        let f = fmt(type_id);
        for k in simd_kernels(type_id) {
            let (rows, cols, tokens) = (24, 512, 16);
            let (wrow, xrow) = (cols / 256 * f.bytes, cols / 256 * Q8K_BYTES);
            let mut w = weights(&mut rng, &f, rows, cols);
            let x = acts(&mut rng, tokens, cols);
            for round in 0..3 {
                if round > 0 {
                    let at = rng.gen_range(0..w.len());
                    w[at] ^= 0x10;
                }
                let mut y = vec![0f32; tokens * rows];
                let tl = tile(cols, &w, wrow, rows, &x, xrow, tokens, tokens);
                (k.tile.unwrap())(&tl, &mut y, rows);
                for t in 0..tokens {
                    for r in 0..rows {
                        let want = s::dot_path(&f, Path::Tiled, &w[r * wrow..][..wrow], &x[t * xrow..][..xrow]);
                        assert_eq!(
                            y[t * rows + r].to_bits(),
                            want.to_bits(),
                            "type {type_id} {} round {round}",
                            k.backend
                        );
                    }
                }
            }
        }
    }
}
