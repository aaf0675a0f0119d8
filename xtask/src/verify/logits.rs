//! `cargo xtask verify logits`: this project's engine (`gguf run` / `gguf logits`) against
//! libllama on the same files and the same tokens.
//!
//! For every model and prompt:
//! - **greedy**: llama.cpp tokenizes the prompt as `llama-completion` does and generates
//!   32 tokens greedily (argmax, stop at end-of-generation); ours is
//!   `gguf run -m FILE -p PROMPT -n 32 --temp 0 --json`. A prompt passes when both
//!   token sequences are identical over the first 32 generated tokens.
//! - **logits**: over one token sequence (llama.cpp's prompt tokens + its greedy
//!   continuation), llama.cpp decodes it in one batch with logits at every position and
//!   ours runs `gguf logits --tokens ... -o OUT`. Per position: KL(llama.cpp ‖ ours) over
//!   the full vocabulary, in f64 with a max-shifted log-softmax, and whether the argmax
//!   agrees.
//!
//! Acceptance (issue 5): greedy identical in ≥ 15 of 16 prompts, mean KL < 1e-3, top-1
//! agreement ≥ 99 %. Requantized SmolLM2 files are held to the KL and top-1 lines only;
//! their greedy count is reported in the note.
//!
//! `--self-check` replaces "ours" by llama.cpp itself on one thread (the harness's own
//! noise floor: it must pass with KL ≈ 0).
//!
//! Diagnosis knobs (environment): `XTASK_LLAMA_FLASH_ATTN=on|off|auto` and
//! `XTASK_LLAMA_CACHE_TYPE=f32|f16|q8_0` change the reference context,
//! `XTASK_SELF_FLASH_ATTN` / `XTASK_SELF_CACHE_TYPE` the other side of `--self-check`
//! (to measure how far two llama.cpp settings are apart), `XTASK_LLAMA_NO_REPACK=1` turns
//! off llama.cpp's weight repacking, and `XTASK_GGUF_ARGS` appends arguments to
//! `gguf run` / `gguf logits` (e.g. `--cache-type-k f32 --cache-type-v f32`).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use serde_json::Value as Json;

use super::{Check, Report, Status};
use crate::llama::{self, CtxOpts, Llama, Token};
use crate::{models, requant, synth};

/// Generated tokens compared per prompt.
pub const N_GEN: usize = 32;
/// Context used on both sides (every prompt + 32 tokens fits).
pub const N_CTX: u32 = 1024;
const GROUP_GREEDY: &str = "logits: greedy, first 32 tokens identical";
const GROUP_KL: &str = "logits: KL(llama.cpp || ours) and top-1 over every position";

/// The prompts: prose, code, chat-formatted, multilingual, numbers, short and long.
pub const PROMPTS: &[&str] = &[
    "The capital of France is",
    "Once upon a time, in a small village at the edge of a vast forest, there lived an old clockmaker who",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the boiling point of water at sea level?<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 5, 8, 13, 21, 34,",
    "Translate to French: The weather is nice today and I would like to go for a walk.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Auf Deutsch bedeutet das",
    "日本の首都は東京です。東京には多くの",
    "#include <stdio.h>\n\nint main(void) {\n    for (int i = 0; i < 10; i++) {\n",
    "Q: If a train travels 120 kilometres in 1.5 hours, what is its average speed?\nA:",
    "Hi",
    "SELECT name, COUNT(*) AS n FROM orders JOIN customers ON orders.customer_id = customers.id GROUP BY",
    "<|im_start|>user\nWrite a haiku about autumn leaves.<|im_end|>\n<|im_start|>assistant\n",
    "El sol brillaba sobre el mar mientras los pescadores",
    "{\"name\": \"Alice\", \"age\": 30, \"languages\": [\"en\", \"fr\"], \"address\": {\"city\":",
    "In 1969, Apollo 11 landed on the Moon. The mission's commander, Neil Armstrong, became the first person to \
walk on the lunar surface, followed by Buzz Aldrin. Michael Collins remained in lunar orbit aboard the command \
module Columbia. The landing site, in the Sea of Tranquility, was chosen because it was relatively flat and \
smooth, based on images from earlier robotic missions. The astronauts spent about two and a half hours outside \
the spacecraft, collecting 21.5 kilograms of lunar material, deploying scientific instruments and planting a \
flag. The return journey began the next day, and the crew splashed down in the Pacific Ocean on 24 July 1969, \
where they were recovered by the aircraft carrier USS Hornet. The mission fulfilled a national goal set by \
President John F. Kennedy in 1961. Looking back on the achievement decades later, historians often point out that",
    "fn main() {\n    let v: Vec<u32> = (1..=10).map(|x| x * x).collect();\n    println!(\"{:?}\", v.iter().sum::<u32>());\n",
    "Привет! Как у тебя дела? Сегодня я хочу рассказать",
];

