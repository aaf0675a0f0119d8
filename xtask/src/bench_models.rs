//! `cargo xtask bench`: the engine (`gguf bench`) against `llama-bench`, interleaved on
//! the same file, thread count and depth (`-d`), with a ratio table (ours / llama.cpp).
//!
//! Each round runs `gguf bench -r 1` and then `llama-bench -r 1` (both pp512 and tg64,
//! each tool doing its own warm-up), so that drift in machine load hits both sides alike;
//! the figures are the median and range over rounds, the ratios the median of the
//! per-round ratios. Ours also reports the kernel path of each weight type and decode's
//! share of the DRAM read bound, over a fresh buffer and over the weights' own pages
//! (`gguf bench --dram-bound`). Peak RSS is the child's maximum resident set size from
//! `/usr/bin/time -f %M`, for both tools. llama.cpp's load
//! time is measured through libllama (model load + context of the same size, page cache
//! warm), ours is `gguf bench`'s `load_ms`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use serde_json::Value as Json;

use crate::llama::Llama;
use crate::llama_cpp;
use crate::verify::logits::{gguf_binary, run_captured, targets, Target};

/// The models of issue 5's speed line.
pub const DEFAULT_MODELS: &[&str] =
    &["smollm2", "smollm2-q4_0", "smollm2-q8_0", "smollm2-q4_k_m", "qwen2.5-coder-0.5b"];

/// Issue 9's matrix (`--model matrix`): SmolLM2 in every type of the issue (requantized by
/// llama-quantize; Q4_1 is the real file), the two other real models, the 1–3 B bench files.
pub const MATRIX: &[&str] = &[
    "smollm2-q4_0",
    "smollm2",
    "smollm2-q5_0",
    "smollm2-q5_1",
    "smollm2-q8_0",
    "smollm2-q2_k",
    "smollm2-q3_k_m",
    "smollm2-q4_k_m",
    "smollm2-q5_k_m",
    "smollm2-q6_k",
    "smollm2-iq4_nl",
    "smollm2-iq4_xs",
    "smollm2-iq3_s",
    "smollm2-iq2_xs",
    "smollm2-mxfp4",
    "qwen2.5-coder-0.5b",
    "gemma3-270m",
    "bench",
];

/// Options of `cargo xtask bench`.
#[derive(Debug, Clone)]
pub struct BenchOpts {
    /// Model names or paths (see `verify logits --model`); empty: [`DEFAULT_MODELS`].
    pub models: Vec<String>,
    /// Threads, both sides.
    pub threads: usize,
    /// Rounds (each runs both tools once).
    pub rounds: usize,
    /// Prompt length of the pp test.
    pub n_prompt: usize,
    /// Generated tokens of the tg test.
    pub n_gen: usize,
    /// Tokens in the context before each test (llama-bench's `-d`).
    pub depth: usize,
    /// Write the markdown table here too.
    pub md: Option<PathBuf>,
    /// Only llama.cpp's side (reference numbers before the engine exists).
    pub llama_only: bool,
    /// The `gguf` binary (default `target/release/gguf`).
    pub gguf: Option<PathBuf>,
}

#[derive(Debug, Default, Clone)]
struct Side {
    pp: Vec<f64>,
    tg: Vec<f64>,
    load_ms: Vec<f64>,
    peak_rss: u64,
    /// Ours: decode's share of the DRAM read bound, per round.
    dram: Vec<f64>,
    /// Ours: decode's share of the same loop over the weights' own pages, per round.
    pages: Vec<f64>,
    /// Ours: decode tokens' median share of a pass over the weights' pages right after each,
    /// per round.
    paired: Vec<f64>,
    /// Ours: `type: kernel path` of each weight type.
    kernels: String,
}

/// The median (the mean of the middle two for an even count); NaN when empty.
fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `cmd` under `/usr/bin/time -f %M`; returns (stdout, peak RSS bytes).
fn timed(program: &Path, args: &[String], env: &[(&str, &Path)]) -> Result<(Vec<u8>, u64)> {
    let rss_file = std::env::temp_dir().join(format!("xtask-bench-rss-{}", std::process::id()));
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-f").arg("%M").arg("-o").arg(&rss_file).arg(program).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (ok, stdout, stderr) = run_captured(&mut cmd, Duration::from_secs(1800))?;
    let rss_kb: u64 = std::fs::read_to_string(&rss_file)
        .ok()
        .and_then(|s| s.lines().rev().find_map(|l| l.trim().parse().ok()))
        .unwrap_or(0);
    let _ = std::fs::remove_file(&rss_file);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    ensure!(ok, "{} failed: {}", program.display(), lines[lines.len().saturating_sub(3)..].join(" / "));
    Ok((stdout, rss_kb * 1024))
}

