//! `bert` / `nomic-bert`: BERT-style embedding encoders (`src/models/bert.cpp`,
//! `nomic-bert.cpp`, llama.cpp's `llama_model_bert::graph`), run as llama.cpp's
//! `llama_encode` runs them: no KV cache, every sequence attends to all of its own tokens
//! (non-causal, [`attend_full`]), token types fixed to 0 ("sentence A").
//!
//! Input: the token embedding plus the first row of `token_types` (when present), plus
//! the absolute `position_embd` row (bert) — then LayerNorm `token_embd_norm`. Each layer
//! is post-norm: `x = LN_attn(x + wo·attn(x) + bo)`, `x = LN_out(x + ffn(x))`, with Q/K/V
//! from one `attn_qkv` or three matrices (biases optional), NeoX rope on Q and K for
//! nomic-bert, the attention scale `1/√head`; the FFN is `down(gelu(up·x + b_up)) + b_down`
//! (bert) or SwiGLU `down(silu(gate·x) · up·x)` without biases (nomic-bert, whose graph
//! ignores FFN biases). The output is the last layer's `x`, pooled per
//! [`Pooling`](crate::Pooling) as `llm_graph_context::build_pooling` does: mean (one f32
//! product of the transposed rows with `1/n` weights — `ggml_vec_dot_f32` for one
//! sequence), first (cls) or last token, or the reranker head (rank: `cls` + bias, tanh,
//! `cls.output` + bias).
//!
//! The arithmetic follows the graph operation by operation (same kernels, same order), so
//! a sequence encoded alone matches libllama encoding it alone bit for bit; libllama's own
//! results for a sequence batched with others depend on its place in the batch (the
//! attention tiles and the mean product run over the whole batch), ours do not.

use std::sync::Arc;

use gguf_format::SplitGguf;
use quant_kernels::{matmul, ops, Matrix, Pool};

use crate::blocks::{
    add_bias, attend_full, dump, Activation, Embedding, Heads, LayerNorm, Linear, Pass, RowLayout, Scores, SeqView,
};
use crate::kv_cache::{CacheMatrix, CacheType};
use crate::loader::Loader;
use crate::model::{Encoder, Logits, Model, Pooling, State, StateOptions};
use crate::registry::Architecture;
use crate::rope::{yarn_corr_dims, Rope, RopeMode};
use crate::{Error, Result};

gguf_registry::submit! {
    Architecture {
        name: "bert",
        load: |file| Ok(Box::new(Bert::load(file, "bert")?)),
        ..Architecture::BASE
    }
}

gguf_registry::submit! {
    Architecture {
        name: "nomic-bert",
        load: |file| Ok(Box::new(Bert::load(file, "nomic-bert")?)),
        ..Architecture::BASE
    }
}

/// ggml's id of F32.
const F32: u32 = 0;

/// A layer's Q/K/V projections: three matrices, or one fused `attn_qkv` (Q rows, K rows,
/// V rows) whose bias is added before the split.
enum Qkv {
    Split(Box<[Linear; 3]>),
    Fused(Linear),
}

/// A layer's FFN.
enum BertFfn {
    /// `down(gelu(up·x + b)) + b` (bert).
    Gelu(Box<[Linear; 2]>),
    /// `down(silu(gate·x) · up·x)`, no biases (nomic-bert).
    SwiGlu(Box<[Linear; 3]>),
}

struct Layer {
    qkv: Qkv,
    wo: Linear,
    attn_out_norm: LayerNorm,
    ffn: BertFfn,
    layer_out_norm: LayerNorm,
}

/// The reranker head (`cls`, `cls.output`), either part optional.
struct ClsHead {
    cls: Option<Linear>,
    out: Option<Linear>,
}

/// A loaded BERT-style encoder.
pub struct Bert {
    arch: &'static str,
    n_embd: usize,
    heads: Heads,
    n_ff: usize,
    n_ctx_train: usize,
    eps: f32,
    pooling: Pooling,
    n_cls_out: usize,
    tok_embd: Embedding,
    /// The first row of `token_types` (every token is type 0).
    type_row0: Option<Vec<f32>>,
    /// Absolute positions (bert).
    pos_embd: Option<Embedding>,
    /// Rotary positions (nomic-bert).
    rope: Option<Rope>,
    tok_norm: LayerNorm,
    layers: Vec<Layer>,
    head: ClsHead,
}

