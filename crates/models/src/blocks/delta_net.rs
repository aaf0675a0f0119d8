//! The gated delta net (Qwen3-Next / Qwen3.5 linear attention): [`DeltaNet`] — the input
//! projections, a short causal convolution over time with its per-sequence conv state,
//! L2-normed q and k, the gated delta rule with its per-sequence `S_v × S_v` state per
//! value head, the gated RMS norm and the output projection — as llama.cpp's
//! `build_layer_attn_linear` (`src/models/qwen35.cpp`, `delta-net-base.cpp`) builds it
//! and ggml-cpu computes it (`ggml_ssm_conv`, `ggml_gated_delta_net`, the fused op its
//! CPU backend takes for one token and for many).

use std::sync::Mutex;

use quant_kernels::ops::{self, DotLayout};
use quant_kernels::Pool;

use super::{dump, Linear, Pass, RmsNorm};
use crate::loader::Loader;
use crate::{Error, Result};

/// The widths of a delta-net layer (llama.cpp's `ssm_*` hyperparameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaNetDims {
    /// Embedding width.
    pub n_embd: usize,
    /// Convolution kernel length (`ssm.conv_kernel`).
    pub d_conv: usize,
    /// Key head width (`ssm.state_size`).
    pub head_k: usize,
    /// Key (and query) heads (`ssm.group_count`).
    pub n_k_heads: usize,
    /// Value heads (`ssm.time_step_rank`).
    pub n_v_heads: usize,
    /// Value head width (`ssm.inner_size / ssm.time_step_rank`).
    pub head_v: usize,
}

impl DeltaNetDims {
    /// `n_k_heads · head_k`.
    pub fn key_dim(&self) -> usize {
        self.n_k_heads * self.head_k
    }
    /// `n_v_heads · head_v` (`ssm.inner_size`).
    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.head_v
    }
    /// Channels of the convolution: q, k and v (`2·key_dim + value_dim`).
    pub fn conv_channels(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
    /// Floats of one sequence's recurrent state: the conv state (`d_conv − 1` past inputs
    /// per channel, llama.cpp's `n_embd_r`) plus one `head_v × head_v` matrix per value
    /// head (`n_embd_s`).
    pub fn state_floats(&self) -> usize {
        (self.d_conv - 1) * self.conv_channels() + self.n_v_heads * self.head_v * self.head_v
    }
}

/// One sequence's recurrent state in one delta-net layer (llama.cpp's `r` and `s` rows of
/// `llama_memory_recurrent`, f32 as its default types).
#[derive(Debug, Clone)]
pub struct RecurrentState {
    /// Per channel the last `d_conv − 1` convolution inputs, oldest first.
    pub conv: Vec<f32>,
    /// Per value head the state `M` (`M[j·S + i] = S[i][j]`, as ggml stores it).
    pub ssm: Vec<f32>,
}

impl RecurrentState {
    /// The empty state of a layer of `dims` (zeros, as llama.cpp clears a sequence).
    pub fn new(dims: &DeltaNetDims) -> RecurrentState {
        RecurrentState {
            conv: vec![0.0; (dims.d_conv - 1) * dims.conv_channels()],
            ssm: vec![0.0; dims.n_v_heads * dims.head_v * dims.head_v],
        }
    }

    /// Back to the empty state.
    pub fn clear(&mut self) {
        self.conv.fill(0.0);
        self.ssm.fill(0.0);
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        4 * (self.conv.len() + self.ssm.len())
    }
}

/// One sequence's rows in a pass and its layer state.
pub struct SeqRs<'a> {
    /// First row of the sequence in the pass.
    pub row0: usize,
    /// Its rows (consecutive tokens).
    pub n: usize,
    /// The layer's state of this sequence, advanced by the pass.
    pub state: &'a mut RecurrentState,
}

/// The scratch of [`DeltaNet::forward`], kept across layers and passes.
#[derive(Default)]
pub struct DeltaNetScratch {
    qkv: Vec<f32>,
    z: Vec<f32>,
    beta: Vec<f32>,
    g: Vec<f32>,
    conv: Vec<f32>,
    o: Vec<f32>,
    tmp: Vec<f32>,
}

