//! `qwen35` / `qwen35moe`: Qwen3.5 (`src/models/qwen35.cpp`, `qwen35moe.cpp`) — a hybrid of gated delta net layers
//! ([`DeltaNet`], linear attention with a recurrent state) and gated full-attention
//! layers (every `full_attention_interval`-th, or as `attention.recurrent_layers` marks
//! them): the query projection carries a per-head output gate (`sigmoid`, before
//! `attn_output`), QK-norm, interleaved M-RoPE (`IMROPE`) on the first
//! `rope.dimension_count` dimensions. Each block is `x += mixer(norm(x))`, then
//! `x += ffn(post_attention_norm(x))` with a SwiGLU FFN — for qwen35moe routed experts
//! (softmax, top-k renormalized) plus a shared expert scaled by its own sigmoid gate.
//!
//! Status: qwen35 and qwen35moe are verified bit-identical to libllama on their prompt logits
//! (`verify families`, BENCHMARKS.md).
//!
//! For text every M-RoPE section takes the token's position (llama.cpp fills the three
//! first position rows with it and the fourth with 0), so the rotation is NeoX's over
//! `n_rot` dimensions — provided no rotated pair falls in the fourth section, which is
//! checked at load.
//!
//! State: the KV cache holds the attention layers only; each delta-net layer keeps a
//! [`RecurrentState`] per sequence (conv state and delta-rule matrices, f32 as
//! llama.cpp's defaults). A recurrent state cannot go back to an earlier position: a
//! [`State::truncate`] to fewer tokens than it holds (other than to 0) forgets the whole
//! sequence, and [`State::n_past`] says so (0).

use std::sync::Arc;

use gguf_format::SplitGguf;
use quant_kernels::ops;

use crate::blocks::{
    dump, Activation, Attention, AttentionScratch, DeltaNet, DeltaNetDims, DeltaNetScratch, Embedding, Ffn, FfnScratch,
    GatedFfn, Heads, Linear, Pass, RecurrentState, RmsNorm, RowLayout, SeqKv, SeqRs,
};
use crate::hparams::Hparams;
use crate::hybrid_state::HybridState;
use crate::kv_cache::KvCache;
use crate::loader::Loader;
use crate::model::{Logits, Model, State, StateOptions};
use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::{Error, Result};

gguf_registry::submit! {
    Architecture {
        name: "qwen35",
        load: |file| Ok(Box::new(Hybrid::load(file, "qwen35")?)),
        ..Architecture::BASE
    }
}

gguf_registry::submit! {
    Architecture {
        name: "qwen35moe",
        load: |file| Ok(Box::new(Hybrid::load(file, "qwen35moe")?)),
        ..Architecture::BASE
    }
}

/// qwen35moe's shared expert: a SwiGLU FFN whose output is scaled per token by
/// `sigmoid(ffn_gate_inp_shexp · x)` and added to the routed experts' output.
struct SharedExpert {
    ffn: GatedFfn,
    gate: Linear,
}

/// What mixes the tokens in one layer.
enum Mixer {
    /// Gated full attention over the layer's KV cache (index into the state's caches).
    Attn(Box<Attention>, usize),
    /// Gated delta net with a recurrent state (index into the state's states).
    Delta(Box<DeltaNet>, usize),
}

struct Layer {
    attn_norm: RmsNorm,
    mixer: Mixer,
    post_norm: RmsNorm,
    ffn: Ffn,
    shared: Option<SharedExpert>,
}

/// A loaded Qwen3.5-style hybrid model.
pub struct Hybrid {
    arch: &'static str,
    hp: Hparams,
    dims: DeltaNetDims,
    tok_embd: Embedding,
    output: Linear,
    output_norm: RmsNorm,
    layers: Vec<Layer>,
    n_attn: usize,
    n_recr: usize,
}

