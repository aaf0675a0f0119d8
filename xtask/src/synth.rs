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
//!
//! **Families** ([`FAMILIES`], `cargo xtask verify families`, issue 15): one file per
//! architecture family with a real model's head (and expert) layout, 2–4 layers, that
//! model's hyperparameters and a real tokenizer (a llama.cpp `ggml-vocab-*` fixture or a
//! real file's `tokenizer.*` keys). Matrices cycle tensor by tensor through F16, Q8_0,
//! Q4_K and Q6_K (a K-quant on rows that are not a multiple of 256 falls back to Q8_0), so
//! each file holds all four; norms and biases are F32. Every matrix is N(0, 1/√fan_in), the
//! embeddings and output N(0, 4/√n_embd). A family is a [`Family`] row: its layout plus
//! [`Feature`] flags and extra `<arch>.*` keys; one that needs tensors the flags cannot
//! describe gets a flag of its own. Cached as `<cache>/synth/fam-<name>-v<V>-s<seed>.gguf`.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use gguf_format::{GgufFile, GgufWriter};

use crate::models;

mod encoders;
pub use encoders::ENCODERS;

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

    /// An F32 tensor of `dims` holding `data`.
    fn tensor_data(&mut self, name: &str, dims: &[u64], data: &[f32]) -> Result<()> {
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.w.add_tensor_owned(name, dims, 0, bytes).with_context(|| format!("adding {name}"))?;
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

// ---------------------------------------------------------------------------------------
// Families (`cargo xtask verify families`, issue 15)
// ---------------------------------------------------------------------------------------

/// Where a family's tokenizer metadata comes from.
#[derive(Debug, Clone, Copy)]
pub enum VocabSource {
    /// llama.cpp's `models/ggml-vocab-<name>.gguf` fixture (extracted into `<cache>/vocab`).
    Fixture(&'static str),
    /// A real model of the cache's model table, by name.
    Model(&'static str),
}

/// An extra metadata value, written under `<arch>.<key>`.
#[derive(Debug, Clone, Copy)]
pub enum Kv {
    /// `uint32`.
    U32(u32),
    /// `float32`.
    F32(f32),
    /// An array of `int32`.
    I32s(&'static [i32]),
    /// An array of `bool`.
    Bools(&'static [bool]),
    /// A string.
    Str(&'static str),
    /// A bool.
    Bool(bool),
}

/// What sets a family's file apart from the plain llama layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// `attn_{q,k,v}.bias` (qwen2).
    QkvBias,
    /// `attn_{q,k}_norm.weight` of one head's width (qwen3, gemma3).
    QkNorm,
    /// `post_attention_norm` and `post_ffw_norm` (gemma2/3).
    PostNorms,
    /// `attention.key_length` / `attention.value_length` written (head width ≠ n_embd / n_head
    /// or a file that states it anyway).
    HeadDimKeys,
    /// `rope.dimension_count` written (= head width).
    RopeDimKey,
    /// An untied `output.weight` (otherwise the output reuses `token_embd`).
    Output,
    /// No `attn_norm` / `ffn_norm` (olmo2: post-norms only).
    NoPreNorms,
    /// With [`Feature::QkNorm`]: the norms span all heads (`n_head × head` and
    /// `n_head_kv × head` wide, olmo2), not one head.
    QkNormWhole,
    /// Q, K and V in one `attn_qkv` (phi3).
    FusedQkv,
    /// Gate and up in one `ffn_up` of `2·n_ff` rows, gate first, no `ffn_gate` (phi3).
    FusedUp,
    /// LongRoPE's `rope_factors_short` / `rope_factors_long` (`head / 2` each; Phi-3.5).
    RopeFactors,
    /// Qwen3.5's hybrid layers: gated delta nets (`attn_qkv`, `attn_gate`, `ssm_*`, shaped
    /// by the `ssm.*` keys of [`Family::kv`]) except every `full_attention_interval`-th
    /// layer, a gated attention (`attn_q` of two heads' rows per head: query and gate,
    /// QK-norm); `post_attention_norm` in place of `ffn_norm`.
    DeltaNet,
    /// Gemma 4's layers (`write_gemma4_layer`): windowed and global layers of their own head
    /// widths (`attention.key_length_swa`, `key_length`) per `attention.sliding_window_pattern`,
    /// QK-norm, post-norms, KV-shared last layers (`attention.shared_kv_layers`: no K/V),
    /// no `attn_v` on the first global layer (V = K), per-layer embeddings
    /// (`embedding_length_per_layer_input`), `layer_output_scale`, `rope_freqs` for the
    /// proportional rope of global layers; the FFN widths per layer from the family's
    /// `feed_forward_length` array.
    Gemma4,
    /// gpt-oss's layer: Q/K/V and O biases, `attn_sinks` (one logit per head),
    /// `post_attention_norm` in place of `ffn_norm`, a biased router and MXFP4 experts with
    /// per-expert biases.
    GptOss,
    /// GLM-4.5's MoE layers: the first `leading_dense_block_count` layers dense, the others
    /// a sigmoid router with `exp_probs_b.bias` and routed plus `expert_shared_count`
    /// shared experts (`ffn_*_shexp`); `post_attention_norm` in place of `ffn_norm`;
    /// `block_count` also counts `nextn_predict_layers` (no tensors written for them).
    Glm4Moe,
    /// LFM2's layers (`write_lfm2_layer`): short convolutions where the family's
    /// `attention.head_count_kv` array says 0 (`shortconv.{in_proj,conv,out_proj}`,
    /// `shortconv.l_cache` taps), attention with QK-norm elsewhere; the output norm is
    /// `token_embd_norm`.
    Lfm2,
    /// DeepSeek's MLA layers (`write_deepseek2_layer`): `attn_q` (or `attn_q_a` /
    /// `attn_q_a_norm` / `attn_q_b` when `attention.q_lora_rank` > 0), `attn_kv_a_mqa`,
    /// `attn_kv_a_norm`, the per-head `attn_k_b` / `attn_v_b` (F16 or Q8_0), `attn_output`,
    /// shaped by the `attention.*_mla` / `kv_lora_rank` / `rope.dimension_count` keys of
    /// [`Family::kv`]; dense FFNs in the first `leading_dense_block_count` layers, then
    /// routed experts (with `exp_probs_b.bias` under a sigmoid router) and
    /// `expert_shared_count` shared experts.
    Deepseek2,
    /// Granite 4.0-H's layers (`write_granite_hybrid_layer`): Mamba-2 mixers where the
    /// family's `attention.head_count_kv` array says 0 (`ssm_in`, `ssm_conv1d` + bias,
    /// `ssm_dt.bias`, `ssm_a`, `ssm_d`, `ssm_norm`, `ssm_out`, shaped by the `ssm.*` keys),
    /// plain GQA attention elsewhere; `ffn_norm`, then a SwiGLU FFN or (with experts)
    /// routed experts of `feed_forward_length` and the `expert_shared_feed_forward_length`
    /// shared expert.
    GraniteHybrid,
}

/// One family's synthetic file: a real model's head (and expert) layout, 2–4 layers, its
/// hyperparameters and tokenizer, random weights.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// The name `verify families --family` takes and the cache file's stem.
    pub name: &'static str,
    /// `general.architecture`.
    pub arch: &'static str,
    /// The real model whose layout this is (for the report).
    pub layout: &'static str,
    /// Held to the MoE thresholds (routing may flip on a last-bit difference).
    pub moe: bool,
    /// The tokenizer.
    pub vocab: VocabSource,
    /// Blocks.
    pub n_layer: usize,
    /// Width.
    pub n_embd: u64,
    /// Query heads.
    pub n_head: u64,
    /// KV heads.
    pub n_head_kv: u64,
    /// Head width.
    pub head_dim: u64,
    /// Dense FFN width (0 in MoE-only layers).
    pub n_ff: u64,
    /// Experts (0 = dense).
    pub n_expert: u64,
    /// Experts per token.
    pub n_expert_used: u64,
    /// One expert's FFN width.
    pub n_ff_exp: u64,
    /// `rope.freq_base`.
    pub rope_base: f32,
    /// `attention.layer_norm_rms_epsilon`.
    pub rms_eps: f32,
    /// `context_length`.
    pub ctx: u32,
    /// Layout features.
    pub features: &'static [Feature],
    /// Further `<arch>.*` keys.
    pub kv: &'static [(&'static str, Kv)],
}

impl Family {
    fn has(&self, f: Feature) -> bool {
        self.features.contains(&f)
    }
}

/// The families `verify families` runs, in the order it runs them.
pub const FAMILIES: &[Family] = &[
    Family {
        name: "llama",
        arch: "llama",
        layout: "TinyLlama-1.1B (2048 wide, 32 heads / 4 KV heads of 64, FFN 5632), Llama 2 SPM vocab",
        moe: false,
        vocab: VocabSource::Fixture("llama-spm"),
        n_layer: 3,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 4,
        head_dim: 64,
        n_ff: 5632,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 10000.0,
        rms_eps: 1e-5,
        ctx: 2048,
        features: &[Feature::RopeDimKey, Feature::Output],
        kv: &[],
    },
    Family {
        name: "qwen2",
        arch: "qwen2",
        layout: "Qwen2.5-0.5B (896 wide, 14 heads / 2 KV heads of 64, FFN 4864, Q/K/V biases, tied output), qwen2 vocab",
        moe: false,
        vocab: VocabSource::Fixture("qwen2"),
        n_layer: 3,
        n_embd: 896,
        n_head: 14,
        n_head_kv: 2,
        head_dim: 64,
        n_ff: 4864,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        ctx: 32768,
        features: &[Feature::QkvBias],
        kv: &[],
    },
    Family {
        name: "qwen3",
        arch: "qwen3",
        layout: "Qwen3-0.6B (1024 wide, 16 heads / 8 KV heads of 128, FFN 3072, QK-norm, tied output), qwen2 vocab",
        moe: false,
        vocab: VocabSource::Fixture("qwen2"),
        n_layer: 3,
        n_embd: 1024,
        n_head: 16,
        n_head_kv: 8,
        head_dim: 128,
        n_ff: 3072,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        ctx: 40960,
        features: &[Feature::QkNorm, Feature::HeadDimKeys],
        kv: &[],
    },
    Family {
        name: "qwen3moe",
        arch: "qwen3moe",
        layout: "Qwen3-30B-A3B (2048 wide, 32 heads / 4 KV heads of 128, 128 experts, 8 used; expert FFN 256 instead of 768), qwen2 vocab",
        moe: true,
        vocab: VocabSource::Fixture("qwen2"),
        n_layer: 2,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 4,
        head_dim: 128,
        n_ff: 0,
        n_expert: 128,
        n_expert_used: 8,
        n_ff_exp: 256,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        ctx: 40960,
        features: &[Feature::QkNorm, Feature::HeadDimKeys, Feature::Output],
        kv: &[],
    },
    Family {
        name: "gpt-oss",
        arch: "gpt-oss",
        layout: "gpt-oss-20b (2880 wide, 64 heads / 8 KV heads of 64, Q/K/V/O biases, attention sinks, window 128 \
                 on layers 0 and 2 of 4, rope base 150000 with YaRN x32 from 4096; 32 MXFP4 experts with biases, \
                 4 used, expert FFN 512 instead of 2880, untied output), Llama 3 BPE vocab (o200k_harmony is not \
                 among the fixtures)",
        moe: true,
        vocab: VocabSource::Fixture("llama-bpe"),
        n_layer: 4,
        n_embd: 2880,
        n_head: 64,
        n_head_kv: 8,
        head_dim: 64,
        n_ff: 0,
        n_expert: 32,
        n_expert_used: 4,
        n_ff_exp: 512,
        rope_base: 150_000.0,
        rms_eps: 1e-5,
        ctx: 131_072,
        features: &[Feature::QkvBias, Feature::HeadDimKeys, Feature::Output, Feature::GptOss],
        kv: &[
            ("attention.sliding_window", Kv::U32(128)),
            ("rope.scaling.type", Kv::Str("yarn")),
            ("rope.scaling.factor", Kv::F32(32.0)),
            ("rope.scaling.original_context_length", Kv::U32(4096)),
        ],
    },
    Family {
        name: "mistral3",
        arch: "mistral3",
        layout: "Ministral-3-3B (3072 wide, 32 heads / 8 KV heads of 128, FFN 9216, rope base 1e6 with YaRN x16 from \
                 16384 (log multiplier 1), attention temperature 0.1, tied output), Llama 3 BPE vocab (tekken is not \
                 among the fixtures)",
        moe: false,
        vocab: VocabSource::Fixture("llama-bpe"),
        n_layer: 3,
        n_embd: 3072,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 128,
        n_ff: 9216,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 1_000_000.0,
        rms_eps: 1e-5,
        ctx: 262_144,
        features: &[Feature::HeadDimKeys, Feature::RopeDimKey],
        kv: &[
            ("rope.scaling.type", Kv::Str("yarn")),
            ("rope.scaling.factor", Kv::F32(16.0)),
            ("rope.scaling.original_context_length", Kv::U32(16384)),
            ("rope.scaling.yarn_log_multiplier", Kv::F32(1.0)),
            ("rope.scaling.yarn_beta_fast", Kv::F32(32.0)),
            ("rope.scaling.yarn_beta_slow", Kv::F32(1.0)),
            ("attention.temperature_scale", Kv::F32(0.1)),
        ],
    },
    Family {
        name: "glm4moe",
        arch: "glm4moe",
        layout: "GLM-4.5-Air (4096 wide, 96 heads / 8 KV heads of 128, Q/K/V biases, NeoX rope on 64 of 128 dims, \
                 base 1e6; layer 0 dense (FFN 10944), layers 1-2 MoE: sigmoid router with selection bias, 8 of 64 \
                 experts instead of 128, expert FFN 256 instead of 1408, one shared expert, weights renormalized and \
                 scaled by 2.5 (GLM-4.5's); one MTP block counted in block_count, untied output), GPT-2 vocab \
                 (GLM's 151k tokenizer is not among the fixtures; a small one keeps the 4096-wide file small)",
        moe: true,
        vocab: VocabSource::Fixture("gpt-2"),
        n_layer: 3,
        n_embd: 4096,
        n_head: 96,
        n_head_kv: 8,
        head_dim: 128,
        n_ff: 10944,
        n_expert: 64,
        n_expert_used: 8,
        n_ff_exp: 256,
        rope_base: 1_000_000.0,
        rms_eps: 1e-5,
        ctx: 131_072,
        features: &[Feature::QkvBias, Feature::HeadDimKeys, Feature::Output, Feature::Glm4Moe],
        kv: &[
            ("rope.dimension_count", Kv::U32(64)),
            ("leading_dense_block_count", Kv::U32(1)),
            ("expert_shared_count", Kv::U32(1)),
            ("expert_weights_norm", Kv::Bool(true)),
            ("expert_weights_scale", Kv::F32(2.5)),
            ("expert_gating_func", Kv::U32(2)),
            ("nextn_predict_layers", Kv::U32(1)),
        ],
    },
    Family {
        name: "deepseek2",
        arch: "deepseek2",
        layout: "DeepSeek-V2-Lite (2048 wide, 16 heads; MLA: direct attn_q, kv_lora_rank 512, heads of 128 + 64 \
                 roped (normal rope, YaRN factor 40 from 4096, mscale_all_dims 0.707), values 128; layer 0 dense \
                 (FFN 10944), layers 1-2 MoE: softmax router (no gating key, as V2 files), 6 of 64 experts, expert \
                 FFN 256 instead of 1408, 2 shared experts, weights not renormalized; untied output), deepseek-llm vocab",
        moe: true,
        vocab: VocabSource::Fixture("deepseek-llm"),
        n_layer: 3,
        n_embd: 2048,
        n_head: 16,
        n_head_kv: 1,
        head_dim: 192,
        n_ff: 10944,
        n_expert: 64,
        n_expert_used: 6,
        n_ff_exp: 256,
        rope_base: 10000.0,
        rms_eps: 1e-6,
        ctx: 163_840,
        features: &[Feature::Output, Feature::Deepseek2],
        kv: &[
            ("attention.key_length", Kv::U32(576)),
            ("attention.value_length", Kv::U32(512)),
            ("attention.key_length_mla", Kv::U32(192)),
            ("attention.value_length_mla", Kv::U32(128)),
            ("attention.q_lora_rank", Kv::U32(0)),
            ("attention.kv_lora_rank", Kv::U32(512)),
            ("rope.dimension_count", Kv::U32(64)),
            ("leading_dense_block_count", Kv::U32(1)),
            ("expert_shared_count", Kv::U32(2)),
            ("expert_weights_scale", Kv::F32(1.0)),
            ("rope.scaling.type", Kv::Str("yarn")),
            ("rope.scaling.factor", Kv::F32(40.0)),
            ("rope.scaling.original_context_length", Kv::U32(4096)),
            ("rope.scaling.yarn_log_multiplier", Kv::F32(0.0707)),
        ],
    },
    Family {
        name: "deepseek3",
        arch: "deepseek2",
        layout: "DeepSeek-V3 / R1 / Kimi-K2 MLA and routing at reduced width (2048 wide instead of 7168, 32 heads \
                 instead of 128; q_lora_rank 1536, kv_lora_rank 512, heads of 128 + 64 roped, values 128, YaRN \
                 factor 40 from 4096, mscale_all_dims 1; layer 0 dense (FFN 4096), layers 1-2 MoE: sigmoid router \
                 with selection bias, 8 of 64 experts instead of 256 in 8 groups of which 4 are chosen, expert FFN \
                 256 instead of 2048, 1 shared expert, weights renormalized and scaled by 2.5; untied output), \
                 deepseek-llm vocab (V3's 129k tokenizer is not among the fixtures)",
        moe: true,
        vocab: VocabSource::Fixture("deepseek-llm"),
        n_layer: 3,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 1,
        head_dim: 192,
        n_ff: 4096,
        n_expert: 64,
        n_expert_used: 8,
        n_ff_exp: 256,
        rope_base: 10000.0,
        rms_eps: 1e-6,
        ctx: 163_840,
        features: &[Feature::Output, Feature::Deepseek2],
        kv: &[
            ("attention.key_length", Kv::U32(576)),
            ("attention.value_length", Kv::U32(512)),
            ("attention.key_length_mla", Kv::U32(192)),
            ("attention.value_length_mla", Kv::U32(128)),
            ("attention.q_lora_rank", Kv::U32(1536)),
            ("attention.kv_lora_rank", Kv::U32(512)),
            ("rope.dimension_count", Kv::U32(64)),
            ("leading_dense_block_count", Kv::U32(1)),
            ("expert_shared_count", Kv::U32(1)),
            ("expert_weights_scale", Kv::F32(2.5)),
            ("expert_weights_norm", Kv::Bool(true)),
            ("expert_gating_func", Kv::U32(2)),
            ("expert_group_count", Kv::U32(8)),
            ("expert_group_used_count", Kv::U32(4)),
            ("rope.scaling.type", Kv::Str("yarn")),
            ("rope.scaling.factor", Kv::F32(40.0)),
            ("rope.scaling.original_context_length", Kv::U32(4096)),
            ("rope.scaling.yarn_log_multiplier", Kv::F32(0.1)),
        ],
    },
    Family {
        name: "lfm2",
        arch: "lfm2",
        layout: "LFM2-350M (1024 wide; short convolutions of 3 taps on layers 0, 1 and 3 of 4, attention 16 heads / \
                 8 KV heads of 64 with QK-norm on layer 2 (the model's conv, conv, attention, conv start), FFN 4608, \
                 rope base 1e6, tied output), Llama 3 BPE vocab (LFM2's 65k tokenizer is not among the fixtures)",
        moe: false,
        vocab: VocabSource::Fixture("llama-bpe"),
        n_layer: 4,
        n_embd: 1024,
        n_head: 16,
        n_head_kv: 8,
        head_dim: 64,
        n_ff: 4608,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 1_000_000.0,
        rms_eps: 1e-5,
        ctx: 128_000,
        features: &[Feature::Lfm2],
        kv: &[("attention.head_count_kv", Kv::I32s(&[0, 0, 8, 0])), ("shortconv.l_cache", Kv::U32(3))],
    },
    Family {
        name: "lfm2moe",
        arch: "lfm2moe",
        layout: "LFM2-8B-A1B (2048 wide; short convolutions of 3 taps on layers 0, 1 and 3 of 4, attention 32 heads / \
                 8 KV heads of 64 with QK-norm on layer 2; layers 0-1 dense (FFN 7168), 2-3 MoE: sigmoid router with \
                 selection bias, 4 of 32 experts, expert FFN 512 instead of 1792; rope base 1e6, tied output), \
                 Llama 3 BPE vocab",
        moe: true,
        vocab: VocabSource::Fixture("llama-bpe"),
        n_layer: 4,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 64,
        n_ff: 7168,
        n_expert: 32,
        n_expert_used: 4,
        n_ff_exp: 512,
        rope_base: 1_000_000.0,
        rms_eps: 1e-5,
        ctx: 128_000,
        features: &[Feature::Lfm2],
        kv: &[
            ("attention.head_count_kv", Kv::I32s(&[0, 0, 8, 0])),
            ("shortconv.l_cache", Kv::U32(3)),
            ("leading_dense_block_count", Kv::U32(2)),
            ("expert_gating_func", Kv::U32(2)),
        ],
    },
    Family {
        name: "gemma2",
        arch: "gemma2",
        layout: "gemma-2-2b (2304 wide, 8 heads / 4 KV heads of 256, FFN 9216, rope base 10000, tied output; \
                 attention soft-cap 50, final soft-cap 30; window 512 instead of 4096 on layers 0 and 2 of 4), \
                 gemma-3-270m's vocab (Gemma 2's SPM is not among the fixtures)",
        moe: false,
        vocab: VocabSource::Model("gemma3-270m"),
        n_layer: 4,
        n_embd: 2304,
        n_head: 8,
        n_head_kv: 4,
        head_dim: 256,
        n_ff: 9216,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 10000.0,
        rms_eps: 1e-6,
        ctx: 8192,
        features: &[Feature::PostNorms, Feature::HeadDimKeys],
        kv: &[
            ("attention.sliding_window", Kv::U32(512)),
            ("attn_logit_softcapping", Kv::F32(50.0)),
            ("final_logit_softcapping", Kv::F32(30.0)),
        ],
    },
    Family {
        name: "gemma3",
        arch: "gemma3",
        layout: "gemma-3-270m (640 wide, 4 heads / 1 KV head of 256, FFN 2048, window 512, local base 10000), its vocab; \
                 4 layers with a global 4th (sliding_window_pattern 4)",
        moe: false,
        vocab: VocabSource::Model("gemma3-270m"),
        n_layer: 4,
        n_embd: 640,
        n_head: 4,
        n_head_kv: 1,
        head_dim: 256,
        n_ff: 2048,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        ctx: 32768,
        features: &[Feature::QkNorm, Feature::PostNorms, Feature::HeadDimKeys],
        kv: &[
            ("attention.sliding_window", Kv::U32(512)),
            ("attention.sliding_window_pattern", Kv::U32(4)),
            ("rope.freq_base_swa", Kv::F32(10000.0)),
        ],
    },
    Family {
        name: "smollm3",
        arch: "smollm3",
        layout: "SmolLM3-3B (2048 wide, 16 heads / 4 KV heads of 128, FFN 11008, rope base 5e6, tied output; \
                 no rope on layer 3 of 4), Llama 3 BPE vocab",
        moe: false,
        vocab: VocabSource::Fixture("llama-bpe"),
        n_layer: 4,
        n_embd: 2048,
        n_head: 16,
        n_head_kv: 4,
        head_dim: 128,
        n_ff: 11008,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 5_000_000.0,
        rms_eps: 1e-6,
        ctx: 65536,
        features: &[Feature::RopeDimKey],
        kv: &[],
    },
    Family {
        name: "granite",
        arch: "granite",
        layout: "granite-3.3-2b (2048 wide, 32 heads / 8 KV heads of 64, FFN 8192, rope base 1e7, tied output; \
                 multipliers: embedding 12, residual 0.22, attention 1/64, logits 1/8), refact (StarCoder BPE) vocab",
        moe: false,
        vocab: VocabSource::Fixture("refact"),
        n_layer: 3,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 64,
        n_ff: 8192,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 10_000_000.0,
        rms_eps: 1e-5,
        ctx: 131072,
        features: &[Feature::RopeDimKey],
        kv: &[
            ("embedding_scale", Kv::F32(12.0)),
            ("residual_scale", Kv::F32(0.22)),
            ("attention.scale", Kv::F32(0.015625)),
            ("logit_scale", Kv::F32(8.0)),
        ],
    },
    Family {
        name: "granitehybrid",
        arch: "granitehybrid",
        layout: "granite-4.0-h-micro (2048 wide; Mamba-2 64 heads of 64 (d_inner 4096), d_state 128, 1 group, \
                 conv 4, on layers 0, 1 and 3 of 4; attention 32 heads / 8 KV heads of 64 without rope on layer 2; \
                 dense FFN 8192; multipliers: embedding 12, residual 0.22, attention 1/64, logits 1/8; tied \
                 output), refact (StarCoder BPE) vocab",
        moe: false,
        vocab: VocabSource::Fixture("refact"),
        n_layer: 4,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 64,
        n_ff: 8192,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 10000.0,
        rms_eps: 1e-5,
        ctx: 1_048_576,
        features: &[Feature::GraniteHybrid],
        kv: &[
            ("attention.head_count_kv", Kv::I32s(&[0, 0, 8, 0])),
            ("ssm.conv_kernel", Kv::U32(4)),
            ("ssm.state_size", Kv::U32(128)),
            ("ssm.group_count", Kv::U32(1)),
            ("ssm.time_step_rank", Kv::U32(64)),
            ("ssm.inner_size", Kv::U32(4096)),
            ("rope.scaling.finetuned", Kv::Bool(false)),
            ("embedding_scale", Kv::F32(12.0)),
            ("residual_scale", Kv::F32(0.22)),
            ("attention.scale", Kv::F32(0.015625)),
            ("logit_scale", Kv::F32(8.0)),
        ],
    },
    Family {
        name: "granitehybrid-moe",
        arch: "granitehybrid",
        layout: "granite-4.0-h-tiny (1536 wide; Mamba-2 48 heads of 64 (d_inner 3072), d_state 128, 1 group, conv 4, \
                 on layers 0, 1 and 3 of 4; attention 12 heads / 4 KV heads of 128 without rope on layer 2; 6 of 32 \
                 experts instead of 64, expert FFN 512, shared expert FFN 1024; multipliers: embedding 12, residual \
                 0.22, attention 1/128, logits 1/6; tied output), refact (StarCoder BPE) vocab",
        moe: true,
        vocab: VocabSource::Fixture("refact"),
        n_layer: 4,
        n_embd: 1536,
        n_head: 12,
        n_head_kv: 4,
        head_dim: 128,
        n_ff: 512,
        n_expert: 32,
        n_expert_used: 6,
        n_ff_exp: 512,
        rope_base: 10000.0,
        rms_eps: 1e-5,
        ctx: 1_048_576,
        features: &[Feature::GraniteHybrid],
        kv: &[
            ("attention.head_count_kv", Kv::I32s(&[0, 0, 4, 0])),
            ("ssm.conv_kernel", Kv::U32(4)),
            ("ssm.state_size", Kv::U32(128)),
            ("ssm.group_count", Kv::U32(1)),
            ("ssm.time_step_rank", Kv::U32(48)),
            ("ssm.inner_size", Kv::U32(3072)),
            ("rope.scaling.finetuned", Kv::Bool(false)),
            ("expert_shared_feed_forward_length", Kv::U32(1024)),
            ("embedding_scale", Kv::F32(12.0)),
            ("residual_scale", Kv::F32(0.22)),
            ("attention.scale", Kv::F32(0.0078125)),
            ("logit_scale", Kv::F32(6.0)),
        ],
    },
    Family {
        name: "olmo2",
        arch: "olmo2",
        layout: "OLMo-2-0425-1B (2048 wide, 16 heads / 16 KV heads of 128, FFN 8192, rope base 5e5, post-norms only, \
                 whole-width QK-norm, untied output), GPT-NeoX BPE vocab (OLMo 1's; no dolma2 fixture here)",
        moe: false,
        vocab: VocabSource::Fixture("gpt-neox"),
        n_layer: 3,
        n_embd: 2048,
        n_head: 16,
        n_head_kv: 16,
        head_dim: 128,
        n_ff: 8192,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 500_000.0,
        rms_eps: 1e-6,
        ctx: 4096,
        features: &[Feature::NoPreNorms, Feature::QkNorm, Feature::QkNormWhole, Feature::PostNorms, Feature::Output],
        kv: &[],
    },
    Family {
        name: "phi3",
        arch: "phi3",
        layout: "Phi-3.5-mini (3072 wide, 32 heads / 32 KV heads of 96, FFN 8192, fused attn_qkv and gate+up ffn_up, \
                 LongRoPE short/long factors with attn_factor 1.19 and original context 4096, untied output), \
                 Phi-3 SPM vocab",
        moe: false,
        vocab: VocabSource::Fixture("phi-3"),
        n_layer: 3,
        n_embd: 3072,
        n_head: 32,
        n_head_kv: 32,
        head_dim: 96,
        n_ff: 8192,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 10000.0,
        rms_eps: 1e-5,
        ctx: 131072,
        features: &[Feature::RopeDimKey, Feature::FusedQkv, Feature::FusedUp, Feature::RopeFactors, Feature::Output],
        kv: &[
            ("rope.scaling.attn_factor", Kv::F32(1.190_238_1)),
            ("rope.scaling.original_context_length", Kv::U32(4096)),
            ("attention.sliding_window", Kv::U32(262_144)),
        ],
    },
    Family {
        name: "qwen35",
        arch: "qwen35",
        layout: "Qwen3.5 hybrid, 0.8B-sized (1024 wide, FFN 3584; gated attention 8 heads / 2 KV heads of 256, \
                 rope on 64 dims, M-RoPE sections 11/11/10/0, base 1e7; gated delta net 16 key heads / 32 value \
                 heads of 128 (the larger Qwen3.5 models' 1:2 ratio), conv 4), 3 delta-net layers + 1 attention \
                 layer (full_attention_interval 4), tied output, qwen35 vocab",
        moe: false,
        vocab: VocabSource::Fixture("qwen35"),
        n_layer: 4,
        n_embd: 1024,
        n_head: 8,
        n_head_kv: 2,
        head_dim: 256,
        n_ff: 3584,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 10_000_000.0,
        rms_eps: 1e-6,
        ctx: 262_144,
        features: &[Feature::DeltaNet, Feature::QkNorm, Feature::HeadDimKeys],
        kv: &[
            ("rope.dimension_count", Kv::U32(64)),
            ("rope.dimension_sections", Kv::I32s(&[11, 11, 10, 0])),
            ("full_attention_interval", Kv::U32(4)),
            ("ssm.conv_kernel", Kv::U32(4)),
            ("ssm.state_size", Kv::U32(128)),
            ("ssm.group_count", Kv::U32(16)),
            ("ssm.time_step_rank", Kv::U32(32)),
            ("ssm.inner_size", Kv::U32(4096)),
        ],
    },
    Family {
        name: "qwen35moe",
        arch: "qwen35moe",
        layout: "Qwen3.5-35B-A3B (2048 wide; gated attention 16 heads / 2 KV heads of 256, rope on 64 dims, \
                 M-RoPE sections 11/11/10/0, base 1e7; gated delta net 16 key heads / 32 value heads of 128, conv 4; \
                 8 of 64 experts instead of 256, expert FFN 256 instead of 512, shared expert FFN 512 with its \
                 sigmoid gate), 3 delta-net layers + 1 attention layer, untied output, qwen35 vocab",
        moe: true,
        vocab: VocabSource::Fixture("qwen35"),
        n_layer: 4,
        n_embd: 2048,
        n_head: 16,
        n_head_kv: 2,
        head_dim: 256,
        n_ff: 0,
        n_expert: 64,
        n_expert_used: 8,
        n_ff_exp: 256,
        rope_base: 10_000_000.0,
        rms_eps: 1e-6,
        ctx: 262_144,
        features: &[Feature::DeltaNet, Feature::QkNorm, Feature::HeadDimKeys, Feature::Output],
        kv: &[
            ("rope.dimension_count", Kv::U32(64)),
            ("rope.dimension_sections", Kv::I32s(&[11, 11, 10, 0])),
            ("full_attention_interval", Kv::U32(4)),
            ("ssm.conv_kernel", Kv::U32(4)),
            ("ssm.state_size", Kv::U32(128)),
            ("ssm.group_count", Kv::U32(16)),
            ("ssm.time_step_rank", Kv::U32(32)),
            ("ssm.inner_size", Kv::U32(4096)),
            ("expert_shared_feed_forward_length", Kv::U32(512)),
        ],
    },
    Family {
        name: "gemma4",
        arch: "gemma4",
        layout: "Gemma 4 E2B-sized (1536 wide, FFN 6144 and 12288 (double-wide) on the KV-shared layers, 8 heads / \
                 1 KV head: 256 wide on windowed layers (window 512, rope on 256 dims, base 1e4), 512 wide on global \
                 ones (proportional rope: 128 of 512 dims rotated, base 1e6); per-layer embeddings of 256, final \
                 soft-cap 30, tied output); 4 layers windowed/global/windowed/global, the last two sharing the first \
                 two's KV caches (E2B: 20 of 35), layer 1 without attn_v (V = K, as the larger models' global \
                 layers), gemma-4 vocab",
        moe: false,
        vocab: VocabSource::Fixture("gemma-4"),
        n_layer: 4,
        n_embd: 1536,
        n_head: 8,
        n_head_kv: 1,
        head_dim: 512,
        n_ff: 6144,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        ctx: 131_072,
        features: &[Feature::Gemma4, Feature::HeadDimKeys],
        kv: &[
            ("feed_forward_length", Kv::I32s(&[6144, 6144, 12288, 12288])),
            ("attention.key_length_swa", Kv::U32(256)),
            ("attention.value_length_swa", Kv::U32(256)),
            ("rope.dimension_count", Kv::U32(512)),
            ("rope.dimension_count_swa", Kv::U32(256)),
            ("rope.freq_base_swa", Kv::F32(10000.0)),
            ("attention.sliding_window", Kv::U32(512)),
            ("attention.sliding_window_pattern", Kv::Bools(&[true, false, true, false])),
            ("attention.shared_kv_layers", Kv::U32(2)),
            ("embedding_length_per_layer_input", Kv::U32(256)),
            ("final_logit_softcapping", Kv::F32(30.0)),
        ],
    },
    Family {
        name: "gemma4moe",
        arch: "gemma4",
        layout: "Gemma 4 26B-A4B (2816 wide, 16 heads; windowed layers 8 KV heads of 256 (window 1024, rope on 256 \
                 dims, base 1e4), global ones 2 KV heads of 512 with V = K (proportional rope, base 1e6); every \
                 layer a GeGLU FFN of 2112 as shared expert beside 128 routed experts, 8 used, softmax router on \
                 rms_norm(x)/√n_embd·scale, per-expert down scales, gate+up fused (ffn_gate_up_exps) except on \
                 layer 2; expert FFN 128 instead of 704; final soft-cap 30, tied output, no per-layer embeddings); \
                 4 layers windowed/global/windowed/global, gemma-4 vocab",
        moe: true,
        vocab: VocabSource::Fixture("gemma-4"),
        n_layer: 4,
        n_embd: 2816,
        n_head: 16,
        n_head_kv: 8,
        head_dim: 512,
        n_ff: 2112,
        n_expert: 128,
        n_expert_used: 8,
        n_ff_exp: 128,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        ctx: 262_144,
        features: &[Feature::Gemma4, Feature::HeadDimKeys],
        kv: &[
            ("attention.head_count_kv", Kv::I32s(&[8, 2, 8, 2])),
            ("attention.key_length_swa", Kv::U32(256)),
            ("attention.value_length_swa", Kv::U32(256)),
            ("rope.dimension_count", Kv::U32(512)),
            ("rope.dimension_count_swa", Kv::U32(256)),
            ("rope.freq_base_swa", Kv::F32(10000.0)),
            ("attention.sliding_window", Kv::U32(1024)),
            ("attention.sliding_window_pattern", Kv::Bools(&[true, false, true, false])),
            ("attention.shared_kv_layers", Kv::U32(0)),
            ("embedding_length_per_layer_input", Kv::U32(0)),
            ("final_logit_softcapping", Kv::F32(30.0)),
        ],
    },
];

/// The family named `name`.
pub fn family(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().chain(ENCODERS).find(|f| f.name == name)
}

/// Bump when the family generator changes.
const FAMILY_VERSION: u32 = 1;

/// The matrix types a family file cycles through, tensor by tensor.
const FAMILY_TYPES: &[&str] = &["f16", "q8_0", "q4_K", "q6_K"];

/// Where the file of `fam` and `seed` is cached.
pub fn family_path(cache: &Path, fam: &Family, seed: u64) -> PathBuf {
    cache.join("synth").join(format!("fam-{}-v{FAMILY_VERSION}-s{seed:x}.gguf", fam.name))
}

/// The file of `fam`, written on first use.
pub fn ensure_family(cache: &Path, fam: &Family, seed: u64) -> Result<PathBuf> {
    let path = family_path(cache, fam, seed);
    if path.is_file() {
        return Ok(path);
    }
    let tok_src = match fam.vocab {
        VocabSource::Fixture(name) => {
            let want = format!("ggml-vocab-{name}.gguf");
            models::ensure_vocab(cache)?
                .into_iter()
                .find(|p| p.file_name().is_some_and(|f| f.to_string_lossy() == want))
                .with_context(|| format!("no vocab fixture {want} in {}", cache.join("vocab").display()))?
        }
        VocabSource::Model(name) => {
            models::ensure_model(models::find_model(name).with_context(|| format!("{name} not in the model table"))?)?
        }
    };
    let tok = GgufFile::open(&tok_src).with_context(|| format!("reading {}", tok_src.display()))?;
    std::fs::create_dir_all(path.parent().context("no parent")?)?;
    write_family(&path, fam, seed, &tok)?;
    eprintln!("synth: wrote {}", path.display());
    Ok(path)
}

/// The router and the stacked routed experts of one layer (`p` names a tensor of it). No
/// F16 experts: they would double the file for nothing F16 attention lacks.
fn routed_experts(b: &mut Builder, types: &mut TypeCycle, p: &dyn Fn(&str) -> String, fam: &Family) -> Result<()> {
    let (e, n, f) = (fam.n_embd, fam.n_expert, fam.n_ff_exp);
    let s = |fan_in: u64| 1.0 / (fan_in as f64).sqrt();
    b.tensor(&p("ffn_gate_inp.weight"), &[e, n], "f32", 0.0, s(e))?;
    let oss = fam.has(Feature::GptOss);
    let mut expert_type = |row: u64| loop {
        if oss {
            break "mxfp4"; // as gpt-oss ships its experts
        }
        let t = types.next(row);
        if t != "f16" {
            break t;
        }
    };
    b.tensor(&p("ffn_gate_exps.weight"), &[e, f, n], expert_type(e), 0.0, s(e))?;
    b.tensor(&p("ffn_up_exps.weight"), &[e, f, n], expert_type(e), 0.0, s(e))?;
    b.tensor(&p("ffn_down_exps.weight"), &[f, e, n], expert_type(f), 0.0, s(f))?;
    if oss {
        b.tensor(&p("ffn_gate_inp.bias"), &[n], "f32", 0.0, 0.1)?;
        b.tensor(&p("ffn_gate_exps.bias"), &[f, n], "f32", 0.0, 0.1)?;
        b.tensor(&p("ffn_up_exps.bias"), &[f, n], "f32", 0.0, 0.1)?;
        b.tensor(&p("ffn_down_exps.bias"), &[e, n], "f32", 0.0, 0.1)?;
    }
    Ok(())
}

/// Hands out the matrix types in turn; a K-quant on a row length that is not a multiple
/// of 256 falls back to Q8_0 (as llama-quantize falls back for such rows).
struct TypeCycle(usize, &'static [&'static str]);

impl TypeCycle {
    fn next(&mut self, row: u64) -> &'static str {
        let t = self.1[self.0 % self.1.len()];
        self.0 += 1;
        if t.ends_with("_K") && !row.is_multiple_of(256) {
            "q8_0"
        } else {
            t
        }
    }
}

