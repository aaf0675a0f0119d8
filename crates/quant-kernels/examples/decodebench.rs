//! Decode's weight reads outside the caches: `cargo run --release -p quant-kernels --example
//! decodebench -- [threads] [MiB] [rounds] [filter] [wide]`.
//!
//! For each type, copies of one quantized `rows × cols` matrix (a 1–3 B model's FFN shape:
//! 8192 × 2048, or 2048 × 8192 with `wide`) fill `MiB` of memory — beyond the last-level cache, as a model's weights are — and one
//! "token" is a one-token `matmul` over every copy in turn, as decoding walks the layers.
//! Prints the weights' GB/s per token (best of `rounds`) beside the same threads' stream-read
//! loop over a buffer of the same size (`ops::stream_sum`, with and without prefetching 8 KiB
//! ahead, as `gguf bench --dram-bound`), and their ratio: how close the kernel comes to the
//! memory bound. Filter `llama-1b`: one token of llama-3.2-1B Q4_K_M's products instead.

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
    if let Some(path) = filter.strip_prefix("file=") {
        return from_file(&pool, &buf, rounds, path);
    }
    if filter == "llama-1b" {
        return llama_1b(&pool, &buf, rounds);
    }
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

/// One decode token of llama-3.2-1B Q4_K_M's products (16 layers of q, k, v, o, gate, up,
/// down and the tied q6_K output matrix, each its own random bytes, in that order) with
/// nothing between them: the engine's decode minus everything but the weight reads. Prints
/// the GB/s per shape and overall (best round) beside the stream-read loop.
fn llama_1b(pool: &Pool, buf: &[u64], rounds: usize) {
    let q4k = ggml_quants::lookup_name("q4_K").unwrap();
    let q6k = ggml_quants::lookup_name("q6_K").unwrap();
    let kinds = [
        ("q, o 2048x2048 q4_K", q4k, 2048, 2048),
        ("k 512x2048 q4_K", q4k, 512, 2048),
        ("v 512x2048 q6_K", q6k, 512, 2048),
        ("gate, up 8192x2048 q4_K", q4k, 8192, 2048),
        ("down 2048x8192 q6_K", q6k, 2048, 8192),
        ("output 128256x2048 q6_K", q6k, 128_256, 2048),
    ];
    let mut order: Vec<usize> = (0..16).flat_map(|_| [0, 1, 2, 0, 3, 3, 4]).collect();
    order.push(5);
    // random bytes (d and dmin kept small and finite by the mask)
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let stored: Vec<Vec<u8>> = order
        .iter()
        .map(|&k| {
            let (_, t, r, c) = kinds[k];
            (0..r * c / 256 * t.type_size)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 32) as u8 & 0x3b
                })
                .collect()
        })
        .collect();
    let ws: Vec<Matrix<'_>> = order
        .iter()
        .zip(&stored)
        .map(|(&k, b)| Matrix::new(kinds[k].1.id, b, kinds[k].2, kinds[k].3).unwrap())
        .collect();
    let total: usize = stored.iter().map(Vec::len).sum();
    let x = vec![0.5f32; 8192];
    let mut y = vec![0f32; 128_256];
    let (mut best_k, mut best_s) = (0f64, 0f64);
    let mut best_per = [(f64::MAX, 0f64); 6];
    for _ in 0..rounds {
        let mut per = [(0f64, 0f64); 6];
        let t0 = Instant::now();
        for (w, &k) in ws.iter().zip(&order) {
            if std::env::var_os("DB_CHURN").is_some() {
                let v = vec![1.0f32; 128_256 + k * 1000];
                black_box(&v);
                drop(v);
                let kv = vec![0u16; 65536 * 4];
                black_box(kv.iter().map(|&x| x as u64).sum::<u64>());
            }
            let tp = Instant::now();
            matmul(pool, w, &x[..w.cols()], 1, &mut y[..w.rows()]).unwrap();
            per[k].0 += tp.elapsed().as_secs_f64();
            per[k].1 += (w.row_bytes() * w.rows()) as f64;
        }
        let dt = t0.elapsed().as_secs_f64();
        best_k = best_k.max(total as f64 / dt / 1e9);
        best_s = best_s.max(stream(pool, buf, 0)).max(stream(pool, buf, 8 << 10));
        for (b, p) in best_per.iter_mut().zip(per) {
            if p.0 < b.0 {
                *b = p;
            }
        }
    }
    for ((name, ..), (t, bytes)) in kinds.iter().zip(best_per) {
        println!("{name:>24} {:6.2} GB/s", bytes / t / 1e9);
    }
    println!(
        "llama-1b Q4_K_M products ({} MiB) decode {best_k:6.2} GB/s | stream {best_s:6.2} GB/s | {:5.1} %",
        total >> 20,
        100.0 * best_k / best_s
    );
}

/// One decode token's products over a GGUF file's own mapped weights: every 2-D tensor
/// named `blk.N.*` in layer order (q, k, v, output, gate, up, down), then the output
/// matrix (`output.weight`, else the tied `token_embd.weight`) — as the engine reads them
/// when it does not repack, with nothing between the products.
fn from_file(pool: &Pool, buf: &[u64], rounds: usize, path: &str) {
    let f = gguf_format::GgufFile::open(path).unwrap();
    let order = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"];
    let find = |name: &str| f.tensors().iter().find(|t| t.name == name);
    let mut list = Vec::new();
    for l in 0.. {
        if find(&format!("blk.{l}.attn_q.weight")).is_none() {
            break;
        }
        for o in order {
            if let Some(t) = find(&format!("blk.{l}.{o}.weight")) {
                list.push(t);
            }
        }
    }
    list.push(find("output.weight").or_else(|| find("token_embd.weight")).unwrap());
    let copies: Vec<Vec<u8>> = if std::env::var_os("DB_COPY").is_some() {
        list.iter().map(|t| f.tensor_data(t).unwrap().to_vec()).collect()
    } else {
        Vec::new()
    };
    let ws: Vec<Matrix<'_>> = list
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let data = if copies.is_empty() { f.tensor_data(t).unwrap() } else { &copies[i][..] };
            Matrix::new(t.type_id, data, t.dims[1] as usize, t.dims[0] as usize).unwrap()
        })
        .collect();
    let total: usize = ws.iter().map(|w| w.row_bytes() * w.rows()).sum();
    let x = vec![0.5f32; 16384];
    let mut y = vec![0f32; ws.iter().map(|w| w.rows()).max().unwrap()];
    let (mut best_k, mut best_s) = (0f64, 0f64);
    for _ in 0..rounds {
        let t0 = Instant::now();
        for w in &ws {
            matmul(pool, w, &x[..w.cols()], 1, &mut y[..w.rows()]).unwrap();
        }
        best_k = best_k.max(total as f64 / t0.elapsed().as_secs_f64() / 1e9);
        best_s = best_s.max(stream(pool, buf, 0)).max(stream(pool, buf, 8 << 10));
    }
    println!(
        "{path}: {} products ({} MiB) decode {best_k:6.2} GB/s | stream {best_s:6.2} GB/s | {:5.1} %",
        ws.len(),
        total >> 20,
        100.0 * best_k / best_s
    );
}
