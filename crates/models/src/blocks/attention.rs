//! Attention: [`Attention`] (projections, QK-norm, rope, the KV cache write, the output
//! projection) and [`attend`] (softmax attention of query rows over a cache, as llama.cpp's
//! CPU flash attention computes it).

use std::cell::RefCell;
use std::sync::Mutex;

use half::f16;
use half::slice::HalfFloatSliceExt;
use quant_kernels::{ops, Pool};

use super::{add_bias, dump, Linear, Pass, RmsNorm};
use crate::kv_cache::{CacheMatrix, CacheType};
use crate::loader::Loader;
use crate::rope::Rope;
use crate::Result;

/// ggml's id of Q8_0.
const Q8_0: u32 = 8;

/// Head counts and widths of one attention layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (`n_head` is a multiple: grouped-query attention).
    pub n_head_kv: usize,
    /// Width of a query/key head.
    pub head_k: usize,
    /// Width of a value head.
    pub head_v: usize,
}

/// One sequence's rows in a pass and its layer cache, to write this pass's K and V into.
pub struct SeqKv<'a> {
    /// First row of the sequence in the pass.
    pub row0: usize,
    /// Its rows.
    pub n: usize,
    /// Position of its first row.
    pub pos0: usize,
    /// The layer's K cache of this sequence.
    pub k: &'a mut CacheMatrix,
    /// The layer's V cache.
    pub v: &'a mut CacheMatrix,
}

/// One sequence's rows and the layer cache they attend over (read only).
#[derive(Clone, Copy)]
pub struct SeqView<'a> {
    /// First row of the sequence in the pass.
    pub row0: usize,
    /// Its rows.
    pub n: usize,
    /// Position of its first row.
    pub pos0: usize,
    /// The layer's K cache.
    pub k: &'a CacheMatrix,
    /// The layer's V cache.
    pub v: &'a CacheMatrix,
}

/// The scratch of [`Attention::forward`], kept across layers and passes.
#[derive(Default)]
pub struct AttentionScratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    o: Vec<f32>,
    tmp: Vec<f32>,
    gate: Vec<f32>,
}

/// A self-attention layer: `wo · attend(rope(norm_q(x·wq)), rope(norm_k(x·wk)), x·wv)` over
/// the cache, with optional biases, QK-norm and a sliding window; llama.cpp's `build_attn`
/// with its CPU flash attention.
pub struct Attention {
    /// Head layout.
    pub heads: Heads,
    /// Query projection.
    pub wq: Linear,
    /// Key projection.
    pub wk: Linear,
    /// Value projection.
    pub wv: Linear,
    /// Output projection.
    pub wo: Linear,
    /// Q, K and V in one matrix (`attn_qkv`, Q rows first, then K, then V) with its bias
    /// (or the three biases of `wq`/`wk`/`wv`): when set, one product computes all three,
    /// as llama.cpp's fused path does, and `wq`/`wk`/`wv` are views of its rows.
    pub wqkv: Option<Linear>,
    /// Per-head RMSNorm of Q before rope.
    pub q_norm: Option<RmsNorm>,
    /// Per-head RMSNorm of K before rope.
    pub k_norm: Option<RmsNorm>,
    /// Rotary embedding of this layer.
    pub rope: Rope,
    /// Sliding window in tokens: position `p1` sees `p0` when `p1 - p0 < window`.
    pub window: Option<usize>,
    /// The score scale (`1/√head_k` unless the family says otherwise).
    pub scale: f32,
    /// Apply the scale to q after rope (gemma's `ggml_scale(Qcur)`) rather than inside
    /// the attention; the rounding differs, so this follows the reference graph.
    pub scale_q: bool,
    /// Soft-cap of the attention scores, `c·tanh(s/c)` (gemma2's
    /// `attn_logit_softcapping`); `None`: off.
    pub softcap: Option<f32>,
    /// An output gate in the query projection (qwen35's gated attention): `wq` has
    /// `2·head_k` rows per head, the head's query then its gate, and the attention output
    /// is multiplied by `sigmoid(gate)` (ggml's `op_sigmoid`) before `wo`.
    pub q_gate: bool,
    /// Per-head RMSNorm of V before the cache write (gemma4's weightless `ggml_rms_norm`:
    /// a weight of ones, which `rms_norm`'s `(x·scale)·1` leaves exact).
    pub v_norm: Option<RmsNorm>,
    /// V is the key projection itself, taken before K's norm and rope (gemma4's
    /// `attention_k_eq_v` layers, which have no `attn_v`): `wv` is then not used.
    pub v_from_k: bool,
    /// Attention sinks, one logit per query head (gpt-oss's `attn_sinks`): each head's
    /// softmax counts one more term, `exp(sink)`, with no value row.
    pub sinks: Option<Vec<f32>>,
    /// Llama 4's attention temperature `(β, L)` (`attention.temperature_scale`, the YaRN
    /// original context as `L`: mistral3): after rope each query row at position `p` is
    /// multiplied by `ln(⌊p / L⌋ + 1)·β + 1` — 1 below `L`.
    pub temperature: Option<(f32, u32)>,
}

