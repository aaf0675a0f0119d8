//! The AVX2 K-quant tiles (`arch/x86_64/kquant_avx2.rs`): bit-identical to their scalar
//! twins (`scalar::ktiled`) on the tiled and the q4_K repacked paths (gemv and 4-token
//! gemm), to the AVX2 `vec_dot` on its path, `matmul` end to end under the AVX2 cap, the
//! twins against an f64 reference, and the paths rounding differently.

use quant_kernels::registry::{kernel_for, kernels_of, Kernel};
use quant_kernels::scalar::act::quantize_q8_k;
use quant_kernels::scalar::iq4::Path;
use quant_kernels::scalar::ktiled::{self as s, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K};
use quant_kernels::{matmul, matmul_expert, Matrix, Pool, Tile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TYPES: [u32; 5] = [Q2_K, Q3_K, Q4_K, Q5_K, Q6_K];
const XB: usize = 292;

fn avx2(type_id: u32) -> Option<&'static Kernel> {
    kernels_of(type_id).iter().find(|k| k.backend == "avx2" && (k.available)()).copied()
}

/// Real quantized rows (ggml-quants' quantizer) or random bytes with sane fp16 factors.
fn weights(rng: &mut StdRng, type_id: u32, rows: usize, cols: usize) -> Vec<u8> {
    let tr = ggml_quants::lookup_id(type_id).unwrap();
    if rng.gen_bool(0.5) {
        let x: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        return tr.quantize_to_vec(&x, cols, None).unwrap();
    }
    let wb = s::block_bytes(type_id).unwrap();
    let mut w: Vec<u8> = (0..rows * cols / 256 * wb).map(|_| rng.gen()).collect();
    let at: &[usize] = match type_id {
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q4_K | Q5_K => &[0, 2],
        _ => &[208],
    };
    for blk in w.chunks_exact_mut(wb) {
        for &o in at {
            let h: u16 = rng.gen_range(0x1400..0x2800) | if rng.gen_bool(0.2) { 0x8000 } else { 0 };
            blk[o..o + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
    w
}

fn acts(rng: &mut StdRng, tokens: usize, cols: usize) -> (Vec<f32>, Vec<u8>, usize) {
    let xf: Vec<f32> = (0..tokens * cols)
        .map(|_| rng.gen_range(-2.0f32..2.0) * if rng.gen_ratio(1, 50) { 30.0 } else { 1.0 })
        .collect();
    let row = cols / 256 * XB;
    let mut xq = vec![0u8; tokens * row];
    for (src, dst) in xf.chunks_exact(cols).zip(xq.chunks_exact_mut(row)) {
        quantize_q8_k(src, dst);
    }
    (xf, xq, row)
}

fn probe(total_rows: usize, total_tokens: usize) -> Tile<'static> {
    Tile {
        n: 0,
        w: &[],
        w_stride: 0,
        rows: 0,
        x: &[],
        x_stride: 0,
        tokens: 0,
        batched: 0,
        total_tokens,
        total_rows,
        expert: false,
    }
}

#[test]
fn paths_follow_llama_cpps_avx2_build() {
    assert_eq!(s::k_path(Q4_K, &probe(576, 1)), Path::Repack);
    assert_eq!(s::k_path(Q4_K, &probe(576, 64)), Path::Repack);
    assert_eq!(s::k_path(Q4_K, &probe(577, 7)), Path::VecDot);
    assert_eq!(s::k_path(Q4_K, &probe(577, 8)), Path::Tiled);
    for ty in [Q2_K, Q3_K, Q5_K, Q6_K] {
        assert_eq!(s::k_path(ty, &probe(576, 7)), Path::VecDot);
        assert_eq!(s::k_path(ty, &probe(576, 8)), Path::Tiled);
    }
}

/// Every AVX2 tile against the twin (tiled, repacked) or the AVX2 `vec_dot`, bit for bit,
/// over 1..9 tokens, every regime, odd row counts; output padding untouched.
#[test]
fn avx2_tiles_are_bit_identical_to_their_twins() {
    let mut rng = StdRng::seed_from_u64(31);
    let mut seen = std::collections::BTreeSet::new();
    let mut compared = 0usize;
    for ty in TYPES {
        let Some(k) = avx2(ty) else { return };
        let wb = s::block_bytes(ty).unwrap();
        for (nb, rows) in [(1usize, 3usize), (2, 8), (3, 9), (1, 17)] {
            let cols = nb * 256;
            let w = weights(&mut rng, ty, rows, cols);
            let (_, xq, xrow) = acts(&mut rng, 9, cols);
            let wrow = nb * wb;
            for nt in 1..=9 {
                for (total_rows, total_tokens) in [(rows, nt), (576, nt), (577, nt), (577, nt.max(8)), (576, 9)] {
                    for batched in [nt - nt % 4, 0] {
                        let ys = rows + 2;
                        let tl = Tile {
                            n: cols,
                            w: &w,
                            w_stride: wrow,
                            rows,
                            x: &xq[..nt * xrow],
                            x_stride: xrow,
                            tokens: nt,
                            batched,
                            total_tokens,
                            total_rows,
                            expert: false,
                        };
                        let path = s::k_path(ty, &tl);
                        seen.insert((ty, format!("{path:?}"), batched > 0 && path == Path::Repack));
                        let mut got = vec![f32::NAN; nt * ys];
                        (k.tile.unwrap())(&tl, &mut got, ys);
                        let mut want = vec![f32::NAN; nt * ys];
                        if path == Path::VecDot {
                            for t in 0..nt {
                                for r in 0..rows {
                                    want[t * ys + r] =
                                        (k.vec_dot)(cols, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                                }
                            }
                        } else {
                            s::k_tile(ty, &tl, &mut want, ys);
                        }
                        for t in 0..nt {
                            for r in 0..rows {
                                let (g, e) = (got[t * ys + r], want[t * ys + r]);
                                assert_eq!(
                                    g.to_bits(),
                                    e.to_bits(),
                                    "type {ty} cols {cols} tokens {nt} batched {batched} {path:?} y[{t}][{r}]: {g:e} vs {e:e}"
                                );
                                compared += 1;
                            }
                            assert!(got[t * ys + rows..(t + 1) * ys].iter().all(|v| v.is_nan()), "padding written");
                        }
                    }
                }
            }
        }
    }
    for ty in TYPES {
        assert!(seen.contains(&(ty, "Tiled".into(), false)), "type {ty}: tiled never tested");
        assert!(seen.contains(&(ty, "VecDot".into(), false)), "type {ty}: vec_dot never tested");
    }
    assert!(seen.contains(&(Q4_K, "Repack".into(), true)) && seen.contains(&(Q4_K, "Repack".into(), false)));
    assert!(compared > 10_000, "only {compared} comparisons");
}

/// The twins compute the product: within float rounding of an f64 dot of ggml's
/// dequantized weights and activations, on every path.
#[test]
fn twins_match_the_dequantized_reference() {
    let mut rng = StdRng::seed_from_u64(32);
    for ty in TYPES {
        let tr = ggml_quants::lookup_id(ty).unwrap();
        let cols = 3 * 256;
        let w = weights(&mut rng, ty, 4, cols);
        let (_, xq, xrow) = acts(&mut rng, 2, cols);
        let q8k = ggml_quants::lookup_name("q8_K").unwrap();
        let wrow = w.len() / 4;
        for r in 0..4 {
            let mut wf = vec![0f32; cols];
            tr.dequantize(&w[r * wrow..][..wrow], &mut wf).unwrap();
            for t in 0..2 {
                let mut xf = vec![0f32; cols];
                q8k.dequantize(&xq[t * xrow..][..xrow], &mut xf).unwrap();
                let want: f64 = wf.iter().zip(&xf).map(|(a, b)| *a as f64 * *b as f64).sum();
                let mag: f64 = wf.iter().zip(&xf).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
                let paths: &[(Path, bool)] = if ty == Q4_K {
                    &[(Path::Tiled, false), (Path::Repack, false), (Path::Repack, true)]
                } else {
                    &[(Path::Tiled, false)]
                };
                for &(p, b) in paths {
                    let got = s::k_dot_path(ty, p, b, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]) as f64;
                    assert!((got - want).abs() <= 1e-5 * mag + 1e-6, "type {ty} {p:?} {b}: {got} vs {want}");
                }
            }
        }
    }
}

/// The paths give different bits on some rows (so a kernel on the wrong one fails above).
#[test]
fn the_paths_round_differently() {
    let mut rng = StdRng::seed_from_u64(33);
    let cols = 8 * 256;
    let w = weights(&mut rng, Q4_K, 32, cols);
    let (_, xq, xrow) = acts(&mut rng, 1, cols);
    let wrow = w.len() / 32;
    let rows = |p: Path, b: bool| -> Vec<u32> {
        (0..32).map(|r| s::k_dot_path(Q4_K, p, b, &w[r * wrow..][..wrow], &xq[..xrow]).to_bits()).collect()
    };
    let (tiled, gemv, gemm) = (rows(Path::Tiled, false), rows(Path::Repack, false), rows(Path::Repack, true));
    assert!(tiled != gemv && gemv != gemm && tiled != gemm, "two q4_K paths agree on every row");
}

/// `matmul` / `matmul_expert` where the AVX2 kernels are the ones chosen: every output as
/// the path of the whole product gives it (the first `n − n % 4` tokens batched on q4_K's
/// repacked path, none for experts), 1..3 threads, both work splits.
#[test]
fn matmul_follows_the_products_path_under_the_avx2_cap() {
    let mut rng = StdRng::seed_from_u64(34);
    let pools: Vec<Pool> = (1..=3).map(Pool::new).collect();
    for ty in TYPES {
        if kernel_for(ty).map(|k| k.backend) != Some("avx2") {
            return;
        }
        let k = avx2(ty).unwrap();
        for (rows, nb) in [(16usize, 2usize), (13, 1)] {
            let cols = nb * 256;
            let w = weights(&mut rng, ty, rows, cols);
            let m = Matrix::new(ty, &w, rows, cols).unwrap();
            let wrow = w.len() / rows;
            for n_tokens in [1usize, 3, 5, 8, 9, 17] {
                let (xf, xq, xrow) = acts(&mut rng, n_tokens, cols);
                let path = s::k_path(ty, &probe(rows, n_tokens));
                for expert in [false, true] {
                    for pool in &pools {
                        let mut y = vec![f32::NAN; rows * n_tokens];
                        if expert {
                            matmul_expert(pool, &m, &xf, n_tokens, &mut y).unwrap();
                        } else {
                            matmul(pool, &m, &xf, n_tokens, &mut y).unwrap();
                        }
                        let batched = if expert { 0 } else { n_tokens - n_tokens % 4 };
                        for t in 0..n_tokens {
                            for r in 0..rows {
                                let (wr, xr) = (&w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                                let want = match path {
                                    Path::VecDot => (k.vec_dot)(cols, wr, xr),
                                    p => s::k_dot_path(ty, p, t < batched, wr, xr),
                                };
                                assert_eq!(
                                    y[t * rows + r].to_bits(),
                                    want.to_bits(),
                                    "type {ty} {rows}x{cols} tokens {n_tokens} expert {expert} {path:?} y[{t}][{r}]"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// ggml's AVX2 `vec_dot` is what an AVX-512 build runs for one token too, so on a VNNI CPU
/// the AVX2 kernels' `vec_dot` agrees bit for bit with the VNNI tile's one-token q5_K /
/// q6_K arithmetic (mirrored independently; q4_K's one-token VNNI path is the repacked
/// gemv, q2_K/q3_K's calls the AVX2 kernel). Catches e.g. an uncontracted `summs += d·x`
/// where GCC emits an fma.
#[test]
fn vec_dots_agree_with_the_vnni_one_token_kernels() {
    let mut rng = StdRng::seed_from_u64(35);
    for ty in [Q5_K, Q6_K] {
        let (Some(a), Some(v)) =
            (avx2(ty), kernels_of(ty).iter().find(|k| k.backend == "avx512vnni" && (k.available)()))
        else {
            return;
        };
        // q6_K: four rows at a time (`q6_k_one`), the leftover rows one by one
        for (nb, rows) in [(6usize, 24usize), (1, 4), (3, 27), (2, 2), (9, 13)] {
            let cols = nb * 256;
            let w = weights(&mut rng, ty, rows, cols);
            let (_, xq, xrow) = acts(&mut rng, 1, cols);
            let wrow = w.len() / rows;
            let tl = Tile { n: cols, w: &w, w_stride: wrow, rows, x: &xq, x_stride: xrow, tokens: 1, ..probe(rows, 1) };
            let mut yv = vec![0f32; rows];
            (v.tile.unwrap())(&tl, &mut yv, rows);
            for r in 0..rows {
                let got = (a.vec_dot)(cols, &w[r * wrow..][..wrow], &xq[..xrow]);
                assert_eq!(
                    got.to_bits(),
                    yv[r].to_bits(),
                    "type {ty} rows {rows} row {r}: avx2 {got:e} vnni {:e}",
                    yv[r]
                );
                if ty == Q6_K {
                    let twin = s::q6_k_vec_dot(&w[r * wrow..][..wrow], &xq[..xrow]);
                    assert_eq!(twin.to_bits(), yv[r].to_bits(), "q6_K rows {rows} row {r}: twin {twin:e}");
                }
            }
        }
    }
}

/// The AVX-512 VNNI q2_K and q4_K tiles on weights llama.cpp repacks (rows a multiple of
/// 8): the one-token gemv and the 4-token gemm arithmetic (`scalar::ktiled`'s `Repack`
/// twin) for every token count, through the one-token (q4_K: four rows at a time, the
/// rest one by one), the few-token and the 16-token paths.
#[test]
fn vnni_q2_k_and_q4_k_on_repacked_rows_are_bit_identical_to_their_twins() {
    for (ty, wb) in [(Q2_K, 84), (Q4_K, 144)] {
        vnni_repacked_is_bit_identical(ty, wb);
    }
}

fn vnni_repacked_is_bit_identical(ty: u32, wb: usize) {
    let Some(k) = kernels_of(ty).iter().find(|k| k.backend == "avx512vnni" && (k.available)()).copied() else {
        eprintln!("skipped: no AVX-512 VNNI here");
        return;
    };
    let mut rng = StdRng::seed_from_u64(82);
    let mut compared = 0usize;
    // 65 blocks: a longer row after shorter ones (the q4_K one-token kernel's per-thread layout grows)
    for (nb, rows) in [(1usize, 8usize), (2, 16), (3, 13), (1, 40), (8, 7), (4, 1), (65, 8)] {
        let cols = nb * 256;
        let w = weights(&mut rng, ty, rows, cols);
        let wrow = nb * wb;
        for nt in [1usize, 2, 3, 4, 5, 7, 8, 9, 16, 19, 33, 64] {
            let (_, xq, xrow) = acts(&mut rng, nt, cols);
            let batched = if nt == 1 { 0 } else { nt - nt % 4 };
            let ys = rows + 2;
            let tl = Tile {
                n: cols,
                w: &w,
                w_stride: wrow,
                rows,
                x: &xq,
                x_stride: xrow,
                tokens: nt,
                batched,
                ..probe(576, nt)
            };
            let mut got = vec![f32::NAN; nt * ys];
            (k.tile.unwrap())(&tl, &mut got, ys);
            for t in 0..nt {
                for r in 0..rows {
                    let want =
                        s::k_dot_path(ty, Path::Repack, t < batched, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                    let g = got[t * ys + r];
                    assert_eq!(
                        g.to_bits(),
                        want.to_bits(),
                        "type {ty} cols {cols} tokens {nt} y[{t}][{r}]: {g:e} vs {want:e}"
                    );
                    compared += 1;
                }
                assert!(got[t * ys + rows..(t + 1) * ys].iter().all(|v| v.is_nan()), "padding written");
            }
        }
    }
    assert!(compared > 5_000, "{compared}");
}
