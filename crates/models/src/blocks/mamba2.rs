//! The Mamba-2 mixer (IBM Granite 4.0's hybrid layers, `src/models/mamba-base.cpp`'s
//! `build_mamba2_layer`): [`Mamba2`] — one input projection `ssm_in` split into the gate
//! `z`, the convolution input `xBC` and the time steps `dt`; a causal depthwise convolution
//! over `xBC` after the sequence's conv state ([`causal_conv`], `ggml_ssm_conv`), its bias
//! and SiLU; the selective scan with one scalar decay per head ([`ssm_scan_head`],
//! `ggml_ssm_scan`'s Mamba-2 branch) over the per-sequence `d_state × head_dim` state of
//! each head; `y + x·D`; `silu(z)·y` (`ggml_swiglu_split`); the grouped RMS norm
//! ([`group_rms_norm`]) and `ssm_out` — in ggml-cpu's order of operations.

use std::sync::Mutex;

use quant_kernels::ops::{self, DotLayout};

use super::{causal_conv, dump, silu_inplace, softplus, Linear, Pass, RecurrentState, SeqRs};
use crate::loader::Loader;
use crate::{Error, Result};

/// The widths of a Mamba-2 layer (llama.cpp's `ssm_*` hyperparameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mamba2Dims {
    /// Embedding width.
    pub n_embd: usize,
    /// Convolution kernel length (`ssm.conv_kernel`).
    pub d_conv: usize,
    /// Inner width (`ssm.inner_size`): `n_head · head_dim`.
    pub d_inner: usize,
    /// State width per head row (`ssm.state_size`).
    pub d_state: usize,
    /// SSM heads (`ssm.time_step_rank`).
    pub n_head: usize,
    /// Groups of B/C (and of the output norm) (`ssm.group_count`).
    pub n_group: usize,
}

impl Mamba2Dims {
    /// Reads the `ssm.*` keys under the loader's architecture prefix and checks them as
    /// llama.cpp's graph asserts them (`d_inner % n_head == 0`, `d_inner % n_group == 0`,
    /// and the heads split evenly into the groups, `ggml_ssm_scan`'s `nh % ng == 0`).
    pub fn read(ld: &Loader<'_>, n_embd: usize) -> Result<Mamba2Dims> {
        let req = |k: &str| ld.u32(k).map(|v| v as usize);
        let d = Mamba2Dims {
            n_embd,
            d_conv: req("ssm.conv_kernel")?,
            d_inner: req("ssm.inner_size")?,
            d_state: req("ssm.state_size")?,
            n_head: req("ssm.time_step_rank")?,
            n_group: req("ssm.group_count")?,
        };
        d.check().map_err(|(k, msg)| Error::BadKey { key: ld.key(k), msg })?;
        Ok(d)
    }

    /// The consistency rules, as (key suffix, message) of the first broken one.
    fn check(&self) -> std::result::Result<(), (&'static str, String)> {
        let Mamba2Dims { d_conv, d_inner, d_state, n_head, n_group, .. } = *self;
        if d_conv < 2 {
            return Err(("ssm.conv_kernel", format!("{d_conv} (at least 2)")));
        }
        if d_state == 0 {
            return Err(("ssm.state_size", "0".into()));
        }
        if n_head == 0 || d_inner == 0 || !d_inner.is_multiple_of(n_head) {
            return Err(("ssm.inner_size", format!("{d_inner} is not a multiple of ssm.time_step_rank {n_head}")));
        }
        if n_group == 0 || !n_head.is_multiple_of(n_group) {
            return Err(("ssm.group_count", format!("{n_group} groups do not divide the {n_head} heads")));
        }
        Ok(())
    }

    /// Width of one head (`d_inner / n_head`).
    pub fn head_dim(&self) -> usize {
        self.d_inner / self.n_head
    }

    /// Channels of the convolution: x, B and C (`d_inner + 2·n_group·d_state`).
    pub fn conv_channels(&self) -> usize {
        self.d_inner + 2 * self.n_group * self.d_state
    }

    /// Rows of `ssm_in`: z, xBC and dt (`2·d_inner + 2·n_group·d_state + n_head`).
    pub fn in_proj_rows(&self) -> usize {
        self.d_inner + self.conv_channels() + self.n_head
    }

