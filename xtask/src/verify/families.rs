//! `cargo xtask verify families [--quick] [--family NAME...]`: issue 15's acceptance check,
//! one architecture family at a time, on the small random-weight files of
//! [`synth::FAMILIES`] (a real model's head and expert layout, 2–4 layers, its
//! hyperparameters and tokenizer; matrices in F16, Q8_0, Q4_K and Q6_K).
//!
//! For every family and KV cache type (F16, Q8_0 — K and V alike, on both sides):
//! - **greedy**, ten prompts (one longer than the files' widest sliding window, 512):
//!   libllama's 32-token greedy continuation (the prompt in ubatches of 64 or 512, then one
//!   token at a time) against `gguf run --temp 0 --json` at the same `-ub`; a prompt passes when the
//!   prompt tokens and the first 32 generated tokens are identical. Need ≥ 9 of 10.
//! - **prompt logits**: over each prompt + libllama's continuation, libllama's logits at
//!   every position (one `llama_decode`, n_ubatch 512) against `gguf logits -ub 512`'s.
//! - **perplexity logits at batch sizes 1, 7, 64**: `llama-perplexity` (libllama) writes
//!   its base logits at `-c 128 -b 128 -ub B` over a fixed text, `gguf perplexity
//!   --kl-divergence` reads them at the same settings: 9 chunks × 63 scored positions.
//!
//! Logits pass at mean KL(llama.cpp ‖ ours) < 1e-4 and top-1 agreement ≥ 99.5 % for
//! dense families, < 1e-3 and ≥ 99 % for MoE ones (routing can flip on a last-bit
//! difference), on ≥ 500 positions.
//!
//! Why the batch sizes go through llama-perplexity: libllama's own logits depend on its
//! ubatch (measured on SmolLM2-135M Q4_1, llama-perplexity -ub 128 as base: -ub 64 KL 0,
//! -ub 7 KL 4.8e-3, -ub 1 KL 4.8e-3 with flash attention; without it -ub 7 KL 0, -ub 1 4.5e-3:
//! different kernels for one row, a few rows and tiles), and the FFI context of
//! `crate::llama` decodes with n_ubatch 512 unless told. So both sides run at the same
//! ubatch: greedy at 64 and 512 (libllama's context given that `n_ubatch`; a prompt's last
//! partial ubatch takes other weight kernels than a full one, so 64 ≠ 512 in the last bits).
//!
//! `--quick` runs three prompts (the long one among them) and three perplexity chunks, and
//! does not hold the position counts. `XTASK_FAMILIES_KV=f16` (or `q8_0`) runs one cache type. The `gguf` binary is `--gguf BIN`, else
//! `$CARGO_TARGET_DIR/release/gguf` when it exists, else `target/release/gguf`.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _, Result};

use super::logits::{kl_divergence, run_captured, N_GEN, PROMPTS};
use super::{Check, Report, Status};
use crate::llama::{self, CtxOpts, Llama, Token};
use crate::llama_cpp;
use crate::synth::{self, Family};

/// Batch sizes (`-ub`) of the perplexity comparison, where both sides run at the same one.
pub const BATCHES: &[usize] = &[1, 7, 64];
/// The batch sizes (`-ub`, libllama's `n_ubatch`) of the greedy comparison.
pub const GREEDY_BATCHES: &[usize] = &[64, ONE_BATCH];
/// libllama's default `n_ubatch`: the prompt-logits comparison runs the engine at it too.
pub const ONE_BATCH: usize = 512;
/// Context of the perplexity comparison.
pub const PPL_CTX: usize = 128;
/// Chunks of the perplexity comparison (each scores its last `PPL_CTX / 2 - 1` tokens).
pub const PPL_CHUNKS: usize = 9;
/// Chunks with `--quick`.
pub const PPL_CHUNKS_QUICK: usize = 3;
/// Limit of one llama-perplexity or gguf perplexity run (-ub 1 over 1152 tokens of a
/// 3B-wide file takes minutes on two loaded cores).
const PPL_TIMEOUT: Duration = Duration::from_secs(1800);
/// KV cache types: name for `-ctk`/`-ctv`, ggml type id for libllama.
pub const KV_TYPES: &[(&str, i32)] = &[("f16", 1), ("q8_0", 8)];
/// Context on both sides (the long prompt + 32 tokens fits).
pub const N_CTX: u32 = 2048;
/// Positions the full run must compare per family and setting.
pub const MIN_POSITIONS: usize = 500;

