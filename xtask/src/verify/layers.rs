//! `cargo xtask layer-diff -m FILE (--prompt TEXT | --tokens 1,2,3) [-t N]`: where does the
//! engine's forward pass first leave llama.cpp's?
//!
//! llama.cpp's side comes from its `cb_eval` ([`crate::llama::Model::dump_context`]);
//! ours from `gguf logits` with `GGUF_DUMP_DIR` set (the engine writes its intermediates
//! under the same names: `attn_norm-0`, `Qcur-0`, `kqv_out-0`, `ffn_out-0`, `l_out-0`, …,
//! `result_norm`, `result_output`). llama.cpp reports some names several times (`Qcur-0`
//! after the matmul, the bias, the norm, the rope); each of ours is compared with the
//! same-sized occurrence that is closest. One row per node, in forward order, with the
//! largest absolute difference, the difference relative to the node's largest value, and
//! the positions that differ; the first node that is not bit-identical is named at the end.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context as _, Result};

use super::logits::{gguf_binary, run_captured, N_CTX};
use crate::llama::{CtxOpts, Dumped, Llama, Token};

/// Node kinds in forward order within a layer.
const ORDER: &[&str] = &[
    "attn_norm",
    // qwen35's gated delta net
    "linear_attn_qkv_mixed",
    "z",
    "beta_sigmoid",
    "gate",
    "conv_output_raw",
    "conv_output_silu",
    "attn_output",
    "final_output",
    "linear_attn_out",
    // attention
    "Qcur_full",
    "Qcur",
    "Kcur",
    "Vcur",
    "Qrope",
    "Krope",
    "kqv_out",
    "attn_gated",
    "attn_out",
    "attn_residual",
    "attn_post_norm",
    "ffn_inp",
    "ffn_norm",
    "ffn_out",
    "l_out",
];

fn sort_key(name: &str) -> (i64, usize, String) {
    match name.rsplit_once('-') {
        Some((base, l)) if l.parse::<i64>().is_ok() => {
            let pos = ORDER.iter().position(|o| *o == base).unwrap_or(ORDER.len());
            (l.parse().unwrap_or(0), pos, base.to_string())
        }
        _ if name == "embd" => (-1, 0, name.to_string()),
        _ => (i64::MAX, 0, name.to_string()),
    }
}

/// llama.cpp's other names for a node of ours (by base name, before `-<layer>`): the
/// activation is `ffn_swiglu` / `ffn_geglu`, a MoE block's output `ffn_moe_out`, gemma's
/// scaled embeddings `inp_scaled`, roped Q/K the later `Qcur` / `Kcur` occurrences.
fn aliases(base: &str) -> &'static [&'static str] {
    match base {
        "ffn_act" => &["ffn_swiglu", "ffn_geglu", "ffn_gelu", "ffn_silu"],
        "ffn_out" => &["ffn_moe_out"],
        "embd" => &["inp_scaled"],
        "Qrope" => &["Qcur"],
        "Krope" => &["Kcur"],
        _ => &[],
    }
}

/// One compared node.
#[derive(Debug, Clone)]
pub struct NodeDiff {
    /// Our name.
    pub name: String,
    /// The llama.cpp occurrence it was matched with (`Qcur-0#3` = the third `Qcur-0`).
    pub matched: String,
    /// Largest |ours − llama.cpp|.
    pub max_abs: f64,
    /// `max_abs` / largest |llama.cpp value|.
    pub max_rel: f64,
    /// Largest difference per position (token).
    pub per_pos: Vec<f64>,
}

