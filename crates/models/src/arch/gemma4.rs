//! `gemma4`: Gemma 4 (`src/models/gemma4.cpp`) — interleaved sliding-window and global
//! layers that differ in head width and KV heads (`attention.key_length_swa` /
//! `key_length`, `head_count_kv` per layer), rope on `rope.dimension_count_swa` dims at
//! `rope.freq_base_swa` on windowed layers and "proportional" rope on global ones (all
//! `rope.dimension_count` dims, the unrotated ones given frequency factors of 1e30 in
//! `rope_freqs`), QK-norm and a weightless RMSNorm of V, attention scale 1, no V projection
//! where the file has none (`attention_k_eq_v`: V is the raw key projection), post-attention
//! and post-FFN norms around a GeGLU FFN, an optional per-layer output scale
//! (`layer_output_scale`), embeddings scaled by √n_embd, logits soft-capped
//! (`final_logit_softcapping`).
//!
//! The E2B/E4B models add two things this module implements too:
//! - **KV sharing** (`attention.shared_kv_layers`): the last layers keep no cache of their
//!   own and attend over that of the last cached layer of their kind (windowed: the
//!   second-to-last cached layer, global: the last — llama.cpp's `reuse` callback), with
//!   their own queries ([`Attention::forward_shared`]).
//! - **Per-layer embeddings** (`embedding_length_per_layer_input` > 0): a second embedding
//!   (`per_layer_token_embd`, `n_pl` values per layer and token, × √n_pl) plus a projection of
//!   the scaled input embedding (`per_layer_model_proj` × 1/√n_embd, RMS-normed per layer by
//!   `per_layer_proj_norm`), summed and × 1/√2; after each layer's FFN residual
//!   `x += post_norm(proj(gelu(inp_gate · x) · per_layer_input[il]))`.
//!
//!
//! The 26B-A4B model's **MoE layers** (`ffn_gate_inp`): the GeGLU FFN becomes a shared
//! expert (`ffn_norm` → FFN → `post_ffw_norm_1`) beside routed experts (`pre_ffw_norm_2` →
//! top-k of a softmax router → `post_ffw_norm_2`), summed before `post_ffw_norm`; the router
//! reads `rms_norm(x) · 1/√n_embd · ffn_gate_inp.scale`, not the experts' input, and each
//! expert's down projection is scaled by `ffn_down_exps.scale` (the checkpoint's
//! `per_expert_scale`); gate and up come fused (`ffn_gate_up_exps`) or split.
//! Every layer's arithmetic follows the graph's order (see [`crate::blocks`]); `verify
//! families --family gemma4` finds the logits bit-identical to libllama's at F16 and Q8_0
//! caches (BENCHMARKS.md).

use std::sync::Arc;

use gguf_format::SplitGguf;
use quant_kernels::{ops, Pool};

use crate::blocks::{
    dump, Activation, Attention, AttentionScratch, Embedding, FfnScratch, GatedFfn, Gating, Heads, Linear, Moe, Pass,
    RmsNorm, RowLayout, SeqKv, SeqView,
};
use crate::hparams::Hparams;
use crate::kv_cache::KvCache;
use crate::loader::Loader;
use crate::model::{Logits, Model, State, StateOptions};
use crate::registry::Architecture;
use crate::rope::{yarn_corr_dims, RopeMode};
use crate::{Error, Result};

const ARCH: &str = "gemma4";

gguf_registry::submit! {
    Architecture {
        name: ARCH,
        load: |file| Ok(Box::new(Gemma4::load(file)?)),
        ..Architecture::BASE
    }
}

/// Where a layer's attention reads its keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kv {
    /// Its own cache (index into the state's caches), written each pass.
    Own(usize),
    /// The cache of an earlier layer (index), read only.
    Shared(usize),
}

/// The per-layer-embedding part of one layer.
struct PerLayerBlock {
    inp_gate: Linear,
    proj: Linear,
    post_norm: RmsNorm,
}

/// The model-wide per-layer-embedding inputs.
struct PerLayerInputs {
    /// `per_layer_token_embd`: `n_pl · n_layer` values per token.
    tok_embd: Embedding,
    /// `per_layer_model_proj`: `n_embd → n_pl · n_layer`.
    model_proj: Linear,
    /// `per_layer_proj_norm`: `n_pl` wide, applied per layer.
    proj_norm: RmsNorm,
    n_pl: usize,
}

