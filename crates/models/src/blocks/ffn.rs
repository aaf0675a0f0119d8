//! Feed-forward blocks: the gated FFN ([`GatedFfn`]), top-k mixtures of experts ([`Moe`])
//! over stacked expert tensors ([`Experts`]), and [`Ffn`], either one.

use std::sync::Arc;

use gguf_format::SplitGguf;
use quant_kernels::{matmul_expert, ops, Matrix};

use super::{add_bias, dump, Linear, Pass, RowLayout};
use crate::loader::{Loader, TensorRef};
use crate::{Error, Result};

/// FFN activation of a gated FFN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `silu(gate) * up`.
    Silu,
    /// `gelu(gate) * up` (tanh approximation, as ggml).
    Gelu,
    /// gpt-oss's clamped SwiGLU (ggml's `swiglu_oai`, α = 1.702, limit 7 as llama.cpp
    /// fixes them): `x = min(gate, 7)`, `y = clamp(up, -7, 7)`, `x / (1 + e^(-α·x)) · (y + 1)`.
    SwigluOai,
}

/// α of [`Activation::SwigluOai`] (llama.cpp's `LLM_FFN_SWIGLU_OAI_MOE`).
const OAI_ALPHA: f32 = 1.702;
/// The clamp of [`Activation::SwigluOai`].
const OAI_LIMIT: f32 = 7.0;

impl Activation {
    /// `gate = act(gate) * up`, element-wise.
    pub fn apply(self, gate: &mut [f32], up: &[f32]) {
        match self {
            Activation::Silu => ops::silu_mul_inplace(gate, up),
            Activation::Gelu => ops::gelu_mul_inplace(gate, up),
            Activation::SwigluOai => {
                // ggml_compute_forward_swiglu_oai_f32: scalar, libm expf
                for (g, &u) in gate.iter_mut().zip(up) {
                    let x = if OAI_LIMIT < *g { OAI_LIMIT } else { *g };
                    let y = u.clamp(-OAI_LIMIT, OAI_LIMIT); // std::clamp for any non-NaN
                    let glu = x / (1.0 + (OAI_ALPHA * -x).exp());
                    *g = glu * (y + 1.0);
                }
            }
        }
    }
}

/// How a [`Moe`] router turns its logits into expert weights (llama.cpp's
/// `llama_expert_gating_func_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over every expert's logit, then the top k (`SOFTMAX`).
    Softmax,
    /// The top k of the raw logits, then a softmax over those k (`SOFTMAX_WEIGHT`: gpt-oss).
    SoftmaxWeight,
    /// A sigmoid of every logit (`SIGMOID`: GLM-4.5, DeepSeek-V3); the top k chosen on
    /// the sigmoids plus the router's selection bias ([`Moe::selection_bias`]), weighted
    /// by the unbiased sigmoids.
    Sigmoid,
}

impl Gating {
    /// The file's `expert_gating_func` (llama.cpp's `llama_expert_gating_func_type`: 1
    /// softmax, 2 sigmoid, 3 softmax_weight; 0 or absent: `default`, or an error naming
    /// the key when `default` is `None`, for families that require it).
    pub fn read(ld: &Loader<'_>, default: Option<Gating>) -> Result<Gating> {
        let key = "expert_gating_func";
        match (ld.opt_u32(key)?.unwrap_or(0), default) {
            (1, _) => Ok(Gating::Softmax),
            (2, _) => Ok(Gating::Sigmoid),
            (3, _) => Ok(Gating::SoftmaxWeight),
            (0, Some(g)) => Ok(g),
            (0, None) => Err(Error::MissingKey(ld.key(key))),
            (g, _) => Err(Error::BadKey {
                key: ld.key(key),
                msg: format!("gating function {g} (supported: 1 softmax, 2 sigmoid, 3 softmax_weight)"),
            }),
        }
    }
}

/// `down(act(gate(x)) * up(x))` with optional biases (llama.cpp's `build_ffn` with
/// `LLM_FFN_PAR`).
pub struct GatedFfn {
    /// Gate projection.
    pub gate: Linear,
    /// Up projection.
    pub up: Linear,
    /// Down projection.
    pub down: Linear,
    /// The gate's activation.
    pub act: Activation,
    /// Gate and up in one matrix (phi3's `ffn_up`, `2·n_ff` rows: the gate's first): when
    /// set, one product computes both (llama.cpp's `ggml_swiglu` of one tensor), and
    /// `gate`/`up` are views of its halves.
    pub fused: Option<Box<Linear>>,
}

