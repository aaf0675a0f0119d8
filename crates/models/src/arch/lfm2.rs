//! `lfm2` / `lfm2moe`: Liquid AI's LFM2 (`src/models/lfm2.cpp`, `lfm2moe.cpp`) — a hybrid of short-convolution
//! layers and GQA attention layers (a layer whose `attention.head_count_kv` entry is 0 is a
//! convolution). Each block is `x += mixer(attn_norm(x))`, `x += ffn(ffn_norm(x))` with a
//! SwiGLU FFN. The convolution block: `in_proj` → `b, c, x` (three `n_embd` chunks),
//! `bx = b·x`, a causal depthwise convolution of `shortconv.l_cache` taps over time
//! ([`causal_conv`], `ggml_ssm_conv`) after the sequence's conv state (the last
//! `l_cache − 1` inputs per channel), `y = c·conv`, `out_proj`. Attention layers take
//! per-head QK-norm and NeoX rope, windowed when the file sets `attention.sliding_window`.
//! The output norm is stored as `token_embd_norm`. `lfm2moe` (LFM2-8B-A1B): the layers
//! from `leading_dense_block_count` on have routed experts instead of the dense FFN — the
//! file's `expert_gating_func` (sigmoid), `exp_probs_b.bias` for choosing, weights
//! renormalized and scaled by `expert_weights_scale`.
//!
//! State: the KV cache holds the attention layers only; each convolution layer keeps its
//! conv state per sequence (f32, as llama.cpp's `type_r`). It cannot go back to an earlier
//! position: a [`State::truncate`] to fewer tokens than held (other than 0) forgets the
//! sequence and [`State::n_past`] says 0.

use std::sync::Arc;

use gguf_format::SplitGguf;
use quant_kernels::{ops, Pool};

use crate::blocks::{
    causal_conv, dump, Activation, Attention, AttentionScratch, Embedding, Ffn, FfnScratch, GatedFfn, Gating, Heads,
    Linear, Moe, Pass, RmsNorm, RowLayout, SeqKv,
};
use crate::hparams::Hparams;
use crate::kv_cache::KvCache;
use crate::loader::Loader;
use crate::model::{Logits, Model, State, StateOptions};
use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::{Error, Result};

gguf_registry::submit! {
    Architecture {
        name: "lfm2",
        load: |file| Ok(Box::new(Lfm2::load(file, "lfm2")?)),
        ..Architecture::BASE
    }
}

gguf_registry::submit! {
    Architecture {
        name: "lfm2moe",
        load: |file| Ok(Box::new(Lfm2::load(file, "lfm2moe")?)),
        ..Architecture::BASE
    }
}

/// One short-convolution mixer (`shortconv.{in_proj, conv, out_proj}`).
struct ShortConv {
    in_proj: Linear,
    /// `l_cache` taps per channel.
    kernel: Vec<f32>,
    out_proj: Linear,
}

enum Mixer {
    /// Attention over the layer's KV cache (index into the state's caches).
    Attn(Box<Attention>, usize),
    /// Short convolution with a conv state (index into the state's conv states).
    Conv(Box<ShortConv>, usize),
}

struct Layer {
    attn_norm: RmsNorm,
    mixer: Mixer,
    ffn_norm: RmsNorm,
    ffn: Ffn,
}

/// A loaded LFM2 model.
pub struct Lfm2 {
    arch: &'static str,
    hp: Hparams,
    /// Convolution taps (`shortconv.l_cache`).
    l_cache: usize,
    tok_embd: Embedding,
    output: Linear,
    output_norm: RmsNorm,
    layers: Vec<Layer>,
    n_attn: usize,
    n_conv: usize,
}