impl Attention {
    /// Layer `il`'s `attn_q` / `attn_k` / `attn_v` / `attn_output` (with their optional
    /// biases) and, with `qk_norm`, `attn_q_norm` / `attn_k_norm` (one head wide), as
    /// llama.cpp names them. The rope, window and scale are the family's: set them after.
    pub fn load(
        ld: &Loader<'_>,
        il: usize,
        n_embd: usize,
        heads: Heads,
        qk_norm: bool,
        eps: f32,
        rope: Rope,
    ) -> Result<Attention> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let Heads { n_head, n_head_kv, head_k, head_v } = heads;
        let norm = |s: &str| if qk_norm { RmsNorm::load(ld, &n(s), head_k, eps).map(Some) } else { Ok(None) };
        Ok(Attention {
            heads,
            wq: Linear::load(ld, &n("attn_q"), n_embd, head_k * n_head)?,
            wk: Linear::load(ld, &n("attn_k"), n_embd, head_k * n_head_kv)?,
            wv: Linear::load(ld, &n("attn_v"), n_embd, head_v * n_head_kv)?,
            wo: Linear::load(ld, &n("attn_output"), head_v * n_head, n_embd)?,
            wqkv: None,
            q_norm: norm("attn_q_norm.weight")?,
            k_norm: norm("attn_k_norm.weight")?,
            rope,
            window: None,
            scale: 1.0 / (head_k as f32).sqrt(),
            scale_q: false,
            softcap: None,
            q_gate: false,
            v_norm: None,
            v_from_k: false,
            sinks: None,
            temperature: None,
        })
    }

    /// [`Attention::load`] with Q, K and V fused into layer `il`'s `attn_qkv` (`[n_embd,
    /// n_head·head_k + 2·n_head_kv·head_k]`) and its optional `attn_qkv.bias` — else the
    /// optional separate `attn_{q,k,v}.bias`, used only when all three are there
    /// (llama.cpp's `create_tensor_qkv` / `build_qkv`).
    pub fn load_fused(
        ld: &Loader<'_>,
        il: usize,
        n_embd: usize,
        heads: Heads,
        qk_norm: bool,
        eps: f32,
        rope: Rope,
    ) -> Result<Attention> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let Heads { n_head, n_head_kv, head_k, head_v } = heads;
        let (qd, kd, vd) = (head_k * n_head, head_k * n_head_kv, head_v * n_head_kv);
        let fused = Linear::load(ld, &n("attn_qkv"), n_embd, qd + kd + vd)?;
        let norm = |s: &str| if qk_norm { RmsNorm::load(ld, &n(s), head_k, eps).map(Some) } else { Ok(None) };
        let mut wq = fused.rows_view(0, qd)?;
        let mut wk = fused.rows_view(qd, kd)?;
        let mut wv = fused.rows_view(qd + kd, vd)?;
        if fused.bias().is_none() {
            let b = |s: &str, len: usize| ld.opt_vector(&n(s), len as u64);
            if let (Some(bq), Some(bk), Some(bv)) =
                (b("attn_q.bias", qd)?, b("attn_k.bias", kd)?, b("attn_v.bias", vd)?)
            {
                wq = Linear::new(ld.shared()?, wq.tensor().clone(), Some(bq))?;
                wk = Linear::new(ld.shared()?, wk.tensor().clone(), Some(bk))?;
                wv = Linear::new(ld.shared()?, wv.tensor().clone(), Some(bv))?;
            }
        }
        Ok(Attention {
            heads,
            wq,
            wk,
            wv,
            wo: Linear::load(ld, &n("attn_output"), head_v * n_head, n_embd)?,
            wqkv: Some(fused),
            q_norm: norm("attn_q_norm.weight")?,
            k_norm: norm("attn_k_norm.weight")?,
            rope,
            window: None,
            scale: 1.0 / (head_k as f32).sqrt(),
            scale_q: false,
            softcap: None,
            q_gate: false,
            v_norm: None,
            v_from_k: false,
            sinks: None,
            temperature: None,
        })
    }

    /// Repacks the four projections (or the fused QKV and the output) where a kernel wants
    /// them repacked ([`Linear::repack`]).
    pub fn repack(&mut self) -> Result<()> {
        if let Some(f) = &mut self.wqkv {
            f.repack()?;
            self.wo.repack()?;
            return Ok(());
        }
        for l in [&mut self.wq, &mut self.wk, &mut self.wv, &mut self.wo] {
            l.repack()?;
        }
        Ok(())
    }

    /// Q, K and V of every row of the pass: three products, or one of the fused matrix
    /// split row by row (its bias added before the split, the three biases after).
    fn qkv(&self, pass: &Pass<'_>, h: &[f32], sc: &mut AttentionScratch) -> Result<()> {
        let AttentionScratch { q, k, v, o, .. } = sc;
        let Some(f) = &self.wqkv else {
            if self.v_from_k {
                Linear::forward_group(pass, h, &mut [(&self.wq, q), (&self.wk, k)])?;
                v.clear();
                v.extend_from_slice(k);
                return Ok(());
            }
            return Linear::forward_group(pass, h, &mut [(&self.wq, q), (&self.wk, k), (&self.wv, v)]);
        };
        f.forward(pass, h, o)?;
        let (qd, kd, vd) = (self.wq.rows(), self.wk.rows(), self.wv.rows());
        let n = pass.rows.n_rows();
        let w = qd + kd + vd;
        q.resize(n * qd, 0.0);
        k.resize(n * kd, 0.0);
        v.resize(n * vd, 0.0);
        for (r, row) in o[..n * w].chunks_exact(w).enumerate() {
            q[r * qd..(r + 1) * qd].copy_from_slice(&row[..qd]);
            k[r * kd..(r + 1) * kd].copy_from_slice(&row[qd..qd + kd]);
            v[r * vd..(r + 1) * vd].copy_from_slice(&row[qd + kd..]);
        }
        add_bias(q, self.wq.bias());
        add_bias(k, self.wk.bias());
        add_bias(v, self.wv.bias());
        Ok(())
    }

    /// The queries of every row of the pass, ready for [`attend`]: split from their gates
    /// (`q_gate`, gates into `sc.gate`), QK-normed, roped at each sequence's positions,
    /// scaled when `scale_q`, rotated for a quantized K cache. Returns the score scale
    /// left for the attention.
    fn queries(&self, pass: &Pass<'_>, il: usize, seqs: &[(usize, usize, usize)], sc: &mut AttentionScratch) -> f32 {
        let Heads { n_head: nh, head_k: hk, .. } = self.heads;
        let AttentionScratch { q, tmp, gate, .. } = sc;
        if self.q_gate {
            // per head [query | gate]: split into the queries and the gates
            dump(&format!("Qcur_full-{il}"), q);
            let n = pass.rows.n_rows();
            gate.resize(n * nh * hk, 0.0);
            tmp.resize(n * nh * hk, 0.0);
            for ((qg, qo), go) in q.chunks_exact(2 * hk).zip(tmp.chunks_exact_mut(hk)).zip(gate.chunks_exact_mut(hk)) {
                qo.copy_from_slice(&qg[..hk]);
                go.copy_from_slice(&qg[hk..]);
            }
            std::mem::swap(q, tmp);
            q.truncate(n * nh * hk);
        }
        dump(&format!("Qcur-{il}"), q);
        if let Some(w) = &self.q_norm {
            w.forward_inplace_on(pass.pool, q);
        }
        rope_rows(pass.pool, &self.rope, q, nh * hk, hk, seqs);
        if let Some((beta, len)) = self.temperature {
            for &(row0, n, pos0) in seqs {
                for t in 0..n {
                    let r = row0 + t;
                    let f = temperature(pos0 + t, beta, len);
                    q[r * nh * hk..(r + 1) * nh * hk].iter_mut().for_each(|x| *x *= f);
                }
            }
            dump(&format!("Qcur_attn_temp_scaled-{il}"), q);
        }
        let mut scale = self.scale;
        if self.scale_q {
            ops::scale_inplace(q, scale);
            scale = 1.0;
        }
        dump(&format!("Qrope-{il}"), q);
        scale
    }

    /// Attention of the normed input `h` (every row of the pass) into `out`: writes each
    /// sequence's K and V rows into its cache at their positions, attends, projects.
    /// `il` names the dumps (`Qcur-{il}`, `kqv_out-{il}`, ...).
    pub fn forward(
        &self,
        pass: &Pass<'_>,
        il: usize,
        h: &[f32],
        seqs: &mut [SeqKv<'_>],
        sc: &mut AttentionScratch,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let Heads { n_head_kv: nkv, head_k: hk, head_v: hv, .. } = self.heads;
        self.qkv(pass, h, sc)?;
        let spans: Vec<(usize, usize, usize)> = seqs.iter().map(|s| (s.row0, s.n, s.pos0)).collect();
        let scale = self.queries(pass, il, &spans, sc);
        let AttentionScratch { k, v, .. } = sc;
        dump(&format!("Kcur-{il}"), k);
        dump(&format!("Vcur-{il}"), v);
        if let Some(w) = &self.k_norm {
            w.forward_inplace_on(pass.pool, k);
        }
        if let Some(w) = &self.v_norm {
            w.forward_inplace_on(pass.pool, v);
        }
        let (rot_k, rot_v) = match seqs.first() {
            Some(s) => (cache_rotation(s.k.cache_type(), hk, true), cache_rotation(s.v.cache_type(), hv, false)),
            None => (None, None),
        };
        rope_rows(pass.pool, &self.rope, k, nkv * hk, hk, &spans);
        dump(&format!("Krope-{il}"), k);
        if let Some(n) = rot_k {
            hadamard_rows(k, n);
        }
        if let Some(n) = rot_v {
            hadamard_rows(v, n);
        }
        for s in seqs.iter_mut() {
            for t in 0..s.n {
                let (r, pos) = (s.row0 + t, s.pos0 + t);
                s.k.write(pos, &k[r * nkv * hk..(r + 1) * nkv * hk]);
                s.v.write(pos, &v[r * nkv * hv..(r + 1) * nkv * hv]);
            }
        }
        let views: Vec<SeqView<'_>> =
            seqs.iter().map(|s| SeqView { row0: s.row0, n: s.n, pos0: s.pos0, k: &*s.k, v: &*s.v }).collect();
        self.attend_project(pass, il, &views, scale, sc, out)
    }

    /// Attention of the normed input `h` over caches another layer wrote (gemma3n/gemma4's
    /// KV-shared layers, llama.cpp's `build_attn` with no K/V): only the queries are
    /// computed (`wk`/`wv` are not used), the caches are read as they are. Each view's
    /// cache must already hold the sequence's rows up to `pos0 + n`.
    pub fn forward_shared(
        &self,
        pass: &Pass<'_>,
        il: usize,
        h: &[f32],
        seqs: &[SeqView<'_>],
        sc: &mut AttentionScratch,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        self.wq.forward(pass, h, &mut sc.q)?;
        let spans: Vec<(usize, usize, usize)> = seqs.iter().map(|s| (s.row0, s.n, s.pos0)).collect();
        let scale = self.queries(pass, il, &spans, sc);
        self.attend_project(pass, il, seqs, scale, sc, out)
    }

    /// The common tail: q rotated for a quantized K cache, [`attend_with`] over the
    /// views, the output rotated back for a quantized V cache, gated, projected by `wo`.
    fn attend_project(
        &self,
        pass: &Pass<'_>,
        il: usize,
        views: &[SeqView<'_>],
        scale: f32,
        sc: &mut AttentionScratch,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let Heads { n_head: nh, head_k: hk, head_v: hv, .. } = self.heads;
        let AttentionScratch { q, o, gate, .. } = sc;
        let (rot_k, rot_v) = match views.first() {
            Some(s) => (cache_rotation(s.k.cache_type(), hk, true), cache_rotation(s.v.cache_type(), hv, false)),
            None => (None, None),
        };
        if let Some(n) = rot_k {
            hadamard_rows(q, n);
        }
        o.resize(pass.rows.n_rows() * nh * hv, 0.0);
        let scores = Scores { scale, softcap: self.softcap, window: self.window, sinks: self.sinks.as_deref() };
        attend_with(pass.pool, self.heads, views, q, &scores, o);
        dump(&format!("kqv_out-{il}"), o);
        if let Some(n) = rot_v {
            hadamard_rows(o, n);
        }
        if self.q_gate {
            for (x, &g) in o.iter_mut().zip(gate.iter()) {
                *x *= 1.0 / (1.0 + (-g).exp());
            }
            dump(&format!("attn_gated-{il}"), o);
        }
        self.wo.product(pass, o, out)?;
        add_bias(out, self.wo.bias());
        Ok(())
    }
}

/// llama.cpp's `llm_graph_input_attn_temp` factor at `pos`: `log(floor(pos / len) + 1) · β + 1`,
/// the quotient in f32, the rest in f64 (as `std::log` of a double), stored as f32.
pub fn temperature(pos: usize, beta: f32, len: u32) -> f32 {
    let q = (pos as f32 / len as f32).floor();
    ((q as f64 + 1.0).ln() * beta as f64 + 1.0) as f32
}

/// The width of the Walsh–Hadamard rotation llama.cpp applies around a quantized cache
/// (`attn_rot_k` / `attn_rot_v` of `llama_kv_cache`, on unless `LLAMA_ATTN_ROT_DISABLE`):
/// with a quantized K, q and k are rotated in rows of the largest power of two ≥ 64 that
/// divides the head width; with a quantized V, v in rows of 64 and the attention output
/// rotated back (the rotation is its own inverse). Heads not a multiple of 64 wide are not
/// rotated. (llama.cpp also skips it when the head widths differ between layers; every
/// family here has one width.)
fn cache_rotation(ty: CacheType, head: usize, key: bool) -> Option<usize> {
    if ty != CacheType::Q8_0 || head == 0 || !head.is_multiple_of(64) {
        return None;
    }
    if !key {
        return Some(64);
    }
    let mut n = 64;
    while head.is_multiple_of(n * 2) {
        n *= 2;
    }
    Some(n)
}

/// Each row of `n` values of `x` times the orthonormal `n × n` Walsh–Hadamard matrix, as
/// ggml-cpu's `ggml_compute_forward_fwht` computes it (the `mul_mat` llama.cpp marks
/// `GGML_HINT_SRC0_IS_HADAMARD`): every value scaled by `1/√n` first, then the butterflies
/// `(u + v, u − v)` for strides 1, 2, 4, … (its SIMD passes' `fma(v, −1, u)` rounds as
/// `u − v`).
fn hadamard_rows(x: &mut [f32], n: usize) {
    let scale = 1.0f32 / (n as f32).sqrt();
    for row in x.chunks_exact_mut(n) {
        for a in row.iter_mut() {
            *a *= scale;
        }
        let mut len = 1;
        while len < n {
            for pair in row.chunks_exact_mut(2 * len) {
                let (lo, hi) = pair.split_at_mut(len);
                for (u, v) in lo.iter_mut().zip(hi.iter_mut()) {
                    let (a, b) = (*u, *v);
                    *u = a + b;
                    *v = a - b;
                }
            }
            len *= 2;
        }
    }
}

/// Softmax attention of several sequences' query rows `q` (every row of the pass, `n_head
/// × head_k` wide, already roped and scaled as the family wants) over their own caches
/// into `o` (`n_head × head_v` per row), as llama.cpp's CPU flash attention (its default)
/// computes it: batches of 64 or more query rows of a sequence use f32 tiles; smaller ones
/// (decode) round q to f16 and accumulate V in f16 with an online softmax, splitting a
/// single query over the threads once the (256-padded) KV length reaches 512; other caches
/// (Q8_0 K or V) take ggml's one-chunk path (q quantized to the K type's dot type, the K
/// type's `vec_dot`, V in f32 after `to_float`), as tiles of rows from 8 rows on. A
/// sequence of 64 or more rows (8 on a quantized cache) gets a pool job of its own, all the
/// others share one job, one task per (row, head) — each task's arithmetic is what the
/// sequence would get alone.
pub fn attend(
    pool: &Pool,
    heads: Heads,
    seqs: &[SeqView<'_>],
    q: &[f32],
    scale: f32,
    window: Option<usize>,
    o: &mut [f32],
) {
    attend_softcap(pool, heads, seqs, q, scale, None, window, o)
}

/// [`attend`] with the scores soft-capped at `softcap` (`Some(c)`, c ≠ 0), where and as
/// ggml's flash-attention kernels cap them: the scale is divided by `c` once (`scale /=
/// softcap`), then each score is `c·tanhf(k·q·scale)` before the mask and the softmax —
/// per score in the one-chunk and split paths, per 64×64 tile (`ggml_vec_tanh_f32`, then
/// `ggml_vec_scale_f32` by `c`) in the tiled one.
#[allow(clippy::too_many_arguments)]
pub fn attend_softcap(
    pool: &Pool,
    heads: Heads,
    seqs: &[SeqView<'_>],
    q: &[f32],
    scale: f32,
    softcap: Option<f32>,
    window: Option<usize>,
    o: &mut [f32],
) {
    attend_with(pool, heads, seqs, q, &Scores { scale, softcap, window, sinks: None }, o)
}

/// How the scores of [`attend_with`] are formed and normalized.
#[derive(Debug, Clone, Copy)]
pub struct Scores<'a> {
    /// Scale of `k·q`.
    pub scale: f32,
    /// Soft-cap of the scaled scores ([`attend_softcap`]); `None` or `Some(0)`: off.
    pub softcap: Option<f32>,
    /// Sliding window: position `p1` sees `p0` when `p1 - p0 < window`.
    pub window: Option<usize>,
    /// One sink logit per query head (gpt-oss): after the cells, each head's softmax takes
    /// one more term `exp(sink)` with no value, as ggml's flash attention adds it (once per
    /// row, on the first chunk of a split row) — the output is scaled by `exp(M - sink)`
    /// when the sink is above the running maximum `M`, and the sum grows by `exp(sink - M)`
    /// (or becomes `S·exp(M - sink) + 1`).
    pub sinks: Option<&'a [f32]>,
}

/// A row's accumulator `acc` (f32), maximum `m` and sum `s` after one sink logit `sink`
/// (ggml-cpu's `sinks` step of `flash_attn_ext_f16`). GCC contracts `S*ms + vs` into one
/// FMA in the tiled kernel (`fused`) and not in the one-chunk one — measured against
/// libggml-cpu: the other choice moves the last bit wherever the sink is the new maximum.
#[inline]
fn add_sink(sink: f32, m: &mut f32, s: &mut f32, acc: &mut [f32], fused: bool) {
    let (mut ms, mut vs) = (1.0f32, 1.0f32);
    if sink > *m {
        ms = (*m - sink).exp();
        *m = sink;
        ops::scale_inplace(acc, ms);
    } else {
        vs = (sink - *m).exp();
    }
    *s = if fused { s.mul_add(ms, vs) } else { *s * ms + vs };
}

/// [`attend`] with every score option ([`Scores`]: scale, soft-cap, window, sinks).
pub fn attend_with(pool: &Pool, heads: Heads, seqs: &[SeqView<'_>], q: &[f32], sc: &Scores<'_>, o: &mut [f32]) {
    attend_impl(pool, heads, seqs, q, sc, false, o)
}

/// Non-causal attention (an encoder's, llama.cpp's `build_attn` without a cache): every
/// query row of a sequence attends to all of its `n` cells `pos0..pos0 + n`, not only to
/// those up to its own position, in the arithmetic [`attend_with`] uses for the same
/// number of rows (one-chunk rows below 64 rows, f32 tiles from 64: what ggml's flash
/// attention computes for one sequence per ubatch, whose K and V llama.cpp casts to F16
/// — an F16 [`CacheMatrix`] of the sequence's own rows).
pub fn attend_full(pool: &Pool, heads: Heads, seqs: &[SeqView<'_>], q: &[f32], sc: &Scores<'_>, o: &mut [f32]) {
    attend_impl(pool, heads, seqs, q, sc, true, o)
}

/// [`attend_with`] (`full` false: causal) or [`attend_full`].
fn attend_impl(pool: &Pool, heads: Heads, seqs: &[SeqView<'_>], q: &[f32], sc: &Scores<'_>, full: bool, o: &mut [f32]) {
    let (scale, cap) = match sc.softcap {
        Some(c) if c != 0.0 => (sc.scale / c, c),
        _ => (sc.scale, 0.0),
    };
    let (window, sinks) = (sc.window, sc.sinks);
    let Heads { n_head: nh, n_head_kv: nkv, head_k: hk, head_v: hv } = heads;
    let group = nh / nkv;
    let f16_kv = |s: &SeqView<'_>| s.k.cache_type() == CacheType::F16 && s.v.cache_type() == CacheType::F16;
    let outs: Vec<Mutex<&mut [f32]>> = o.chunks_mut(hv).map(Mutex::new).collect();
    let mut rest: Vec<SeqView<'_>> = Vec::new();
    for s in seqs {
        let (r0, n, p0) = (s.row0, s.n, s.pos0);
        let f16 = f16_kv(s);
        if (n >= 64 && f16) || (n >= ONE_CHUNK_TILED && !f16) {
            // one task per (head, tile of 64 query rows): each K/V tile is converted once
            let (kc, vc) = (s.k, s.v);
            let (qs, os) = (&q[r0 * nh * hk..(r0 + n) * nh * hk], &outs[r0 * nh..(r0 + n) * nh]);
            let n_qt = n.div_ceil(TILE);
            // F16: the heads of a KV head share each converted K/V tile, when that still
            // leaves every thread a few tasks
            let per = if f16 && nkv * n_qt >= 4 * pool.n_threads() { group } else { 1 };
            pool.for_each(nh / per * n_qt, &|i| {
                let (head, qt) = (i % (nh / per) * per, i / (nh / per));
                let rows = qt * TILE..(qt * TILE + TILE).min(n);
                let last = full.then_some(p0 + n - 1);
                let geo = TileGeometry { head, nh, kvh: head / group, hk, hv, scale, cap, window, p0, last, sinks };
                if f16 {
                    attend_tiled(kc, vc, &geo, per, rows, qs, os);
                } else {
                    attend_one_chunk_tiled(kc, vc, &geo, rows, qs, os);
                }
            });
        } else {
            rest.push(*s);
        }
    }
    let (rest_f16, rest): (Vec<SeqView<'_>>, Vec<SeqView<'_>>) = rest.into_iter().partition(|s| f16_kv(s));
    if !rest_f16.is_empty() {
        let geo = RowsGeometry { heads, scale, cap, window, sinks, full };
        attend_f16_rows(pool, &geo, &rest_f16, q, &outs);
    }
    if rest.is_empty() {
        return;
    }
    // task ranges per sequence
    let mut starts = Vec::with_capacity(rest.len() + 1);
    let mut total = 0;
    for s in &rest {
        starts.push(total);
        total += s.n * nh;
    }
    pool.for_each(total, &|i| {
        let j = starts.partition_point(|&s| s <= i) - 1;
        let s = &rest[j];
        let (r0, p0) = (s.row0, s.pos0);
        let local = i - starts[j];
        let (t, head) = (local / nh, local % nh);
        let (kc, vc) = (s.k, s.v);
        SCRATCH.with(|cell| {
            let mut guard = cell.borrow_mut();
            let sc = &mut *guard;
            let kvh = head / group;
            let pos = if full { p0 + s.n - 1 } else { p0 + t };
            let lo = match window {
                Some(w) => (pos + 1).saturating_sub(w),
                None => 0,
            };
            let r = r0 + t;
            let src = &q[(r * nh + head) * hk..(r * nh + head + 1) * hk];
            let mut out = outs[r * nh + head].lock().unwrap_or_else(|e| e.into_inner());
            let sink = sinks.map(|v| v[head]);
            let view = HeadView { kc, vc, kvh, hk, hv, scale, cap, lo, pos, sink };
            attend_one_chunk(&view, src, sc, &mut out);
        })
    });
}

/// Ropes every head (`head` wide) of the rows of `x` (`row_width` wide) that the spans
/// `(row0, n, pos0)` cover, each at its sequence position, spread over `pool`.
fn rope_rows(pool: &Pool, rope: &Rope, x: &mut [f32], row_width: usize, head: usize, spans: &[(usize, usize, usize)]) {
    pool.for_rows(x, row_width, &|r0, run| {
        let mut rc = Vec::new();
        for (i, row) in run.chunks_exact_mut(row_width).enumerate() {
            let r = r0 + i;
            let Some(&(row0, _, pos0)) = spans.iter().find(|&&(row0, n, _)| (row0..row0 + n).contains(&r)) else {
                continue;
            };
            rope.cache(pos0 + r - row0, &mut rc);
            for h in row.chunks_exact_mut(head) {
                rope.apply(&rc, h);
            }
        }
    });
}

/// The settings every row of an [`attend_f16_rows`] pass shares.
struct RowsGeometry<'a> {
    heads: Heads,
    scale: f32,
    /// Score soft-cap (0: off); `scale` is already divided by it.
    cap: f32,
    window: Option<usize>,
    sinks: Option<&'a [f32]>,
    /// Every row sees all of its sequence's cells ([`attend_full`]).
    full: bool,
}

/// How ggml-cpu splits one row's keys on its F16 path: `n_kv` is the cache padded to 256
/// cells past `pos`; a one-row pass over ≥ 512 cells splits them into one chunk per thread
/// (each chunk's softmax combined afterwards), any other row is one chunk.
fn f16_chunk(n_ctx: usize, pos: usize, n_rows: usize, nth: usize) -> usize {
    let n_kv = n_ctx.min(256usize.max((pos + 1).div_ceil(256) * 256));
    if n_rows == 1 && n_kv >= 512 {
        n_kv.div_ceil(nth)
    } else {
        n_kv
    }
}

/// Rows over F16 caches on ggml-cpu's `flash_attn_ext_f16_one_chunk` path (fewer than 64
/// rows: decode and short batches), one task per (row, KV head, chunk of keys): the query
/// heads sharing a KV head walk its keys together ([`ops::flash_f16_chunk`]), each head's
/// arithmetic in ggml's order. A one-chunk row is finished in its task; a split row's
/// chunks are combined afterwards in chunk order, as ggml reduces them.
fn attend_f16_rows(pool: &Pool, geo: &RowsGeometry<'_>, seqs: &[SeqView<'_>], q: &[f32], outs: &[Mutex<&mut [f32]>]) {
    let RowsGeometry { heads, scale, cap, window, sinks, full } = *geo;
    let Heads { n_head: nh, n_head_kv: nkv, head_k: hk, head_v: hv } = heads;
    let group = nh / nkv;
    let (nth, layout, fp16) = (pool.n_threads(), ops::native_dot_layout(), ops::native_fp16_vec());
    // per sequence: chunk length, chunk slots per row, first task; split rows' partial
    // results (per task: each head's m, s and hv accumulators) go to `parts`
    let mut plans = Vec::with_capacity(seqs.len());
    let mut total = 0;
    for s in seqs {
        let chunk = f16_chunk(s.k.n_rows(), s.pos0, s.n, nth);
        let slots = if s.n == 1 { s.pos0 / chunk + 1 } else { 1 };
        plans.push((total, chunk, slots));
        total += s.n * nkv * slots;
    }
    let part_len = group * (hv + 2);
    let parts: Vec<Mutex<Vec<f32>>> = (0..total).map(|_| Mutex::new(Vec::new())).collect();
    pool.for_each(total, &|i| {
        let j = plans.partition_point(|p| p.0 <= i) - 1;
        let (s, (t0, chunk, slots)) = (&seqs[j], plans[j]);
        let local = i - t0;
        let (t, kvh, c) = (local / (nkv * slots), local / slots % nkv, local % slots);
        let pos = if full { s.pos0 + s.n - 1 } else { s.pos0 + t };
        let chunk = if s.n == 1 { chunk } else { f16_chunk(s.k.n_rows(), pos, s.n, nth) };
        let lo = window.map_or(0, |w| (pos + 1).saturating_sub(w));
        let (a, b) = ((c * chunk).max(lo), (c * chunk + chunk - 1).min(pos));
        let r = s.row0 + t;
        let h0 = r * nh + kvh * group;
        SCRATCH.with(|cell| {
            let mut guard = cell.borrow_mut();
            let sc = &mut *guard;
            sc.q16.clear();
            sc.q16.extend(q[h0 * hk..(h0 + group) * hk].iter().map(|&x| f16::from_f32(x)));
            sc.m.clear();
            sc.m.resize(group, f32::NEG_INFINITY);
            sc.s.clear();
            sc.s.resize(group, 0.0);
            sc.acc16.clear();
            sc.acc16.resize(group * hv, f16::ZERO);
            if a <= b {
                let n = b - a + 1;
                let (Some((k, k_stride)), Some((v, v_stride))) =
                    (s.k.f16_rows_from(a, kvh * hk), s.v.f16_rows_from(a, kvh * hv))
                else {
                    return;
                };
                let c = ops::FlashF16 { k, v, k_stride, v_stride, n, hk, hv, scale, cap, layout, fp16 };
                if c.keys() < n {
                    return; // a cell never written: the rows read 0, as a missing cell did before
                }
                ops::flash_f16_chunk(&c, &sc.q16, &mut sc.m, &mut sc.s, &mut sc.acc16);
            }
            // the f16 accumulators in f32, and the sinks of the row's first chunk
            sc.acc.clear();
            sc.acc.extend(sc.acc16.iter().map(|v| v.to_f32()));
            if let Some(sk) = sinks.filter(|_| c == 0) {
                for h in 0..group {
                    add_sink(sk[kvh * group + h], &mut sc.m[h], &mut sc.s[h], &mut sc.acc[h * hv..(h + 1) * hv], false);
                }
            }
            if chunk > pos {
                // one chunk: the plain path divides directly
                for h in 0..group {
                    let inv = if sc.s[h] == 0.0 { 0.0 } else { 1.0 / sc.s[h] };
                    let mut out = outs[h0 + h].lock().unwrap_or_else(|e| e.into_inner());
                    for (o, v) in out.iter_mut().zip(&sc.acc[h * hv..(h + 1) * hv]) {
                        *o = v * inv;
                    }
                }
                return;
            }
            let mut part = parts[i].lock().unwrap_or_else(|e| e.into_inner());
            part.clear();
            part.reserve(part_len);
            for h in 0..group {
                part.push(sc.m[h]);
                part.push(sc.s[h]);
                part.extend_from_slice(&sc.acc[h * hv..(h + 1) * hv]);
            }
        })
    });
    // split rows: each head's chunks combined in order (ggml's reduction of its chunks)
    for (s, &(t0, chunk, slots)) in seqs.iter().zip(&plans) {
        if s.n != 1 || chunk > s.pos0 {
            continue;
        }
        for head in 0..nh {
            let (kvh, h) = (head / group, head % group);
            let mut out = outs[s.row0 * nh + head].lock().unwrap_or_else(|e| e.into_inner());
            out.fill(0.0);
            let (mut m_fin, mut s_fin) = (f32::NEG_INFINITY, 0.0f32);
            for c in 0..slots {
                let part = parts[t0 + kvh * slots + c].lock().unwrap_or_else(|e| e.into_inner());
                let Some(p) = part.get(h * (hv + 2)..(h + 1) * (hv + 2)) else {
                    continue; // a chunk with no cells (or a missing one)
                };
                let (m, sum) = (p[0], p[1]);
                if sum == 0.0 {
                    continue;
                }
                let m_new = m_fin.max(m);
                let (so, sn) = ((m_fin - m_new).exp(), (m - m_new).exp());
                for (o, v) in out.iter_mut().zip(&p[2..]) {
                    *o = o.mul_add(so, v * sn); // contracted as in ggml-cpu
                }
                s_fin = s_fin.mul_add(so, sum * sn);
                m_fin = m_new;
            }
            let inv = if s_fin == 0.0 { 0.0 } else { 1.0 / s_fin };
            for o in out.iter_mut() {
                *o *= inv;
            }
        }
    }
}

/// Per-thread attention scratch.
#[derive(Default)]
struct Scratch {
    row: ChunkRow,
    tmp: Vec<f32>,
    q16: Vec<f16>,
    acc: Vec<f32>,
    acc16: Vec<f16>,
    m: Vec<f32>,
    s: Vec<f32>,
}

/// One query head's view of a layer's cache: which KV head, widths, the score scale, and
/// the positions `lo..=pos` it attends to.
struct HeadView<'a> {
    kc: &'a CacheMatrix,
    vc: &'a CacheMatrix,
    kvh: usize,
    hk: usize,
    hv: usize,
    scale: f32,
    /// Score soft-cap (0: off); `scale` is already divided by it.
    cap: f32,
    lo: usize,
    pos: usize,
    /// The head's sink logit.
    sink: Option<f32>,
}

/// `c·tanhf(x)` when the soft-cap `c` is on (ggml: `s = logit_softcap*tanhf(s)`).
#[inline]
fn capped(x: f32, cap: f32) -> f32 {
    if cap != 0.0 {
        cap * x.tanh()
    } else {
        x
    }
}

/// One query row of one head on ggml's `flash_attn_ext_f16_one_chunk` path, the path it
/// takes for caches its tiled and split paths do not (any K or V that is not F16/F32 of one
/// type — Q8_0): q converted to the K type's dot type (Q8_0 → ggml-cpu's
/// `quantize_row_q8_0`, F16 → f16, F32 as is), each score the K type's own `vec_dot`, an
/// online softmax over the cells in order, V accumulated in f16 (F16 V) or in f32 after
/// `to_float` (others) with fused multiply-adds, then divided by the sum. The row's
/// arithmetic depends only on the cells it is given and their order, so [`attend_one_chunk`]
/// (one row) and [`attend_one_chunk_tiled`] (64 rows over tiles of cells) agree bit for bit.
#[derive(Default)]
struct ChunkRow {
    q: Vec<f32>,
    q8: Vec<u8>,
    q16: Vec<f16>,
    acc: Vec<f32>,
    acc16: Vec<f16>,
    m: f32,
    s: f32,
    /// A cell was missing (never written): the row reads NaN.
    bad: bool,
}

/// A V row of the one-chunk path: F16 as stored, anything else dequantized to f32.
enum VRow<'a> {
    F16(&'a [f16]),
    F32(&'a [f32]),
}

impl ChunkRow {
    /// Starts the row for query `q` against caches of these types; false when the Q8_0
    /// kernels are missing.
    fn start(&mut self, kc: &CacheMatrix, vc: &CacheMatrix, q: &[f32], hv: usize) -> bool {
        match kc.cache_type() {
            CacheType::Q8_0 => {
                let Some(act) = quant_kernels::registry::act_quantizer_for(Q8_0) else { return false };
                self.q8.resize(q.len() / 32 * 34, 0);
                (act.quantize)(q, &mut self.q8);
            }
            CacheType::F16 => {
                self.q16.clear();
                self.q16.extend(q.iter().map(|&x| f16::from_f32(x)));
            }
            CacheType::F32 => {
                self.q.clear();
                self.q.extend_from_slice(q);
            }
        }
        self.acc.clear();
        self.acc16.clear();
        if vc.cache_type() == CacheType::F16 {
            self.acc16.resize(hv, f16::ZERO);
        }
        self.acc.resize(hv, 0.0);
        (self.m, self.s, self.bad) = (f32::NEG_INFINITY, 0.0, false);
        true
    }

    /// The scaled score of cell `j` (K head at `k_off`, `hk` wide), `None` if unwritten.
    #[inline]
    fn score(&self, kc: &CacheMatrix, j: usize, k_off: usize, hk: usize, dot: Dot, tmp: &mut [f32]) -> Option<f32> {
        match (kc.cache_type(), dot) {
            (CacheType::Q8_0, Dot::Q8_0) => kc.q8_0_blocks(j, k_off, hk).map(|kr| ops::dot_q8_0(hk, kr, &self.q8)),
            (CacheType::F16, Dot::F16(layout)) => {
                kc.f16_slice(j, k_off, hk).map(|kr| ops::dot_f16_ggml(kr, &self.q16, layout))
            }
            _ => (j < kc.n_rows()).then(|| kc.dot(j, k_off, &self.q, tmp)),
        }
    }

    /// One cell of the online softmax: score `x`, value row `v`.
    #[inline]
    fn add(&mut self, x: f32, v: VRow<'_>) {
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        if x > self.m {
            let old = self.m;
            self.m = x;
            ms = (old - x).exp();
            match v {
                VRow::F16(_) if ops::native_fp16_vec() => ops::scale_f16_fp16(&mut self.acc16, ms),
                VRow::F16(_) => ops::scale_f16(&mut self.acc16, ms),
                VRow::F32(_) => ops::scale_inplace(&mut self.acc, ms),
            }
        } else {
            vs = (x - self.m).exp();
        }
        match v {
            VRow::F16(vr) if ops::native_fp16_vec() => ops::mad_f16_fp16(&mut self.acc16, vs, vr),
            VRow::F16(vr) => ops::mad_f16(&mut self.acc16, vs, vr),
            // ggml_vec_mad_f32: every lane a fused multiply-add
            VRow::F32(vr) => ops::mad_f32(&mut self.acc, vs, vr),
        }
        self.s = self.s.mul_add(ms, vs); // contracted as in ggml-cpu
    }

    /// `V / S` into `out`, after the head's `sink` (if any).
    fn finish(&mut self, sink: Option<f32>, out: &mut [f32]) {
        if self.bad {
            return out.fill(f32::NAN);
        }
        if !self.acc16.is_empty() {
            for (d, v) in self.acc.iter_mut().zip(&self.acc16) {
                *d = v.to_f32();
            }
        }
        if let Some(sk) = sink {
            add_sink(sk, &mut self.m, &mut self.s, &mut self.acc, false);
        }
        let inv = if self.s == 0.0 { 0.0 } else { 1.0 / self.s };
        for (o, v) in out.iter_mut().zip(&self.acc) {
            *o = v * inv;
        }
    }
}

/// The K type's dot product of the one-chunk path.
#[derive(Clone, Copy)]
enum Dot {
    Q8_0,
    F16(ops::DotLayout),
    F32,
}

/// The [`Dot`] for a K cache.
fn dot_for(kc: &CacheMatrix) -> Option<Dot> {
    Some(match kc.cache_type() {
        CacheType::Q8_0 => Dot::Q8_0,
        CacheType::F16 => Dot::F16(ops::native_dot_layout()),
        CacheType::F32 => Dot::F32,
    })
}

/// One query head over every cell of its window, as ggml's one-chunk path ([`ChunkRow`]).
fn attend_one_chunk(h: &HeadView<'_>, q: &[f32], sc: &mut Scratch, out: &mut [f32]) {
    let HeadView { kc, vc, kvh, hk, hv, scale, cap, lo, pos, sink } = *h;
    let (k_off, v_off) = (kvh * hk, kvh * hv);
    sc.tmp.resize(hk.max(hv), 0.0);
    let row = &mut sc.row;
    let Some(dot) = dot_for(kc).filter(|_| row.start(kc, vc, q, hv)) else { return out.fill(f32::NAN) };
    for j in lo..=pos {
        let Some(x) = row.score(kc, j, k_off, hk, dot, &mut sc.tmp) else { return out.fill(f32::NAN) };
        let x = capped(x * scale, cap);
        if vc.cache_type() == CacheType::F16 {
            match vc.f16_slice(j, v_off, hv) {
                Some(vr) => row.add(x, VRow::F16(vr)),
                None => return out.fill(f32::NAN),
            }
        } else {
            if j >= vc.n_rows() {
                return out.fill(f32::NAN);
            }
            vc.read(j, v_off, &mut sc.tmp[..hv]);
            row.add(x, VRow::F32(&sc.tmp[..hv]));
        }
    }
    row.finish(sink, out);
}

/// Query rows `rows` of one head on the one-chunk path ([`ChunkRow`], each row's cells in
/// order, bit-identical to [`attend_one_chunk`] per row), over tiles of [`TILE`] cells: a V
/// tile is dequantized once for all rows instead of once per row, and each row's K·q
/// stays the K type's `vec_dot`. For prompts over a Q8_0 cache (llama.cpp computes them one
/// row at a time).
fn attend_one_chunk_tiled(
    kc: &CacheMatrix,
    vc: &CacheMatrix,
    g: &TileGeometry<'_>,
    rows: std::ops::Range<usize>,
    q: &[f32],
    outs: &[Mutex<&mut [f32]>],
) {
    let TileGeometry { head, nh, kvh, hk, hv, scale, cap, window, p0, last, sinks } = *g;
    let (k_off, v_off) = (kvh * hk, kvh * hv);
    let pos_of = |t: usize| last.unwrap_or(p0 + t);
    let lo_of = |t: usize| window.map_or(0, |w| (pos_of(t) + 1).saturating_sub(w));
    let mut state: Vec<ChunkRow> = rows.clone().map(|_| ChunkRow::default()).collect();
    let Some(dot) = dot_for(kc) else {
        return rows.for_each(|t| outs[t * nh + head].lock().unwrap_or_else(|e| e.into_inner()).fill(f32::NAN));
    };
    for (row, t) in state.iter_mut().zip(rows.clone()) {
        row.bad = !row.start(kc, vc, &q[(t * nh + head) * hk..(t * nh + head + 1) * hk], hv);
    }
    let v_f16 = vc.cache_type() == CacheType::F16;
    let mut vt = vec![0f32; if v_f16 { 0 } else { TILE * hv }];
    let mut tmp = vec![0f32; hk];
    let (min_lo, max_pos) = (lo_of(rows.start), pos_of(rows.end - 1));
    let mut first = min_lo / TILE * TILE;
    while first <= max_pos {
        let end = (first + TILE).min(max_pos + 1);
        if !v_f16 {
            for j in first..end.min(vc.n_rows()) {
                vc.read(j, v_off, &mut vt[(j - first) * hv..(j - first + 1) * hv]);
            }
        }
        for (row, t) in state.iter_mut().zip(rows.clone()) {
            let (lo, pos) = (lo_of(t).max(first), pos_of(t).min(end - 1));
            for j in lo..=pos {
                if row.bad || lo > pos {
                    break;
                }
                let Some(x) = row.score(kc, j, k_off, hk, dot, &mut tmp) else {
                    row.bad = true;
                    break;
                };
                let x = capped(x * scale, cap);
                if v_f16 {
                    match vc.f16_slice(j, v_off, hv) {
                        Some(vr) => row.add(x, VRow::F16(vr)),
                        None => row.bad = true,
                    }
                } else if j < vc.n_rows() {
                    row.add(x, VRow::F32(&vt[(j - first) * hv..(j - first + 1) * hv]));
                } else {
                    row.bad = true;
                }
            }
        }
        first = end;
    }
    for (row, t) in state.iter_mut().zip(rows) {
        row.finish(sinks.map(|v| v[head]), &mut outs[t * nh + head].lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// `_mm512_reduce_add_ps` / the AVX2 `hadd` sequence of ggml's `ggml_vec_soft_max_f32`
/// over one chunk of 16 (or 8) lanes.
fn reduce_chunk(v: &[f32], layout: ops::DotLayout) -> f32 {
    match layout {
        ops::DotLayout::Avx512 => {
            let t3: [f32; 8] = std::array::from_fn(|i| v[8 + i] + v[i]);
            let t6 = [t3[4] + t3[0], t3[5] + t3[1], t3[6] + t3[2], t3[7] + t3[3]];
            (t6[0] + t6[2]) + (t6[1] + t6[3])
        }
        ops::DotLayout::Avx2 => {
            let t = [v[4] + v[0], v[5] + v[1], v[6] + v[2], v[7] + v[3]];
            (t[0] + t[2]) + (t[1] + t[3])
        }
    }
}

/// The largest score of a tile row, 16 lanes at a time (vector max instead of a 64-step
/// dependency chain). Scores are never NaN; the value is the scalar fold's, and where it
/// is a zero the sign may differ, which no later step sees (`x − (±0)` and `exp` agree).
fn row_max(row: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut chunks = row.chunks_exact(16);
    for c in &mut chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    let rest = chunks.remainder().iter();
    lanes.iter().chain(rest).fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a })
}

/// Rows and columns of one tiled-attention task.
struct TileGeometry<'a> {
    head: usize,
    nh: usize,
    kvh: usize,
    hk: usize,
    hv: usize,
    scale: f32,
    /// Score soft-cap (0: off); `scale` is already divided by it.
    cap: f32,
    window: Option<usize>,
    p0: usize,
    /// The last cell every row sees ([`attend_full`]); `None`: each row its own position.
    last: Option<usize>,
    /// Sink logits of every query head.
    sinks: Option<&'a [f32]>,
}

/// ggml's flash-attention tile size (`GGML_FA_TILE_Q` = `GGML_FA_TILE_KV` = 64).
const TILE: usize = 64;

/// Rows of a sequence from which a quantized cache's one-chunk rows run as tiles
/// ([`attend_one_chunk_tiled`]; same bits, fewer V dequantizations).
const ONE_CHUNK_TILED: usize = 8;

/// Query rows `rows` of heads `head..head + n_heads` (heads of one KV head) as ggml's tiled
/// flash attention (`flash_attn_ext_tiled`, batches of 64+ rows) computes them: KV tiles of
/// 64 converted to f32 once for all the heads, K·q and P·V as FMA chains (`simd_gemm`),
/// per-row online softmax per tile with ggml's polynomial exp, sums in f64 per 16-lane (or
/// 8-lane) chunk. Each head's arithmetic is ggml's, so the grouping does not change a bit.
fn attend_tiled(
    kc: &CacheMatrix,
    vc: &CacheMatrix,
    g: &TileGeometry<'_>,
    n_heads: usize,
    rows: std::ops::Range<usize>,
    q: &[f32],
    outs: &[Mutex<&mut [f32]>],
) {
    let TileGeometry { head, nh, kvh, hk, hv, scale, cap, window, p0, last, sinks } = *g;
    let r = rows.len();
    let layout = ops::native_dot_layout();
    let lanes = if layout == ops::DotLayout::Avx512 { 16 } else { 8 };
    let pos_of = |i: usize| last.unwrap_or(p0 + rows.start + i);
    let lo_of = |i: usize| window.map_or(0, |w| (pos_of(i) + 1).saturating_sub(w));
    // per head of the group: its q rows, scores, accumulators, maxima and sums
    let mut qt = vec![0f32; n_heads * r * hk];
    for h in 0..n_heads {
        for i in 0..r {
            let (t, d) = (rows.start + i, (h * r + i) * hk);
            let src = ((t * nh + head + h) * hk, (t * nh + head + h + 1) * hk);
            qt[d..d + hk].copy_from_slice(&q[src.0..src.1]);
        }
    }
    let (mut kt, mut vt, mut kq) = (vec![0f32; hk * TILE], vec![0f32; TILE * hv], vec![0f32; r * TILE]);
    let mut krow = vec![0f32; hk];
    let mut acc = vec![0f32; n_heads * r * hv];
    let (mut m, mut s) = (vec![f32::NEG_INFINITY; n_heads * r], vec![0f32; n_heads * r]);
    let max_pos = pos_of(r - 1);
    let min_lo = (0..r).map(lo_of).min().unwrap_or(0);
    let mut ic = 0;
    while ic <= max_pos {
        let first = ic;
        ic += TILE;
        if first + TILE <= min_lo {
            continue; // every cell of the tile is masked for every row
        }
        for tk in 0..TILE {
            let j = first + tk;
            let kr = if j < kc.n_rows() { kc.f16_slice(j, kvh * hk, hk) } else { None };
            let vr = if j < vc.n_rows() { vc.f16_slice(j, kvh * hv, hv) } else { None };
            match kr {
                Some(k) => k.convert_to_f32_slice(&mut krow),
                None => krow.fill(0.0),
            }
            for (dk, x) in krow.iter().enumerate() {
                kt[dk * TILE + tk] = *x;
            }
            let vdst = &mut vt[tk * hv..(tk + 1) * hv];
            match vr {
                Some(v) => v.convert_to_f32_slice(vdst),
                None => vdst.fill(0.0),
            }
        }
        for h in 0..n_heads {
            let (acc, m, s) =
                (&mut acc[h * r * hv..(h + 1) * r * hv], &mut m[h * r..(h + 1) * r], &mut s[h * r..(h + 1) * r]);
            kq.fill(0.0);
            ops::gemm_fma(&mut kq, &qt[h * r * hk..(h + 1) * r * hk], &kt, r, hk, TILE);
            ops::scale_inplace(&mut kq, scale);
            if cap != 0.0 {
                kq.iter_mut().for_each(|x| *x = x.tanh());
                ops::scale_inplace(&mut kq, cap);
            }
            for i in 0..r {
                let (lo, pos) = (lo_of(i), pos_of(i));
                let row = &mut kq[i * TILE..(i + 1) * TILE];
                // the mask: +0 on the cells `lo..=pos`, −∞ on the others (three plain
                // loops instead of a per-cell test)
                let a = lo.saturating_sub(first).min(TILE);
                let b = (pos + 1).saturating_sub(first).clamp(a, TILE);
                row[..a].iter_mut().for_each(|x| *x += f32::NEG_INFINITY);
                row[a..b].iter_mut().for_each(|x| *x += 0.0);
                row[b..].iter_mut().for_each(|x| *x += f32::NEG_INFINITY);
                let tile_max = row_max(row);
                if tile_max == f32::NEG_INFINITY {
                    row.fill(0.0);
                    continue;
                }
                let m_new = m[i].max(tile_max);
                if m_new > m[i] {
                    let ms = (m[i] - m_new).exp();
                    ops::scale_inplace(&mut acc[i * hv..(i + 1) * hv], ms);
                    s[i] *= ms;
                }
                m[i] = m_new;
                for x in row.iter_mut() {
                    *x -= m_new;
                }
                ops::expf_ggml_inplace(row);
                let mut sum = 0.0f64;
                for c in row.chunks_exact(lanes) {
                    sum += reduce_chunk(c, layout) as f64;
                }
                s[i] = ((s[i] as f64) + sum) as f32;
            }
            ops::gemm_fma(acc, &kq, &vt, r, TILE, hv);
        }
    }
    for h in 0..n_heads {
        for i in 0..r {
            let k = h * r + i;
            if let Some(sk) = sinks {
                add_sink(sk[head + h], &mut m[k], &mut s[k], &mut acc[k * hv..(k + 1) * hv], true);
            }
            let inv = if s[k] == 0.0 { 0.0 } else { 1.0 / s[k] };
            let t = rows.start + i;
            let mut out = outs[t * nh + head + h].lock().unwrap_or_else(|e| e.into_inner());
            for (o, v) in out.iter_mut().zip(&acc[k * hv..(k + 1) * hv]) {
                *o = v * inv;
            }
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_max_is_the_scalar_fold() {
        let mut seed = 7u32;
        let mut r = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            seed
        };
        for len in [64, 16, 5, 37, 0] {
            for _ in 0..200 {
                let row: Vec<f32> = (0..len)
                    .map(|_| match r() % 5 {
                        0 => f32::NEG_INFINITY,
                        _ => (r() >> 8) as f32 / 65536.0 - 128.0,
                    })
                    .collect();
                let want = row.iter().fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
                assert_eq!(row_max(&row), want, "{row:?}");
            }
        }
    }

    /// llama.cpp's `ggml_gen_hadamard`: the orthonormal Sylvester matrix.
    fn hadamard_matrix(n: usize) -> Vec<f32> {
        let mut h = vec![0f32; n * n];
        h[0] = 1.0 / (n as f32).sqrt();
        let mut s = 1;
        while s < n {
            for i in 0..s {
                for j in 0..s {
                    let v = h[i * n + j];
                    h[(i + s) * n + j] = v;
                    h[i * n + j + s] = v;
                    h[(i + s) * n + j + s] = -v;
                }
            }
            s *= 2;
        }
        h
    }

    #[test]
    fn hadamard_rows_is_the_rotation_and_its_own_inverse() {
        let mut seed = 7u32;
        let mut r = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        };
        for n in [64, 128, 256] {
            let x: Vec<f32> = (0..3 * n).map(|_| r()).collect();
            let mut y = x.clone();
            hadamard_rows(&mut y, n);
            let h = hadamard_matrix(n);
            for (row, got) in x.chunks(n).zip(y.chunks(n)) {
                for (i, g) in got.iter().enumerate() {
                    let want: f64 = (0..n).map(|j| h[i * n + j] as f64 * row[j] as f64).sum();
                    assert!((*g as f64 - want).abs() < 1e-5, "n={n} i={i}: {g} vs {want}");
                }
            }
            assert_ne!(x, y);
            hadamard_rows(&mut y, n);
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() < 1e-5, "n={n}: not its own inverse");
            }
        }
    }

    /// A prompt's rows over a quantized cache (tiles of rows, [`attend_one_chunk_tiled`])
    /// give each row what it gets alone (one row, [`attend_one_chunk`]), bit for bit —
    /// Q8_0 and mixed K/V types, with and without a window, from a non-zero first position.
    #[test]
    fn one_chunk_rows_in_tiles_equal_each_row_alone() {
        let mut seed = 11u32;
        let mut r = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        };
        let heads = Heads { n_head: 4, n_head_kv: 2, head_k: 64, head_v: 64 };
        let (p0, n, n_ctx) = (5usize, 150usize, 200usize);
        let pool = Pool::new(2);
        for (kt, vt) in
            [(CacheType::Q8_0, CacheType::Q8_0), (CacheType::F16, CacheType::Q8_0), (CacheType::Q8_0, CacheType::F16)]
        {
            let mut kc = CacheMatrix::new(kt, n_ctx, 128).unwrap();
            let mut vc = CacheMatrix::new(vt, n_ctx, 128).unwrap();
            for pos in 0..p0 + n {
                kc.write(pos, &(0..128).map(|_| r() * 3.0).collect::<Vec<_>>());
                vc.write(pos, &(0..128).map(|_| r()).collect::<Vec<_>>());
            }
            let q: Vec<f32> = (0..n * 4 * 64).map(|_| r()).collect();
            for window in [None, Some(70)] {
                let all = [SeqView { row0: 0, n, pos0: p0, k: &kc, v: &vc }];
                let mut o = vec![0f32; n * 4 * 64];
                attend(&pool, heads, &all, &q, 0.125, window, &mut o);
                for t in [0, 1, 63, 64, 100, n - 1] {
                    let one = [SeqView { row0: 0, n: 1, pos0: p0 + t, k: &kc, v: &vc }];
                    let mut o1 = vec![0f32; 4 * 64];
                    attend(&pool, heads, &one, &q[t * 256..(t + 1) * 256], 0.125, window, &mut o1);
                    let got: Vec<u32> = o[t * 256..(t + 1) * 256].iter().map(|x| x.to_bits()).collect();
                    let want: Vec<u32> = o1.iter().map(|x| x.to_bits()).collect();
                    assert_eq!(got, want, "{kt:?}/{vt:?} window {window:?} row {t}");
                    assert!(o1.iter().all(|x| x.is_finite()));
                }
            }
        }
    }

    #[test]
    fn caches_are_rotated_as_llama_cpp_rotates_them() {
        let k = |h| cache_rotation(CacheType::Q8_0, h, true);
        let v = |h| cache_rotation(CacheType::Q8_0, h, false);
        assert_eq!(
            [k(64), k(128), k(192), k(256), k(96), k(32)],
            [Some(64), Some(128), Some(64), Some(256), None, None]
        );
        assert_eq!([v(64), v(128), v(256), v(96)], [Some(64), Some(64), Some(64), None]);
        assert_eq!(cache_rotation(CacheType::F16, 128, true), None);
        assert_eq!(cache_rotation(CacheType::F32, 64, false), None);
    }
}
