//! Pool overhead: `cargo run --release -p quant-kernels --example poolbench -- [threads]`.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

fn main() {
    let threads: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let pool = quant_kernels::Pool::new(threads);
    let hits = AtomicUsize::new(0);
    for gap_us in [0u64, 20, 200] {
        let n = 3000;
        let mut worst = 0f64;
        let t0 = Instant::now();
        for _ in 0..n {
            let t = Instant::now();
            pool.for_each(8, &|_| {
                hits.fetch_add(1, Ordering::Relaxed);
            });
            worst = worst.max(t.elapsed().as_secs_f64());
            if gap_us > 0 {
                let g = Instant::now();
                while g.elapsed().as_micros() < gap_us as u128 {
                    std::hint::spin_loop();
                }
            }
        }
        let per = (t0.elapsed().as_secs_f64() - n as f64 * gap_us as f64 * 1e-6) / n as f64;
        println!(
            "threads {threads} gap {gap_us:>3} us: {:.2} us per for_each (worst {:.1} us)",
            per * 1e6,
            worst * 1e6
        );
    }
}