/// The JSON value printed last on stdout (an object or an array).
fn last_json(stdout: &[u8]) -> Result<Json> {
    let text = String::from_utf8_lossy(stdout);
    let start = text.find(['{', '[']).context("no JSON on stdout")?;
    serde_json::from_str(text[start..].trim()).context("bad JSON on stdout")
}

/// (pp tokens/s, tg tokens/s) from a list of `{"n_prompt","n_gen","avg_ts"}` results.
fn pp_tg(results: &[Json]) -> Result<(f64, f64)> {
    let find = |pp: bool| {
        results
            .iter()
            .find(|r| {
                let (np, ng) = (r["n_prompt"].as_u64().unwrap_or(0), r["n_gen"].as_u64().unwrap_or(0));
                if pp {
                    np > 0 && ng == 0
                } else {
                    np == 0 && ng > 0
                }
            })
            .and_then(|r| r["avg_ts"].as_f64())
            .with_context(|| format!("no {} result with avg_ts", if pp { "pp" } else { "tg" }))
    };
    Ok((find(true)?, find(false)?))
}

fn llama_round(bin: &Path, model: &Path, o: &BenchOpts) -> Result<(f64, f64, u64)> {
    let args: Vec<String> = vec![
        "-m".into(),
        model.display().to_string(),
        "-t".into(),
        o.threads.to_string(),
        "-p".into(),
        o.n_prompt.to_string(),
        "-n".into(),
        o.n_gen.to_string(),
        "-d".into(),
        o.depth.to_string(),
        "-r".into(),
        "1".into(),
        "-o".into(),
        "json".into(),
    ];
    let lib = bin.parent().context("no bin dir")?;
    let (stdout, rss) = timed(bin, &args, &[("LD_LIBRARY_PATH", lib)])?;
    let v = last_json(&stdout)?;
    let arr = v.as_array().context("llama-bench -o json: not an array")?;
    let (pp, tg) = pp_tg(arr)?;
    Ok((pp, tg, rss))
}

/// One `gguf bench` run: pp, tg, its result JSON, peak RSS.
struct OursRound {
    pp: f64,
    tg: f64,
    load_ms: f64,
    rss: u64,
    dram_fraction: f64,
    pages_fraction: f64,
    /// Decode tokens' median share of a read pass over the weights' pages right after each.
    paired: f64,
    kernels: String,
}

/// One `gguf bench` run; with `dram`, also its DRAM read bound (a stream-read loop over 4×
/// the largest cache: such a run's peak RSS is not the engine's, so the timed rounds go
/// without it).
fn ours_round(bin: &Path, model: &Path, o: &BenchOpts, dram: bool) -> Result<OursRound> {
    let mut args: Vec<String> = vec![
        "bench".into(),
        "-m".into(),
        model.display().to_string(),
        "-t".into(),
        o.threads.to_string(),
        "-p".into(),
        o.n_prompt.to_string(),
        "-n".into(),
        o.n_gen.to_string(),
        "-d".into(),
        o.depth.to_string(),
        "-r".into(),
        "1".into(),
        "--json".into(),
    ];
    if dram {
        args.push("--dram-bound".into());
    }
    let (stdout, rss) = timed(bin, &args, &[])?;
    let v = last_json(&stdout)?;
    let results = v["results"].as_array().context("gguf bench --json: no results array")?;
    let (pp, tg) = pp_tg(results)?;
    let load_ms = v["load_ms"].as_f64().unwrap_or(f64::NAN);
    let gen_result = |key: &str| {
        results.iter().find(|r| r["n_prompt"].as_u64() == Some(0)).and_then(|r| r[key].as_f64()).unwrap_or(f64::NAN)
    };
    let (dram_fraction, pages_fraction) = (gen_result("dram_bound_fraction"), gen_result("weights_bound_fraction"));
    let paired = gen_result("weights_bound_fraction_paired");
    let kernels = v["weights"]["types"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| format!("{} {}", t["type"].as_str().unwrap_or("?"), t["kernel"].as_str().unwrap_or("?")))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    Ok(OursRound { pp, tg, load_ms, rss, dram_fraction, pages_fraction, paired, kernels })
}

