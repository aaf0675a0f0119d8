//! `gguf bench`: prompt processing and generation speed, like llama-bench.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use models::Logits;

use crate::engine::{load, peak_rss, state_with_ctx, threads, Loaded, ModelArgs, INTERRUPTED};

/// Parameters of the model: elements of every tensor (llama-bench's `model_n_params`).
fn n_params(l: &Loaded) -> u64 {
    l.file.tensors().iter().fold(0u64, |a, t| a.saturating_add(t.n_elements))
}

/// llama-bench's `params` column: "134.52 M", "1.54 B".
fn human_params(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.2} B", n as f64 / 1e9)
    } else {
        format!("{:.2} M", n as f64 / 1e6)
    }
}

/// `gguf bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Prompt tokens per pp test, a comma list as llama-bench takes (0 = skip).
    #[arg(short = 'p', long = "n-prompt", value_delimiter = ',', default_value = "512")]
    n_prompt: Vec<usize>,
    /// Generated tokens per tg test, a comma list (0 = skip).
    #[arg(short = 'n', long = "n-gen", value_delimiter = ',', default_value = "128")]
    n_gen: Vec<usize>,
    /// A prompt then generation test `PP,TG` (llama-bench's `-pg`, repeatable): "ppPP+tgTG".
    #[arg(long = "pg", value_parser = parse_pg)]
    pg: Vec<(usize, usize)>,
    /// Repetitions.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    reps: usize,
    /// Output format, as llama-bench's `-o`: md, json (an array of tests with llama-bench's
    /// field names), jsonl, csv.
    #[arg(short = 'o', long = "output", default_value = "md", value_parser = ["md", "json", "jsonl", "csv"])]
    output: String,
    /// Print one JSON object (this tool's summary form).
    #[arg(long)]
    json: bool,
}

/// `-pg PP,TG`.
fn parse_pg(s: &str) -> std::result::Result<(usize, usize), String> {
    let (a, b) = s.split_once(',').ok_or_else(|| format!("{s:?}: expected PP,TG (e.g. 512,128)"))?;
    let n = |x: &str| x.trim().parse::<usize>().map_err(|e| format!("{s:?}: {e}"));
    Ok((n(a)?, n(b)?))
}

fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    let v = if xs.len() > 1 { xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (m, v.sqrt())
}

/// `gguf bench`: prompt processing (one batch of `-p` tokens) and generation (`-n`
/// single-token steps from an empty context), like llama-bench.
pub fn run(args: &BenchArgs) -> Result<()> {
    let l = load(&args.model)?;
    let threads = threads(args.model.threads)?;
    let n_vocab = l.model.n_vocab() as u32;
    let tok = |i: usize| ((i as u64 * 2654435761) % n_vocab as u64) as u32;
    let mut results = Vec::new();
    // llama-bench's order: every pp, every tg, every pp+tg
    let mut tests = Vec::new();
    for &np in args.n_prompt.iter().filter(|&&n| n > 0) {
        tests.push((format!("pp{np}"), np, 0));
    }
    for &ng in args.n_gen.iter().filter(|&&n| n > 0) {
        tests.push((format!("tg{ng}"), 0, ng));
    }
    for &(np, ng) in args.pg.iter().filter(|p| p.0 + p.1 > 0) {
        tests.push((format!("pp{np}+tg{ng}"), np, ng));
    }
    let longest = tests.iter().map(|t| t.1 + t.2).max().unwrap_or(1);
    let n_ctx = args.model.ctx_size.unwrap_or(longest).max(1);
    let mut st = state_with_ctx(&l, &args.model, n_ctx)?;
    // warm-up, as llama-bench does
    l.model.forward(st.as_mut(), &[tok(0)], Logits::Last)?;
    for (name, np, ng) in tests {
        let mut samples = Vec::new();
        for _ in 0..args.reps.max(1) {
            st.truncate(0);
            let t0 = Instant::now();
            if np > 0 {
                let toks: Vec<u32> = (0..np).map(tok).collect();
                l.model.forward(st.as_mut(), &toks, Logits::Last)?;
            }
            for i in 0..ng {
                l.model.forward(st.as_mut(), &[tok(i)], Logits::Last)?;
            }
            samples.push((np + ng) as f64 / t0.elapsed().as_secs_f64());
            if INTERRUPTED.load(Ordering::Relaxed) {
                bail!("interrupted (Ctrl-C)");
            }
        }
        let (avg, sd) = mean_std(&samples);
        results.push((name, np, ng, avg, sd, samples));
    }
    let path = l.file.first().path().display().to_string();
    if args.json {
        let v = serde_json::json!({
            "model": path,
            "n_threads": threads,
            "load_ms": l.load_ms,
            "peak_rss_bytes": peak_rss(),
            "results": results.iter().map(|(name, np, ng, avg, sd, s)| serde_json::json!({
                "test": name, "n_prompt": np, "n_gen": ng, "avg_ts": avg, "stddev_ts": sd, "samples_ts": s
            })).collect::<Vec<_>>(),
        });
        println!("{v}");
    } else if args.output == "md" {
        let size = l.file.total_size() as f64 / 1048576.0;
        let params = human_params(n_params(&l));
        println!("| model | size | params | backend | threads | test | t/s |");
        println!("| --- | ---: | ---: | --- | ---: | ---: | ---: |");
        let name = Path::new(&path).file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or(path.clone());
        for (test, _, _, avg, sd, _) in &results {
            println!("| {name} | {size:.2} MiB | {params} | CPU | {threads} | {test} | {avg:.2} ± {sd:.2} |");
        }
        eprintln!("load {:.0} ms, peak RSS {:.1} MiB", l.load_ms, peak_rss() as f64 / 1048576.0);
    } else {
        // llama-bench's field names (tools/llama-bench: `test::get_fields`), the ones that apply
        let rows: Vec<serde_json::Value> = results
            .iter()
            .map(|(_, np, ng, avg, sd, s)| {
                let ns: Vec<u64> = s.iter().map(|ts| ((np + ng) as f64 / ts * 1e9) as u64).collect();
                let (avg_ns, sd_ns) = mean_std(&ns.iter().map(|&x| x as f64).collect::<Vec<_>>());
                serde_json::json!({
                    "model_filename": path, "model_size": l.file.total_size(), "model_n_params": n_params(&l),
                    "backends": "CPU", "n_threads": threads, "type_k": args.model.cache_type_k,
                    "type_v": args.model.cache_type_v, "n_ubatch": args.model.ubatch, "n_prompt": np, "n_gen": ng,
                    "avg_ns": avg_ns as u64, "stddev_ns": sd_ns as u64, "avg_ts": avg, "stddev_ts": sd,
                    "samples_ns": ns, "samples_ts": s,
                })
            })
            .collect();
        match args.output.as_str() {
            "json" => println!("{}", serde_json::to_string_pretty(&rows)?),
            "jsonl" => rows.iter().for_each(|r| println!("{r}")),
            _ => {
                let keys = [
                    "model_filename",
                    "model_size",
                    "model_n_params",
                    "n_threads",
                    "n_prompt",
                    "n_gen",
                    "avg_ns",
                    "stddev_ns",
                    "avg_ts",
                    "stddev_ts",
                ];
                println!("{}", keys.join(","));
                for r in &rows {
                    let cells: Vec<String> = keys
                        .iter()
                        .map(|k| match &r[*k] {
                            serde_json::Value::String(s) => format!("\"{}\"", s.replace('"', "\"\"")),
                            v => v.to_string(),
                        })
                        .collect();
                    println!("{}", cells.join(","));
                }
            }
        }
    }
    Ok(())
}