/// Scratch of an FFN, kept across layers and passes.
#[derive(Default)]
pub struct FfnScratch {
    gate: Vec<f32>,
    up: Vec<f32>,
    part: Vec<f32>,
}

impl GatedFfn {
    /// Layer `il`'s `ffn_gate` / `ffn_up` / `ffn_down` of `n_ff` hidden units.
    pub fn load(ld: &Loader<'_>, il: usize, n_embd: usize, n_ff: usize, act: Activation) -> Result<GatedFfn> {
        let n = |s: &str| format!("blk.{il}.{s}");
        Ok(GatedFfn {
            gate: Linear::load(ld, &n("ffn_gate"), n_embd, n_ff)?,
            up: Linear::load(ld, &n("ffn_up"), n_embd, n_ff)?,
            down: Linear::load(ld, &n("ffn_down"), n_ff, n_embd)?,
            act,
            fused: None,
        })
    }

    /// Layer `il`'s FFN with gate and up fused into `ffn_up` (`[n_embd, 2·n_ff]`, gate
    /// rows first, no `ffn_gate`), and `ffn_down`.
    pub fn load_fused(ld: &Loader<'_>, il: usize, n_embd: usize, n_ff: usize, act: Activation) -> Result<GatedFfn> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let fused = Linear::load(ld, &n("ffn_up"), n_embd, 2 * n_ff)?;
        if fused.bias().is_some() {
            return Err(Error::Unsupported(format!("a bias on the fused `{}` is not supported", n("ffn_up.weight"))));
        }
        Ok(GatedFfn {
            gate: fused.rows_view(0, n_ff)?,
            up: fused.rows_view(n_ff, n_ff)?,
            down: Linear::load(ld, &n("ffn_down"), n_ff, n_embd)?,
            act,
            fused: Some(Box::new(fused)),
        })
    }

    /// Repacks the three projections (or the fused one and down) where a kernel wants them
    /// repacked.
    pub fn repack(&mut self) -> Result<()> {
        if let Some(f) = &mut self.fused {
            f.repack()?;
            self.down.repack()?;
            return Ok(());
        }
        for l in [&mut self.gate, &mut self.up, &mut self.down] {
            l.repack()?;
        }
        Ok(())
    }

    /// The FFN of every row of the pass; `il` names the dumps.
    pub fn forward(
        &self,
        pass: &Pass<'_>,
        il: usize,
        h: &[f32],
        sc: &mut FfnScratch,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let FfnScratch { gate, up, part } = sc;
        if let Some(f) = &self.fused {
            f.forward(pass, h, part)?;
            let ff = self.gate.rows();
            let n = pass.rows.n_rows();
            gate.resize(n * ff, 0.0);
            up.resize(n * ff, 0.0);
            for (r, row) in part[..n * 2 * ff].chunks_exact(2 * ff).enumerate() {
                gate[r * ff..(r + 1) * ff].copy_from_slice(&row[..ff]);
                up[r * ff..(r + 1) * ff].copy_from_slice(&row[ff..]);
            }
        } else {
            Linear::forward_group(pass, h, &mut [(&self.gate, gate), (&self.up, up)])?;
        }
        dump(&format!("ffn_gate-{il}"), gate);
        dump(&format!("ffn_up-{il}"), up);
        let ff = self.gate.rows();
        // per row, as ggml's glu ops (a row's vector tail is its own)
        pass.pool.for_rows(gate, ff, &|r0, run| {
            for (g, u) in run.chunks_exact_mut(ff).zip(up[r0 * ff..].chunks_exact(ff)) {
                self.act.apply(g, u);
            }
        });
        dump(&format!("ffn_act-{il}"), gate);
        self.down.forward(pass, gate, out)
    }
}

/// A stacked expert tensor (`ffn_{gate,up,down}_exps`: `[cols, rows, n_expert]`), each
/// expert's matrix read in place, with its optional per-expert bias (`[rows, n_expert]`)
/// and per-expert output scale (`….scale`, `[n_expert]`: llama.cpp's `build_lora_mm_id`
/// multiplies the expert's product by it, one rounding).
pub struct Experts {
    file: Arc<SplitGguf>,
    weight: TensorRef,
    n_expert: usize,
    bias: Option<Vec<f32>>,
    scale: Option<Vec<f32>>,
}

