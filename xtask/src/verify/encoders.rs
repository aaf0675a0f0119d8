//! `cargo xtask verify families` for the encoder families ([`crate::synth::ENCODERS`]: bert,
//! nomic-bert): embeddings instead of logits.
//!
//! For each pooling (none, mean, cls, last, rank) one libllama embedding context
//! (`embeddings = true`, that `pooling_type`, flash attention auto, `n_ubatch = n_ctx`)
//! encodes each prompt alone (libllama's tokens, truncated to the training context) with
//! one `llama_decode`; the engine's [`gguf_models::Encoder::embed`] encodes the same
//! tokens. Compared: every float (per token with pooling none: ≥ 500 positions; per
//! sequence otherwise) — bit-identical count, max abs difference, max difference relative
//! to the largest |value| of the vector, min cosine similarity. Then `gguf embed
//! --embd-output-format json --embd-normalize -1` (its own tokenizer, the file's pooling,
//! the prompts within the context) against libllama's vectors: the JSON's 7 decimals
//! bound that comparison (pass: within 1e-6 of each vector's largest value).
//!
//! Pass: max relative difference ≤ 1e-5 and cosine > 0.99999 (bit-identical is
//! reported, not required). `XTASK_ENC_DEBUG=1` prints each prompt's identical count.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _, Result};
use gguf_models::Pooling;

use super::logits::run_captured;
use super::{Check, Report, Status};
use crate::llama::{Llama, Token};
use crate::synth::Family;

const GROUP: &str = "families: encoder embeddings vs libllama";

/// Figures of one comparison.
#[derive(Debug, Default, Clone)]
struct Diff {
    vectors: usize,
    floats: usize,
    identical: usize,
    max_abs: f64,
    max_rel: f64,
    min_cos: f64,
}

impl Diff {
    fn new() -> Diff {
        Diff { min_cos: 1.0, ..Default::default() }
    }

    /// Adds the vectors of `width` floats in `a` (libllama) and `b` (ours).
    fn add(&mut self, a: &[f32], b: &[f32], width: usize) {
        for (x, y) in a.chunks(width).zip(b.chunks(width)) {
            self.vectors += 1;
            let scale = x.iter().fold(0f64, |m, v| m.max(v.abs() as f64)).max(f64::MIN_POSITIVE);
            let (mut dot, mut nx, mut ny) = (0f64, 0f64, 0f64);
            for (&p, &q) in x.iter().zip(y) {
                self.floats += 1;
                self.identical += usize::from(p.to_bits() == q.to_bits());
                let d = (p as f64 - q as f64).abs();
                self.max_abs = self.max_abs.max(d);
                self.max_rel = self.max_rel.max(d / scale);
                dot += p as f64 * q as f64;
                nx += p as f64 * p as f64;
                ny += q as f64 * q as f64;
            }
            let cos = if nx == 0.0 && ny == 0.0 { 1.0 } else { dot / (nx.sqrt() * ny.sqrt()).max(f64::MIN_POSITIVE) };
            self.min_cos = self.min_cos.min(cos);
        }
    }

    fn pass(&self) -> bool {
        self.floats > 0 && self.max_rel <= 1e-5 && self.min_cos > 0.99999
    }

    fn line(&self) -> String {
        format!(
            "{} vectors, {} floats, {} bit-identical ({:.2}%), max abs {:.3e}, max rel {:.3e}, min cosine {:.9}",
            self.vectors,
            self.floats,
            self.identical,
            100.0 * self.identical as f64 / self.floats.max(1) as f64,
            self.max_abs,
            self.max_rel,
            self.min_cos
        )
    }
}

/// libllama's `llama_pooling_type` value of `p`.
fn pooling_id(p: Pooling) -> i32 {
    Pooling::ALL.iter().position(|&q| q == p).unwrap_or(0) as i32
}

