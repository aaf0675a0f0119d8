//! `gguf mem`: what running a model at a context costs in memory — weights, KV cache and
//! compute buffers — without loading it. Two views: the allocation llama.cpp would make
//! (all weights, the whole KV cache) and this engine's expected peak RSS (weights it
//! actually touches — an untied `token_embd` is read a row per token — the KV cache, and
//! its working buffers: logits, activation scratch, tokenizer tables).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use gguf_format::{SplitGguf, Value};

/// Arguments of `gguf mem`.
#[derive(Args, Debug)]
pub struct MemArgs {
    /// The model (any shard of a split model).
    #[arg(short = 'm', long = "model")]
    pub model: PathBuf,
    /// Context size in tokens (0 = the model's training context).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    pub ctx: u64,
    /// Parallel sequences (each with its own context).
    #[arg(long = "parallel", visible_alias = "np", default_value_t = 1)]
    pub parallel: u64,
    /// K cache type: f16, f32 or q8_0.
    #[arg(long = "cache-type-k", short = 'k', default_value = "f16")]
    pub cache_type_k: String,
    /// V cache type: f16, f32 or q8_0.
    #[arg(long = "cache-type-v", default_value = "f16")]
    pub cache_type_v: String,
    /// Tokens evaluated at once.
    #[arg(long = "ubatch-size", short = 'u', default_value_t = 512)]
    pub ubatch: u64,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Bytes of one cache element row of `n` values.
fn cache_bytes(t: &str, n: u64) -> Result<u64> {
    Ok(match t {
        "f16" => 2 * n,
        "f32" => 4 * n,
        "q8_0" => n.div_ceil(32) * 34,
        _ => bail!("unsupported cache type {t:?} (f16, f32 or q8_0)"),
    })
}

/// The estimate, in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// All tensor data.
    pub weights: u64,
    /// Tensor data this engine keeps resident.
    pub weights_resident: u64,
    /// KV cache.
    pub kv: u64,
    /// Working buffers.
    pub compute: u64,
}

/// Computes the estimate for `a`.
pub fn estimate(file: &SplitGguf, a: &MemArgs) -> Result<(Estimate, u64)> {
    let md = file.metadata();
    let arch = md.get_str("general.architecture").context("no general.architecture")?;
    let u = |k: &str| -> Option<u64> {
        match md.get(&format!("{arch}.{k}"))? {
            Value::Array(x) => x.get(0).and_then(|v| v.as_u64()),
            v => v.as_u64(),
        }
    };
    let n_layer = u("block_count").context("no block_count")?;
    let n_embd = u("embedding_length").context("no embedding_length")?;
    let n_head = u("attention.head_count").context("no attention.head_count")?.max(1);
    let n_head_kv = u("attention.head_count_kv").unwrap_or(n_head);
    let head_k = u("attention.key_length").unwrap_or(n_embd / n_head);
    let head_v = u("attention.value_length").unwrap_or(n_embd / n_head);
    let n_ff = u("feed_forward_length").unwrap_or(4 * n_embd);
    let n_ctx = if a.ctx == 0 { u("context_length").unwrap_or(4096) } else { a.ctx };
    let n_vocab = md.get_array("tokenizer.ggml.tokens").map_or(0, |t| t.len() as u64);
    let weights: u64 = file.tensors().iter().map(|t| t.size.unwrap_or(0)).sum();
    let tied = file.tensor("output.weight").is_none();
    let embd = file.tensor("token_embd.weight").and_then(|t| t.size).unwrap_or(0);
    let weights_resident = if tied { weights } else { weights - embd };
    let per_token =
        cache_bytes(&a.cache_type_k, n_head_kv * head_k)? + cache_bytes(&a.cache_type_v, n_head_kv * head_v)?;
    // A hybrid recurrent family (qwen35: `ssm.*` keys): the KV cache holds the attention
    // layers only (every `full_attention_interval`-th), each other layer a fixed f32 state
    // of `(d_conv − 1)·(2·group_count·state_size + inner_size) + state_size·inner_size`.
    let (n_attn, recurrent) = match (u("ssm.conv_kernel"), u("ssm.state_size"), u("ssm.inner_size")) {
        (Some(d_conv), Some(d_state), Some(d_inner))
            if md.get(&format!("{arch}.attention.recurrent_layers")).is_none() =>
        {
            let interval = u("full_attention_interval").unwrap_or(4).max(1);
            let n_attn = n_layer / interval;
            let groups = u("ssm.group_count").unwrap_or(1);
            let per_layer = 4 * (d_conv.saturating_sub(1) * (2 * groups * d_state + d_inner) + d_state * d_inner);
            (n_attn, (n_layer - n_attn) * per_layer * a.parallel.max(1))
        }
        _ => (n_layer, 0),
    };
    let mut kv = n_attn * n_ctx * per_token * a.parallel.max(1) + recurrent;
    // Layers of their own widths (gemma4: windowed layers `key_length_swa` wide per
    // `attention.sliding_window_pattern`, KV heads per layer) and the last
    // `attention.shared_kv_layers` layers reading earlier layers' caches: the cache is
    // the sum over the layers that keep one (each `n_ctx` rows, as this engine keeps them).
    if let Some(pattern) = md.get(&format!("{arch}.attention.sliding_window_pattern")).and_then(|v| v.as_array()) {
        if recurrent == 0 && pattern.len() as u64 == n_layer && u("attention.key_length_swa").is_some() {
            let per_layer_kv = |il: usize| match md.get(&format!("{arch}.attention.head_count_kv")) {
                Some(Value::Array(x)) => x.get(il).and_then(|v| v.as_u64()).unwrap_or(n_head_kv),
                _ => n_head_kv,
            };
            let (hk_swa, hv_swa) =
                (u("attention.key_length_swa").unwrap_or(head_k), u("attention.value_length_swa").unwrap_or(head_v));
            let cached = n_layer.saturating_sub(u("attention.shared_kv_layers").unwrap_or(0)) as usize;
            let mut sum = 0u64;
            for il in 0..cached {
                let swa = pattern.get(il).and_then(|v| v.as_bool().or_else(|| v.as_u64().map(|x| x != 0)));
                let (hk, hv) = if swa == Some(true) { (hk_swa, hv_swa) } else { (head_k, head_v) };
                let nkv = per_layer_kv(il);
                sum += cache_bytes(&a.cache_type_k, nkv * hk)? + cache_bytes(&a.cache_type_v, nkv * hv)?;
            }
            kv = n_ctx * sum * a.parallel.max(1);
        }
    }
    // Working buffers, fitted on this engine's measured peak RSS (SmolLM2-135M,
    // qwen2.5-coder-0.5b, gemma-3-270m at -c 512, refitted 2026-12-02; BENCHMARKS.md):
    // 16 MiB of runtime, the tokenizer's tables (≈ 4.5× the metadata bytes), one ubatch of
    // FFN-wide scratch and the logits.
    let ub = a.ubatch.min(n_ctx).max(1);
    let metadata_bytes = file.first().data_offset();
    let compute = (16 << 20) + metadata_bytes * 9 / 2 + ub * (n_ff + 2 * n_embd) * 4 + n_vocab * 4;
    Ok((Estimate { weights, weights_resident, kv, compute }, n_ctx))
}

