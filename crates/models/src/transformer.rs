//! The decoder-only transformer that llama, qwen2, qwen3, qwen3moe, gemma2, gemma3,
//! smollm3, granite, olmo2 and deepseek2 share, assembled from the public [`crate::blocks`]:
//! RMSNorm, GQA attention with RoPE over a KV cache (or DeepSeek's multi-head latent
//! attention over a compressed one), SwiGLU/GeGLU or top-k MoE FFN. Architectures differ
//! only in the [`Spec`] they build from their metadata.

use std::sync::Arc;

use gguf_format::SplitGguf;
use quant_kernels::{ops, Pool};

use crate::blocks::{
    add_on, dump, Attention, AttentionScratch, Embedding, Ffn, FfnScratch, GatedFfn, Heads, Linear, Mla, MlaDims,
    MlaScratch, Moe, Pass, RmsNorm, RowLayout, SeqKv,
};
pub use crate::blocks::{Activation, Gating};
use crate::hparams::Hparams;
use crate::kv_cache::KvCache;
use crate::loader::Loader;
use crate::model::{Logits, Model, Segment, State, StateOptions};
use crate::rope::RopeMode;
use crate::{Error, Result};

/// Sliding-window attention settings.
#[derive(Debug, Clone)]
pub struct Swa {
    /// Window in tokens: position `p1` sees `p0` when `p1 - p0 < window`.
    pub window: usize,
    /// Which layers use the window.
    pub layers: Vec<bool>,
    /// Rope base of windowed layers.
    pub rope_base: f32,
    /// Rope scale of windowed layers.
    pub rope_freq_scale: f32,
}
/// What distinguishes one architecture of the family from another.
///
/// Start from [`Spec::llama`] and change the fields that differ (the struct is
/// `#[non_exhaustive]`: new fields come with a llama default, so plug-in architectures
/// keep compiling).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Spec {
    /// Rope pairing.
    pub rope_mode: RopeMode,
    /// Per-head RMSNorm of Q and K (`attn_q_norm`, `attn_k_norm`) before rope.
    pub qk_norm: bool,
    /// RMSNorm after attention and after the FFN (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// FFN activation.
    pub activation: Activation,
    /// Scale of the token embeddings (gemma: √n_embd).
    pub embed_scale: Option<f32>,
    /// Attention scale; default `1/√head_k`.
    pub attn_scale: Option<f32>,
    /// Apply the attention scale to q after rope (gemma's `ggml_scale(Qcur)`) rather than
    /// inside attention; the rounding differs, so this follows the reference graph.
    pub scale_q: bool,
    /// Sliding-window layers.
    pub swa: Option<Swa>,
    /// Final logit soft-capping.
    pub final_softcap: Option<f32>,
    /// Soft-capping of the attention scores (gemma2's `attn_logit_softcapping`), inside
    /// the attention as ggml's flash attention applies it ([`crate::blocks::attend_softcap`]).
    pub attn_softcap: Option<f32>,
    /// Normalize the top-k expert weights to sum to one.
    pub moe_norm_weights: bool,
    /// Layers without rope (NoPE: smollm3's every 4th); empty: every layer ropes.
    pub nope_layers: Vec<bool>,
    /// Scale of each block's output before its residual add (granite's `residual_scale`).
    pub residual_scale: Option<f32>,
    /// Multiplier of the logits, before any soft-capping (granite: 1 / `logit_scale`).
    pub logit_scale: Option<f32>,
    /// RMSNorm before attention and before the FFN (`attn_norm`, `ffn_norm`); olmo2 has
    /// only the post-norms.
    pub pre_norms: bool,
    /// With `qk_norm`: one RMSNorm over all heads of Q (and of K) at once, `attn_q_norm`
    /// `n_head × head_k` wide (olmo2), instead of one per head.
    pub qk_norm_whole: bool,
    /// Gate and up fused in `ffn_up` (`2·n_ff` rows, gate first; no `ffn_gate`): phi3.
    pub ffn_fused_up: bool,
    /// Rope frequency factors of every layer, instead of the file's `rope_freqs.weight`
    /// (phi3: `rope_factors_short` or `rope_factors_long`).
    pub freq_factors: Option<Vec<f32>>,
    /// The largest context a state may have (phi3 with LongRoPE factors: the factors
    /// loaded are those of contexts up to this).
    pub max_ctx: Option<usize>,
    /// The tensor (without `.weight`) of the RMSNorm before the FFN: `ffn_norm`, or
    /// gpt-oss's `post_attention_norm`.
    pub ffn_norm_tensor: &'static str,
    /// Attention sinks (`attn_sinks`, one logit per head: gpt-oss).
    pub attn_sinks: bool,
    /// How a MoE router's logits become expert weights.
    pub moe_gating: Gating,
    /// Llama 4's attention temperature `(β, L)` on the queries ([`Attention::temperature`]).
    pub attn_temperature: Option<(f32, u32)>,
    /// In a MoE model, the first layers with a dense FFN (`leading_dense_block_count`).
    pub dense_lead: usize,
    /// Shared experts of each MoE layer (`expert_shared_count`): one SwiGLU FFN
    /// `ffn_{gate,up,down}_shexp`, `n_shared · expert_feed_forward_length` wide, whose
    /// output is added to the routed experts'.
    pub n_shared_experts: usize,
    /// The layers to run, where the file's `block_count` also counts layers that are not
    /// part of the forward pass (glm4moe's multi-token-prediction `nextn_predict_layers`).
    pub n_layer: Option<usize>,
    /// Multi-head latent attention instead of [`Attention`] in every layer (deepseek2:
    /// [`Mla`], one compressed cache row per token, no V cache); `attn_scale` and
    /// `attn_temperature` apply to it.
    pub mla: Option<MlaDims>,
}