    /// One sequence's empty state: `d_conv − 1` past inputs per convolution channel
    /// (llama.cpp's `n_embd_r`) and a `head_dim × d_state` matrix per head (`n_embd_s`).
    pub fn new_state(&self) -> RecurrentState {
        RecurrentState {
            conv: vec![0.0; (self.d_conv - 1) * self.conv_channels()],
            ssm: vec![0.0; self.d_inner * self.d_state],
        }
    }
}

/// The scratch of [`Mamba2::forward`], kept across layers and passes.
#[derive(Default)]
pub struct Mamba2Scratch {
    proj: Vec<f32>,
    conv: Vec<f32>,
    dt: Vec<f32>,
    y: Vec<f32>,
    z: Vec<f32>,
}

/// A Mamba-2 layer (`blk.N.ssm_in`, `ssm_conv1d` (+ bias), `ssm_dt.bias`, `ssm_a`, `ssm_d`,
/// `ssm_norm`, `ssm_out`).
pub struct Mamba2 {
    /// Widths.
    pub dims: Mamba2Dims,
    /// z, xBC and dt in one product (`ssm_in`, `[n_embd, in_proj_rows]`).
    pub in_proj: Linear,
    /// The convolution kernel, `d_conv` taps per channel (`ssm_conv1d.weight`).
    pub conv_kernel: Vec<f32>,
    /// Added to the convolution's output before the SiLU (`ssm_conv1d.bias`).
    pub conv_bias: Option<Vec<f32>>,
    /// Added to the time steps before the softplus (`ssm_dt.bias`).
    pub dt_bias: Vec<f32>,
    /// `−exp(A_log)` per head, as the converter stores it (`ssm_a`).
    pub a: Vec<f32>,
    /// The skip connection per head (`ssm_d`).
    pub d: Vec<f32>,
    /// The grouped output norm's weight (`ssm_norm`, `d_inner / n_group` per group), if any.
    pub norm: Option<Vec<f32>>,
    /// ε of the grouped norm (the model's RMS epsilon).
    pub eps: f32,
    /// Output projection (`ssm_out`, `[d_inner, n_embd]`).
    pub out: Linear,
}

impl Mamba2 {
    /// Layer `il`'s tensors with llama.cpp's names and shapes (`llama_model_granite_hybrid
    /// ::load_arch_tensors`); `eps` is the model's RMS epsilon. The conv bias is optional,
    /// the norm required, as there.
    pub fn load(ld: &Loader<'_>, il: usize, dims: Mamba2Dims, eps: f32) -> Result<Mamba2> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let Mamba2Dims { n_embd, d_conv, d_inner, n_head, n_group, .. } = dims;
        let ch = dims.conv_channels() as u64;
        let nh = n_head as u64;
        let conv_kernel = ld
            .opt_floats(&n("ssm_conv1d.weight"), &[d_conv as u64, ch])?
            .ok_or_else(|| Error::MissingTensor(n("ssm_conv1d.weight")))?;
        let per_head = |s: &str| ld.opt_floats(&n(s), &[1, nh])?.ok_or_else(|| Error::MissingTensor(n(s)));
        let norm = ld
            .opt_floats(&n("ssm_norm.weight"), &[(d_inner / n_group) as u64, n_group as u64])?
            .ok_or_else(|| Error::MissingTensor(n("ssm_norm.weight")))?;
        Ok(Mamba2 {
            dims,
            in_proj: Linear::load(ld, &n("ssm_in"), n_embd, dims.in_proj_rows())?,
            conv_kernel,
            conv_bias: ld.opt_vector(&n("ssm_conv1d.bias"), ch)?,
            dt_bias: ld.vector(&n("ssm_dt.bias"), nh)?,
            a: per_head("ssm_a")?,
            d: per_head("ssm_d")?,
            norm: Some(norm),
            eps,
            out: Linear::load(ld, &n("ssm_out"), d_inner, n_embd)?,
        })
    }

    /// Repacks the two projections where a kernel wants them repacked.
    pub fn repack(&mut self) -> Result<()> {
        self.in_proj.repack()?;
        self.out.repack()?;
        Ok(())
    }

