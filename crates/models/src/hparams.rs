//! Hyperparameters shared by the decoder-only transformer family, read as llama.cpp's
//! `llama_model::load_hparams` reads them.

use crate::loader::Loader;
use crate::rope::{yarn_corr_dims, Rope, RopeMode};
use crate::{Error, Result};

/// Common transformer hyperparameters.
#[derive(Debug, Clone)]
pub struct Hparams {
    /// Blocks.
    pub n_layer: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// KV heads.
    pub n_head_kv: usize,
    /// Key head width.
    pub head_k: usize,
    /// Value head width.
    pub head_v: usize,
    /// Rotated dims.
    pub n_rot: usize,
    /// FFN width per layer (0 where a layer has only experts).
    pub n_ff: Vec<usize>,
    /// Training context.
    pub n_ctx_train: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Rope base frequency.
    pub rope_base: f32,
    /// 1 / rope linear scale factor.
    pub rope_freq_scale: f32,
    /// `yarn` scaling in use.
    pub rope_yarn: bool,
    /// YaRN's original context.
    pub n_ctx_orig: u32,
    /// YaRN log multiplier (`rope.scaling.yarn_log_multiplier`).
    pub rope_yarn_log_mul: f32,
    /// YaRN's `mscale` (llama.cpp assumes 1, except deepseek2, whose `mscale` is its
    /// `mscale_all_dims`, the log multiplier, when that is not 1).
    pub rope_yarn_mscale: f32,
    /// `rope.scaling.attn_factor`.
    pub rope_attn_factor: f32,
    /// YaRN's `beta_fast` / `beta_slow` (`rope.scaling.yarn_beta_fast`/`_slow`; llama.cpp's
    /// defaults 32 and 1).
    pub rope_yarn_beta: (f32, f32),
    /// Experts (0 = dense).
    pub n_expert: usize,
    /// Experts used per token.
    pub n_expert_used: usize,
    /// Width of one expert's FFN.
    pub n_ff_exp: usize,
    /// Scale applied to expert weights (0 or 1 = none).
    pub expert_weights_scale: f32,
    /// Expert groups (`expert_group_count`; 0 or 1: none) and how many of them each token
    /// chooses from (`expert_group_used_count`): DeepSeek-V3's group-limited routing.
    pub expert_groups: (usize, usize),
}

impl Hparams {
    /// Reads the keys every decoder architecture shares.
    pub fn read(ld: &Loader<'_>) -> Result<Hparams> {
        Self::read_with(ld, None)
    }

