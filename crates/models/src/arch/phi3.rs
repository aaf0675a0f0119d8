//! `phi3`: Phi-3 / Phi-3.5 / Phi-4-mini (`src/models/phi3.cpp`) — NeoX rope, Q, K and V
//! fused in `attn_qkv` (separate `attn_q`/`attn_k`/`attn_v` load too), gate and up fused
//! in `ffn_up` (`2·n_ff` rows, gate first: `ggml_swiglu` of one tensor), q scaled by
//! `1/√head` after rope, optional untied output. LongRoPE (Phi-3.5, 128k): the
//! `rope_factors_short` / `rope_factors_long` tensors; llama.cpp takes the long ones when
//! the context exceeds `rope.scaling.original_context_length` — only the short ones are
//! supported here, so such a file refuses a larger context. `attention.sliding_window`
//! is ignored, as llama.cpp ignores it (its Phi SWA is disabled).

use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::transformer::Activation;
use crate::Error;

gguf_registry::submit! {
    Architecture {
        name: "phi3",
        load: |file| super::load_with(file, "phi3", RopeMode::Neox, |ld, hp, spec| {
            if hp.head_k != hp.head_v || hp.head_k * hp.n_head != hp.n_embd {
                return Err(Error::Invalid(format!(
                    "phi3 needs equal key/value head widths of n_embd / n_head: n_embd {} / {} heads, k={} v={}",
                    hp.n_embd, hp.n_head, hp.head_k, hp.head_v
                )));
            }
            if hp.n_expert > 0 {
                return Err(Error::Unsupported("phi3 with experts is `phimoe`, not supported yet".into()));
            }
            if ld.has("rope_freqs.weight") {
                return Err(Error::Invalid(
                    "phi3 reads `rope_factors_short/long.weight`: unexpected tensor `rope_freqs.weight`".into(),
                ));
            }
            let n = (hp.n_rot / 2) as u64;
            let short = ld.opt_vector("rope_factors_short.weight", n)?;
            let long = ld.opt_vector("rope_factors_long.weight", n)?;
            if short.is_some() || long.is_some() {
                spec.max_ctx = Some(hp.n_ctx_orig as usize);
            }
            spec.freq_factors = short;
            spec.ffn_fused_up = true;
            spec.activation = Activation::Silu;
            spec.attn_scale = Some(1.0 / (hp.head_k as f32).sqrt());
            spec.scale_q = true;
            Ok(())
        }),
        ..Architecture::BASE
    }
}
