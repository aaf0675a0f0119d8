//! `gpt-oss`: OpenAI's gpt-oss (llama.cpp's `LLM_ARCH_OPENAI_MOE`, `src/models/openai-moe.cpp`)
//! — Q/K/V/O projections with biases, NeoX rope with YaRN scaling, attention sinks (one
//! logit per head, `attn_sinks`), sliding-window attention on every other layer from
//! layer 0 (`attention.sliding_window`, required; `attention.sliding_window_pattern`,
//! default 2; windowed layers with `rope.freq_base_swa`, default the global base), the
//! pre-FFN norm stored as `post_attention_norm`, and a top-k MoE FFN: the router's biased
//! logits, the top k chosen on the raw logits and their weights a softmax over those k
//! (`SOFTMAX_WEIGHT`), every expert matrix with its bias, clamped SwiGLU (`swiglu_oai`).
//! The attention scale is `1/√n_rot`; the output matrix is always its own tensor.

use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::transformer::{Activation, Gating, Swa};
use crate::Error;

/// A layer's tensors the shared block reads only when present, and gpt-oss always has.
const REQUIRED: &[&str] = &[
    "attn_output.bias",
    "attn_sinks.weight",
    "post_attention_norm.weight",
    "ffn_gate_inp.bias",
    "ffn_gate_exps.bias",
    "ffn_up_exps.bias",
    "ffn_down_exps.bias",
];

gguf_registry::submit! {
    Architecture {
        name: "gpt-oss",
        load: |file| super::load_with(file, "gpt-oss", RopeMode::Neox, |ld, hp, spec| {
            if hp.n_expert == 0 {
                return Err(Error::MissingKey(ld.key("expert_count")));
            }
            if hp.n_ff_exp == 0 {
                return Err(Error::MissingKey(ld.key("expert_feed_forward_length")));
            }
            // what llama.cpp's loader requires beyond the shared block's tensors
            let required = (0..hp.n_layer).flat_map(|il| REQUIRED.iter().map(move |t| format!("blk.{il}.{t}")));
            if let Some(missing) = std::iter::once("output.weight".to_string()).chain(required).find(|t| !ld.has(t)) {
                return Err(Error::MissingTensor(missing));
            }
            let window = ld.u32("attention.sliding_window")? as usize;
            spec.attn_scale = Some(1.0 / (hp.n_rot as f32).sqrt());
            spec.attn_sinks = true;
            spec.ffn_norm_tensor = "post_attention_norm";
            spec.activation = Activation::SwigluOai;
            spec.moe_gating = Gating::SoftmaxWeight;
            spec.moe_norm_weights = false;
            if window > 0 {
                spec.swa = Some(Swa {
                    window,
                    layers: super::swa_layers(ld, hp.n_layer, 2)?,
                    rope_base: ld.opt_f32_in("rope.freq_base_swa", f32::MIN_POSITIVE..)?.unwrap_or(hp.rope_base),
                    rope_freq_scale: hp.rope_freq_scale,
                });
            }
            Ok(())
        }),
        ..Architecture::BASE
    }
}