impl Experts {
    /// The tensor `name` (`….weight`) of `n_expert` matrices of `[cols, rows]`, and its
    /// `….bias` and `….scale` where the file has them.
    pub fn load(ld: &Loader<'_>, name: &str, cols: usize, rows: usize, n_expert: usize) -> Result<Experts> {
        let weight = ld.tensor(name, &[cols as u64, rows as u64, n_expert as u64])?;
        let stem = name.strip_suffix(".weight").unwrap_or(name);
        let bias = ld.opt_floats(&format!("{stem}.bias"), &[rows as u64, n_expert as u64])?;
        let scale = ld.opt_vector(&format!("{stem}.scale"), n_expert as u64)?;
        let ex = Experts { file: ld.shared()?, weight, n_expert, bias, scale };
        ex.matrix(0)?;
        Ok(ex)
    }

    /// Expert `e`'s bias, if the tensor has biases.
    pub fn bias(&self, e: usize) -> Option<&[f32]> {
        let b = self.bias.as_deref()?;
        let rows = b.len() / self.n_expert;
        Some(&b[e * rows..(e + 1) * rows])
    }

    /// Expert `e`'s output scale, if the tensor has scales.
    pub fn scale(&self, e: usize) -> Option<f32> {
        self.scale.as_ref().map(|s| s[e])
    }

    /// Expert `e`'s matrix.
    pub fn matrix(&self, e: usize) -> Result<Matrix<'_>> {
        let t = &self.weight;
        let per = t.len / self.n_expert;
        let rows = t.dims[1] as usize;
        let data = &t.data(&self.file)[e * per..(e + 1) * per];
        Ok(Matrix::new(t.type_id, data, rows, t.cols())?)
    }

    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.weight.name
    }

    /// `y = x·W_eᵀ` for the `m` rows of `x`, then the expert's bias and scale, in
    /// llama.cpp's order (`MUL_MAT_ID`, then `ggml_mul` by the scale, then the bias:
    /// `build_moe_ffn`'s `ggml_add_id` comes after `build_lora_mm_id`).
    fn forward(&self, pass: &Pass<'_>, e: usize, x: &[f32], m: usize, y: &mut Vec<f32>) -> Result<()> {
        let w = self.matrix(e)?;
        y.resize(m * w.rows(), 0.0);
        matmul_expert(pass.pool, &w, x, m, y)?;
        if let Some(s) = self.scale(e) {
            y.iter_mut().for_each(|v| *v *= s);
        }
        add_bias(y, self.bias(e));
        Ok(())
    }
}

/// The gate and up projections of a [`Moe`]'s experts: two stacked tensors, or one
/// (`ffn_gate_up_exps`, `[n_embd, 2·n_ff, n_expert]`, each expert's gate rows first —
/// Gemma 4's `experts.gate_up_proj`), one product for both.
pub enum GateUp {
    /// `ffn_gate_exps` and `ffn_up_exps`.
    Split {
        /// Gate projections.
        gate: Experts,
        /// Up projections.
        up: Experts,
    },
    /// `ffn_gate_up_exps`.
    Fused(Experts),
}

impl GateUp {
    /// Layer `il`'s `ffn_gate_up_exps` where the file has it, else `ffn_gate_exps` and
    /// `ffn_up_exps` (llama.cpp's loaders take the fused tensor first).
    pub fn load(ld: &Loader<'_>, il: usize, n_embd: usize, n_ff: usize, n_expert: usize) -> Result<GateUp> {
        let n = |s: &str| format!("blk.{il}.{s}");
        if ld.has(&n("ffn_gate_up_exps.weight")) {
            return Ok(GateUp::Fused(Experts::load(ld, &n("ffn_gate_up_exps.weight"), n_embd, 2 * n_ff, n_expert)?));
        }
        Ok(GateUp::Split {
            gate: Experts::load(ld, &n("ffn_gate_exps.weight"), n_embd, n_ff, n_expert)?,
            up: Experts::load(ld, &n("ffn_up_exps.weight"), n_embd, n_ff, n_expert)?,
        })
    }

    fn n_expert(&self) -> usize {
        match self {
            GateUp::Split { gate, .. } | GateUp::Fused(gate) => gate.n_expert,
        }
    }