/// Which layers are recurrent: `attention.recurrent_layers` when the file has it, else
/// every layer but each `full_attention_interval`-th (default 4), as
/// `llama_model_qwen35::load_arch_hparams` decides.
fn recurrent_layers(ld: &Loader<'_>, n_layer: usize) -> Result<Vec<bool>> {
    if let Some(v) = ld.opt_bool_array("attention.recurrent_layers")? {
        if v.len() != n_layer {
            return Err(Error::BadKey {
                key: ld.key("attention.recurrent_layers"),
                msg: format!("{} entries, expected one per layer ({n_layer})", v.len()),
            });
        }
        return Ok(v);
    }
    let interval = ld.opt_u32("full_attention_interval")?.unwrap_or(4) as usize;
    if interval == 0 {
        return Err(Error::BadKey { key: ld.key("full_attention_interval"), msg: "0".into() });
    }
    Ok((0..n_layer).map(|i| (i + 1) % interval != 0).collect())
}

/// The delta-net widths from the `ssm.*` keys, checked as llama.cpp's graph asserts them.
fn delta_dims(ld: &Loader<'_>, n_embd: usize) -> Result<DeltaNetDims> {
    let req = |k: &str| ld.u32(k).map(|v| v as usize);
    let d_conv = req("ssm.conv_kernel")?;
    let d_inner = req("ssm.inner_size")?;
    let head_k = req("ssm.state_size")?;
    let n_v_heads = req("ssm.time_step_rank")?;
    let n_k_heads = req("ssm.group_count")?;
    let bad = |k: &str, msg: String| Error::BadKey { key: ld.key(k), msg };
    if d_conv < 2 {
        return Err(bad("ssm.conv_kernel", format!("{d_conv} (at least 2)")));
    }
    if n_v_heads == 0 || !d_inner.is_multiple_of(n_v_heads) {
        return Err(bad("ssm.inner_size", format!("{d_inner} is not a multiple of ssm.time_step_rank {n_v_heads}")));
    }
    let head_v = d_inner / n_v_heads;
    if head_k == 0 || head_v != head_k {
        return Err(bad(
            "ssm.state_size",
            format!("{head_k}: the delta rule needs equal key and value head widths (value heads are {head_v} wide)"),
        ));
    }
    if n_k_heads == 0 || !n_v_heads.is_multiple_of(n_k_heads) {
        return Err(bad("ssm.group_count", format!("{n_k_heads} key heads for {n_v_heads} value heads")));
    }
    Ok(DeltaNetDims { n_embd, d_conv, head_k, n_k_heads, n_v_heads, head_v })
}

/// Checks that every rotated pair of an interleaved M-RoPE with `sections` takes the
/// time, height or width position — all the token's position for text — and not the
/// fourth one (0 for text), so NeoX's rotation is the same (`ggml_mrope_cache_init`).
fn check_sections(ld: &Loader<'_>, sections: &[u32], n_rot: usize, head: usize) -> Result<()> {
    let key = ld.key("rope.dimension_sections");
    let s: Vec<usize> = sections.iter().map(|&v| v as usize).collect();
    let total: usize = s.iter().sum();
    if total == 0 || total > head {
        return Err(Error::BadKey { key, msg: format!("sections {s:?} (sum must be 1..={head})") });
    }
    for pair in 0..n_rot / 2 {
        let sector = pair % total;
        let thw = (sector % 3 == 1 && sector < 3 * s[1])
            || (sector % 3 == 2 && sector < 3 * s[2])
            || (sector.is_multiple_of(3) && sector < 3 * s[0]);
        if !thw {
            return Err(Error::Unsupported(format!(
                "`{key}` = {s:?}: rotated pair {pair} falls in the fourth (extra) M-RoPE section, which is not supported"
            )));
        }
    }
    Ok(())
}

