//! `deepseek2`: DeepSeek-V2 / V2-Lite / V2.5 / V3 / R1, Kimi-K2 and the other files of this
//! layout (`src/models/deepseek2.cpp`) — multi-head latent attention ([`Mla`]: a
//! compressed KV cache of `kv_lora_rank + n_rot` per token, queries absorbed through
//! `attn_k_b`, outputs decompressed through `attn_v_b`; the queries direct or through
//! `attention.q_lora_rank`), normal-mode rope on the `rope.dimension_count` trailing dims of
//! each head with YaRN, and a score scale of `mscale² / √key_length_mla` (llama.cpp's
//! pre-scaling: `mscale` from the context's YaRN attention factor and the log multiplier,
//! which the converter stored × 0.1). Dense FFNs in the first `leading_dense_block_count`
//! layers, then routed experts (`expert_gating_func`: softmax for V2 files without the key,
//! sigmoid with `exp_probs_b.bias` for V3; `expert_weights_norm`, `expert_weights_scale`,
//! group-limited routing from `expert_group_count` / `expert_group_used_count`) plus
//! `expert_shared_count` shared experts. The last `nextn_predict_layers` blocks are
//! multi-token-prediction layers, not run. Files converted before llama.cpp's MLA support
//! (an unsplit `attn_kv_b`, no `key_length_mla`) are refused with a clear error.

use std::sync::Arc;

use gguf_format::SplitGguf;

use crate::blocks::MlaDims;
use crate::hparams::Hparams;
use crate::loader::Loader;
use crate::model::Model;
use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::transformer::{Gating, Transformer};
use crate::{Error, Result};

const ARCH: &str = "deepseek2";

gguf_registry::submit! {
    Architecture { name: ARCH, load, ..Architecture::BASE }
}

/// The vocabulary size llama.cpp's `load_arch_hparams` uses to tell the variants apart
/// (`vocab_size`, else the token list's length).
fn n_vocab(ld: &Loader<'_>) -> Result<usize> {
    if let Some(n) = ld.opt_u32("vocab_size")? {
        return Ok(n as usize);
    }
    Ok(ld.file().metadata().get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map_or(0, |a| a.len()))
}

/// deepseek2's score scale: the YaRN attention factor `attn_factor` (with llama.cpp's
/// adjustment cancelled) and the log multiplier `log_mul` give `mscale`, the scale is
/// `mscale² / √k_mla`, all in f32 as `deepseek2.cpp` computes it.
pub fn kq_scale(attn_factor: f32, freq_scale: f32, log_mul: f32, k_mla: usize) -> f32 {
    let ln = (1.0f32 / freq_scale).ln();
    let attn_factor_org = attn_factor * (1.0 + 0.1 * ln);
    let mscale = attn_factor_org * (1.0 + 0.1 * log_mul * ln);
    1.0 * mscale * mscale / (k_mla as f32).sqrt()
}