/// The common hyperparameters with a per-layer `attention.head_count_kv` (0: a
/// convolution layer), which [`Hparams::read`] refuses: read with the attention layers'
/// KV head count ([`Hparams::read_with`]); returns them and which layers are convolutions.
fn hparams(ld: &Loader<'_>, arch: &str) -> Result<(Hparams, Vec<bool>)> {
    let n_layer = ld.u32("block_count")? as usize;
    let kv = ld
        .opt_u32_per_layer("attention.head_count_kv", n_layer)?
        .ok_or_else(|| Error::MissingKey(ld.key("attention.head_count_kv")))?;
    let conv: Vec<bool> = kv.iter().map(|&h| h == 0).collect();
    let attn_kv: Vec<u32> = kv.iter().copied().filter(|&h| h != 0).collect();
    if attn_kv.windows(2).any(|w| w[0] != w[1]) {
        return Err(Error::Unsupported(format!(
            "{arch}: attention layers with different KV head counts ({attn_kv:?}) are not supported yet"
        )));
    }
    // every layer a convolution: no KV heads are read (1 keeps the checks satisfied)
    let hp = Hparams::read_with(ld, Some(attn_kv.first().copied().unwrap_or(1)))?;
    Ok((hp, conv))
}

impl Lfm2 {
    /// Loads an `lfm2` or `lfm2moe` file (`arch`), with the tensors
    /// `llama_model_lfm2::load_arch_tensors` / `llama_model_lfm2moe::…` require.
    pub fn load(file: Arc<SplitGguf>, arch: &'static str) -> Result<Lfm2> {
        let ld = Loader::with_shared(&file, arch);
        let (hp, is_conv) = hparams(&ld, arch)?;
        let (e, eps) = (hp.n_embd, hp.rms_eps);
        let moe = arch == "lfm2moe";
        if !moe && hp.n_expert > 0 {
            return Err(Error::Unsupported(format!(
                "{arch} has no experts (LFM2 MoE files are `lfm2moe`): unexpected `{}`",
                ld.key("expert_count")
            )));
        }
        let dense_lead = if moe {
            if hp.n_expert == 0 {
                return Err(Error::MissingKey(ld.key("expert_count")));
            }
            ld.opt_u32("leading_dense_block_count")?.unwrap_or(0) as usize
        } else {
            hp.n_layer
        };
        let gating = if moe { Gating::read(&ld, None)? } else { Gating::Softmax };
        if hp.head_k != hp.head_v {
            return Err(Error::Invalid(format!("{arch}: head widths k={} v={} differ", hp.head_k, hp.head_v)));
        }
        let l_cache = ld.u32("shortconv.l_cache")? as usize;
        if l_cache < 2 {
            return Err(Error::BadKey { key: ld.key("shortconv.l_cache"), msg: format!("{l_cache} (at least 2)") });
        }
        let window = ld.opt_u32("attention.sliding_window")?.filter(|&w| w > 0).map(|w| w as usize);
        let tok_embd = Embedding::load(&ld, "token_embd.weight", e)?;
        let output = Linear::output(&ld, &tok_embd)?;
        let output_norm = RmsNorm::load(&ld, "token_embd_norm.weight", e, eps)?;
        let heads = Heads { n_head: hp.n_head, n_head_kv: hp.n_head_kv, head_k: hp.head_k, head_v: hp.head_v };
        let (mut n_attn, mut n_conv) = (0, 0);
        let mut layers = Vec::with_capacity(hp.n_layer);
        for (il, &conv) in is_conv.iter().enumerate() {
            let n = |s: &str| format!("blk.{il}.{s}");
            if il < dense_lead && hp.n_ff[il] == 0 {
                return Err(Error::MissingKey(ld.key("feed_forward_length")));
            }
            let attn_norm = RmsNorm::load(&ld, &n("attn_norm.weight"), e, eps)?;
            let mixer = if conv {
                let k = ld.tensor(&n("shortconv.conv.weight"), &[l_cache as u64, e as u64])?;
                let kernel = ggml_quants::lookup_id(k.type_id)?.dequantize_to_vec(k.data(ld.file()))?;
                if let Some(i) = kernel.iter().position(|x| !x.is_finite()) {
                    return Err(Error::Invalid(format!("tensor `{}`: element {i} is not finite", k.name)));
                }
                let mut sc = ShortConv {
                    in_proj: Linear::load(&ld, &n("shortconv.in_proj"), e, 3 * e)?,
                    kernel,
                    out_proj: Linear::load(&ld, &n("shortconv.out_proj"), e, e)?,
                };
                sc.in_proj.repack()?;
                sc.out_proj.repack()?;
                n_conv += 1;
                Mixer::Conv(Box::new(sc), n_conv - 1)
            } else {
                let rope = hp.rope(RopeMode::Neox, hp.rope_base, hp.rope_freq_scale, None);
                let mut attn = Attention::load(&ld, il, e, heads, true, eps, rope)?;
                attn.window = window;
                attn.repack()?;
                n_attn += 1;
                Mixer::Attn(Box::new(attn), n_attn - 1)
            };
            let ffn_norm = RmsNorm::load(&ld, &n("ffn_norm.weight"), e, eps)?;
            let mut ffn = if il < dense_lead {
                Ffn::Dense(GatedFfn::load(&ld, il, e, hp.n_ff[il], Activation::Silu)?)
            } else {
                if hp.n_ff_exp == 0 {
                    return Err(Error::MissingKey(ld.key("expert_feed_forward_length")));
                }
                if !ld.has(&n("exp_probs_b.bias")) {
                    return Err(Error::MissingTensor(n("exp_probs_b.bias")));
                }
                let mut m = Moe::load(&ld, il, e, hp.n_ff_exp, hp.n_expert, hp.n_expert_used)?;
                m.norm_weights = true;
                m.weights_scale = hp.expert_weights_scale;
                m.gating = gating;
                Ffn::Moe(m)
            };
            ffn.repack()?;
            layers.push(Layer { attn_norm, mixer, ffn_norm, ffn });
        }
        Ok(Lfm2 { arch, hp, l_cache, tok_embd, output, output_norm, layers, n_attn, n_conv })
    }
}

