//! RMSNorm.

use quant_kernels::ops;

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
}