fn load(file: Arc<SplitGguf>) -> Result<Box<dyn Model>> {
    let (hp, spec) = {
        let ld = Loader::with_shared(&file, ARCH);
        let mut hp = Hparams::read(&ld)?;
        let bad = |k: &str, msg: String| Error::BadKey { key: ld.key(k), msg };
        let n_vocab = n_vocab(&ld)?;
        let lite = matches!(hp.n_layer, 26 | 27) || (hp.n_layer == 48 && n_vocab == 128256);
        let q_lora = if lite { 0 } else { ld.u32("attention.q_lora_rank")? as usize };
        let kv_lora = ld.u32("attention.kv_lora_rank")? as usize;
        let (k_mla, v_mla) = match (ld.opt_u32("attention.key_length_mla")?, ld.opt_u32("attention.value_length_mla")?)
        {
            (Some(k), Some(v)) if k > 0 && v > 0 => (k as usize, v as usize),
            _ => {
                return Err(Error::Unsupported(format!(
                    "{ARCH} without `{}` / `{}` (a file converted before llama.cpp's MLA support, with an \
                     unsplit `attn_kv_b`) is not supported: convert it again with a current convert_hf_to_gguf.py",
                    ld.key("attention.key_length_mla"),
                    ld.key("attention.value_length_mla")
                )))
            }
        };
        let n_rot = hp.n_rot;
        if k_mla <= n_rot {
            return Err(bad("attention.key_length_mla", format!("{k_mla}: not more than the {n_rot} rope dims")));
        }
        if kv_lora == 0 {
            return Err(bad("attention.kv_lora_rank", "0".into()));
        }
        if hp.n_head_kv != 1 || hp.head_k != kv_lora + n_rot || hp.head_v != kv_lora {
            return Err(Error::Invalid(format!(
                "{ARCH}: the MLA cache needs 1 KV head of key_length = kv_lora_rank + rope dims = {} and \
                 value_length = kv_lora_rank = {kv_lora}; the file has {} KV heads, key_length {}, value_length {}",
                kv_lora + n_rot,
                hp.n_head_kv,
                hp.head_k,
                hp.head_v
            )));
        }
        if hp.n_expert == 0 {
            return Err(Error::MissingKey(ld.key("expert_count")));
        }
        if hp.n_ff_exp == 0 {
            return Err(Error::MissingKey(ld.key("expert_feed_forward_length")));
        }
        // [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]: the converter stored 0.1 × mscale_all_dims
        if let Some(log_mul) = ld.opt_f32("rope.scaling.yarn_log_multiplier")? {
            hp.rope_yarn_log_mul = log_mul / 0.1;
            if hp.rope_yarn_log_mul != 1.0 {
                hp.rope_yarn_mscale = hp.rope_yarn_log_mul;
            }
        }
        let mut spec = super::base_spec(&ld, RopeMode::Normal)?;
        let nextn = ld.opt_u32("nextn_predict_layers")?.unwrap_or(0) as usize;
        if nextn >= hp.n_layer {
            return Err(bad(
                "nextn_predict_layers",
                format!("{nextn} of {} blocks leaves no layer to run", hp.n_layer),
            ));
        }
        spec.n_layer = Some(hp.n_layer - nextn);
        spec.dense_lead = ld.opt_u32("leading_dense_block_count")?.unwrap_or(0) as usize;
        spec.n_shared_experts = ld.u32("expert_shared_count")? as usize;
        spec.moe_norm_weights = ld.opt_bool("expert_weights_norm")?.unwrap_or(false);
        // V2 / V2.5 files have no gating key: softmax, except GLM-4.7 Lite's sigmoid
        let glm47_lite = matches!(hp.n_layer, 47 | 48) && n_vocab == 154880;
        spec.moe_gating = Gating::read(&ld, Some(if glm47_lite { Gating::Sigmoid } else { Gating::Softmax }))?;
        let temp = ld.opt_f32("attention.temperature_scale")?.unwrap_or(0.0);
        if temp != 0.0 {
            let len = ld.u32("attention.temperature_length")?;
            if len == 0 {
                return Err(bad("attention.temperature_length", "0".into()));
            }
            spec.attn_temperature = Some((temp, len));
        }
        let rope = hp.rope(RopeMode::Normal, hp.rope_base, hp.rope_freq_scale, None);
        spec.attn_scale = Some(kq_scale(rope.attn_factor, hp.rope_freq_scale, hp.rope_yarn_log_mul, k_mla));
        spec.mla = Some(MlaDims { n_head: hp.n_head, q_lora, kv_lora, qk_nope: k_mla - n_rot, n_rot, head_v: v_mla });
        (hp, spec)
    };
    Ok(Box::new(Transformer::load(file, ARCH, hp, spec)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kq_scale_without_yarn_is_one_over_root_k() {
        assert_eq!(kq_scale(1.0, 1.0, 0.0, 192), 1.0 / 192f32.sqrt());
    }

    #[test]
    fn kq_scale_with_yarn_cancels_the_context_adjustment() {
        // DeepSeek-V2-Lite: factor 40, mscale_all_dims 0.707; llama.cpp's context factor is
        // 1 / (1 + 0.1 ln 40), which the scale cancels before applying 1 + 0.1·0.707·ln 40.
        let fs = 1.0 / 40.0;
        let af = 1.0 / (1.0 + 0.1 * 40f32.ln());
        let m = 1.0 + 0.1 * 0.707 * 40f32.ln();
        let want = m * m / 192f32.sqrt();
        assert!((kq_scale(af, fs, 0.707, 192) - want).abs() < 1e-6 * want);
    }
}