const GROUP_GREEDY: &str = "families: greedy, first 32 tokens identical";
const GROUP_KL: &str = "families: KL(llama.cpp || ours) and top-1 over every position";

/// The options of `verify families`.
#[derive(Debug, Clone)]
pub struct FamOpts {
    /// Three prompts.
    pub quick: bool,
    /// Family names; empty: all of [`synth::FAMILIES`].
    pub families: Vec<String>,
    /// Threads on both sides.
    pub threads: usize,
    /// The `gguf` binary.
    pub gguf: Option<PathBuf>,
    /// Seed of the synthetic files.
    pub seed: u64,
}

/// The prompts: nine of [`PROMPTS`] and one of ~600 tokens (beyond a 512-token window).
pub fn prompts(quick: bool) -> Vec<String> {
    let long = PROMPTS.iter().max_by_key(|p| p.len()).copied().unwrap_or_default();
    let long = format!("{long} {long} {long}");
    let mut out: Vec<String> = if quick {
        vec![PROMPTS[0].into(), PROMPTS[2].into()]
    } else {
        PROMPTS[..9].iter().map(|s| s.to_string()).collect()
    };
    out.push(long);
    out
}

/// The binary: explicit, else `$CARGO_TARGET_DIR/release/gguf`, else the workspace's.
fn binary(explicit: Option<&Path>) -> Result<PathBuf> {
    if explicit.is_none() {
        if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
            let p = PathBuf::from(dir).join("release").join("gguf");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    super::logits::gguf_binary(explicit)
}

/// Greedy figures of one (KV type, batch size).
#[derive(Debug, Default, Clone)]
struct Greedy {
    prompts: usize,
    same: usize,
    /// First differing prompt: (index, generated token index; 0 also for other prompt tokens).
    first_diff: Option<(usize, usize)>,
    errors: Vec<String>,
}

/// Logit figures of one comparison.
#[derive(Debug, Default, Clone)]
struct Kl {
    positions: usize,
    kl_sum: f64,
    kl_max: f64,
    agree: usize,
    errors: Vec<String>,
}

impl Kl {
    fn mean(&self) -> f64 {
        self.kl_sum / self.positions.max(1) as f64
    }
    fn top1(&self) -> f64 {
        self.agree as f64 / self.positions.max(1) as f64
    }
}

/// Everything one family gave, indexed `[kv][batch]`.
#[derive(Debug, Default)]
struct FamilyResult {
    /// `[kv][GREEDY_BATCHES]`.
    greedy: Vec<Vec<Greedy>>,
    /// The prompts' logits, engine at [`ONE_BATCH`]: `[kv]`.
    prompt_kl: Vec<Kl>,
    /// llama-perplexity vs gguf perplexity at each of [`BATCHES`]: `[kv][BATCHES]`.
    text_kl: Vec<Vec<Kl>>,
}

/// Arguments every engine call of a cell gets.
fn cell_args(threads: usize, batch: usize, ubatch: usize, kv: &str) -> Vec<String> {
    let mut v: Vec<String> = vec!["-t".into(), threads.to_string()];
    v.extend(["-b".into(), batch.to_string(), "-ub".into(), ubatch.to_string()]);
    v.extend(["-ctk".into(), kv.into(), "-ctv".into(), kv.into()]);
    v
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(2)..].join(" / ")
}

/// `gguf run ... --json`: (prompt tokens, generated tokens without the end-of-generation one).
fn ours_greedy(gguf: &Path, model: &Path, prompt: &str, args: &[String]) -> Result<(Vec<Token>, Vec<Token>)> {
    super::logits::gguf_greedy(gguf, model, prompt, N_CTX, args)
}

