//! Multi-head latent attention (DeepSeek-V2/V3's MLA) with the absorption llama.cpp uses
//! (`src/models/deepseek2.cpp`, `build_attn` with `llm_graph_input_attn_k`): keys and
//! values share one compressed cache row per token — the RMS-normed latent `kv_cmpr`
//! (`kv_lora_rank` wide) followed by the roped `k_pe` (`n_rot` wide) — and each query head
//! is carried into the latent space by its slice of `attn_k_b`, so attention is MQA over
//! that one row (the values are the row's first `kv_lora_rank` elements) and each head's
//! output is carried back out by its slice of `attn_v_b` before `attn_output`.

use super::{attend_with, dump, temperature, Heads, Linear, Pass, RmsNorm, Scores, SeqKv, SeqView};
use crate::loader::Loader;
use crate::rope::Rope;
use crate::{Error, Result};

/// The widths of one MLA layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlaDims {
    /// Query heads.
    pub n_head: usize,
    /// Rank of the query compression (`attention.q_lora_rank`); 0: a direct `attn_q`.
    pub q_lora: usize,
    /// Rank of the KV compression (`attention.kv_lora_rank`): the latent width.
    pub kv_lora: usize,
    /// The part of a query/key head without rope (`key_length_mla − n_rot`).
    pub qk_nope: usize,
    /// The roped part of a query/key head (`rope.dimension_count`).
    pub n_rot: usize,
    /// Width of a value head after decompression (`value_length_mla`).
    pub head_v: usize,
}

impl MlaDims {
    /// One cache row: the latent, then the roped key part.
    pub fn cache_width(&self) -> usize {
        self.kv_lora + self.n_rot
    }

    /// The attention as llama.cpp runs it: MQA with one KV head of the cache row.
    pub fn heads(&self) -> Heads {
        Heads { n_head: self.n_head, n_head_kv: 1, head_k: self.cache_width(), head_v: self.kv_lora }
    }
}

/// The query projection: direct, or through the compressed rank with its norm.
enum QProj {
    Direct(Linear),
    Lora(Box<(Linear, RmsNorm, Linear)>),
}

/// One MLA layer (see the module docs).
pub struct Mla {
    /// Widths.
    pub dims: MlaDims,
    q: QProj,
    /// `attn_kv_a_mqa`: hidden → latent and roped key part.
    pub wkv_a: Linear,
    /// `attn_kv_a_norm`, over the latent.
    pub kv_a_norm: RmsNorm,
    /// `attn_k_b`, one `kv_lora × qk_nope` matrix per head (read in place: llama.cpp does
    /// not repack 3-D weights).
    pub wk_b: Vec<Linear>,
    /// `attn_v_b`, one `head_v × kv_lora` matrix per head.
    pub wv_b: Vec<Linear>,
    /// `attn_output`.
    pub wo: Linear,
    /// The rope of `q_pe` and `k_pe`.
    pub rope: Rope,
    /// The score scale (deepseek2's YaRN-adjusted `mscale² / √key_length_mla`).
    pub scale: f32,
    /// Llama 4's attention temperature `(β, L)` on the queries (mistral-large files).
    pub temperature: Option<(f32, u32)>,
}

/// The scratch of [`Mla::forward`], kept across layers and passes.
#[derive(Default)]
pub struct MlaScratch {
    q: Vec<f32>,
    kvpe: Vec<f32>,
    kv: Vec<f32>,
    k: Vec<f32>,
    qc: Vec<f32>,
    o: Vec<f32>,
    vo: Vec<f32>,
    xs: Vec<f32>,
    ys: Vec<f32>,
    tmp: Vec<f32>,
    rc: Vec<f32>,
}

/// A stacked per-head tensor `name` (`[cols, rows, n_head]`) as one `Linear` per head.
fn per_head(ld: &Loader<'_>, name: &str, cols: usize, rows: usize, n_head: usize) -> Result<Vec<Linear>> {
    let mut t = ld.tensor(name, &[cols as u64, rows as u64, n_head as u64])?;
    t.dims = vec![cols as u64, (rows * n_head) as u64];
    let all = Linear::new(ld.shared()?, t, None)?;
    (0..n_head).map(|h| all.rows_view(h * rows, rows)).collect()
}

