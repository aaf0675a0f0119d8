//! An architecture no [`gguf_models::transformer::Spec`] can express, assembled from the
//! public building blocks of [`gguf_models::blocks`]: `demo-parallel-llama`, a llama whose
//! attention and FFN read the same residual stream and are added to it together
//! (GPT-J's and Cohere's parallel block):
//!
//! ```text
//! x = x + attn(attn_norm(x)) + ffn(ffn_norm(x))      (llama: x += attn(..); x += ffn(norm(x)))
//! ```
//!
//! The whole model is this file: a loader that reads llama's tensor names through the
//! blocks' loaders, a [`Model`] whose forward pass calls [`Embedding`], [`RmsNorm`],
//! [`Attention`] (projections, rope, the KV cache, llama.cpp's flash-attention arithmetic),
//! [`GatedFfn`] and [`Linear`] in the new order, and a [`State`] holding the
//! [`KvCache`]. Registering it is one [`gguf_models::Architecture`] entry; linking the crate
//! into a binary (`src/bin/gguf-blocks-arch.rs`) makes `gguf run`, `logits`, `bench`,
//! `serve` … load such files.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::Arc;

use gguf_format::SplitGguf;
use gguf_models::blocks::{
    Activation, Attention, AttentionScratch, Embedding, FfnScratch, GatedFfn, Heads, Linear, Pass, RmsNorm, RowLayout,
    SeqKv,
};
use gguf_models::hparams::Hparams;
use gguf_models::kv_cache::KvCache;
use gguf_models::loader::Loader;
use gguf_models::rope::RopeMode;
use gguf_models::{Error, Logits, Model, Pool, Result, State, StateOptions};

/// The `general.architecture` this crate adds.
pub const NAME: &str = "demo-parallel-llama";

gguf_models::gguf_registry::submit!(gguf_models::Architecture::new(NAME, |file| Ok(
    Box::new(ParallelLlama::load(file)?) as Box<dyn Model>
)));

struct Layer {
    attn_norm: RmsNorm,
    attn: Attention,
    ffn_norm: RmsNorm,
    ffn: GatedFfn,
}

/// The loaded model.
pub struct ParallelLlama {
    hp: Hparams,
    tok_embd: Embedding,
    output_norm: RmsNorm,
    output: Linear,
    layers: Vec<Layer>,
}

impl ParallelLlama {
    /// Reads llama's hyperparameters (under this architecture's key prefix) and tensors.
    pub fn load(file: Arc<SplitGguf>) -> Result<ParallelLlama> {
        let ld = Loader::with_shared(&file, NAME);
        let hp = Hparams::read(&ld)?;
        let (e, eps) = (hp.n_embd, hp.rms_eps);
        let tok_embd = Embedding::load(&ld, "token_embd.weight", e)?;
        // An untied output is repacked for its kernel; a tied one is read as stored (it is
        // also the embedding table), as llama.cpp does.
        let output = match Linear::load_opt(&ld, "output", e, tok_embd.n_vocab())? {
            Some(mut l) => {
                l.repack()?;
                l
            }
            None => Linear::new(ld.shared()?, tok_embd.tensor().clone(), None)?,
        };
        let heads = Heads { n_head: hp.n_head, n_head_kv: hp.n_head_kv, head_k: hp.head_k, head_v: hp.head_v };
        let mut layers = Vec::new();
        for il in 0..hp.n_layer {
            let rope = hp.rope(RopeMode::Normal, hp.rope_base, hp.rope_freq_scale, None);
            let mut attn = Attention::load(&ld, il, e, heads, false, eps, rope)?;
            let mut ffn = GatedFfn::load(&ld, il, e, hp.n_ff[il], Activation::Silu)?;
            attn.repack()?;
            ffn.repack()?;
            layers.push(Layer {
                attn_norm: RmsNorm::load(&ld, &format!("blk.{il}.attn_norm.weight"), e, eps)?,
                attn,
                ffn_norm: RmsNorm::load(&ld, &format!("blk.{il}.ffn_norm.weight"), e, eps)?,
                ffn,
            });
        }
        let output_norm = RmsNorm::load(&ld, "output_norm.weight", e, eps)?;
        Ok(ParallelLlama { hp, tok_embd, output_norm, output, layers })
    }
}

