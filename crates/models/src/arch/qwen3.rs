//! `qwen3`: Qwen3 dense — NeoX rope and per-head RMSNorm of Q and K.

use crate::registry::Architecture;
use crate::rope::RopeMode;

gguf_registry::submit! {
    Architecture {
        name: "qwen3",
        load: |file| super::load_with(file, "qwen3", RopeMode::Neox, |_, _, spec| {
            spec.qk_norm = true;
            Ok(())
        }),
        ..Architecture::BASE
    }
}
