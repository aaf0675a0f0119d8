//! `gguf task-check`: the one behaviour an application depends on, measured side by
//! side for several files (e.g. quantizations of one model): each prompt of `--prompts`
//! (one per line) is answered greedily — through the model's chat template unless
//! `--raw` — and the answer checked: `--task json` (the answer, trimmed and without a
//! surrounding ``` fence, parses as one JSON value) or `--task regex:PATTERN` (the
//! pattern matches somewhere in the answer).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use gguf_models::Logits;

use crate::engine::{self, ModelArgs, INTERRUPTED};

/// Arguments of `gguf task-check`.
#[derive(Args, Debug)]
pub struct TaskCheckArgs {
    /// Models to compare (repeatable).
    #[arg(short = 'm', long = "model", required = true)]
    pub models: Vec<PathBuf>,
    /// `json` or `regex:PATTERN`.
    #[arg(long)]
    pub task: String,
    /// Prompts, one per line (blank lines skipped).
    #[arg(long)]
    pub prompts: PathBuf,
    /// Most tokens per answer.
    #[arg(short = 'n', long = "n-predict", default_value_t = 256)]
    pub n_predict: usize,
    /// Threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Context size.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 2048)]
    pub ctx: usize,
    /// A system message for the chat template.
    #[arg(long)]
    pub system: Option<String>,
    /// Feed prompts as plain text, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Print every answer with its verdict (stderr).
    #[arg(long)]
    pub verbose: bool,
    /// One JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

enum Check {
    Json,
    Regex(regex::Regex),
}

impl Check {
    fn parse(s: &str) -> Result<Check> {
        if s == "json" {
            return Ok(Check::Json);
        }
        if let Some(p) = s.strip_prefix("regex:") {
            return Ok(Check::Regex(regex::Regex::new(p).with_context(|| format!("--task: bad regex {p:?}"))?));
        }
        bail!("--task: unknown task {s:?} (json or regex:PATTERN)")
    }

    fn passes(&self, answer: &str) -> bool {
        match self {
            Check::Json => {
                let t = answer.trim();
                let t = t
                    .strip_prefix("```json")
                    .or_else(|| t.strip_prefix("```"))
                    .and_then(|r| r.trim_end().strip_suffix("```"))
                    .unwrap_or(t)
                    .trim();
                serde_json::from_str::<serde_json::Value>(t).is_ok()
            }
            Check::Regex(r) => r.is_match(answer),
        }
    }
}

struct Outcome {
    model: String,
    passed: usize,
    total: usize,
    tokens: usize,
    seconds: f64,
}

/// Runs `gguf task-check`.
pub fn run(a: &TaskCheckArgs) -> Result<()> {
    let check = Check::parse(&a.task)?;
    let text = std::fs::read_to_string(&a.prompts).with_context(|| format!("reading {}", a.prompts.display()))?;
    let prompts: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if prompts.is_empty() {
        bail!("{} has no prompts", a.prompts.display());
    }
    let mut outcomes = Vec::new();
    for m in &a.models {
        let args = ModelArgs {
            model: Some(m.clone()),
            threads: a.threads,
            ctx_size: Some(a.ctx),
            batch: 2048,
            ubatch: 512,
            cache_type_k: "f16".into(),
            cache_type_v: "f16".into(),
            no_mmap: false,
            mmap: false,
        };
        let l = engine::load(&args)?;
        let template = if a.raw {
            None
        } else {
            Some(match gguf_tokenizer::chat::ChatTemplate::from_gguf_with(l.file.metadata(), &l.tok)? {
                Some(t) => t,
                None => gguf_tokenizer::chat::ChatTemplate::builtin("chatml")?,
            })
        };
        let mut st = engine::state_with_ctx(&l, &args, a.ctx)?;
        let (mut passed, mut tokens) = (0, 0);
        let t0 = Instant::now();
        for p in &prompts {
            if INTERRUPTED.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            let ids = match &template {
                Some(t) => {
                    let mut msgs = Vec::new();
                    if let Some(s) = &a.system {
                        msgs.push(gguf_tokenizer::chat::Message::new("system", s));
                    }
                    msgs.push(gguf_tokenizer::chat::Message::new("user", p));
                    l.tok.encode(&t.render(&msgs, true, None)?, true, true)?
                }
                None => l.tok.encode(p, true, false)?,
            };
            if ids.len() + 1 > a.ctx {
                bail!("prompt {:?} is {} tokens, longer than the context of {} (use a larger -c)", p, ids.len(), a.ctx);
            }
            st.truncate(0);
            let mut logits = l.model.forward(st.as_mut(), &ids, Logits::Last)?;
            let mut out = Vec::new();
            for _ in 0..a.n_predict {
                let id = logits
                    .iter()
                    .enumerate()
                    .fold((0usize, f32::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
                    .0 as u32;
                if l.tok.is_eog(id) || st.n_past() + 1 > a.ctx {
                    break;
                }
                out.push(id);
                logits = l.model.forward(st.as_mut(), &[id], Logits::Last)?;
            }
            tokens += out.len();
            let answer = String::from_utf8_lossy(&l.tok.decode(&out, true, false)?).into_owned();
            let ok = check.passes(&answer);
            passed += ok as usize;
            if a.verbose {
                eprintln!("[{}] {} {:?} -> {:?}", m.display(), if ok { "PASS" } else { "FAIL" }, p, answer);
            }
        }
        outcomes.push(Outcome {
            model: m.display().to_string(),
            passed,
            total: prompts.len(),
            tokens,
            seconds: t0.elapsed().as_secs_f64(),
        });
    }
    if a.json {
        let v: Vec<serde_json::Value> = outcomes
            .iter()
            .map(|o| {
                serde_json::json!({"model": o.model, "passed": o.passed, "total": o.total,
                    "rate": o.passed as f64 / o.total as f64, "tokens": o.tokens, "seconds": o.seconds})
            })
            .collect();
        println!("{}", serde_json::json!({"task": a.task, "results": v}));
        return Ok(());
    }
    println!("task {} over {} prompts (greedy, at most {} tokens each)", a.task, prompts.len(), a.n_predict);
    println!("  {:>8} {:>7} {:>9} {:>8}  model", "passed", "rate", "tokens", "tok/s");
    for o in &outcomes {
        println!(
            "  {:>3}/{:<4} {:>6.1}% {:>9} {:>8.1}  {}",
            o.passed,
            o.total,
            100.0 * o.passed as f64 / o.total as f64,
            o.tokens,
            o.tokens as f64 / o.seconds.max(1e-9),
            o.model
        );
    }
    Ok(())
}
