//! Decode's weight reads outside the caches: `cargo run --release -p quant-kernels --example
//! decodebench -- [threads] [MiB] [rounds] [filter] [wide]`.
//!
//! For each type, copies of one quantized `rows × cols` matrix (a 1–3 B model's FFN shape:
//! 8192 × 2048, or 2048 × 8192 with `wide`) fill `MiB` of memory — beyond the last-level cache, as a model's weights are — and one
//! "token" is a one-token `matmul` over every copy in turn, as decoding walks the layers.
//! Prints the weights' GB/s per token (best of `rounds`) beside the same threads' stream-read
//! loop over a buffer of the same size advised `MADV_HUGEPAGE` (`ops::stream_sum`, with and
//! without prefetching 8 KiB ahead, as `gguf bench --dram-bound`), and their ratio: how
//! close the kernel comes to the memory bound. Filters: `llama-1b` (one token of
//! llama-3.2-1B Q4_K_M's products), `file=PATH` (a file's products, `DB_REPACK`/`DB_COPY`),
//! `pages=PATH` (the same on 2 MiB vs 4 KiB pages vs the file map), `stream` (the loop on
//! 4 KiB vs 2 MiB pages). `DB_HUGE`: the copies on 2 MiB pages; `DB_ROWS`: fewer rows.

use std::hint::black_box;
use std::time::Instant;

use quant_kernels::{kernel_info, matmul, ops, Matrix, Pool, Repacked};