/// A gated delta net layer (`blk.N.attn_qkv`, `attn_gate`, `ssm_beta`, `ssm_alpha`,
/// `ssm_dt.bias`, `ssm_a`, `ssm_conv1d`, `ssm_norm`, `ssm_out`).
pub struct DeltaNet {
    /// Widths.
    pub dims: DeltaNetDims,
    /// q, k and v in one product (`attn_qkv`, `[n_embd, 2·key_dim + value_dim]`).
    pub wqkv: Linear,
    /// The output gate z (`attn_gate`, `[n_embd, value_dim]`).
    pub wgate: Linear,
    /// β logits, one per value head (`ssm_beta`).
    pub wbeta: Linear,
    /// Decay logits, one per value head (`ssm_alpha`).
    pub walpha: Linear,
    /// Added to the decay logits before the softplus (`ssm_dt.bias`).
    pub dt_bias: Vec<f32>,
    /// `−exp(A_log)` per value head, as the converter stores it (`ssm_a`).
    pub a: Vec<f32>,
    /// The convolution kernel, `d_conv` taps per channel (`ssm_conv1d`).
    pub conv_kernel: Vec<f32>,
    /// RMSNorm of each value head's output before the gate (`ssm_norm`, `head_v` wide).
    pub norm: RmsNorm,
    /// Output projection (`ssm_out`, `[value_dim, n_embd]`).
    pub wo: Linear,
}

impl DeltaNet {
    /// Layer `il`'s tensors with llama.cpp's names and shapes (`llama_model_qwen35::
    /// load_arch_tensors`); `eps` is the model's RMS epsilon (the gated norm's and the L2
    /// norms').
    pub fn load(ld: &Loader<'_>, il: usize, dims: DeltaNetDims, eps: f32) -> Result<DeltaNet> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let DeltaNetDims { n_embd, d_conv, head_v, n_v_heads, .. } = dims;
        let ch = dims.conv_channels();
        let conv = ld.tensor(&n("ssm_conv1d.weight"), &[d_conv as u64, ch as u64])?;
        let traits = ggml_quants::lookup_id(conv.type_id)?;
        let conv_kernel = traits.dequantize_to_vec(conv.data(ld.file()))?;
        if let Some(i) = conv_kernel.iter().position(|x| !x.is_finite()) {
            return Err(Error::Invalid(format!("tensor `{}`: element {i} is not finite", conv.name)));
        }
        Ok(DeltaNet {
            dims,
            wqkv: Linear::load(ld, &n("attn_qkv"), n_embd, ch)?,
            wgate: Linear::load(ld, &n("attn_gate"), n_embd, dims.value_dim())?,
            wbeta: Linear::load(ld, &n("ssm_beta"), n_embd, n_v_heads)?,
            walpha: Linear::load(ld, &n("ssm_alpha"), n_embd, n_v_heads)?,
            dt_bias: ld.vector(&n("ssm_dt.bias"), n_v_heads as u64)?,
            a: ld.vector(&n("ssm_a"), n_v_heads as u64)?,
            conv_kernel,
            norm: RmsNorm::load(ld, &n("ssm_norm.weight"), head_v, eps)?,
            wo: Linear::load(ld, &n("ssm_out"), dims.value_dim(), n_embd)?,
        })
    }

    /// Repacks the projections where a kernel wants them repacked.
    pub fn repack(&mut self) -> Result<()> {
        for l in [&mut self.wqkv, &mut self.wgate, &mut self.wbeta, &mut self.walpha, &mut self.wo] {
            l.repack()?;
        }
        Ok(())
    }

