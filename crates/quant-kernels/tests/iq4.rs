//! IQ4_NL, MXFP4 and IQ4_XS kernels: every SIMD tile bit-identical to its scalar twin in
//! every llama.cpp regime (vec_dot, repacked, tinyBLAS, tiled), `matmul` end to end, the
//! scalar twins against an f64 reference, and checks that the comparisons can fail.

use quant_kernels::registry::{kernels_of, Kernel};
use quant_kernels::scalar::act::{quantize_q8_0, quantize_q8_k};
use quant_kernels::scalar::iq4::{self as s, Path};
use quant_kernels::{matmul, matmul_expert, Matrix, Pool, Repacked, Tile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const IQ4_NL: u32 = 20;
const IQ4_XS: u32 = 23;
const MXFP4: u32 = 39;

/// (type id, block elements, block bytes, activation block bytes).
const TYPES: [(u32, usize, usize, usize); 3] = [(IQ4_NL, 32, 18, 34), (MXFP4, 32, 17, 34), (IQ4_XS, 256, 136, 292)];

fn kernel(type_id: u32, backend: &str) -> Option<&'static Kernel> {
    kernels_of(type_id).iter().find(|k| k.backend == backend && (k.available)()).copied()
}

/// The registered non-scalar kernels of `type_id` this CPU can run (AVX2 and AVX-512 VNNI
/// on an AVX-512 machine, AVX2 alone under `GGUF_CPU_FEATURES=avx2`).
fn simd_kernels(type_id: u32) -> Vec<&'static Kernel> {
    kernels_of(type_id).iter().filter(|k| k.backend != "scalar" && (k.available)()).copied().collect()
}

fn has_simd() -> bool {
    !simd_kernels(IQ4_NL).is_empty()
}

/// Every type has a kernel on each SIMD level this CPU allows.
#[test]
fn every_simd_level_has_kernels() {
    #[cfg(target_arch = "x86_64")]
    for (type_id, ..) in TYPES {
        let has = |b: &str| kernel(type_id, b).is_some();
        assert_eq!(has("avx2"), quant_kernels::x86_64::has_avx2(), "type {type_id} avx2");
        assert_eq!(has("avx512vnni"), quant_kernels::x86_64::vnni::has_vnni(), "type {type_id} avx512vnni");
    }
}

/// Random weight rows: random codes and scales in a sane range (every code, both signs of
/// the fp16 scale), or real quantized data.
fn weights(rng: &mut StdRng, type_id: u32, rows: usize, cols: usize) -> Vec<u8> {
    let (_, qk, bb, _) = TYPES.iter().copied().find(|t| t.0 == type_id).unwrap();
    if rng.gen_bool(0.5) {
        let name = ggml_quants::lookup_id(type_id).unwrap().name;
        let x: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        return ggml_quants::lookup_name(name).unwrap().quantize_to_vec(&x, cols, None).unwrap();
    }
    let mut w: Vec<u8> = (0..rows * cols / qk * bb).map(|_| rng.gen()).collect();
    for blk in w.chunks_exact_mut(bb) {
        if type_id == MXFP4 {
            blk[0] = rng.gen_range(110..135);
        } else {
            let h: u16 = rng.gen_range(0x1400..0x2C00) | if rng.gen_bool(0.2) { 0x8000 } else { 0 };
            blk[..2].copy_from_slice(&h.to_le_bytes());
        }
    }
    w
}

/// Quantized activation rows (ggml-cpu's x86 quantizers), a few outliers.
fn acts(rng: &mut StdRng, type_id: u32, tokens: usize, cols: usize) -> (Vec<f32>, Vec<u8>, usize) {
    let (_, qk, _, ab) = TYPES.iter().copied().find(|t| t.0 == type_id).unwrap();
    let xf: Vec<f32> = (0..tokens * cols)
        .map(|_| rng.gen_range(-2.0f32..2.0) * if rng.gen_ratio(1, 50) { 30.0 } else { 1.0 })
        .collect();
    let row = cols / qk * ab;
    let mut xq = vec![0u8; tokens * row];
    for (src, dst) in xf.chunks_exact(cols).zip(xq.chunks_exact_mut(row)) {
        if type_id == IQ4_XS {
            quantize_q8_k(src, dst)
        } else {
            quantize_q8_0(src, dst)
        }
    }
    (xf, xq, row)
}