/// The routed half of a MoE layer (26B-A4B).
struct RoutedExperts {
    moe: Moe,
    /// `ffn_gate_inp.scale`: the router input's per-channel scale.
    router_scale: Vec<f32>,
    /// `pre_ffw_norm_2`: the experts' input norm.
    pre_norm: RmsNorm,
    /// `post_ffw_norm_1`: after the shared (dense) FFN.
    post_norm_shared: RmsNorm,
    /// `post_ffw_norm_2`: after the experts.
    post_norm: RmsNorm,
}

impl RoutedExperts {
    fn load(ld: &Loader<'_>, il: usize, hp: &Hparams, n_ff_exp: usize) -> Result<RoutedExperts> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (e, eps) = (hp.n_embd, hp.rms_eps);
        if n_ff_exp == 0 {
            return Err(Error::MissingKey(ld.key("expert_feed_forward_length")));
        }
        if hp.n_expert == 0 {
            return Err(Error::MissingKey(ld.key("expert_count")));
        }
        if hp.n_expert_used == 0 || hp.n_expert_used > hp.n_expert {
            return Err(Error::BadKey {
                key: ld.key("expert_used_count"),
                msg: format!("{} of {} experts", hp.n_expert_used, hp.n_expert),
            });
        }
        let mut moe = Moe::load(ld, il, e, n_ff_exp, hp.n_expert, hp.n_expert_used)?;
        moe.act = Activation::Gelu;
        moe.gating = Gating::Softmax;
        moe.norm_weights = true;
        moe.weights_scale = 1.0;
        moe.selection_bias = None;
        Ok(RoutedExperts {
            moe,
            router_scale: ld.vector(&n("ffn_gate_inp.scale"), e as u64)?,
            pre_norm: RmsNorm::load(ld, &n("pre_ffw_norm_2.weight"), e, eps)?,
            post_norm_shared: RmsNorm::load(ld, &n("post_ffw_norm_1.weight"), e, eps)?,
            post_norm: RmsNorm::load(ld, &n("post_ffw_norm_2.weight"), e, eps)?,
        })
    }

    /// The experts' output for the `n` rows of `x` (the residual after attention) into
    /// `out`, as `build_moe_ffn` with Gemma 4's router logits.
    fn forward(
        &self,
        pass: &Pass<'_>,
        il: usize,
        x: &[f32],
        n: usize,
        h: &mut Vec<f32>,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let e = self.router_scale.len();
        // router input: ggml_rms_norm, ggml_scale(1/√n_embd), ggml_mul(scale) — one
        // rounding each
        let plain = RmsNorm { weight: vec![1.0; e], eps: self.pre_norm.eps };
        plain.forward(x, h);
        let inv = 1.0 / (e as f32).sqrt();
        for row in h.chunks_exact_mut(e) {
            for (v, &s) in row.iter_mut().zip(&self.router_scale) {
                *v = (*v * inv) * s;
            }
        }
        let rows = RowLayout::one(n);
        let mut logits = Vec::new();
        self.moe.router.forward(&pass.with_rows(&rows), h, &mut logits)?;
        dump(&format!("ffn_moe_logits-{il}"), &logits);
        self.pre_norm.forward(x, h);
        dump(&format!("ffn_norm_2-{il}"), h);
        self.moe.forward_routed(pass, h, &mut logits, n, out)?;
        let mut tmp = Vec::new();
        self.post_norm.forward_inplace(out, &mut tmp);
        dump(&format!("ffn_moe-{il}"), out);
        Ok(())
    }
}

struct Layer {
    attn_norm: RmsNorm,
    attn: Attention,
    kv: Kv,
    swa: bool,
    attn_post_norm: RmsNorm,
    ffn_norm: RmsNorm,
    ffn: GatedFfn,
    ffn_post_norm: RmsNorm,
    experts: Option<RoutedExperts>,
    per_layer: Option<PerLayerBlock>,
    out_scale: Option<f32>,
}