    /// The layer over the normed input `h` (every row of the pass) into `out`; each
    /// sequence's rows advance its state. `il` names the dumps (llama.cpp's `cb` names).
    pub fn forward(
        &self,
        pass: &Pass<'_>,
        il: usize,
        h: &[f32],
        seqs: &mut [SeqRs<'_>],
        sc: &mut DeltaNetScratch,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let d = self.dims;
        let (ch, kd, vd, nv) = (d.conv_channels(), d.key_dim(), d.value_dim(), d.n_v_heads);
        let n_rows = pass.rows.n_rows();
        let DeltaNetScratch { qkv, z, beta, g, conv, o, tmp } = sc;
        self.wqkv.forward(pass, h, qkv)?;
        dump(&format!("linear_attn_qkv_mixed-{il}"), qkv);
        self.wgate.forward(pass, h, z)?;
        dump(&format!("z-{il}"), z);
        self.wbeta.forward(pass, h, beta)?;
        for b in beta.iter_mut() {
            *b = sigmoid(*b);
        }
        dump(&format!("beta_sigmoid-{il}"), beta);
        self.walpha.forward(pass, h, g)?;
        // ggml_add(alpha, ssm_dt) → ggml_softplus → ggml_mul(·, ssm_a)
        for row in g.chunks_exact_mut(nv) {
            for ((x, &dt), &a) in row.iter_mut().zip(&self.dt_bias).zip(&self.a) {
                *x = softplus(*x + dt) * a;
            }
        }
        dump(&format!("gate-{il}"), g);
        conv.resize(n_rows * ch, 0.0);
        for s in seqs.iter_mut() {
            let x = &qkv[s.row0 * ch..(s.row0 + s.n) * ch];
            causal_conv(pass.pool, &self.conv_kernel, ch, x, ch, s.n, &mut s.state.conv, &mut conv[s.row0 * ch..]);
        }
        dump(&format!("conv_output_raw-{il}"), conv);
        for row in conv.chunks_exact_mut(ch) {
            silu_inplace(row);
        }
        dump(&format!("conv_output_silu-{il}"), conv);
        // L2 norm of every q and k head: ggml_rms_norm(x, eps/n) then ggml_scale(1/√n)
        let hk = d.head_k;
        let l2_eps = self.norm.eps / hk as f32;
        let l2_scale = 1.0 / (hk as f32).sqrt();
        tmp.resize(hk, 0.0);
        for row in conv.chunks_exact_mut(ch) {
            for head in row[..2 * kd].chunks_exact_mut(hk) {
                ops::rms_norm(head, &[], l2_eps, tmp);
                for (x, &t) in head.iter_mut().zip(tmp.iter()) {
                    *x = t * l2_scale;
                }
            }
        }
        o.resize(n_rows * vd, 0.0);
        let layout = ops::native_dot_layout();
        for s in seqs.iter_mut() {
            let rows = s.row0..s.row0 + s.n;
            let (cv, gs, bs) = (&conv[rows.start * ch..rows.end * ch], &g[rows.start * nv..], &beta[rows.start * nv..]);
            let outs: Vec<Mutex<&mut [f32]>> =
                o[rows.start * vd..rows.end * vd].chunks_mut(d.head_v).map(Mutex::new).collect();
            let states: Vec<Mutex<&mut [f32]>> = s.state.ssm.chunks_mut(d.head_v * d.head_v).map(Mutex::new).collect();
            let n = s.n;
            pass.pool.for_each(nv, &|hv| {
                let mut st = states[hv].lock().unwrap_or_else(|e| e.into_inner());
                delta_rule_head(&d, hv, n, cv, gs, bs, &mut st, &outs, layout);
            });
        }
        dump(&format!("attn_output-{il}"), o);
        // gated norm: rms_norm(o)·ssm_norm · silu(z), per value head
        tmp.resize(d.head_v, 0.0);
        for (oh, zh) in o.chunks_exact_mut(d.head_v).zip(z.chunks_exact_mut(d.head_v)) {
            ops::rms_norm(oh, &self.norm.weight, self.norm.eps, tmp);
            silu_inplace(zh);
            for ((x, &t), &zz) in oh.iter_mut().zip(tmp.iter()).zip(zh.iter()) {
                *x = t * zz;
            }
        }
        dump(&format!("final_output-{il}"), o);
        self.wo.forward(pass, o, out)?;
        dump(&format!("linear_attn_out-{il}"), out);
        Ok(())
    }
}

/// How many of `ggml_ssm_conv`'s `k` taps the reference build sums without FMA. GCC 12
/// (`-O3 -march=native`, x86-64) vectorizes the tap loop `sumf += s[i]·c[i]` as an in-order
/// reduction: whole groups of 8 taps (when `k ≥ 8`) and then one group of 4 (when at least
/// 4 remain) as one `vmulps` of rounded products, each added to the sum in tap order; only
/// the last `k mod 4` taps are its scalar epilogue, where `-ffp-contract=fast` makes each a
/// `vfmadd231ss`. So d_conv 4 (Mamba-2, the gated delta net) has no FMA at all and d_conv 3
/// (LFM2) is all FMA (read from the reference's `ggml_compute_forward_ssm_conv` disassembly).
pub(crate) fn conv_plain_taps(k: usize) -> usize {
    let eights = if k >= 8 { k & !7 } else { 0 };
    let fours = if k - eights >= 4 { 4 } else { 0 };
    eights + fours
}

/// Channels per task of [`causal_conv`] (a multiple of every SIMD width, so a block's
/// piece of a row starts on a vector boundary).
const CONV_BLOCK: usize = 64;

/// `ggml_ssm_conv` of one sequence's `n` rows of `x` (row `t` at `x[t·stride..][..ch]`;
/// `kernel` holds `k = kernel.len() / ch` taps per channel) after its conv state `past`
/// (`k − 1` inputs per channel, oldest first), into the rows of `y` (`ch` wide); `past`
/// becomes the last `k − 1` inputs. Each output is ggml's `sumf += s·c` loop over the taps
/// as the reference build's GCC compiles it (`conv_plain_taps`): the first taps as rounded
/// products added in order, the rest one FMA chain — here per channel over all tokens at
/// once. Blocks of 64 channels run on the pool's threads, as ggml-cpu splits the op's rows;
/// no output depends on the split.
#[allow(clippy::too_many_arguments)]
pub fn causal_conv(
    pool: &Pool,
    kernel: &[f32],
    ch: usize,
    x: &[f32],
    stride: usize,
    n: usize,
    past: &mut [f32],
    y: &mut [f32],
) {
    if n == 0 || ch == 0 {
        return;
    }
    let k = kernel.len() / ch;
    let p = k.saturating_sub(1);
    let plain = conv_plain_taps(k);
    let nb = ch.div_ceil(CONV_BLOCK);
    let mut pieces: Vec<Vec<&mut [f32]>> = (0..nb).map(|_| Vec::with_capacity(n)).collect();
    for row in y[..n * ch].chunks_exact_mut(ch) {
        for (b, piece) in row.chunks_mut(CONV_BLOCK).enumerate() {
            pieces[b].push(piece);
        }
    }
    let mut states = Vec::with_capacity(nb);
    let mut rest = &mut past[..p * ch];
    for b in 0..nb {
        let nc = CONV_BLOCK.min(ch - b * CONV_BLOCK);
        let (head, tail) = rest.split_at_mut(nc * p);
        states.push(head);
        rest = tail;
    }
    // per block: its piece of every output row, its channels' state
    type Block<'a> = Mutex<(Vec<&'a mut [f32]>, &'a mut [f32])>;
    let blocks: Vec<Block<'_>> = pieces.into_iter().zip(states).map(Mutex::new).collect();
    pool.for_each(nb, &|b| {
        let mut guard = blocks[b].lock().unwrap_or_else(|e| e.into_inner());
        let (rows, state) = &mut *guard;
        let c0 = b * CONV_BLOCK;
        let mut win = vec![0f32; p + n];
        let mut acc = vec![0f32; n];
        for j in 0..rows[0].len() {
            let c = c0 + j;
            win[..p].copy_from_slice(&state[j * p..(j + 1) * p]);
            for (t, w) in win[p..].iter_mut().enumerate() {
                *w = x[t * stride + c];
            }
            acc.fill(0.0);
            for (i, &wi) in kernel[c * k..(c + 1) * k].iter().enumerate() {
                if i < plain {
                    for (a, &xi) in acc.iter_mut().zip(&win[i..i + n]) {
                        *a += xi * wi;
                    }
                } else {
                    ops::mad_f32(&mut acc, wi, &win[i..i + n]);
                }
            }
            for (row, &v) in rows.iter_mut().zip(&acc) {
                row[j] = v;
            }
            state[j * p..(j + 1) * p].copy_from_slice(&win[n..n + p]);
        }
    });
}

/// The gated delta rule of value head `hv` over `n` tokens (`ggml_compute_forward_gated_
/// delta_net_one_chunk`): per token `M ← M·e^g`, `δ_j = (v_j − M_j·k)·β`, `M_j += δ_j·k`,
/// `o_j = (M_j·q) / √S` — with ggml's `vec_dot_f32` (of the native build's lanes), fused
/// `vec_mad_f32` and `vec_scale_f32`. Value head `hv` reads q/k head `hv mod n_k_heads`.
#[allow(clippy::too_many_arguments)]
fn delta_rule_head(
    d: &DeltaNetDims,
    hv: usize,
    n: usize,
    conv: &[f32],
    g: &[f32],
    beta: &[f32],
    m: &mut [f32],
    outs: &[Mutex<&mut [f32]>],
    layout: DotLayout,
) {
    let (ch, kd, sv, nv) = (d.conv_channels(), d.key_dim(), d.head_v, d.n_v_heads);
    let hk = hv % d.n_k_heads;
    let scale = 1.0 / (sv as f32).sqrt();
    let mut delta = vec![0f32; sv];
    for t in 0..n {
        let row = &conv[t * ch..(t + 1) * ch];
        let q = &row[hk * d.head_k..(hk + 1) * d.head_k];
        let k = &row[kd + hk * d.head_k..kd + (hk + 1) * d.head_k];
        let v = &row[2 * kd + hv * sv..2 * kd + (hv + 1) * sv];
        let decay = g[t * nv + hv].exp();
        for x in m.iter_mut() {
            *x *= decay;
        }
        let b = beta[t * nv + hv];
        for (j, dj) in delta.iter_mut().enumerate() {
            *dj = (v[j] - dot_ggml(&m[j * sv..(j + 1) * sv], k, layout)) * b;
        }
        for (j, &dj) in delta.iter().enumerate() {
            ops::mad_f32(&mut m[j * sv..(j + 1) * sv], dj, k);
        }
        let mut o = outs[t * nv + hv].lock().unwrap_or_else(|e| e.into_inner());
        for (j, oj) in o.iter_mut().enumerate() {
            *oj = dot_ggml(&m[j * sv..(j + 1) * sv], q, layout) * scale;
        }
    }
}

/// `ggml_vec_dot_f32` of a SIMD build with `layout`'s lanes: four accumulators of fused
/// multiply-adds over whole steps, ggml's reduction, the leftovers fused into the sum
/// ([`ops::dot_f32_ggml`]).
pub fn dot_ggml(a: &[f32], b: &[f32], layout: DotLayout) -> f32 {
    ops::dot_f32_ggml(a, b, layout)
}

/// `ggml_sigmoid` on the CPU: `1 / (1 + expf(−x))`.
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `ggml_softplus` on the CPU: `x` above 20, else `logf(1 + expf(x))`.
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// `ggml_silu` on the CPU (`ggml_vec_silu_f32`): whole vectors of the native build's
/// width as `x / (1 + ggml_v_expf(0 − x))`, the tail as `x / (1 + expf(−x))`.
pub fn silu_inplace(x: &mut [f32]) {
    let lanes = if ops::native_dot_layout() == DotLayout::Avx512 { 16 } else { 8 };
    let nv = x.len() - x.len() % lanes;
    let mut buf = [0f32; 256];
    for c in x[..nv].chunks_mut(buf.len()) {
        let e = &mut buf[..c.len()];
        for (e, &v) in e.iter_mut().zip(c.iter()) {
            *e = 0.0 - v;
        }
        ops::expf_ggml_inplace(e);
        for (v, e) in c.iter_mut().zip(e.iter()) {
            *v /= 1.0 + e;
        }
    }
    for v in x[nv..].iter_mut() {
        *v = ops::silu(*v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_follows_the_lane_order_and_is_close_to_the_exact_sum() {
        let a: Vec<f32> = (0..131).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let b: Vec<f32> = (0..131).map(|i| ((i * 53 % 89) as f32 - 44.0) / 3.0).collect();
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        for layout in [DotLayout::Avx512, DotLayout::Avx2] {
            let s = dot_ggml(&a, &b, layout);
            assert!((s as f64 - exact).abs() < 1e-3 * exact.abs().max(1.0), "{layout:?}: {s} vs {exact}");
        }
        // a single non-zero lane is exact whatever the order
        let mut e = vec![0f32; 64];
        e[17] = 3.0;
        assert_eq!(dot_ggml(&e, &vec![2.0; 64], DotLayout::Avx512), 6.0);
    }

    #[test]
    fn gates_are_ggml_formulas() {
        assert_eq!(softplus(25.0), 25.0);
        assert!((softplus(0.0) - 2f32.ln()).abs() < 1e-7);
        assert!((sigmoid(0.0) - 0.5).abs() < 1e-7);
        let mut x: Vec<f32> = (0..37).map(|i| i as f32 / 4.0 - 4.0).collect();
        let want: Vec<f32> = x.iter().map(|&v| v / (1.0 + (-v).exp())).collect();
        silu_inplace(&mut x);
        for (a, b) in x.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5 * b.abs().max(1.0), "{a} vs {b}");
        }
    }

    fn dims() -> DeltaNetDims {
        DeltaNetDims { n_embd: 8, d_conv: 4, head_k: 4, n_k_heads: 1, n_v_heads: 2, head_v: 4 }
    }

    #[test]
    fn delta_rule_matches_the_textbook_recurrence() {
        // one token per step from a zero state: M = β·k⊗v, o = M·q/√S
        let d = dims();
        let ch = d.conv_channels();
        let mut conv = vec![0f32; 2 * ch];
        for (i, x) in conv.iter_mut().enumerate() {
            *x = ((i * 7 % 13) as f32 - 6.0) / 6.0;
        }
        let g = vec![-0.5f32, -0.1, -0.2, -0.3];
        let beta = vec![0.7f32, 0.2, 0.4, 0.9];
        for hv in 0..2 {
            let mut m = vec![0f32; 16];
            let mut o = [0f32; 2 * 2 * 4];
            let outs: Vec<Mutex<&mut [f32]>> = o.chunks_mut(4).map(Mutex::new).collect();
            delta_rule_head(&d, hv, 2, &conv, &g, &beta, &mut m, &outs, DotLayout::Avx512);
            drop(outs);
            // reference in f64: S[i][j] (key i, value j)
            let mut s = [[0f64; 4]; 4];
            for t in 0..2 {
                let row = &conv[t * ch..(t + 1) * ch];
                let (q, k, v) = (&row[0..4], &row[4..8], &row[8 + hv * 4..12 + hv * 4]);
                let decay = (g[t * 2 + hv] as f64).exp();
                for r in s.iter_mut() {
                    for x in r.iter_mut() {
                        *x *= decay;
                    }
                }
                for j in 0..4 {
                    let sk: f64 = (0..4).map(|i| s[i][j] * k[i] as f64).sum();
                    let dj = (v[j] as f64 - sk) * beta[t * 2 + hv] as f64;
                    for i in 0..4 {
                        s[i][j] += k[i] as f64 * dj;
                    }
                }
                for j in 0..4 {
                    let oj: f64 = (0..4).map(|i| s[i][j] * q[i] as f64).sum::<f64>() / 2.0;
                    let got = o[(t * 2 + hv) * 4 + j] as f64;
                    assert!((got - oj).abs() < 1e-5, "head {hv} token {t} out {j}: {got} vs {oj}");
                }
            }
            for i in 0..4 {
                for j in 0..4 {
                    assert!((m[j * 4 + i] as f64 - s[i][j]).abs() < 1e-5);
                }
            }
        }
    }

    #[test]
    fn the_conv_state_carries_the_last_inputs() {
        // a kernel of taps (1, 2, 3, 4): y_t = x_{t-3} + 2x_{t-2} + 3x_{t-1} + 4x_t
        let d = dims();
        let ch = d.conv_channels();
        let pool = Pool::new(2);
        let net_kernel: Vec<f32> = (0..ch).flat_map(|_| [1.0, 2.0, 3.0, 4.0]).collect();
        let xs: Vec<f32> = (0..5 * ch).map(|i| (i / ch + 1) as f32).collect();
        let conv = |kernel: &[f32], x: &[f32], n: usize, st: &mut RecurrentState, y: &mut [f32]| {
            causal_conv(&pool, kernel, ch, x, ch, n, &mut st.conv, y)
        };
        let (mut all, mut split) = (RecurrentState::new(&d), RecurrentState::new(&d));
        let (mut y1, mut y2) = (vec![0f32; 5 * ch], vec![0f32; 5 * ch]);
        conv(&net_kernel, &xs, 5, &mut all, &mut y1);
        conv(&net_kernel, &xs[..2 * ch], 2, &mut split, &mut y2[..2 * ch]);
        conv(&net_kernel, &xs[2 * ch..], 3, &mut split, &mut y2[2 * ch..]);
        assert_eq!(y1, y2);
        assert_eq!(y1[4 * ch], 2.0 + 2.0 * 3.0 + 3.0 * 4.0 + 4.0 * 5.0);
        assert_eq!(all.conv, split.conv);
    }

    /// ggml's loop as the reference compiles it: per channel and token, the first
    /// [`conv_plain_taps`] taps as products added in order, the rest a `mul_add` chain.
    fn conv_ggml_loop(kernel: &[f32], ch: usize, x: &[f32], stride: usize, n: usize, past: &mut [f32]) -> Vec<f32> {
        let k = kernel.len() / ch;
        let p = k - 1;
        let mut y = vec![0f32; n * ch];
        for c in 0..ch {
            let mut win: Vec<f32> = past[c * p..(c + 1) * p].to_vec();
            win.extend((0..n).map(|t| x[t * stride + c]));
            for t in 0..n {
                let mut sum = 0.0f32;
                for (i, &w) in kernel[c * k..(c + 1) * k].iter().enumerate() {
                    sum = if i < conv_plain_taps(k) { sum + win[t + i] * w } else { win[t + i].mul_add(w, sum) };
                }
                y[t * ch + c] = sum;
            }
            past[c * p..(c + 1) * p].copy_from_slice(&win[n..]);
        }
        y
    }

    #[test]
    fn plain_taps_follow_the_reference_vectorization() {
        // d_conv → taps without FMA, as read from the reference's disassembly
        let want =
            [(1, 0), (2, 0), (3, 0), (4, 4), (5, 4), (7, 4), (8, 8), (11, 8), (12, 12), (13, 12), (16, 16), (20, 20)];
        for (k, plain) in want {
            assert_eq!(conv_plain_taps(k), plain, "d_conv {k}");
        }
    }

    #[test]
    fn the_conv_is_ggml_loop_bit_for_bit_on_any_split() {
        // 150 channels: two whole blocks and a partial one; rows read with a stride
        let (ch, stride) = (150, 171);
        for (k, n) in [(4, 1), (4, 3), (4, 17), (4, 40), (3, 17), (2, 5), (5, 9), (7, 9), (8, 6), (11, 9), (13, 9)] {
            let kernel: Vec<f32> = (0..ch * k).map(|i| ((i * 29 % 83) as f32 - 41.0) / 13.0).collect();
            let x: Vec<f32> = (0..n * stride).map(|i| ((i * 53 % 97) as f32 - 48.0) / 7.3).collect();
            let past0: Vec<f32> = (0..(k - 1) * ch).map(|i| ((i * 11 % 31) as f32 - 15.0) / 3.1).collect();
            let mut want_past = past0.clone();
            let want = conv_ggml_loop(&kernel, ch, &x, stride, n, &mut want_past);
            for threads in [1, 2, 3] {
                let pool = Pool::new(threads);
                let mut past = past0.clone();
                let mut y = vec![f32::NAN; n * ch];
                causal_conv(&pool, &kernel, ch, &x, stride, n, &mut past, &mut y);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&y), bits(&want), "n {n}, {threads} threads");
                assert_eq!(bits(&past), bits(&want_past), "n {n}, {threads} threads: state");
            }
        }
    }
}
