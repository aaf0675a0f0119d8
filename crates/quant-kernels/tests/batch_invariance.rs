//! For types whose llama.cpp CPU path is the per-(row, token) `vec_dot` (no repacking on
//! x86), a token's output must not depend on how many tokens share the batch.

use quant_kernels::{matmul, Matrix, Pool};

fn rng(seed: &mut u64) -> f32 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

#[test]
fn vec_dot_types_give_the_same_bits_in_any_batch() {
    let pool = Pool::new(2);
    for name in ["q4_1", "q5_0", "q5_1", "q8_0", "q3_K", "q5_K", "q6_K"] {
        let t = ggml_quants::by_name(name).unwrap();
        let (rows, cols) = (24, 512);
        let mut s = 7u64;
        let w: Vec<f32> = (0..rows * cols).map(|_| rng(&mut s)).collect();
        let wq = t.quantize_to_vec(&w, cols, None).unwrap();
        let m = Matrix::new(t.id, &wq, rows, cols).unwrap();
        for n in [8usize, 9, 16, 21] {
            let x: Vec<f32> = (0..n * cols).map(|_| rng(&mut s)).collect();
            let mut y = vec![0f32; n * rows];
            matmul(&pool, &m, &x, n, &mut y).unwrap();
            for tok in 0..n {
                let mut y1 = vec![0f32; rows];
                matmul(&pool, &m, &x[tok * cols..(tok + 1) * cols], 1, &mut y1).unwrap();
                let yb = &y[tok * rows..(tok + 1) * rows];
                let bad = yb.iter().zip(&y1).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                assert_eq!(bad, 0, "{name}: n={n} token {tok}: {bad} of {rows} outputs differ from n=1");
            }
        }
    }
}
