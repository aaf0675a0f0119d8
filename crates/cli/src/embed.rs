//! `gguf embed`: llama-embedding's command line over an encoder model
//! ([`gguf_models::Encoder`]: bert, nomic-bert). The prompt is split into one input per line
//! (or per `--embd-separator`), each tokenized as llama-embedding does (special tokens
//! added and parsed), encoded on its own, pooled (`--pooling`, default the file's),
//! normalized (`--embd-normalize`, llama.cpp's `common_embd_normalize`) and printed in
//! llama-embedding's formats: the summary (`""`), `array`, `json`, `json+` (with the
//! cosine-similarity matrix) or `raw` (one line per embedding).
//!
//! With `--pooling rank`, a line holding `--cls-separator` (a tab by default) is a
//! query/document pair, joined as llama-embedding joins it: into the file's `rerank`
//! template, or with the vocabulary's added EOS and SEP token texts between the pieces.
//!
//! Difference from llama-embedding: a rank (reranker) result is its `n_cls_out` scores,
//! normalized over those scores (llama-embedding normalizes `n_embd` floats from a buffer
//! of `n_cls_out`).

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use gguf_models::{Pool, Pooling};

use crate::engine::{self, ModelArgs};

/// `gguf embed`.
#[derive(Args, Debug)]
pub struct EmbedArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The inputs, one per line (or per `--embd-separator`).
    #[arg(short = 'p', long)]
    prompt: Option<String>,
    /// Read the inputs from a file (`-` = standard input; one trailing newline dropped).
    #[arg(short = 'f', long = "file", conflicts_with = "prompt")]
    file: Option<PathBuf>,
    /// Take the prompt literally (escapes such as `\n` are processed by default).
    #[arg(long = "no-escape")]
    no_escape: bool,
    /// Pooling: none, mean, cls, last or rank (default: the file's `pooling_type`).
    #[arg(long)]
    pooling: Option<String>,
    /// Normalization: -1 none, 0 max absolute (int16 range), 1 taxicab, 2 euclidean, > 2
    /// p-norm.
    #[arg(long = "embd-normalize", default_value_t = 2, allow_negative_numbers = true)]
    embd_normalize: i32,
    /// Output: "" (summary), array, json, json+ (with cosine similarities) or raw.
    #[arg(long = "embd-output-format", default_value = "")]
    embd_output_format: String,
    /// Separator of the inputs in the prompt.
    #[arg(long = "embd-separator", default_value = "\n")]
    embd_separator: String,
    /// Separator of a query/document pair in one input (pooling rank).
    #[arg(long = "cls-separator", default_value = "\t")]
    cls_separator: String,
}

/// llama.cpp's `common_embd_normalize` of `inp` into `out`.
pub fn normalize(inp: &[f32], out: &mut [f32], embd_norm: i32) {
    gguf_models::normalize_embedding(inp, out, embd_norm)
}

/// llama.cpp's `common_embd_similarity_cos`.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut s, mut s1, mut s2) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        s += (x * y) as f64;
        s1 += (x * x) as f64;
        s2 += (y * y) as f64;
    }
    if s1 == 0.0 || s2 == 0.0 {
        return if s1 == 0.0 && s2 == 0.0 { 1.0 } else { 0.0 };
    }
    (s / (s1.sqrt() * s2.sqrt())) as f32
}

/// llama-embedding's `split_lines`: every piece between separators, the last one too.
fn split(s: &str, sep: &str) -> Vec<String> {
    if sep.is_empty() {
        return vec![s.to_string()];
    }
    s.split(sep).map(str::to_string).collect()
}

/// The embeddings of `inputs`' token ids (normalized, one vector per row: per token for
/// [`Pooling::None`], else per input) — what `gguf embed` prints.
pub fn embeddings(
    enc: &dyn gguf_models::Encoder,
    pool: &Pool,
    inputs: &[Vec<u32>],
    pooling: Pooling,
    embd_norm: i32,
) -> Result<Vec<Vec<f32>>> {
    let seqs: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
    let out = enc.embed(pool, &seqs, pooling)?;
    let width = if pooling == Pooling::Rank { enc.n_cls_out() } else { enc.n_embd_out() };
    let mut rows = Vec::new();
    for v in out {
        for r in v.chunks(width) {
            let mut o = vec![0f32; r.len()];
            normalize(r, &mut o, embd_norm);
            rows.push(o);
        }
    }
    Ok(rows)
}

