//! `llama`: Llama 1–3, SmolLM2, Mistral, Mixtral-style MoE. Normal-mode rope with
//! optional `rope_freqs` factors (Llama 3.1+).

use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::Error;

gguf_registry::submit! {
    Architecture {
        name: "llama",
        load: |file| super::load_with(file, "llama", RopeMode::Normal, |_, hp, _| {
            if hp.n_rot != hp.head_k {
                return Err(Error::Invalid(format!("invalid n_rot: {}, expected {}", hp.n_rot, hp.head_k)));
            }
            Ok(())
        }),
        ..Architecture::BASE
    }
}