fn stream(pool: &Pool, buf: &[u8], prefetch: usize) -> f64 {
    const CHUNK: usize = 2 << 20;
    let n = buf.len() / CHUNK;
    let t = Instant::now();
    pool.for_each(n, &|c| {
        black_box(ops::stream_sum(&buf[c * CHUNK..(c + 1) * CHUNK], prefetch));
    });
    (n * CHUNK) as f64 / t.elapsed().as_secs_f64() / 1e9
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
    // the stream loop's buffer: advised MADV_HUGEPAGE, as `gguf bench --dram-bound`'s best
    let mut buf = memmap2::MmapMut::map_anon((mib << 20).max(2 << 20)).unwrap();
    let _ = buf.advise(memmap2::Advice::HugePage);
    for (i, b) in buf.iter_mut().enumerate() {
        *b = i as u8;
    }
    let buf: &[u8] = &buf;
    if let Some(path) = filter.strip_prefix("file=") {
        return from_file(&pool, buf, rounds, path);
    }
    if let Some(path) = filter.strip_prefix("pages=") {
        return pages(&pool, rounds, path);
    }
    if filter == "synth" {
        if std::env::var_os("DB_HEAP").is_some() {
            // a heap copy: 4 KiB pages where huge pages are `madvise`-only
            let heap = Vec::from(buf);
            return synth(&pool, &heap, rounds);
        }
        return synth(&pool, buf, rounds);
    }
    if filter == "stream" {
        return stream_pages(&pool, buf, rounds);
    }
    if filter == "llama-1b" {
        return llama_1b(&pool, buf, rounds);
    }
    for name in ["q4_K", "q6_K", "q4_0", "q8_0", "q5_0", "iq4_xs", "iq2_xs", "iq3_s", "mxfp4"] {
        if !filter.is_empty() && !filter.split(',').any(|f| f == name) {
            continue;
        }
        let t = ggml_quants::lookup_name(name).unwrap();
        let (rows, cols) = if wide { (2048, 8192) } else { (8192, 2048) };
        // DB_ROWS: fewer rows (a matrix that fits a cache: the kernel's compute rate)
        let rows = std::env::var("DB_ROWS").ok().and_then(|s| s.parse().ok()).unwrap_or(rows);
        let src: Vec<f32> = (0..rows * cols).map(|_| rnd()).collect();
        let w_bytes = t.quantize_to_vec(&src, cols, None).unwrap();
        let copies = ((mib << 20) / w_bytes.len()).max(1);
        let stored: Vec<Vec<u8>> = (0..copies).map(|_| w_bytes.clone()).collect();
        // DB_HUGE: the copies in one anonymous map advised MADV_HUGEPAGE instead
        let mut map =
            memmap2::MmapMut::map_anon(if std::env::var_os("DB_HUGE").is_some() { copies * w_bytes.len() } else { 1 })
                .unwrap();
        let _ = map.advise(memmap2::Advice::HugePage);
        let huge = map.len() > 1;
        if huge {
            for c in map.chunks_exact_mut(w_bytes.len()) {
                c.copy_from_slice(&w_bytes);
            }
        }
        let slices: Vec<&[u8]> =
            if huge { map.chunks_exact(w_bytes.len()).collect() } else { stored.iter().map(|b| &b[..]).collect() };
        let plain: Vec<Matrix<'_>> = slices.iter().map(|b| Matrix::new(t.id, b, rows, cols).unwrap()).collect();
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
            best_s = best_s.max(stream(&pool, buf, 0)).max(stream(&pool, buf, 8 << 10));
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
fn llama_1b(pool: &Pool, buf: &[u8], rounds: usize) {
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
fn from_file(pool: &Pool, buf: &[u8], rounds: usize, path: &str) {
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
    let plain: Vec<Matrix<'_>> = list
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let data = if copies.is_empty() { f.tensor_data(t).unwrap() } else { &copies[i][..] };
            Matrix::new(t.type_id, data, t.dims[1] as usize, t.dims[0] as usize).unwrap()
        })
        .collect();
    // DB_REPACK: the types the engine repacks read from their repacked copies, as it does
    let rep: Vec<Option<Repacked>> = if std::env::var_os("DB_REPACK").is_some() {
        plain.iter().map(Repacked::new).collect()
    } else {
        plain.iter().map(|_| None).collect()
    };
    let ws: Vec<Matrix<'_>> =
        plain.iter().zip(&rep).map(|(p, r)| r.as_ref().map(|r| r.matrix()).unwrap_or(*p)).collect();
    let total: usize = plain.iter().map(|w| w.row_bytes() * w.rows()).sum();
    let x = vec![0.5f32; 16384];
    let mut y = vec![0f32; ws.iter().map(|w| w.rows()).max().unwrap()];
    let (mut best_k, mut best_s) = (0f64, 0f64);
    // per (type, rows, cols): best round's seconds and bytes
    let mut per: Vec<((u32, usize, usize), f64, f64)> = Vec::new();
    for _ in 0..rounds {
        let mut this: Vec<((u32, usize, usize), f64, f64)> = Vec::new();
        let t0 = Instant::now();
        for (w, p) in ws.iter().zip(&plain) {
            let tp = Instant::now();
            matmul(pool, w, &x[..w.cols()], 1, &mut y[..w.rows()]).unwrap();
            let key = (p.type_id(), p.rows(), p.cols());
            let dt = tp.elapsed().as_secs_f64();
            let bytes = (p.row_bytes() * p.rows()) as f64;
            match this.iter_mut().find(|e| e.0 == key) {
                Some(e) => {
                    e.1 += dt;
                    e.2 += bytes
                }
                None => this.push((key, dt, bytes)),
            }
        }
        best_k = best_k.max(total as f64 / t0.elapsed().as_secs_f64() / 1e9);
        best_s = best_s.max(stream(pool, buf, 0)).max(stream(pool, buf, 8 << 10));
        for e in this {
            match per.iter_mut().find(|b| b.0 == e.0) {
                Some(b) if e.1 < b.1 => *b = e,
                Some(_) => {}
                None => per.push(e),
            }
        }
    }
    for ((ty, r, c), t, bytes) in per {
        let name = ggml_quants::lookup_id(ty).map(|t| t.name).unwrap_or("?");
        println!("{name:>8} {r:>6}x{c:<6} {:6.2} GB/s  {:7.2} ms", bytes / t / 1e9, t * 1e3);
    }
    println!(
        "{path}: {} products ({} MiB) decode {best_k:6.2} GB/s | stream {best_s:6.2} GB/s | {:5.1} %",
        ws.len(),
        total >> 20,
        100.0 * best_k / best_s
    );
}

/// The stream-read loop over a heap buffer (4 KiB pages) and over an anonymous map advised
/// `MADV_HUGEPAGE`, interleaved `rounds` times: how much of the bound's spread is pages.
fn stream_pages(pool: &Pool, huge: &[u8], rounds: usize) {
    let heap: Vec<u8> = (0..huge.len()).map(|i| i as u8).collect();
    for r in 0..rounds {
        let h: Vec<String> = [0, 4 << 10, 8 << 10].iter().map(|&p| format!("{:6.2}", stream(pool, &heap, p))).collect();
        let g: Vec<String> = [0, 4 << 10, 8 << 10].iter().map(|&p| format!("{:6.2}", stream(pool, huge, p))).collect();
        println!("round {r}: heap {} | huge {} GB/s (prefetch 0/4/8 KiB)", h.join(" "), g.join(" "));
    }
}

/// Sets transparent huge pages' mode (root only; otherwise nothing changes).
fn thp(mode: &str) {
    let _ = std::fs::write("/sys/kernel/mm/transparent_hugepage/enabled", mode);
}

/// A file's products (every 2-D `blk.*` tensor in file order, then the output matrix) over
/// (a) copies on 2 MiB pages (transparent huge pages switched to `always` while copying
/// and repacking: needs root, else these are 4 KiB pages too), (b) copies on 4 KiB pages,
/// (c) the file's own map (repacked types repacked into the heap), interleaved `rounds`
/// times: what pages are worth to each type.
fn pages(pool: &Pool, rounds: usize, path: &str) {
    let f = gguf_format::GgufFile::open(path).unwrap();
    let mut list: Vec<_> =
        f.tensors().iter().filter(|t| t.name.starts_with("blk.") && t.dims.len() == 2 && t.dims[1] > 1).collect();
    list.sort_by_key(|t| t.offset);
    list.push(
        f.tensors()
            .iter()
            .find(|t| t.name == "output.weight")
            .unwrap_or_else(|| f.tensors().iter().find(|t| t.name == "token_embd.weight").unwrap()),
    );
    fn mk<'a>(list: &[&gguf_format::TensorInfo], data: Vec<&'a [u8]>) -> Vec<Matrix<'a>> {
        list.iter()
            .zip(data)
            .map(|(t, d)| Matrix::new(t.type_id, d, t.dims[1] as usize, t.dims[0] as usize).unwrap())
            .collect()
    }
    thp("always");
    let ca: Vec<Vec<u8>> = list.iter().map(|t| f.tensor_data(t).unwrap().to_vec()).collect();
    let pa = mk(&list, ca.iter().map(|v| &v[..]).collect());
    let ra: Vec<Option<Repacked>> = pa.iter().map(Repacked::new).collect();
    thp("madvise");
    let cb: Vec<Vec<u8>> = list.iter().map(|t| f.tensor_data(t).unwrap().to_vec()).collect();
    let pb = mk(&list, cb.iter().map(|v| &v[..]).collect());
    let rb: Vec<Option<Repacked>> = pb.iter().map(Repacked::new).collect();
    let pc = mk(&list, list.iter().map(|t| f.tensor_data(t).unwrap()).collect());
    let rc: Vec<Option<Repacked>> = pc.iter().map(Repacked::new).collect();
    let total: usize = pa.iter().map(|w| w.row_bytes() * w.rows()).sum();
    let x = vec![0.5f32; 16384];
    let mut y = vec![0f32; pa.iter().map(|w| w.rows()).max().unwrap()];
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); 3];
    for _ in 0..rounds {
        for (i, (p, r)) in [(&pa, &ra), (&pb, &rb), (&pc, &rc)].into_iter().enumerate() {
            let ws: Vec<Matrix<'_>> =
                p.iter().zip(r).map(|(p, r)| r.as_ref().map(|r| r.matrix()).unwrap_or(*p)).collect();
            let t0 = Instant::now();
            for w in &ws {
                matmul(pool, w, &x[..w.cols()], 1, &mut y[..w.rows()]).unwrap();
            }
            res[i].push(total as f64 / t0.elapsed().as_secs_f64() / 1e9);
        }
    }
    for (name, mut r) in ["2M copies", "4K copies", "file map"].into_iter().zip(res) {
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("{name:>10}: median {:6.2} GB/s best {:6.2}", r[r.len() / 2], r[r.len() - 1]);
    }
}