/// Inference state of an [`Lfm2`] model: the attention layers' KV cache and each
/// convolution layer's last `l_cache − 1` inputs per channel (oldest first).
pub struct Lfm2State {
    kv: KvCache,
    conv: Vec<Vec<f32>>,
    n_past: usize,
    n_ubatch: usize,
    pool: Arc<Pool>,
    observer: Option<Arc<dyn crate::model::Observer>>,
}

impl State for Lfm2State {
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
    /// A conv state cannot be rolled back: to fewer tokens than held, it forgets all.
    fn truncate(&mut self, n: usize) {
        if n < self.n_past {
            self.n_past = 0;
            for c in &mut self.conv {
                c.fill(0.0);
            }
        }
    }
    fn cache_bytes(&self) -> usize {
        self.kv.bytes() + self.conv.iter().map(|c| 4 * c.len()).sum::<usize>()
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

#[derive(Default)]
struct Buffers {
    h: Vec<f32>,
    a: Vec<f32>,
    tmp: Vec<f32>,
    bcx: Vec<f32>,
    conv: Vec<f32>,
    attn: AttentionScratch,
    ffn: FfnScratch,
}

impl ShortConv {
    /// The block for the `n` rows of `h` of one sequence, its conv state `past`.
    fn forward(&self, pass: &Pass<'_>, il: usize, h: &[f32], past: &mut [f32], b: &mut Buffers) -> Result<()> {
        let e = self.out_proj.cols();
        let n = h.len() / e;
        self.in_proj.forward(pass, h, &mut b.bcx)?;
        dump(&format!("model.layers.{il}.conv.in_proj"), &b.bcx);
        // bx = b·x per row (ggml_mul), then the convolution over time
        b.tmp.resize(n * e, 0.0);
        for (row, out) in b.bcx.chunks_exact(3 * e).zip(b.tmp.chunks_exact_mut(e)) {
            for ((o, &bv), &xv) in out.iter_mut().zip(&row[..e]).zip(&row[2 * e..]) {
                *o = bv * xv;
            }
        }
        b.conv.resize(n * e, 0.0);
        causal_conv(pass.pool, &self.kernel, e, &b.tmp, e, n, past, &mut b.conv);
        dump(&format!("model.layers.{il}.conv.conv"), &b.conv);
        // y = c·conv
        for (row, y) in b.bcx.chunks_exact(3 * e).zip(b.conv.chunks_exact_mut(e)) {
            for (yv, &cv) in y.iter_mut().zip(&row[e..2 * e]) {
                *yv *= cv;
            }
        }
        self.out_proj.forward(pass, &b.conv, &mut b.a)
    }
}

impl Lfm2 {
    /// One ubatch of one sequence through every layer; the logits asked for.
    fn run_ubatch(&self, st: &mut Lfm2State, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
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
            let mut h = std::mem::take(&mut b.h);
            layer.attn_norm.forward(&x, &mut h);
            dump(&format!("attn_norm-{il}"), &h);
            match &layer.mixer {
                Mixer::Attn(at, i) => {
                    let (k, v) = (&mut st.kv.k[*i], &mut st.kv.v[*i]);
                    let mut seqs = [SeqKv { row0: 0, n, pos0: p0, k, v }];
                    at.forward(&pass, il, &h, &mut seqs, &mut b.attn, &mut b.a)?;
                }
                Mixer::Conv(sc, i) => sc.forward(&pass, il, &h, &mut st.conv[*i], &mut b)?,
            }
            ops::add_inplace(&mut x, &b.a);
            layer.ffn_norm.forward(&x, &mut h);
            dump(&format!("ffn_norm-{il}"), &h);
            layer.ffn.forward(&pass, il, &h, &[(0, n)], &mut b.ffn, &mut b.a)?;
            dump(&format!("ffn_out-{il}"), &b.a);
            ops::add_inplace(&mut x, &b.a);
            dump(&format!("l_out-{il}"), &x);
            b.h = h;
        }
        st.n_past += n;
        let out = crate::blocks::output_head(&pass, &self.output_norm, &self.output, &x, n, logits, &mut b.tmp)?;
        dump("result_output", &out);
        Ok(out)
    }
}

impl Model for Lfm2 {
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
        let hp = &self.hp;
        let experts = if hp.n_expert > 0 {
            format!(", {} experts ({} used)", hp.n_expert, hp.n_expert_used)
        } else {
            String::new()
        };
        format!(
            "{}: {} layers ({} short convolution of {} taps, {} attention), n_embd {}, attention {} heads / {} KV \
             heads of {}, FFN {}, n_vocab {}{experts}",
            self.arch,
            hp.n_layer,
            self.n_conv,
            self.l_cache,
            self.n_attn,
            hp.n_embd,
            hp.n_head,
            hp.n_head_kv,
            hp.head_k,
            hp.n_ff.first().copied().unwrap_or(0),
            self.tok_embd.n_vocab()
        )
    }

