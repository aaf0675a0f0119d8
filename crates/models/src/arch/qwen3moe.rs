//! `qwen3moe`: Qwen3 MoE — as qwen3, with a softmax router over stacked experts
//! (`ffn_{gate,up,down}_exps`), top-k and renormalized weights.

use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::Error;

gguf_registry::submit! {
    Architecture {
        name: "qwen3moe",
        load: |file| super::load_with(file, "qwen3moe", RopeMode::Neox, |ld, hp, spec| {
            if hp.n_expert == 0 {
                return Err(Error::MissingKey(ld.key("expert_count")));
            }
            spec.qk_norm = true;
            spec.moe_norm_weights = true;
            Ok(())
        }),
        ..Architecture::BASE
    }
}