/// Runs one encoder family; pushes its checks.
#[allow(clippy::too_many_arguments)]
pub fn run_family(
    ll: &Llama,
    fam: &Family,
    path: &Path,
    prompts: &[String],
    threads: usize,
    gguf: &Path,
    report: &mut Report,
) -> Result<()> {
    let model = ll.model(path)?;
    let (file, ours) = gguf_models::load(path).with_context(|| format!("loading {}", path.display()))?;
    let has_head = file.tensor("cls.weight").is_some() || file.tensor("cls.output.weight").is_some();
    let enc = ours.encoder().context("the engine does not load this family as an encoder")?;
    let pool = gguf_models::Pool::new(threads);
    let n_ctx = fam.ctx as usize;
    let mut toks: Vec<Vec<Token>> = Vec::new();
    for p in prompts {
        let mut t = model.tokenize(p, true, true)?;
        t.truncate(n_ctx);
        toks.push(t);
    }
    let total: usize = toks.iter().map(Vec::len).sum();
    let mut table = format!(
        "\n#### {} — {}\n\n`{}`, {} prompts, {total} token positions, -t {threads}\n\n| pooling | comparison | result |\n|---|---|---|\n",
        fam.name,
        fam.layout,
        path.display(),
        prompts.len()
    );
    for pooling in Pooling::ALL {
        let t0 = Instant::now();
        if pooling == Pooling::Rank && !has_head {
            // ours refuses rank without a classifier head (libllama returns the first
            // n_cls_out floats of the CLS embedding)
            let refused = enc.embed(&pool, &[&[0, 1]], pooling).is_err();
            let note = format!("no classifier head in the file: the engine refuses rank ({refused})");
            let _ = writeln!(table, "| rank | skipped | {note} |");
            report.push(Check {
                group: GROUP.into(),
                what: format!("{} pooling=rank", fam.name),
                cases: 0,
                mismatches: 0,
                max_err: None,
                status: if refused { Status::Skip } else { Status::Fail },
                note,
            });
            continue;
        }
        let width = if pooling == Pooling::Rank { enc.n_cls_out() } else { enc.n_embd_out() };
        let mut d = Diff::new();
        let mut errors = Vec::new();
        match model.embed_context(fam.ctx, threads as i32, pooling_id(pooling)) {
            Ok(mut ctx) => {
                for (ip, t) in toks.iter().enumerate() {
                    let theirs = match ctx.embed(t, pooling == Pooling::None, width) {
                        Ok(v) => v,
                        Err(e) => {
                            errors.push(format!("prompt {ip}: libllama: {e:#}"));
                            continue;
                        }
                    };
                    let ids: Vec<u32> = t.iter().map(|&x| x as u32).collect();
                    match enc.embed(&pool, &[&ids], pooling) {
                        Ok(mut v) => {
                            let v = v.remove(0);
                            if v.len() != theirs.len() {
                                errors.push(format!("prompt {ip}: {} floats, libllama {}", v.len(), theirs.len()));
                            } else {
                                if std::env::var_os("XTASK_ENC_DEBUG").is_some() {
                                    let same =
                                        theirs.iter().zip(&v).filter(|(a, b)| a.to_bits() == b.to_bits()).count();
                                    eprintln!("    prompt {ip}: {} tokens, {same}/{} identical", t.len(), v.len());
                                }
                                d.add(&theirs, &v, width);
                            }
                        }
                        Err(e) => errors.push(format!("prompt {ip}: ours: {e:#}")),
                    }
                }
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
        let enough = pooling != Pooling::None || d.vectors >= super::families::MIN_POSITIONS;
        let ok = errors.is_empty() && d.pass() && enough;
        let mut note = d.line();
        if !enough {
            let _ = write!(note, " (need >= {} positions)", super::families::MIN_POSITIONS);
        }
        if let Some(e) = errors.first() {
            let _ = write!(note, "; {} errors, first: {}", errors.len(), e.chars().take(200).collect::<String>());
        }
        eprintln!("  [{} pooling={}] library: {note} ({:.1} s)", fam.name, pooling.name(), t0.elapsed().as_secs_f64());
        let _ = writeln!(table, "| {} | engine library | {note} |", pooling.name());
        report.push(Check {
            group: GROUP.into(),
            what: format!("{} pooling={}", fam.name, pooling.name()),
            cases: d.floats as u64,
            mismatches: (d.floats - d.identical) as u64,
            max_err: Some(d.max_abs),
            status: if ok { Status::Pass } else { Status::Fail },
            note,
        });
    }
    // the CLI, with its own tokenizer, at the file's pooling
    let pooling = enc.pooling();
    let fits: Vec<usize> =
        (0..prompts.len()).filter(|&i| toks[i].len() < n_ctx && !prompts[i].contains('\n')).collect();
    let mut d = Diff::new();
    let mut errors = Vec::new();
    let width = if pooling == Pooling::Rank { enc.n_cls_out() } else { enc.n_embd_out() };
    let joined: Vec<&str> = fits.iter().map(|&i| prompts[i].as_str()).collect();
    match cli_vectors(gguf, path, &joined.join("\n"), threads) {
        Ok(ours) if ours.len() == fits.len() => {
            let mut ctx = model.embed_context(fam.ctx, threads as i32, pooling_id(pooling))?;
            for (v, &i) in ours.iter().zip(&fits) {
                match ctx.embed(&toks[i], pooling == Pooling::None, width) {
                    Ok(theirs) if theirs.len() == v.len() => d.add(&theirs, v, width),
                    Ok(theirs) => errors.push(format!("prompt {i}: {} floats, libllama {}", v.len(), theirs.len())),
                    Err(e) => errors.push(format!("prompt {i}: libllama: {e:#}")),
                }
            }
        }
        Ok(ours) => errors.push(format!("gguf embed printed {} vectors for {} inputs", ours.len(), fits.len())),
        Err(e) => errors.push(format!("{e:#}")),
    }
    // 7 printed decimals (5e-8) read back into f32 (half an ulp): within 1e-6 of the
    // vector's largest value
    let ok = errors.is_empty() && d.floats > 0 && d.max_rel <= 1e-6 && d.min_cos > 0.99999;
    let mut note = d.line();
    if let Some(e) = errors.first() {
        let _ = write!(note, "; {} errors, first: {}", errors.len(), e.chars().take(200).collect::<String>());
    }
    eprintln!("  [{} pooling={}] gguf embed json: {note}", fam.name, pooling.name());
    let _ = writeln!(
        table,
        "| {} (file's) | `gguf embed --embd-output-format json --embd-normalize -1` | {note} |",
        pooling.name()
    );
    report.push(Check {
        group: GROUP.into(),
        what: format!("{} gguf embed (pooling={})", fam.name, pooling.name()),
        cases: d.floats as u64,
        mismatches: 0,
        max_err: Some(d.max_abs),
        status: if ok { Status::Pass } else { Status::Fail },
        note,
    });
    eprint!("{table}");
    report.notes.push(table);
    Ok(())
}

/// `gguf embed -m MODEL -p TEXT --embd-output-format json --embd-normalize -1`: the vectors.
fn cli_vectors(gguf: &Path, model: &Path, text: &str, threads: usize) -> Result<Vec<Vec<f32>>> {
    let mut cmd = Command::new(gguf);
    cmd.arg("embed").arg("-m").arg(model).args(["-p", text, "--no-escape"]);
    cmd.args(["--embd-output-format", "json", "--embd-normalize", "-1", "-t", &threads.to_string()]);
    let (ok, stdout, stderr) = run_captured(&mut cmd, Duration::from_secs(600))?;
    ensure!(ok, "gguf embed failed: {}", stderr.lines().last().unwrap_or_default());
    let v: serde_json::Value = serde_json::from_slice(&stdout).context("gguf embed's JSON")?;
    let data = v["data"].as_array().context("no data array")?;
    data.iter()
        .map(|d| {
            d["embedding"]
                .as_array()
                .context("no embedding")?
                .iter()
                .map(|x| x.as_f64().map(|f| f as f32).context("not a number"))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_counts_bits_and_measures_relative_to_the_vector() {
        let mut d = Diff::new();
        d.add(&[1.0, -2.0, 0.5, 4.0], &[1.0, -2.0, 0.5 + 4e-5, 4.0], 2);
        assert_eq!((d.vectors, d.floats, d.identical), (2, 4, 3));
        assert!((d.max_abs - 4e-5).abs() < 1e-7);
        assert!((d.max_rel - 1e-5).abs() < 1e-7, "{}", d.max_rel); // 4e-5 of the largest |x| = 4
        assert!(d.min_cos > 0.9999999 && d.min_cos <= 1.0);
        assert!(!d.pass() || d.max_rel <= 1e-5);
        assert_eq!(pooling_id(Pooling::Rank), 4);
        assert_eq!(pooling_id(Pooling::None), 0);
    }
}
