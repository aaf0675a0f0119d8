//! `qwen2`: Qwen2 / Qwen2.5 — NeoX rope, Q/K/V biases (loaded when present), untied output.

use crate::registry::Architecture;
use crate::rope::RopeMode;

gguf_registry::submit! {
    Architecture { name: "qwen2", load: |file| super::load_with(file, "qwen2", RopeMode::Neox, |_, _, _| Ok(())), ..Architecture::BASE }
}