/// One sequence's state: the KV cache and the worker pool.
pub struct ParallelState {
    kv: KvCache,
    n_past: usize,
    pool: Arc<Pool>,
}

impl State for ParallelState {
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

impl Model for ParallelLlama {
    fn arch(&self) -> &str {
        NAME
    }
    fn n_vocab(&self) -> usize {
        self.tok_embd.n_vocab()
    }
    fn n_ctx_train(&self) -> usize {
        self.hp.n_ctx_train
    }
    fn describe(&self) -> String {
        format!("{NAME}: {} parallel blocks, n_embd {}", self.hp.n_layer, self.hp.n_embd)
    }

    fn new_state(&self, opts: &StateOptions) -> Result<Box<dyn State>> {
        let hp = &self.hp;
        let n_ctx = if opts.n_ctx == 0 { hp.n_ctx_train } else { opts.n_ctx };
        gguf_models::kv_cache::check_head_widths(opts.cache_type_k, opts.cache_type_v, hp.head_k, hp.head_v)?;
        let widths = vec![(hp.n_head_kv * hp.head_k, hp.n_head_kv * hp.head_v); hp.n_layer];
        let kv = KvCache::new(&widths, n_ctx, opts.cache_type_k, opts.cache_type_v)?;
        let pool = opts.pool.clone().unwrap_or_else(|| Arc::new(Pool::new(opts.n_threads.max(1))));
        Ok(Box::new(ParallelState { kv, n_past: 0, pool }))
    }

    fn forward(&self, state: &mut dyn State, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        let st = state
            .as_any_mut()
            .downcast_mut::<ParallelState>()
            .ok_or_else(|| Error::Invalid("state was not made by this model".into()))?;
        if st.n_past + tokens.len() > st.kv.n_ctx {
            return Err(Error::ContextFull { n_tokens: tokens.len(), n_ctx: st.kv.n_ctx, pos: st.n_past });
        }
        let (n, e) = (tokens.len(), self.hp.n_embd);
        if n == 0 {
            return Ok(Vec::new());
        }
        let rows = RowLayout::one(n);
        let pool = st.pool.clone();
        let pass = Pass { pool: &pool, observer: None, rows: &rows };
        let mut x = vec![0.0; n * e];
        self.tok_embd.forward(tokens, 0, &mut x)?;
        let (mut h, mut a, mut f) = (Vec::new(), Vec::new(), Vec::new());
        let (mut asc, mut fsc) = (AttentionScratch::default(), FfnScratch::default());
        for (il, l) in self.layers.iter().enumerate() {
            l.attn_norm.forward(&x, &mut h);
            let mut seq = [SeqKv { row0: 0, n, pos0: st.n_past, k: &mut st.kv.k[il], v: &mut st.kv.v[il] }];
            l.attn.forward(&pass, il, &h, &mut seq, &mut asc, &mut a)?;
            l.ffn_norm.forward(&x, &mut h); // the same x: the parallel block
            l.ffn.forward(&pass, il, &h, &mut fsc, &mut f)?;
            for ((x, a), f) in x.iter_mut().zip(&a).zip(&f) {
                *x = *x + a + f;
            }
        }
        st.n_past += n;
        let sel = match logits {
            Logits::None => return Ok(Vec::new()),
            Logits::Last => x[(n - 1) * e..].to_vec(),
            Logits::All => x,
        };
        let out_rows = RowLayout::one(sel.len() / e);
        self.output_norm.forward(&sel, &mut h);
        let mut out = Vec::new();
        self.output.forward(&pass.with_rows(&out_rows), &h, &mut out)?;
        Ok(out)
    }
}