    /// The tensors whose input is the experts' input (for an observer).
    fn tensors(&self) -> Vec<&Experts> {
        match self {
            GateUp::Split { gate, up } => vec![gate, up],
            GateUp::Fused(gu) => vec![gu],
        }
    }

    /// Expert `e`'s gate and up outputs for the `m` rows of `x` into `g` and `u` (`gu`:
    /// scratch of the fused product).
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        pass: &Pass<'_>,
        e: usize,
        x: &[f32],
        m: usize,
        g: &mut Vec<f32>,
        u: &mut Vec<f32>,
        gu: &mut Vec<f32>,
    ) -> Result<()> {
        match self {
            GateUp::Split { gate, up } => {
                gate.forward(pass, e, x, m, g)?;
                up.forward(pass, e, x, m, u)
            }
            GateUp::Fused(t) => {
                t.forward(pass, e, x, m, gu)?;
                let ff = gu.len() / m / 2;
                g.resize(m * ff, 0.0);
                u.resize(m * ff, 0.0);
                for (r, row) in gu.chunks_exact(2 * ff).enumerate() {
                    g[r * ff..(r + 1) * ff].copy_from_slice(&row[..ff]);
                    u[r * ff..(r + 1) * ff].copy_from_slice(&row[ff..]);
                }
                Ok(())
            }
        }
    }
}

/// A top-k mixture of gated experts with a softmax router (llama.cpp's `build_moe_ffn`
/// with `LLM_EXPERT_GATING_FUNC_SOFTMAX`): per token, softmax over the router's logits,
/// the `n_used` largest (ties to the lower index), optionally renormalized and scaled;
/// the experts' outputs weighted and summed in slot order. Each routing group of a pass
/// is routed on its own: a sequence (so a sequence's experts never see another's rows),
/// or a whole llama.cpp ubatch ([`crate::Model::forward_ubatch`], one `MUL_MAT_ID`).
pub struct Moe {
    /// `ffn_gate_inp`: hidden → expert logits.
    pub router: Linear,
    /// Gate and up projections of the experts.
    pub gate_up: GateUp,
    /// Down projections.
    pub down: Experts,
    /// Experts per token.
    pub n_used: usize,
    /// Normalize the top-k weights to sum to one.
    pub norm_weights: bool,
    /// Scale of the expert weights (1 = none).
    pub weights_scale: f32,
    /// The experts' activation.
    pub act: Activation,
    /// How the router's logits become weights.
    pub gating: Gating,
    /// Added to the probabilities for choosing the experts only (`exp_probs_b.bias`,
    /// DeepSeek-V3's correction bias), not to their weights.
    pub selection_bias: Option<Vec<f32>>,
    /// Group-limited routing `(groups, used)` (DeepSeek-V3's `expert_group_count` /
    /// `expert_group_used_count`): the experts, in `groups` equal runs, are chosen only
    /// from the `used` groups whose two best selection scores sum highest ([`mask_groups`]).
    pub groups: Option<(usize, usize)>,
}

/// Masks (to −∞) every expert outside the `n_used` best of `n_groups` equal groups of
/// `sel` (one token's selection scores), a group's score the sum of its two largest — the
/// `n_expert_groups > 1` step of llama.cpp's `build_moe_ffn` (`ggml_argsort_top_k` of 2,
/// `ggml_sum_rows`, top `n_group_used`; ties to the lower index).
pub fn mask_groups(sel: &mut [f32], n_groups: usize, n_used: usize) {
    let per = sel.len() / n_groups;
    let score: Vec<f32> = sel
        .chunks_exact(per)
        .map(|g| {
            let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
            for &x in g {
                if x > a {
                    (a, b) = (x, a);
                } else if x > b {
                    b = x;
                }
            }
            // ggml_sum_rows accumulates in f64: one rounding of the exact sum
            (a as f64 + b as f64) as f32
        })
        .collect();
    let mut order: Vec<usize> = (0..n_groups).collect();
    order.sort_by(|&x, &y| score[y].total_cmp(&score[x]).then(x.cmp(&y)));
    for &g in &order[n_used.min(n_groups)..] {
        sel[g * per..(g + 1) * per].fill(f32::NEG_INFINITY);
    }
}