/// A loaded Gemma 4 model.
pub struct Gemma4 {
    hp: Hparams,
    tok_embd: Embedding,
    per_layer: Option<PerLayerInputs>,
    output: Linear,
    output_norm: RmsNorm,
    final_softcap: Option<f32>,
    layers: Vec<Layer>,
    /// `(k width, v width)` of each cached layer.
    cache_widths: Vec<(usize, usize)>,
    /// Head widths `(windowed, global)` and the window.
    head_swa: usize,
    head_full: usize,
    window: usize,
}

/// A required per-layer count (`get_key_or_arr`).
fn per_layer(ld: &Loader<'_>, key: &str, n_layer: usize) -> Result<Vec<usize>> {
    let v = ld.opt_u32_per_layer(key, n_layer)?.ok_or_else(|| Error::MissingKey(ld.key(key)))?;
    Ok(v.into_iter().map(|x| x as usize).collect())
}

/// The hyperparameters `llama_model::load_hparams` reads for every architecture, with
/// gemma4's per-layer head counts (checked per layer in [`Gemma4::load`]); `n_head`,
/// `n_head_kv`, `head_k`, `head_v` and `n_rot` here are the global layers'.
fn read_hparams(ld: &Loader<'_>) -> Result<Hparams> {
    let n_layer = ld.u32("block_count")? as usize;
    if n_layer == 0 || n_layer > 4096 {
        return Err(Error::BadKey { key: ld.key("block_count"), msg: format!("{n_layer} layers") });
    }
    let n_embd = ld.u32("embedding_length")? as usize;
    if n_embd == 0 {
        return Err(Error::BadKey { key: ld.key("embedding_length"), msg: "0".into() });
    }
    let heads = per_layer(ld, "attention.head_count", n_layer)?;
    let n_head = heads[0];
    if n_head == 0 {
        return Err(Error::BadKey { key: ld.key("attention.head_count"), msg: "0 heads".into() });
    }
    let head_k = ld.opt_u32("attention.key_length")?.map_or(n_embd / n_head, |v| v as usize);
    let head_v = ld.opt_u32("attention.value_length")?.map_or(n_embd / n_head, |v| v as usize);
    let n_rot = ld.opt_u32("rope.dimension_count")?.map_or(head_k, |v| v as usize);
    let n_ctx_train = ld.opt_u32("context_length")?.unwrap_or(2048) as usize;
    let rms_eps = ld
        .opt_f32_in("attention.layer_norm_rms_epsilon", 0.0..=1.0)?
        .ok_or_else(|| Error::MissingKey(ld.key("attention.layer_norm_rms_epsilon")))?;
    let rope_base = ld.opt_f32_in("rope.freq_base", f32::MIN_POSITIVE..)?.unwrap_or(10000.0);
    let scaling = ld.opt_str("rope.scaling.type")?.unwrap_or("linear");
    if !matches!(scaling, "none" | "linear") {
        return Err(Error::Unsupported(format!("{ARCH}: rope scaling `{scaling}` (supported: none, linear)")));
    }
    let factor = match ld.opt_f32_in("rope.scaling.factor", 0.0..)? {
        Some(f) => f,
        None => ld.opt_f32_in("rope.scale_linear", 0.0..)?.unwrap_or(0.0),
    };
    let n_expert = ld.opt_u32("expert_count")?.unwrap_or(0) as usize;
    Ok(Hparams {
        n_layer,
        n_embd,
        n_head,
        n_head_kv: n_head,
        head_k,
        head_v,
        n_rot,
        n_ff: per_layer(ld, "feed_forward_length", n_layer)?,
        n_ctx_train,
        rms_eps,
        rope_base,
        rope_freq_scale: if scaling == "none" || factor == 0.0 { 1.0 } else { 1.0 / factor },
        rope_yarn: false,
        n_ctx_orig: ld.opt_u32("rope.scaling.original_context_length")?.unwrap_or(n_ctx_train as u32),
        rope_yarn_log_mul: 0.0,
        rope_yarn_mscale: 1.0,
        rope_attn_factor: ld.opt_f32("rope.scaling.attn_factor")?.unwrap_or(1.0),
        rope_yarn_beta: (32.0, 1.0),
        n_expert,
        n_expert_used: ld.opt_u32("expert_used_count")?.unwrap_or(0) as usize,
        n_ff_exp: 0,
        expert_weights_scale: 0.0,
        expert_groups: crate::hparams::expert_groups(ld, n_expert)?,
    })
}

