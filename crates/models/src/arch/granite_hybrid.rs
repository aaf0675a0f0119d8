//! `granitehybrid`: IBM Granite 4.0's hybrid models (`src/models/granite-hybrid.cpp`) —
//! Mamba-2 layers ([`Mamba2`]) and attention layers (a layer whose
//! `attention.head_count_kv` entry is 0 is a Mamba-2 layer), each block
//! `x += s·mixer(attn_norm(x))`, `x += s·ffn(ffn_norm(x))` with Granite's multipliers:
//! embeddings × `embedding_scale`, each block output × `residual_scale` (`s`), attention
//! scores × `attention.scale` (else 1/√head), logits × 1/`logit_scale` — each only where
//! the file sets it (non-zero). Attention: GQA with optional biases (separate or fused
//! `attn_qkv`), normal-mode rope unless `rope.scaling.finetuned` is false (Granite 4.0-H:
//! no rope), optional `rope_freqs`. FFN: SwiGLU (optional biases), or with `expert_count`
//! routed experts (softmax, top-k renormalized, `feed_forward_length` wide) plus, when
//! `expert_shared_feed_forward_length` is set, a shared SwiGLU expert added to them.
//! llama.cpp supports only an expansion of 2 (`ssm.inner_size = 2·n_embd`), so does this.
//!
//! State: the KV cache holds the attention layers only; each Mamba-2 layer keeps a
//! [`RecurrentState`] per sequence (conv state and per-head SSM state, f32 as llama.cpp's
//! defaults). A recurrent state cannot go back to an earlier position: a
//! [`State::truncate`] to fewer tokens than it holds (other than to 0) forgets the whole
//! sequence, and [`State::n_past`] says so (0).

use std::sync::Arc;

use gguf_format::SplitGguf;
use quant_kernels::ops;

use crate::blocks::{
    add_on, dump, Activation, Attention, AttentionScratch, Embedding, Ffn, FfnScratch, GatedFfn, Gating, Heads, Linear,
    Mamba2, Mamba2Dims, Mamba2Scratch, Moe, Pass, RmsNorm, RowLayout, SeqKv, SeqRs,
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
        name: "granitehybrid",
        load: |file| Ok(Box::new(GraniteHybrid::load(file)?)),
        ..Architecture::BASE
    }
}

const ARCH: &str = "granitehybrid";

/// What mixes the tokens in one layer.
enum Mixer {
    /// Attention over the layer's KV cache (index into the state's caches).
    Attn(Box<Attention>, usize),
    /// Mamba-2 with a recurrent state (index into the state's states).
    Ssm(Box<Mamba2>, usize),
}

struct Layer {
    attn_norm: RmsNorm,
    mixer: Mixer,
    ffn_norm: RmsNorm,
    ffn: Ffn,
    /// Granite MoE Shared's expert, added to the routed experts' output.
    shared: Option<GatedFfn>,
}

/// A loaded Granite 4.0 hybrid model.
pub struct GraniteHybrid {
    hp: Hparams,
    dims: Mamba2Dims,
    tok_embd: Embedding,
    output: Linear,
    output_norm: RmsNorm,
    layers: Vec<Layer>,
    residual_scale: Option<f32>,
    /// 1 / `logit_scale`.
    logit_scale: Option<f32>,
    rope: bool,
    n_ff_shexp: usize,
    n_attn: usize,
    n_ssm: usize,
}