    /// [`Hparams::read`] with every layer's KV head count `kv_heads` instead of the file's
    /// `attention.head_count_kv` (a hybrid family whose recurrent layers say 0 there, or
    /// `None`: the file's).
    pub fn read_with(ld: &Loader<'_>, kv_heads: Option<u32>) -> Result<Hparams> {
        let n_layer = ld.u32("block_count")? as usize;
        if n_layer == 0 || n_layer > 4096 {
            return Err(Error::BadKey { key: ld.key("block_count"), msg: format!("{n_layer} layers") });
        }
        let n_embd = ld.u32("embedding_length")? as usize;
        let heads = ld
            .opt_u32_per_layer("attention.head_count", n_layer)?
            .ok_or_else(|| Error::MissingKey(ld.key("attention.head_count")))?;
        let heads_kv = match kv_heads {
            Some(h) => vec![h; n_layer],
            None => ld.opt_u32_per_layer("attention.head_count_kv", n_layer)?.unwrap_or_else(|| heads.clone()),
        };
        let n_head = heads[0] as usize;
        let n_head_kv = heads_kv[0] as usize;
        if heads.iter().any(|&h| h as usize != n_head) || heads_kv.iter().any(|&h| h as usize != n_head_kv) {
            return Err(Error::Unsupported(format!(
                "per-layer head counts ({}, {}) are not supported yet",
                ld.key("attention.head_count"),
                ld.key("attention.head_count_kv")
            )));
        }
        if n_head == 0 || n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
            return Err(Error::BadKey {
                key: ld.key("attention.head_count"),
                msg: format!(
                    "{n_head} query heads is not a positive multiple of {} = {n_head_kv}",
                    ld.key("attention.head_count_kv")
                ),
            });
        }
        // As llama.cpp: a head count that does not divide the width gives head widths whose
        // tensors then have the wrong shape (named there), unless key_length says otherwise.
        let key_length = ld.opt_u32("attention.key_length")?;
        let head_k = key_length.map_or(n_embd / n_head, |v| v as usize);
        let head_v = ld.opt_u32("attention.value_length")?.map_or(n_embd / n_head, |v| v as usize);
        let n_rot = ld.opt_u32("rope.dimension_count")?.map_or(head_k, |v| v as usize);
        if head_k == 0 || head_v == 0 || n_rot > head_k || n_rot % 2 != 0 {
            return Err(Error::Invalid(format!(
                "head widths k={head_k} v={head_v} ({}, {}), rope dims {n_rot} ({})",
                ld.key("attention.key_length"),
                ld.key("attention.value_length"),
                ld.key("rope.dimension_count")
            )));
        }
        let n_ff = ld.opt_u32_per_layer("feed_forward_length", n_layer)?.unwrap_or_else(|| vec![0; n_layer]);
        let n_ctx_train = ld.opt_u32("context_length")?.unwrap_or(2048) as usize;
        let rms_eps = ld
            .opt_f32_in("attention.layer_norm_rms_epsilon", 0.0..=1.0)?
            .ok_or_else(|| Error::MissingKey(ld.key("attention.layer_norm_rms_epsilon")))?;
        let rope_base = ld.opt_f32_in("rope.freq_base", f32::MIN_POSITIVE..)?.unwrap_or(10000.0);
        let scaling = ld.opt_str("rope.scaling.type")?.unwrap_or("linear");
        let rope_yarn = match scaling {
            "none" | "linear" => false,
            "yarn" => true,
            other => {
                return Err(Error::Unsupported(format!(
                    "rope scaling `{other}` is not supported (supported: none, linear, yarn)"
                )))
            }
        };
        let factor = match ld.opt_f32_in("rope.scaling.factor", 0.0..)? {
            Some(f) => f,
            None => ld.opt_f32_in("rope.scale_linear", 0.0..)?.unwrap_or(0.0),
        };
        let rope_freq_scale = if scaling == "none" || factor == 0.0 { 1.0 } else { 1.0 / factor };
        let n_ctx_orig = ld.opt_u32("rope.scaling.original_context_length")?.unwrap_or(n_ctx_train as u32);
        let n_expert = ld.opt_u32("expert_count")?.unwrap_or(0) as usize;
        let n_expert_used = ld.opt_u32("expert_used_count")?.unwrap_or(0) as usize;
        if n_expert_used > n_expert || (n_expert > 0 && n_expert_used == 0) {
            return Err(Error::Invalid(format!(
                "{} = {n_expert_used} experts used per token of {} = {n_expert}",
                ld.key("expert_used_count"),
                ld.key("expert_count")
            )));
        }
        let n_ff_exp = ld.opt_u32("expert_feed_forward_length")?.map_or(0, |v| v as usize);
        let expert_groups = expert_groups(ld, n_expert)?;
        Ok(Hparams {
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            head_k,
            head_v,
            n_rot,
            n_ff: n_ff.into_iter().map(|v| v as usize).collect(),
            n_ctx_train,
            rms_eps,
            rope_base,
            rope_freq_scale,
            rope_yarn,
            n_ctx_orig,
            // llama.cpp reads the YaRN extras only for the families that use them
            // (`read_yarn_extras`; deepseek2 its own log multiplier): a file of another family
            // that carries them ropes with the defaults there, so it does here.
            rope_yarn_log_mul: 0.0,
            rope_yarn_mscale: 1.0,
            rope_attn_factor: ld.opt_f32("rope.scaling.attn_factor")?.unwrap_or(1.0),
            rope_yarn_beta: (32.0, 1.0),
            n_expert,
            n_expert_used,
            n_ff_exp,
            expert_weights_scale: ld.opt_f32("expert_weights_scale")?.unwrap_or(0.0),
            expert_groups,
        })
    }

    /// Reads `rope.scaling.yarn_beta_fast` / `_slow` and `yarn_log_multiplier`, which
    /// llama.cpp's loader takes only for mistral3 (and grok): `read` leaves their defaults.
    pub fn read_yarn_extras(&mut self, ld: &Loader<'_>) -> Result<()> {
        self.rope_yarn_log_mul = ld.opt_f32("rope.scaling.yarn_log_multiplier")?.unwrap_or(self.rope_yarn_log_mul);
        self.rope_yarn_beta.0 = ld.opt_f32("rope.scaling.yarn_beta_fast")?.unwrap_or(self.rope_yarn_beta.0);
        self.rope_yarn_beta.1 = ld.opt_f32("rope.scaling.yarn_beta_slow")?.unwrap_or(self.rope_yarn_beta.1);
        Ok(())
    }

    /// The rope of a layer with base `freq_base` and scale `freq_scale`, with llama.cpp's
    /// context-time YaRN settings (`llama_context` constructor).
    pub fn rope(&self, mode: RopeMode, freq_base: f32, freq_scale: f32, freq_factors: Option<Vec<f32>>) -> Rope {
        let ext_factor = if self.rope_yarn { 1.0 } else { 0.0 };
        let mut attn_factor = 1.0f32;
        if ext_factor != 0.0 {
            let get_mscale = |scale: f32, mscale: f32| if scale <= 1.0 { 1.0 } else { 0.1 * mscale * scale.ln() + 1.0 };
            let factor = 1.0 / freq_scale;
            attn_factor = if self.rope_yarn_log_mul != 0.0 {
                get_mscale(factor, self.rope_yarn_mscale) / get_mscale(factor, self.rope_yarn_log_mul)
            } else {
                get_mscale(factor, 1.0)
            };
            attn_factor *= 1.0 / (1.0 + 0.1 * factor.ln());
        }
        attn_factor *= self.rope_attn_factor;
        Rope {
            mode,
            n_rot: self.n_rot,
            freq_base,
            freq_scale,
            ext_factor,
            attn_factor,
            corr_dims: yarn_corr_dims(
                self.n_rot,
                self.n_ctx_orig,
                freq_base,
                self.rope_yarn_beta.0,
                self.rope_yarn_beta.1,
            ),
            freq_factors,
        }
    }
}

