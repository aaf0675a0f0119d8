//! `olmo2`: OLMo 2 — NeoX rope, no pre-norms: each block's output is RMS-normed
//! (`post_attention_norm`, `post_ffw_norm`) before its residual add, and QK-norm runs over
//! all heads at once (`attn_q_norm` n_embd wide, `attn_k_norm` n_head_kv × head wide);
//! attention scale 1/√head whatever the file says, an untied output required
//! (`src/models/olmo2.cpp`). OLMo 3's sliding-window layers (`attention.sliding_window`)
//! are refused for now.

use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::Error;

gguf_registry::submit! {
    Architecture {
        name: "olmo2",
        load: |file| super::load_with(file, "olmo2", RopeMode::Neox, |ld, hp, spec| {
            if hp.head_k != hp.head_v || hp.n_rot != hp.head_k || hp.head_k * hp.n_head != hp.n_embd {
                return Err(Error::Invalid(format!(
                    "olmo2 needs head width = n_embd / n_head for keys, values and rope: n_embd {} / {} heads, \
                     k={} v={} n_rot={}",
                    hp.n_embd, hp.n_head, hp.head_k, hp.head_v, hp.n_rot
                )));
            }
            if ld.opt_u32("attention.sliding_window")?.unwrap_or(0) > 0 {
                return Err(Error::Unsupported(format!(
                    "{} (OLMo 3's sliding-window layers) is not supported yet",
                    ld.key("attention.sliding_window")
                )));
            }
            if !ld.has("output.weight") {
                return Err(Error::MissingTensor("output.weight".into()));
            }
            spec.pre_norms = false;
            spec.post_norms = true;
            spec.qk_norm = true;
            spec.qk_norm_whole = true;
            spec.attn_scale = None;
            Ok(())
        }),
        ..Architecture::BASE
    }
}
