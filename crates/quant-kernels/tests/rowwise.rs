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
