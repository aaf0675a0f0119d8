//! TQ1_0 and TQ2_0 kernels: every SIMD tile and `vec_dot` bit-identical to the scalar twin,
//! `matmul` end to end, the twins against an f64 reference, and a wrong digit detected.

use quant_kernels::registry::{kernels_of, Kernel};
use quant_kernels::scalar::act::quantize_q8_k;
use quant_kernels::scalar::ternary as s;
use quant_kernels::{matmul, Matrix, Pool, Tile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TQ1_0: u32 = 34;
const TQ2_0: u32 = 35;
/// (type id, block bytes).
const TYPES: [(u32, usize); 2] = [(TQ1_0, s::TQ1_0_BYTES), (TQ2_0, s::TQ2_0_BYTES)];
const Q8K_BYTES: usize = 292;

fn twin(type_id: u32, w: &[u8], x: &[u8]) -> f32 {
    if type_id == TQ1_0 {
        s::tq1_0_q8_k(0, w, x)
    } else {
        s::tq2_0_q8_k(0, w, x)
    }
}

fn simd_kernels(type_id: u32) -> Vec<&'static Kernel> {
    kernels_of(type_id).iter().filter(|k| k.backend != "scalar" && (k.available)()).copied().collect()
}

/// Weight rows: quantized by ggml's reference quantizer (half the time), or random bytes
/// (any TQ1_0 byte is valid; TQ2_0 digits kept in 0..=2) with a finite fp16 scale.
fn weights(rng: &mut StdRng, type_id: u32, rows: usize, cols: usize) -> Vec<u8> {
    let bb = if type_id == TQ1_0 { s::TQ1_0_BYTES } else { s::TQ2_0_BYTES };
    if rng.gen_bool(0.5) {
        let name = ggml_quants::lookup_id(type_id).unwrap().name;
        let x: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        return ggml_quants::lookup_name(name).unwrap().quantize_to_vec(&x, cols, None).unwrap();
    }
    let mut w: Vec<u8> = (0..rows * cols / 256 * bb).map(|_| rng.gen()).collect();
    for blk in w.chunks_exact_mut(bb) {
        if type_id == TQ2_0 {
            for v in &mut blk[..64] {
                *v = (0..4).map(|l| (((*v >> (2 * l)) & 3) % 3) << (2 * l)).sum();
            }
        }
        let h: u16 = rng.gen_range(0x1400..0x2C00) | if rng.gen_bool(0.2) { 0x8000 } else { 0 };
        blk[bb - 2..].copy_from_slice(&h.to_le_bytes());
    }
    w
}

/// Q8_K activation rows from ggml's quantizer, a few outliers.
fn acts(rng: &mut StdRng, tokens: usize, cols: usize) -> (Vec<f32>, Vec<u8>, usize) {
    let xf: Vec<f32> = (0..tokens * cols)
        .map(|_| rng.gen_range(-2.0f32..2.0) * if rng.gen_ratio(1, 50) { 30.0 } else { 1.0 })
        .collect();
    let row = cols / 256 * Q8K_BYTES;
    let mut xq = vec![0u8; tokens * row];
    for (src, dst) in xf.chunks_exact(cols).zip(xq.chunks_exact_mut(row)) {
        quantize_q8_k(src, dst);
    }
    (xf, xq, row)
}

/// Every SIMD tile and `vec_dot` against the twin, byte for byte, with strides larger than
/// a row, 1..40 tokens (more than one token chunk) and untouched output padding.
#[test]
fn simd_tiles_are_bit_identical_to_scalar_twins() {
    let mut rng = StdRng::seed_from_u64(21);
    let mut compared = 0usize;
    for (type_id, bb) in TYPES {
        #[cfg(target_arch = "x86_64")]
        if quant_kernels::x86_64::has_avx2() {
            assert!(simd_kernels(type_id).iter().any(|k| k.backend == "avx2"), "type {type_id}: no AVX2 kernel");
        }
        for k in simd_kernels(type_id) {
            for case in 0..24 {
                let nb = rng.gen_range(1..=5);
                let cols = 256 * nb;
                let rows = rng.gen_range(1..=11);
                let tokens = if case % 4 == 0 { rng.gen_range(17..=40) } else { rng.gen_range(1..=9) };
                let (wrow, xrow) = (nb * bb, nb * Q8K_BYTES);
                let (wpad, xpad) = (rng.gen_range(0..3) * 7, rng.gen_range(0..3) * 5);
                let wb = weights(&mut rng, type_id, rows, cols);
                let mut w = vec![0u8; rows * (wrow + wpad)];
                for r in 0..rows {
                    w[r * (wrow + wpad)..][..wrow].copy_from_slice(&wb[r * wrow..][..wrow]);
                }
                let (_, xb, _) = acts(&mut rng, tokens, cols);
                let mut x = vec![0u8; tokens * (xrow + xpad)];
                for t in 0..tokens {
                    x[t * (xrow + xpad)..][..xrow].copy_from_slice(&xb[t * xrow..][..xrow]);
                }
                let ys = rows + 2;
                let mut y = vec![f32::NAN; tokens * ys];
                let tl = Tile {
                    n: cols,
                    w: &w,
                    w_stride: wrow + wpad,
                    rows,
                    x: &x,
                    x_stride: xrow + xpad,
                    tokens,
                    batched: 0,
                    total_tokens: tokens,
                    total_rows: rows,
                    expert: false,
                };
                (k.tile.unwrap())(&tl, &mut y, ys);
                for t in 0..tokens {
                    for r in 0..rows {
                        let (wr, xr) = (&wb[r * wrow..][..wrow], &xb[t * xrow..][..xrow]);
                        let want = twin(type_id, wr, xr);
                        let got = y[t * ys + r];
                        assert_eq!(got.to_bits(), want.to_bits(), "{} type {type_id} y[{t}][{r}]", k.backend);
                        if t == 0 {
                            assert_eq!((k.vec_dot)(cols, wr, xr).to_bits(), want.to_bits(), "{} vec_dot", k.backend);
                        }
                        compared += 1;
                    }
                    assert!(y[t * ys + rows..(t + 1) * ys].iter().all(|v| v.is_nan()), "padding written");
                }
            }
        }
    }
    if !simd_kernels(TQ1_0).is_empty() {
        assert!(compared > 2_000, "only {compared} comparisons");
    }
}