impl Hybrid {
    /// Loads a `qwen35`-layout file (`arch` is the key prefix and the reported name).
    pub fn load(file: Arc<SplitGguf>, arch: &'static str) -> Result<Hybrid> {
        let ld = Loader::with_shared(&file, arch);
        let hp = Hparams::read(&ld)?;
        let (e, eps) = (hp.n_embd, hp.rms_eps);
        if hp.head_k != hp.head_v {
            return Err(Error::Invalid(format!(
                "{arch}: key and value heads must be equally wide (k={} v={})",
                hp.head_k, hp.head_v
            )));
        }
        let moe = arch == "qwen35moe";
        if moe && hp.n_expert == 0 {
            return Err(Error::MissingKey(ld.key("expert_count")));
        }
        if !moe && hp.n_expert > 0 {
            return Err(Error::Invalid(format!("{arch} has no experts: unexpected `{}`", ld.key("expert_count"))));
        }
        let sections = ld
            .opt_u32_per_layer("rope.dimension_sections", 4)?
            .ok_or_else(|| Error::MissingKey(ld.key("rope.dimension_sections")))?;
        check_sections(&ld, &sections, hp.n_rot, hp.head_k)?;
        let dims = delta_dims(&ld, e)?;
        let recr = recurrent_layers(&ld, hp.n_layer)?;
        let mut tok_embd = Embedding::load(&ld, "token_embd.weight", e)?;
        tok_embd.scale = None;
        let output = Linear::output(&ld, &tok_embd)?;
        let output_norm = RmsNorm::load(&ld, "output_norm.weight", e, eps)?;
        let heads = Heads { n_head: hp.n_head, n_head_kv: hp.n_head_kv, head_k: hp.head_k, head_v: hp.head_v };
        let attn_scale = ld.opt_f32("attention.scale")?.filter(|&s| s != 0.0);
        let (mut n_attn, mut n_recr) = (0, 0);
        let mut layers = Vec::with_capacity(hp.n_layer);
        for (il, &is_recr) in recr.iter().enumerate() {
            let n = |s: &str| format!("blk.{il}.{s}");
            let attn_norm = RmsNorm::load(&ld, &n("attn_norm.weight"), e, eps)?;
            let post_norm = RmsNorm::load(&ld, &n("post_attention_norm.weight"), e, eps)?;
            let mixer = if is_recr {
                let mut net = DeltaNet::load(&ld, il, dims, eps)?;
                net.repack()?;
                n_recr += 1;
                Mixer::Delta(Box::new(net), n_recr - 1)
            } else {
                let mut attn = gated_attention(&ld, il, &hp, heads, attn_scale)?;
                attn.repack()?;
                n_attn += 1;
                Mixer::Attn(Box::new(attn), n_attn - 1)
            };
            let (ffn, shared) = if moe { moe_ffn(&ld, il, &hp)? } else { (dense_ffn(&ld, il, &hp)?, None) };
            layers.push(Layer { attn_norm, mixer, post_norm, ffn, shared });
        }
        Ok(Hybrid { arch, hp, dims, tok_embd, output, output_norm, layers, n_attn, n_recr })
    }
}

/// Layer `il`'s SwiGLU FFN (`ffn_gate`, `ffn_up`, `ffn_down`).
fn dense_ffn(ld: &Loader<'_>, il: usize, hp: &Hparams) -> Result<Ffn> {
    if hp.n_ff[il] == 0 {
        return Err(Error::MissingKey(ld.key("feed_forward_length")));
    }
    let mut ffn = Ffn::Dense(GatedFfn::load(ld, il, hp.n_embd, hp.n_ff[il], Activation::Silu)?);
    ffn.repack()?;
    Ok(ffn)
}

