//! Why `quant_kernels::Pool` and not rayon: the same parallel-for, timed both ways.
//!
//! `cargo run --release -p quant-kernels --example pool_vs_rayon -- [threads]`
//!
//! 1. Dispatch: an empty job of 8 items, back to back and with 20 / 200 µs of caller work
//!    between calls (decode calls the pool a few hundred times per token, that far apart).
//! 2. A decode step's products: SmolLM2-135M's per-layer q4_0 mat-vecs (576×576 ×2,
//!    192×576 ×2, 1536×576 ×2, 576×1536), one token, rows split into 8-row-multiple items,
//!    30 layers — the same kernel calls on either pool.
use std::hint::black_box;
use std::time::Instant;

use quant_kernels::registry::{act_quantizer_for, kernel_for};
use quant_kernels::Pool;

/// A parallel-for: run `f(i)` for `i in 0..n`.
type ParFor<'a> = &'a dyn Fn(usize, &(dyn Fn(usize) + Sync));

fn spin(us: u64) {
    let g = Instant::now();
    while g.elapsed().as_micros() < us as u128 {
        std::hint::spin_loop();
    }
}

fn main() {
    let threads: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let pool = Pool::new(threads);
    let rayon = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();

    for gap in [0u64, 20, 200] {
        let n = 5000;
        let t = Instant::now();
        for _ in 0..n {
            pool.for_each(8, &|i| {
                black_box(i);
            });
            spin(gap);
        }
        let ours = (t.elapsed().as_secs_f64() / n as f64 - gap as f64 * 1e-6) * 1e6;
        let t = Instant::now();
        for _ in 0..n {
            rayon.install(|| {
                use rayon::prelude::*;
                (0..8usize).into_par_iter().for_each(|i| {
                    black_box(i);
                })
            });
            spin(gap);
        }
        let theirs = (t.elapsed().as_secs_f64() / n as f64 - gap as f64 * 1e-6) * 1e6;
        println!("dispatch, {threads} threads, gap {gap:>3} us: Pool {ours:.2} us, rayon {theirs:.2} us per call");
    }

    // One decode step of SmolLM2-135M's products in q4_0.
    let t = ggml_quants::by_name("q4_0").unwrap();
    let k = kernel_for(t.id).unwrap();
    let act = ggml_quants::lookup_id(k.vec_dot_type).unwrap();
    let quant = act_quantizer_for(k.vec_dot_type).unwrap().quantize;
    let shapes = [(576usize, 576usize), (576, 576), (192, 576), (192, 576), (1536, 576), (1536, 576), (576, 1536)];
    let mats: Vec<(usize, usize, Vec<u8>, Vec<u8>)> = shapes
        .iter()
        .map(|&(rows, cols)| {
            let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0).collect();
            let wq = t.quantize_to_vec(&w, cols, None).unwrap();
            let x: Vec<f32> = (0..cols).map(|i| ((i * 31 % 100) as f32 / 50.0) - 1.0).collect();
            let mut xq = vec![0u8; act.row_size(cols).unwrap()];
            quant(&x, &mut xq);
            (rows, cols, wq, xq)
        })
        .collect();
    let step = |par: ParFor<'_>| {
        for _layer in 0..30 {
            for (rows, cols, wq, xq) in &mats {
                let rb = t.row_size(*cols).unwrap();
                let items = rows / 64;
                let y: Vec<std::sync::atomic::AtomicU32> = (0..*rows).map(|_| Default::default()).collect();
                par(items, &|i| {
                    for r in i * 64..(i + 1) * 64 {
                        let v = (k.vec_dot)(*cols, &wq[r * rb..(r + 1) * rb], xq);
                        y[r].store(v.to_bits(), std::sync::atomic::Ordering::Relaxed);
                    }
                });
                black_box(&y);
            }
        }
    };
    let ours = |n: usize, f: &(dyn Fn(usize) + Sync)| pool.for_each(n, f);
    let theirs = |n: usize, f: &(dyn Fn(usize) + Sync)| {
        rayon.install(|| {
            use rayon::prelude::*;
            (0..n).into_par_iter().for_each(f)
        })
    };
    let mut best = [f64::MAX; 2];
    for _round in 0..5 {
        for (i, par) in [&ours as ParFor<'_>, &theirs].iter().enumerate() {
            let t = Instant::now();
            for _ in 0..20 {
                step(*par);
            }
            best[i] = best[i].min(t.elapsed().as_secs_f64() / 20.0 * 1e3);
        }
    }
    println!(
        "decode step (SmolLM2-135M q4_0 products, {} backend), {threads} threads: Pool {:.3} ms, rayon {:.3} ms (rayon/Pool {:.2}x)",
        k.backend,
        best[0],
        best[1],
        best[1] / best[0]
    );
}
