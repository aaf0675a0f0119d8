//! Decode's weight reads outside the caches: `cargo run --release -p quant-kernels --example
//! decodebench -- [threads] [MiB] [rounds] [filter] [wide]`.
//!
//! For each type, copies of one quantized `rows × cols` matrix (a 1–3 B model's FFN shape:
//! 8192 × 2048, or 2048 × 8192 with `wide`)
//! fill `MiB` of memory — beyond the last-level cache, as a model's weights are — and one
//! "token" is a one-token `matmul` over every copy in turn, as decoding walks the layers.
//! Prints the weights' GB/s per token (best of `rounds`) beside the same threads' stream-read
//! loop over a buffer of the same size (`ops::stream_sum`, with and without prefetching 8 KiB
//! ahead, as `gguf bench --dram-bound`), and their ratio: how close the kernel comes to the
//! memory bound.

use std::hint::black_box;
use std::time::Instant;

use quant_kernels::{kernel_info, matmul, ops, Matrix, Pool, Repacked};

fn stream(pool: &Pool, buf: &[u64], prefetch: usize) -> f64 {
    const WORDS: usize = (2 << 20) / 8;
    let n = buf.len() / WORDS;
    let t = Instant::now();
    pool.for_each(n, &|c| {
        black_box(ops::stream_sum(&buf[c * WORDS..(c + 1) * WORDS], prefetch));
    });
    (n * WORDS * 8) as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let mib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let rounds: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    let filter = args.get(4).cloned().unwrap_or_default();
    // `wide`: the FFN down shape (8192 columns), else the up/gate shape (2048)
    let wide = args.get(5).is_some_and(|s| s == "wide");
    let pool = Pool::new(threads);
    let mut seed = 0x1234_5678u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    };
    let buf: Vec<u64> = (0..(mib << 17) as u64).collect();
    for name in ["q4_K", "q6_K", "q4_0", "q8_0", "q5_0", "iq4_xs", "iq2_xs", "iq3_s", "mxfp4"] {
        if !filter.is_empty() && !filter.split(',').any(|f| f == name) {
            continue;
        }
        let t = ggml_quants::lookup_name(name).unwrap();
        let (rows, cols) = if wide { (2048, 8192) } else { (8192, 2048) };
        let src: Vec<f32> = (0..rows * cols).map(|_| rnd()).collect();
        let w_bytes = t.quantize_to_vec(&src, cols, None).unwrap();
        let copies = ((mib << 20) / w_bytes.len()).max(1);
        let stored: Vec<Vec<u8>> = (0..copies).map(|_| w_bytes.clone()).collect();
        let plain: Vec<Matrix<'_>> = stored.iter().map(|b| Matrix::new(t.id, b, rows, cols).unwrap()).collect();
        let rep: Vec<Option<Repacked>> = plain.iter().map(Repacked::new).collect();
        let ws: Vec<Matrix<'_>> =
            plain.iter().zip(&rep).map(|(p, r)| r.as_ref().map(|r| r.matrix()).unwrap_or(*p)).collect();
        let label =
            if rep[0].is_some() { format!("{} (repacked)", kernel_info(t.id)) } else { kernel_info(t.id).to_string() };
        let x: Vec<f32> = (0..cols).map(|_| rnd()).collect();
        let mut y = vec![0f32; rows];
        let total = (copies * w_bytes.len()) as f64;
        let (mut best_k, mut best_s) = (0f64, 0f64);
        for _ in 0..rounds {
            let t0 = Instant::now();
            for w in &ws {
                matmul(&pool, w, &x, 1, &mut y).unwrap();
            }
            best_k = best_k.max(total / t0.elapsed().as_secs_f64() / 1e9);
            best_s = best_s.max(stream(&pool, &buf, 0)).max(stream(&pool, &buf, 8 << 10));
        }
        println!(
            "{name:>6} {rows}x{cols} x{copies:<4} {label:<28} decode {best_k:6.2} GB/s | stream {best_s:6.2} GB/s | {:5.1} %",
            100.0 * best_k / best_s
        );
    }
}