/// Layer `il`'s routed experts (softmax router, top-k renormalized, `expert_weights_scale`)
/// and its shared expert (`ffn_{gate,up,down}_shexp` of `expert_shared_feed_forward_length`
/// units, else `feed_forward_length`; gate `ffn_gate_inp_shexp`), as
/// `llama_model_qwen35moe` builds them.
fn moe_ffn(ld: &Loader<'_>, il: usize, hp: &Hparams) -> Result<(Ffn, Option<SharedExpert>)> {
    let e = hp.n_embd;
    let ff_exp = if hp.n_ff_exp > 0 { hp.n_ff_exp } else { hp.n_ff[il] / hp.n_expert_used };
    if ff_exp == 0 {
        return Err(Error::MissingKey(ld.key("expert_feed_forward_length")));
    }
    let mut m = crate::blocks::Moe::load(ld, il, e, ff_exp, hp.n_expert, hp.n_expert_used)?;
    m.norm_weights = true;
    m.weights_scale = hp.expert_weights_scale;
    m.act = Activation::Silu;
    let ff_sh = match ld.opt_u32("expert_shared_feed_forward_length")? {
        Some(v) if v > 0 => v as usize,
        _ => hp.n_ff[il],
    };
    if ff_sh == 0 {
        return Err(Error::MissingKey(ld.key("expert_shared_feed_forward_length")));
    }
    let n = |s: &str| format!("blk.{il}.{s}");
    let mut ffn = GatedFfn {
        gate: Linear::load(ld, &n("ffn_gate_shexp"), e, ff_sh)?,
        up: Linear::load(ld, &n("ffn_up_shexp"), e, ff_sh)?,
        down: Linear::load(ld, &n("ffn_down_shexp"), ff_sh, e)?,
        act: Activation::Silu,
        fused: None,
    };
    ffn.repack()?;
    let gate = Linear::load(ld, &n("ffn_gate_inp_shexp"), e, 1)?;
    Ok((Ffn::Moe(m), Some(SharedExpert { ffn, gate })))
}

/// Layer `il`'s gated attention: `attn_q` of `2·head_k` rows per head (query, gate),
/// `attn_k`, `attn_v`, `attn_output`, `attn_q_norm` / `attn_k_norm` one head wide.
fn gated_attention(ld: &Loader<'_>, il: usize, hp: &Hparams, heads: Heads, scale: Option<f32>) -> Result<Attention> {
    let n = |s: &str| format!("blk.{il}.{s}");
    let Heads { n_head, n_head_kv, head_k, head_v } = heads;
    let e = hp.n_embd;
    Ok(Attention {
        heads,
        wq: Linear::load(ld, &n("attn_q"), e, 2 * head_k * n_head)?,
        wk: Linear::load(ld, &n("attn_k"), e, head_k * n_head_kv)?,
        wv: Linear::load(ld, &n("attn_v"), e, head_v * n_head_kv)?,
        wo: Linear::load(ld, &n("attn_output"), head_v * n_head, e)?,
        wqkv: None,
        q_norm: Some(RmsNorm::load(ld, &n("attn_q_norm.weight"), head_k, hp.rms_eps)?),
        k_norm: Some(RmsNorm::load(ld, &n("attn_k_norm.weight"), head_k, hp.rms_eps)?),
        rope: hp.rope(RopeMode::Neox, hp.rope_base, hp.rope_freq_scale, None),
        window: None,
        scale: scale.unwrap_or(1.0 / (head_k as f32).sqrt()),
        scale_q: false,
        softcap: None,
        q_gate: true,
        v_norm: None,
        v_from_k: false,
        sinks: None,
        temperature: None,
    })
}

#[derive(Default)]
struct Buffers {
    h: Vec<f32>,
    a: Vec<f32>,
    tmp: Vec<f32>,
    attn: AttentionScratch,
    delta: DeltaNetScratch,
    ffn: FfnScratch,
}