/// A family file's builder (its random stream seeded from `seed` and the family's name)
/// with the `general.*` keys written, and the vocabulary size of `tok`.
fn family_builder(fam: &Family, seed: u64, tok: &GgufFile) -> Result<(Builder<'static>, u64)> {
    let n_vocab = match tok.metadata().get_array("tokenizer.ggml.tokens") {
        Some(a) => a.len() as u64,
        None => bail!("{} has no tokenizer.ggml.tokens", tok.path().display()),
    };
    let name_hash =
        fam.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    let mut b = Builder { w: GgufWriter::new(), rng: Rng(seed ^ name_hash) };
    let w = &mut b.w;
    w.add_kv("general.architecture", fam.arch);
    w.add_kv("general.type", "model");
    w.add_kv(
        "general.name",
        format!("synthetic {} (gguf-engine xtask synth families v{FAMILY_VERSION}, seed {seed:#x})", fam.name),
    );
    w.add_kv("general.file_type", 7u32); // mostly Q8_0
    Ok((b, n_vocab))
}

fn write_family(path: &Path, fam: &Family, seed: u64, tok: &GgufFile) -> Result<()> {
    write_family_types(path, fam, seed, tok, FAMILY_TYPES)
}

/// [`write_family`] with the matrices cycling through `types` (`&["f16"]`: every matrix
/// F16, a source for `llama-quantize`, as `crate::bench_files` writes its 1–3 B files).
pub fn write_family_types(
    path: &Path,
    fam: &Family,
    seed: u64,
    tok: &GgufFile,
    types: &'static [&'static str],
) -> Result<()> {
    if encoders::is_encoder(fam) {
        return encoders::write(path, fam, seed, tok, types);
    }
    let (mut b, n_vocab) = family_builder(fam, seed, tok)?;
    let arch = fam.arch;
    let k = |s: &str| format!("{arch}.{s}");
    let w = &mut b.w;
    let nextn = fam_u32(fam, "nextn_predict_layers").unwrap_or(0);
    w.add_kv(&k("block_count"), (fam.n_layer as u64 + nextn) as u32);
    w.add_kv(&k("context_length"), fam.ctx);
    w.add_kv(&k("embedding_length"), fam.n_embd as u32);
    w.add_kv(&k("feed_forward_length"), fam.n_ff as u32);
    w.add_kv(&k("attention.head_count"), fam.n_head as u32);
    if !fam.kv.iter().any(|(key, _)| *key == "attention.head_count_kv") {
        w.add_kv(&k("attention.head_count_kv"), fam.n_head_kv as u32);
    }
    if fam.has(Feature::HeadDimKeys) {
        w.add_kv(&k("attention.key_length"), fam.head_dim as u32);
        w.add_kv(&k("attention.value_length"), fam.head_dim as u32);
    } else if !fam.has(Feature::Deepseek2) {
        ensure!(fam.n_embd == fam.n_head * fam.head_dim, "{}: head width needs HeadDimKeys", fam.name);
    }
    if fam.has(Feature::RopeDimKey) {
        w.add_kv(&k("rope.dimension_count"), fam.head_dim as u32);
    }
    w.add_kv(&k("rope.freq_base"), fam.rope_base);
    w.add_kv(&k("attention.layer_norm_rms_epsilon"), fam.rms_eps);
    if fam.n_expert > 0 {
        w.add_kv(&k("expert_count"), fam.n_expert as u32);
        w.add_kv(&k("expert_used_count"), fam.n_expert_used as u32);
        w.add_kv(&k("expert_feed_forward_length"), fam.n_ff_exp as u32);
    }
    for &(key, v) in fam.kv {
        match v {
            Kv::U32(x) => w.add_kv(&k(key), x),
            Kv::F32(x) => w.add_kv(&k(key), x),
            Kv::I32s(x) => w.add_kv(&k(key), gguf_format::Array::I32(x.to_vec())),
            Kv::Bools(x) => w.add_kv(&k(key), gguf_format::Array::Bool(x.to_vec())),
            Kv::Str(x) => w.add_kv(&k(key), x),
            Kv::Bool(x) => w.add_kv(&k(key), x),
        };
    }
    for (key, value) in tok.metadata().iter() {
        if key.starts_with("tokenizer.") {
            w.metadata_mut().set(key, value.clone());
        }
    }
    w.add_kv("general.quantization_version", 2u32);

    // Scales: every matrix N(0, 1/√fan_in), so each projection keeps unit variance;
    // embeddings and the output N(0, 4/√n_embd), so logits spread over ~±10.
    let (e, q_dim, kv_dim) = (fam.n_embd, fam.n_head * fam.head_dim, fam.n_head_kv * fam.head_dim);
    let s = |fan_in: u64| 1.0 / (fan_in as f64).sqrt();
    let s_emb = 4.0 / (e as f64).sqrt();
    let mut types = TypeCycle(0, types);
    b.tensor("token_embd.weight", &[e, n_vocab], "q8_0", 0.0, s_emb)?;
    if fam.has(Feature::RopeFactors) {
        // Phi-3.5-mini's short factors run 1.0–2.9, its long ones 1.1–60.
        b.tensor("rope_factors_short.weight", &[fam.head_dim / 2], "f32", 1.5, 0.3)?;
        b.tensor("rope_factors_long.weight", &[fam.head_dim / 2], "f32", 12.0, 3.0)?;
    }
    if fam.has(Feature::Gemma4) {
        write_gemma4_globals(&mut b, &mut types, fam, n_vocab)?;
    }
    for il in 0..fam.n_layer {
        let p = |x: &str| format!("blk.{il}.{x}");
        if fam.has(Feature::Gemma4) {
            write_gemma4_layer(&mut b, &mut types, fam, il)?;
            continue;
        }
        if fam.has(Feature::DeltaNet) {
            write_hybrid_layer(&mut b, &mut types, fam, il)?;
            continue;
        }
        if fam.has(Feature::Lfm2) {
            write_lfm2_layer(&mut b, &mut types, fam, il)?;
            continue;
        }
        if fam.has(Feature::Deepseek2) {
            write_deepseek2_layer(&mut b, &mut types, fam, il)?;
            continue;
        }
        if fam.has(Feature::GraniteHybrid) {
            write_granite_hybrid_layer(&mut b, &mut types, fam, il)?;
            continue;
        }
        if !fam.has(Feature::NoPreNorms) {
            b.tensor(&p("attn_norm.weight"), &[e], "f32", 1.0, 0.1)?;
        }
        if fam.has(Feature::FusedQkv) {
            b.tensor(&p("attn_qkv.weight"), &[e, q_dim + 2 * kv_dim], types.next(e), 0.0, s(e))?;
        } else {
            b.tensor(&p("attn_q.weight"), &[e, q_dim], types.next(e), 0.0, s(e))?;
            b.tensor(&p("attn_k.weight"), &[e, kv_dim], types.next(e), 0.0, s(e))?;
            b.tensor(&p("attn_v.weight"), &[e, kv_dim], types.next(e), 0.0, s(e))?;
        }
        if fam.has(Feature::QkvBias) {
            b.tensor(&p("attn_q.bias"), &[q_dim], "f32", 0.0, 0.1)?;
            b.tensor(&p("attn_k.bias"), &[kv_dim], "f32", 0.0, 0.1)?;
            b.tensor(&p("attn_v.bias"), &[kv_dim], "f32", 0.0, 0.1)?;
        }
        b.tensor(&p("attn_output.weight"), &[q_dim, e], types.next(q_dim), 0.0, s(q_dim))?;
        if fam.has(Feature::GptOss) {
            b.tensor(&p("attn_output.bias"), &[e], "f32", 0.0, 0.1)?;
            // sinks near the scores' scale, so some heads' sinks win and some do not
            b.tensor(&p("attn_sinks.weight"), &[fam.n_head], "f32", 0.0, 2.0)?;
        }
        if fam.has(Feature::QkNorm) {
            let (qn, kn) = if fam.has(Feature::QkNormWhole) { (q_dim, kv_dim) } else { (fam.head_dim, fam.head_dim) };
            b.tensor(&p("attn_q_norm.weight"), &[qn], "f32", 1.0, 0.1)?;
            b.tensor(&p("attn_k_norm.weight"), &[kn], "f32", 1.0, 0.1)?;
        }
        if fam.has(Feature::PostNorms) {
            b.tensor(&p("post_attention_norm.weight"), &[e], "f32", 1.0, 0.1)?;
        }
        if fam.has(Feature::GptOss) || fam.has(Feature::Glm4Moe) {
            b.tensor(&p("post_attention_norm.weight"), &[e], "f32", 1.0, 0.1)?;
        } else if !fam.has(Feature::NoPreNorms) {
            b.tensor(&p("ffn_norm.weight"), &[e], "f32", 1.0, 0.1)?;
        }
        let dense_lead = fam_u32(fam, "leading_dense_block_count").unwrap_or(0) as usize;
        let moe_layer = fam.n_expert > 0 && il >= dense_lead;
        if moe_layer {
            routed_experts(&mut b, &mut types, &p, fam)?;
        }
        if moe_layer && fam.has(Feature::Glm4Moe) {
            b.tensor(&p("exp_probs_b.bias"), &[fam.n_expert], "f32", 0.0, 0.05)?;
            let fs = fam.n_ff_exp * fam_u32(fam, "expert_shared_count")?;
            b.tensor(&p("ffn_gate_shexp.weight"), &[e, fs], types.next(e), 0.0, s(e))?;
            b.tensor(&p("ffn_up_shexp.weight"), &[e, fs], types.next(e), 0.0, s(e))?;
            b.tensor(&p("ffn_down_shexp.weight"), &[fs, e], types.next(fs), 0.0, s(fs))?;
        }
        let dense_here = fam.n_ff > 0 && (fam.n_expert == 0 || !moe_layer);
        if dense_here && fam.has(Feature::FusedUp) {
            let f = fam.n_ff;
            b.tensor(&p("ffn_up.weight"), &[e, 2 * f], types.next(e), 0.0, s(e))?;
            b.tensor(&p("ffn_down.weight"), &[f, e], types.next(f), 0.0, s(f))?;
        } else if dense_here {
            let f = fam.n_ff;
            b.tensor(&p("ffn_gate.weight"), &[e, f], types.next(e), 0.0, s(e))?;
            b.tensor(&p("ffn_up.weight"), &[e, f], types.next(e), 0.0, s(e))?;
            b.tensor(&p("ffn_down.weight"), &[f, e], types.next(f), 0.0, s(f))?;
        }
        if fam.has(Feature::PostNorms) {
            b.tensor(&p("post_ffw_norm.weight"), &[e], "f32", 1.0, 0.1)?;
        }
    }
    let out_norm = if fam.has(Feature::Lfm2) { "token_embd_norm.weight" } else { "output_norm.weight" };
    b.tensor(out_norm, &[e], "f32", 1.0, 0.1)?;
    if fam.has(Feature::Output) {
        b.tensor("output.weight", &[e, n_vocab], if e.is_multiple_of(256) { "q6_K" } else { "q8_0" }, 0.0, s_emb)?;
    }
    b.w.write_to_path(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// An `<arch>.*` u32 key of the family's extra keys.
fn fam_u32(fam: &Family, key: &str) -> Result<u64> {
    match fam.kv.iter().find(|(k, _)| *k == key) {
        Some((_, Kv::U32(v))) => Ok(*v as u64),
        _ => bail!("{}: no u32 key {key} in the family's keys", fam.name),
    }
}

/// An `<arch>.*` u32-array (`I32s`) or u32 key of the family's extra keys, per layer.
fn fam_per_layer(fam: &Family, key: &str) -> Result<Vec<u64>> {
    match fam.kv.iter().find(|(k, _)| *k == key) {
        Some((_, Kv::I32s(v))) if v.len() == fam.n_layer => Ok(v.iter().map(|&x| x as u64).collect()),
        Some((_, Kv::U32(v))) => Ok(vec![*v as u64; fam.n_layer]),
        _ => bail!("{}: no per-layer key {key} in the family's keys", fam.name),
    }
}

/// A [`Feature::Gemma4`] layer's kind: windowed, and whether it keeps its own KV.
fn gemma4_layer_kind(fam: &Family, il: usize) -> Result<(bool, bool)> {
    let swa = match fam.kv.iter().find(|(k, _)| *k == "attention.sliding_window_pattern") {
        Some((_, Kv::Bools(v))) if v.len() == fam.n_layer => v[il],
        _ => bail!("{}: no sliding_window_pattern of {} bools", fam.name, fam.n_layer),
    };
    let shared = fam_u32(fam, "attention.shared_kv_layers")? as usize;
    Ok((swa, il < fam.n_layer - shared))
}

/// The model-wide tensors of a [`Feature::Gemma4`] family besides `token_embd`: the
/// global layers' `rope_freqs` (proportional rope, partial factor 0.25: 1 for the rotated
/// quarter of the pairs, 1e30 for the rest, as `Gemma4Model.generate_extra_tensors`) and
/// the per-layer embedding inputs.
fn write_gemma4_globals(b: &mut Builder<'_>, types: &mut TypeCycle, fam: &Family, n_vocab: u64) -> Result<()> {
    let e = fam.n_embd;
    let half = fam.head_dim / 2;
    let rotated = half / 4;
    let freqs: Vec<f32> = (0..half).map(|i| if i < rotated { 1.0 } else { 1e30 }).collect();
    b.tensor_data("rope_freqs.weight", &[half], &freqs)?;
    let n_pl = fam_u32(fam, "embedding_length_per_layer_input")?;
    if n_pl > 0 {
        let w = n_pl * fam.n_layer as u64;
        // ×√n_pl at run time: N(0, 1/√n_pl) gives unit-variance inputs
        b.tensor("per_layer_token_embd.weight", &[w, n_vocab], "q8_0", 0.0, 1.0 / (n_pl as f64).sqrt())?;
        b.tensor("per_layer_model_proj.weight", &[e, w], types.next(e), 0.0, 1.0 / (e as f64).sqrt())?;
        b.tensor("per_layer_proj_norm.weight", &[n_pl], "f32", 1.0, 0.1)?;
    }
    Ok(())
}

/// One layer of a [`Feature::Gemma4`] family (`llama_model_gemma4::load_arch_tensors`).
/// The query norm's weights are ~1/√head (Gemma 4's attention scale is 1: the learned norm
/// carries it), so scores stay O(1).
fn write_gemma4_layer(b: &mut Builder<'_>, types: &mut TypeCycle, fam: &Family, il: usize) -> Result<()> {
    let p = |x: &str| format!("blk.{il}.{x}");
    let e = fam.n_embd;
    let s = |fan_in: u64| 1.0 / (fan_in as f64).sqrt();
    let (swa, has_kv) = gemma4_layer_kind(fam, il)?;
    let head = if swa { fam_u32(fam, "attention.key_length_swa")? } else { fam.head_dim };
    let n_kv = fam_per_layer(fam, "attention.head_count_kv").map_or(fam.n_head_kv, |v| v[il]);
    let (qd, kvd) = (fam.n_head * head, n_kv * head);
    let f = fam_per_layer(fam, "feed_forward_length").map_or(fam.n_ff, |v| v[il]);
    b.tensor(&p("attn_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    b.tensor(&p("attn_q.weight"), &[e, qd], types.next(e), 0.0, s(e))?;
    if has_kv {
        b.tensor(&p("attn_k.weight"), &[e, kvd], types.next(e), 0.0, s(e))?;
        // the first global layer has no V projection (V = K)
        let first_global = !swa && (0..il).all(|j| gemma4_layer_kind(fam, j).is_ok_and(|(w, _)| w));
        if !first_global {
            b.tensor(&p("attn_v.weight"), &[e, kvd], types.next(e), 0.0, s(e))?;
        }
    }
    b.tensor(&p("attn_output.weight"), &[qd, e], types.next(qd), 0.0, s(qd))?;
    let qn = 1.0 / (head as f64).sqrt();
    b.tensor(&p("attn_q_norm.weight"), &[head], "f32", qn, 0.1 * qn)?;
    if has_kv {
        b.tensor(&p("attn_k_norm.weight"), &[head], "f32", 1.0, 0.1)?;
    }
    b.tensor(&p("post_attention_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    b.tensor(&p("ffn_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    b.tensor(&p("ffn_gate.weight"), &[e, f], types.next(e), 0.0, s(e))?;
    b.tensor(&p("ffn_up.weight"), &[e, f], types.next(e), 0.0, s(e))?;
    b.tensor(&p("ffn_down.weight"), &[f, e], types.next(f), 0.0, s(f))?;
    b.tensor(&p("post_ffw_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    if fam.n_expert > 0 {
        // 26B-A4B: routed experts beside the FFN (now the shared expert)
        let (n, fe) = (fam.n_expert, fam.n_ff_exp);
        b.tensor(&p("ffn_gate_inp.weight"), &[e, n], "f32", 0.0, s(e))?;
        b.tensor(&p("ffn_gate_inp.scale"), &[e], "f32", 1.0, 0.2)?;
        b.tensor(&p("pre_ffw_norm_2.weight"), &[e], "f32", 1.0, 0.1)?;
        b.tensor(&p("post_ffw_norm_1.weight"), &[e], "f32", 1.0, 0.1)?;
        b.tensor(&p("post_ffw_norm_2.weight"), &[e], "f32", 1.0, 0.1)?;
        let mut expert_type = |row: u64| loop {
            let t = types.next(row);
            if t != "f16" {
                break t;
            }
        };
        if il == 2 {
            b.tensor(&p("ffn_gate_exps.weight"), &[e, fe, n], expert_type(e), 0.0, s(e))?;
            b.tensor(&p("ffn_up_exps.weight"), &[e, fe, n], expert_type(e), 0.0, s(e))?;
        } else {
            b.tensor(&p("ffn_gate_up_exps.weight"), &[e, 2 * fe, n], expert_type(e), 0.0, s(e))?;
        }
        b.tensor(&p("ffn_down_exps.weight"), &[fe, e, n], expert_type(fe), 0.0, s(fe))?;
        b.tensor(&p("ffn_down_exps.scale"), &[n], "f32", 1.0, 0.2)?;
    }
    let n_pl = fam_u32(fam, "embedding_length_per_layer_input")?;
    if n_pl > 0 {
        b.tensor(&p("inp_gate.weight"), &[e, n_pl], types.next(e), 0.0, s(e))?;
        b.tensor(&p("proj.weight"), &[n_pl, e], types.next(n_pl), 0.0, s(n_pl))?;
        b.tensor(&p("post_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    }
    b.tensor(&p("layer_output_scale.weight"), &[1], "f32", 0.7, 0.1)?;
    Ok(())
}

/// One layer of a [`Feature::DeltaNet`] family (`llama_model_qwen35::load_arch_tensors`):
/// a gated delta net, or every `full_attention_interval`-th layer a gated attention, then
/// `post_attention_norm` and the SwiGLU FFN.
/// A [`Feature::Lfm2`] layer: a short convolution or an attention, then the SwiGLU FFN
/// (routed experts with a selection bias from `leading_dense_block_count` on: lfm2moe).
fn write_lfm2_layer(b: &mut Builder<'_>, types: &mut TypeCycle, fam: &Family, il: usize) -> Result<()> {
    let p = |x: &str| format!("blk.{il}.{x}");
    let e = fam.n_embd;
    let s = |fan_in: u64| 1.0 / (fan_in as f64).sqrt();
    let kv_heads = match fam.kv.iter().find(|(k, _)| *k == "attention.head_count_kv") {
        Some((_, Kv::I32s(v))) if v.len() == fam.n_layer => v[il] as u64,
        _ => bail!("{}: no per-layer attention.head_count_kv", fam.name),
    };
    b.tensor(&p("attn_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    if kv_heads == 0 {
        let l = fam_u32(fam, "shortconv.l_cache")?;
        b.tensor(&p("shortconv.conv.weight"), &[l, e], "f32", 0.0, 0.5)?;
        b.tensor(&p("shortconv.in_proj.weight"), &[e, 3 * e], types.next(e), 0.0, s(e))?;
        b.tensor(&p("shortconv.out_proj.weight"), &[e, e], types.next(e), 0.0, s(e))?;
    } else {
        let (q, kv) = (fam.n_head * fam.head_dim, kv_heads * fam.head_dim);
        b.tensor(&p("attn_q.weight"), &[e, q], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_k.weight"), &[e, kv], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_v.weight"), &[e, kv], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_output.weight"), &[q, e], types.next(q), 0.0, s(q))?;
        b.tensor(&p("attn_q_norm.weight"), &[fam.head_dim], "f32", 1.0, 0.1)?;
        b.tensor(&p("attn_k_norm.weight"), &[fam.head_dim], "f32", 1.0, 0.1)?;
    }
    b.tensor(&p("ffn_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    let dense_lead = fam_u32(fam, "leading_dense_block_count").map_or(fam.n_layer, |v| v as usize);
    if il >= dense_lead {
        routed_experts(b, types, &p, fam)?;
        b.tensor(&p("exp_probs_b.bias"), &[fam.n_expert], "f32", 0.0, 0.05)?;
        return Ok(());
    }
    let f = fam.n_ff;
    b.tensor(&p("ffn_gate.weight"), &[e, f], types.next(e), 0.0, s(e))?;
    b.tensor(&p("ffn_up.weight"), &[e, f], types.next(e), 0.0, s(e))?;
    b.tensor(&p("ffn_down.weight"), &[f, e], types.next(f), 0.0, s(f))?;
    Ok(())
}

/// A [`Feature::Deepseek2`] layer.
fn write_deepseek2_layer(b: &mut Builder<'_>, types: &mut TypeCycle, fam: &Family, il: usize) -> Result<()> {
    let p = |x: &str| format!("blk.{il}.{x}");
    let (e, nh) = (fam.n_embd, fam.n_head);
    let s = |fan_in: u64| 1.0 / (fan_in as f64).sqrt();
    let (q_lora, kv_lora) = (fam_u32(fam, "attention.q_lora_rank")?, fam_u32(fam, "attention.kv_lora_rank")?);
    let (k_mla, v_mla) = (fam_u32(fam, "attention.key_length_mla")?, fam_u32(fam, "attention.value_length_mla")?);
    let n_rot = fam_u32(fam, "rope.dimension_count")?;
    let qk_nope = k_mla - n_rot;
    b.tensor(&p("attn_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    if q_lora == 0 {
        b.tensor(&p("attn_q.weight"), &[e, nh * k_mla], types.next(e), 0.0, s(e))?;
    } else {
        b.tensor(&p("attn_q_a.weight"), &[e, q_lora], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_q_a_norm.weight"), &[q_lora], "f32", 1.0, 0.1)?;
        b.tensor(&p("attn_q_b.weight"), &[q_lora, nh * k_mla], types.next(q_lora), 0.0, s(q_lora))?;
    }
    b.tensor(&p("attn_kv_a_mqa.weight"), &[e, kv_lora + n_rot], types.next(e), 0.0, s(e))?;
    b.tensor(&p("attn_kv_a_norm.weight"), &[kv_lora], "f32", 1.0, 0.1)?;
    // the per-head absorption matrices: F16 on even layers, Q8_0 on odd ones
    let per_head = if il.is_multiple_of(2) { "f16" } else { "q8_0" };
    b.tensor(&p("attn_k_b.weight"), &[qk_nope, kv_lora, nh], per_head, 0.0, s(qk_nope))?;
    b.tensor(&p("attn_v_b.weight"), &[kv_lora, v_mla, nh], per_head, 0.0, s(kv_lora))?;
    b.tensor(&p("attn_output.weight"), &[nh * v_mla, e], types.next(nh * v_mla), 0.0, s(nh * v_mla))?;
    b.tensor(&p("ffn_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    let dense_lead = fam_u32(fam, "leading_dense_block_count").unwrap_or(0) as usize;
    if il < dense_lead {
        let f = fam.n_ff;
        b.tensor(&p("ffn_gate.weight"), &[e, f], types.next(e), 0.0, s(e))?;
        b.tensor(&p("ffn_up.weight"), &[e, f], types.next(e), 0.0, s(e))?;
        b.tensor(&p("ffn_down.weight"), &[f, e], types.next(f), 0.0, s(f))?;
        return Ok(());
    }
    routed_experts(b, types, &p, fam)?;
    if fam_u32(fam, "expert_gating_func").ok() == Some(2) {
        b.tensor(&p("exp_probs_b.bias"), &[fam.n_expert], "f32", 0.0, 0.05)?;
    }
    let fs = fam.n_ff_exp * fam_u32(fam, "expert_shared_count")?;
    b.tensor(&p("ffn_gate_shexp.weight"), &[e, fs], types.next(e), 0.0, s(e))?;
    b.tensor(&p("ffn_up_shexp.weight"), &[e, fs], types.next(e), 0.0, s(e))?;
    b.tensor(&p("ffn_down_shexp.weight"), &[fs, e], types.next(fs), 0.0, s(fs))?;
    Ok(())
}

/// A [`Feature::GraniteHybrid`] layer (`llama_model_granite_hybrid::load_arch_tensors`):
/// a Mamba-2 mixer or an attention, `ffn_norm`, then the dense or MoE (+ shared) FFN.
fn write_granite_hybrid_layer(b: &mut Builder<'_>, types: &mut TypeCycle, fam: &Family, il: usize) -> Result<()> {
    let p = |x: &str| format!("blk.{il}.{x}");
    let e = fam.n_embd;
    let s = |fan_in: u64| 1.0 / (fan_in as f64).sqrt();
    let kv_heads = fam_per_layer(fam, "attention.head_count_kv")?[il];
    b.tensor(&p("attn_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    if kv_heads == 0 {
        let (d_conv, ds, ng, nh, di) = (
            fam_u32(fam, "ssm.conv_kernel")?,
            fam_u32(fam, "ssm.state_size")?,
            fam_u32(fam, "ssm.group_count")?,
            fam_u32(fam, "ssm.time_step_rank")?,
            fam_u32(fam, "ssm.inner_size")?,
        );
        let ch = di + 2 * ng * ds;
        b.tensor(&p("ssm_in.weight"), &[e, di + ch + nh], types.next(e), 0.0, s(e))?;
        // the converter keeps the conv kernel and bias, dt bias, A, D and the norm in F32
        b.tensor(&p("ssm_conv1d.weight"), &[d_conv, ch], "f32", 0.0, 0.5)?;
        b.tensor(&p("ssm_conv1d.bias"), &[ch], "f32", 0.0, 0.1)?;
        // dt bias = softplus⁻¹(dt), dt = exp U(log 1e-3, log 0.1) in the reference init
        let dt: Vec<f32> = (0..nh)
            .map(|_| {
                let dt = (1e-3f64.ln() + b.rng.uniform() * (0.1f64.ln() - 1e-3f64.ln())).exp();
                (dt + (-(-dt).exp_m1()).ln()) as f32
            })
            .collect();
        b.tensor_data(&p("ssm_dt.bias"), &[nh], &dt)?;
        // ssm_a = −exp(A_log), A_log = log U(1, 16) in the reference init: −1 … −16
        let a: Vec<f32> = (0..nh).map(|_| -(1.0 + 15.0 * b.rng.uniform()) as f32).collect();
        b.tensor_data(&p("ssm_a"), &[1, nh], &a)?;
        b.tensor(&p("ssm_d"), &[1, nh], "f32", 1.0, 0.1)?;
        b.tensor(&p("ssm_norm.weight"), &[di / ng, ng], "f32", 1.0, 0.1)?;
        b.tensor(&p("ssm_out.weight"), &[di, e], types.next(di), 0.0, s(di))?;
    } else {
        let (q, kv) = (fam.n_head * fam.head_dim, kv_heads * fam.head_dim);
        b.tensor(&p("attn_q.weight"), &[e, q], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_k.weight"), &[e, kv], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_v.weight"), &[e, kv], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_output.weight"), &[q, e], types.next(q), 0.0, s(q))?;
    }
    b.tensor(&p("ffn_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    if fam.n_expert > 0 {
        routed_experts(b, types, &p, fam)?;
        let fs = fam_u32(fam, "expert_shared_feed_forward_length")?;
        b.tensor(&p("ffn_gate_shexp.weight"), &[e, fs], types.next(e), 0.0, s(e))?;
        b.tensor(&p("ffn_up_shexp.weight"), &[e, fs], types.next(e), 0.0, s(e))?;
        b.tensor(&p("ffn_down_shexp.weight"), &[fs, e], types.next(fs), 0.0, s(fs))?;
        return Ok(());
    }
    let f = fam.n_ff;
    b.tensor(&p("ffn_gate.weight"), &[e, f], types.next(e), 0.0, s(e))?;
    b.tensor(&p("ffn_up.weight"), &[e, f], types.next(e), 0.0, s(e))?;
    b.tensor(&p("ffn_down.weight"), &[f, e], types.next(f), 0.0, s(f))?;
    Ok(())
}

fn write_hybrid_layer(b: &mut Builder<'_>, types: &mut TypeCycle, fam: &Family, il: usize) -> Result<()> {
    let p = |x: &str| format!("blk.{il}.{x}");
    let e = fam.n_embd;
    let s = |fan_in: u64| 1.0 / (fan_in as f64).sqrt();
    let interval = fam_u32(fam, "full_attention_interval")? as usize;
    b.tensor(&p("attn_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    if !(il + 1).is_multiple_of(interval) {
        let (d_conv, hk, nk, nv) = (
            fam_u32(fam, "ssm.conv_kernel")?,
            fam_u32(fam, "ssm.state_size")?,
            fam_u32(fam, "ssm.group_count")?,
            fam_u32(fam, "ssm.time_step_rank")?,
        );
        let vd = fam_u32(fam, "ssm.inner_size")?;
        let ch = 2 * nk * hk + vd;
        b.tensor(&p("attn_qkv.weight"), &[e, ch], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_gate.weight"), &[e, vd], types.next(e), 0.0, s(e))?;
        // the converter keeps the conv kernel, dt bias, A and the norm in F32
        b.tensor(&p("ssm_conv1d.weight"), &[d_conv, ch], "f32", 0.0, 0.5)?;
        b.tensor(&p("ssm_dt.bias"), &[nv], "f32", 0.0, 1.0)?;
        // ssm_a = −exp(A_log), A_log = log U(1, 16) in the reference init: −1 … −16
        let a: Vec<f32> = (0..nv).map(|_| -(1.0 + 15.0 * b.rng.uniform()) as f32).collect();
        b.tensor_data(&p("ssm_a"), &[nv], &a)?;
        b.tensor(&p("ssm_beta.weight"), &[e, nv], types.next(e), 0.0, s(e))?;
        b.tensor(&p("ssm_alpha.weight"), &[e, nv], types.next(e), 0.0, s(e))?;
        b.tensor(&p("ssm_norm.weight"), &[hk], "f32", 1.0, 0.1)?;
        b.tensor(&p("ssm_out.weight"), &[vd, e], types.next(vd), 0.0, s(vd))?;
    } else {
        let (q_dim, kv_dim) = (fam.n_head * fam.head_dim, fam.n_head_kv * fam.head_dim);
        b.tensor(&p("attn_q.weight"), &[e, 2 * q_dim], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_k.weight"), &[e, kv_dim], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_v.weight"), &[e, kv_dim], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_output.weight"), &[q_dim, e], types.next(q_dim), 0.0, s(q_dim))?;
        b.tensor(&p("attn_q_norm.weight"), &[fam.head_dim], "f32", 1.0, 0.1)?;
        b.tensor(&p("attn_k_norm.weight"), &[fam.head_dim], "f32", 1.0, 0.1)?;
    }
    b.tensor(&p("post_attention_norm.weight"), &[e], "f32", 1.0, 0.1)?;
    if fam.n_expert > 0 {
        // qwen35moe: routed experts and the shared expert with its one-output gate
        routed_experts(b, types, &p, fam)?;
        let fs = fam_u32(fam, "expert_shared_feed_forward_length")?;
        b.tensor(&p("ffn_gate_inp_shexp.weight"), &[e], "f32", 0.0, s(e))?;
        b.tensor(&p("ffn_gate_shexp.weight"), &[e, fs], types.next(e), 0.0, s(e))?;
        b.tensor(&p("ffn_up_shexp.weight"), &[e, fs], types.next(e), 0.0, s(e))?;
        b.tensor(&p("ffn_down_shexp.weight"), &[fs, e], types.next(fs), 0.0, s(fs))?;
        return Ok(());
    }
    let f = fam.n_ff;
    b.tensor(&p("ffn_gate.weight"), &[e, f], types.next(e), 0.0, s(e))?;
    b.tensor(&p("ffn_up.weight"), &[e, f], types.next(e), 0.0, s(e))?;
    b.tensor(&p("ffn_down.weight"), &[f, e], types.next(f), 0.0, s(f))?;
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