/// `gguf logits --tokens ... -o OUT`: `[n_tokens][n_vocab]` f32.
fn ours_logits(gguf: &Path, model: &Path, tokens: &[Token], n_vocab: usize, args: &[String]) -> Result<Vec<f32>> {
    let out = std::env::temp_dir().join(format!("xtask-families-{}.f32", std::process::id()));
    let list: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    let mut cmd = Command::new(gguf);
    cmd.arg("logits").arg("-m").arg(model).args(["--tokens", &list.join(",")]).arg("-o").arg(&out);
    cmd.args(["-c", &N_CTX.to_string()]).args(args);
    let (ok, _, stderr) = run_captured(&mut cmd, Duration::from_secs(600))?;
    ensure!(ok, "gguf logits failed: {}", tail(&stderr));
    let bytes = fs::read(&out).with_context(|| format!("reading {}", out.display()))?;
    let _ = fs::remove_file(&out);
    let want = tokens.len() * n_vocab * 4;
    ensure!(bytes.len() == want, "gguf logits wrote {} bytes, expected {want}", bytes.len());
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// The text of the perplexity comparison: every prompt of [`PROMPTS`], twice.
fn ppl_text() -> String {
    let one = PROMPTS.join("\n\n");
    format!("{one}\n\n{one}")
}

/// The number after `label` on the line of `out` that starts with it.
fn figure(out: &str, label: &str) -> Result<f64> {
    let line = out.lines().find(|l| l.trim_start().starts_with(label)).with_context(|| format!("no {label:?} line"))?;
    let rest = line.trim_start()[label.len()..].trim_start();
    let num: String = rest.chars().take_while(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | '+')).collect();
    num.parse::<f64>().with_context(|| format!("{label:?}: {rest:?} is not a number"))
}

/// llama-perplexity (libllama) writes its base logits at `-ub batch`, `gguf perplexity
/// --kl-divergence` reads them at the same batching: (mean KL, max KL, same top-1 share).
#[allow(clippy::too_many_arguments)]
fn perplexity_kl(
    cache: &Path,
    gguf: &Path,
    model: &Path,
    text: &Path,
    threads: usize,
    batch: usize,
    kv: &str,
    chunks: usize,
) -> Result<(f64, f64, f64)> {
    // The build libllama came from (XTASK_LLAMA_BUILD_DIR), so both references agree.
    let bin = llama_cpp::loaded_build_dir(cache).join("bin");
    let base = std::env::temp_dir().join(format!("xtask-families-{}.kld", std::process::id()));
    let common = |cmd: &mut Command| {
        cmd.args(["-c", &PPL_CTX.to_string(), "--chunks", &chunks.to_string()]);
        cmd.args(cell_args(threads, PPL_CTX, batch, kv));
        cmd.arg("--kl-divergence-base").arg(&base);
    };
    let mut l = Command::new(bin.join("llama-perplexity"));
    l.env("LD_LIBRARY_PATH", &bin).arg("-m").arg(model).arg("-f").arg(text);
    common(&mut l);
    let (ok, _, stderr) = run_captured(&mut l, PPL_TIMEOUT)?;
    ensure!(ok, "llama-perplexity failed: {}", tail(&stderr));
    let mut g = Command::new(gguf);
    g.arg("perplexity").arg("-m").arg(model).arg("--kl-divergence");
    common(&mut g);
    let (ok, stdout, stderr) = run_captured(&mut g, PPL_TIMEOUT)?;
    let _ = fs::remove_file(&base);
    ensure!(ok, "gguf perplexity --kl-divergence failed: {}", tail(&stderr));
    let out = format!("{}\n{stderr}", String::from_utf8_lossy(&stdout));
    Ok((figure(&out, "Mean    KLD:")?, figure(&out, "Maximum KLD:")?, figure(&out, "Same top p:")? / 100.0))
}