/// Runs `gguf mem`.
pub fn run(a: &MemArgs) -> Result<()> {
    let file = SplitGguf::open(&a.model).with_context(|| format!("reading {}", a.model.display()))?;
    let (e, n_ctx) = estimate(&file, a)?;
    let mib = |b: u64| b as f64 / 1048576.0;
    let total = e.weights_resident + e.kv + e.compute;
    let alloc = e.weights + e.kv + e.compute;
    if a.json {
        let j = serde_json::json!({
            "n_ctx": n_ctx, "parallel": a.parallel, "cache_type_k": a.cache_type_k, "cache_type_v": a.cache_type_v,
            "weights_bytes": e.weights, "weights_resident_bytes": e.weights_resident, "kv_bytes": e.kv,
            "compute_bytes": e.compute, "peak_rss_bytes": total, "allocated_bytes": alloc,
        });
        println!("{j}");
        return Ok(());
    }
    println!("{} at -c {n_ctx} (x{} seq), K {} / V {}:", a.model.display(), a.parallel, a.cache_type_k, a.cache_type_v);
    println!("  weights   {:10.1} MiB  ({:.1} MiB resident here)", mib(e.weights), mib(e.weights_resident));
    println!("  KV cache  {:10.1} MiB", mib(e.kv));
    println!("  compute   {:10.1} MiB", mib(e.compute));
    println!("  total     {:10.1} MiB allocated, {:.1} MiB expected peak RSS (CPU)", mib(alloc), mib(total));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gemma4: windowed and global layers of their own widths, the last two sharing caches.
    #[test]
    fn kv_counts_each_cached_layer_at_its_width() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("g4.gguf");
        let mut w = gguf_format::GgufWriter::new();
        w.add_kv("general.architecture", "gemma4");
        for (k, v) in [
            ("block_count", 4u32),
            ("embedding_length", 64),
            ("attention.head_count", 2),
            ("attention.head_count_kv", 1),
            ("attention.key_length", 64),
            ("attention.value_length", 64),
            ("attention.key_length_swa", 32),
            ("attention.value_length_swa", 32),
            ("attention.shared_kv_layers", 2),
        ] {
            w.add_kv(&format!("gemma4.{k}"), v);
        }
        w.add_kv(
            "gemma4.attention.sliding_window_pattern",
            Value::Array(gguf_format::Array::Bool(vec![true, false, true, false])),
        );
        w.write_to_path(&p).unwrap();
        let file = SplitGguf::open(&p).unwrap();
        let args = |k: &str| MemArgs {
            model: p.clone(),
            ctx: 100,
            parallel: 1,
            cache_type_k: k.into(),
            cache_type_v: k.into(),
            ubatch: 8,
            json: false,
        };
        // layer 0: K and V 32 wide, layer 1: 64 wide; layers 2 and 3 share them
        assert_eq!(estimate(&file, &args("f16")).unwrap().0.kv, 100 * 2 * (2 * 32 + 2 * 64));
        assert_eq!(estimate(&file, &args("q8_0")).unwrap().0.kv, 100 * (2 * 34 + 2 * 2 * 34));
    }
}
