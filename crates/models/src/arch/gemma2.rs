//! `gemma2`: Gemma 2 (`src/models/gemma2.cpp`) — GeGLU, post-attention and post-FFN
//! norms, embeddings scaled by √n_embd, q scaled after rope by `1/√head_k` (the 27B, 46
//! layers: `1/√(n_embd / n_head)`; the file's `query_pre_attn_scalar` is not read), the
//! attention scores soft-capped inside the attention (`attn_logit_softcapping`, default
//! 50) and the logits soft-capped (`final_logit_softcapping`, default 30), sliding-window
//! attention (default 4096) on every other layer from layer 0
//! (`attention.sliding_window_pattern`, default 2), windowed layers with the global rope
//! base unless `rope.freq_base_swa` says otherwise. The output is always `token_embd`:
//! llama.cpp refuses a file with an `output.weight` (one tensor too many).

use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::transformer::{Activation, Swa};
use crate::Error;

/// llama.cpp's defaults when the file does not set them (`llama-hparams.h`, gemma2.cpp).
const ATTN_SOFTCAP: f32 = 50.0;
const FINAL_SOFTCAP: f32 = 30.0;
const WINDOW: u32 = 4096;
const PATTERN: u32 = 2;

gguf_registry::submit! {
    Architecture {
        name: "gemma2",
        load: |file| super::load_with(file, "gemma2", RopeMode::Neox, |ld, hp, spec| {
            if ld.has("output.weight") {
                return Err(Error::Invalid(
                    "gemma2 ties its output to `token_embd.weight`: unexpected tensor `output.weight`".into(),
                ));
            }
            let cap = |key: &str, default: f32| -> crate::Result<f32> {
                let c = ld.opt_f32(key)?.unwrap_or(default);
                if c == 0.0 || !c.is_finite() {
                    return Err(Error::BadKey { key: ld.key(key), msg: format!("soft-cap {c}: gemma2 divides by it") });
                }
                Ok(c)
            };
            spec.attn_softcap = Some(cap("attn_logit_softcapping", ATTN_SOFTCAP)?);
            spec.final_softcap = Some(cap("final_logit_softcapping", FINAL_SOFTCAP)?);
            spec.post_norms = true;
            spec.activation = Activation::Gelu;
            spec.embed_scale = Some((hp.n_embd as f32).sqrt());
            // gemma_pytorch config: the 27B model scales by n_embd / n_head.
            spec.attn_scale = Some(if hp.n_layer == 46 {
                1.0 / ((hp.n_embd / hp.n_head) as f32).sqrt()
            } else {
                1.0 / (hp.head_k as f32).sqrt()
            });
            spec.scale_q = true;
            let window = ld.opt_u32("attention.sliding_window")?.unwrap_or(WINDOW) as usize;
            let layers = super::swa_layers(ld, hp.n_layer, PATTERN)?;
            if window > 0 {
                spec.swa = Some(Swa {
                    window,
                    layers,
                    rope_base: ld.opt_f32_in("rope.freq_base_swa", f32::MIN_POSITIVE..)?.unwrap_or(hp.rope_base),
                    rope_freq_scale: hp.rope_freq_scale,
                });
            }
            Ok(())
        }),
        ..Architecture::BASE
    }
}