impl Moe {
    /// Layer `il`'s router `ffn_gate_inp` and experts `ffn_{gate,up,down}_exps` (or
    /// `ffn_gate_up_exps` and `ffn_down_exps`) of `n_ff` hidden units each, with their
    /// biases (gpt-oss) and scales where the file has them.
    pub fn load(ld: &Loader<'_>, il: usize, n_embd: usize, n_ff: usize, n_expert: usize, n_used: usize) -> Result<Moe> {
        let n = |s: &str| format!("blk.{il}.{s}");
        if n_expert == 0 || n_used == 0 || n_used > n_expert {
            return Err(Error::Invalid(format!("{n_used} experts used of {n_expert}")));
        }
        let router = ld.tensor(&n("ffn_gate_inp.weight"), &[n_embd as u64, n_expert as u64])?;
        let router_bias = ld.opt_vector(&n("ffn_gate_inp.bias"), n_expert as u64)?;
        Ok(Moe {
            router: Linear::new(ld.shared()?, router, router_bias)?,
            gate_up: GateUp::load(ld, il, n_embd, n_ff, n_expert)?,
            down: Experts::load(ld, &n("ffn_down_exps.weight"), n_ff, n_embd, n_expert)?,
            n_used,
            norm_weights: true,
            weights_scale: 1.0,
            act: Activation::Silu,
            gating: Gating::Softmax,
            selection_bias: ld.opt_vector(&n("exp_probs_b.bias"), n_expert as u64)?,
            groups: None,
        })
    }

    /// The experts' output for the `n` rows of `h` of one routing group.
    pub fn forward_seq(&self, pass: &Pass<'_>, h: &[f32], n: usize, out: &mut Vec<f32>) -> Result<()> {
        let rows = RowLayout::one(n);
        let mut logits = Vec::new();
        self.router.forward(&pass.with_rows(&rows), h, &mut logits)?;
        self.forward_routed(pass, h, &mut logits, n, out)
    }