impl Gemma4 {
    /// Loads a `gemma4` file, checking what `llama_model_gemma4::load_arch_hparams` /
    /// `load_arch_tensors` require.
    pub fn load(file: Arc<SplitGguf>) -> Result<Gemma4> {
        let ld = Loader::with_shared(&file, ARCH);
        let hp = read_hparams(&ld)?;
        let (e, eps, n_layer) = (hp.n_embd, hp.rms_eps, hp.n_layer);
        let bad = |k: &str, msg: String| Error::BadKey { key: ld.key(k), msg };
        let swa = ld
            .opt_bool_array("attention.sliding_window_pattern")?
            .ok_or_else(|| Error::MissingKey(ld.key("attention.sliding_window_pattern")))?;
        if swa.len() != n_layer {
            return Err(bad(
                "attention.sliding_window_pattern",
                format!("{} entries, expected one per layer ({n_layer})", swa.len()),
            ));
        }
        let window = ld.u32("attention.sliding_window")? as usize;
        if window == 0 && swa.iter().any(|&s| s) {
            return Err(bad("attention.sliding_window", "0 with windowed layers".into()));
        }
        let head_swa = ld.u32("attention.key_length_swa")? as usize;
        let head_v_swa = ld.u32("attention.value_length_swa")? as usize;
        if hp.head_k != hp.head_v || head_swa != head_v_swa {
            return Err(Error::Invalid(format!(
                "{ARCH} needs equal key and value heads (global k={} v={}, windowed k={head_swa} v={head_v_swa})",
                hp.head_k, hp.head_v
            )));
        }
        let n_rot_swa = ld.opt_u32("rope.dimension_count_swa")?.map_or(hp.n_rot, |v| v as usize);
        let base_swa = ld.opt_f32_in("rope.freq_base_swa", f32::MIN_POSITIVE..)?.unwrap_or(10000.0);
        let n_pl = ld.u32("embedding_length_per_layer_input")? as usize;
        let n_shared = ld.opt_u32("attention.shared_kv_layers")?.unwrap_or(0) as usize;
        if n_shared >= n_layer || (n_shared > 0 && n_layer - n_shared < 2) {
            return Err(bad(
                "attention.shared_kv_layers",
                format!("{n_shared} of {n_layer} layers: at least 2 must keep their own cache"),
            ));
        }
        let kv_layers = n_layer - n_shared;
        let head_full = hp.head_k;
        let final_softcap = ld.opt_f32("final_logit_softcapping")?.filter(|&c| c != 0.0);
        let heads = per_layer(&ld, "attention.head_count", n_layer)?;
        let n_ff_exp = match ld.opt_u32_per_layer("expert_feed_forward_length", n_layer)? {
            Some(v) => v.into_iter().map(|x| x as usize).collect(),
            None => vec![0; n_layer],
        };
        let heads_kv = ld
            .opt_u32_per_layer("attention.head_count_kv", n_layer)?
            .map_or_else(|| heads.clone(), |v| v.into_iter().map(|x| x as usize).collect::<Vec<_>>());

        let mut tok_embd = Embedding::load(&ld, "token_embd.weight", e)?;
        tok_embd.scale = Some((e as f32).sqrt());
        let n_vocab = tok_embd.n_vocab();
        let output = Linear::output(&ld, &tok_embd)?;
        let output_norm = RmsNorm::load(&ld, "output_norm.weight", e, eps)?;
        let per_layer = if n_pl > 0 {
            let w = n_pl * n_layer;
            let mut model_proj = Linear::load(&ld, "per_layer_model_proj", e, w)?;
            model_proj.repack()?;
            let tok = Embedding::load(&ld, "per_layer_token_embd.weight", w)?;
            if tok.n_vocab() != n_vocab {
                return Err(Error::Invalid(format!(
                    "`per_layer_token_embd.weight` has {} rows, `token_embd.weight` {n_vocab}",
                    tok.n_vocab()
                )));
            }
            Some(PerLayerInputs {
                tok_embd: tok,
                model_proj,
                proj_norm: RmsNorm::load(&ld, "per_layer_proj_norm.weight", n_pl, eps)?,
                n_pl,
            })
        } else {
            None
        };

        // llama.cpp's reuse: a KV-shared layer reads the last cached layer of its kind
        for il in kv_layers..n_layer {
            let src = kv_layers - if swa[il] { 2 } else { 1 };
            if swa[src] != swa[il] || heads_kv[src] != heads_kv[il] {
                let kind = |w: bool| if w { "windowed" } else { "global" };
                return Err(Error::Invalid(format!(
                    "layer {il} ({}, {} KV heads) shares the KV cache of layer {src} ({}, {} KV heads), which differs",
                    kind(swa[il]),
                    heads_kv[il],
                    kind(swa[src]),
                    heads_kv[src]
                )));
            }
        }
        let mut layers = Vec::with_capacity(n_layer);
        let mut cache_widths = Vec::new();
        let mut rope_freqs: Option<Vec<f32>> = None;
        for il in 0..n_layer {
            let n = |s: &str| format!("blk.{il}.{s}");
            let is_swa = swa[il];
            let (nh, nkv) = (heads[il], heads_kv[il]);
            let head = if is_swa { head_swa } else { hp.head_k };
            if nh == 0 || nkv == 0 || !nh.is_multiple_of(nkv) {
                return Err(Error::Invalid(format!("layer {il}: {nh} query heads and {nkv} KV heads")));
            }
            let n_rot = if is_swa { n_rot_swa } else { hp.n_rot };
            if head == 0 || n_rot > head || !n_rot.is_multiple_of(2) {
                return Err(Error::Invalid(format!("layer {il}: head width {head}, rope dims {n_rot}")));
            }
            let heads_l = Heads { n_head: nh, n_head_kv: nkv, head_k: head, head_v: head };
            let has_kv = il < kv_layers;
            let kv = if has_kv {
                cache_widths.push((nkv * head, nkv * head));
                Kv::Own(cache_widths.len() - 1)
            } else {
                Kv::Shared(kv_layers - if is_swa { 2 } else { 1 })
            };
            let (base, freq_scale, factors) = if is_swa {
                (base_swa, 1.0, None)
            } else {
                if rope_freqs.is_none() {
                    rope_freqs = Some(ld.vector("rope_freqs.weight", (head / 2) as u64)?);
                }
                (hp.rope_base, hp.rope_freq_scale, rope_freqs.clone())
            };
            if let Some(f) = &factors {
                if f.len() != head / 2 {
                    return Err(Error::Shape {
                        name: "rope_freqs.weight".into(),
                        got: vec![f.len() as u64],
                        want: vec![(head / 2) as u64],
                    });
                }
            }
            let mut rope = hp.rope(RopeMode::Neox, base, freq_scale, factors);
            rope.n_rot = n_rot;
            rope.corr_dims = yarn_corr_dims(n_rot, hp.n_ctx_orig, base, 32.0, 1.0);
            let (qd, kvd) = (nh * head, nkv * head);
            let q_norm = Some(RmsNorm::load(&ld, &n("attn_q_norm.weight"), head, eps)?);
            let mut attn = if has_kv && ld.has(&n("attn_qkv.weight")) {
                Attention::load_fused(&ld, il, e, heads_l, true, eps, rope)?
            } else {
                let wo = Linear::load(&ld, &n("attn_output"), qd, e)?;
                let wq = Linear::load(&ld, &n("attn_q"), e, qd)?;
                let (wk, wv, v_from_k, k_norm) = if has_kv {
                    let wk = Linear::load(&ld, &n("attn_k"), e, kvd)?;
                    let k_norm = RmsNorm::load(&ld, &n("attn_k_norm.weight"), head, eps)?;
                    match Linear::load_opt(&ld, &n("attn_v"), e, kvd)? {
                        Some(wv) => (wk, wv, false, Some(k_norm)),
                        None => {
                            let v = wk.rows_view(0, kvd)?;
                            (wk, v, true, Some(k_norm))
                        }
                    }
                } else {
                    // a KV-shared layer computes only its queries: K and V are never read
                    (wq.rows_view(0, qd)?, wq.rows_view(0, qd)?, false, None)
                };
                Attention {
                    heads: heads_l,
                    wq,
                    wk,
                    wv,
                    wo,
                    wqkv: None,
                    q_norm,
                    k_norm,
                    rope,
                    window: None,
                    scale: 1.0,
                    scale_q: false,
                    softcap: None,
                    q_gate: false,
                    v_norm: None,
                    v_from_k,
                    sinks: None,
                    temperature: None,
                }
            };
            attn.scale = 1.0;
            attn.window = is_swa.then_some(window);
            attn.v_norm = Some(RmsNorm { weight: vec![1.0; head], eps });
            attn.repack()?;
            if hp.n_ff[il] == 0 {
                return Err(bad("feed_forward_length", format!("0 for layer {il}")));
            }
            let mut ffn = GatedFfn::load(&ld, il, e, hp.n_ff[il], Activation::Gelu)?;
            ffn.repack()?;
            let experts = if ld.has(&n("ffn_gate_inp.weight")) {
                Some(RoutedExperts::load(&ld, il, &hp, n_ff_exp[il])?)
            } else {
                None
            };
            let per_layer = match &per_layer {
                Some(p) => {
                    let mut inp_gate = Linear::load(&ld, &n("inp_gate"), e, p.n_pl)?;
                    let mut proj = Linear::load(&ld, &n("proj"), p.n_pl, e)?;
                    inp_gate.repack()?;
                    proj.repack()?;
                    Some(PerLayerBlock {
                        inp_gate,
                        proj,
                        post_norm: RmsNorm::load(&ld, &n("post_norm.weight"), e, eps)?,
                    })
                }
                None => None,
            };
            let out_scale = ld.opt_vector(&n("layer_output_scale.weight"), 1)?.map(|v| v[0]);
            layers.push(Layer {
                attn_norm: RmsNorm::load(&ld, &n("attn_norm.weight"), e, eps)?,
                attn,
                kv,
                swa: is_swa,
                attn_post_norm: RmsNorm::load(&ld, &n("post_attention_norm.weight"), e, eps)?,
                ffn_norm: RmsNorm::load(&ld, &n("ffn_norm.weight"), e, eps)?,
                ffn,
                ffn_post_norm: RmsNorm::load(&ld, &n("post_ffw_norm.weight"), e, eps)?,
                experts,
                per_layer,
                out_scale,
            });
        }
        // a shared layer's source is a cached layer: map it to that layer's cache
        let own: Vec<Option<usize>> =
            layers.iter().map(|l| if let Kv::Own(i) = l.kv { Some(i) } else { None }).collect();
        for l in &mut layers {
            if let Kv::Shared(src) = l.kv {
                l.kv = Kv::Shared(own[src].ok_or_else(|| Error::Invalid(format!("layer {src} has no KV cache")))?);
            }
        }
        Ok(Gemma4 {
            hp,
            tok_embd,
            per_layer,
            output,
            output_norm,
            final_softcap,
            layers,
            cache_widths,
            head_swa,
            head_full,
            window,
        })
    }
}