/// The scalar twin of one output along `path`.
fn twin(type_id: u32, path: Path, w: &[u8], x: &[u8]) -> f32 {
    match type_id {
        IQ4_NL => s::iq4_nl_q8_0_path(path, w, x),
        MXFP4 => s::mxfp4_q8_0_path(path, w, x),
        _ => s::iq4_xs_q8_k_path(path, w, x),
    }
}

fn path_of(type_id: u32, t: &Tile<'_>) -> Path {
    match type_id {
        IQ4_NL => s::iq4_nl_path(t),
        MXFP4 => s::mxfp4_path(t),
        _ => s::iq4_xs_path(t),
    }
}

/// The regimes a tile can be part of: (total rows, total tokens, expert).
fn regimes(rows: usize, tokens: usize) -> Vec<(usize, usize, bool)> {
    vec![
        (rows, tokens, false),
        (576, tokens, false),
        (576, tokens.max(8), false),
        (577, tokens, false),
        (577, tokens.max(2), true),
        (190, tokens.max(9), false),
    ]
}

/// Every SIMD tile against the scalar twin's tile and the per-output twin, bit for bit,
/// over random blocks, row lengths (odd and even block counts), 1..9 tokens and every
/// regime; output padding untouched.
#[test]
fn simd_tiles_are_bit_identical_to_scalar_twins() {
    if !has_simd() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(7);
    let mut compared = 0usize;
    let mut paths_seen = std::collections::BTreeSet::new();
    let mut repacked_seen = std::collections::BTreeSet::new();
    let mut backends_seen = std::collections::BTreeSet::new();
    for (type_id, qk, bb, _) in TYPES {
        for simd in simd_kernels(type_id) {
            let scalar = kernel(type_id, "scalar").unwrap();
            assert_eq!(simd.vec_dot_type, scalar.vec_dot_type);
            let blocks: &[usize] = if qk == 32 { &[1, 2, 3, 5, 18, 19, 48] } else { &[1, 2, 3, 6] };
            for (i, &nb) in blocks.iter().enumerate() {
                let cols = nb * qk;
                // Below, at and above the 8-row groups of the repacked and tiled kernels.
                let rows = [3usize, 8, 9, 17, 5, 16, 11][(i + type_id as usize) % 7];
                let w = weights(&mut rng, type_id, rows, cols);
                let (_, xq, xrow) = acts(&mut rng, type_id, 9, cols);
                let wrow = nb * bb;
                for nt in 1..=9 {
                    for (total_rows, total_tokens, expert) in regimes(rows, nt) {
                        let ys = rows + 2;
                        let tl = Tile {
                            n: cols,
                            w: &w,
                            w_stride: wrow,
                            rows,
                            x: &xq[..nt * xrow],
                            x_stride: xrow,
                            tokens: nt,
                            batched: if expert { 0 } else { nt - nt % 4 },
                            total_tokens,
                            total_rows,
                            expert,
                        };
                        let path = path_of(type_id, &tl);
                        paths_seen.insert((type_id, format!("{path:?}")));
                        let mut got = vec![f32::NAN; nt * ys];
                        let mut want = vec![f32::NAN; nt * ys];
                        (simd.tile.unwrap())(&tl, &mut got, ys);
                        (scalar.tile.unwrap())(&tl, &mut want, ys);
                        for t in 0..nt {
                            for r in 0..rows {
                                let one = twin(type_id, path, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                                let (g, e) = (got[t * ys + r], want[t * ys + r]);
                                assert_eq!(
                                g.to_bits(),
                                e.to_bits(),
                                "{} type {type_id} cols {cols} tokens {nt} {path:?} y[{t}][{r}]: simd {g:e} scalar {e:e}",
                                simd.backend
                            );
                                assert_eq!(e.to_bits(), one.to_bits(), "scalar tile vs twin, type {type_id} {path:?}");
                                compared += 1;
                            }
                            assert!(got[t * ys + rows..(t + 1) * ys].iter().all(|v| v.is_nan()), "padding written");
                        }
                        // The kernel's repacked layout (whole 8-row groups), in a repacked regime.
                        if let Some(rp) =
                            simd.repack.as_ref().filter(|_| path == Path::Repack && rows.is_multiple_of(8))
                        {
                            let packed = (rp.repack)(&w[..rows * wrow], rows, cols);
                            let tp = Tile { w: &packed, ..tl };
                            let mut gotp = vec![f32::NAN; nt * ys];
                            (rp.tile)(&tp, &mut gotp, ys);
                            for t in 0..nt {
                                for r in 0..rows {
                                    let (g, e) = (gotp[t * ys + r], want[t * ys + r]);
                                    assert_eq!(
                                        g.to_bits(),
                                        e.to_bits(),
                                        "{} {} type {type_id} y[{t}][{r}]",
                                        simd.backend,
                                        rp.name
                                    );
                                    compared += 1;
                                }
                            }
                            repacked_seen.insert((type_id, simd.backend));
                        }
                    }
                }
                // vec_dot: llama.cpp's one-token, not-repacked arithmetic.
                for t in 0..9 {
                    for r in 0..rows {
                        let (wr, xr) = (&w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                        let want = twin(type_id, Path::VecDot, wr, xr);
                        assert_eq!((simd.vec_dot)(cols, wr, xr).to_bits(), want.to_bits(), "vec_dot type {type_id}");
                        assert_eq!((scalar.vec_dot)(cols, wr, xr).to_bits(), want.to_bits(), "scalar vec_dot");
                    }
                }
            }
            backends_seen.insert(simd.backend);
        }
    }
    // Every regime of every type was exercised.
    let expect = [
        (IQ4_NL, "VecDot"),
        (IQ4_NL, "Repack"),
        (IQ4_NL, "TinyBlas"),
        (MXFP4, "VecDot"),
        (MXFP4, "Repack"),
        (IQ4_XS, "VecDot"),
        (IQ4_XS, "Tiled"),
    ];
    for (ty, p) in expect {
        assert!(paths_seen.contains(&(ty, p.to_string())), "type {ty} path {p} never tested");
    }
    assert!(compared > 10_000, "only {compared} comparisons");
    for b in &backends_seen {
        for ty in [IQ4_NL, MXFP4] {
            assert!(repacked_seen.contains(&(ty, *b)), "{b}: type {ty} repacked tile never tested");
        }
    }
}

/// The paths differ in their float rounding: on enough random rows each pair of paths
/// gives different bits somewhere, so a kernel that took the wrong one would fail the
/// bit-identity tests (here and against llama.cpp).
#[test]
fn regimes_round_differently() {
    let mut rng = StdRng::seed_from_u64(8);
    for (type_id, paths) in [
        (IQ4_NL, &[Path::VecDot, Path::Repack, Path::TinyBlas][..]),
        (MXFP4, &[Path::VecDot, Path::Repack][..]),
        (IQ4_XS, &[Path::VecDot, Path::Tiled][..]),
    ] {
        let qk = if type_id == IQ4_XS { 256 } else { 32 };
        let cols = qk * 6;
        let w = weights(&mut rng, type_id, 64, cols);
        let (_, xq, xrow) = acts(&mut rng, type_id, 1, cols);
        let wrow = w.len() / 64;
        for (i, &a) in paths.iter().enumerate() {
            for &b in &paths[i + 1..] {
                let differ = (0..64).any(|r| {
                    twin(type_id, a, &w[r * wrow..][..wrow], &xq[..xrow]).to_bits()
                        != twin(type_id, b, &w[r * wrow..][..wrow], &xq[..xrow]).to_bits()
                });
                assert!(differ, "type {type_id}: {a:?} and {b:?} never differ");
            }
        }
    }
}

/// The paths llama.cpp takes (x86 AVX2+ build): IQ4_NL and MXFP4 repacked when the row
/// count is a multiple of 8; otherwise IQ4_NL goes through tinyBLAS for 2+ tokens (not in
/// expert products); IQ4_XS is tiled from 8 tokens.
#[test]
fn paths_follow_llama_cpp() {
    let t = |total_rows, total_tokens, expert| Tile {
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
        expert,
    };
    assert_eq!(s::iq4_nl_path(&t(576, 1, false)), Path::Repack);
    assert_eq!(s::iq4_nl_path(&t(576, 7, true)), Path::Repack);
    assert_eq!(s::iq4_nl_path(&t(577, 1, false)), Path::VecDot);
    assert_eq!(s::iq4_nl_path(&t(577, 2, false)), Path::TinyBlas);
    assert_eq!(s::iq4_nl_path(&t(577, 9, true)), Path::VecDot);
    assert_eq!(s::mxfp4_path(&t(2880, 3, true)), Path::Repack);
    assert_eq!(s::mxfp4_path(&t(2881, 30, false)), Path::VecDot);
    assert_eq!(s::iq4_xs_path(&t(576, 7, false)), Path::VecDot);
    assert_eq!(s::iq4_xs_path(&t(576, 8, false)), Path::Tiled);
    assert_eq!(s::iq4_xs_path(&t(577, 8, true)), Path::Tiled);
}

/// `matmul` / `matmul_expert` through the registry: every output bit-identical to the
/// scalar twin along the regime of the whole product, with 1..3 threads, token counts
/// that take both work splits.
#[test]
fn matmul_is_bit_identical_to_twins() {
    let mut rng = StdRng::seed_from_u64(9);
    let pools: Vec<Pool> = (1..=3).map(Pool::new).collect();
    for (type_id, qk, bb, _) in TYPES {
        for (rows, nb) in [(16usize, 3usize), (24, 2), (13, 2), (40, 1)] {
            let cols = nb * qk;
            let w = weights(&mut rng, type_id, rows, cols);
            let m = Matrix::new(type_id, &w, rows, cols).unwrap();
            let wrow = nb * bb;
            for n_tokens in [1usize, 2, 3, 5, 8, 9, 17, 33] {
                let (xf, xq, xrow) = acts(&mut rng, type_id, n_tokens, cols);
                for expert in [false, true] {
                    let probe = Tile {
                        n: cols,
                        w: &[],
                        w_stride: 0,
                        rows: 0,
                        x: &[],
                        x_stride: 0,
                        tokens: 0,
                        batched: 0,
                        total_tokens: n_tokens,
                        total_rows: rows,
                        expert,
                    };
                    let path = path_of(type_id, &probe);
                    for pool in &pools {
                        let mut y = vec![f32::NAN; rows * n_tokens];
                        if expert {
                            matmul_expert(pool, &m, &xf, n_tokens, &mut y).unwrap();
                        } else {
                            matmul(pool, &m, &xf, n_tokens, &mut y).unwrap();
                        }
                        for t in 0..n_tokens {
                            for r in 0..rows {
                                let want = twin(type_id, path, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                                let got = y[t * rows + r];
                                assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "type {type_id} rows {rows} cols {cols} tokens {n_tokens} expert {expert} \
                                     threads {} {path:?} y[{t}][{r}]: {got:e} vs {want:e}",
                                    pool.n_threads()
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The scalar twins compute the product: within float rounding of an f64 dot of the
/// dequantized weights and activations.
#[test]
fn scalar_twins_match_dequantized_reference() {
    let mut rng = StdRng::seed_from_u64(10);
    for (type_id, qk, bb, _) in TYPES {
        let wt = ggml_quants::lookup_id(type_id).unwrap();
        let act = ggml_quants::lookup_id(if type_id == IQ4_XS { 15 } else { 8 }).unwrap();
        for nb in [1usize, 3, 4] {
            let cols = nb * qk;
            let w = weights(&mut rng, type_id, 8, cols);
            let (_, xq, xrow) = acts(&mut rng, type_id, 3, cols);
            let wrow = nb * bb;
            for r in 0..8 {
                for t in 0..3 {
                    let (wr, xr) = (&w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                    let wd = wt.dequantize_to_vec(wr).unwrap();
                    let xd = act.dequantize_to_vec(xr).unwrap();
                    let exact: f64 = wd.iter().zip(&xd).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let mag: f64 = wd.iter().zip(&xd).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
                    let paths: &[Path] = match type_id {
                        IQ4_NL => &[Path::VecDot, Path::Repack, Path::TinyBlas],
                        MXFP4 => &[Path::VecDot, Path::Repack],
                        _ => &[Path::VecDot, Path::Tiled],
                    };
                    for &p in paths {
                        let got = twin(type_id, p, wr, xr) as f64;
                        assert!(
                            (got - exact).abs() <= 1e-5 * mag + 1e-6,
                            "type {type_id} cols {cols} {p:?}: {got} vs {exact} (magnitude {mag})"
                        );
                    }
                }
            }
        }
    }
}

/// A kernel that is wrong in one code is caught: flipping one nibble of one weight
/// changes the output (the comparisons above would see it).
#[test]
fn a_wrong_code_is_detected() {
    let mut rng = StdRng::seed_from_u64(11);
    for (type_id, qk, bb, _) in TYPES {
        let cols = 2 * qk;
        let w = weights(&mut rng, type_id, 1, cols);
        let (_, xq, _) = acts(&mut rng, type_id, 1, cols);
        let mut bad = w.clone();
        // A code byte in the second block (past the scales).
        bad[bb + bb - 3] ^= 0x01;
        let paths: &[Path] = match type_id {
            IQ4_NL => &[Path::VecDot, Path::Repack, Path::TinyBlas],
            MXFP4 => &[Path::VecDot, Path::Repack],
            _ => &[Path::VecDot, Path::Tiled],
        };
        for &p in paths {
            assert_ne!(twin(type_id, p, &w, &xq).to_bits(), twin(type_id, p, &bad, &xq).to_bits(), "type {type_id}");
        }
        for k in simd_kernels(type_id) {
            assert_ne!((k.vec_dot)(cols, &bad, &xq).to_bits(), twin(type_id, Path::VecDot, &w, &xq).to_bits());
        }
    }
}

/// IQ4_NL and MXFP4 matrices repacked at load time (row count a multiple of 8, as llama.cpp
/// repacks them): every output of `matmul` / `matmul_expert` bit-identical to the scalar
/// twin's repacked path (and so to the matrix used as stored); other shapes stay as stored.
#[test]
fn repacked_matrices_are_bit_identical_to_twins() {
    let mut rng = StdRng::seed_from_u64(12);
    let pool = Pool::new(2);
    let mut compared = 0usize;
    for (type_id, qk, bb, _) in TYPES {
        if type_id == IQ4_XS {
            let w = weights(&mut rng, type_id, 8, 256);
            assert!(Repacked::new(&Matrix::new(type_id, &w, 8, 256).unwrap()).is_none(), "iq4_xs is never repacked");
            continue;
        }
        let w = weights(&mut rng, type_id, 12, 64);
        assert!(Repacked::new(&Matrix::new(type_id, &w, 12, 64).unwrap()).is_none(), "12 rows are not repacked");
        for (rows, nb) in [(8usize, 1usize), (16, 3), (40, 18), (136, 2)] {
            let cols = nb * qk;
            let w = weights(&mut rng, type_id, rows, cols);
            let m = Matrix::new(type_id, &w, rows, cols).unwrap();
            let Some(rp) = Repacked::new(&m) else {
                assert!(!has_simd(), "a SIMD CPU without the {type_id} repacker");
                return;
            };
            assert!(rp.backend().ends_with("x8"), "repacked by {}", rp.backend());
            let mr = rp.matrix();
            let wrow = nb * bb;
            for n_tokens in [1usize, 2, 3, 4, 7, 9, 16, 21] {
                let (xf, xq, xrow) = acts(&mut rng, type_id, n_tokens, cols);
                for expert in [false, true] {
                    let mut y = vec![f32::NAN; rows * n_tokens];
                    if expert {
                        matmul_expert(&pool, &mr, &xf, n_tokens, &mut y).unwrap();
                    } else {
                        matmul(&pool, &mr, &xf, n_tokens, &mut y).unwrap();
                    }
                    for t in 0..n_tokens {
                        for r in 0..rows {
                            let want = twin(type_id, Path::Repack, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                            let got = y[t * rows + r];
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "repacked type {type_id} {rows}x{cols} tokens {n_tokens} expert {expert} y[{t}][{r}]"
                            );
                            compared += 1;
                        }
                    }
                }
            }
        }
    }
    if has_simd() {
        assert!(compared > 20_000, "only {compared} comparisons");
    }
}
