//! `gemma3`: Gemma 3 — GeGLU, QK-norm, post-attention and post-FFN norms, embeddings
//! scaled by √n_embd, and interleaved sliding-window layers. The file stores neither the
//! layer pattern nor the local rope base: like llama.cpp, every 6th layer is global and
//! local layers use base 10000 unless the file says otherwise.

use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::transformer::{Activation, Swa};

gguf_registry::submit! {
    Architecture {
        name: "gemma3",
        load: |file| super::load_with(file, "gemma3", RopeMode::Neox, |ld, hp, spec| {
            spec.qk_norm = true;
            spec.post_norms = true;
            spec.activation = Activation::Gelu;
            spec.embed_scale = Some((hp.n_embd as f32).sqrt());
            // gemma_pytorch config: the 27B model scales by n_embd / n_head.
            spec.attn_scale = Some(if hp.n_layer == 62 {
                1.0 / ((hp.n_embd / hp.n_head) as f32).sqrt()
            } else {
                1.0 / (hp.head_k as f32).sqrt()
            });
            spec.scale_q = true;
            spec.final_softcap = ld.opt_f32("final_logit_softcapping")?.filter(|&c| c != 0.0);
            let window = ld.opt_u32("attention.sliding_window")?.unwrap_or(0) as usize;
            if window > 0 {
                let layers = super::swa_layers(ld, hp.n_layer, 6)?;
                spec.swa = Some(Swa {
                    window,
                    layers,
                    rope_base: ld.opt_f32_in("rope.freq_base_swa", f32::MIN_POSITIVE..)?.unwrap_or(10000.0),
                    rope_freq_scale: 1.0,
                });
            }
            Ok(())
        }),
        ..Architecture::BASE
    }
}