/// Inference state of a [`Gemma4`] model: the cached layers' KV.
pub struct Gemma4State {
    kv: KvCache,
    n_past: usize,
    n_ubatch: usize,
    pool: Arc<Pool>,
    observer: Option<Arc<dyn crate::model::Observer>>,
}

impl State for Gemma4State {
    fn set_observer(&mut self, observer: Option<Arc<dyn crate::model::Observer>>) -> bool {
        self.observer = observer;
        true
    }
    fn n_past(&self) -> usize {
        self.n_past
    }
    fn n_ctx(&self) -> usize {
        self.kv.n_ctx
    }
    fn truncate(&mut self, n: usize) {
        self.n_past = self.n_past.min(n);
    }
    fn cache_bytes(&self) -> usize {
        self.kv.bytes()
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

#[derive(Default)]
struct Buffers {
    h: Vec<f32>,
    a: Vec<f32>,
    f: Vec<f32>,
    g: Vec<f32>,
    tmp: Vec<f32>,
    attn: AttentionScratch,
    ffn: FfnScratch,
}

impl Gemma4 {
    /// The per-layer inputs of `tokens` (`[n][n_layer][n_pl]`) from the scaled embeddings
    /// `x` (`project_per_layer_inputs` of llama.cpp: both halves, summed, × 1/√2).
    fn per_layer_inputs(&self, p: &PerLayerInputs, pass: &Pass<'_>, tokens: &[u32], x: &[f32]) -> Result<Vec<f32>> {
        let (e, n) = (self.hp.n_embd, tokens.len());
        let w = p.n_pl * self.hp.n_layer;
        let mut sel = vec![0.0f32; n * w];
        for (t, &id) in tokens.iter().enumerate() {
            p.tok_embd.row(id, &mut sel[t * w..(t + 1) * w])?;
        }
        ops::scale_inplace(&mut sel, (p.n_pl as f32).sqrt());
        dump("inp_per_layer_selected", &sel);
        let mut proj = Vec::new();
        p.model_proj.forward(pass, &x[..n * e], &mut proj)?;
        ops::scale_inplace(&mut proj, 1.0 / (e as f32).sqrt());
        let mut tmp = Vec::new();
        p.proj_norm.forward_inplace(&mut proj, &mut tmp);
        dump("per_layer_proj", &proj);
        ops::add_inplace(&mut proj, &sel);
        ops::scale_inplace(&mut proj, 1.0 / 2.0f32.sqrt());
        dump("inp_per_layer", &proj);
        Ok(proj)
    }

    /// One ubatch of one sequence through every layer; the logits asked for.
    fn run_ubatch(&self, st: &mut Gemma4State, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        let n = tokens.len();
        let pool = st.pool.clone();
        let observer = st.observer.clone();
        let rows = RowLayout::one(n);
        let pass = Pass { pool: &pool, observer: observer.as_ref(), rows: &rows };
        let e = self.hp.n_embd;
        let mut x = vec![0.0f32; n * e];
        self.tok_embd.forward(tokens, 0, &mut x)?;
        dump("inp_scaled", &x);
        let ple = match &self.per_layer {
            Some(p) => Some(self.per_layer_inputs(p, &pass, tokens, &x)?),
            None => None,
        };
        let mut b = Buffers::default();
        let p0 = st.n_past;
        for (il, layer) in self.layers.iter().enumerate() {
            let Buffers { h, a, f, g, tmp, attn, ffn } = &mut b;
            layer.attn_norm.forward(&x, h);
            dump(&format!("attn_norm-{il}"), h);
            match layer.kv {
                Kv::Own(i) => {
                    let (k, v) = (&mut st.kv.k[i], &mut st.kv.v[i]);
                    let mut seqs = [SeqKv { row0: 0, n, pos0: p0, k, v }];
                    layer.attn.forward(&pass, il, h, &mut seqs, attn, a)?;
                }
                Kv::Shared(i) => {
                    let seqs = [SeqView { row0: 0, n, pos0: p0, k: &st.kv.k[i], v: &st.kv.v[i] }];
                    layer.attn.forward_shared(&pass, il, h, &seqs, attn, a)?;
                }
            }
            layer.attn_post_norm.forward_inplace(a, tmp);
            dump(&format!("attn_post_norm-{il}"), a);
            // attn_out = attn + x: kept in x
            ops::add_inplace(&mut x, a);
            dump(&format!("attn_out-{il}"), &x);
            layer.ffn_norm.forward(&x, h);
            dump(&format!("ffn_norm-{il}"), h);
            layer.ffn.forward(&pass, il, h, ffn, f)?;
            if let Some(ex) = &layer.experts {
                // shared expert + routed experts, each post-normed, summed
                ex.post_norm_shared.forward_inplace(f, tmp);
                dump(&format!("ffn_mlp-{il}"), f);
                ex.forward(&pass, il, &x, n, h, g)?;
                ops::add_inplace(f, g);
                dump(&format!("ffn_moe_combined-{il}"), f);
            }
            dump(&format!("ffn_out-{il}"), f);
            layer.ffn_post_norm.forward_inplace(f, tmp);
            dump(&format!("ffn_post_norm-{il}"), f);
            ops::add_inplace(&mut x, f);
            if let (Some(pl), Some(inp)) = (&layer.per_layer, &ple) {
                dump(&format!("pe_in-{il}"), &x);
                let n_pl = pl.inp_gate.rows();
                pl.inp_gate.forward(&pass, &x, g)?;
                let w = n_pl * self.hp.n_layer;
                for (t, row) in g.chunks_exact_mut(n_pl).enumerate() {
                    let this = &inp[t * w + il * n_pl..t * w + (il + 1) * n_pl];
                    for (v, &s) in row.iter_mut().zip(this) {
                        *v = ops::gelu(*v) * s;
                    }
                }
                pl.proj.forward(&pass, g, f)?;
                pl.post_norm.forward_inplace(f, tmp);
                dump(&format!("per_layer_embd_out-{il}"), f);
                ops::add_inplace(&mut x, f);
            }
            if let Some(s) = layer.out_scale {
                ops::scale_inplace(&mut x, s);
                dump(&format!("out_scaled-{il}"), &x);
            }
            dump(&format!("l_out-{il}"), &x);
        }
        st.n_past += n;
        let mut out = crate::blocks::output_head(&pass, &self.output_norm, &self.output, &x, n, logits, &mut b.tmp)?;
        if let Some(c) = self.final_softcap {
            // ggml_scale(1/c), ggml_tanh, ggml_scale(c)
            let inv = 1.0 / c;
            for l in out.iter_mut() {
                *l = (*l * inv).tanh() * c;
            }
        }
        dump("result_output", &out);
        Ok(out)
    }
}

impl Model for Gemma4 {
    fn arch(&self) -> &str {
        ARCH
    }

    fn n_vocab(&self) -> usize {
        self.tok_embd.n_vocab()
    }

    fn n_ctx_train(&self) -> usize {
        self.hp.n_ctx_train
    }

    fn describe(&self) -> String {
        let hp = &self.hp;
        let n_swa = self.layers.iter().filter(|l| l.swa).count();
        let n_shared = self.layers.iter().filter(|l| matches!(l.kv, Kv::Shared(_))).count();
        let k_eq_v = self.layers.iter().filter(|l| l.attn.v_from_k).count();
        let mut s = format!(
            "{ARCH}: {} layers ({n_swa} windowed, window {}, heads of {}; {} global, heads of {}), n_embd {}, \
             n_vocab {}",
            hp.n_layer,
            self.window,
            self.head_swa,
            hp.n_layer - n_swa,
            self.head_full,
            hp.n_embd,
            self.tok_embd.n_vocab()
        );
        if n_shared > 0 {
            s += &format!(", {n_shared} layers sharing earlier KV caches");
        }
        if k_eq_v > 0 {
            s += &format!(", {k_eq_v} layers with V = K projection");
        }
        let n_moe = self.layers.iter().filter(|l| l.experts.is_some()).count();
        if n_moe > 0 {
            s += &format!(
                ", {n_moe} MoE layers ({} experts, {} used, beside a shared FFN)",
                hp.n_expert, hp.n_expert_used
            );
        }
        if let Some(p) = &self.per_layer {
            s += &format!(", per-layer embeddings of {}", p.n_pl);
        }
        if let Some(c) = self.final_softcap {
            s += &format!(", final soft-cap {c}");
        }
        s
    }

    fn new_state(&self, opts: &StateOptions) -> Result<Box<dyn State>> {
        let n_ctx = if opts.n_ctx == 0 { self.hp.n_ctx_train } else { opts.n_ctx };
        crate::kv_cache::check_head_widths(opts.cache_type_k, opts.cache_type_v, self.head_swa, self.head_swa)?;
        crate::kv_cache::check_head_widths(opts.cache_type_k, opts.cache_type_v, self.head_full, self.head_full)?;
        let kv = KvCache::new(&self.cache_widths, n_ctx, opts.cache_type_k, opts.cache_type_v)?;
        let threads = opts.n_threads.max(1);
        Ok(Box::new(Gemma4State {
            kv,
            n_past: 0,
            n_ubatch: opts.n_ubatch.max(1),
            pool: opts.pool.clone().unwrap_or_else(|| Arc::new(Pool::new(threads))),
            observer: None,
        }))
    }

    fn forward(&self, state: &mut dyn State, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        let st = state
            .as_any_mut()
            .downcast_mut::<Gemma4State>()
            .ok_or_else(|| Error::Invalid("state was not made by this model".into()))?;
        if st.n_past + tokens.len() > st.kv.n_ctx {
            return Err(Error::ContextFull { n_tokens: tokens.len(), n_ctx: st.kv.n_ctx, pos: st.n_past });
        }
        let ub = st.n_ubatch;
        logits.by_ubatch(tokens, ub, |chunk, want| self.run_ubatch(st, chunk, want))
    }
}