/// The common hyperparameters with a per-layer `attention.head_count_kv` (0: a Mamba-2
/// layer), read with the attention layers' KV head count; returns them and which layers
/// are recurrent (as `llama_model_granite_hybrid::load_arch_hparams`).
fn hparams(ld: &Loader<'_>) -> Result<(Hparams, Vec<bool>)> {
    let n_layer = ld.u32("block_count")? as usize;
    let kv = ld
        .opt_u32_per_layer("attention.head_count_kv", n_layer)?
        .ok_or_else(|| Error::MissingKey(ld.key("attention.head_count_kv")))?;
    let recr: Vec<bool> = kv.iter().map(|&h| h == 0).collect();
    let attn_kv: Vec<u32> = kv.iter().copied().filter(|&h| h != 0).collect();
    if attn_kv.windows(2).any(|w| w[0] != w[1]) {
        return Err(Error::Unsupported(format!(
            "{ARCH}: attention layers with different KV head counts ({attn_kv:?}) in `{}` are not supported yet",
            ld.key("attention.head_count_kv")
        )));
    }
    // every layer recurrent: no KV heads are read (1 keeps the checks satisfied)
    let hp = Hparams::read_with(ld, Some(attn_kv.first().copied().unwrap_or(1)))?;
    Ok((hp, recr))
}

/// A multiplier key: `None` when absent or 0 (llama.cpp's `if (hparams.f_…)`), an error
/// naming it when not finite.
fn multiplier(ld: &Loader<'_>, key: &str) -> Result<Option<f32>> {
    match ld.opt_f32(key)? {
        Some(v) if !v.is_finite() => Err(Error::BadKey { key: ld.key(key), msg: format!("{v}") }),
        v => Ok(v.filter(|&v| v != 0.0)),
    }
}

impl GraniteHybrid {
    /// Loads a `granitehybrid` file with the tensors `llama_model_granite_hybrid::
    /// load_arch_tensors` requires.
    pub fn load(file: Arc<SplitGguf>) -> Result<GraniteHybrid> {
        let ld = Loader::with_shared(&file, ARCH);
        let (hp, recr) = hparams(&ld)?;
        let (e, eps) = (hp.n_embd, hp.rms_eps);
        if hp.head_k != hp.head_v {
            return Err(Error::Invalid(format!("{ARCH}: head widths k={} v={} differ", hp.head_k, hp.head_v)));
        }
        let dims = Mamba2Dims::read(&ld, e)?;
        if dims.d_inner != 2 * e {
            return Err(Error::BadKey {
                key: ld.key("ssm.inner_size"),
                msg: format!("{} ≠ 2 × embedding_length {e}: only an expansion factor of 2 is supported", dims.d_inner),
            });
        }
        let residual_scale = multiplier(&ld, "residual_scale")?;
        let logit_scale = multiplier(&ld, "logit_scale")?.map(|s| 1.0 / s);
        let key = ld.key("rope.scaling.finetuned");
        let rope = match file.metadata().get(&key) {
            None => true,
            Some(v) => v.as_bool().ok_or_else(|| Error::BadKey { key, msg: "not a bool".into() })?,
        };
        let attn_scale = multiplier(&ld, "attention.scale")?;
        let n_ff_shexp = ld.opt_u32("expert_shared_feed_forward_length")?.unwrap_or(0) as usize;
        let mut tok_embd = Embedding::load(&ld, "token_embd.weight", e)?;
        tok_embd.scale = multiplier(&ld, "embedding_scale")?;
        let output = Linear::output(&ld, &tok_embd)?;
        let output_norm = RmsNorm::load(&ld, "output_norm.weight", e, eps)?;
        let freqs = ld.opt_vector("rope_freqs.weight", (hp.n_rot / 2) as u64)?;
        let heads = Heads { n_head: hp.n_head, n_head_kv: hp.n_head_kv, head_k: hp.head_k, head_v: hp.head_v };
        let (mut n_attn, mut n_ssm) = (0, 0);
        let mut layers = Vec::with_capacity(hp.n_layer);
        for (il, &is_recr) in recr.iter().enumerate() {
            let n = |s: &str| format!("blk.{il}.{s}");
            let attn_norm = RmsNorm::load(&ld, &n("attn_norm.weight"), e, eps)?;
            let mixer = if is_recr {
                let mut m = Mamba2::load(&ld, il, dims, eps)?;
                m.repack()?;
                n_ssm += 1;
                Mixer::Ssm(Box::new(m), n_ssm - 1)
            } else {
                let mut r = hp.rope(RopeMode::Normal, hp.rope_base, hp.rope_freq_scale, freqs.clone());
                if !rope {
                    r.n_rot = 0; // no rotated dimensions: llama.cpp skips ggml_rope_ext
                }
                let mut attn = if ld.has(&n("attn_qkv.weight")) {
                    Attention::load_fused(&ld, il, e, heads, false, eps, r)?
                } else {
                    Attention::load(&ld, il, e, heads, false, eps, r)?
                };
                if let Some(s) = attn_scale {
                    attn.scale = s;
                }
                attn.repack()?;
                n_attn += 1;
                Mixer::Attn(Box::new(attn), n_attn - 1)
            };
            let ffn_norm = RmsNorm::load(&ld, &n("ffn_norm.weight"), e, eps)?;
            if hp.n_ff[il] == 0 {
                return Err(Error::MissingKey(ld.key("feed_forward_length")));
            }
            let (ffn, shared) = if hp.n_expert > 0 {
                let mut m = Moe::load(&ld, il, e, hp.n_ff[il], hp.n_expert, hp.n_expert_used)?;
                m.norm_weights = true;
                m.weights_scale = hp.expert_weights_scale;
                m.act = Activation::Silu;
                m.gating = Gating::Softmax;
                let shared = if n_ff_shexp > 0 {
                    let mut f = GatedFfn {
                        gate: Linear::load(&ld, &n("ffn_gate_shexp"), e, n_ff_shexp)?,
                        up: Linear::load(&ld, &n("ffn_up_shexp"), e, n_ff_shexp)?,
                        down: Linear::load(&ld, &n("ffn_down_shexp"), n_ff_shexp, e)?,
                        act: Activation::Silu,
                        fused: None,
                    };
                    f.repack()?;
                    Some(f)
                } else {
                    None
                };
                (Ffn::Moe(m), shared)
            } else {
                let mut f = Ffn::Dense(GatedFfn::load(&ld, il, e, hp.n_ff[il], Activation::Silu)?);
                f.repack()?;
                (f, None)
            };
            layers.push(Layer { attn_norm, mixer, ffn_norm, ffn, shared });
        }
        Ok(GraniteHybrid {
            hp,
            dims,
            tok_embd,
            output,
            output_norm,
            layers,
            residual_scale,
            logit_scale,
            rope,
            n_ff_shexp,
            n_attn,
            n_ssm,
        })
    }
}