impl Spec {
    /// The plain llama-style block with `rope_mode`: SwiGLU, no QK-norm, no post-norms,
    /// no embedding scale or soft-capping, attention scale `1/√head_k`, top-k expert
    /// weights normalized.
    pub const fn llama(rope_mode: RopeMode) -> Spec {
        Spec {
            rope_mode,
            qk_norm: false,
            post_norms: false,
            activation: Activation::Silu,
            embed_scale: None,
            attn_scale: None,
            scale_q: false,
            swa: None,
            final_softcap: None,
            attn_softcap: None,
            moe_norm_weights: true,
            nope_layers: Vec::new(),
            residual_scale: None,
            logit_scale: None,
            pre_norms: true,
            qk_norm_whole: false,
            ffn_fused_up: false,
            freq_factors: None,
            max_ctx: None,
            ffn_norm_tensor: "ffn_norm",
            attn_sinks: false,
            moe_gating: Gating::Softmax,
            attn_temperature: None,
            dense_lead: 0,
            n_shared_experts: 0,
            n_layer: None,
            mla: None,
        }
    }
}

/// A layer's attention block.
enum Mixer {
    Attn(Box<Attention>),
    Mla(Box<Mla>),
}

impl Mixer {
    /// The rope of the cached keys (what a K shift rotates).
    fn rope(&self) -> &crate::rope::Rope {
        match self {
            Mixer::Attn(a) => &a.rope,
            Mixer::Mla(m) => &m.rope,
        }
    }
}

/// One layer: `x += post_norm(attn(norm(x)))`, then `x += post_norm(ffn(norm(x)))`.
struct Layer {
    attn_norm: Option<RmsNorm>,
    attn: Mixer,
    post_attn_norm: Option<RmsNorm>,
    ffn_norm: Option<RmsNorm>,
    ffn: Ffn,
    /// Shared experts, added to `ffn`'s output.
    shared: Option<GatedFfn>,
    post_ffn_norm: Option<RmsNorm>,
}

impl Layer {
    /// Moves the layer's matrices into the layouts of the kernels that repack them (as
    /// llama.cpp's CPU_REPACK buffers do at load).
    fn repack(&mut self) -> Result<()> {
        if let Mixer::Attn(a) = &mut self.attn {
            a.repack()?;
        }
        self.ffn.repack()?;
        if let Some(s) = &mut self.shared {
            s.repack()?;
        }
        Ok(())
    }
}

