//! Rotary position embeddings as ggml computes them (`ggml_rope_ext`, CPU): normal
//! (adjacent pairs) and NeoX (halves) modes, frequency factors, linear and YaRN scaling.

/// How dimensions are paired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeMode {
    /// Rotate `(x[2i], x[2i+1])` (llama).
    Normal,
    /// Rotate `(x[i], x[i + n_rot/2])` (GPT-NeoX, Qwen, Gemma).
    Neox,
}

/// Rope parameters for one layer kind.
#[derive(Debug, Clone)]
pub struct Rope {
    /// Pairing mode.
    pub mode: RopeMode,
    /// Rotated dimensions (≤ head dim).
    pub n_rot: usize,
    /// Base frequency.
    pub freq_base: f32,
    /// 1 / linear scaling factor.
    pub freq_scale: f32,
    /// YaRN extrapolation mix (0 = off).
    pub ext_factor: f32,
    /// Magnitude scale.
    pub attn_factor: f32,
    /// YaRN correction range.
    pub corr_dims: [f32; 2],
    /// Per-frequency divisors (`rope_freqs.weight`), `n_rot/2` entries.
    pub freq_factors: Option<Vec<f32>>,
}

/// `ggml_rope_yarn_corr_dims`.
pub fn yarn_corr_dims(n_dims: usize, n_ctx_orig: u32, freq_base: f32, beta_fast: f32, beta_slow: f32) -> [f32; 2] {
    let corr_dim = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln() / (2.0 * freq_base.ln())
    };
    let start = corr_dim(beta_fast).floor();
    let end = corr_dim(beta_slow).ceil();
    [start.max(0.0), end.min(n_dims as f32 - 1.0)]
}

impl Rope {
    /// The `[cos, sin]` pairs for one position, `n_rot` floats (`ggml_rope_cache_init`).
    pub fn cache(&self, pos: usize, out: &mut Vec<f32>) {
        self.cache_at(pos as i64, out)
    }

    /// [`Rope::cache`] for any position, negative ones included: a K-cache shift by
    /// `delta` positions rotates by the cache of `delta` (ggml's `ggml_rope_ext` with the
    /// shift as its position, as llama.cpp's `build_rope_shift` runs it).
    pub fn cache_at(&self, pos: i64, out: &mut Vec<f32>) {
        out.clear();
        out.resize(self.n_rot, 0.0);
        let theta_scale = self.freq_base.powf(-2.0 / self.n_rot as f32);
        let mut theta = pos as f32;
        for i0 in (0..self.n_rot).step_by(2) {
            let ff = self.freq_factors.as_ref().map_or(1.0, |f| f[i0 / 2]);
            let theta_extrap = theta / ff;
            let theta_interp = self.freq_scale * theta_extrap;
            let mut th = theta_interp;
            let mut mscale = self.attn_factor;
            if self.ext_factor != 0.0 {
                let y = ((i0 / 2) as f32 - self.corr_dims[0]) / (self.corr_dims[1] - self.corr_dims[0]).max(0.001);
                let ramp = 1.0 - y.clamp(0.0, 1.0);
                let mix = ramp * self.ext_factor;
                // contracted as GCC builds ggml-cpu: the first product is fused
                th = theta_interp.mul_add(1.0 - mix, theta_extrap * mix);
                mscale *= 1.0 + 0.1 * (1.0 / self.freq_scale).ln();
            }
            out[i0] = th.cos() * mscale;
            out[i0 + 1] = th.sin() * mscale;
            theta *= theta_scale;
        }
    }

    /// Rotates one head vector in place with a cache from [`Rope::cache`].
    pub fn apply(&self, cache: &[f32], x: &mut [f32]) {
        quant_kernels::ops::rope_rotate(x, cache, self.n_rot, self.mode == RopeMode::Neox);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rope(mode: RopeMode) -> Rope {
        Rope {
            mode,
            n_rot: 8,
            freq_base: 10000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            corr_dims: [0.0, 7.0],
            freq_factors: None,
        }
    }

    #[test]
    fn position_zero_is_identity() {
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let r = rope(mode);
            let mut c = Vec::new();
            r.cache(0, &mut c);
            let mut x: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
            let orig = x.clone();
            r.apply(&c, &mut x);
            assert_eq!(x, orig);
        }
    }

    #[test]
    fn rotation_preserves_pair_norms() {
        let r = rope(RopeMode::Normal);
        let mut c = Vec::new();
        r.cache(17, &mut c);
        let mut x = vec![1.0, 2.0, -3.0, 0.5, 0.25, -1.0, 4.0, 2.0];
        let orig = x.clone();
        r.apply(&c, &mut x);
        for i in (0..8).step_by(2) {
            let a = orig[i] * orig[i] + orig[i + 1] * orig[i + 1];
            let b = x[i] * x[i] + x[i + 1] * x[i + 1];
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
        // the first pair turns by exactly `pos` radians
        let ang = x[1].atan2(x[0]) - orig[1].atan2(orig[0]);
        let want = 17.0f32.rem_euclid(2.0 * std::f32::consts::PI);
        assert!((ang.rem_euclid(2.0 * std::f32::consts::PI) - want).abs() < 1e-3);
    }

    #[test]
    fn a_shift_composes_with_the_rotation() {
        // rotating by position 5, then by -3, is (to rounding) rotating by position 2
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let r = rope(mode);
            let (mut c5, mut cm3, mut c2) = (Vec::new(), Vec::new(), Vec::new());
            r.cache(5, &mut c5);
            r.cache_at(-3, &mut cm3);
            r.cache(2, &mut c2);
            let x: Vec<f32> = vec![1.0, 2.0, -3.0, 0.5, 0.25, -1.0, 4.0, 2.0];
            let (mut a, mut b) = (x.clone(), x.clone());
            r.apply(&c5, &mut a);
            r.apply(&cm3, &mut a);
            r.apply(&c2, &mut b);
            for (p, q) in a.iter().zip(&b) {
                assert!((p - q).abs() < 1e-5, "{mode:?}: {a:?} vs {b:?}");
            }
            assert_ne!(a, x);
        }
    }

    #[test]
    fn neox_pairs_halves() {
        let r = rope(RopeMode::Neox);
        let mut c = Vec::new();
        r.cache(3, &mut c);
        let mut x = vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        r.apply(&c, &mut x);
        assert!((x[0] - 3f32.cos()).abs() < 1e-6 && (x[4] - 3f32.sin()).abs() < 1e-6);
        assert_eq!(x[1], 0.0);
    }
}