impl Mla {
    /// Layer `il`'s MLA tensors as llama.cpp names them: `attn_q` (when `q_lora` is 0) or
    /// `attn_q_a` / `attn_q_a_norm` / `attn_q_b`, `attn_kv_a_mqa`, `attn_kv_a_norm`,
    /// `attn_k_b`, `attn_v_b`, `attn_output`; the 2-D ones repacked where a kernel wants
    /// them. The scale and temperature are the family's: set them after.
    pub fn load(ld: &Loader<'_>, il: usize, n_embd: usize, dims: MlaDims, eps: f32, rope: Rope) -> Result<Mla> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let MlaDims { n_head, q_lora, kv_lora, qk_nope, n_rot, head_v } = dims;
        if n_head == 0 || kv_lora == 0 || qk_nope == 0 || head_v == 0 || rope.n_rot != n_rot {
            return Err(Error::Invalid(format!("MLA layer {il}: widths {dims:?} (rope dims {})", rope.n_rot)));
        }
        let qd = n_head * (qk_nope + n_rot);
        let mut q = if q_lora == 0 {
            QProj::Direct(Linear::load(ld, &n("attn_q"), n_embd, qd)?)
        } else {
            QProj::Lora(Box::new((
                Linear::load(ld, &n("attn_q_a"), n_embd, q_lora)?,
                RmsNorm::load(ld, &n("attn_q_a_norm.weight"), q_lora, eps)?,
                Linear::load(ld, &n("attn_q_b"), q_lora, qd)?,
            )))
        };
        match &mut q {
            QProj::Direct(w) => {
                w.repack()?;
            }
            QProj::Lora(l) => {
                l.0.repack()?;
                l.2.repack()?;
            }
        }
        let mut wkv_a = Linear::load(ld, &n("attn_kv_a_mqa"), n_embd, kv_lora + n_rot)?;
        wkv_a.repack()?;
        let mut wo = Linear::load(ld, &n("attn_output"), n_head * head_v, n_embd)?;
        wo.repack()?;
        Ok(Mla {
            dims,
            q,
            wkv_a,
            kv_a_norm: RmsNorm::load(ld, &n("attn_kv_a_norm.weight"), kv_lora, eps)?,
            wk_b: per_head(ld, &n("attn_k_b.weight"), qk_nope, kv_lora, n_head)?,
            wv_b: per_head(ld, &n("attn_v_b.weight"), kv_lora, head_v, n_head)?,
            wo,
            rope,
            scale: 1.0 / ((qk_nope + n_rot) as f32).sqrt(),
            temperature: None,
        })
    }

    /// `n` rows of `width` floats of `src` (row stride `stride`, from column `off`) into
    /// `dst`: one head's slice of every row, the input of its absorbed product.
    fn gather(src: &[f32], n: usize, stride: usize, off: usize, width: usize, dst: &mut Vec<f32>) {
        dst.clear();
        for r in 0..n {
            dst.extend_from_slice(&src[r * stride + off..][..width]);
        }
    }

