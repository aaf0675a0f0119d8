//! The extension contract for kernels: a plug-in q4_0 kernel registered above the
//! built-ins is the one that runs, on every CPU — the built-in repacked layout (AVX-512
//! VNNI) must not bypass it, nor feed it another kernel's activations — and a duplicate
//! of a built-in entry is reported by the registry check.
//!
//! A test binary of its own: the registrations below would change every other test.

use std::sync::atomic::{AtomicUsize, Ordering};

use quant_kernels::registry::{kernel_for, kernels_of};
use quant_kernels::{matmul, matmul_expert, matmul_rowwise, registry_problems, Kernel, Matrix, Pool, Repacked};

const Q4_0: u32 = 2;
const Q8_0: u32 = 8;

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// ggml's q4_0 · q8_0 (the scalar twin), counting its calls.
fn counting_dot(n: usize, w: &[u8], x: &[u8]) -> f32 {
    CALLS.fetch_add(1, Ordering::Relaxed);
    quant_kernels::scalar::dots::q4_0_q8_0(n, w, x)
}

quant_kernels::inventory::submit! {
    Kernel::new(Q4_0, "plugin-counting", 100, Q8_0, counting_dot)
}

// A second "avx2" q4_0 kernel at the built-in's priority: a clash the check must name.
quant_kernels::inventory::submit! {
    Kernel::new(Q4_0, "avx2", 10, Q8_0, quant_kernels::scalar::dots::q4_0_q8_0)
}

fn rng(seed: &mut u64) -> f32 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

#[test]
fn a_higher_priority_plugin_kernel_runs_and_is_never_bypassed() {
    let k = kernel_for(Q4_0).unwrap();
    assert_eq!(k.backend, "plugin-counting");
    assert!(kernels_of(Q4_0).len() >= 3, "the built-ins stay listed");

    let t = ggml_quants::by_name("q4_0").unwrap();
    let (rows, cols) = (64usize, 256usize);
    let mut s = 11u64;
    let w: Vec<f32> = (0..rows * cols).map(|_| rng(&mut s)).collect();
    let wq = t.quantize_to_vec(&w, cols, None).unwrap();
    let m = Matrix::new(Q4_0, &wq, rows, cols).unwrap();
    // The chosen kernel has no layout: nothing is repacked, on any CPU.
    assert!(Repacked::new(&m).is_none(), "the built-in q4_0x8 layout bypassed the plug-in");

    let pool = Pool::new(2);
    for n in [1usize, 3, 8, 20] {
        let x: Vec<f32> = (0..n * cols).map(|_| rng(&mut s) * 2.0).collect();
        // The expected bits: the scalar twin over the same Q8_0 activations.
        let act = ggml_quants::by_name("q8_0").unwrap();
        let want: Vec<f32> = (0..n)
            .flat_map(|tok| {
                let xq = act.quantize_to_vec(&x[tok * cols..(tok + 1) * cols], cols, None).unwrap();
                let wq = &wq;
                (0..rows).map(move |r| {
                    quant_kernels::scalar::dots::q4_0_q8_0(cols, &wq[r * 18 * cols / 32..(r + 1) * 18 * cols / 32], &xq)
                })
            })
            .collect();
        for (name, f) in [
            ("matmul", matmul as fn(&Pool, &Matrix<'_>, &[f32], usize, &mut [f32]) -> _),
            ("matmul_expert", matmul_expert),
            ("matmul_rowwise", matmul_rowwise),
        ] {
            let before = CALLS.load(Ordering::Relaxed);
            let mut y = vec![f32::NAN; n * rows];
            f(&pool, &m, &x, n, &mut y).unwrap();
            let calls = CALLS.load(Ordering::Relaxed) - before;
            assert_eq!(calls, n * rows, "{name}, {n} tokens: the plug-in ran {calls} times, not once per output");
            let bad = y.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert_eq!(bad, 0, "{name}, {n} tokens: {bad} outputs differ from the plug-in's arithmetic");
        }
    }
}

#[test]
fn a_duplicate_builtin_kernel_is_reported() {
    let report = registry_problems();
    let dup: Vec<&String> = report.problems.iter().filter(|p| p.contains("`2`")).collect();
    assert_eq!(dup.len(), 1, "{:?}", report.problems);
    assert!(dup[0].contains("registered 2 times at priority 10") && dup[0].contains("avx2"), "{}", dup[0]);
    // Only the planted clash: the built-ins themselves are sound.
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
}