/// [`Layer::repack`] for every layer, the layers split between the machine's cores: a
/// repacking file's load time is the new layouts' page faults and copies, which run in
/// parallel (llama-1b Q4_0 on a 2-core AVX2 machine: see BENCHMARKS.md).
fn repack_layers(layers: &mut [Layer]) -> Result<()> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, layers.len().max(1));
    let per = layers.len().div_ceil(n).max(1);
    std::thread::scope(|s| {
        let mut jobs = Vec::new();
        let mut inline = Vec::new();
        for c in layers.chunks_mut(per) {
            let (tx, rx) = std::sync::mpsc::channel();
            // A thread that cannot be started (under a tight `ulimit -v`, say) leaves its
            // chunk to this one.
            match std::thread::Builder::new().spawn_scoped(s, move || {
                let c: &mut [Layer] = rx.recv().expect("the chunk is sent once");
                c.iter_mut().try_for_each(Layer::repack)
            }) {
                Ok(j) => {
                    tx.send(c).expect("the thread is waiting for its chunk");
                    jobs.push(j);
                }
                Err(_) => inline.push(c),
            }
        }
        inline.into_iter().flat_map(|c| c.iter_mut()).try_for_each(Layer::repack)?;
        jobs.into_iter().try_for_each(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
}

/// A loaded decoder-only transformer; weights stay in the model's mmaps (one per shard of
/// a split model), except the matrices a kernel repacks at load (as llama.cpp does for the
/// same types and shapes), which are read from the file straight into their new layout.
pub struct Transformer {
    arch: String,
    hp: Hparams,
    spec: Spec,
    tok_embd: Embedding,
    output: Linear,
    output_norm: RmsNorm,
    layers: Vec<Layer>,
}

impl Transformer {
    /// Loads the weights described by `hp` and `spec` (tensor names as llama.cpp's
    /// `LLM_TENSOR_NAMES`).
    /// `file` is a plain GGUF file or a shard set ([`SplitGguf::open`] opens either).
    pub fn load(file: Arc<SplitGguf>, arch: &str, mut hp: Hparams, spec: Spec) -> Result<Transformer> {
        let ld = Loader::with_shared(&file, arch);
        if let Some(n) = spec.n_layer {
            if n == 0 || n > hp.n_layer {
                return Err(Error::Invalid(format!("{n} layers to run of the file's {}", hp.n_layer)));
            }
            hp.n_layer = n;
            hp.n_ff.truncate(n);
        }
        let e = hp.n_embd;
        let eps = hp.rms_eps;
        let mut tok_embd = Embedding::load(&ld, "token_embd.weight", e)?;
        tok_embd.scale = spec.embed_scale;
        let output = Linear::output(&ld, &tok_embd)?;
        let output_norm = RmsNorm::load(&ld, "output_norm.weight", e, eps)?;
        let rope_freqs = match &spec.freq_factors {
            Some(f) => Some(f.clone()),
            None => ld.opt_vector("rope_freqs.weight", (hp.n_rot / 2) as u64)?,
        };
        let mut layers = Vec::with_capacity(hp.n_layer);
        for il in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}");
            let mut shared = None;
            let ffn = if hp.n_expert > 0 && il >= spec.dense_lead {
                if hp.n_expert_used == 0 {
                    return Err(Error::MissingKey(ld.key("expert_used_count")));
                }
                let ff = if hp.n_ff_exp > 0 { hp.n_ff_exp } else { hp.n_ff[il] / hp.n_expert_used };
                let mut m = Moe::load(&ld, il, e, ff, hp.n_expert, hp.n_expert_used)?;
                m.norm_weights = spec.moe_norm_weights;
                m.weights_scale = hp.expert_weights_scale;
                m.act = spec.activation;
                m.gating = spec.moe_gating;
                if hp.expert_groups.0 > 1 {
                    m.groups = Some(hp.expert_groups);
                }
                if spec.n_shared_experts > 0 {
                    let fs = ff * spec.n_shared_experts;
                    let n = |s: &str| format!("blk.{il}.{s}");
                    shared = Some(GatedFfn {
                        gate: Linear::load(&ld, &n("ffn_gate_shexp"), e, fs)?,
                        up: Linear::load(&ld, &n("ffn_up_shexp"), e, fs)?,
                        down: Linear::load(&ld, &n("ffn_down_shexp"), fs, e)?,
                        act: spec.activation,
                        fused: None,
                    });
                }
                Ffn::Moe(m)
            } else {
                if hp.n_ff[il] == 0 {
                    return Err(Error::MissingKey(ld.key("feed_forward_length")));
                }
                if spec.ffn_fused_up {
                    Ffn::Dense(GatedFfn::load_fused(&ld, il, e, hp.n_ff[il], spec.activation)?)
                } else {
                    Ffn::Dense(GatedFfn::load(&ld, il, e, hp.n_ff[il], spec.activation)?)
                }
            };
            let swa = spec.swa.as_ref().is_some_and(|s| s.layers[il]);
            let (base, scale) = match (&spec.swa, swa) {
                (Some(s), true) => (s.rope_base, s.rope_freq_scale),
                _ => (hp.rope_base, hp.rope_freq_scale),
            };
            let pre = |s: &str| if spec.pre_norms { RmsNorm::load(&ld, &n(s), e, eps).map(Some) } else { Ok(None) };
            let attn_norm = pre("attn_norm.weight")?;
            let mut rope = hp.rope(spec.rope_mode, base, scale, rope_freqs.clone());
            if spec.nope_layers.get(il) == Some(&true) {
                // No rotated dimensions: rope is the identity, as llama.cpp skipping it.
                rope.n_rot = 0;
            }
            let attn = match spec.mla {
                Some(dims) => {
                    let mut m = Mla::load(&ld, il, e, dims, eps, rope)?;
                    m.scale = spec.attn_scale.unwrap_or(m.scale);
                    m.temperature = spec.attn_temperature;
                    Mixer::Mla(Box::new(m))
                }
                None => Mixer::Attn(Box::new(Self::attention(&ld, il, &hp, &spec, rope, swa)?)),
            };
            let post = |s: &str| if spec.post_norms { RmsNorm::load(&ld, &n(s), e, eps).map(Some) } else { Ok(None) };
            let post_attn_norm = post("post_attention_norm.weight")?;
            let ffn_norm = pre(&format!("{}.weight", spec.ffn_norm_tensor))?;
            let post_ffn_norm = post("post_ffw_norm.weight")?;
            layers.push(Layer { attn_norm, attn, post_attn_norm, ffn_norm, ffn, shared, post_ffn_norm });
        }
        repack_layers(&mut layers)?;
        Ok(Transformer { arch: arch.to_string(), hp, spec, tok_embd, output, output_norm, layers })
    }

    /// Layer `il`'s [`Attention`] as `spec` shapes it (repacked with the layer, [`Layer::repack`]).
    fn attention(
        ld: &Loader<'_>,
        il: usize,
        hp: &Hparams,
        spec: &Spec,
        rope: crate::rope::Rope,
        swa: bool,
    ) -> Result<Attention> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (e, eps) = (hp.n_embd, hp.rms_eps);
        let heads = Heads { n_head: hp.n_head, n_head_kv: hp.n_head_kv, head_k: hp.head_k, head_v: hp.head_v };
        let per_head_norm = spec.qk_norm && !spec.qk_norm_whole;
        // llama.cpp's `create_tensor_qkv`: a fused `attn_qkv` wherever the file has one.
        let mut attn = if ld.has(&n("attn_qkv.weight")) {
            Attention::load_fused(ld, il, e, heads, per_head_norm, eps, rope)?
        } else {
            Attention::load(ld, il, e, heads, per_head_norm, eps, rope)?
        };
        if spec.qk_norm && spec.qk_norm_whole {
            attn.q_norm = Some(RmsNorm::load(ld, &n("attn_q_norm.weight"), hp.n_head * hp.head_k, eps)?);
            attn.k_norm = Some(RmsNorm::load(ld, &n("attn_k_norm.weight"), hp.n_head_kv * hp.head_k, eps)?);
        }
        attn.window = if swa { spec.swa.as_ref().map(|s| s.window) } else { None };
        attn.scale = spec.attn_scale.unwrap_or(attn.scale);
        attn.scale_q = spec.scale_q;
        attn.softcap = spec.attn_softcap;
        attn.temperature = spec.attn_temperature;
        if spec.attn_sinks {
            attn.sinks = Some(ld.vector(&n("attn_sinks.weight"), hp.n_head as u64)?);
        }
        Ok(attn)
    }

    /// The hyperparameters.
    pub fn hparams(&self) -> &Hparams {
        &self.hp
    }
}

