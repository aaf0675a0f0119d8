//! Small random-weight **qwen3** and **qwen3moe** GGUF files, written with this
//! project's [`GgufWriter`], for the architectures no small real model covers, and
//! **llama-moe8**: a Mixtral-style llama (8 experts, 2 used) in F32 for `verify quantize`.
//!
//! Shapes, tensor names and metadata keys are those llama.cpp's loader asks for
//! (`src/models/qwen3.cpp`, `src/models/qwen3moe.cpp`, `llama_model_base::load_hparams`):
//! QK-norm, NeoX RoPE (implied by the architecture), head dim 64 ≠ embedding / heads,
//! GQA 8/2; qwen3moe adds the router `ffn_gate_inp` and stacked experts
//! `ffn_{gate,up,down}_exps` with `expert_count` / `expert_used_count` /
//! `expert_feed_forward_length` (llama.cpp always renormalizes the top-k weights for
//! qwen3moe). The tokenizer is SmolLM2's (gpt2 BPE, 49,152 tokens): every `tokenizer.*`
//! key is copied from its file.
//!
//! Weights are N(0, σ) from a fixed-seed generator (σ = 0.05 for matrices, 0.15 for the
//! embeddings and the output, norms 1 ± 0.1) so that attention, routing and the logits
//! are far from degenerate. Layers use different types, so one file exercises F32, F16,
//! Q8_0, Q5_0, Q4_K and Q6_K matrices. Files are cached as
//! `<cache>/synth/<arch>-s<seed>.gguf`; the same seed gives the same bytes.
//!
//! `llama-moe8` ([`EXTRA_ARCHS`], not run by `verify logits`): `general.architecture` =
//! `llama` with `llama.expert_count` = 8 / `llama.expert_used_count` = 2, so llama-quantize
//! takes its `n_expert == 8` branches (attn_v/attn_k → Q8_0, attn_output → Q5_K, ...).
//! Tensors as `src/models/llama.cpp` creates them for `n_expert > 0`: the router
//! `blk.N.ffn_gate_inp.weight` {n_embd, 8} and the stacked experts
//! `ffn_{gate,up}_exps` {n_embd, n_ff, 8} / `ffn_down_exps` {n_ff, n_embd, 8}, with n_ff =
//! 352 (a multiple of 32, not of 256: the down experts take llama-quantize's fallbacks),
//! 8 layers (so `use_more_bits` and `n_layer/8` pick different layers), GQA 4/2, an
//! untied `output.weight`; every tensor F32.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use gguf_format::{GgufFile, GgufWriter};

use crate::models;

/// The architectures this module writes.
pub const ARCHS: &[&str] = &["qwen3", "qwen3moe"];

/// Written on request (`cargo xtask synth llama-moe8`, `verify quantize`) but not part of
/// [`ARCHS`], which `verify logits` runs.
pub const EXTRA_ARCHS: &[&str] = &["llama-moe8"];

/// The default seed.
pub const SEED: u64 = 0x5eed_0005;

/// Bump when the generator changes, so stale cached files are not reused.
const VERSION: u32 = 1;

const N_EMBD: u64 = 256;
const N_LAYER: usize = 4;
const N_HEAD: u64 = 8;
const N_HEAD_KV: u64 = 2;
const HEAD_DIM: u64 = 64;
const N_FF: u64 = 768;
const N_EXPERT: u64 = 8;
const N_EXPERT_USED: u64 = 2;
const N_FF_EXP: u64 = 256;
const CTX: u32 = 4096;

// llama-moe8
const M8_EMBD: u64 = 256;
const M8_LAYER: usize = 8;
const M8_HEAD: u64 = 4;
const M8_HEAD_KV: u64 = 2;
const M8_FF: u64 = 352;
const M8_EXPERT: u64 = 8;
const M8_EXPERT_USED: u64 = 2;

/// splitmix64 + Box–Muller: a tiny generator whose stream never changes with crate versions.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
    fn normals(&mut self, n: usize, mean: f64, sigma: f64) -> Vec<f32> {
        (0..n).map(|_| (mean + sigma * self.normal()) as f32).collect()
    }
}