/// `expert_group_count` / `expert_group_used_count` of a model with `n_expert` experts,
/// checked as `llama_model::load_hparams` asserts them: fewer groups than experts, and with
/// more than one group, groups that divide the experts and `0 < used < groups`.
pub fn expert_groups(ld: &Loader<'_>, n_expert: usize) -> Result<(usize, usize)> {
    let groups = ld.opt_u32("expert_group_count")?.unwrap_or(0) as usize;
    let used = ld.opt_u32("expert_group_used_count")?.unwrap_or(0) as usize;
    let bad = |msg: String| Error::BadKey { key: ld.key("expert_group_count"), msg };
    if n_expert == 0 {
        return if groups == 0 { Ok((0, 0)) } else { Err(bad(format!("{groups} expert groups without experts"))) };
    }
    if groups >= n_expert {
        return Err(bad(format!("{groups} expert groups for {n_expert} experts")));
    }
    if groups > 1 {
        if !n_expert.is_multiple_of(groups) {
            return Err(bad(format!("{groups} expert groups do not divide {n_expert} experts")));
        }
        if used == 0 || used >= groups {
            return Err(Error::BadKey {
                key: ld.key("expert_group_used_count"),
                msg: format!("{used} groups used of {groups} (must be 1 to {})", groups - 1),
            });
        }
    }
    Ok((groups, used))
}