/// `norm(x)` into `h`, or `x` itself where the layer has no pre-norm.
fn norm_or_copy(pool: &Pool, norm: Option<&RmsNorm>, x: &[f32], h: &mut Vec<f32>) {
    match norm {
        Some(w) => w.forward_on(pool, x, h),
        None => {
            h.clear();
            h.extend_from_slice(x);
        }
    }
}

/// Inference state of a [`Transformer`].
pub struct TransformerState {
    kv: KvCache,
    n_past: usize,
    n_ubatch: usize,
    pool: Arc<Pool>,
    observer: Option<std::sync::Arc<dyn crate::model::Observer>>,
}

impl State for TransformerState {
    fn set_observer(&mut self, observer: Option<std::sync::Arc<dyn crate::model::Observer>>) -> bool {
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

/// Scratch of one batch pass, reused by every layer.
#[derive(Default)]
struct Buffers {
    /// The normed input of a block.
    h: Vec<f32>,
    /// A block's output before the residual add.
    a: Vec<f32>,
    /// One row, for in-place norms.
    tmp: Vec<f32>,
    attn: AttentionScratch,
    mla: MlaScratch,
    ffn: FfnScratch,
}

/// The part of a batch pass one sequence contributes.
struct Part<'s> {
    st: &'s mut TransformerState,
    tokens: &'s [u32],
    logits: Logits,
    row0: usize,
    p0: usize,
}

impl Transformer {
    /// One forward pass over every part of a batch (each at most one ubatch of its own
    /// sequence): [`RowLayout::lay_out`], the embeddings, then per layer the attention
    /// and the FFN blocks (each adds its output to the residual stream `x`), then
    /// [`Self::output_head`]; returns each part's logits. With `whole`, the parts are one
    /// llama.cpp ubatch ([`Model::forward_ubatch`]): their rows in order form one product
    /// through every weight and one routing of the experts.
    fn run_batch(&self, pool: &Pool, parts: &mut [Part<'_>], whole: bool) -> Result<Vec<Vec<f32>>> {
        let lens: Vec<usize> = parts.iter().map(|p| p.tokens.len()).collect();
        let (rows, row0) = if whole {
            let mut rows = RowLayout::default();
            rows.push_product(lens.iter().sum());
            let row0 = lens.iter().scan(0, |r, &n| Some(std::mem::replace(r, *r + n))).collect();
            (rows, row0)
        } else {
            RowLayout::lay_out(&lens)
        };
        for (p, r0) in parts.iter_mut().zip(row0) {
            p.row0 = r0;
            p.p0 = p.st.n_past;
        }
        let observer = parts.first().and_then(|p| p.st.observer.clone());
        let pass = Pass { pool, observer: observer.as_ref(), rows: &rows };
        let e = self.hp.n_embd;
        let mut x = vec![0.0f32; rows.n_rows() * e];
        for p in parts.iter() {
            self.tok_embd.forward(p.tokens, p.row0, &mut x)?;
        }
        dump("embd", &x);
        let seq_rows: Vec<(usize, usize)> =
            if whole { vec![(0, rows.n_rows())] } else { parts.iter().map(|p| (p.row0, p.tokens.len())).collect() };
        let mut b = Buffers::default();
        for (il, layer) in self.layers.iter().enumerate() {
            let Buffers { h, a, tmp, attn, mla, ffn } = &mut b;
            norm_or_copy(pool, layer.attn_norm.as_ref(), &x, h);
            dump(&format!("attn_norm-{il}"), h);
            let mut seqs: Vec<SeqKv<'_>> = parts
                .iter_mut()
                .map(|p| SeqKv {
                    row0: p.row0,
                    n: p.tokens.len(),
                    pos0: p.p0,
                    k: &mut p.st.kv.k[il],
                    v: &mut p.st.kv.v[il],
                })
                .collect();
            match &layer.attn {
                Mixer::Attn(at) => at.forward(&pass, il, h, &mut seqs, attn, a)?,
                Mixer::Mla(m) => m.forward(&pass, il, h, &mut seqs, mla, a)?,
            }
            if let Some(w) = &layer.post_attn_norm {
                w.forward_inplace_on(pool, a);
            }
            if let Some(s) = self.spec.residual_scale {
                ops::scale_inplace(a, s);
            }
            add_on(pool, &mut x, a);
            dump(&format!("ffn_inp-{il}"), &x);
            norm_or_copy(pool, layer.ffn_norm.as_ref(), &x, h);
            dump(&format!("ffn_norm-{il}"), h);
            layer.ffn.forward(&pass, il, h, &seq_rows, ffn, a)?;
            if let Some(sh) = &layer.shared {
                sh.forward(&pass, il, h, ffn, tmp)?;
                dump(&format!("ffn_shexp-{il}"), tmp);
                add_on(pool, a, tmp);
            }
            dump(&format!("ffn_out-{il}"), a);
            if let Some(w) = &layer.post_ffn_norm {
                w.forward_inplace_on(pool, a);
            }
            if let Some(s) = self.spec.residual_scale {
                ops::scale_inplace(a, s);
            }
            add_on(pool, &mut x, a);
            dump(&format!("l_out-{il}"), &x);
        }
        for p in parts.iter_mut() {
            p.st.n_past += p.tokens.len();
        }
        self.output_head(&pass, parts, &x, &mut b.tmp, whole)
    }

    /// The logits each part asked for: each `Last` part's last row (one-token products),
    /// then each `All` part's rows (a product of their own), through the output norm, the
    /// output matrix and the final soft-cap. With `whole`, the rows asked for, in the
    /// parts' order, are one product (llama.cpp's output rows of a ubatch).
    fn output_head(
        &self,
        pass: &Pass<'_>,
        parts: &[Part<'_>],
        x: &[f32],
        tmp: &mut Vec<f32>,
        whole: bool,
    ) -> Result<Vec<Vec<f32>>> {
        let e = self.hp.n_embd;
        let mut sel = Vec::new();
        let mut out_rows = RowLayout::default();
        let mut at = vec![(0usize, 0usize); parts.len()];
        if whole {
            for (i, p) in parts.iter().enumerate() {
                let (r0, n) = match p.logits {
                    Logits::All => (p.row0, p.tokens.len()),
                    Logits::Last => (p.row0 + p.tokens.len() - 1, 1),
                    Logits::None => continue,
                };
                at[i] = (sel.len() / e, n);
                sel.extend_from_slice(&x[r0 * e..(r0 + n) * e]);
            }
            if !sel.is_empty() {
                out_rows.push_product(sel.len() / e);
            }
        }
        for (i, p) in parts.iter().enumerate() {
            if p.logits == Logits::Last && !whole {
                let r = p.row0 + p.tokens.len() - 1;
                sel.extend_from_slice(&x[r * e..(r + 1) * e]);
                at[i] = (out_rows.n_rows(), 1);
                out_rows.push(1);
            }
        }
        for (i, p) in parts.iter().enumerate() {
            if p.logits == Logits::All && !whole {
                let n = p.tokens.len();
                sel.extend_from_slice(&x[p.row0 * e..(p.row0 + n) * e]);
                at[i] = (out_rows.n_rows(), n);
                out_rows.push_product(n);
            }
        }
        if out_rows.n_rows() == 0 {
            return Ok(parts.iter().map(|_| Vec::new()).collect());
        }
        self.output_norm.forward_inplace(&mut sel, tmp);
        dump("result_norm", &sel);
        let mut out = Vec::new();
        self.output.forward(&pass.with_rows(&out_rows), &sel, &mut out)?;
        if let Some(s) = self.spec.logit_scale {
            ops::scale_inplace(&mut out, s);
        }
        dump("result_output", &out);
        if let Some(c) = self.spec.final_softcap {
            // ggml_scale(1/c), ggml_tanh, ggml_scale(c): a product by the f32 reciprocal.
            let inv = 1.0 / c;
            for l in out.iter_mut() {
                *l = (*l * inv).tanh() * c;
            }
        }
        let nv = self.tok_embd.n_vocab();
        Ok(parts
            .iter()
            .zip(&at)
            .map(|(p, &(r0, n))| match p.logits {
                Logits::None => Vec::new(),
                _ => out[r0 * nv..(r0 + n) * nv].to_vec(),
            })
            .collect())
    }
}

impl Model for Transformer {
    fn arch(&self) -> &str {
        &self.arch
    }

    fn n_vocab(&self) -> usize {
        self.tok_embd.n_vocab()
    }

    fn n_ctx_train(&self) -> usize {
        self.hp.n_ctx_train
    }

    fn describe(&self) -> String {
        let hp = &self.hp;
        let mut s = format!(
            "{}: {} layers, n_embd {}, {} heads / {} KV heads, head dim {}/{}, n_vocab {}",
            self.arch,
            hp.n_layer,
            hp.n_embd,
            hp.n_head,
            hp.n_head_kv,
            hp.head_k,
            hp.head_v,
            self.tok_embd.n_vocab()
        );
        if let Some(d) = &self.spec.mla {
            s += &format!(
                ", MLA (q rank {}, kv rank {}, rope dims {}, value head {})",
                d.q_lora, d.kv_lora, d.n_rot, d.head_v
            );
        }
        if hp.n_expert > 0 {
            s += &format!(", {} experts ({} used)", hp.n_expert, hp.n_expert_used);
        }
        if let Some(w) = &self.spec.swa {
            s += &format!(", sliding window {} on {} layers", w.window, w.layers.iter().filter(|&&b| b).count());
        }
        s
    }

    fn new_state(&self, opts: &StateOptions) -> Result<Box<dyn State>> {
        let hp = &self.hp;
        let n_ctx = if opts.n_ctx == 0 { hp.n_ctx_train } else { opts.n_ctx };
        if let Some(max) = self.spec.max_ctx.filter(|&m| n_ctx > m) {
            return Err(Error::Unsupported(format!(
                "{}: a context of {n_ctx} needs the long rope factors, which are not supported yet; use -c {max} or less",
                self.arch
            )));
        }
        crate::kv_cache::check_head_widths(opts.cache_type_k, opts.cache_type_v, hp.head_k, hp.head_v)?;
        let width = match &self.spec.mla {
            // one compressed row per token; the values are a view of it
            Some(d) => (d.cache_width(), 0),
            None => (hp.n_head_kv * hp.head_k, hp.n_head_kv * hp.head_v),
        };
        let widths = vec![width; hp.n_layer];
        let kv = KvCache::new(&widths, n_ctx, opts.cache_type_k, opts.cache_type_v)?;
        let threads = opts.n_threads.max(1);
        Ok(Box::new(TransformerState {
            kv,
            n_past: 0,
            n_ubatch: opts.n_ubatch.max(1),
            pool: opts.pool.clone().unwrap_or_else(|| Arc::new(Pool::new(threads))),
            observer: None,
        }))
    }

    fn shift_cache(&self, state: &mut dyn State, keep: usize, chunks: &[(usize, usize)]) -> Result<()> {
        let st = state
            .as_any_mut()
            .downcast_mut::<TransformerState>()
            .ok_or_else(|| Error::Invalid("state was not made by this model".into()))?;
        let mut end = keep.min(st.n_past);
        for &(src, n) in chunks {
            if src < end || src.checked_add(n).is_none_or(|e| e > st.n_past) {
                return Err(Error::Invalid(format!(
                    "KV shift of positions {src}..{}: chunks must follow position {end} in order, within the {} cached",
                    src.saturating_add(n),
                    st.n_past
                )));
            }
            end = src + n;
        }
        let (nkv, hk) = (self.hp.n_head_kv, self.hp.head_k);
        let mut rc = Vec::new();
        for (il, layer) in self.layers.iter().enumerate() {
            let mut dst = keep.min(st.n_past);
            for &(src, n) in chunks {
                if dst != src {
                    layer.attn.rope().cache_at(dst as i64 - src as i64, &mut rc);
                    st.kv.k[il].map_rows(src, n, |row| match &layer.attn {
                        Mixer::Attn(at) => {
                            for h in row[..nkv * hk].chunks_exact_mut(hk) {
                                at.rope.apply(&rc, h);
                            }
                        }
                        Mixer::Mla(m) => m.shift_row(&rc, row),
                    })?;
                    st.kv.k[il].move_rows(src, dst, n)?;
                    st.kv.v[il].move_rows(src, dst, n)?;
                }
                dst += n;
            }
        }
        st.n_past = keep.min(st.n_past) + chunks.iter().map(|c| c.1).sum::<usize>();
        Ok(())
    }

    fn forward(&self, state: &mut dyn State, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        let mut seg = [Segment { state, tokens, logits }];
        Ok(self.forward_batch(&mut seg)?.pop().unwrap_or_default())
    }

    fn forward_batch(&self, segments: &mut [Segment<'_>]) -> Result<Vec<Vec<f32>>> {
        let mut states = segment_states(segments)?;
        let Some(pool) = states.first().map(|(st, _, _)| st.pool.clone()) else {
            return Ok(Vec::new());
        };
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); states.len()];
        // Round r takes each sequence's r-th ubatch, as `forward` alone would cut it.
        let mut round = 0;
        loop {
            let mut parts = Vec::new();
            let mut idx = Vec::new();
            for (i, (st, tokens, logits)) in states.iter_mut().enumerate() {
                let ub = st.n_ubatch;
                let n_chunks = tokens.len().div_ceil(ub);
                if round >= n_chunks {
                    continue;
                }
                let chunk = &tokens[round * ub..((round + 1) * ub).min(tokens.len())];
                let want = match *logits {
                    Logits::All => Logits::All,
                    Logits::Last if round == n_chunks - 1 => Logits::Last,
                    _ => Logits::None,
                };
                parts.push(Part { st, tokens: chunk, logits: want, row0: 0, p0: 0 });
                idx.push(i);
            }
            if parts.is_empty() {
                break;
            }
            for (i, l) in idx.into_iter().zip(self.run_batch(&pool, &mut parts, false)?) {
                out[i].extend(l);
            }
            round += 1;
        }
        Ok(out)
    }

    fn forward_ubatch(&self, segments: &mut [Segment<'_>]) -> Result<Vec<Vec<f32>>> {
        let mut states = segment_states(segments)?;
        let Some(pool) = states.first().map(|(st, _, _)| st.pool.clone()) else {
            return Ok(Vec::new());
        };
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); states.len()];
        let mut parts = Vec::new();
        let mut idx = Vec::new();
        for (i, (st, tokens, logits)) in states.iter_mut().enumerate() {
            if !tokens.is_empty() {
                parts.push(Part { st, tokens, logits: *logits, row0: 0, p0: 0 });
                idx.push(i);
            }
        }
        if !parts.is_empty() {
            for (i, l) in idx.into_iter().zip(self.run_batch(&pool, &mut parts, true)?) {
                out[i] = l;
            }
        }
        Ok(out)
    }
}

/// Each segment's state as this model's, checked to have room for its tokens.
fn segment_states<'s>(segments: &'s mut [Segment<'_>]) -> Result<Vec<(&'s mut TransformerState, &'s [u32], Logits)>> {
    let mut states = Vec::with_capacity(segments.len());
    for s in segments.iter_mut() {
        let st = s
            .state
            .as_any_mut()
            .downcast_mut::<TransformerState>()
            .ok_or_else(|| Error::Invalid("state was not made by this model".into()))?;
        if st.n_past + s.tokens.len() > st.kv.n_ctx {
            return Err(Error::ContextFull { n_tokens: s.tokens.len(), n_ctx: st.kv.n_ctx, pos: st.n_past });
        }
        states.push((st, s.tokens, s.logits));
    }
    Ok(states)
}
