//! The AVX2 tiles of q4_1, q5_0, q5_1 and q8_0 (`arch/x86_64/legacy_avx2.rs`): bit-identical
//! per output to the AVX2 `vec_dot` and to the scalar twin (`scalar::legacy`) for any
//! number of rows and tokens, `matmul` end to end under the AVX2 cap, the AVX2 `vec_dot`
//! against the VNNI one-token kernels (the same ggml C code), the twin against an f64
//! reference, and other float orders giving other bits (so a kernel that took one fails).

use quant_kernels::registry::{kernel_for, kernels_of, Kernel};
use quant_kernels::scalar::act::{quantize_q8_0, quantize_q8_1};
use quant_kernels::scalar::legacy::{self as s, Legacy};
use quant_kernels::{matmul, matmul_rowwise, Matrix, Pool, Tile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TYPES: [u32; 4] = [3, 6, 7, 8];

fn kernel(type_id: u32, backend: &str) -> Option<&'static Kernel> {
    kernels_of(type_id).iter().find(|k| k.backend == backend && (k.available)()).copied()
}

/// Real quantized rows (ggml-quants' quantizer) or random bytes with sane fp16 factors.
fn weights(rng: &mut StdRng, f: &Legacy, type_id: u32, rows: usize, cols: usize) -> Vec<u8> {
    if rng.gen_bool(0.5) {
        let tr = ggml_quants::lookup_id(type_id).unwrap();
        let x: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0f32..1.0) + 0.3).collect();
        return tr.quantize_to_vec(&x, cols, None).unwrap();
    }
    let mut w: Vec<u8> = (0..rows * cols / 32 * f.wb).map(|_| rng.gen()).collect();
    let scales: &[usize] = if f.has_min { &[0, 2] } else { &[0] };
    for blk in w.chunks_exact_mut(f.wb) {
        for &o in scales {
            let h: u16 = rng.gen_range(0x1400..0x2c00) | if rng.gen_bool(0.3) { 0x8000 } else { 0 };
            blk[o..o + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
    w
}

/// Activations (a few outliers) and their Q8_0 / Q8_1 rows as ggml-cpu's x86 quantizer
/// writes them.
fn acts(rng: &mut StdRng, f: &Legacy, tokens: usize, cols: usize) -> (Vec<f32>, Vec<u8>, usize) {
    let xf: Vec<f32> = (0..tokens * cols)
        .map(|_| rng.gen_range(-2.0f32..2.0) * if rng.gen_ratio(1, 40) { 25.0 } else { 1.0 })
        .collect();
    let row = cols / 32 * f.xb;
    let mut xq = vec![0u8; tokens * row];
    for (src, dst) in xf.chunks_exact(cols).zip(xq.chunks_exact_mut(row)) {
        if f.has_min {
            quantize_q8_1(src, dst)
        } else {
            quantize_q8_0(src, dst)
        }
    }
    (xf, xq, row)
}

fn tile<'a>(cols: usize, w: &'a [u8], wrow: usize, rows: usize, x: &'a [u8], xrow: usize, nt: usize) -> Tile<'a> {
    Tile {
        n: cols,
        w,
        w_stride: wrow,
        rows,
        x,
        x_stride: xrow,
        tokens: nt,
        batched: nt - nt % 4,
        total_tokens: nt,
        total_rows: rows,
        expert: false,
    }
}

/// Every AVX2 tile against the AVX2 `vec_dot` and the twin, bit for bit, over 1..=19
/// tokens (one, several and partial 8-token passes) and row counts that are not multiples
/// of anything; output padding untouched.
#[test]
fn avx2_tiles_are_bit_identical_to_vec_dot_and_twin() {
    let mut rng = StdRng::seed_from_u64(91);
    let mut compared = 0usize;
    for ty in TYPES {
        let Some(k) = kernel(ty, "avx2") else { return };
        let f = s::format(ty).unwrap();
        for (nb, rows) in [(1usize, 1usize), (2, 3), (3, 7), (7, 9), (18, 5)] {
            let cols = nb * 32;
            let w = weights(&mut rng, f, ty, rows, cols);
            let wrow = nb * f.wb;
            let (_, xq, xrow) = acts(&mut rng, f, 19, cols);
            for nt in (1..=11).chain([16, 17, 19]) {
                let ys = rows + 3;
                let tl = tile(cols, &w, wrow, rows, &xq[..nt * xrow], xrow, nt);
                let mut got = vec![f32::NAN; nt * ys];
                (k.tile.expect("avx2 legacy kernels have a tile"))(&tl, &mut got, ys);
                for t in 0..nt {
                    for r in 0..rows {
                        let (wr, xr) = (&w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                        let (g, v, e) = (got[t * ys + r], (k.vec_dot)(cols, wr, xr), s::dot(f, wr, xr));
                        assert_eq!(
                            g.to_bits(),
                            v.to_bits(),
                            "{} {rows}x{cols} tokens {nt} y[{t}][{r}]: tile {g:e} vec_dot {v:e}",
                            f.name
                        );
                        assert_eq!(
                            g.to_bits(),
                            e.to_bits(),
                            "{} {rows}x{cols} tokens {nt} y[{t}][{r}]: tile {g:e} twin {e:e}",
                            f.name
                        );
                        compared += 1;
                    }
                    assert!(got[t * ys + rows..(t + 1) * ys].iter().all(|v| v.is_nan()), "padding written");
                }
            }
        }
    }
    assert!(compared > 5_000, "only {compared} comparisons");
}

/// `matmul` and `matmul_rowwise` where the AVX2 kernels are the ones chosen
/// (`GGUF_CPU_FEATURES=avx2`): every output equals the twin's, whatever the token count,
/// the threads and the work split.
#[test]
fn matmul_is_the_twin_under_the_avx2_cap() {
    let mut rng = StdRng::seed_from_u64(92);
    let pools: Vec<Pool> = (1..=3).map(Pool::new).collect();
    for ty in TYPES {
        if kernel_for(ty).map(|k| k.backend) != Some("avx2") {
            return;
        }
        let f = s::format(ty).unwrap();
        for (rows, nb) in [(40usize, 3usize), (13, 2)] {
            let cols = nb * 32;
            let w = weights(&mut rng, f, ty, rows, cols);
            let m = Matrix::new(ty, &w, rows, cols).unwrap();
            let wrow = w.len() / rows;
            for n_tokens in [1usize, 2, 7, 9, 16, 33] {
                let (xf, xq, xrow) = acts(&mut rng, f, n_tokens, cols);
                for pool in &pools {
                    for rowwise in [false, true] {
                        let mut y = vec![f32::NAN; rows * n_tokens];
                        if rowwise {
                            matmul_rowwise(pool, &m, &xf, n_tokens, &mut y).unwrap();
                        } else {
                            matmul(pool, &m, &xf, n_tokens, &mut y).unwrap();
                        }
                        for t in 0..n_tokens {
                            for r in 0..rows {
                                let want = s::dot(f, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                                assert_eq!(
                                    y[t * rows + r].to_bits(),
                                    want.to_bits(),
                                    "{} {rows}x{cols} tokens {n_tokens} rowwise {rowwise} y[{t}][{r}]",
                                    f.name
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// ggml's AVX2 `vec_dot` of these types is also what its AVX-512 build runs (the same C
/// code), which the VNNI tiles mirror independently (other integer instructions, the same
/// lanes and float order): on a VNNI CPU the two agree bit for bit, for one token and for
/// batches.
#[test]
fn vec_dots_agree_with_the_vnni_kernels() {
    let mut rng = StdRng::seed_from_u64(93);
    for ty in TYPES {
        let (Some(a), Some(v)) = (kernel(ty, "avx2"), kernel(ty, "avx512vnni")) else { return };
        let f = s::format(ty).unwrap();
        let (rows, cols) = (24, 24 * 32);
        let w = weights(&mut rng, f, ty, rows, cols);
        let wrow = w.len() / rows;
        for nt in [1usize, 5] {
            let (_, xq, xrow) = acts(&mut rng, f, nt, cols);
            let tl = Tile { batched: 0, ..tile(cols, &w, wrow, rows, &xq, xrow, nt) };
            let mut yv = vec![0f32; rows * nt];
            (v.tile.unwrap())(&tl, &mut yv, rows);
            let mut ya = vec![0f32; rows * nt];
            (a.tile.unwrap())(&tl, &mut ya, rows);
            for t in 0..nt {
                for r in 0..rows {
                    let got = (a.vec_dot)(cols, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                    let (yv, ya) = (yv[t * rows + r], ya[t * rows + r]);
                    assert_eq!(got.to_bits(), yv.to_bits(), "{} y[{t}][{r}]: avx2 {got:e} vnni {yv:e}", f.name);
                    assert_eq!(ya.to_bits(), yv.to_bits(), "{} y[{t}][{r}]: avx2 tile {ya:e} vnni {yv:e}", f.name);
                }
            }
        }
    }
}

/// The twin computes the product: within float rounding of an f64 dot of ggml's
/// dequantized weights and activations.
#[test]
fn twin_matches_the_dequantized_reference() {
    let mut rng = StdRng::seed_from_u64(94);
    for ty in TYPES {
        let f = s::format(ty).unwrap();
        let tr = ggml_quants::lookup_id(ty).unwrap();
        let act = ggml_quants::lookup_name(if f.has_min { "q8_1" } else { "q8_0" }).unwrap();
        let cols = 9 * 32;
        let w = weights(&mut rng, f, ty, 4, cols);
        let (_, xq, xrow) = acts(&mut rng, f, 3, cols);
        let wrow = w.len() / 4;
        for r in 0..4 {
            let mut wf = vec![0f32; cols];
            tr.dequantize(&w[r * wrow..][..wrow], &mut wf).unwrap();
            for t in 0..3 {
                let xr = &xq[t * xrow..][..xrow];
                let mut xf = vec![0f32; cols];
                act.dequantize(xr, &mut xf).unwrap();
                // Q8_1's `s` is `d·Σq` rounded to fp16; the twin uses it as ggml does.
                let (mut want, mut mag, mut min_mag) = (0f64, 0f64, 0f64);
                for ib in 0..cols / 32 {
                    let b = &w[r * wrow + ib * f.wb..][..f.wb];
                    let y = &xr[ib * f.xb..][..f.xb];
                    let f16 = |p: &[u8], at: usize| half::f16::from_le_bytes([p[at], p[at + 1]]).to_f64();
                    let d = f16(b, 0) * f16(y, 0);
                    for e in 0..32 {
                        let v = d * ((f.value)(b, e) as f64) * (y[f.xq + e] as i8 as f64);
                        want += v;
                        mag += v.abs();
                    }
                    if f.has_min {
                        want += f16(b, 2) * f16(y, 2);
                        min_mag += (f16(b, 2) * f16(y, 2)).abs();
                    }
                }
                // The same product from the dequantized rows (checks `value`), up to the
                // fp16 rounding of `s`.
                let deq: f64 = wf.iter().zip(&xf).map(|(a, b)| *a as f64 * *b as f64).sum();
                let tol = 1e-5 * (mag + min_mag) + 1e-3 * min_mag + 1e-6;
                assert!((deq - want).abs() <= tol, "{} value decoding: {deq} vs {want}", f.name);
                let got = s::dot(f, &w[r * wrow..][..wrow], xr) as f64;
                assert!(
                    (got - want).abs() <= 1e-5 * (mag + min_mag) + 1e-6,
                    "{} row {r} token {t}: {got} vs {want}",
                    f.name
                );
            }
        }
    }
}

/// Other float orders give other bits on some rows — ggml's generic `vec_dot` (one scalar
/// sum per block, the scalar backend), and whole-block integer sums with one fma per
/// block (the repacked kernels' order) — so the bit-for-bit tests above fail for a kernel
/// that took one of them. (`summs` fused or not gives the same bits: `m·s` is exact.)
#[test]
fn other_orders_round_differently() {
    let mut rng = StdRng::seed_from_u64(95);
    for ty in TYPES {
        let f = s::format(ty).unwrap();
        let (rows, cols) = (64, 16 * 32);
        let w = weights(&mut rng, f, ty, rows, cols);
        let (_, xq, xrow) = acts(&mut rng, f, 1, cols);
        let wrow = w.len() / rows;
        let generic = kernel(ty, "scalar").unwrap().vec_dot;
        let f16 = |p: &[u8], at: usize| half::f16::from_le_bytes([p[at], p[at + 1]]).to_f32();
        let per_block = |wr: &[u8], xr: &[u8]| {
            let (mut acc, mut summs) = (0f32, 0f32);
            for ib in 0..cols / 32 {
                let (b, y) = (&wr[ib * f.wb..][..f.wb], &xr[ib * f.xb..][..f.xb]);
                let l: i32 = s::lanes(f, b, y).iter().sum();
                acc = (l as f32).mul_add(f16(b, 0) * f16(y, 0), acc);
                if f.has_min {
                    summs = f16(b, 2).mul_add(f16(y, 2), summs);
                }
            }
            if f.has_min {
                acc + summs
            } else {
                acc
            }
        };
        let (mut vs_generic, mut vs_block, mut fused) = (0, 0, 0);
        for r in 0..rows {
            let (wr, xr) = (&w[r * wrow..][..wrow], &xq[..xrow]);
            let want = s::dot(f, wr, xr).to_bits();
            vs_generic += (generic(cols, wr, xr).to_bits() != want) as usize;
            vs_block += (per_block(wr, xr).to_bits() != want) as usize;
            // The fp16 products are exact in f32.
            for ib in 0..cols / 32 {
                let (b, y) = (&wr[ib * f.wb..][..f.wb], &xr[ib * f.xb..][..f.xb]);
                let (p, q) = (f16(b, 0), f16(y, 0));
                fused += ((p as f64 * q as f64) != (p * q) as f64) as usize;
            }
        }
        assert!(vs_generic > 0, "{}: ggml's generic order agrees on every row", f.name);
        assert!(vs_block > 0, "{}: whole-block sums agree on every row", f.name);
        assert_eq!(fused, 0, "{}: an fp16 product rounded in f32", f.name);
    }
}