impl Bert {
    /// Loads a `bert` or `nomic-bert` file with what `llama_model_bert::load_arch_tensors`
    /// (`llama_model_nomic_bert::…`) requires.
    pub fn load(file: Arc<SplitGguf>, arch: &'static str) -> Result<Bert> {
        let ld = Loader::with_shared(&file, arch);
        let nomic = arch == "nomic-bert";
        let n_layer = ld.u32("block_count")? as usize;
        if n_layer == 0 || n_layer > 4096 {
            return Err(Error::BadKey { key: ld.key("block_count"), msg: format!("{n_layer} layers") });
        }
        let e = ld.u32("embedding_length")? as usize;
        let n_head = ld.u32("attention.head_count")? as usize;
        let n_head_kv = ld.opt_u32("attention.head_count_kv")?.map_or(n_head, |v| v as usize);
        if n_head == 0 || !e.is_multiple_of(n_head) {
            return Err(Error::BadKey {
                key: ld.key("attention.head_count"),
                msg: format!("{n_head} heads do not divide the embedding width {e}"),
            });
        }
        if n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
            return Err(Error::BadKey {
                key: ld.key("attention.head_count_kv"),
                msg: format!("{n_head_kv} KV heads for {n_head} query heads"),
            });
        }
        let hd = e / n_head;
        let heads = Heads { n_head, n_head_kv, head_k: hd, head_v: hd };
        let n_ff = ld.u32("feed_forward_length")? as usize;
        let n_ctx_train = ld.opt_u32("context_length")?.unwrap_or(2048) as usize;
        let eps = ld
            .opt_f32_in("attention.layer_norm_epsilon", 0.0..=1.0)?
            .ok_or_else(|| Error::MissingKey(ld.key("attention.layer_norm_epsilon")))?;
        let pooling = match ld.opt_u32("pooling_type")? {
            None => Pooling::None,
            Some(id) => Pooling::from_id(id as i64)
                .ok_or_else(|| Error::BadKey { key: ld.key("pooling_type"), msg: format!("unknown pooling {id}") })?,
        };
        let n_cls_out = match file.metadata().get_array(&ld.key("classifier.output_labels")) {
            Some(a) if !a.is_empty() => a.len(),
            _ => 1,
        };
        // llama.cpp: "model needs to define token type count"
        const TT: &str = "tokenizer.ggml.token_type_count";
        let n_types = match file.metadata().get(TT) {
            Some(v) => v
                .as_u64()
                .ok_or_else(|| Error::BadKey { key: TT.into(), msg: "expected an unsigned integer".into() })?,
            None => 0,
        };
        if n_types == 0 {
            return Err(Error::MissingKey(format!("{TT} ({arch} needs a token type count)")));
        }
        let tok_embd = Embedding::load(&ld, "token_embd.weight", e)?;
        let type_row0 = match ld.opt_tensor("token_types.weight", &[e as u64, n_types])? {
            Some(_) => {
                let t = Embedding::load(&ld, "token_types.weight", e)?;
                let mut row = vec![0.0; e];
                t.row(0, &mut row)?;
                Some(row)
            }
            None => None,
        };
        let (pos_embd, rope) = if nomic {
            let n_rot = ld.opt_u32("rope.dimension_count")?.map_or(hd, |v| v as usize);
            if n_rot > hd || n_rot % 2 != 0 {
                return Err(Error::BadKey {
                    key: ld.key("rope.dimension_count"),
                    msg: format!("{n_rot} for heads of {hd}"),
                });
            }
            let base = ld.opt_f32_in("rope.freq_base", f32::MIN_POSITIVE..)?.unwrap_or(10000.0);
            let rope = Rope {
                mode: RopeMode::Neox,
                n_rot,
                freq_base: base,
                freq_scale: 1.0,
                ext_factor: 0.0,
                attn_factor: 1.0,
                corr_dims: yarn_corr_dims(n_rot, n_ctx_train as u32, base, 32.0, 1.0),
                freq_factors: None,
            };
            (None, Some(rope))
        } else {
            ld.tensor("position_embd.weight", &[e as u64, n_ctx_train as u64])?;
            (Some(Embedding::load(&ld, "position_embd.weight", e)?), None)
        };
        let tok_norm = LayerNorm::load(&ld, "token_embd_norm", e, eps)?;
        let kv = n_head_kv * hd;
        let mut layers = Vec::with_capacity(n_layer);
        for il in 0..n_layer {
            let n = |s: &str| format!("blk.{il}.{s}");
            let qkv = match Linear::load_opt(&ld, &n("attn_qkv"), e, e + 2 * kv)? {
                Some(mut f) => {
                    f.repack()?;
                    Qkv::Fused(f)
                }
                None => {
                    let mut l = [
                        Linear::load(&ld, &n("attn_q"), e, e)?,
                        Linear::load(&ld, &n("attn_k"), e, kv)?,
                        Linear::load(&ld, &n("attn_v"), e, kv)?,
                    ];
                    for x in &mut l {
                        x.repack()?;
                    }
                    Qkv::Split(Box::new(l))
                }
            };
            let mut wo = Linear::load(&ld, &n("attn_output"), e, e)?;
            wo.repack()?;
            let attn_out_norm = LayerNorm::load(&ld, &n("attn_output_norm"), e, eps)?;
            let ffn = if nomic {
                let mut l = [
                    Linear::load(&ld, &n("ffn_gate"), e, n_ff)?,
                    Linear::load(&ld, &n("ffn_up"), e, n_ff)?,
                    Linear::load(&ld, &n("ffn_down"), n_ff, e)?,
                ];
                for x in &mut l {
                    x.repack()?;
                }
                BertFfn::SwiGlu(Box::new(l))
            } else {
                let mut up = Linear::load(&ld, &n("ffn_up"), e, n_ff)?;
                let mut down = Linear::load(&ld, &n("ffn_down"), n_ff, e)?;
                up.repack()?;
                down.repack()?;
                BertFfn::Gelu(Box::new([up, down]))
            };
            let layer_out_norm = LayerNorm::load(&ld, &n("layer_output_norm"), e, eps)?;
            layers.push(Layer { qkv, wo, attn_out_norm, ffn, layer_out_norm });
        }
        let mut cls = Linear::load_opt(&ld, "cls", e, e)?;
        let mut out = Linear::load_opt(&ld, "cls.output", e, n_cls_out)?;
        for l in [&mut cls, &mut out].into_iter().flatten() {
            l.repack()?;
        }
        Ok(Bert {
            arch,
            n_embd: e,
            heads,
            n_ff,
            n_ctx_train,
            eps,
            pooling,
            n_cls_out,
            tok_embd,
            type_row0,
            pos_embd,
            rope,
            tok_norm,
            layers,
            head: ClsHead { cls, out },
        })
    }

    /// The last layer's output of one sequence (`n × n_embd`).
    fn encode(&self, pool: &Pool, tokens: &[u32]) -> Result<Vec<f32>> {
        let (n, e) = (tokens.len(), self.n_embd);
        if n == 0 {
            return Err(Error::Invalid(format!("{}: an empty sequence has no embedding", self.arch)));
        }
        if n > self.n_ctx_train {
            return Err(Error::ContextFull { n_tokens: n, n_ctx: self.n_ctx_train, pos: 0 });
        }
        let rows = RowLayout::one(n);
        let pass = Pass { pool, observer: None, rows: &rows };
        let mut x = vec![0f32; n * e];
        self.tok_embd.forward(tokens, 0, &mut x)?;
        if let Some(t) = &self.type_row0 {
            for r in x.chunks_exact_mut(e) {
                ops::add_inplace(r, t);
            }
        }
        if let Some(p) = &self.pos_embd {
            let mut row = vec![0f32; e];
            for (pos, r) in x.chunks_exact_mut(e).enumerate() {
                p.row(pos as u32, &mut row)?;
                // ggml_add(pos_rows, inpL): pos + x (commutative)
                ops::add_inplace(r, &row);
            }
        }
        dump("inp_embd", &x);
        self.tok_norm.forward_inplace(&mut x);
        dump("inp_norm", &x);
        let Heads { n_head_kv: nkv, head_k: hd, .. } = self.heads;
        let kvw = nkv * hd;
        let scale = 1.0f32 / (hd as f32).sqrt();
        let (mut q, mut k, mut v, mut o, mut a, mut g) = (vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut rc = Vec::new();
        for (il, layer) in self.layers.iter().enumerate() {
            match &layer.qkv {
                Qkv::Split(l) => {
                    let [wq, wk, wv] = &**l;
                    wq.forward(&pass, &x, &mut q)?;
                    wk.forward(&pass, &x, &mut k)?;
                    wv.forward(&pass, &x, &mut v)?;
                }
                Qkv::Fused(f) => {
                    f.forward(&pass, &x, &mut o)?;
                    let w = e + 2 * kvw;
                    q.resize(n * e, 0.0);
                    k.resize(n * kvw, 0.0);
                    v.resize(n * kvw, 0.0);
                    for (r, row) in o.chunks_exact(w).enumerate() {
                        q[r * e..(r + 1) * e].copy_from_slice(&row[..e]);
                        k[r * kvw..(r + 1) * kvw].copy_from_slice(&row[e..e + kvw]);
                        v[r * kvw..(r + 1) * kvw].copy_from_slice(&row[e + kvw..]);
                    }
                }
            }
            if let Some(rope) = &self.rope {
                for t in 0..n {
                    rope.cache(t, &mut rc);
                    for hq in q[t * e..(t + 1) * e].chunks_exact_mut(hd) {
                        rope.apply(&rc, hq);
                    }
                    for hk in k[t * kvw..(t + 1) * kvw].chunks_exact_mut(hd) {
                        rope.apply(&rc, hk);
                    }
                }
            }
            dump(&format!("Qcur-{il}"), &q);
            dump(&format!("Kcur-{il}"), &k);
            dump(&format!("Vcur-{il}"), &v);
            // K and V cast to F16 (llama.cpp's no-cache flash attention), every row
            // attending to the whole sequence
            let mut kc = CacheMatrix::new(CacheType::F16, n, kvw)?;
            let mut vc = CacheMatrix::new(CacheType::F16, n, kvw)?;
            for t in 0..n {
                kc.write(t, &k[t * kvw..(t + 1) * kvw]);
                vc.write(t, &v[t * kvw..(t + 1) * kvw]);
            }
            let seqs = [SeqView { row0: 0, n, pos0: 0, k: &kc, v: &vc }];
            o.clear();
            o.resize(n * e, 0.0);
            let sc = Scores { scale, softcap: None, window: None, sinks: None };
            attend_full(pool, self.heads, &seqs, &q, &sc, &mut o);
            dump(&format!("kqv_out-{il}"), &o);
            layer.wo.forward(&pass, &o, &mut a)?;
            // re-add the layer input, attention LayerNorm
            ops::add_inplace(&mut a, &x);
            layer.attn_out_norm.forward_inplace(&mut a);
            dump(&format!("ffn_inp-{il}"), &a);
            match &layer.ffn {
                BertFfn::Gelu(l) => {
                    let [up, down] = &**l;
                    up.forward(&pass, &a, &mut g)?;
                    for y in g.iter_mut() {
                        *y = ops::gelu(*y);
                    }
                    down.forward(&pass, &g, &mut o)?;
                }
                BertFfn::SwiGlu(l) => {
                    let [gate, up, down] = &**l;
                    gate.product(&pass, &a, &mut g)?;
                    up.product(&pass, &a, &mut q)?;
                    Activation::Silu.apply(&mut g, &q);
                    down.product(&pass, &g, &mut o)?;
                }
            }
            dump(&format!("ffn_out-{il}"), &o);
            ops::add_inplace(&mut o, &a);
            layer.layer_out_norm.forward_inplace(&mut o);
            dump(&format!("l_out-{il}"), &o);
            std::mem::swap(&mut x, &mut o);
        }
        dump("result_embd", &x);
        Ok(x)
    }

    /// One sequence's output `x` (`n` rows) pooled.
    fn pool_seq(&self, pool: &Pool, x: Vec<f32>, pooling: Pooling) -> Result<Vec<f32>> {
        let e = self.n_embd;
        let n = x.len() / e;
        Ok(match pooling {
            Pooling::None => x,
            Pooling::Cls => x[..e].to_vec(),
            Pooling::Last => x[(n - 1) * e..].to_vec(),
            Pooling::Mean => {
                // ggml_mul_mat(cont(transpose(x)), inp_mean): rows = channels, each a dot
                // over the n tokens with weights 1/n
                let mut xt = Vec::with_capacity(n * e * 4);
                for c in 0..e {
                    for t in 0..n {
                        xt.extend_from_slice(&x[t * e + c].to_le_bytes());
                    }
                }
                let w = vec![1.0f32 / n as f32; n];
                let m = Matrix::new(F32, &xt, e, n)?;
                let mut y = vec![0f32; e];
                matmul(pool, &m, &w, 1, &mut y)?;
                y
            }
            Pooling::Rank => {
                if self.head.cls.is_none() && self.head.out.is_none() {
                    return Err(Error::MissingTensor(format!(
                        "cls.weight or cls.output.weight ({}: pooling rank needs a classifier head)",
                        self.arch
                    )));
                }
                let rows = RowLayout::one(1);
                let pass = Pass { pool, observer: None, rows: &rows };
                let mut cur = x[..e].to_vec();
                let mut y = Vec::new();
                if let Some(cls) = &self.head.cls {
                    cls.forward(&pass, &cur, &mut y)?;
                    for v in y.iter_mut() {
                        *v = v.tanh();
                    }
                    cur = std::mem::take(&mut y);
                }
                if let Some(out) = &self.head.out {
                    out.product(&pass, &cur, &mut y)?;
                    add_bias(&mut y, out.bias());
                    cur = y;
                }
                cur.truncate(self.n_cls_out);
                cur
            }
        })
    }
}