/// Where the file for `arch` and `seed` is cached.
pub fn synth_path(cache: &Path, arch: &str, seed: u64) -> PathBuf {
    cache.join("synth").join(format!("{arch}-v{VERSION}-s{seed:x}.gguf"))
}

/// The synthetic model for `arch` (`qwen3` or `qwen3moe`), written on first use.
pub fn ensure_synth(cache: &Path, arch: &str, seed: u64) -> Result<PathBuf> {
    ensure!(
        ARCHS.contains(&arch) || EXTRA_ARCHS.contains(&arch),
        "no synthetic model for {arch:?} (known: {}, {})",
        ARCHS.join(", "),
        EXTRA_ARCHS.join(", ")
    );
    let path = synth_path(cache, arch, seed);
    if path.is_file() {
        return Ok(path);
    }
    let tok_src = models::ensure_model(models::find_model("smollm2").context("smollm2 not in the model table")?)?;
    let tok = GgufFile::open(&tok_src).with_context(|| format!("reading {}", tok_src.display()))?;
    std::fs::create_dir_all(path.parent().context("no parent")?)?;
    write(&path, arch, seed, &tok)?;
    eprintln!("synth: wrote {}", path.display());
    Ok(path)
}

/// The tensor types, per layer: each layer uses a different mix.
fn layer_types(il: usize) -> (&'static str, &'static str, &'static str) {
    // (attention q/k/v/o, ffn gate/up, ffn down)
    match il % 4 {
        0 => ("q8_0", "q8_0", "q8_0"),
        1 => ("q4_K", "q4_K", "q6_K"),
        2 => ("q5_0", "q4_K", "q8_0"),
        _ => ("f16", "f32", "q4_K"),
    }
}

struct Builder<'a> {
    w: GgufWriter<'a>,
    rng: Rng,
}

impl Builder<'_> {
    /// A tensor of `dims` (ggml order: row length first) of N(mean, sigma) values in `ty`.
    fn tensor(&mut self, name: &str, dims: &[u64], ty: &str, mean: f64, sigma: f64) -> Result<()> {
        let n: u64 = dims.iter().product();
        let data = self.rng.normals(n as usize, mean, sigma);
        let t = ggml_quants::by_name(ty).with_context(|| format!("type {ty} not registered"))?;
        let bytes = t.quantize_to_vec(&data, dims[0] as usize, None).with_context(|| format!("quantizing {name}"))?;
        self.w.add_tensor_owned(name, dims, t.id, bytes).with_context(|| format!("adding {name}"))?;
        Ok(())
    }
}