/// Per 64-byte line, the 8-word sum plus `k` rounds of a multiply-rotate chain per word
/// (independent chains, so it is throughput, not latency): how much compute per byte a
/// stream keeps hidden under the memory reads.
static T1: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn work(b: &[u8], k: usize, pf: usize) -> u64 {
    let mut acc = [1u64; 8];
    for c in b.chunks_exact(64) {
        if pf > 0 {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch never faults; the address is formed with wrapping_add.
            unsafe {
                use std::arch::x86_64::*;
                if T1.load(std::sync::atomic::Ordering::Relaxed) {
                    _mm_prefetch::<_MM_HINT_T1>((c.as_ptr() as *const i8).wrapping_add(pf))
                } else {
                    _mm_prefetch::<_MM_HINT_T0>((c.as_ptr() as *const i8).wrapping_add(pf))
                }
            };
        }
        for (j, a) in acc.iter_mut().enumerate() {
            let mut v = u64::from_le_bytes(c[8 * j..8 * j + 8].try_into().unwrap());
            for _ in 0..k {
                v = v.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(7);
            }
            *a = a.wrapping_add(v);
        }
    }
    acc.iter().fold(0, |s, &a| s ^ a)
}

fn synth(pool: &Pool, buf: &[u8], rounds: usize) {
    const CHUNK: usize = 2 << 20;
    let small = &buf[..CHUNK];
    let pf: usize = std::env::var("DB_PF").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    T1.store(std::env::var_os("DB_T1").is_some(), std::sync::atomic::Ordering::Relaxed);
    for k in [0usize, 1, 2, 4] {
        let (mut best_c, mut best_m) = (0f64, 0f64);
        for _ in 0..rounds {
            let t = Instant::now();
            let n = 64;
            pool.for_each(n, &|_| {
                black_box(work(black_box(&small[..CHUNK / 4]), k, pf));
            });
            best_c = best_c.max((n * CHUNK / 4) as f64 / t.elapsed().as_secs_f64() / 1e9);
            let n = buf.len() / CHUNK;
            let t = Instant::now();
            pool.for_each(n, &|c| {
                black_box(work(&buf[c * CHUNK..(c + 1) * CHUNK], k, pf));
            });
            best_m = best_m.max(buf.len() as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
        println!(
            "k={k}: in cache {best_c:6.2} GB/s, from DRAM {best_m:6.2} GB/s ({:4.1} % of the in-cache rate)",
            100.0 * best_m / best_c
        );
    }
}