    /// The layer over the normed input `h` (every row of the pass) into `out`; each
    /// sequence's rows advance its state. `il` names the dumps. The convolution runs over
    /// channel blocks, the scan over (sequence, head) pairs and the row-wise steps over row
    /// blocks of the pool — ggml-cpu's split of the same ops; no value depends on it.
    pub fn forward(
        &self,
        pass: &Pass<'_>,
        il: usize,
        h: &[f32],
        seqs: &mut [SeqRs<'_>],
        sc: &mut Mamba2Scratch,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let d = self.dims;
        let (di, ch, nh, hd) = (d.d_inner, d.conv_channels(), d.n_head, d.head_dim());
        let np = d.in_proj_rows();
        let n_rows = pass.rows.n_rows();
        let Mamba2Scratch { proj, conv, dt, y, z } = sc;
        self.in_proj.forward(pass, h, proj)?;
        dump(&format!("zxBCdt-{il}"), proj);
        // each row is [z | xBC | dt]; dt + ssm_dt.bias
        dt.resize(n_rows * nh, 0.0);
        for (o, row) in dt.chunks_exact_mut(nh).zip(proj.chunks_exact(np)) {
            for ((o, &v), &b) in o.iter_mut().zip(&row[di + ch..]).zip(&self.dt_bias) {
                *o = v + b;
            }
        }
        // the convolution of each sequence's xBC, read in place, then + bias and SiLU
        conv.resize(n_rows * ch, 0.0);
        for s in seqs.iter_mut() {
            let x = &proj[s.row0 * np + di..];
            causal_conv(pass.pool, &self.conv_kernel, ch, x, np, s.n, &mut s.state.conv, &mut conv[s.row0 * ch..]);
        }
        let bias = self.conv_bias.as_deref();
        pass.pool.for_rows(conv, ch, &|_, rows| {
            for row in rows.chunks_exact_mut(ch) {
                if let Some(b) = bias {
                    ops::add_inplace(row, b);
                }
                silu_inplace(row);
            }
        });
        dump(&format!("xBC-{il}"), conv);
        // the scan, one task per (sequence, head), then y + x·D (ggml_mul, then ggml_add)
        y.resize(n_rows * di, 0.0);
        let layout = ops::native_dot_layout();
        let outs: Vec<Mutex<&mut [f32]>> = y.chunks_mut(hd).map(Mutex::new).collect();
        let mut spans = Vec::with_capacity(seqs.len());
        let mut states = Vec::with_capacity(seqs.len() * nh);
        for s in seqs.iter_mut() {
            spans.push((s.row0, s.n));
            states.extend(s.state.ssm.chunks_mut(hd * d.d_state).map(Mutex::new));
        }
        let conv = &*conv;
        pass.pool.for_each(spans.len() * nh, &|i| {
            let ((row0, n), h) = (spans[i / nh], i % nh);
            let mut st = states[i].lock().unwrap_or_else(|e| e.into_inner());
            let mut guards: Vec<_> =
                (row0..row0 + n).map(|r| outs[r * nh + h].lock().unwrap_or_else(|e| e.into_inner())).collect();
            let mut ys: Vec<&mut [f32]> = guards.iter_mut().map(|g| &mut ***g).collect();
            let (cv, dts) = (&conv[row0 * ch..(row0 + n) * ch], &dt[row0 * nh..(row0 + n) * nh]);
            ssm_scan_head(&d, h, cv, dts, self.a[h], &mut st, &mut ys, layout);
            let dh = self.d[h];
            for (t, yh) in ys.iter_mut().enumerate() {
                let xh = &cv[t * ch + h * hd..t * ch + (h + 1) * hd];
                for (v, &x) in yh.iter_mut().zip(xh) {
                    *v += x * dh;
                }
            }
        });
        drop(outs);
        dump(&format!("mamba2_y_add_d-{il}"), y);
        // per row: silu(z)·y per head (rows of one head as ggml_swiglu_split sees the 4-D
        // tensors), then the grouped RMS norm
        z.resize(n_rows * di, 0.0);
        let (y, proj) = (&*y, &*proj);
        pass.pool.for_rows(z, di, &|r0, rows| {
            let mut tmp = Vec::new();
            for (r, zr) in rows.chunks_exact_mut(di).enumerate() {
                let row = r0 + r;
                zr.copy_from_slice(&proj[row * np..row * np + di]);
                for (zh, yh) in zr.chunks_exact_mut(hd).zip(y[row * di..(row + 1) * di].chunks_exact(hd)) {
                    ops::silu_mul_inplace(zh, yh);
                }
                if let Some(w) = &self.norm {
                    group_rms_norm(zr, w, self.eps, &mut tmp);
                }
            }
        });
        dump(&format!("mamba2_y_norm-{il}"), z);
        self.out.forward(pass, z, out)?;
        dump(&format!("mamba_out-{il}"), out);
        Ok(())
    }
}

/// `ggml_rms_norm` over rows of `w.len()` (one group each: llama.cpp reshapes the
/// `d_inner` row to `{d_inner / n_group, n_group}`), then `ggml_mul` by `w`, in place.
pub fn group_rms_norm(x: &mut [f32], w: &[f32], eps: f32, tmp: &mut Vec<f32>) {
    let gw = w.len();
    tmp.resize(gw, 0.0);
    for g in x.chunks_exact_mut(gw) {
        ops::rms_norm(g, w, eps, tmp);
        g.copy_from_slice(tmp);
    }
}

/// `ggml_ssm_scan`'s Mamba-2 branch for head `h` over one sequence's tokens (`conv`: the
/// activated xBC rows, `dt`: the biased time steps, `n_head` per row; `a`: the head's
/// `A`) with its state `s` (`head_dim` rows of `d_state`), writing each token's outputs to
/// `ys[t]` (`head_dim` wide). Per token `dt⁺ = softplus(dt)`, `dA = expf(dt⁺·A)`, and per
/// head row `i`: `s ← fma(s, dA, B·(x_i·dt⁺))` and `y_i = Σ s·C` — GCC contracts ggml's
/// `mul`/`add` intrinsics into that FMA (read off the pinned `libggml-cpu.so`), the sums
/// are the SIMD build's lane-wise FMAs over whole steps and its reduction, the leftover
/// states (`d_state` not a multiple of the step) the same FMAs added one by one.
#[allow(clippy::too_many_arguments)]
pub fn ssm_scan_head(
    d: &Mamba2Dims,
    h: usize,
    conv: &[f32],
    dt: &[f32],
    a: f32,
    s: &mut [f32],
    ys: &mut [&mut [f32]],
    layout: DotLayout,
) {
    let head = ScanHead { d, h, conv, dt, a };
    match layout {
        DotLayout::Avx512 => head.run::<64>(s, ys, reduce_avx512),
        DotLayout::Avx2 => head.run::<32>(s, ys, reduce_avx2),
    }
}

/// What [`ssm_scan_head`] reads.
struct ScanHead<'a> {
    d: &'a Mamba2Dims,
    h: usize,
    conv: &'a [f32],
    dt: &'a [f32],
    a: f32,
}