/// llama.cpp's load time: model + a context for pp + tg, through libllama.
fn llama_load_ms(ll: &Llama, model: &Path, o: &BenchOpts) -> Result<f64> {
    let t = Instant::now();
    let m = ll.model(model)?;
    let ctx = m.context((o.n_prompt + o.n_gen) as u32, o.threads as i32)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    drop(ctx);
    drop(m);
    Ok(ms)
}

/// `cargo xtask bench`.
pub fn run(cache: &Path, o: &BenchOpts) -> Result<()> {
    // `XTASK_LLAMA_BUILD_DIR` names another build of the pinned source (an AVX2-only one
    // beside `GGUF_CPU_FEATURES=avx2`): its llama-bench runs the rounds.
    let llama_bench = llama_cpp::loaded_build_dir(cache).join("bin").join("llama-bench");
    ensure!(llama_bench.is_file(), "no {}: run `cargo xtask llama-cpp`", llama_bench.display());
    ensure!(Path::new("/usr/bin/time").is_file(), "/usr/bin/time (GNU time) is needed for peak RSS");
    let gguf = if o.llama_only { None } else { Some(gguf_binary(o.gguf.as_deref())?) };
    let ll = Llama::load(cache)?;
    let names: Vec<String> = if o.models.is_empty() {
        DEFAULT_MODELS.iter().map(|s| s.to_string()).collect()
    } else {
        o.models
            .iter()
            .flat_map(|m| if m == "matrix" { MATRIX.iter().map(|s| s.to_string()).collect() } else { vec![m.clone()] })
            .collect()
    };
    let models = targets(cache, &names, false, crate::synth::SEED)?;
    let mut rows = Vec::new();
    for t in &models {
        eprintln!(
            "== {} ({}), -t {}, -d {}, {} rounds, load average {}",
            t.label,
            t.path.display(),
            o.threads,
            o.depth,
            o.rounds,
            load_average()
        );
        let mut ours = Side::default();
        let mut theirs = Side::default();
        for round in 0..o.rounds.max(1) {
            if let Some(bin) = &gguf {
                match ours_round(bin, &t.path, o, false) {
                    Ok(r) => {
                        ours.pp.push(r.pp);
                        ours.tg.push(r.tg);
                        ours.load_ms.push(r.load_ms);
                        ours.peak_rss = ours.peak_rss.max(r.rss);
                        if round == 0 {
                            eprintln!("  kernels: {}", r.kernels);
                        }
                        ours.kernels = r.kernels;
                        eprintln!(
                            "  round {round}: ours  pp {:8.1} t/s  tg {:7.2} t/s  load {:.0} ms  rss {} MiB",
                            r.pp,
                            r.tg,
                            r.load_ms,
                            r.rss >> 20
                        );
                    }
                    Err(e) => eprintln!("  round {round}: ours failed: {e:#}"),
                }
            }
            let (pp, tg, rss) = llama_round(&llama_bench, &t.path, o)?;
            theirs.pp.push(pp);
            theirs.tg.push(tg);
            theirs.peak_rss = theirs.peak_rss.max(rss);
            theirs.load_ms.push(llama_load_ms(&ll, &t.path, o)?);
            eprintln!(
                "  round {round}: llama pp {pp:8.1} t/s  tg {tg:7.2} t/s  load {:.0} ms  rss {} MiB",
                theirs.load_ms.last().unwrap(),
                rss >> 20
            );
        }
        // The DRAM bound in a run of its own (its buffer would count in the rounds' RSS).
        if let Some(bin) = &gguf {
            match ours_round(bin, &t.path, o, true) {
                Ok(r) => {
                    eprintln!(
                        "  DRAM-bound run: tg {:.2} t/s, {:.0} % of the read bound, {:.0} % of the weights' pages' bound, tokens against a pass after each {:.0} %",
                        r.tg,
                        r.dram_fraction * 100.0,
                        r.pages_fraction * 100.0,
                        r.paired * 100.0
                    );
                    ours.dram.push(r.dram_fraction);
                    ours.pages.push(r.pages_fraction);
                    ours.paired.push(r.paired);
                }
                Err(e) => eprintln!("  DRAM-bound run failed: {e:#}"),
            }
        }
        rows.push((t.clone(), ours, theirs));
    }
    let md = render(&rows, o);
    print!("{md}");
    if let Some(path) = &o.md {
        std::fs::write(path, &md).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if gguf.is_some() && rows.iter().any(|(_, ours, _)| ours.pp.is_empty()) {
        bail!("gguf bench failed on some models (see above)");
    }
    Ok(())
}

/// The 1-minute load average (`/proc/loadavg`), or "?".
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn render(rows: &[(Target, Side, Side)], o: &BenchOpts) -> String {
    let mut s = String::new();
    let (pp, tg) = (format!("pp{}", o.n_prompt), format!("tg{}", o.n_gen));
    let _ = writeln!(
        s,
        "\nEngine vs llama.cpp (`cargo xtask bench`), -t {}, -d {}, {} interleaved rounds: tokens/s median (min–max); \
         ratio = median of the per-round ratios (their range); DRAM = decode's share of the measured DRAM read bound: a stream-read loop over a fresh buffer / over the weights' own pages \
         / decode tokens each against a pass over the weights' pages right after it, median (a separate run after the rounds; peak RSS from the rounds)\n",
        o.threads, o.depth, o.rounds
    );
    let _ = writeln!(
        s,
        "| model | file MiB | {pp} ours | {pp} llama.cpp | ratio | {tg} ours | {tg} llama.cpp | ratio | DRAM ours | load ms ours / llama.cpp | peak RSS MiB ours / llama.cpp |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let lo = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let fmt = |v: &[f64]| {
        let m = median(v);
        if m.is_nan() {
            "-".to_string()
        } else {
            format!("{m:.1} ({:.1}–{:.1})", lo(v), hi(v))
        }
    };
    let ratio = |a: &[f64], b: &[f64]| {
        let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).filter(|x| x.is_finite()).collect();
        if r.is_empty() {
            "-".into()
        } else {
            format!("{:.2}× ({:.2}–{:.2})", median(&r), lo(&r), hi(&r))
        }
    };
    for (t, ours, theirs) in rows {
        let size = std::fs::metadata(&t.path).map(|m| m.len() as f64 / 1048576.0).unwrap_or(f64::NAN);
        let rss = |b: u64| if b == 0 { "-".to_string() } else { format!("{:.0}", b as f64 / 1048576.0) };
        let pct = |v: &[f64]| {
            let m = median(v);
            if m.is_nan() {
                "-".to_string()
            } else {
                format!("{:.0} %", m * 100.0)
            }
        };
        let dram = format!("{} / {} / {}", pct(&ours.dram), pct(&ours.pages), pct(&ours.paired));
        let _ = writeln!(
            s,
            "| {} | {size:.0} | {} | {} | {} | {} | {} | {} | {} | {:.0} / {:.0} | {} / {} |",
            t.label,
            fmt(&ours.pp),
            fmt(&theirs.pp),
            ratio(&ours.pp, &theirs.pp),
            fmt(&ours.tg),
            fmt(&theirs.tg),
            ratio(&ours.tg, &theirs.tg),
            dram,
            median(&ours.load_ms),
            median(&theirs.load_ms),
            rss(ours.peak_rss),
            rss(theirs.peak_rss),
        );
    }
    let with_kernels: Vec<_> = rows.iter().filter(|(_, ours, _)| !ours.kernels.is_empty()).collect();
    if !with_kernels.is_empty() {
        let _ = writeln!(s, "\nKernel path per weight type (ours, this CPU{}):\n", cap_note());
        for (t, ours, _) in with_kernels {
            let _ = writeln!(s, "- {}: {}", t.label, ours.kernels);
        }
    }
    s
}

/// `, GGUF_CPU_FEATURES=…` when the kernels are capped.
fn cap_note() -> String {
    std::env::var("GGUF_CPU_FEATURES").map(|v| format!(", GGUF_CPU_FEATURES={v}")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pp_tg_picks_the_right_rows() {
        let v: Json = serde_json::from_str(
            r#"[{"n_prompt":512,"n_gen":0,"avg_ts":100.5},{"n_prompt":0,"n_gen":64,"avg_ts":20.25}]"#,
        )
        .unwrap();
        assert_eq!(pp_tg(v.as_array().unwrap()).unwrap(), (100.5, 20.25));
        assert!(pp_tg(&v.as_array().unwrap()[..1]).is_err());
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(median(&[f64::NAN, 5.0]), 5.0);
    }

    #[test]
    fn last_json_skips_leading_text() {
        assert_eq!(last_json(b"loading...\n{\"a\":1}\n").unwrap()["a"], 1);
    }
}
