//! Quick matmul timing: `cargo run --release -p quant-kernels --example mmbench -- [threads] [filter]`.
//! Prints GB/s of weights (decode, n = 1) and GFLOP/s (prompt, n = 512 or as given by QK_PP;
//! the best of QK_REPS runs, 5 unless given). QK_ROWS: only the cases of that many rows.

use std::time::Instant;

use quant_kernels::{kernel_info, matmul, Matrix, Pool};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let filter = args.get(2).cloned().unwrap_or_default();
    let pp: usize = std::env::var("QK_PP").ok().and_then(|s| s.parse().ok()).unwrap_or(512);
    let pool = Pool::new(threads);
    let cases: &[(&str, usize, usize)] = &[
        ("q4_1", 576, 576),
        ("q4_1", 1536, 576),
        ("q4_1", 576, 1536),
        ("q8_0", 49152, 576),
        ("q8_0", 576, 576),
        ("q8_0", 2048, 2048),
        ("q8_0", 8192, 2048),
        ("q4_0", 1536, 576),
        ("q5_0", 4864, 896),
        ("q5_0", 896, 896),
        ("q4_0", 4864, 896),
        ("q4_1", 4864, 896),
        ("q5_1", 1536, 576),
        ("q2_K", 896, 4864),
        ("q3_K", 896, 4864),
        ("q4_K", 1536, 768),
        ("q4_K", 896, 4864),
        ("q5_K", 896, 4864),
        ("q6_K", 896, 4864),
        ("q4_K", 8192, 2048),
        ("q6_K", 32768, 2048),
        ("q4_K", 32768, 2048),
        ("f16", 1536, 576),
        ("f16", 8192, 2048),
        ("f16", 2048, 8192),
        ("bf16", 1536, 576),
        ("f32", 1536, 576),
    ];
    let mut seed = 0x1234_5678u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    };
    for &(name, rows, cols) in cases {
        if !filter.is_empty() && !name.contains(&filter) {
            continue;
        }
        if std::env::var("QK_ROWS").is_ok_and(|r| r != rows.to_string()) {
            continue;
        }
        let t = ggml_quants::lookup_name(name).unwrap();
        let src: Vec<f32> = (0..rows * cols).map(|_| rnd()).collect();
        let w_bytes = t.quantize_to_vec(&src, cols, None).unwrap();
        let w = Matrix::new(t.id, &w_bytes, rows, cols).unwrap();
        let x: Vec<f32> = (0..pp * cols).map(|_| rnd()).collect();
        // Decode.
        let mut y = vec![0f32; rows];
        let iters = (2e9 / w_bytes.len() as f64).clamp(20.0, 20000.0) as usize;
        for _ in 0..iters / 10 + 1 {
            matmul(&pool, &w, &x[..cols], 1, &mut y).unwrap();
        }
        // Minimum over single calls: the machine is shared, the minimum is the uncontended figure.
        let mut dt = f64::MAX;
        for _ in 0..iters {
            let t0 = Instant::now();
            matmul(&pool, &w, &x[..cols], 1, &mut y).unwrap();
            dt = dt.min(t0.elapsed().as_secs_f64());
        }
        let gbs = w_bytes.len() as f64 / dt / 1e9;
        // Prompt.
        let mut yp = vec![0f32; rows * pp];
        matmul(&pool, &w, &x, pp, &mut yp).unwrap();
        let reps = std::env::var("QK_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
        let mut dtp = f64::MAX;
        for _ in 0..reps {
            let t0 = Instant::now();
            matmul(&pool, &w, &x, pp, &mut yp).unwrap();
            dtp = dtp.min(t0.elapsed().as_secs_f64());
        }
        let gflops = 2.0 * rows as f64 * cols as f64 * pp as f64 / dtp / 1e9;
        println!(
            "{name:>5} {rows:>6}x{cols:<5} {:<10} decode {:>8.2} us {:>6.2} GB/s | pp{pp} {:>8.2} ms {:>7.1} GFLOP/s",
            kernel_info(t.id),
            dt * 1e6,
            gbs,
            dtp * 1e3,
            gflops
        );
    }
}