/// The options of `verify logits`.
#[derive(Debug, Clone)]
pub struct LogitsOpts {
    /// Four prompts, and no requantized files unless named.
    pub quick: bool,
    /// Model names (`smollm2`, `gemma3-270m`, `qwen2.5-coder-0.5b`, `qwen3`, `qwen3moe`,
    /// `smollm2-q4_0`, ..., or the groups `real`, `synth`, `requant`) or file paths; empty: all.
    pub models: Vec<String>,
    /// Threads on both sides.
    pub threads: usize,
    /// Compare llama.cpp against itself on one thread instead of running `gguf`.
    pub self_check: bool,
    /// The `gguf` binary (default `target/release/gguf`).
    pub gguf: Option<PathBuf>,
    /// Seed of the synthetic models.
    pub synth_seed: u64,
}

/// One model under test.
#[derive(Debug, Clone)]
pub struct Target {
    /// Short name in the tables.
    pub label: String,
    /// The file.
    pub path: PathBuf,
    /// `real`, `synth`, `requant` or `file`.
    pub kind: &'static str,
}

/// Makes (fetches, writes, requantizes) a model file on demand.
type MakeFile = Box<dyn Fn() -> Result<PathBuf>>;

/// Resolves the model list (fetching, generating or requantizing files on first use).
pub fn targets(cache: &Path, names: &[String], quick: bool, synth_seed: u64) -> Result<Vec<Target>> {
    let mut all: Vec<(String, &'static str, MakeFile)> = Vec::new();
    for m in models::MODELS.iter() {
        all.push((m.name.to_string(), "real", Box::new(move || models::ensure_model(m))));
    }
    for &arch in synth::ARCHS {
        let cache = cache.to_path_buf();
        all.push((arch.to_string(), "synth", Box::new(move || synth::ensure_synth(&cache, arch, synth_seed))));
    }
    for &ft in requant::FTYPES {
        all.push((
            format!("smollm2-{}", ft.to_ascii_lowercase()),
            "requant",
            Box::new(move || requant::ensure_requant(ft)),
        ));
    }
    all.push((
        "smollm2-mxfp4".to_string(),
        "requant",
        Box::new(|| crate::requant_imatrix::ensure(&crate::requant_imatrix::MXFP4_ALL)),
    ));
    // Only by name (or their group): not part of the default run.
    for rq in crate::requant_imatrix::FTYPES.iter().filter(|r| r.name.starts_with("IQ") && r.imatrix) {
        all.push((
            format!("smollm2-{}", rq.name.to_ascii_lowercase()),
            "requant-iq",
            Box::new(move || crate::requant_imatrix::ensure(rq)),
        ));
    }
    for (label, fam, ftype) in crate::bench_files::labels() {
        let cache = cache.to_path_buf();
        all.push((label, "bench", Box::new(move || crate::bench_files::ensure(&cache, fam, ftype))));
    }
    let mut out = Vec::new();
    let mut add = |label: &str, kind: &'static str, path: PathBuf| {
        if !out.iter().any(|t: &Target| t.path == path) {
            out.push(Target { label: label.to_string(), path, kind });
        }
    };
    if names.is_empty() {
        for (label, kind, make) in &all {
            let by_name_only = matches!(*kind, "requant-iq" | "bench");
            let skip = by_name_only || (quick && *kind == "requant");
            if !skip {
                add(label, kind, make()?);
            }
        }
        return Ok(out);
    }
    for name in names {
        let lower = name.to_ascii_lowercase();
        let hits: Vec<_> =
            all.iter().filter(|(label, kind, _)| *label == lower || *kind == lower || lower == "all").collect();
        if !hits.is_empty() {
            for (label, kind, make) in hits {
                add(label, kind, make()?);
            }
        } else if Path::new(name).is_file() {
            let p = PathBuf::from(name);
            let label = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| name.clone());
            add(&label, "file", p);
        } else {
            let known: Vec<&str> = all.iter().map(|(l, _, _)| l.as_str()).collect();
            bail!("unknown model {name:?}: not a file, nor one of {} (or real, synth, requant, all)", known.join(", "));
        }
    }
    Ok(out)
}