fn write(path: &Path, arch: &str, seed: u64, tok: &GgufFile) -> Result<()> {
    if arch == "llama-moe8" {
        return write_llama_moe8(path, seed, tok);
    }
    let moe = match arch {
        "qwen3" => false,
        "qwen3moe" => true,
        _ => bail!("unknown synthetic arch {arch}"),
    };
    let n_vocab = match tok.metadata().get_array("tokenizer.ggml.tokens") {
        Some(a) => a.len() as u64,
        None => bail!("{} has no tokenizer.ggml.tokens", tok.path().display()),
    };
    // Distinct streams per architecture from one seed.
    let mut b = Builder { w: GgufWriter::new(), rng: Rng(seed ^ if moe { 0x6d6f_6500 } else { 0x7133 }) };
    let k = |s: &str| format!("{arch}.{s}");
    let w = &mut b.w;
    w.add_kv("general.architecture", arch);
    w.add_kv("general.type", "model");
    w.add_kv("general.name", format!("synthetic {arch} (gguf-engine xtask synth v{VERSION}, seed {seed:#x})"));
    w.add_kv("general.file_type", 7u32); // mostly Q8_0
    w.add_kv(&k("block_count"), N_LAYER as u32);
    w.add_kv(&k("context_length"), CTX);
    w.add_kv(&k("embedding_length"), N_EMBD as u32);
    w.add_kv(&k("feed_forward_length"), N_FF as u32);
    w.add_kv(&k("attention.head_count"), N_HEAD as u32);
    w.add_kv(&k("attention.head_count_kv"), N_HEAD_KV as u32);
    w.add_kv(&k("attention.key_length"), HEAD_DIM as u32);
    w.add_kv(&k("attention.value_length"), HEAD_DIM as u32);
    w.add_kv(&k("rope.freq_base"), 1_000_000f32);
    w.add_kv(&k("attention.layer_norm_rms_epsilon"), 1e-6f32);
    if moe {
        w.add_kv(&k("expert_count"), N_EXPERT as u32);
        w.add_kv(&k("expert_used_count"), N_EXPERT_USED as u32);
        w.add_kv(&k("expert_feed_forward_length"), N_FF_EXP as u32);
    }
    for (key, value) in tok.metadata().iter() {
        if key.starts_with("tokenizer.") {
            w.metadata_mut().set(key, value.clone());
        }
    }
    w.add_kv("general.quantization_version", 2u32);
    ensure!(tok.metadata().get("tokenizer.ggml.model").is_some_and(|v| v.as_str() == Some("gpt2")), "not a gpt2 vocab");

    let q_dim = N_HEAD * HEAD_DIM;
    let kv_dim = N_HEAD_KV * HEAD_DIM;
    b.tensor("token_embd.weight", &[N_EMBD, n_vocab], "q8_0", 0.0, 0.15)?;
    for il in 0..N_LAYER {
        let (ta, tf, td) = layer_types(il);
        let p = |s: &str| format!("blk.{il}.{s}");
        b.tensor(&p("attn_norm.weight"), &[N_EMBD], "f32", 1.0, 0.1)?;
        b.tensor(&p("attn_q.weight"), &[N_EMBD, q_dim], ta, 0.0, 0.05)?;
        b.tensor(&p("attn_k.weight"), &[N_EMBD, kv_dim], ta, 0.0, 0.05)?;
        b.tensor(&p("attn_v.weight"), &[N_EMBD, kv_dim], ta, 0.0, 0.05)?;
        b.tensor(&p("attn_output.weight"), &[q_dim, N_EMBD], ta, 0.0, 0.05)?;
        b.tensor(&p("attn_q_norm.weight"), &[HEAD_DIM], "f32", 1.0, 0.1)?;
        b.tensor(&p("attn_k_norm.weight"), &[HEAD_DIM], "f32", 1.0, 0.1)?;
        b.tensor(&p("ffn_norm.weight"), &[N_EMBD], "f32", 1.0, 0.1)?;
        if moe {
            b.tensor(&p("ffn_gate_inp.weight"), &[N_EMBD, N_EXPERT], "f32", 0.0, 0.1)?;
            b.tensor(&p("ffn_gate_exps.weight"), &[N_EMBD, N_FF_EXP, N_EXPERT], tf, 0.0, 0.05)?;
            b.tensor(&p("ffn_up_exps.weight"), &[N_EMBD, N_FF_EXP, N_EXPERT], tf, 0.0, 0.05)?;
            b.tensor(&p("ffn_down_exps.weight"), &[N_FF_EXP, N_EMBD, N_EXPERT], td, 0.0, 0.05)?;
        } else {
            b.tensor(&p("ffn_gate.weight"), &[N_EMBD, N_FF], tf, 0.0, 0.05)?;
            b.tensor(&p("ffn_up.weight"), &[N_EMBD, N_FF], tf, 0.0, 0.05)?;
            b.tensor(&p("ffn_down.weight"), &[N_FF, N_EMBD], td, 0.0, 0.05)?;
        }
    }
    b.tensor("output_norm.weight", &[N_EMBD], "f32", 1.0, 0.1)?;
    if moe {
        // qwen3moe with its own output matrix; qwen3 ties it to token_embd.
        b.tensor("output.weight", &[N_EMBD, n_vocab], "q6_K", 0.0, 0.15)?;
    }
    // The writer streams into a temporary file and renames it into place.
    b.w.write_to_path(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The Mixtral-style llama of [`EXTRA_ARCHS`] (see the module docs), all F32.
fn write_llama_moe8(path: &Path, seed: u64, tok: &GgufFile) -> Result<()> {
    let n_vocab = match tok.metadata().get_array("tokenizer.ggml.tokens") {
        Some(a) => a.len() as u64,
        None => bail!("{} has no tokenizer.ggml.tokens", tok.path().display()),
    };
    let mut b = Builder { w: GgufWriter::new(), rng: Rng(seed ^ 0x6c6d_6f65_3800) };
    let head_dim = M8_EMBD / M8_HEAD;
    let kv_dim = M8_HEAD_KV * head_dim;
    let k = |s: &str| format!("llama.{s}");
    let w = &mut b.w;
    w.add_kv("general.architecture", "llama");
    w.add_kv("general.type", "model");
    w.add_kv("general.name", format!("synthetic llama-moe8 (gguf-engine xtask synth v{VERSION}, seed {seed:#x})"));
    w.add_kv("general.file_type", 0u32); // ALL_F32
    w.add_kv(&k("block_count"), M8_LAYER as u32);
    w.add_kv(&k("context_length"), CTX);
    w.add_kv(&k("embedding_length"), M8_EMBD as u32);
    w.add_kv(&k("feed_forward_length"), M8_FF as u32);
    w.add_kv(&k("attention.head_count"), M8_HEAD as u32);
    w.add_kv(&k("attention.head_count_kv"), M8_HEAD_KV as u32);
    w.add_kv(&k("rope.freq_base"), 10_000f32);
    w.add_kv(&k("rope.dimension_count"), head_dim as u32);
    w.add_kv(&k("attention.layer_norm_rms_epsilon"), 1e-5f32);
    w.add_kv(&k("expert_count"), M8_EXPERT as u32);
    w.add_kv(&k("expert_used_count"), M8_EXPERT_USED as u32);
    w.add_kv(&k("vocab_size"), n_vocab as u32);
    for (key, value) in tok.metadata().iter() {
        if key.starts_with("tokenizer.") {
            w.metadata_mut().set(key, value.clone());
        }
    }
    w.add_kv("general.quantization_version", 2u32);
    b.tensor("token_embd.weight", &[M8_EMBD, n_vocab], "f32", 0.0, 0.15)?;
    for il in 0..M8_LAYER {
        let p = |s: &str| format!("blk.{il}.{s}");
        b.tensor(&p("attn_norm.weight"), &[M8_EMBD], "f32", 1.0, 0.1)?;
        b.tensor(&p("attn_q.weight"), &[M8_EMBD, M8_EMBD], "f32", 0.0, 0.05)?;
        b.tensor(&p("attn_k.weight"), &[M8_EMBD, kv_dim], "f32", 0.0, 0.05)?;
        b.tensor(&p("attn_v.weight"), &[M8_EMBD, kv_dim], "f32", 0.0, 0.05)?;
        b.tensor(&p("attn_output.weight"), &[M8_EMBD, M8_EMBD], "f32", 0.0, 0.05)?;
        b.tensor(&p("ffn_norm.weight"), &[M8_EMBD], "f32", 1.0, 0.1)?;
        b.tensor(&p("ffn_gate_inp.weight"), &[M8_EMBD, M8_EXPERT], "f32", 0.0, 0.1)?;
        b.tensor(&p("ffn_gate_exps.weight"), &[M8_EMBD, M8_FF, M8_EXPERT], "f32", 0.0, 0.05)?;
        b.tensor(&p("ffn_up_exps.weight"), &[M8_EMBD, M8_FF, M8_EXPERT], "f32", 0.0, 0.05)?;
        b.tensor(&p("ffn_down_exps.weight"), &[M8_FF, M8_EMBD, M8_EXPERT], "f32", 0.0, 0.05)?;
    }
    b.tensor("output_norm.weight", &[M8_EMBD], "f32", 1.0, 0.1)?;
    b.tensor("output.weight", &[M8_EMBD, n_vocab], "f32", 0.0, 0.15)?;
    b.w.write_to_path(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_stable_and_roughly_normal() {
        let mut r = Rng(1);
        let a = r.next_u64();
        assert_eq!(Rng(1).next_u64(), a);
        let v = Rng(7).normals(20_000, 0.0, 1.0);
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.03 && (var - 1.0).abs() < 0.05, "mean {mean} var {var}");
    }
}