impl ScanHead<'_> {
    /// The scan with the lane sums of one `STEP`-wide accumulator set (a fixed size, so
    /// the accumulators and their reduction stay in registers).
    #[inline(always)]
    fn run<const STEP: usize>(&self, s: &mut [f32], ys: &mut [&mut [f32]], reduce: fn(&[f32; STEP]) -> f32) {
        let d = self.d;
        let (ch, nh, hd, ds, di) = (d.conv_channels(), d.n_head, d.head_dim(), d.d_state, d.d_inner);
        let h = self.h;
        let g = h / (nh / d.n_group);
        let np = ds - ds % STEP;
        let mut accs = [[0f32; STEP]; 2];
        for (t, y) in ys.iter_mut().enumerate() {
            let row = &self.conv[t * ch..(t + 1) * ch];
            let x = &row[h * hd..(h + 1) * hd];
            let b = &row[di + g * ds..di + (g + 1) * ds];
            let c = &row[di + (d.n_group + g) * ds..di + (d.n_group + g + 1) * ds];
            let dt_sp = softplus(self.dt[t * nh + h]);
            let da = (dt_sp * self.a).exp();
            for (i1, ((yv, &xi), srow)) in y.iter_mut().zip(x).zip(s.chunks_exact_mut(ds)).enumerate() {
                let x_dt = xi * dt_sp;
                // two accumulator sets in turn, each cleared a row before its use: the
                // clearing stores have left the store buffer when the SIMD loads read them
                let acc = &mut accs[i1 & 1];
                ops::ssm_scan_lanes(&mut srow[..np], &b[..np], &c[..np], da, x_dt, acc);
                let mut sum = if np > 0 { reduce(acc) } else { 0.0 };
                *acc = [0f32; STEP];
                for i in np..ds {
                    let st = srow[i].mul_add(da, b[i] * x_dt);
                    sum = st.mul_add(c[i], sum);
                    srow[i] = st;
                }
                *yv = sum;
            }
        }
    }
}

