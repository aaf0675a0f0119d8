//! `matmul_rowwise`: every token's outputs bit-identical to a one-token `matmul`, whatever
//! the batch (the public path; `src/matmul.rs` tests each kernel backend).

use quant_kernels::{matmul, matmul_rowwise, Matrix, Pool, Repacked};

fn rng(seed: &mut u64) -> f32 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// Compares `matmul_rowwise` of `n` tokens with `n` separate one-token `matmul` calls.
fn check(name: &str, m: &Matrix<'_>, x: &[f32], n: usize, pool: &Pool) {
    let (rows, cols) = (m.rows(), m.cols());
    let mut y = vec![f32::NAN; n * rows];
    matmul_rowwise(pool, m, &x[..n * cols], n, &mut y).unwrap();
    for t in 0..n {
        let mut y1 = vec![f32::NAN; rows];
        matmul(pool, m, &x[t * cols..(t + 1) * cols], 1, &mut y1).unwrap();
        let bad = y[t * rows..(t + 1) * rows].iter().zip(&y1).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(bad, 0, "{name} {rows}x{cols}: token {t} of {n}: {bad} of {rows} outputs differ");
    }
}

#[test]
fn rowwise_equals_one_token_matmul() {
    for threads in [1, 2] {
        let pool = Pool::new(threads);
        for name in [
            "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K",
            "iq4_nl", "iq4_xs", "mxfp4", "tq1_0", "iq2_xxs",
        ] {
            let t = ggml_quants::by_name(name).unwrap();
            for (rows, cols) in [(7usize, 256usize), (64, 512), (24, 256)] {
                let mut s = 5u64 + rows as u64;
                let w: Vec<f32> = (0..rows * cols).map(|_| rng(&mut s)).collect();
                let ones = vec![1f32; cols];
                let wq =
                    t.quantize_to_vec(&w, cols, None).or_else(|_| t.quantize_to_vec(&w, cols, Some(&ones))).unwrap();
                let m = Matrix::new(t.id, &wq, rows, cols).unwrap();
                let x: Vec<f32> = (0..17 * cols).map(|_| rng(&mut s)).collect();
                let rep = Repacked::new(&m);
                for n in [1usize, 2, 4, 5, 8, 17] {
                    check(name, &m, &x, n, &pool);
                    if let Some(r) = &rep {
                        check(&format!("{name} repacked"), &r.matrix(), &x, n, &pool);
                    }
                }
            }
        }
    }
}

#[test]
fn rowwise_checks_lengths() {
    let pool = Pool::new(1);
    let t = ggml_quants::by_name("q8_0").unwrap();
    let wq = t.quantize_to_vec(&[0.5f32; 64], 32, None).unwrap();
    let m = Matrix::new(t.id, &wq, 2, 32).unwrap();
    let mut y = vec![0f32; 4];
    assert!(matmul_rowwise(&pool, &m, &[0f32; 63], 2, &mut y).is_err());
    assert!(matmul_rowwise(&pool, &m, &[0f32; 64], 2, &mut y[..3]).is_err());
    assert!(matmul_rowwise(&pool, &m, &[], 0, &mut []).is_ok());
}

/// Every token count 1..=17 (the SIMD kernels run tokens in pairs and groups of 8, so
/// odd counts and tails leave half-used vectors), one- and two-block rows, row counts
/// that are not multiples of 8: each token's outputs equal its one-token product.
#[test]
fn rowwise_every_token_count() {
    for threads in [1, 2] {
        let pool = Pool::new(threads);
        for name in ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"] {
            let t = ggml_quants::by_name(name).unwrap();
            for (rows, blocks) in [(9usize, 1usize), (3, 2), (16, 2)] {
                let cols = blocks * t.block_size;
                let mut s = 11u64 + rows as u64 * 131 + blocks as u64;
                let w: Vec<f32> = (0..rows * cols).map(|_| rng(&mut s)).collect();
                let wq = t.quantize_to_vec(&w, cols, None).unwrap();
                let m = Matrix::new(t.id, &wq, rows, cols).unwrap();
                let x: Vec<f32> = (0..17 * cols).map(|_| rng(&mut s) * 4.0).collect();
                let rep = Repacked::new(&m);
                for n in 1..=17 {
                    check(name, &m, &x, n, &pool);
                    if let Some(r) = &rep {
                        check(&format!("{name} repacked"), &r.matrix(), &x, n, &pool);
                    }
                }
            }
        }
    }
}

/// `matmul_rowwise_group`: each matrix's outputs bit-identical to its own one-token
/// `matmul_rowwise`, for groups of mixed types, repacked layouts, row counts that end
/// inside a claim, and the fallbacks (a row count not a multiple of 16, no kernel).
#[test]
fn grouped_one_token_products_equal_their_own() {
    let cols = 512;
    let mut s = 11u64;
    let names = ["q4_0", "q8_0", "q4_K", "q6_K", "iq4_nl", "iq2_xxs", "f16", "q5_1"];
    let mut data = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let t = ggml_quants::by_name(name).unwrap();
        let rows = [48usize, 16, 160, 32, 64, 80, 16, 7][i];
        let w: Vec<f32> = (0..rows * cols).map(|_| rng(&mut s)).collect();
        let ones = vec![1f32; cols];
        let wq = t.quantize_to_vec(&w, cols, None).or_else(|_| t.quantize_to_vec(&w, cols, Some(&ones))).unwrap();
        data.push((t.id, rows, wq));
    }
    let mats: Vec<Matrix<'_>> = data.iter().map(|(id, rows, wq)| Matrix::new(*id, wq, *rows, cols).unwrap()).collect();
    let reps: Vec<Option<Repacked>> = mats.iter().map(Repacked::new).collect();
    let views: Vec<Matrix<'_>> =
        mats.iter().zip(&reps).map(|(m, r)| r.as_ref().map(|r| r.matrix()).unwrap_or(*m)).collect();
    let x: Vec<f32> = (0..cols).map(|_| rng(&mut s)).collect();
    for threads in [1, 2, 3] {
        let pool = Pool::new(threads);
        // every contiguous group of two or more (the last one's 7 rows: a fallback)
        for a in 0..views.len() {
            for b in a + 2..=views.len() {
                for set in [&mats[a..b], &views[a..b]] {
                    let mut outs: Vec<Vec<f32>> = set.iter().map(|m| vec![f32::NAN; m.rows()]).collect();
                    let mut ys: Vec<&mut [f32]> = outs.iter_mut().map(|v| &mut v[..]).collect();
                    quant_kernels::matmul_rowwise_group(&pool, set, &x, &mut ys).unwrap();
                    for (m, y) in set.iter().zip(&outs) {
                        let mut want = vec![f32::NAN; m.rows()];
                        matmul_rowwise(&pool, m, &x, 1, &mut want).unwrap();
                        let bad = y.iter().zip(&want).filter(|(p, q)| p.to_bits() != q.to_bits()).count();
                        assert_eq!(bad, 0, "group {a}..{b}, {threads} threads, {} rows: {bad} differ", m.rows());
                    }
                }
            }
        }
        // lengths are checked
        let mut short = [0f32; 3];
        let mut ok = vec![0f32; mats[1].rows()];
        let mut ys: Vec<&mut [f32]> = vec![&mut ok[..], &mut short[..]];
        assert!(quant_kernels::matmul_rowwise_group(&pool, &mats[1..3], &x, &mut ys).is_err());
        assert!(quant_kernels::matmul_rowwise_group(&pool, &mats[1..3], &x, &mut ys[..1]).is_err());
    }
}
