//! Built-in architectures, one module each. Each reads what sets it apart from the
//! shared [`crate::transformer::Transformer`] and registers itself.

mod gemma3;
mod llama;
mod qwen2;
mod qwen3;
mod qwen3moe;

use std::sync::Arc;

use gguf_format::SplitGguf;

use crate::hparams::Hparams;
use crate::loader::Loader;
use crate::model::Model;
use crate::rope::RopeMode;
use crate::transformer::{Activation, Spec, Transformer};
use crate::Result;

/// The plain llama-style spec: SwiGLU, no QK-norm, no post-norms.
pub(crate) fn base_spec(ld: &Loader<'_>, rope_mode: RopeMode) -> Result<Spec> {
    Ok(Spec {
        rope_mode,
        qk_norm: false,
        post_norms: false,
        activation: Activation::Silu,
        embed_scale: None,
        attn_scale: ld.opt_f32("attention.scale")?.filter(|&s| s != 0.0),
        scale_q: false,
        swa: None,
        final_softcap: None,
        moe_norm_weights: true,
    })
}

/// Reads the common hyperparameters, lets `tweak` adjust the spec, loads the weights.
pub(crate) fn load_with(
    file: Arc<SplitGguf>,
    arch: &'static str,
    rope_mode: RopeMode,
    tweak: impl FnOnce(&Loader<'_>, &Hparams, &mut Spec) -> Result<()>,
) -> Result<Box<dyn Model>> {
    let (hp, spec) = {
        let ld = Loader::new(&file, arch);
        let hp = Hparams::read(&ld)?;
        let mut spec = base_spec(&ld, rope_mode)?;
        tweak(&ld, &hp, &mut spec)?;
        (hp, spec)
    };
    Ok(Box::new(Transformer::load(file, arch, hp, spec)?))
}
