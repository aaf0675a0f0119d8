//! RMSNorm.

use quant_kernels::{ops, Pool};

use crate::loader::Loader;
use crate::Result;

/// `x / sqrt(mean(x²) + eps) * weight` per row (ggml's `rms_norm` then `mul`).
#[derive(Debug, Clone)]
pub struct RmsNorm {
    /// The per-channel weight; its length is the row width.
    pub weight: Vec<f32>,
    /// ε inside the square root.
    pub eps: f32,
}

impl RmsNorm {
    /// Reads the f32 vector `name` of `width` elements.
    pub fn load(ld: &Loader<'_>, name: &str, width: usize, eps: f32) -> Result<RmsNorm> {
        Ok(RmsNorm { weight: ld.vector(name, width as u64)?, eps })
    }

    /// [`RmsNorm::load`] when the file has `name`, else `None`.
    pub fn load_opt(ld: &Loader<'_>, name: &str, width: usize, eps: f32) -> Result<Option<RmsNorm>> {
        Ok(ld.opt_vector(name, width as u64)?.map(|weight| RmsNorm { weight, eps }))
    }

    /// Normalizes every row of `x` into `out` (resized to `x`'s length).
    pub fn forward(&self, x: &[f32], out: &mut Vec<f32>) {
        out.resize(x.len(), 0.0);
        for (xr, or) in x.chunks_exact(self.weight.len()).zip(out.chunks_exact_mut(self.weight.len())) {
            ops::rms_norm(xr, &self.weight, self.eps, or);
        }
    }

    /// Normalizes every row of `x` in place; `tmp` is one row of scratch.
    pub fn forward_inplace(&self, x: &mut [f32], tmp: &mut Vec<f32>) {
        tmp.resize(self.weight.len(), 0.0);
        for xr in x.chunks_exact_mut(self.weight.len()) {
            ops::rms_norm(xr, &self.weight, self.eps, tmp);
            xr.copy_from_slice(tmp);
        }
    }

    /// [`RmsNorm::forward`] with the rows spread over `pool` (the same bits).
    pub fn forward_on(&self, pool: &Pool, x: &[f32], out: &mut Vec<f32>) {
        let w = self.weight.len();
        out.resize(x.len(), 0.0);
        pool.for_rows(out, w, &|r0, run| {
            let src = &x[r0 * w..r0 * w + run.len()];
            for (xr, or) in src.chunks_exact(w).zip(run.chunks_exact_mut(w)) {
                ops::rms_norm(xr, &self.weight, self.eps, or);
            }
        });
    }

    /// [`RmsNorm::forward_inplace`] with the rows spread over `pool` (the same bits).
    pub fn forward_inplace_on(&self, pool: &Pool, x: &mut [f32]) {
        let w = self.weight.len();
        pool.for_rows(x, w, &|_, run| {
            for xr in run.chunks_exact_mut(w) {
                ops::rms_norm_inplace(xr, &self.weight, self.eps);
            }
        });
    }
}

/// LayerNorm with weight and bias (llama.cpp's `LLM_NORM`: `ggml_norm`, then `ggml_mul` by
/// the weight and `ggml_add` of the bias), per row as ggml-cpu's `ggml_compute_forward_norm_f32`
/// computes it: the mean from an f64 sum (`ggml_vec_sum_f32`) rounded to f32 and divided
/// by the width in f32; the centred values and their variance as `ggml_vec_cvar_f32` (whole
/// SIMD vectors' squares reduced as the build's horizontal add, each added in f64, the
/// tail in f64 one by one, the f64 mean of squares rounded to f32); then `1/√(var + ε)`.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    /// The per-channel weight; its length is the row width.
    pub weight: Vec<f32>,
    /// The per-channel bias.
    pub bias: Vec<f32>,
    /// ε inside the square root.
    pub eps: f32,
}

impl LayerNorm {
    /// Reads `{name}.weight` and `{name}.bias`, `width` elements each (both required, as
    /// llama.cpp's BERT loaders require them).
    pub fn load(ld: &Loader<'_>, name: &str, width: usize, eps: f32) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: ld.vector(&format!("{name}.weight"), width as u64)?,
            bias: ld.vector(&format!("{name}.bias"), width as u64)?,
            eps,
        })
    }

    /// Normalizes every row of `x` in place.
    pub fn forward_inplace(&self, x: &mut [f32]) {
        let width = self.weight.len();
        for row in x.chunks_exact_mut(width) {
            layer_norm_row(row, self.eps);
            ops::mul_inplace(row, &self.weight);
            ops::add_inplace(row, &self.bias);
        }
    }
}

/// `ggml_norm` of one row in place (no weight, no bias): see [`LayerNorm`].
pub fn layer_norm_row(x: &mut [f32], eps: f32) {
    let n = x.len();
    if n == 0 {
        return;
    }
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let mean = sum as f32 / n as f32;
    let layout = ops::native_dot_layout();
    let lanes = if layout == ops::DotLayout::Avx512 { 16 } else { 8 };
    let nv = n - n % lanes;
    let mut var = 0f64;
    for c in x[..nv].chunks_exact_mut(lanes) {
        let mut sq = [0f32; 16];
        for (s, v) in sq.iter_mut().zip(c.iter_mut()) {
            *v -= mean;
            *s = *v * *v;
        }
        let r = match layout {
            ops::DotLayout::Avx512 => quant_kernels::scalar::dots::reduce16(&sq),
            ops::DotLayout::Avx2 => {
                // _mm256 → hi + lo (4 lanes), + movehl, + movehdup
                let h = [sq[4] + sq[0], sq[5] + sq[1], sq[6] + sq[2], sq[7] + sq[3]];
                let p = [h[0] + h[2], h[1] + h[3]];
                p[0] + p[1]
            }
        };
        var += r as f64;
    }
    for v in x[nv..].iter_mut() {
        *v -= mean;
        var += (*v * *v) as f64;
    }
    let var = (var / n as f64) as f32;
    let scale = 1.0f32 / (var + eps).sqrt();
    ops::scale_inplace(x, scale);
}
