//! Q1_0, Q2_0 and NVFP4 kernels (× Q8_0): every SIMD `vec_dot` bit-identical to the scalar
//! twin, `matmul` end to end, the twins against an f64 reference, and a wrong bit detected.
//! (The twins against libggml-cpu itself: `scripts/ggml_dots.c` + `examples/ggml_compare.rs`.)

use quant_kernels::registry::{kernels_of, Kernel};
use quant_kernels::scalar::act::{quantize_q8_0, Q8_0_BYTES};
use quant_kernels::scalar::{nvfp4, q1_0, q2_0};
use quant_kernels::{matmul, Matrix, Pool};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// (name, elements per block, bytes per block, twin).
type Twin = fn(usize, &[u8], &[u8]) -> f32;
const TYPES: [(&str, usize, usize, Twin); 3] = [
    ("q1_0", 128, q1_0::Q1_0_BYTES, q1_0::q1_0_q8_0),
    ("q2_0", 64, q2_0::Q2_0_BYTES, q2_0::q2_0_q8_0),
    ("nvfp4", 64, nvfp4::NVFP4_BYTES, nvfp4::nvfp4_q8_0),
];

fn id(name: &str) -> u32 {
    ggml_quants::lookup_name(name).unwrap().id
}

fn simd_kernels(name: &str) -> Vec<&'static Kernel> {
    kernels_of(id(name)).iter().filter(|k| k.backend != "scalar" && (k.available)()).copied().collect()
}

/// Weight rows from the reference quantizer (half the time) or random bytes with sane scales.
fn weights(rng: &mut StdRng, name: &str, bb: usize, rows: usize, cols: usize, qk: usize) -> Vec<u8> {
    if rng.gen_bool(0.5) {
        let x: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        return ggml_quants::lookup_name(name).unwrap().quantize_to_vec(&x, cols, None).unwrap();
    }
    let mut w: Vec<u8> = (0..rows * cols / qk * bb).map(|_| rng.gen()).collect();
    for blk in w.chunks_exact_mut(bb) {
        if name == "nvfp4" {
            for s in &mut blk[..4] {
                *s = rng.gen_range(0x20..0x50);
            }
        } else {
            blk[..2].copy_from_slice(
                &(rng.gen_range(0x1400u16..0x2C00) | if rng.gen_bool(0.2) { 0x8000 } else { 0 }).to_le_bytes(),
            );
        }
    }
    w
}

/// Q8_0 activation rows; with `wrap`, some bytes −128 (never quantized, but the sign tricks wrap).
fn acts(rng: &mut StdRng, tokens: usize, cols: usize, wrap: bool) -> (Vec<f32>, Vec<u8>, usize) {
    let xf: Vec<f32> = (0..tokens * cols).map(|_| rng.gen_range(-2.0f32..2.0)).collect();
    let row = cols / 32 * Q8_0_BYTES;
    let mut xq = vec![0u8; tokens * row];
    for (src, dst) in xf.chunks_exact(cols).zip(xq.chunks_exact_mut(row)) {
        quantize_q8_0(src, dst);
        if wrap {
            for blk in dst.chunks_exact_mut(Q8_0_BYTES) {
                blk[2 + rng.gen_range(0..32)] = 0x80;
            }
        }
    }
    (xf, xq, row)
}

#[test]
fn simd_vec_dots_are_bit_identical_to_scalar_twins() {
    let mut rng = StdRng::seed_from_u64(41);
    for (name, qk, bb, twin) in TYPES {
        #[cfg(target_arch = "x86_64")]
        if quant_kernels::x86_64::has_avx2() {
            assert!(simd_kernels(name).iter().any(|k| k.backend == "avx2"), "{name}: no AVX2 kernel");
        }
        for k in simd_kernels(name) {
            for case in 0..200 {
                let cols = 256 * rng.gen_range(1..=4);
                let w = weights(&mut rng, name, bb, 1, cols, qk);
                let (_, x, _) = acts(&mut rng, 1, cols, case % 2 == 0);
                let (got, want) = ((k.vec_dot)(cols, &w, &x), twin(cols, &w, &x));
                assert_eq!(got.to_bits(), want.to_bits(), "{} {name} case {case}: {got} vs {want}", k.backend);
            }
        }
    }
}

#[test]
fn matmul_is_bit_identical_to_twins() {
    let mut rng = StdRng::seed_from_u64(42);
    for (name, qk, bb, twin) in TYPES {
        for (rows, cols) in [(16usize, 256usize), (13, 512), (40, 768)] {
            let w = weights(&mut rng, name, bb, rows, cols, qk);
            let m = Matrix::new(id(name), &w, rows, cols).unwrap();
            let wrow = cols / qk * bb;
            for n_tokens in [1usize, 5, 17] {
                let (xf, xq, xrow) = acts(&mut rng, n_tokens, cols, false);
                for threads in [1, 3] {
                    let mut y = vec![f32::NAN; rows * n_tokens];
                    matmul(&Pool::new(threads), &m, &xf, n_tokens, &mut y).unwrap();
                    for t in 0..n_tokens {
                        for r in 0..rows {
                            let want = twin(cols, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                            assert_eq!(y[t * rows + r].to_bits(), want.to_bits(), "{name} y[{t}][{r}]");
                        }
                    }
                }
            }
        }
    }
}

/// The twins compute the product (within float rounding of an f64 dot of the dequantized
/// operands), and one flipped code bit moves every backend's result.
#[test]
fn twins_match_dequantized_reference_and_see_a_wrong_bit() {
    let mut rng = StdRng::seed_from_u64(43);
    let act = ggml_quants::lookup_name("q8_0").unwrap();
    for (name, qk, bb, twin) in TYPES {
        let wt = ggml_quants::lookup_name(name).unwrap();
        for _ in 0..20 {
            let cols = 512;
            let w = weights(&mut rng, name, bb, 1, cols, qk);
            let (_, x, _) = acts(&mut rng, 1, cols, false);
            let (wd, xd) = (wt.dequantize_to_vec(&w).unwrap(), act.dequantize_to_vec(&x).unwrap());
            let exact: f64 = wd.iter().zip(&xd).map(|(a, b)| *a as f64 * *b as f64).sum();
            let mag: f64 = wd.iter().zip(&xd).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
            let got = twin(cols, &w, &x) as f64;
            assert!((got - exact).abs() <= 1e-5 * mag + 1e-6, "{name}: {got} vs {exact}");
            // A code bit of the second block (past the scales): wherever it moves the exact
            // product beyond rounding, it moves every backend's result.
            let mut bad = w.clone();
            bad[bb + bb - 3] ^= 0x04;
            let wb = wt.dequantize_to_vec(&bad).unwrap();
            let exact_bad: f64 = wb.iter().zip(&xd).map(|(a, b)| *a as f64 * *b as f64).sum();
            if (exact_bad - exact).abs() > 1e-4 * mag {
                for k in kernels_of(id(name)).iter().filter(|k| (k.available)()) {
                    let (a, b) = ((k.vec_dot)(cols, &bad, &x), (k.vec_dot)(cols, &w, &x));
                    assert_ne!(a.to_bits(), b.to_bits(), "{} {name}: a flipped bit went unseen", k.backend);
                }
            }
        }
    }
}
