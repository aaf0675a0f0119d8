//! llama.cpp's CPU arithmetic for a token's output depends on the batch only through the
//! path ggml-cpu picks for the whole product (`vec_dot`, repacked 4-token kernels, tiled
//! K-quant kernels from 8 tokens); within one path it must not depend on the batch.

use quant_kernels::{matmul, Matrix, Pool};

fn rng(seed: &mut u64) -> f32 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// `y` of `n` tokens through `matmul`.
fn run(m: &Matrix<'_>, x: &[f32], n: usize, pool: &Pool) -> Vec<f32> {
    let mut y = vec![0f32; n * m.rows()];
    matmul(pool, m, x, n, &mut y).unwrap();
    y
}

/// Token `tok`'s outputs from a batch of `n` against those from a batch of `n_ref`
/// (the same leading tokens): bit-identical.
#[allow(clippy::too_many_arguments)]
fn same_bits(name: &str, m: &Matrix<'_>, x: &[f32], cols: usize, n: usize, n_ref: usize, pool: &Pool) {
    let rows = m.rows();
    let y = run(m, &x[..n * cols], n, pool);
    let y_ref = run(m, &x[..n_ref * cols], n_ref, pool);
    for tok in 0..n.min(n_ref) {
        let (a, b) = (&y[tok * rows..(tok + 1) * rows], &y_ref[tok * rows..(tok + 1) * rows]);
        let bad = a.iter().zip(b).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(bad, 0, "{name}: token {tok}: {bad} of {rows} outputs differ between n={n} and n={n_ref}");
    }
}

fn matrix(name: &str, rows: usize, cols: usize, s: &mut u64) -> (u32, Vec<u8>) {
    let t = ggml_quants::by_name(name).unwrap();
    let w: Vec<f32> = (0..rows * cols).map(|_| rng(s)).collect();
    (t.id, t.quantize_to_vec(&w, cols, None).unwrap())
}

#[test]
fn vec_dot_types_give_the_same_bits_in_any_batch() {
    let pool = Pool::new(2);
    // 27 rows: a tail past the kernels' 4-row passes; 360 rows of 512 q8_0 columns: more
    // than one L2 row chunk of a 64-token tile; 70 tokens: two such tiles.
    for name in ["q4_1", "q5_0", "q5_1", "q8_0"] {
        for (rows, cols) in [(27, 512), (360, 512)] {
            let mut s = 7u64;
            let (id, wq) = matrix(name, rows, cols, &mut s);
            let m = Matrix::new(id, &wq, rows, cols).unwrap();
            let x: Vec<f32> = (0..70 * cols).map(|_| rng(&mut s)).collect();
            for tok in 0..70 {
                same_bits(name, &m, &x[tok * cols..], cols, 1, 1, &pool);
            }
            for n in [4usize, 6, 8, 9, 16, 21, 70] {
                same_bits(name, &m, &x, cols, n, 1, &pool);
            }
        }
    }
}

/// ggml-cpu runs K-quant weights it has not repacked through `vec_dot` below 8 tokens and
/// through its tiled kernels from 8 tokens on: within each regime a token's outputs must
/// not depend on the batch size (nor on how the batch is split into tiles).
#[test]
fn k_types_give_the_same_bits_within_each_regime() {
    let pool = Pool::new(2);
    // 20 rows: not a multiple of 8, so q2_K/q4_K are not repacked either.
    for name in ["q2_K", "q3_K", "q4_K", "q5_K", "q6_K"] {
        let (rows, cols) = (20, 512);
        let mut s = 11u64;
        let (id, wq) = matrix(name, rows, cols, &mut s);
        let m = Matrix::new(id, &wq, rows, cols).unwrap();
        let x: Vec<f32> = (0..37 * cols).map(|_| rng(&mut s)).collect();
        if name != "q4_K" {
            // (q4_K follows llama.cpp's repacked 4-token kernels below 8 tokens.)
            for n in [2usize, 3, 5, 7] {
                same_bits(name, &m, &x, cols, n, 1, &pool);
            }
        }
        for n in [9usize, 16, 21, 37] {
            same_bits(name, &m, &x, cols, n, 8, &pool);
        }
        // The two regimes do differ (the tiled sum rounds per 256-block) where a tile
        // kernel mirrors llama.cpp's tiled path (x86 with AVX-512 VNNI).
        if quant_kernels::registry::kernel_for(id).is_some_and(|k| k.tile.is_some()) {
            let (y1, y8) = (run(&m, &x[..cols], 1, &pool), run(&m, &x[..8 * cols], 8, &pool));
            assert!(y1.iter().zip(&y8).any(|(a, b)| a.to_bits() != b.to_bits()), "{name}: tiled path not taken");
        }
    }
}