/// `cargo xtask verify families`.
pub fn run(cache: &Path, opts: &FamOpts, report: &mut Report) -> Result<()> {
    let ll = Llama::load(cache)?;
    let gguf = binary(opts.gguf.as_deref())?;
    let families: Vec<&Family> = if opts.families.is_empty() {
        synth::FAMILIES.iter().chain(synth::ENCODERS).collect()
    } else {
        opts.families
            .iter()
            .map(|n| {
                synth::family(n).with_context(|| {
                    let known: Vec<&str> = synth::FAMILIES.iter().chain(synth::ENCODERS).map(|f| f.name).collect();
                    format!("unknown family {n:?} (known: {})", known.join(", "))
                })
            })
            .collect::<Result<_>>()?
    };
    let prompts = prompts(opts.quick);
    let threads = opts.threads.max(1);
    let text = std::env::temp_dir().join(format!("xtask-families-{}.txt", std::process::id()));
    fs::write(&text, ppl_text())?;
    report.note(format!(
        "verify families: {} prompts, greedy {N_GEN} tokens at -b/-ub {GREEDY_BATCHES:?}, prompt logits at -ub {ONE_BATCH}, \
         llama-perplexity vs gguf perplexity (-c {PPL_CTX}, {PPL_CHUNKS} chunks) at -ub {BATCHES:?}, KV {}, -t {threads}, \
         ours = {}, GGUF_CPU_FEATURES={}",
        prompts.len(),
        KV_TYPES.iter().map(|k| k.0).collect::<Vec<_>>().join("/"),
        gguf.display(),
        std::env::var("GGUF_CPU_FEATURES").unwrap_or_else(|_| "(unset: native)".into())
    ));
    for fam in families {
        let t0 = Instant::now();
        let path = match synth::ensure_family(cache, fam, opts.seed) {
            Ok(p) => p,
            Err(e) => {
                report.push(Check::error(GROUP_KL, fam.name, &e));
                continue;
            }
        };
        eprintln!("== {} ({}): {}", fam.name, path.display(), fam.layout);
        if synth::ENCODERS.iter().any(|e| e.name == fam.name) {
            if let Err(e) = super::encoders::run_family(&ll, fam, &path, &prompts, threads, &gguf, report) {
                report.push(Check::error("families: encoder embeddings vs libllama", fam.name, &e));
            }
            eprintln!("== {} done in {:.0} s", fam.name, t0.elapsed().as_secs_f64());
            continue;
        }
        let chunks = if opts.quick { PPL_CHUNKS_QUICK } else { PPL_CHUNKS };
        match run_family(cache, &ll, fam, &path, &prompts, &text, threads, &gguf, chunks) {
            Ok(r) => summarize(fam, &path, &r, opts.quick, report),
            Err(e) => {
                report.push(Check::error(GROUP_GREEDY, fam.name, &e));
                report.push(Check::error(GROUP_KL, fam.name, &e));
            }
        }
        eprintln!("== {} done in {:.0} s", fam.name, t0.elapsed().as_secs_f64());
    }
    let _ = fs::remove_file(&text);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run_family(
    cache: &Path,
    ll: &Llama,
    fam: &Family,
    path: &Path,
    prompts: &[String],
    text: &Path,
    threads: usize,
    gguf: &Path,
    chunks: usize,
) -> Result<FamilyResult> {
    let model = ll.model(path)?;
    let n_vocab = model.n_vocab();
    let mut r = FamilyResult::default();
    let only = std::env::var("XTASK_FAMILIES_KV").ok().filter(|s| !s.is_empty());
    for &(kv, kv_id) in KV_TYPES {
        if only.as_deref().is_some_and(|o| o != kv) {
            r.greedy.push(Vec::new());
            r.prompt_kl.push(Kl::default());
            r.text_kl.push(Vec::new());
            continue;
        }
        let mut greedy = vec![Greedy::default(); GREEDY_BATCHES.len()];
        let mut pkl = Kl::default();
        // one libllama context per greedy batch size: its prompt cut into ubatches of that
        // size, as the engine's (libllama's weight products differ with the ubatch's rows)
        let opts = |ub: usize| CtxOpts { flash_attn: None, cache_type: Some(kv_id), n_ubatch: Some(ub as u32) };
        let mut ctxs = Vec::new();
        for &batch in GREEDY_BATCHES {
            ctxs.push(model.context_with(N_CTX, threads as i32, &opts(batch))?);
        }
        let mut ctx = model.context_with(N_CTX, threads as i32, &opts(ONE_BATCH))?;
        for (ip, prompt) in prompts.iter().enumerate() {
            let t0 = Instant::now();
            let ptoks = model.tokenize_prompt(prompt)?;
            let gen = ctx.greedy(&ptoks, N_GEN)?;
            let mut line = format!("  [{} kv={kv}] prompt {ip} ({} tokens): greedy", fam.name, ptoks.len());
            for (ib, &batch) in GREEDY_BATCHES.iter().enumerate() {
                let gen_b = ctxs[ib].greedy(&ptoks, N_GEN)?;
                let gen_cmp: &[Token] = match gen_b.split_last() {
                    Some((&last, rest)) if model.is_eog(last) => rest,
                    _ => &gen_b[..],
                };
                let g = &mut greedy[ib];
                g.prompts += 1;
                match ours_greedy(gguf, path, prompt, &cell_args(threads, batch.max(ONE_BATCH), batch, kv)) {
                    Ok((our_ptoks, our_gen)) => {
                        let n = gen_cmp.len().max(our_gen.len()).min(N_GEN);
                        let diff = if our_ptoks != ptoks {
                            Some(0)
                        } else {
                            (0..n).find(|&i| gen_cmp.get(i) != our_gen.get(i))
                        };
                        match diff {
                            None => {
                                g.same += 1;
                                let _ = write!(line, " b{batch}=same");
                            }
                            Some(at) => {
                                g.first_diff.get_or_insert((ip, at));
                                let _ = write!(line, " b{batch}=differs@{at}");
                            }
                        }
                    }
                    Err(e) => {
                        g.errors.push(format!("prompt {ip}: {e:#}"));
                        let _ = write!(line, " b{batch}=ERROR {e:#}");
                    }
                }
            }
            let mut seq = ptoks.clone();
            seq.extend_from_slice(&gen);
            let reference = ctx.logits_all(&seq)?;
            match ours_logits(gguf, path, &seq, n_vocab, &cell_args(threads, N_CTX as usize, ONE_BATCH, kv)) {
                Ok(ours) => {
                    let (mut sum, mut agree) = (0.0, 0);
                    for (a, b) in reference.chunks_exact(n_vocab).zip(ours.chunks_exact(n_vocab)) {
                        let kl = kl_divergence(a, b);
                        sum += kl;
                        pkl.kl_max = pkl.kl_max.max(kl);
                        agree += usize::from(llama::argmax(a) == llama::argmax(b));
                    }
                    pkl.positions += seq.len();
                    pkl.kl_sum += sum;
                    pkl.agree += agree;
                    let _ =
                        write!(line, "; logits mean KL {:.2e}, top-1 {agree}/{}", sum / seq.len() as f64, seq.len());
                }
                Err(e) => {
                    pkl.errors.push(format!("prompt {ip}: {e:#}"));
                    let _ = write!(line, "; logits ERROR {e:#}");
                }
            }
            eprintln!("{line} ({:.1} s)", t0.elapsed().as_secs_f64());
        }
        let mut tkl = Vec::new();
        for &batch in BATCHES {
            let t0 = Instant::now();
            let mut k = Kl::default();
            match perplexity_kl(cache, gguf, path, text, threads, batch, kv, chunks) {
                Ok((mean, max, same)) => {
                    k.positions = chunks * (PPL_CTX - PPL_CTX / 2 - 1);
                    k.kl_sum = mean * k.positions as f64;
                    k.kl_max = max;
                    k.agree = (same * k.positions as f64).round() as usize;
                }
                Err(e) => k.errors.push(format!("{e:#}")),
            }
            eprintln!(
                "  [{} kv={kv}] perplexity -ub {batch}: mean KL {:.2e}, max {:.2e}, top-1 {:.2}%{} ({:.1} s)",
                fam.name,
                k.mean(),
                k.kl_max,
                100.0 * k.top1(),
                k.errors.first().map(|e| format!(" ERROR {e}")).unwrap_or_default(),
                t0.elapsed().as_secs_f64()
            );
            tkl.push(k);
        }
        r.greedy.push(greedy);
        r.prompt_kl.push(pkl);
        r.text_kl.push(tkl);
    }
    Ok(r)
}

fn kl_check(fam: &Family, what: String, k: &Kl, quick: bool, how: &str) -> Check {
    let (kl_need, top1_need) = if fam.moe { (1e-3, 0.99) } else { (1e-4, 0.995) };
    let enough = quick || k.positions >= MIN_POSITIONS;
    let ok = k.errors.is_empty() && k.positions > 0 && enough && k.mean() < kl_need && k.top1() >= top1_need;
    let mut note = format!(
        "{how}: mean KL {:.3e} (need < {kl_need:.0e}), top-1 {:.2}% (need >= {:.1}%), {} positions{}",
        k.mean(),
        100.0 * k.top1(),
        100.0 * top1_need,
        k.positions,
        if enough { String::new() } else { format!(" (need >= {MIN_POSITIONS})") }
    );
    if let Some(e) = k.errors.first() {
        let _ = write!(note, "; {} errors, first: {}", k.errors.len(), e.chars().take(200).collect::<String>());
    }
    Check {
        group: GROUP_KL.into(),
        what,
        cases: k.positions as u64,
        mismatches: (k.positions - k.agree.min(k.positions)) as u64,
        max_err: Some(k.kl_max),
        status: if ok { Status::Pass } else { Status::Fail },
        note,
    }
}

fn summarize(fam: &Family, path: &Path, r: &FamilyResult, quick: bool, report: &mut Report) {
    let mut table = String::new();
    let _ = writeln!(table, "\n#### {} — {}\n\n`{}`\n", fam.name, fam.layout, path.display());
    let _ = writeln!(table, "| KV | comparison | batch | greedy same | positions | mean KL | max KL | top-1 |");
    let _ = writeln!(table, "|---|---|---:|---:|---:|---:|---:|---:|");
    for (ik, &(kv, _)) in KV_TYPES.iter().enumerate() {
        if r.greedy[ik].is_empty() {
            continue; // XTASK_FAMILIES_KV left it out
        }
        for (ib, &batch) in GREEDY_BATCHES.iter().enumerate() {
            let g = &r.greedy[ik][ib];
            let _ = writeln!(table, "| {kv} | greedy (prompts) | {batch} | {}/{} | | | | |", g.same, g.prompts);
            let ok = g.errors.is_empty() && g.prompts > 0 && g.same * 10 >= 9 * g.prompts;
            let mut note = format!("{}/{} identical (need >= 9/10)", g.same, g.prompts);
            if let Some((p, at)) = g.first_diff {
                let _ = write!(note, "; prompt {p} differs at {at}");
            }
            if let Some(e) = g.errors.first() {
                let _ = write!(note, "; {} errors, first: {}", g.errors.len(), e.chars().take(200).collect::<String>());
            }
            report.push(Check {
                group: GROUP_GREEDY.into(),
                what: format!("{} kv={kv} b={batch}", fam.name),
                cases: g.prompts as u64,
                mismatches: (g.prompts - g.same) as u64,
                max_err: None,
                status: if ok { Status::Pass } else { Status::Fail },
                note,
            });
        }
        let mut row = |how: &str, batch: usize, k: &Kl| {
            let _ = writeln!(
                table,
                "| {kv} | {how} | {batch} | | {} | {:.2e} | {:.2e} | {:.2}% |",
                k.positions,
                k.mean(),
                k.kl_max,
                100.0 * k.top1()
            );
            report.push(kl_check(fam, format!("{} kv={kv} b={batch} {how}", fam.name), k, quick, how));
        };
        row("prompts", ONE_BATCH, &r.prompt_kl[ik]);
        for (ib, &batch) in BATCHES.iter().enumerate() {
            row("perplexity", batch, &r.text_kl[ik][ib]);
        }
    }
    eprint!("{table}");
    report.notes.push(table);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_prompts_and_one_beyond_the_window() {
        let p = prompts(false);
        assert_eq!(p.len(), 10);
        // ~4 characters a token: the long one has well over 512 tokens' worth of text.
        assert!(p.last().unwrap().len() > 4 * 512, "{}", p.last().unwrap().len());
        assert_eq!(prompts(true).len(), 3);
    }

    #[test]
    fn every_cell_gets_batch_and_cache_flags() {
        let s = cell_args(2, 128, 7, "q8_0").join(" ");
        assert!(s.contains("-b 128 -ub 7") && s.contains("-ctk q8_0 -ctv q8_0") && s.contains("-t 2"), "{s}");
    }

    #[test]
    fn figures_are_read_from_perplexity_output() {
        let out = "Mean    KLD:   0.000123 ±   0.000001\nMaximum KLD:   0.004500\nSame top p: 99.603 ± 0.281 %\n";
        assert_eq!(figure(out, "Mean    KLD:").unwrap(), 0.000123);
        assert_eq!(figure(out, "Maximum KLD:").unwrap(), 0.0045);
        assert_eq!(figure(out, "Same top p:").unwrap(), 99.603);
        assert!(figure(out, "Minimum KLD:").is_err());
    }

    #[test]
    fn family_names_are_unique() {
        let mut names: Vec<&str> = synth::FAMILIES.iter().chain(synth::ENCODERS).map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), synth::FAMILIES.len() + synth::ENCODERS.len());
        assert!(synth::ENCODERS.iter().all(|f| synth::family(f.name).is_some()));
    }
}