#[derive(Default)]
struct Buffers {
    h: Vec<f32>,
    a: Vec<f32>,
    tmp: Vec<f32>,
    attn: AttentionScratch,
    ssm: Mamba2Scratch,
    ffn: FfnScratch,
}

impl GraniteHybrid {
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
        dump("inp_scaled", &x);
        let mut b = Buffers::default();
        let p0 = st.n_past;
        for (il, layer) in self.layers.iter().enumerate() {
            let Buffers { h, a, tmp, attn, ssm, ffn } = &mut b;
            layer.attn_norm.forward_on(&pool, &x, h);
            dump(&format!("attn_norm-{il}"), h);
            match &layer.mixer {
                Mixer::Attn(at, i) => {
                    let (k, v) = (&mut st.kv.k[*i], &mut st.kv.v[*i]);
                    let mut seqs = [SeqKv { row0: 0, n, pos0: p0, k, v }];
                    at.forward(&pass, il, h, &mut seqs, attn, a)?;
                }
                Mixer::Ssm(m, i) => {
                    let mut seqs = [SeqRs { row0: 0, n, state: &mut st.rs[*i] }];
                    m.forward(&pass, il, h, &mut seqs, ssm, a)?;
                }
            }
            if let Some(s) = self.residual_scale {
                ops::scale_inplace(a, s);
            }
            add_on(&pool, &mut x, a);
            dump(&format!("ffn_inp-{il}"), &x);
            layer.ffn_norm.forward_on(&pool, &x, h);
            dump(&format!("ffn_norm-{il}"), h);
            layer.ffn.forward(&pass, il, h, &[(0, n)], ffn, a)?;
            if let Some(sh) = &layer.shared {
                dump(&format!("ffn_moe_out-{il}"), a);
                sh.forward(&pass, il, h, ffn, tmp)?;
                dump(&format!("ffn_shexp-{il}"), tmp);
                add_on(&pool, a, tmp);
            }
            if let Some(s) = self.residual_scale {
                ops::scale_inplace(a, s);
            }
            add_on(&pool, &mut x, a);
            dump(&format!("l_out-{il}"), &x);
        }
        st.n_past += n;
        let mut out = crate::blocks::output_head(&pass, &self.output_norm, &self.output, &x, n, logits, &mut b.tmp)?;
        if let Some(s) = self.logit_scale {
            ops::scale_inplace(&mut out, s);
        }
        dump("result_output", &out);
        Ok(out)
    }
}