/// The release `gguf` binary.
pub fn gguf_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    let p = match explicit {
        Some(p) => p.to_path_buf(),
        None => super::workspace_root().join("target").join("release").join("gguf"),
    };
    ensure!(p.is_file(), "no {}: build it with `cargo build --release -p gguf-cli`", p.display());
    Ok(p)
}

/// Runs `cmd` with stdout and stderr in files, killed after `timeout`. Returns
/// (success, stdout, stderr).
pub fn run_captured(cmd: &mut Command, timeout: Duration) -> Result<(bool, Vec<u8>, String)> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let base = std::env::temp_dir().join(format!("xtask-run-{}-{id}", std::process::id()));
    let (out_p, err_p) = (base.with_extension("out"), base.with_extension("err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_p)?)
        .stderr(fs::File::create(&err_p)?)
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = fs::read(&out_p).unwrap_or_default();
    let stderr = String::from_utf8_lossy(&fs::read(&err_p).unwrap_or_default()).into_owned();
    let _ = fs::remove_file(&out_p);
    let _ = fs::remove_file(&err_p);
    match status {
        None => bail!("{cmd:?} still running after {} s: killed", timeout.as_secs()),
        Some(s) => Ok((s.success(), stdout, stderr)),
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(2)..].join(" / ")
}

/// Extra arguments for `gguf run` / `gguf logits` from `$XTASK_GGUF_ARGS` (whitespace-separated).
fn extra_args() -> Vec<String> {
    std::env::var("XTASK_GGUF_ARGS").map(|s| s.split_whitespace().map(String::from).collect()).unwrap_or_default()
}

/// `gguf run ... --json`: (prompt tokens, generated tokens).
fn ours_greedy(gguf: &Path, model: &Path, prompt: &str, threads: usize) -> Result<(Vec<Token>, Vec<Token>)> {
    let mut args = vec!["-t".to_string(), threads.to_string()];
    args.extend(extra_args());
    gguf_greedy(gguf, model, prompt, N_CTX, &args)
}

/// `gguf run -m MODEL -p PROMPT -n 32 --temp 0 --json -c N_CTX ARGS`: (prompt tokens,
/// generated tokens).
pub fn gguf_greedy(
    gguf: &Path,
    model: &Path,
    prompt: &str,
    n_ctx: u32,
    args: &[String],
) -> Result<(Vec<Token>, Vec<Token>)> {
    let mut cmd = Command::new(gguf);
    cmd.arg("run").arg("-m").arg(model).args(["-p", prompt, "-n", &N_GEN.to_string(), "--temp", "0", "--json"]);
    cmd.args(["-c", &n_ctx.to_string()]).args(args);
    let (ok, stdout, stderr) = run_captured(&mut cmd, Duration::from_secs(600))?;
    ensure!(ok, "gguf run failed: {}", tail(&stderr));
    let text = String::from_utf8_lossy(&stdout);
    let line =
        text.lines().rev().find(|l| l.trim_start().starts_with('{')).context("gguf run --json printed no JSON")?;
    let v: Json = serde_json::from_str(line).context("gguf run --json: bad JSON")?;
    let ids = |key: &str| -> Result<Vec<Token>> {
        v[key]
            .as_array()
            .with_context(|| format!("gguf run --json has no {key:?} array"))?
            .iter()
            .map(|x| x.as_i64().map(|i| i as Token).with_context(|| format!("{key}: non-integer")))
            .collect()
    };
    Ok((ids("prompt_tokens")?, ids("tokens")?))
}

/// `gguf logits --tokens ... -o OUT`: `[n_tokens][n_vocab]` f32.
fn ours_logits(gguf: &Path, model: &Path, tokens: &[Token], n_vocab: usize, threads: usize) -> Result<Vec<f32>> {
    let out = std::env::temp_dir().join(format!("xtask-logits-{}.f32", std::process::id()));
    let list: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    let mut cmd = Command::new(gguf);
    cmd.arg("logits").arg("-m").arg(model).args(["--tokens", &list.join(",")]).arg("-o").arg(&out);
    cmd.args(["-t", &threads.to_string(), "-c", &N_CTX.to_string()]).args(extra_args());
    let (ok, _, stderr) = run_captured(&mut cmd, Duration::from_secs(600))?;
    ensure!(ok, "gguf logits failed: {}", tail(&stderr));
    let bytes = fs::read(&out).with_context(|| format!("reading {}", out.display()))?;
    let _ = fs::remove_file(&out);
    let want = tokens.len() * n_vocab * 4;
    ensure!(
        bytes.len() == want,
        "gguf logits wrote {} bytes, expected {} tokens x {n_vocab} vocab x 4 = {want}",
        bytes.len(),
        tokens.len()
    );
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// log-softmax of one row, in f64, shifted by the max. `None` if a value is not finite.
fn log_softmax(row: &[f32]) -> Option<Vec<f64>> {
    if row.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let m = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let sum: f64 = row.iter().map(|&x| (x as f64 - m).exp()).sum();
    let lse = m + sum.ln();
    Some(row.iter().map(|&x| x as f64 - lse).collect())
}

/// KL(p ‖ q) for two logit rows (p = reference). Infinite if `q` has a non-finite value.
pub fn kl_divergence(p_logits: &[f32], q_logits: &[f32]) -> f64 {
    let (Some(lp), Some(lq)) = (log_softmax(p_logits), log_softmax(q_logits)) else { return f64::INFINITY };
    let kl: f64 = lp.iter().zip(&lq).map(|(&a, &b)| a.exp() * (a - b)).sum();
    kl.max(0.0)
}

/// What one prompt gave.
#[derive(Debug, Clone, Default)]
struct PromptResult {
    n_prompt: usize,
    tokens_same: bool,
    /// Index of the first differing generated token, None if identical.
    diverges_at: Option<usize>,
    n_gen_ref: usize,
    positions: usize,
    kl_sum: f64,
    kl_max: f64,
    top1_agree: usize,
    /// KL at position 0, where attention sees only the token itself: a difference there
    /// is in embeddings, matmuls, norms, FFN/MoE or the output, not in attention.
    kl_pos0: f64,
    /// Largest |logit difference| at position 0.
    diff_pos0: f64,
    error: Option<String>,
}

/// Compares two rows sets; returns (kl sum, kl max, top-1 agreements).
fn compare_rows(reference: &[f32], ours: &[f32], n_vocab: usize) -> (f64, f64, usize) {
    let mut sum = 0.0;
    let mut max: f64 = 0.0;
    let mut agree = 0;
    for (a, b) in reference.chunks_exact(n_vocab).zip(ours.chunks_exact(n_vocab)) {
        let kl = kl_divergence(a, b);
        sum += kl;
        max = max.max(kl);
        agree += usize::from(llama::argmax(a) == llama::argmax(b));
    }
    (sum, max, agree)
}

fn first_diff(a: &[Token], b: &[Token]) -> Option<usize> {
    let n = a.len().max(b.len()).min(N_GEN);
    (0..n).find(|&i| a.get(i) != b.get(i))
}

fn short(s: &str, n: usize) -> String {
    let flat: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let mut out: String = flat.chars().take(n).collect();
    if flat.chars().count() > n {
        out.push('…');
    }
    out.replace('|', "\\|")
}

/// `cargo xtask verify logits`.
pub fn run(cache: &Path, opts: &LogitsOpts, report: &mut Report) -> Result<()> {
    let ll = Llama::load(cache)?;
    let gguf = if opts.self_check { None } else { Some(gguf_binary(opts.gguf.as_deref())?) };
    let prompts: Vec<&str> = if opts.quick { PROMPTS[..4].to_vec() } else { PROMPTS.to_vec() };
    let threads = opts.threads.max(1);
    report.note(format!(
        "verify logits: {} prompts, greedy {N_GEN} tokens, -t {threads}, ours = {}",
        prompts.len(),
        match &gguf {
            Some(p) => p.display().to_string(),
            None => "llama.cpp on 1 thread (--self-check)".into(),
        }
    ));
    for target in targets(cache, &opts.models, opts.quick, opts.synth_seed)? {
        eprintln!("== {} ({})", target.label, target.path.display());
        match run_model(&ll, &target, &prompts, threads, gguf.as_deref()) {
            Ok(results) => summarize(&target, &prompts, &results, report),
            Err(e) => {
                report.push(Check::error(GROUP_GREEDY, &target.label, &e));
                report.push(Check::error(GROUP_KL, &target.label, &e));
            }
        }
    }
    Ok(())
}

fn run_model(
    ll: &Llama,
    target: &Target,
    prompts: &[&str],
    threads: usize,
    gguf: Option<&Path>,
) -> Result<Vec<PromptResult>> {
    let model = ll.model(&target.path)?;
    let n_vocab = model.n_vocab();
    let mut ctx = model.context_with(N_CTX, threads as i32, &CtxOpts::from_env("XTASK_LLAMA_")?)?;
    let mut self_ctx =
        if gguf.is_none() { Some(model.context_with(N_CTX, 1, &CtxOpts::from_env("XTASK_SELF_")?)?) } else { None };
    let mut results = Vec::new();
    for (i, prompt) in prompts.iter().enumerate() {
        let t0 = Instant::now();
        let mut r = PromptResult::default();
        let outcome = (|| -> Result<()> {
            let ptoks = model.tokenize_prompt(prompt)?;
            r.n_prompt = ptoks.len();
            let gen = ctx.greedy(&ptoks, N_GEN)?;
            r.n_gen_ref = gen.len();
            let (our_ptoks, our_gen) = match (gguf, self_ctx.as_mut()) {
                (Some(bin), _) => ours_greedy(bin, &target.path, prompt, threads)?,
                (None, Some(c)) => {
                    let mut g = c.greedy(&ptoks, N_GEN)?;
                    if g.last().is_some_and(|&t| model.is_eog(t)) {
                        g.pop();
                    }
                    (ptoks.clone(), g)
                }
                (None, None) => unreachable!(),
            };
            r.tokens_same = our_ptoks == ptoks;
            // `gguf run --json` lists the generated tokens without the end-of-generation
            // token it stopped at (as llama-completion prints no text for it); compare
            // llama.cpp's continuation without it. A different stop still shows up as a
            // length difference.
            let gen_cmp = match gen.split_last() {
                Some((&last, rest)) if model.is_eog(last) => rest,
                _ => &gen[..],
            };
            r.diverges_at = if r.tokens_same { first_diff(gen_cmp, &our_gen) } else { Some(0) };
            let mut seq = ptoks.clone();
            seq.extend_from_slice(&gen);
            let reference = ctx.logits_all(&seq)?;
            let ours = match (gguf, self_ctx.as_mut()) {
                (Some(bin), _) => ours_logits(bin, &target.path, &seq, n_vocab, threads)?,
                (None, Some(c)) => c.logits_all(&seq)?,
                (None, None) => unreachable!(),
            };
            let (sum, max, agree) = compare_rows(&reference, &ours, n_vocab);
            r.positions = seq.len();
            r.kl_sum = sum;
            r.kl_max = max;
            r.top1_agree = agree;
            r.kl_pos0 = kl_divergence(&reference[..n_vocab], &ours[..n_vocab]);
            r.diff_pos0 = reference[..n_vocab]
                .iter()
                .zip(&ours[..n_vocab])
                .map(|(a, b)| (a - b).abs() as f64)
                .fold(0.0, f64::max);
            Ok(())
        })();
        if let Err(e) = outcome {
            r.error = Some(format!("{e:#}"));
        }
        eprintln!(
            "  [{}] prompt {i:2}: {} prompt tokens, greedy {}, mean KL {:.3e}, top-1 {}/{} ({:.1} s){}",
            target.label,
            r.n_prompt,
            match r.diverges_at {
                None => "same".to_string(),
                Some(k) => format!("differs at {k}"),
            },
            r.kl_sum / r.positions.max(1) as f64,
            r.top1_agree,
            r.positions,
            t0.elapsed().as_secs_f64(),
            r.error.as_deref().map(|e| format!(" ERROR {e}")).unwrap_or_default()
        );
        results.push(r);
    }
    Ok(results)
}

fn summarize(target: &Target, prompts: &[&str], results: &[PromptResult], report: &mut Report) {
    let mut table = String::new();
    let _ = writeln!(table, "\n#### {} — `{}`\n", target.label, target.path.display());
    let _ = writeln!(
        table,
        "| # | prompt | prompt tokens | same prompt tokens | greedy 32 | positions | mean KL | max KL | top-1 | KL pos 0 | max abs diff pos 0 |"
    );
    let _ = writeln!(table, "|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|");
    for (i, (p, r)) in prompts.iter().zip(results).enumerate() {
        let greedy = match (&r.error, r.diverges_at) {
            (Some(e), _) => format!("error: {}", short(e, 80)),
            (None, None) => "same".into(),
            (None, Some(k)) => format!("differs at {k}"),
        };
        let _ = writeln!(
            table,
            "| {i} | {} | {} | {} | {greedy} | {} | {:.2e} | {:.2e} | {:.1}% | {:.1e} | {:.1e} |",
            short(p, 32),
            r.n_prompt,
            if r.tokens_same { "yes" } else { "NO" },
            r.positions,
            r.kl_sum / r.positions.max(1) as f64,
            r.kl_max,
            100.0 * r.top1_agree as f64 / r.positions.max(1) as f64,
            r.kl_pos0,
            r.diff_pos0
        );
    }
    eprint!("{table}");
    report.notes.push(table);

    let n = results.len();
    let errors = results.iter().filter(|r| r.error.is_some()).count();
    let same = results.iter().filter(|r| r.error.is_none() && r.diverges_at.is_none()).count();
    let tok_diff = results.iter().filter(|r| r.error.is_none() && !r.tokens_same).count();
    let positions: usize = results.iter().map(|r| r.positions).sum();
    let kl_sum: f64 = results.iter().map(|r| r.kl_sum).sum();
    let kl_max = results.iter().map(|r| r.kl_max).fold(0.0, f64::max);
    let agree: usize = results.iter().map(|r| r.top1_agree).sum();
    let mean_kl = kl_sum / positions.max(1) as f64;
    let pos0_max = results.iter().map(|r| r.kl_pos0).fold(0.0, f64::max);
    let top1 = agree as f64 / positions.max(1) as f64;
    let mut extra = String::new();
    if tok_diff > 0 {
        let _ = write!(extra, "; prompt tokenization differs in {tok_diff}");
    }
    if errors > 0 {
        let first = results.iter().find_map(|r| r.error.clone()).unwrap_or_default();
        let _ = write!(extra, "; {errors} errors, first: {}", short(&first, 160));
    }
    let greedy_ok = errors == 0 && same * 16 >= 15 * n;
    if target.kind != "requant" {
        report.push(Check {
            group: GROUP_GREEDY.into(),
            what: target.label.clone(),
            cases: n as u64,
            mismatches: (n - same) as u64,
            max_err: None,
            status: if greedy_ok && n > 0 { Status::Pass } else { Status::Fail },
            note: format!("{same}/{n} identical (need >= 15/16){extra}"),
        });
    }
    let kl_ok = errors == 0 && positions > 0 && mean_kl < 1e-3 && top1 >= 0.99;
    let greedy_note = if target.kind == "requant" { format!(", greedy {same}/{n} identical") } else { String::new() };
    report.push(Check {
        group: GROUP_KL.into(),
        what: target.label.clone(),
        cases: positions as u64,
        mismatches: (positions - agree) as u64,
        max_err: Some(kl_max),
        status: if kl_ok { Status::Pass } else { Status::Fail },
        note: format!(
            "mean KL {mean_kl:.3e} (need < 1e-3), top-1 {:.2}% (need >= 99%), max KL {kl_max:.3e}, \
             max KL at position 0 {pos0_max:.1e}{greedy_note}{extra}",
            100.0 * top1
        ),
    });
}

/// `cargo xtask llama-logits -m FILE (-p PROMPT | --tokens 1,2,3) -o OUT [-t N]`: llama.cpp's
/// logits at every position, in `gguf logits`'s format (raw f32 `[n_tokens][n_vocab]`), for
/// comparing by hand. Prints the tokens. `-n N` appends llama.cpp's greedy continuation.
pub fn dump_reference(
    cache: &Path,
    model: &Path,
    text: Option<&str>,
    tokens: Option<&str>,
    n_gen: usize,
    threads: usize,
    out: &Path,
) -> Result<()> {
    let ll = Llama::load(cache)?;
    let m = ll.model(model)?;
    let mut seq: Vec<Token> = match (text, tokens) {
        (Some(t), None) => m.tokenize_prompt(t)?,
        (None, Some(list)) => list
            .split(',')
            .map(|s| s.trim().parse::<Token>().with_context(|| format!("bad token id {s:?}")))
            .collect::<Result<_>>()?,
        _ => bail!("give exactly one of -p PROMPT and --tokens LIST"),
    };
    let mut ctx = m.context_with(
        N_CTX.max(seq.len() as u32 + n_gen as u32),
        threads as i32,
        &CtxOpts::from_env("XTASK_LLAMA_")?,
    )?;
    if n_gen > 0 {
        let gen = ctx.greedy(&seq, n_gen)?;
        seq.extend(gen);
    }
    let logits = ctx.logits_all(&seq)?;
    let bytes: Vec<u8> = logits.iter().flat_map(|x| x.to_le_bytes()).collect();
    fs::write(out, bytes).with_context(|| format!("writing {}", out.display()))?;
    let list: Vec<String> = seq.iter().map(|t| t.to_string()).collect();
    println!("{}", list.join(","));
    eprintln!("{} tokens x {} vocab -> {}", seq.len(), m.n_vocab(), out.display());
    Ok(())
}

/// `cargo xtask llama-dump -m FILE --tokens 1,2,3 -o DIR [--filter a,b]`: every
/// intermediate tensor llama.cpp computes for one batch (names as `llama-eval-callback`
/// prints them: `attn_norm-0`, `Qcur-0`, `kqv_out-0`, `ffn_out-0`, `l_out-0`, ...,
/// `result_norm`, `result_output`), each as `DIR/<name>.f32` (raw f32 in ggml order, `ne[0]`
/// fastest) plus `DIR/index.json` with the shapes. `filter`: comma-separated name prefixes.
pub fn dump_intermediates(
    cache: &Path,
    model: &Path,
    tokens: &str,
    filter: Option<&str>,
    threads: usize,
    out: &Path,
) -> Result<()> {
    let ll = Llama::load(cache)?;
    let m = ll.model(model)?;
    let seq: Vec<Token> = tokens
        .split(',')
        .map(|s| s.trim().parse::<Token>().with_context(|| format!("bad token id {s:?}")))
        .collect::<Result<_>>()?;
    let prefixes: Vec<String> = filter
        .map(|f| f.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    let keep = move |name: &str| prefixes.is_empty() || prefixes.iter().any(|p| name.starts_with(p.as_str()));
    let mut ctx = m.dump_context(
        N_CTX.max(seq.len() as u32),
        threads as i32,
        &CtxOpts::from_env("XTASK_LLAMA_")?,
        Box::new(keep),
    )?;
    let _ = ctx.logits_all(&seq)?;
    let dumps = ctx.take_dumps();
    fs::create_dir_all(out)?;
    let mut index = serde_json::Map::new();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for d in &dumps {
        // A name computed twice (e.g. `Qcur-0` before and after rope) gets `#2`, `#3`, ...
        let base = d.name.replace(['/', ' '], "_");
        let k = seen.entry(base.clone()).or_insert(0);
        *k += 1;
        let file = if *k == 1 { base } else { format!("{base}#{k}") };
        let bytes: Vec<u8> = d.data.iter().flat_map(|x| x.to_le_bytes()).collect();
        fs::write(out.join(format!("{file}.f32")), bytes)?;
        index.insert(file, serde_json::json!(d.ne));
    }
    fs::write(out.join("index.json"), serde_json::to_string_pretty(&Json::Object(index))?)?;
    eprintln!("{} tensors -> {}", dumps.len(), out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_is_zero_for_equal_and_shift_invariant() {
        let a = [1.0f32, 2.0, 3.0, -4.0];
        let b = [11.0f32, 12.0, 13.0, 6.0];
        assert!(kl_divergence(&a, &a).abs() < 1e-15);
        assert!(kl_divergence(&a, &b).abs() < 1e-12);
    }

    #[test]
    fn kl_matches_hand_computation() {
        // p = softmax(0, ln 3) = (1/4, 3/4); q = uniform.
        let p = [0.0f32, 3f32.ln()];
        let q = [0.0f32, 0.0];
        let want = 0.25 * (0.25f64 / 0.5).ln() + 0.75 * (0.75f64 / 0.5).ln();
        assert!((kl_divergence(&p, &q) - want).abs() < 1e-6, "{}", kl_divergence(&p, &q));
        assert!(kl_divergence(&p, &[0.0, f32::NAN]).is_infinite());
    }

    #[test]
    fn large_logits_do_not_overflow() {
        let a = [1000.0f32, 999.0, -1000.0];
        let b = [1000.0f32, 998.0, -1000.0];
        let k = kl_divergence(&a, &b);
        assert!(k.is_finite() && k > 0.0);
    }

    #[test]
    fn first_diff_finds_divergence_and_length_changes() {
        assert_eq!(first_diff(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_diff(&[1, 2, 3], &[1, 5, 3]), Some(1));
        assert_eq!(first_diff(&[1, 2], &[1, 2, 7]), Some(2));
    }

    #[test]
    fn at_least_sixteen_prompts() {
        assert!(PROMPTS.len() >= 16);
    }
}