/// [`DotLayout::reduce`] of the AVX-512 layout (`GGML_F32x16_REDUCE`: x0 += x2, x1 += x3,
/// x0 += x1, then `_mm512_reduce_add_ps`'s halving), on a fixed-size array.
#[inline(always)]
fn reduce_avx512(acc: &[f32; 64]) -> f32 {
    let mut v = [0f32; 16];
    for (i, v) in v.iter_mut().enumerate() {
        *v = (acc[i] + acc[32 + i]) + (acc[16 + i] + acc[48 + i]);
    }
    let mut t3 = [0f32; 8];
    for (i, t) in t3.iter_mut().enumerate() {
        *t = v[8 + i] + v[i];
    }
    let t6 = [t3[4] + t3[0], t3[5] + t3[1], t3[6] + t3[2], t3[7] + t3[3]];
    (t6[0] + t6[2]) + (t6[1] + t6[3])
}

/// [`DotLayout::reduce`] of the AVX2 layout (`GGML_F32x8_REDUCE`), on a fixed-size array.
#[inline(always)]
fn reduce_avx2(acc: &[f32; 32]) -> f32 {
    let mut v = [0f32; 8];
    for (i, v) in v.iter_mut().enumerate() {
        *v = (acc[i] + acc[16 + i]) + (acc[8 + i] + acc[24 + i]);
    }
    let t0 = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (t0[0] + t0[1]) + (t0[2] + t0[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(d_state: usize, n_group: usize) -> Mamba2Dims {
        Mamba2Dims { n_embd: 8, d_conv: 4, d_inner: 16, d_state, n_head: 4, n_group }
    }

    #[test]
    fn widths_follow_llama_cpp() {
        let d = dims(128, 2);
        assert_eq!(d.head_dim(), 4);
        assert_eq!(d.conv_channels(), 16 + 2 * 2 * 128);
        assert_eq!(d.in_proj_rows(), 2 * 16 + 2 * 2 * 128 + 4);
        let st = d.new_state();
        assert_eq!(st.conv.len(), 3 * d.conv_channels());
        assert_eq!(st.ssm.len(), 16 * 128);
        assert!(d.check().is_ok());
        assert_eq!(Mamba2Dims { n_group: 3, ..d }.check().unwrap_err().0, "ssm.group_count");
        assert_eq!(Mamba2Dims { d_inner: 18, ..d }.check().unwrap_err().0, "ssm.inner_size");
        assert_eq!(Mamba2Dims { d_conv: 1, ..d }.check().unwrap_err().0, "ssm.conv_kernel");
        assert_eq!(Mamba2Dims { d_state: 0, ..d }.check().unwrap_err().0, "ssm.state_size");
    }

    /// The textbook recurrence in f64: `s ← s·e^{dt⁺A} + B x dt⁺`, `y = s·C`.
    fn reference(d: &Mamba2Dims, h: usize, conv: &[f32], dt: &[f32], a: f32, n: usize) -> (Vec<f64>, Vec<Vec<f64>>) {
        let (ch, nh, hd, ds, di) = (d.conv_channels(), d.n_head, d.head_dim(), d.d_state, d.d_inner);
        let g = h / (nh / d.n_group);
        let mut s = vec![0f64; hd * ds];
        let mut ys = Vec::new();
        for t in 0..n {
            let row = &conv[t * ch..];
            let sp = (1.0 + (dt[t * nh + h] as f64).exp()).ln();
            let da = (sp * a as f64).exp();
            let mut y = vec![0f64; hd];
            for i1 in 0..hd {
                let x = row[h * hd + i1] as f64;
                for i in 0..ds {
                    let b = row[di + g * ds + i] as f64;
                    let c = row[di + (d.n_group + g) * ds + i] as f64;
                    s[i1 * ds + i] = s[i1 * ds + i] * da + b * x * sp;
                    y[i1] += s[i1 * ds + i] * c;
                }
            }
            ys.push(y);
        }
        (s, ys)
    }

    #[test]
    fn scan_matches_the_textbook_recurrence_on_both_paths() {
        // d_state 128: whole SIMD steps; 20: leftovers only (below one step)
        for (ds, ng) in [(128, 2), (20, 1), (80, 4)] {
            let d = dims(ds, ng);
            let (ch, nh, n) = (d.conv_channels(), d.n_head, 3);
            let conv: Vec<f32> = (0..n * ch).map(|i| ((i * 37 % 101) as f32 - 50.0) / 60.0).collect();
            let dt: Vec<f32> = (0..n * nh).map(|i| (i as f32 - 5.0) / 4.0).collect();
            for layout in [DotLayout::Avx512, DotLayout::Avx2] {
                for h in 0..nh {
                    let a = -1.0 - h as f32;
                    let mut s = vec![0f32; d.head_dim() * ds];
                    let mut buf = vec![0f32; n * d.head_dim()];
                    let mut ys: Vec<&mut [f32]> = buf.chunks_mut(d.head_dim()).collect();
                    ssm_scan_head(&d, h, &conv, &dt, a, &mut s, &mut ys, layout);
                    let (rs, ry) = reference(&d, h, &conv, &dt, a, n);
                    for (t, y) in ry.iter().enumerate() {
                        for (i, &r) in y.iter().enumerate() {
                            let got = buf[t * d.head_dim() + i] as f64;
                            assert!((got - r).abs() < 1e-4 * r.abs().max(1.0), "ds {ds} h {h} t {t}: {got} vs {r}");
                        }
                    }
                    for (g, r) in s.iter().zip(&rs) {
                        assert!((*g as f64 - r).abs() < 1e-4 * r.abs().max(1.0));
                    }
                }
            }
        }
    }

    #[test]
    fn the_fixed_reductions_are_the_layouts_bit_for_bit() {
        // magnitudes far apart, so any other order of the additions rounds differently
        for seed in 0..200u32 {
            let acc: Vec<f32> = (0..64u32)
                .map(|i| {
                    let k = seed.wrapping_mul(2_654_435_761).wrapping_add(i.wrapping_mul(40_503)) >> 8;
                    ((k % 2001) as f32 - 1000.0) * 10f32.powi((k % 13) as i32 - 6)
                })
                .collect();
            let a64: &[f32; 64] = acc[..].try_into().unwrap();
            let a32: &[f32; 32] = acc[..32].try_into().unwrap();
            assert_eq!(reduce_avx512(a64).to_bits(), DotLayout::Avx512.reduce(&acc).to_bits(), "seed {seed}");
            assert_eq!(reduce_avx2(a32).to_bits(), DotLayout::Avx2.reduce(&acc[..32]).to_bits(), "seed {seed}");
        }
    }

    #[test]
    fn scan_state_carries_across_calls() {
        let d = dims(128, 1);
        let (ch, nh, hd) = (d.conv_channels(), d.n_head, d.head_dim());
        let n = 4;
        let conv: Vec<f32> = (0..n * ch).map(|i| ((i * 53 % 89) as f32 - 44.0) / 50.0).collect();
        let dt: Vec<f32> = (0..n * nh).map(|i| (i as f32 - 7.0) / 3.0).collect();
        let run = |parts: &[usize]| {
            let mut s = vec![0f32; hd * d.d_state];
            let mut out = vec![0f32; n * hd];
            let mut t0 = 0;
            for &p in parts {
                let mut ys: Vec<&mut [f32]> = out[t0 * hd..(t0 + p) * hd].chunks_mut(hd).collect();
                ssm_scan_head(&d, 1, &conv[t0 * ch..], &dt[t0 * nh..], -2.0, &mut s, &mut ys, DotLayout::Avx512);
                t0 += p;
            }
            (s, out)
        };
        assert_eq!(run(&[4]), run(&[1, 2, 1]));
    }

    #[test]
    fn group_norm_normalizes_each_group_on_its_own() {
        let mut x: Vec<f32> = vec![1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0];
        let w = [1.0f32, 1.0, 2.0, 2.0];
        let mut tmp = Vec::new();
        group_rms_norm(&mut x, &w, 0.0, &mut tmp);
        // both groups are proportional: the same normalized values
        assert!((x[0] - x[4]).abs() < 1e-6 && (x[3] - x[7]).abs() < 1e-6, "{x:?}");
        let rms = ((1.0f32 + 4.0 + 9.0 + 16.0) / 4.0).sqrt();
        assert!((x[2] - 2.0 * 3.0 / rms).abs() < 1e-6);
    }
}
