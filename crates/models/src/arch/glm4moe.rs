//! `glm4moe`: GLM-4.5 / GLM-4.5-Air / GLM-4.6 (`src/models/glm4-moe.cpp`) — NeoX rope on
//! part of the head (`rope.dimension_count`), Q/K/V biases, per-head QK-norm where the file
//! has it (the 355B model), the pre-FFN norm stored as `post_attention_norm`, dense FFNs in
//! the first `leading_dense_block_count` layers and MoE ones after: a sigmoid router
//! (`expert_gating_func`, default sigmoid) whose experts are chosen on the sigmoids plus
//! `exp_probs_b.bias` and weighted by the unbiased ones, renormalized when
//! `expert_weights_norm`, scaled by `expert_weights_scale`, plus `expert_shared_count`
//! shared experts. The file's last `nextn_predict_layers` blocks are multi-token-prediction
//! layers, which the forward pass does not run (as llama.cpp's, without a draft context).
//! Files with M-RoPE sections (GLM-4.5V) are refused.

use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::transformer::Gating;
use crate::Error;

gguf_registry::submit! {
    Architecture {
        name: "glm4moe",
        load: |file| super::load_with(file, "glm4moe", RopeMode::Neox, |ld, hp, spec| {
            if hp.n_expert == 0 {
                return Err(Error::MissingKey(ld.key("expert_count")));
            }
            if hp.head_k != hp.head_v {
                return Err(Error::Invalid(format!("glm4moe: head widths k={} v={} differ", hp.head_k, hp.head_v)));
            }
            if ld.opt_u32_per_layer("rope.dimension_sections", 4)?.is_some_and(|s| s.iter().any(|&x| x != 0)) {
                return Err(Error::Unsupported(
                    "glm4moe with M-RoPE sections (GLM-4.5V, `rope.dimension_sections`) is not supported yet".into(),
                ));
            }
            let nextn = ld.opt_u32("nextn_predict_layers")?.unwrap_or(0) as usize;
            if nextn >= hp.n_layer {
                return Err(Error::BadKey {
                    key: ld.key("nextn_predict_layers"),
                    msg: format!("{nextn} of {} blocks leaves no layer to run", hp.n_layer),
                });
            }
            let n_layer = hp.n_layer - nextn;
            spec.n_layer = Some(n_layer);
            spec.n_shared_experts = ld.u32("expert_shared_count")? as usize;
            spec.dense_lead = ld.opt_u32("leading_dense_block_count")?.unwrap_or(0) as usize;
            spec.moe_norm_weights = ld.opt_bool("expert_weights_norm")?.unwrap_or(false);
            spec.moe_gating = Gating::read(ld, Some(Gating::Sigmoid))?;
            spec.qk_norm = ld.has("blk.0.attn_q_norm.weight");
            spec.ffn_norm_tensor = "post_attention_norm";
            // what llama.cpp's loader requires of every MoE layer beyond the shared block's
            if let Some(missing) =
                (spec.dense_lead..n_layer).map(|il| format!("blk.{il}.exp_probs_b.bias")).find(|t| !ld.has(t))
            {
                return Err(Error::MissingTensor(missing));
            }
            Ok(())
        }),
        ..Architecture::BASE
    }
}
