//! IQ1_S and IQ1_M kernels: every SIMD tile and `vec_dot` bit-identical to the scalar twin
//! on both of llama.cpp's paths (`vec_dot` below 8 tokens, tiled from 8), `matmul` end to
//! end, and a wrong grid index, scale or shift sign detected.

use quant_kernels::registry::{kernels_of, Kernel};
use quant_kernels::scalar::act::quantize_q8_k;
use quant_kernels::scalar::iq1::{self as s, Kind};
use quant_kernels::scalar::iq4::Path;
use quant_kernels::{matmul, Matrix, Pool, Tile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const Q8K_BYTES: usize = 292;
const KINDS: [(Kind, &str); 2] = [(Kind::S, "iq1_s"), (Kind::M, "iq1_m")];

fn type_id(name: &str) -> u32 {
    ggml_quants::lookup_name(name).unwrap().id
}

fn simd_kernels(id: u32) -> Vec<&'static Kernel> {
    kernels_of(id).iter().filter(|k| k.backend != "scalar" && (k.available)()).copied().collect()
}

/// Weight rows: quantized by the reference quantizer with a random importance matrix (half
/// the time), or random bytes (every bit pattern is a valid block) with a finite scale.
fn weights(rng: &mut StdRng, kind: Kind, name: &str, rows: usize, cols: usize) -> Vec<u8> {
    if rng.gen_bool(0.5) {
        let x: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        let im: Vec<f32> = (0..cols).map(|_| rng.gen_range(0.1f32..1.0)).collect();
        return ggml_quants::lookup_name(name).unwrap().quantize_to_vec(&x, cols, Some(&im)).unwrap();
    }
    let bb = kind.bytes();
    let mut w: Vec<u8> = (0..rows * cols / 256 * bb).map(|_| rng.gen()).collect();
    for blk in w.chunks_exact_mut(bb) {
        let d: u16 = rng.gen_range(0x1400u16..0x2C00) | if rng.gen_bool(0.2) { 0x8000 } else { 0 };
        match kind {
            Kind::S => blk[..2].copy_from_slice(&d.to_le_bytes()),
            Kind::M => {
                for k in 0..4 {
                    let at = 48 + 2 * k;
                    let v = u16::from_le_bytes([blk[at], blk[at + 1]]) & 0x0fff | ((d >> (4 * k)) & 0xf) << 12;
                    blk[at..at + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
    w
}

/// Q8_K activation rows from ggml's quantizer; with `wrap`, some bytes set to −128 (which
/// the quantizer never writes, but `sign_epi8` wraps) and the block sums recomputed.
fn acts(rng: &mut StdRng, tokens: usize, cols: usize, wrap: bool) -> (Vec<f32>, Vec<u8>, usize) {
    let xf: Vec<f32> = (0..tokens * cols)
        .map(|_| rng.gen_range(-2.0f32..2.0) * if rng.gen_ratio(1, 50) { 30.0 } else { 1.0 })
        .collect();
    let row = cols / 256 * Q8K_BYTES;
    let mut xq = vec![0u8; tokens * row];
    for (src, dst) in xf.chunks_exact(cols).zip(xq.chunks_exact_mut(row)) {
        quantize_q8_k(src, dst);
        if wrap {
            for blk in dst.chunks_exact_mut(Q8K_BYTES) {
                for _ in 0..8 {
                    blk[4 + rng.gen_range(0..256)] = 0x80;
                }
                for k in 0..16 {
                    let sum: i32 = blk[4 + 16 * k..4 + 16 * k + 16].iter().map(|&v| v as i8 as i32).sum();
                    blk[260 + 2 * k..262 + 2 * k].copy_from_slice(&(sum as i16).to_le_bytes());
                }
            }
        }
    }
    (xf, xq, row)
}

fn path(total_tokens: usize) -> Path {
    if total_tokens >= 8 {
        Path::Tiled
    } else {
        Path::VecDot
    }
}

/// Every SIMD tile and `vec_dot` against the twin, byte for byte, on both paths, with
/// strides larger than a row, row counts off the 4-row groups and untouched padding.
#[test]
fn simd_tiles_are_bit_identical_to_scalar_twins() {
    let mut rng = StdRng::seed_from_u64(31);
    let mut compared = 0usize;
    for (kind, name) in KINDS {
        let id = type_id(name);
        #[cfg(target_arch = "x86_64")]
        if quant_kernels::x86_64::has_avx2() {
            assert!(simd_kernels(id).iter().any(|k| k.backend == "avx2"), "{name}: no AVX2 kernel");
        }
        let bb = kind.bytes();
        for k in simd_kernels(id) {
            for case in 0..32 {
                let nb = rng.gen_range(1..=4);
                let cols = 256 * nb;
                let rows = rng.gen_range(1..=11);
                let tokens = if case % 2 == 0 { rng.gen_range(8..=21) } else { rng.gen_range(1..=7) };
                // A tile may be part of a larger call: the path follows the call.
                let total = if case % 4 == 1 { tokens + 8 } else { tokens };
                let (wrow, xrow) = (nb * bb, nb * Q8K_BYTES);
                let (wpad, xpad) = (rng.gen_range(0..3) * 7, rng.gen_range(0..3) * 5);
                let wb = weights(&mut rng, kind, name, rows, cols);
                let mut w = vec![0u8; rows * (wrow + wpad)];
                for r in 0..rows {
                    w[r * (wrow + wpad)..][..wrow].copy_from_slice(&wb[r * wrow..][..wrow]);
                }
                let (_, xb, _) = acts(&mut rng, tokens, cols, case % 3 == 0);
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
                    total_tokens: total,
                    total_rows: rows,
                    expert: false,
                };
                (k.tile.unwrap())(&tl, &mut y, ys);
                for t in 0..tokens {
                    for r in 0..rows {
                        let (wr, xr) = (&wb[r * wrow..][..wrow], &xb[t * xrow..][..xrow]);
                        let want = s::dot_path(kind, path(total), wr, xr);
                        let got = y[t * ys + r];
                        assert_eq!(got.to_bits(), want.to_bits(), "{} {name} case {case} y[{t}][{r}]", k.backend);
                        if t == 0 {
                            let vd = s::dot_path(kind, Path::VecDot, wr, xr);
                            assert_eq!((k.vec_dot)(cols, wr, xr).to_bits(), vd.to_bits(), "{} vec_dot", k.backend);
                        }
                        compared += 1;
                    }
                    assert!(y[t * ys + rows..(t + 1) * ys].iter().all(|v| v.is_nan()), "padding written");
                }
            }
        }
    }
    if !simd_kernels(type_id("iq1_s")).is_empty() {
        assert!(compared > 2_000, "only {compared} comparisons");
    }
}

/// `matmul` through the registry (whichever kernel this CPU picks, scalar included): every
/// output equal to the twin of its path, with 1..3 threads.
#[test]
fn matmul_is_bit_identical_to_twins() {
    let mut rng = StdRng::seed_from_u64(32);
    let pools: Vec<Pool> = (1..=3).map(Pool::new).collect();
    for (kind, name) in KINDS {
        let bb = kind.bytes();
        for (rows, nb) in [(16usize, 2usize), (13, 1), (40, 3)] {
            let cols = nb * 256;
            let w = weights(&mut rng, kind, name, rows, cols);
            let m = Matrix::new(type_id(name), &w, rows, cols).unwrap();
            let wrow = nb * bb;
            for n_tokens in [1usize, 3, 8, 17, 40] {
                let (xf, xq, xrow) = acts(&mut rng, n_tokens, cols, false);
                for pool in &pools {
                    let mut y = vec![f32::NAN; rows * n_tokens];
                    matmul(pool, &m, &xf, n_tokens, &mut y).unwrap();
                    for t in 0..n_tokens {
                        for r in 0..rows {
                            let want =
                                s::dot_path(kind, path(n_tokens), &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                            assert_eq!(
                                y[t * rows + r].to_bits(),
                                want.to_bits(),
                                "{name} {n_tokens} tokens y[{t}][{r}]"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A kernel that misread a grid index bit, a scale bit or a shift sign is caught: each
/// change moves every backend's output on both paths.
#[test]
fn a_wrong_bit_is_detected() {
    let mut rng = StdRng::seed_from_u64(33);
    for (kind, name) in KINDS {
        let id = type_id(name);
        let bb = kind.bytes();
        let w = weights(&mut rng, kind, name, 1, 512);
        let (_, xq, _) = acts(&mut rng, 1, 512, false);
        // In the second block: a grid index byte, and for IQ1_S the qh word of group 3 (its
        // scale bits 12..14 and shift sign bit 15), for IQ1_M a qh shift sign (bit 3) and a scale bit.
        let flips: &[(usize, u8)] = match kind {
            Kind::S => &[(2 + 13, 0x01), (34 + 7, 0x10), (34 + 7, 0x80)],
            Kind::M => &[(13, 0x01), (32 + 5, 0x08), (48 + 2, 0x02)],
        };
        for &(at, bit) in flips {
            let mut bad = w.clone();
            bad[bb + at] ^= bit;
            for p in [Path::VecDot, Path::Tiled] {
                let want = s::dot_path(kind, p, &w, &xq);
                assert_ne!(s::dot_path(kind, p, &bad, &xq).to_bits(), want.to_bits(), "twin {name} byte {at} {p:?}");
            }
            for k in simd_kernels(id) {
                assert_ne!(
                    (k.vec_dot)(512, &bad, &xq).to_bits(),
                    (k.vec_dot)(512, &w, &xq).to_bits(),
                    "{} {name} byte {at}",
                    k.backend
                );
            }
        }
    }
}