    /// [`Moe::forward_seq`] with the router's logits given (`n` rows of `n_expert`,
    /// overwritten): for families whose router reads another input than the experts
    /// (Gemma 4 routes on a scaled RMS norm of the residual).
    pub fn forward_routed(
        &self,
        pass: &Pass<'_>,
        h: &[f32],
        logits: &mut [f32],
        n: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let rows = RowLayout::one(n);
        let pass = pass.with_rows(&rows);
        let ne = self.gate_up.n_expert();
        let (e, k) = (self.router.cols(), self.n_used);
        if logits.len() != n * ne {
            return Err(Error::Invalid(format!("{} router logits for {n} rows of {ne} experts", logits.len())));
        }
        // Route: softmax over experts (or over the chosen ones), top-k, optional
        // renormalization and scale.
        let mut routes: Vec<Vec<(usize, f32)>> = vec![Vec::new(); ne];
        let mut idx: Vec<usize> = Vec::with_capacity(ne);
        let mut sel_probs: Vec<f32> = Vec::with_capacity(ne);
        for t in 0..n {
            let p = &mut logits[t * ne..(t + 1) * ne];
            match self.gating {
                Gating::Softmax => ops::softmax_inplace(p),
                Gating::Sigmoid => p.iter_mut().for_each(|x| *x = super::sigmoid(*x)),
                Gating::SoftmaxWeight => {}
            }
            let chosen: &[f32] = match (&self.selection_bias, self.groups) {
                (None, None) => p,
                (b, groups) => {
                    sel_probs.clear();
                    match b {
                        Some(b) => sel_probs.extend(p.iter().zip(b).map(|(x, y)| x + y)),
                        None => sel_probs.extend_from_slice(p),
                    }
                    if let Some((n_groups, n_used)) = groups {
                        mask_groups(&mut sel_probs, n_groups, n_used);
                    }
                    &sel_probs
                }
            };
            idx.clear();
            idx.extend(0..ne);
            idx.sort_by(|&a, &b| chosen[b].total_cmp(&chosen[a]).then(a.cmp(&b)));
            let sel = &idx[..k];
            let mut w: Vec<f32> = sel.iter().map(|&i| p[i]).collect();
            if self.gating == Gating::SoftmaxWeight {
                ops::softmax_inplace(&mut w);
            }
            if self.norm_weights {
                // ggml_sum_rows (f64 accumulation), clamped to the smallest normal f16.
                let sum = (w.iter().map(|&x| x as f64).sum::<f64>() as f32).max(6.103_515_6e-5);
                for x in w.iter_mut() {
                    *x /= sum;
                }
            }
            if self.weights_scale != 0.0 && self.weights_scale != 1.0 {
                for x in w.iter_mut() {
                    *x *= self.weights_scale;
                }
            }
            for (slot, (&ex, &wt)) in sel.iter().zip(&w).enumerate() {
                routes[ex].push((t * k + slot, wt));
            }
        }
        // Weighted expert outputs per (token, slot), summed in slot order afterwards as
        // llama.cpp's chain of ggml_add does.
        let mut weighted = vec![0f32; n * k * e];
        let (mut xs, mut g, mut u, mut gu, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (ex, toks) in routes.iter().enumerate() {
            if toks.is_empty() {
                continue;
            }
            xs.clear();
            for &(ts, _) in toks {
                let t = ts / k;
                xs.extend_from_slice(&h[t * e..(t + 1) * e]);
            }
            let m = toks.len();
            // The observer sees the rows in llama.cpp's MUL_MAT_ID order: by slot, then token.
            let order: Vec<usize> = match &pass.observer {
                Some(_) => {
                    let mut v: Vec<usize> = (0..m).collect();
                    v.sort_by_key(|&r| (toks[r].0 % k, toks[r].0 / k));
                    v
                }
                None => Vec::new(),
            };
            let reorder = |rows: &[f32]| -> Vec<f32> {
                let w = rows.len() / m;
                order.iter().flat_map(|&r| rows[r * w..(r + 1) * w].iter().copied()).collect()
            };
            let slots: Vec<usize> = order.iter().map(|&r| toks[r].0 % k).collect();
            if let Some(o) = &pass.observer {
                let x = reorder(&xs);
                for t in self.gate_up.tensors() {
                    o.expert_matmul(t.name(), ex, ne, &x, &slots);
                }
            }
            self.gate_up.forward(&pass, ex, &xs, m, &mut g, &mut u, &mut gu)?;
            self.act.apply(&mut g, &u);
            if let Some(o) = &pass.observer {
                o.expert_matmul(self.down.name(), ex, ne, &reorder(&g), &slots);
            }
            self.down.forward(&pass, ex, &g, m, &mut d)?;
            for (r, &(ts, wt)) in toks.iter().enumerate() {
                for (o, s) in weighted[ts * e..(ts + 1) * e].iter_mut().zip(&d[r * e..(r + 1) * e]) {
                    *o = s * wt;
                }
            }
        }
        out.clear();
        out.resize(n * e, 0.0);
        for (t, o) in out.chunks_exact_mut(e).enumerate() {
            o.copy_from_slice(&weighted[t * k * e..][..e]);
            for slot in 1..k {
                for (o, w) in o.iter_mut().zip(&weighted[(t * k + slot) * e..][..e]) {
                    *o += w;
                }
            }
        }
        Ok(())
    }
}

/// A layer's FFN: dense or experts.
pub enum Ffn {
    /// One gated FFN for every token.
    Dense(GatedFfn),
    /// Routed experts.
    Moe(Moe),
}

impl Ffn {
    /// The FFN of every row of the pass into `out`; `seqs` holds each routing group's
    /// `(first row, rows)` (a sequence, or the whole ubatch; experts are routed per group).
    pub fn forward(
        &self,
        pass: &Pass<'_>,
        il: usize,
        h: &[f32],
        seqs: &[(usize, usize)],
        sc: &mut FfnScratch,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        match self {
            Ffn::Dense(f) => f.forward(pass, il, h, sc, out),
            Ffn::Moe(m) => {
                let e = m.router.cols();
                out.resize(pass.rows.n_rows() * e, 0.0);
                for &(r0, n) in seqs {
                    m.forward_seq(pass, &h[r0 * e..(r0 + n) * e], n, &mut sc.part)?;
                    out[r0 * e..(r0 + n) * e].copy_from_slice(&sc.part);
                }
                Ok(())
            }
        }
    }

    /// Repacks a dense FFN's projections (experts stay as stored).
    pub fn repack(&mut self) -> Result<()> {
        match self {
            Ffn::Dense(f) => f.repack(),
            Ffn::Moe(_) => Ok(()),
        }
    }
}