impl Hybrid {
    /// One ubatch of one sequence through every layer; the logits asked for.
    fn run_ubatch(&self, st: &mut HybridState, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        let n = tokens.len();
        let pool = st.pool.clone();
        let observer = st.observer.clone();
        let rows = RowLayout::one(n);
        let pass = Pass { pool: &pool, observer: observer.as_ref(), rows: &rows };
        let e = self.hp.n_embd;
        let mut x = vec![0.0f32; n * e];
        self.tok_embd.forward(tokens, 0, &mut x)?;
        dump("embd", &x);
        let mut b = Buffers::default();
        let p0 = st.n_past;
        for (il, layer) in self.layers.iter().enumerate() {
            let Buffers { h, a, tmp, attn, delta, ffn } = &mut b;
            layer.attn_norm.forward(&x, h);
            dump(&format!("attn_norm-{il}"), h);
            match &layer.mixer {
                Mixer::Attn(at, i) => {
                    let (k, v) = (&mut st.kv.k[*i], &mut st.kv.v[*i]);
                    let mut seqs = [SeqKv { row0: 0, n, pos0: p0, k, v }];
                    at.forward(&pass, il, h, &mut seqs, attn, a)?;
                }
                Mixer::Delta(net, i) => {
                    let mut seqs = [SeqRs { row0: 0, n, state: &mut st.rs[*i] }];
                    net.forward(&pass, il, h, &mut seqs, delta, a)?;
                }
            }
            ops::add_inplace(&mut x, a);
            dump(&format!("attn_residual-{il}"), &x);
            layer.post_norm.forward(&x, h);
            dump(&format!("attn_post_norm-{il}"), h);
            layer.ffn.forward(&pass, il, h, &[(0, n)], ffn, a)?;
            if let Some(sh) = &layer.shared {
                dump(&format!("ffn_moe_out-{il}"), a);
                let mut y = Vec::new();
                sh.ffn.forward(&pass, il, h, ffn, &mut y)?;
                sh.gate.forward(&pass, h, tmp)?;
                // ggml_mul(ffn_shexp, sigmoid(gate)) broadcast over the row, then
                // ggml_add(moe_out, ffn_shexp)
                for (row, &g) in y.chunks_exact_mut(e).zip(tmp.iter()) {
                    let s = crate::blocks::sigmoid(g);
                    for v in row.iter_mut() {
                        *v *= s;
                    }
                }
                ops::add_inplace(a, &y);
            }
            dump(&format!("ffn_out-{il}"), a);
            ops::add_inplace(&mut x, a);
            dump(&format!("l_out-{il}"), &x);
        }
        st.n_past += n;
        let out = crate::blocks::output_head(&pass, &self.output_norm, &self.output, &x, n, logits, &mut b.tmp)?;
        dump("result_output", &out);
        Ok(out)
    }
}

impl Model for Hybrid {
    fn arch(&self) -> &str {
        self.arch
    }

    fn n_vocab(&self) -> usize {
        self.tok_embd.n_vocab()
    }

    fn n_ctx_train(&self) -> usize {
        self.hp.n_ctx_train
    }

    fn describe(&self) -> String {
        let (hp, d) = (&self.hp, &self.dims);
        let experts = if hp.n_expert > 0 {
            format!(", {} experts ({} used) and a shared expert", hp.n_expert, hp.n_expert_used)
        } else {
            String::new()
        };
        let s = format!(
            "{}: {} layers ({} gated delta net, {} gated attention), n_embd {}, attention {} heads / {} KV heads of {} \
             (rope dims {}), delta net {} key heads / {} value heads of {}, conv {}, n_vocab {}",
            self.arch,
            hp.n_layer,
            self.n_recr,
            self.n_attn,
            hp.n_embd,
            hp.n_head,
            hp.n_head_kv,
            hp.head_k,
            hp.n_rot,
            d.n_k_heads,
            d.n_v_heads,
            d.head_v,
            d.d_conv,
            self.tok_embd.n_vocab()
        );
        s + &experts
    }

    fn new_state(&self, opts: &StateOptions) -> Result<Box<dyn State>> {
        let hp = &self.hp;
        let n_ctx = if opts.n_ctx == 0 { hp.n_ctx_train } else { opts.n_ctx };
        crate::kv_cache::check_head_widths(opts.cache_type_k, opts.cache_type_v, hp.head_k, hp.head_v)?;
        let widths = vec![(hp.n_head_kv * hp.head_k, hp.n_head_kv * hp.head_v); self.n_attn];
        let kv = KvCache::new(&widths, n_ctx, opts.cache_type_k, opts.cache_type_v)?;
        let rs = (0..self.n_recr).map(|_| RecurrentState::new(&self.dims)).collect();
        Ok(Box::new(HybridState::new(kv, rs, opts)))
    }

    fn forward(&self, state: &mut dyn State, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        let st = HybridState::of(state, tokens.len())?;
        let ub = st.n_ubatch;
        logits.by_ubatch(tokens, ub, |chunk, want| self.run_ubatch(st, chunk, want))
    }
}
