//! Q4_0 on AVX2 in the arithmetic of llama.cpp's AVX2 build (`arch/x86_64/iq4.rs`'s
//! `q4_0_avx2`): its tile (on GGUF rows and on the repacked layout) bit-identical to the
//! scalar twin `scalar::iq4::q4_0_tile` in every regime, `matmul` end to end where it is
//! the kernel chosen (under `GGUF_CPU_FEATURES=avx2`), the two paths rounding differently,
//! and the AVX-512 VNNI kernel giving the same bits as the twin on the repacked path (one
//! arithmetic, llama.cpp's `gemv/gemm_q4_0_8x8_q8_0`, on both ISAs).

use quant_kernels::registry::{kernel_for, kernels_of, Kernel};
use quant_kernels::scalar::act::quantize_q8_0;
use quant_kernels::scalar::iq4::{self as s, Path};
use quant_kernels::{matmul, matmul_expert, Matrix, Pool, Repacked, Tile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const Q4_0: u32 = 2;
const WB: usize = 18;
const XB: usize = 34;

fn kernel(backend: &str) -> Option<&'static Kernel> {
    kernels_of(Q4_0).iter().find(|k| k.backend == backend && (k.available)()).copied()
}

/// Random Q4_0 rows (every nibble, both signs of the scale) or real quantized data.
fn weights(rng: &mut StdRng, rows: usize, cols: usize) -> Vec<u8> {
    if rng.gen_bool(0.5) {
        let x: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        return ggml_quants::lookup_name("q4_0").unwrap().quantize_to_vec(&x, cols, None).unwrap();
    }
    let mut w: Vec<u8> = (0..rows * cols / 32 * WB).map(|_| rng.gen()).collect();
    for blk in w.chunks_exact_mut(WB) {
        let h: u16 = rng.gen_range(0x1400..0x2C00) | if rng.gen_bool(0.2) { 0x8000 } else { 0 };
        blk[..2].copy_from_slice(&h.to_le_bytes());
    }
    w
}

/// Q8_0 activation rows (ggml-cpu's x86 quantizer), a few outliers.
fn acts(rng: &mut StdRng, tokens: usize, cols: usize) -> (Vec<f32>, Vec<u8>, usize) {
    let xf: Vec<f32> = (0..tokens * cols)
        .map(|_| rng.gen_range(-2.0f32..2.0) * if rng.gen_ratio(1, 50) { 30.0 } else { 1.0 })
        .collect();
    let row = cols / 32 * XB;
    let mut xq = vec![0u8; tokens * row];
    for (src, dst) in xf.chunks_exact(cols).zip(xq.chunks_exact_mut(row)) {
        quantize_q8_0(src, dst);
    }
    (xf, xq, row)
}

fn probe(total_rows: usize, total_tokens: usize, expert: bool) -> Tile<'static> {
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
        expert,
    }
}

#[test]
fn paths_follow_llama_cpp() {
    assert_eq!(s::q4_0_path(&probe(576, 1, false)), Path::Repack);
    assert_eq!(s::q4_0_path(&probe(576, 9, true)), Path::Repack);
    assert_eq!(s::q4_0_path(&probe(577, 1, false)), Path::VecDot);
    assert_eq!(s::q4_0_path(&probe(577, 5, false)), Path::VecDot);
}