impl Model for GraniteHybrid {
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
        let (hp, d) = (&self.hp, &self.dims);
        let ffn = if hp.n_expert > 0 {
            let shared = if self.n_ff_shexp > 0 {
                format!(" and a shared expert of {}", self.n_ff_shexp)
            } else {
                String::new()
            };
            format!("{} experts ({} used) of {}{shared}", hp.n_expert, hp.n_expert_used, hp.n_ff[0])
        } else {
            format!("FFN {}", hp.n_ff[0])
        };
        let rope = if self.rope { format!("rope base {}", hp.rope_base) } else { "no rope".into() };
        let mult = |v: Option<f32>| v.map_or("-".to_string(), |v| format!("{v}"));
        format!(
            "{ARCH}: {} layers ({} Mamba-2, {} attention), n_embd {}, attention {} heads / {} KV heads of {} ({rope}), \
             Mamba-2 {} heads of {}, d_state {}, {} group(s), conv {}, {ffn}; multipliers: embedding {}, residual {}, \
             attention {}, logits 1/{}; n_vocab {}",
            hp.n_layer,
            self.n_ssm,
            self.n_attn,
            hp.n_embd,
            hp.n_head,
            hp.n_head_kv,
            hp.head_k,
            d.n_head,
            d.head_dim(),
            d.d_state,
            d.n_group,
            d.d_conv,
            mult(self.tok_embd.scale),
            mult(self.residual_scale),
            mult(self.layers.iter().find_map(|l| match &l.mixer {
                Mixer::Attn(a, _) => Some(a.scale),
                Mixer::Ssm(..) => None,
            })),
            mult(self.logit_scale.map(|s| 1.0 / s)),
            self.tok_embd.n_vocab()
        )
    }

    fn new_state(&self, opts: &StateOptions) -> Result<Box<dyn State>> {
        let hp = &self.hp;
        let n_ctx = if opts.n_ctx == 0 { hp.n_ctx_train } else { opts.n_ctx };
        crate::kv_cache::check_head_widths(opts.cache_type_k, opts.cache_type_v, hp.head_k, hp.head_v)?;
        let widths = vec![(hp.n_head_kv * hp.head_k, hp.n_head_kv * hp.head_v); self.n_attn];
        let kv = KvCache::new(&widths, n_ctx, opts.cache_type_k, opts.cache_type_v)?;
        let rs = (0..self.n_ssm).map(|_| self.dims.new_state()).collect();
        Ok(Box::new(HybridState::new(kv, rs, opts)))
    }

    fn forward(&self, state: &mut dyn State, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        let st = HybridState::of(state, tokens.len())?;
        let ub = st.n_ubatch;
        logits.by_ubatch(tokens, ub, |chunk, want| self.run_ubatch(st, chunk, want))
    }
}