impl Encoder for Bert {
    fn n_embd_out(&self) -> usize {
        self.n_embd
    }

    fn n_cls_out(&self) -> usize {
        self.n_cls_out
    }

    fn pooling(&self) -> Pooling {
        self.pooling
    }

    fn embed(&self, pool: &Pool, seqs: &[&[u32]], pooling: Pooling) -> Result<Vec<Vec<f32>>> {
        seqs.iter()
            .map(|s| {
                let x = self.encode(pool, s)?;
                self.pool_seq(pool, x, pooling)
            })
            .collect()
    }
}

impl Model for Bert {
    fn arch(&self) -> &str {
        self.arch
    }

    fn n_vocab(&self) -> usize {
        self.tok_embd.n_vocab()
    }

    fn n_ctx_train(&self) -> usize {
        self.n_ctx_train
    }

    fn describe(&self) -> String {
        let pos = if self.rope.is_some() { "rope" } else { "absolute positions" };
        let ffn = if self.rope.is_some() { "SwiGLU" } else { "GELU" };
        format!(
            "{}: encoder, {} layers, n_embd {}, {} heads of {}, {ffn} FFN {}, {pos}, n_ctx_train {}, pooling {}, \
             LayerNorm eps {:e}, n_vocab {}",
            self.arch,
            self.layers.len(),
            self.n_embd,
            self.heads.n_head,
            self.heads.head_k,
            self.n_ff,
            self.n_ctx_train,
            self.pooling.name(),
            self.eps,
            self.tok_embd.n_vocab()
        )
    }

    fn new_state(&self, _opts: &StateOptions) -> Result<Box<dyn State>> {
        Err(self.not_a_decoder())
    }

    fn forward(&self, _state: &mut dyn State, _tokens: &[u32], _logits: Logits) -> Result<Vec<f32>> {
        Err(self.not_a_decoder())
    }

    fn encoder(&self) -> Option<&dyn Encoder> {
        Some(self)
    }
}

impl Bert {
    fn not_a_decoder(&self) -> Error {
        Error::Unsupported(format!(
            "{} is an embedding encoder: it has no logits or generation (use `gguf embed`)",
            self.arch
        ))
    }
}