    /// Attention of the normed input `h` (every row of the pass) into `out`: writes each
    /// sequence's cache rows (`seqs[i].k`, [`MlaDims::cache_width`] wide; `v` is not used)
    /// at their positions, attends over them, decompresses, projects. `il` names the dumps.
    pub fn forward(
        &self,
        pass: &Pass<'_>,
        il: usize,
        h: &[f32],
        seqs: &mut [SeqKv<'_>],
        sc: &mut MlaScratch,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let MlaDims { n_head: nh, kv_lora: r, qk_nope: dn, n_rot: dr, head_v: dv, .. } = self.dims;
        let (dk, cw) = (dn + dr, r + dr);
        let n = pass.rows.n_rows();
        let MlaScratch { q, kvpe, kv, k, qc, o, vo, xs, ys, tmp, rc } = sc;
        match &self.q {
            QProj::Direct(w) => w.forward(pass, h, q)?,
            QProj::Lora(l) => {
                l.0.forward(pass, h, ys)?;
                l.1.forward_inplace(ys, tmp);
                l.2.forward(pass, ys, q)?;
            }
        }
        dump(&format!("q-{il}"), q);
        self.wkv_a.forward(pass, h, kvpe)?;
        dump(&format!("kv_cmpr_pe-{il}"), kvpe);
        Self::gather(kvpe, n, cw, 0, r, kv);
        self.kv_a_norm.forward_inplace(kv, tmp);
        // the cache rows [kv_cmpr | rope(k_pe)] and the queries [absorbed q_nope | rope(q_pe)]
        k.resize(n * cw, 0.0);
        qc.resize(n * nh * cw, 0.0);
        for s in seqs.iter() {
            for t in 0..s.n {
                let row = s.row0 + t;
                self.rope.cache(s.pos0 + t, rc);
                let kr = &mut k[row * cw..(row + 1) * cw];
                kr[..r].copy_from_slice(&kv[row * r..(row + 1) * r]);
                kr[r..].copy_from_slice(&kvpe[row * cw + r..(row + 1) * cw]);
                self.rope.apply(rc, &mut kr[r..]);
                for hd in 0..nh {
                    let qh = &mut qc[(row * nh + hd) * cw..][..cw];
                    qh[r..].copy_from_slice(&q[(row * nh + hd) * dk + dn..][..dr]);
                    self.rope.apply(rc, &mut qh[r..]);
                }
            }
        }
        for (hd, wk) in self.wk_b.iter().enumerate() {
            Self::gather(q, n, nh * dk, hd * dk, dn, xs);
            wk.forward(pass, xs, ys)?;
            for (row, y) in ys.chunks_exact(r).enumerate() {
                qc[(row * nh + hd) * cw..][..r].copy_from_slice(y);
            }
        }
        if let Some((beta, len)) = self.temperature {
            for s in seqs.iter() {
                for t in 0..s.n {
                    let f = temperature(s.pos0 + t, beta, len);
                    let row = s.row0 + t;
                    qc[row * nh * cw..(row + 1) * nh * cw].iter_mut().for_each(|x| *x *= f);
                }
            }
        }
        dump(&format!("Qcur-{il}"), qc);
        dump(&format!("Kcur-{il}"), k);
        for s in seqs.iter_mut() {
            for t in 0..s.n {
                let row = s.row0 + t;
                s.k.write(s.pos0 + t, &k[row * cw..(row + 1) * cw]);
            }
        }
        let views: Vec<SeqView<'_>> =
            seqs.iter().map(|s| SeqView { row0: s.row0, n: s.n, pos0: s.pos0, k: &*s.k, v: &*s.k }).collect();
        o.resize(n * nh * r, 0.0);
        let scores = Scores { scale: self.scale, softcap: None, window: None, sinks: None };
        attend_with(pass.pool, self.dims.heads(), &views, qc, &scores, o);
        dump(&format!("fattn-{il}"), o);
        vo.resize(n * nh * dv, 0.0);
        for (hd, wv) in self.wv_b.iter().enumerate() {
            Self::gather(o, n, nh * r, hd * r, r, xs);
            wv.forward(pass, xs, ys)?;
            for (row, y) in ys.chunks_exact(dv).enumerate() {
                vo[(row * nh + hd) * dv..][..dv].copy_from_slice(y);
            }
        }
        dump(&format!("kqv_out-{il}"), vo);
        self.wo.forward(pass, vo, out)
    }

    /// Moves a cache row's roped part by the rope cache `rc` (a K shift): the latent is
    /// position-free.
    pub fn shift_row(&self, rc: &[f32], row: &mut [f32]) {
        let r = self.dims.kv_lora;
        self.rope.apply(rc, &mut row[r..r + self.dims.n_rot]);
    }
}