/// `matmul` through the registry (whichever kernel this CPU picks): every output equal to
/// the twin, with 1..3 threads.
#[test]
fn matmul_is_bit_identical_to_twins() {
    let mut rng = StdRng::seed_from_u64(22);
    let pools: Vec<Pool> = (1..=3).map(Pool::new).collect();
    for (type_id, bb) in TYPES {
        for (rows, nb) in [(16usize, 2usize), (13, 1), (40, 3)] {
            let cols = nb * 256;
            let w = weights(&mut rng, type_id, rows, cols);
            let m = Matrix::new(type_id, &w, rows, cols).unwrap();
            let wrow = nb * bb;
            for n_tokens in [1usize, 3, 8, 17] {
                let (xf, xq, xrow) = acts(&mut rng, n_tokens, cols);
                for pool in &pools {
                    let mut y = vec![f32::NAN; rows * n_tokens];
                    matmul(pool, &m, &xf, n_tokens, &mut y).unwrap();
                    for t in 0..n_tokens {
                        for r in 0..rows {
                            let want = twin(type_id, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                            assert_eq!(y[t * rows + r].to_bits(), want.to_bits(), "type {type_id} y[{t}][{r}]");
                        }
                    }
                }
            }
        }
    }
}

/// The twins compute the product: within float rounding of an f64 dot of the dequantized
/// weights and activations.
#[test]
fn scalar_twins_match_dequantized_reference() {
    let mut rng = StdRng::seed_from_u64(23);
    for (type_id, bb) in TYPES {
        let wt = ggml_quants::lookup_id(type_id).unwrap();
        let act = ggml_quants::lookup_id(15).unwrap();
        for nb in [1usize, 3] {
            let cols = nb * 256;
            let w = weights(&mut rng, type_id, 4, cols);
            let (_, xq, xrow) = acts(&mut rng, 2, cols);
            for r in 0..4 {
                for t in 0..2 {
                    let (wr, xr) = (&w[r * nb * bb..][..nb * bb], &xq[t * xrow..][..xrow]);
                    let wd = wt.dequantize_to_vec(wr).unwrap();
                    let xd = act.dequantize_to_vec(xr).unwrap();
                    let exact: f64 = wd.iter().zip(&xd).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let mag: f64 = wd.iter().zip(&xd).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
                    let got = twin(type_id, wr, xr) as f64;
                    assert!((got - exact).abs() <= 1e-5 * mag + 1e-6, "type {type_id}: {got} vs {exact}");
                }
            }
        }
    }
}

/// A kernel wrong in one digit is caught: changing one weight changes every backend's
/// output (so the comparisons above would see a decoder that misplaced it).
#[test]
fn a_wrong_digit_is_detected() {
    let mut rng = StdRng::seed_from_u64(24);
    for (type_id, bb) in TYPES {
        let w = weights(&mut rng, type_id, 1, 512);
        let (_, xq, _) = acts(&mut rng, 1, 512);
        // A digit byte of the second block: TQ1_0 byte 50 (a qh digit), TQ2_0 byte 40.
        let at = bb + if type_id == TQ1_0 { 50 } else { 40 };
        let mut bad = w.clone();
        bad[at] = if type_id == TQ1_0 { bad[at].wrapping_add(81) } else { bad[at] ^ 0x01 ^ ((bad[at] & 1) << 1) };
        let want = twin(type_id, &w, &xq);
        assert_ne!(twin(type_id, &bad, &xq).to_bits(), want.to_bits(), "twin, type {type_id}");
        for k in simd_kernels(type_id) {
            assert_ne!((k.vec_dot)(512, &bad, &xq).to_bits(), want.to_bits(), "{} type {type_id}", k.backend);
        }
    }
}