/// llama-embedding's text of a rank input `p` split at `sep`: query and document into the
/// `rerank` template, or every piece joined by the added EOS and SEP tokens' texts.
fn join_pair(tok: &gguf_tokenizer::Tokenizer, rerank: Option<&str>, p: &str, sep: &str) -> Result<String> {
    let pieces = split(p, sep);
    if let Some(t) = rerank {
        return Ok(t.replace("{query}", &pieces[0]).replace("{document}", &pieces[1]));
    }
    let text = |on: bool, id: Option<u32>| -> Result<String> {
        match id.filter(|_| on) {
            Some(id) => Ok(String::from_utf8_lossy(tok.token_data(id)?.text).into_owned()),
            None => Ok(String::new()),
        }
    };
    let sp = tok.special_ids();
    let between = text(tok.add_eos(), sp.eos)? + &text(tok.add_sep(), sp.sep)?;
    Ok(pieces.join(&between))
}

/// `gguf embed`.
pub fn run(args: &EmbedArgs) -> Result<()> {
    let l = engine::load(&args.model)?;
    let Some(enc) = l.model.encoder() else {
        bail!(
            "{} (`{}`) is not an embedding model: `gguf embed` runs encoders (bert, nomic-bert)",
            l.model.arch(),
            engine::model_path(args.model.model.as_deref())?.display()
        );
    };
    let pooling = match &args.pooling {
        Some(p) => Pooling::parse(p)?,
        None => enc.pooling(),
    };
    let text = match (&args.prompt, &args.file) {
        (Some(p), _) => {
            if args.no_escape {
                p.clone()
            } else {
                engine::process_escapes(p)
            }
        }
        (None, Some(f)) => {
            let mut s = if f.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading standard input")?
            } else {
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
            };
            if s.ends_with('\n') {
                s.pop();
            }
            s
        }
        (None, None) => bail!("no prompt: give -p TEXT or -f FILE"),
    };
    let prompts = split(&text, &args.embd_separator);
    let n_ctx = l.model.n_ctx_train();
    let rerank = l.file.metadata().get_str("tokenizer.chat_template.rerank");
    let mut inputs = Vec::with_capacity(prompts.len());
    for (i, p) in prompts.iter().enumerate() {
        let ids = if pooling == Pooling::Rank && !args.cls_separator.is_empty() && p.contains(&args.cls_separator) {
            l.tok.encode(&join_pair(&l.tok, rerank, p, &args.cls_separator)?, true, true)?
        } else {
            l.tok.encode(p, true, true)?
        };
        if ids.len() > n_ctx {
            bail!("input {i} has {} tokens, more than the model's context of {n_ctx} (n_ctx_train)", ids.len());
        }
        inputs.push(ids);
    }
    let pool = Pool::new(engine::threads(args.model.threads)?);
    let rows = embeddings(enc, &pool, &inputs, pooling, args.embd_normalize)?;
    let out = format(&rows, &prompts, pooling, args.embd_normalize, &args.embd_output_format)?;
    print!("{out}");
    Ok(())
}

