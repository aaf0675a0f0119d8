//! `matmul_rowwise` against its alternatives for a decode step of several sequences:
//! `cargo run --release -p quant-kernels --example rowwise_bench -- [threads] [rounds] [filter]`.
//!
//! For SmolLM2-135M-like shapes (rows × cols) and n = 1, 2, 4, 8 tokens it times
//! `matmul_rowwise` of n tokens, n separate one-token `matmul` calls (the same bits, n
//! weight reads) and `matmul` of n tokens (one weight read, llama.cpp's batch arithmetic),
//! interleaved over `rounds` rounds so that a busy machine slows all three alike, and
//! prints the best time per call of each and the ratios. Matrices are used as the engine
//! loads them (repacked where a repacker applies, marked `x8`). K types need whole 256-
//! blocks per row, so their 576-column shapes are replaced by 512 columns.

use std::time::Instant;

use quant_kernels::{kernel_info, matmul, matmul_rowwise, Matrix, Pool, Repacked};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(25);
    let filter = args.get(3).cloned().unwrap_or_default();
    let pool = Pool::new(threads);
    let mut seed = 0x1234_5678u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    };
    println!("threads {threads}, rounds {rounds}; times per call (best round), ratios rowwise / alternative");
    println!(
        "{:>5} {:>12} {:<16} {:>2} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "type", "rows x cols", "kernel", "n", "rowwise", "n x one", "matmul n", "rw/loop", "rw/mm"
    );
    for name in ["q4_0", "q4_1", "q8_0", "q4_K", "q6_K"] {
        if !filter.is_empty() && !name.contains(&filter) {
            continue;
        }
        let t = ggml_quants::lookup_name(name).unwrap();
        let k_type = t.block_size == 256;
        let narrow = if k_type { 512 } else { 576 };
        for (rows, cols) in [(576, narrow), (576, 1536), (1536, narrow), (49152, narrow)] {
            let src: Vec<f32> = (0..rows * cols).map(|_| rnd()).collect();
            let w_bytes = t.quantize_to_vec(&src, cols, None).unwrap();
            let plain = Matrix::new(t.id, &w_bytes, rows, cols).unwrap();
            let rep = Repacked::new(&plain);
            let w = rep.as_ref().map(|r| r.matrix()).unwrap_or(plain);
            let label = match &rep {
                Some(r) => r.backend().to_string(),
                None => kernel_info(t.id).to_string(),
            };
            let x: Vec<f32> = (0..8 * cols).map(|_| rnd()).collect();
            let mut y = vec![0f32; 8 * rows];
            // Calls per timing: about 2 ms of weight reads at 10 GB/s (short windows, many
            // rounds: the best round is the one no other process preempted).
            let reps = (2e7 / w_bytes.len() as f64).clamp(1.0, 200.0) as usize;
            for n in [1usize, 2, 4, 8] {
                let (x, y) = (&x[..n * cols], &mut y[..n * rows]);
                let mut best = [f64::MAX; 3];
                for round in 0..rounds {
                    // A different variant first in each round.
                    for v in (0..3).map(|i| (i + round) % 3) {
                        let b = &mut best[v];
                        let t0 = Instant::now();
                        for _ in 0..reps {
                            match v {
                                0 => matmul_rowwise(&pool, &w, x, n, y).unwrap(),
                                1 => {
                                    for (xt, yt) in x.chunks_exact(cols).zip(y.chunks_exact_mut(rows)) {
                                        matmul(&pool, &w, xt, 1, yt).unwrap();
                                    }
                                }
                                _ => matmul(&pool, &w, x, n, y).unwrap(),
                            }
                        }
                        *b = b.min(t0.elapsed().as_secs_f64() / reps as f64);
                    }
                }
                println!(
                    "{name:>5} {:>12} {label:<16} {n:>2} {:>8.1}us {:>8.1}us {:>8.1}us {:>8.3} {:>8.3}",
                    format!("{rows}x{cols}"),
                    best[0] * 1e6,
                    best[1] * 1e6,
                    best[2] * 1e6,
                    best[0] / best[1],
                    best[0] / best[2]
                );
            }
        }
    }
}
