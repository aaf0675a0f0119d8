//! `mistral3`: Ministral 3 / Mistral Small 3.x text models (`src/models/mistral3.cpp`) —
//! the llama block (normal-mode rope, optional `rope_freqs`, optional `attn_output` and
//! FFN biases, optional softmax-routed experts) with YaRN scaling read in full
//! (`rope.scaling.yarn_beta_fast`/`_slow`, `yarn_log_multiplier`) and Llama 4's attention
//! temperature: with `attention.temperature_scale` β set, each query row at position `p`
//! is multiplied after rope by `ln(⌊p / L⌋ + 1)·β + 1`, `L` the YaRN original context
//! (required then, as llama.cpp requires it). The attention scale is `attention.scale`
//! when set, else `1/√head`.

use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::Error;

gguf_registry::submit! {
    Architecture {
        name: "mistral3",
        load: |file| super::load_with(file, "mistral3", RopeMode::Normal, |ld, hp, spec| {
            hp.read_yarn_extras(ld)?;
            if hp.n_rot != hp.head_k || hp.head_k != hp.head_v {
                return Err(Error::Invalid(format!(
                    "mistral3: rope dims {}, head widths k={} v={} must all be equal",
                    hp.n_rot, hp.head_k, hp.head_v
                )));
            }
            if let Some(beta) = ld.opt_f32("attention.temperature_scale")?.filter(|&b| b != 0.0) {
                if hp.n_ctx_orig == 0 {
                    return Err(Error::BadKey {
                        key: ld.key("rope.scaling.original_context_length"),
                        msg: "0: the attention temperature divides positions by it".into(),
                    });
                }
                spec.attn_temperature = Some((beta, hp.n_ctx_orig));
            }
            Ok(())
        }),
        ..Architecture::BASE
    }
}
