//! Decode throughput of `forward_batch` with k sequences at once (k = 1, 2, 4, 8):
//! `cargo run --release -p gguf-models --example batch_decode -- MODEL [threads] [steps] [ks]`
//! (`ks`: comma-separated, default `1,2,4,8`).
//! Prints tokens/s per k and the ratio to k = 1 (rounds interleaved).

use std::sync::Arc;
use std::time::Instant;

use gguf_models::{Logits, Segment, StateOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: batch_decode MODEL [threads] [steps] [ks]")?;
    let threads: usize = args.get(2).map_or(Ok(2), |s| s.parse())?;
    let steps: usize = args.get(3).map_or(Ok(32), |s| s.parse())?;
    let (_f, model) = gguf_models::load(path)?;
    let pool = Arc::new(gguf_models::Pool::new(threads));
    let ks: Vec<usize> = match args.get(4) {
        Some(s) => s.split(',').map(|k| k.parse()).collect::<Result<_, _>>()?,
        None => vec![1, 2, 4, 8],
    };
    let mut best = vec![f64::MAX; ks.len()];
    for _round in 0..3 {
        for (ki, &k) in ks.iter().enumerate() {
            let mut states: Vec<_> = (0..k)
                .map(|_| {
                    model.new_state(&StateOptions {
                        n_ctx: 512,
                        n_threads: threads,
                        pool: Some(pool.clone()),
                        ..Default::default()
                    })
                })
                .collect::<Result<_, _>>()?;
            let prompt: Vec<u32> = (0..16).map(|i| (i * 31 + 7) % model.n_vocab() as u32).collect();
            for st in states.iter_mut() {
                model.forward(st.as_mut(), &prompt, Logits::Last)?;
            }
            let toks: Vec<[u32; 1]> = (0..k).map(|i| [(i as u32 * 17 + 3) % model.n_vocab() as u32]).collect();
            let t0 = Instant::now();
            for _ in 0..steps {
                let mut segs: Vec<Segment> = states
                    .iter_mut()
                    .zip(&toks)
                    .map(|(st, t)| Segment { state: st.as_mut(), tokens: t, logits: Logits::Last })
                    .collect();
                model.forward_batch(&mut segs)?;
            }
            let dt = t0.elapsed().as_secs_f64() / steps as f64;
            best[ki] = best[ki].min(dt);
        }
    }
    let base = 1.0 / best[0];
    for (ki, &k) in ks.iter().enumerate() {
        let tps = k as f64 / best[ki];
        println!("k={k}: step {:.2} ms, {tps:.1} tok/s, {:.2}x k=1", best[ki] * 1e3, tps / base);
    }
    Ok(())
}