/// The AVX2 tile (GGUF rows, and the repacked layout in the repacked regime) against the
/// scalar twin's tile and the per-output twin, bit for bit; the vec_dot against the twin's
/// `VecDot`; on an AVX-512 VNNI CPU its q4_0 tile against the twin on the repacked path.
#[test]
fn avx2_tiles_are_bit_identical_to_the_scalar_twin() {
    let Some(avx2) = kernel("avx2") else { return };
    let vnni = kernel("avx512vnni");
    let mut rng = StdRng::seed_from_u64(21);
    let (mut compared, mut repacked, mut vnni_compared) = (0usize, 0usize, 0usize);
    for (i, nb) in [1usize, 2, 3, 5, 18, 19, 48].into_iter().enumerate() {
        let cols = nb * 32;
        let rows = [3usize, 8, 9, 17, 5, 16, 24][i];
        let w = weights(&mut rng, rows, cols);
        let (_, xq, xrow) = acts(&mut rng, 9, cols);
        let wrow = nb * WB;
        for nt in 1..=9 {
            for (total_rows, total_tokens, expert) in
                [(rows, nt, false), (576, nt, false), (577, nt, false), (577, nt.max(2), true), (190, 9, false)]
            {
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
                let path = s::q4_0_path(&tl);
                let mut got = vec![f32::NAN; nt * ys];
                let mut want = vec![f32::NAN; nt * ys];
                (avx2.tile.unwrap())(&tl, &mut got, ys);
                s::q4_0_tile(&tl, &mut want, ys);
                for t in 0..nt {
                    for r in 0..rows {
                        let one = s::q4_0_q8_0_path(path, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                        let (g, e) = (got[t * ys + r], want[t * ys + r]);
                        assert_eq!(
                            g.to_bits(),
                            e.to_bits(),
                            "cols {cols} tokens {nt} {path:?} y[{t}][{r}]: {g:e} vs {e:e}"
                        );
                        assert_eq!(e.to_bits(), one.to_bits(), "scalar tile vs twin {path:?}");
                        compared += 1;
                    }
                    assert!(got[t * ys + rows..(t + 1) * ys].iter().all(|v| v.is_nan()), "padding written");
                }
                if path == Path::Repack && rows.is_multiple_of(8) {
                    let rp = avx2.repack.as_ref().expect("the AVX2 q4_0 kernel has a layout");
                    let packed = (rp.repack)(&w[..rows * wrow], rows, cols);
                    let tp = Tile { w: &packed, ..tl };
                    let mut gotp = vec![f32::NAN; nt * ys];
                    (rp.tile)(&tp, &mut gotp, ys);
                    for t in 0..nt {
                        for r in 0..rows {
                            assert_eq!(
                                gotp[t * ys + r].to_bits(),
                                want[t * ys + r].to_bits(),
                                "{} y[{t}][{r}]",
                                rp.name
                            );
                            repacked += 1;
                        }
                    }
                }
                if let Some(v) = vnni.filter(|_| path == Path::Repack && !expert) {
                    let mut gotv = vec![f32::NAN; nt * ys];
                    (v.tile.unwrap())(&tl, &mut gotv, ys);
                    for t in 0..nt {
                        for r in 0..rows {
                            assert_eq!(gotv[t * ys + r].to_bits(), want[t * ys + r].to_bits(), "vnni y[{t}][{r}]");
                            vnni_compared += 1;
                        }
                    }
                }
            }
        }
        for t in 0..9 {
            for r in 0..rows {
                let (wr, xr) = (&w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                let want = s::q4_0_q8_0_path(Path::VecDot, wr, xr);
                assert_eq!((avx2.vec_dot)(cols, wr, xr).to_bits(), want.to_bits(), "vec_dot");
            }
        }
    }
    assert!(compared > 10_000 && repacked > 1_000, "only {compared} / {repacked} comparisons");
    if vnni.is_some() {
        assert!(vnni_compared > 1_000, "only {vnni_compared} VNNI comparisons");
    }
}

/// On enough random rows the two paths give different bits somewhere, so a kernel on the
/// wrong one fails the tests above (and `verify logits` against llama.cpp's AVX2 build).
#[test]
fn the_paths_round_differently() {
    let mut rng = StdRng::seed_from_u64(22);
    let (cols, rows) = (48 * 32, 64);
    let w = weights(&mut rng, rows, cols);
    let (_, xq, xrow) = acts(&mut rng, 1, cols);
    let wrow = cols / 32 * WB;
    let differ = (0..rows).any(|r| {
        let (wr, xr) = (&w[r * wrow..][..wrow], &xq[..xrow]);
        s::q4_0_q8_0_path(Path::Repack, wr, xr).to_bits() != s::q4_0_q8_0_path(Path::VecDot, wr, xr).to_bits()
    });
    assert!(differ, "repacked and vec_dot arithmetic agree on every row");
}

/// `matmul` / `matmul_expert` on GGUF and on repacked rows, 1..3 threads, bit-identical to
/// the twin along the product's path — wherever the AVX2 kernel is the one chosen.
#[test]
fn matmul_is_bit_identical_to_the_twin_under_the_avx2_cap() {
    if kernel_for(Q4_0).map(|k| k.backend) != Some("avx2") {
        return;
    }
    let mut rng = StdRng::seed_from_u64(23);
    let pools: Vec<Pool> = (1..=3).map(Pool::new).collect();
    for (rows, nb) in [(16usize, 3usize), (24, 2), (13, 2), (40, 18)] {
        let cols = nb * 32;
        let w = weights(&mut rng, rows, cols);
        let m = Matrix::new(Q4_0, &w, rows, cols).unwrap();
        let rp = Repacked::new(&m);
        assert_eq!(rp.is_some(), rows % 8 == 0, "repacked iff 8k rows");
        if let Some(rp) = &rp {
            assert_eq!(rp.backend(), "avx2-q4_0x8");
        }
        let wrow = nb * WB;
        for n_tokens in [1usize, 2, 3, 5, 8, 9, 17, 33] {
            let (xf, xq, xrow) = acts(&mut rng, n_tokens, cols);
            let path = s::q4_0_path(&probe(rows, n_tokens, false));
            for (mi, mat) in [Some(m), rp.as_ref().map(|r| r.matrix())].into_iter().flatten().enumerate() {
                for expert in [false, true] {
                    for pool in &pools {
                        let mut y = vec![f32::NAN; rows * n_tokens];
                        if expert {
                            matmul_expert(pool, &mat, &xf, n_tokens, &mut y).unwrap();
                        } else {
                            matmul(pool, &mat, &xf, n_tokens, &mut y).unwrap();
                        }
                        for t in 0..n_tokens {
                            for r in 0..rows {
                                let want = s::q4_0_q8_0_path(path, &w[r * wrow..][..wrow], &xq[t * xrow..][..xrow]);
                                assert_eq!(
                                    y[t * rows + r].to_bits(),
                                    want.to_bits(),
                                    "{rows}x{cols} matrix {mi} tokens {n_tokens} expert {expert} y[{t}][{r}]"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
