//! Embedding the engine without the CLI: load a GGUF model, evaluate token ids, print
//! the most likely next tokens and greedy continuation ids.
//!
//! `cargo run --release -p gguf-models --example forward -- MODEL.gguf 1 2 3 [-t THREADS] [-n GEN]`

use std::time::Instant;

use gguf_models::{Logits, StateOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: forward MODEL.gguf TOKEN... [-t N] [-n N]")?;
    let (mut tokens, mut threads, mut n_gen) = (Vec::new(), 2usize, 8usize);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-t" => threads = args.next().ok_or("-t needs a value")?.parse()?,
            "-n" => n_gen = args.next().ok_or("-n needs a value")?.parse()?,
            _ => tokens.push(a.parse::<u32>()?),
        }
    }
    let t0 = Instant::now();
    let (_file, model) = gguf_models::load(&path)?;
    eprintln!("{} (loaded in {:.0} ms)", model.describe(), t0.elapsed().as_secs_f64() * 1e3);
    let mut st = model.new_state(&StateOptions { n_ctx: 1024, n_threads: threads, ..Default::default() })?;
    let t1 = Instant::now();
    let mut logits = model.forward(st.as_mut(), &tokens, Logits::Last)?;
    let pp = t1.elapsed().as_secs_f64();
    let mut top: Vec<(usize, f32)> = logits.iter().copied().enumerate().collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("top-5 after the prompt: {:?}", &top[..5]);
    let t2 = Instant::now();
    let mut gen = Vec::new();
    for _ in 0..n_gen {
        let id = gguf_models::sampling::argmax(&logits);
        gen.push(id);
        logits = model.forward(st.as_mut(), &[id], Logits::Last)?;
    }
    let tg = t2.elapsed().as_secs_f64();
    println!("greedy: {gen:?}");
    eprintln!("prompt {:.1} tok/s, generation {:.1} tok/s", tokens.len() as f64 / pp, n_gen as f64 / tg);
    Ok(())
}