/// Compares one node of ours with llama.cpp's occurrences of that name.
fn compare_node(name: &str, ours: &[f32], theirs: &[(String, &Dumped)], n_tokens: usize) -> Option<NodeDiff> {
    let mut best: Option<NodeDiff> = None;
    for (label, d) in theirs {
        if d.data.len() != ours.len() || ours.is_empty() {
            continue;
        }
        let max_abs = d.data.iter().zip(ours).map(|(a, b)| (a - b).abs() as f64).fold(0.0, f64::max);
        if best.as_ref().is_some_and(|b| b.max_abs <= max_abs) {
            continue;
        }
        let scale = d.data.iter().map(|a| a.abs() as f64).fold(0.0, f64::max);
        let row = if n_tokens > 0 && ours.len().is_multiple_of(n_tokens) { ours.len() / n_tokens } else { ours.len() };
        let per_pos = d
            .data
            .chunks(row)
            .zip(ours.chunks(row))
            .map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x - y).abs() as f64).fold(0.0, f64::max))
            .collect();
        best = Some(NodeDiff {
            name: name.to_string(),
            matched: label.clone(),
            max_abs,
            max_rel: if scale > 0.0 { max_abs / scale } else { max_abs },
            per_pos,
        });
    }
    best
}

/// Runs both forward passes on `tokens` and compares every node.
pub fn layer_diff(ll: &Llama, model: &Path, tokens: &[Token], threads: usize, gguf: &Path) -> Result<Vec<NodeDiff>> {
    let m = ll.model(model)?;
    let mut ctx = m.dump_context(
        N_CTX.max(tokens.len() as u32),
        threads as i32,
        &CtxOpts::from_env("XTASK_LLAMA_")?,
        Box::new(|_| true),
    )?;
    let _ = ctx.logits_all(tokens)?;
    let dumps = ctx.take_dumps();
    let mut theirs: HashMap<String, Vec<(String, &Dumped)>> = HashMap::new();
    for d in &dumps {
        let v = theirs.entry(d.name.clone()).or_default();
        let label = if v.is_empty() { d.name.clone() } else { format!("{}#{}", d.name, v.len() + 1) };
        v.push((label, d));
    }

    let dir: PathBuf = std::env::temp_dir().join(format!("xtask-layer-diff-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let out = dir.with_extension("f32");
    let list: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    let mut cmd = Command::new(gguf);
    cmd.env("GGUF_DUMP_DIR", &dir).arg("logits").arg("-m").arg(model).args(["--tokens", &list.join(",")]);
    cmd.arg("-o").arg(&out).args(["-t", &threads.to_string(), "-c", &N_CTX.to_string()]);
    // the cache type llama.cpp's side was given (XTASK_LLAMA_CACHE_TYPE), on ours too
    if let Some(t) = std::env::var("XTASK_LLAMA_CACHE_TYPE").ok().filter(|t| !t.is_empty()) {
        cmd.args(["--cache-type-k", &t, "--cache-type-v", &t]);
    }
    let (ok, _, stderr) = run_captured(&mut cmd, Duration::from_secs(600))?;
    let _ = fs::remove_file(&out);
    ensure!(ok, "gguf logits failed: {}", stderr.lines().last().unwrap_or(""));
    let mut ours: Vec<(String, PathBuf)> = Vec::new();
    for e in
        fs::read_dir(&dir).with_context(|| format!("gguf wrote no {} (GGUF_DUMP_DIR unsupported?)", dir.display()))?
    {
        let p = e?.path();
        if let Some(stem) = p.file_stem().and_then(|s| s.to_str()).filter(|_| p.extension().is_some_and(|x| x == "f32"))
        {
            ours.push((stem.to_string(), p.clone()));
        }
    }
    ours.sort_by_key(|(n, _)| sort_key(n));
    let mut rows = Vec::new();
    for (name, path) in &ours {
        let bytes = fs::read(path)?;
        let v: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let (base, layer) = match name.rsplit_once('-') {
            Some((b, l)) if l.parse::<u32>().is_ok() => (b, Some(l)),
            _ => (name.as_str(), None),
        };
        let mut cands: Vec<(String, &Dumped)> = theirs.get(name).cloned().unwrap_or_default();
        for alt in aliases(base) {
            let alt_name = match layer {
                Some(l) => format!("{alt}-{l}"),
                None => alt.to_string(),
            };
            cands.extend(theirs.get(&alt_name).cloned().unwrap_or_default());
        }
        if let Some(d) = compare_node(name, &v, &cands, tokens.len()) {
            rows.push(d);
        } else {
            rows.push(NodeDiff {
                name: name.clone(),
                matched: "(no llama.cpp node of that name and size)".into(),
                max_abs: f64::NAN,
                max_rel: f64::NAN,
                per_pos: Vec::new(),
            });
        }
    }
    let _ = fs::remove_dir_all(&dir);
    Ok(rows)
}

/// The report as markdown.
pub fn render(rows: &[NodeDiff]) -> String {
    let mut s = String::new();
    let _ =
        writeln!(s, "| node | llama.cpp node | max abs diff | rel. to max | positions that differ (max diff each) |");
    let _ = writeln!(s, "|---|---|---:|---:|---|");
    for r in rows {
        let pos: Vec<String> =
            r.per_pos.iter().enumerate().filter(|(_, d)| **d > 0.0).map(|(i, d)| format!("{i}:{d:.0e}")).collect();
        let shown = if pos.len() > 12 {
            format!("{} … ({} of {})", pos[..12].join(" "), pos.len(), r.per_pos.len())
        } else {
            pos.join(" ")
        };
        let _ = writeln!(s, "| {} | {} | {:.2e} | {:.2e} | {} |", r.name, r.matched, r.max_abs, r.max_rel, shown);
    }
    match rows.iter().find(|r| r.max_abs != 0.0) {
        Some(r) => {
            let first_pos = r.per_pos.iter().position(|d| *d > 0.0);
            let _ = writeln!(
                s,
                "\nfirst node that is not bit-identical: {} (vs {}), max abs diff {:.2e}{}",
                r.name,
                r.matched,
                r.max_abs,
                first_pos.map(|p| format!(", first at position {p}")).unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(s, "\nevery compared node is bit-identical");
        }
    }
    s
}

/// `cargo xtask layer-diff`.
pub fn run(
    cache: &Path,
    model: &Path,
    prompt: Option<&str>,
    tokens: Option<&str>,
    threads: usize,
    gguf: Option<&Path>,
) -> Result<()> {
    let ll = Llama::load(cache)?;
    let seq: Vec<Token> = match (prompt, tokens) {
        (Some(p), None) => ll.model(model)?.tokenize_prompt(p)?,
        (None, Some(list)) => list
            .split(',')
            .map(|s| s.trim().parse::<Token>().with_context(|| format!("bad token id {s:?}")))
            .collect::<Result<_>>()?,
        _ => anyhow::bail!("give exactly one of --prompt TEXT and --tokens LIST"),
    };
    let gguf = gguf_binary(gguf)?;
    let rows = layer_diff(&ll, model, &seq, threads, &gguf)?;
    println!("{} tokens: {}", seq.len(), seq.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(","));
    print!("{}", render(&rows));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_sort_in_forward_order() {
        let mut v = vec!["l_out-1", "result_output", "Qcur-0", "embd", "attn_norm-1", "kqv_out-0", "attn_norm-0"];
        v.sort_by_key(|n| sort_key(n));
        assert_eq!(v, ["embd", "attn_norm-0", "Qcur-0", "kqv_out-0", "attn_norm-1", "l_out-1", "result_output"]);
    }

    #[test]
    fn picks_closest_occurrence_and_positions() {
        let a = Dumped { name: "Qcur-0".into(), ne: [2, 2, 1, 1], data: vec![1.0, 2.0, 3.0, 4.0] };
        let b = Dumped { name: "Qcur-0".into(), ne: [2, 2, 1, 1], data: vec![1.0, 2.0, 3.0, 4.5] };
        let theirs = vec![("Qcur-0".to_string(), &b), ("Qcur-0#2".to_string(), &a)];
        let d = compare_node("Qcur-0", &[1.0, 2.0, 3.0, 4.125], &theirs, 2).unwrap();
        assert_eq!(d.matched, "Qcur-0#2");
        assert_eq!(d.max_abs, 0.125);
        assert_eq!(d.per_pos, vec![0.0, 0.125]);
    }
}