    fn new_state(&self, opts: &StateOptions) -> Result<Box<dyn State>> {
        let hp = &self.hp;
        let n_ctx = if opts.n_ctx == 0 { hp.n_ctx_train } else { opts.n_ctx };
        crate::kv_cache::check_head_widths(opts.cache_type_k, opts.cache_type_v, hp.head_k, hp.head_v)?;
        let widths = vec![(hp.n_head_kv * hp.head_k, hp.n_head_kv * hp.head_v); self.n_attn];
        let kv = KvCache::new(&widths, n_ctx, opts.cache_type_k, opts.cache_type_v)?;
        let threads = opts.n_threads.max(1);
        Ok(Box::new(Lfm2State {
            kv,
            conv: vec![vec![0.0; (self.l_cache - 1) * hp.n_embd]; self.n_conv],
            n_past: 0,
            n_ubatch: opts.n_ubatch.max(1),
            pool: opts.pool.clone().unwrap_or_else(|| Arc::new(Pool::new(threads))),
            observer: None,
        }))
    }

    fn forward(&self, state: &mut dyn State, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        let st = state
            .as_any_mut()
            .downcast_mut::<Lfm2State>()
            .ok_or_else(|| Error::Invalid("state was not made by this model".into()))?;
        if st.n_past + tokens.len() > st.kv.n_ctx {
            return Err(Error::ContextFull { n_tokens: tokens.len(), n_ctx: st.kv.n_ctx, pos: st.n_past });
        }
        let ub = st.n_ubatch;
        logits.by_ubatch(tokens, ub, |chunk, want| self.run_ubatch(st, chunk, want))
    }
}
