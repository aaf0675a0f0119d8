//! Load-time repacked layouts: the same bits as the matrix used as stored.

use quant_kernels::{matmul, matmul_expert, Matrix, Pool, Repacked};

fn rng(seed: &mut u64) -> f32 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

#[test]
fn repacked_q4_0_gives_the_same_bits() {
    let pool = Pool::new(2);
    let t = ggml_quants::by_name("q4_0").unwrap();
    let mut s = 3u64;
    let mut compared = 0;
    for (rows, cols) in [(8usize, 32usize), (24, 64), (64, 576), (136, 1536)] {
        let w: Vec<f32> = (0..rows * cols).map(|_| rng(&mut s)).collect();
        let wq = t.quantize_to_vec(&w, cols, None).unwrap();
        let m = Matrix::new(t.id, &wq, rows, cols).unwrap();
        let Some(rp) = Repacked::new(&m) else {
            // No repacker on this CPU (no AVX-512 VNNI): nothing to compare.
            #[cfg(target_arch = "x86_64")]
            assert!(!quant_kernels::x86_64::vnni::has_vnni(), "VNNI CPU without the q4_0 repacker");
            return;
        };
        let mr = rp.matrix();
        assert!(mr.row(0).is_err(), "a repacked matrix must refuse row reads");
        for n in [1usize, 2, 3, 4, 5, 8, 17, 40] {
            let x: Vec<f32> = (0..n * cols).map(|_| rng(&mut s) * 3.0).collect();
            let (mut a, mut b) = (vec![0f32; n * rows], vec![0f32; n * rows]);
            matmul(&pool, &m, &x, n, &mut a).unwrap();
            matmul(&pool, &mr, &x, n, &mut b).unwrap();
            let bad = a.iter().zip(&b).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert_eq!(bad, 0, "{rows}x{cols}, {n} tokens: {bad} outputs differ");
            matmul_expert(&pool, &m, &x, n, &mut a).unwrap();
            matmul_expert(&pool, &mr, &x, n, &mut b).unwrap();
            assert_eq!(a, b, "{rows}x{cols}, {n} tokens (expert)");
            compared += a.len();
        }
    }
    assert!(compared > 10_000);
}

#[test]
fn shapes_llama_cpp_does_not_repack_stay_as_they_are() {
    let t = ggml_quants::by_name("q4_0").unwrap();
    let (rows, cols) = (12, 64);
    let wq = t.quantize_to_vec(&vec![0.5; rows * cols], cols, None).unwrap();
    let m = Matrix::new(t.id, &wq, rows, cols).unwrap();
    assert!(Repacked::new(&m).is_none(), "12 rows is not a multiple of 8");
}
