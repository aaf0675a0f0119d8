//! `smollm3`: SmolLM3 — the llama block (normal-mode rope, SwiGLU, optional untied output)
//! with no rope on every 4th layer (NoPE: layers 3, 7, 11, ...). The step is not in the
//! file: llama.cpp fixes `n_no_rope_layer_step = 4` for the architecture
//! (`src/models/smollm3.cpp`).

use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::Error;

/// Every `NO_ROPE_STEP`-th layer (1-based) has no rope.
const NO_ROPE_STEP: usize = 4;

gguf_registry::submit! {
    Architecture {
        name: "smollm3",
        load: |file| super::load_with(file, "smollm3", RopeMode::Normal, |_, hp, spec| {
            if hp.head_k != hp.head_v || hp.n_rot != hp.head_k {
                return Err(Error::Invalid(format!(
                    "smollm3 needs equal key/value head widths and full rope: k={} v={} n_rot={}",
                    hp.head_k, hp.head_v, hp.n_rot
                )));
            }
            spec.nope_layers = (0..hp.n_layer).map(|il| (il + 1) % NO_ROPE_STEP == 0).collect();
            Ok(())
        }),
        ..Architecture::BASE
    }
}
