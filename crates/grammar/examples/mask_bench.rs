//! Per-token mask time of JSON-schema (and GBNF) constraints on the cached models'
//! vocabularies, driven by the tests' deterministic random sampler.
//!
//! `cargo run --release -p gguf-grammar --example mask_bench [-- --seeds N --max-tokens N]`
//!
//! For each vocabulary: the time to build the [`gguf_grammar::Vocab`], each schema's compile
//! time, and over every decoding step: the mask computation (`is_allowed`, which
//! computes the mask) and the masking of the logits (`apply` with the mask cached), as
//! mean / p50 / p99 / max. The CPU and load are printed first.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gguf_grammar::{Constraint, Spec, Vocab};

const MODELS: &[&str] =
    &["SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "gemma-3-270m-q4_k_m.gguf"];

fn stats(label: &str, times: &mut [Duration]) {
    times.sort();
    let n = times.len().max(1) as f64;
    let mean = times.iter().sum::<Duration>().as_secs_f64() * 1e6 / n;
    let max = times.last().map_or(0.0, |d| d.as_secs_f64() * 1e6);
    println!(
        "  {label:<36} n={:<6} mean {mean:>7.1} us  p50 {:>7.1} us  p99 {:>7.1} us  max {max:>8.1} us",
        times.len(),
        common::percentile_us(times, 50.0),
        common::percentile_us(times, 99.0),
    );
}

fn cpu_info() {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |k: &str| {
        info.lines().find(|l| l.starts_with(k)).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string())
    };
    let cores = info.lines().filter(|l| l.starts_with("processor")).count();
    println!("cpu: {} ({cores} logical cores)", field("model name").unwrap_or_else(|| "?".into()));
    if let Some(flags) = field("flags") {
        let want = ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_tile"];
        let have: Vec<&str> = want.iter().copied().filter(|f| flags.split(' ').any(|x| x == *f)).collect();
        println!("cpu flags (selected): {}", have.join(" "));
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average: {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
}

struct Times {
    mask: Vec<Duration>,
    apply: Vec<Duration>,
}

/// One generation: like `common::drive`, timing the mask computation and the masking apart.
fn generate(v: &Arc<Vocab>, c: &mut Constraint, seed: u64, max_tokens: usize, eos_bias: f32, t: &mut Times) -> bool {
    let mut rng = common::Rng(seed);
    let mut logits = vec![0f32; v.n_vocab()];
    for _ in 0..max_tokens {
        for l in logits.iter_mut() {
            *l = rng.next_f32();
        }
        for &e in v.eos() {
            logits[e as usize] += eos_bias;
        }
        let t0 = Instant::now();
        c.is_allowed(0).expect("mask");
        let t1 = Instant::now();
        c.apply(&mut logits).expect("apply");
        let t2 = Instant::now();
        t.mask.push(t1 - t0);
        t.apply.push(t2 - t1);
        let tok = (0..logits.len()).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap() as u32;
        c.accept(tok).expect("accept");
        if v.is_eos(tok) || c.is_finished() {
            return true;
        }
    }
    false
}

fn main() {
    let mut seeds = 10u64;
    let mut max_tokens = 3000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = || args.next().and_then(|s| s.parse::<u64>().ok()).expect("a number");
        match a.as_str() {
            "--seeds" => seeds = num(),
            "--max-tokens" => max_tokens = num() as usize,
            _ => panic!("unknown argument {a} (known: --seeds N, --max-tokens N)"),
        }
    }
    cpu_info();
    let json_gbnf = common::llama_cpp_grammars().and_then(|d| std::fs::read_to_string(d.join("json.gbnf")).ok());
    for file in MODELS {
        let t0 = Instant::now();
        let Some(v) = common::model_vocab(file) else { continue };
        println!("\n{file}: {} tokens, Vocab built in {:.0} ms", v.n_vocab(), t0.elapsed().as_secs_f64() * 1e3);
        let mut all = Times { mask: Vec::new(), apply: Vec::new() };
        let mut specs: Vec<(String, Spec, f32)> =
            common::schemas().into_iter().map(|(n, s)| (format!("schema {n}"), Spec::JsonSchema(s), 0.0)).collect();
        specs.push(("json_object".into(), Spec::JsonObject, 0.9));
        let mut compile = Vec::new();
        let mut unfinished = 0;
        for (name, spec, eos_bias) in &specs {
            let mut t = Times { mask: Vec::new(), apply: Vec::new() };
            let mut open = 0;
            for seed in 0..seeds {
                let c0 = Instant::now();
                let mut c = Constraint::new(&v, spec).expect("compile");
                compile.push(c0.elapsed());
                if !generate(&v, &mut c, seed, max_tokens, *eos_bias, &mut t) {
                    open += 1;
                }
            }
            unfinished += open;
            let note = if open > 0 { format!(" ({open} unfinished)") } else { String::new() };
            stats(&format!("{name} mask{note}"), &mut t.mask);
            all.mask.extend(t.mask);
            all.apply.extend(t.apply);
        }
        println!("  -- all JSON ({} runs, {unfinished} hit --max-tokens):", specs.len() as u64 * seeds);
        stats("mask computation", &mut all.mask);
        stats("logit masking", &mut all.apply);
        let mut total: Vec<Duration> = all.mask.iter().zip(&all.apply).map(|(a, b)| *a + *b).collect();
        stats("apply total", &mut total);
        stats("grammar compile", &mut compile);
        if let Some(src) = &json_gbnf {
            let spec = Spec::Gbnf(src.clone());
            let mut t = Times { mask: Vec::new(), apply: Vec::new() };
            for seed in 0..seeds {
                let mut c = Constraint::new(&v, &spec).expect("json.gbnf");
                generate(&v, &mut c, seed, max_tokens.min(500), 0.9, &mut t);
            }
            stats("GBNF json.gbnf mask", &mut t.mask);
        }
    }
}