/// llama-embedding's printout of `rows` for `prompts` in output format `fmt`.
pub fn format(rows: &[Vec<f32>], prompts: &[String], pooling: Pooling, norm: i32, fmt: &str) -> Result<String> {
    let mut s = String::new();
    let num = |x: f32| if norm == 0 { format!("{x:.0}") } else { format!("{x:.7}") };
    match fmt {
        "" => {
            s.push('\n');
            let short = |x: f32| if norm == 0 { format!("{x:6.0} ") } else { format!("{x:9.6} ") };
            if pooling == Pooling::None {
                for (j, r) in rows.iter().enumerate() {
                    let _ = write!(s, "embedding {j}: ");
                    let n = r.len();
                    r[..3.min(n)].iter().for_each(|&x| s.push_str(&short(x)));
                    s.push_str(" ... ");
                    r[n.saturating_sub(3)..].iter().for_each(|&x| s.push_str(&short(x)));
                    s.push('\n');
                }
            } else if pooling == Pooling::Rank {
                for (j, r) in rows.iter().enumerate() {
                    if r.len() == 1 {
                        let _ = writeln!(s, "rerank score {j}: {:8.3}", r[0]);
                    } else {
                        for (i, x) in r.iter().enumerate() {
                            let _ = writeln!(s, "rerank score {j}: {x:8.3} [{i}]");
                        }
                    }
                }
            } else {
                let many = rows.len() > 1;
                for (j, r) in rows.iter().enumerate() {
                    let _ = write!(s, "embedding {j}: ");
                    let n = if many { 16.min(r.len()) } else { r.len() };
                    r[..n].iter().for_each(|&x| s.push_str(&short(x)));
                    s.push('\n');
                }
                if many {
                    s.push_str("\ncosine similarity matrix:\n\n");
                    let head = |p: &str, n: usize| p.chars().take(n).collect::<String>();
                    for p in prompts {
                        let _ = write!(s, "{:>6} ", head(p, 6));
                    }
                    s.push('\n');
                    for (i, a) in rows.iter().enumerate() {
                        for b in rows {
                            let _ = write!(s, "{:6.2} ", cosine(a, b));
                        }
                        let _ = writeln!(s, "{}", head(&prompts[i], 10));
                    }
                }
            }
        }
        "array" | "json" | "json+" => {
            let obj = fmt != "array";
            s.push_str(if obj { "{\n  \"object\": \"list\",\n  \"data\": [\n" } else { "[" });
            for (j, r) in rows.iter().enumerate() {
                if obj {
                    let _ = write!(
                        s,
                        "    {{\n      \"object\": \"embedding\",\n      \"index\": {j},\n      \"embedding\": "
                    );
                }
                s.push('[');
                s.push_str(&r.iter().map(|&x| num(x)).collect::<Vec<_>>().join(","));
                s.push_str(if obj { "]\n    }" } else { "]" });
                if j + 1 < rows.len() {
                    s.push_str(if obj { ",\n" } else { "," });
                }
            }
            s.push_str(if obj { "\n  ]" } else { "]\n" });
            if fmt == "json+" && prompts.len() > 1 {
                s.push_str(",\n  \"cosineSimilarity\": [\n");
                for (i, a) in rows.iter().enumerate() {
                    s.push_str("    [");
                    let cs: Vec<String> = rows.iter().map(|b| format!("{:6.2}", cosine(a, b))).collect();
                    s.push_str(&cs.join(", "));
                    s.push_str(" ]");
                    if i + 1 < rows.len() {
                        s.push_str(",\n");
                    }
                }
                s.push_str("\n  ]");
            }
            if obj {
                s.push_str("\n}\n");
            }
        }
        "raw" => {
            for r in rows {
                let line: Vec<String> = r.iter().map(|&x| num(x)).collect();
                let _ = writeln!(s, "{}", line.join(" "));
            }
        }
        other => bail!("unknown --embd-output-format `{other}` (known: \"\", array, json, json+, raw)"),
    }
    s.push('\n');
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizations_are_llama_cpps() {
        let x = [3.0f32, -4.0, 0.0];
        let mut o = [0f32; 3];
        normalize(&x, &mut o, 2);
        assert_eq!(o, [0.6, -0.8, 0.0]);
        normalize(&x, &mut o, 1);
        let n = (1.0f64 / 7.0) as f32; // (float)(1/sum), then one f32 product
        assert_eq!(o, [3.0 * n, -4.0 * n, 0.0]);
        normalize(&x, &mut o, -1);
        assert_eq!(o, x);
        normalize(&x, &mut o, 0);
        assert_eq!(o, [24570.0, -32760.0, 0.0]);
        normalize(&[0.0, 0.0], &mut o[..2], 2);
        assert_eq!(o[..2], [0.0, 0.0]);
        normalize(&x, &mut o, 3);
        let p3 = (27f64 + 64.0).powf(1.0 / 3.0);
        assert!((o[1] as f64 + 4.0 / p3).abs() < 1e-6);
    }

    #[test]
    fn formats_are_llama_embeddings() {
        let rows = vec![vec![0.6f32, -0.8], vec![1.0, 0.0]];
        let prompts = vec!["a".to_string(), "b".to_string()];
        let a = format(&rows, &prompts, Pooling::Mean, 2, "array").unwrap();
        assert_eq!(a, "[[0.6000000,-0.8000000],[1.0000000,0.0000000]]\n\n");
        let j = format(&rows, &prompts, Pooling::Mean, 2, "json+").unwrap();
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["data"][1]["index"], 1);
        assert_eq!(v["cosineSimilarity"][0][1].as_f64(), Some(0.6));
        assert!(format(&rows, &prompts, Pooling::Mean, 2, "xml").is_err());
        assert_eq!(split("a\nb\n", "\n"), ["a", "b", ""]);
    }
}
