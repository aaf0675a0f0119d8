//! Built-in architectures, one module each. Each reads what sets it apart from the
//! shared [`crate::transformer::Transformer`] and registers itself through [`load_with`],
//! which plug-in architectures of the same family use too.

mod bert;
mod deepseek2;
mod gemma2;
mod gemma3;
mod gemma4;
mod glm4moe;
mod gpt_oss;
mod granite;
mod granite_hybrid;
mod lfm2;
mod llama;
mod mistral3;
mod olmo2;
mod phi3;
mod qwen2;
mod qwen3;
mod qwen35;
mod qwen3moe;
mod smollm3;

use std::sync::Arc;

use gguf_format::SplitGguf;

use crate::hparams::Hparams;
use crate::loader::Loader;
use crate::model::Model;
use crate::rope::RopeMode;
use crate::transformer::{Spec, Transformer};
use crate::Result;

/// [`Spec::llama`] with the file's `attention.scale` (when set and non-zero).
pub fn base_spec(ld: &Loader<'_>, rope_mode: RopeMode) -> Result<Spec> {
    let mut spec = Spec::llama(rope_mode);
    spec.attn_scale = ld.opt_f32("attention.scale")?.filter(|&s| s != 0.0);
    Ok(spec)
}

/// Which of `n_layer` layers are windowed, as llama.cpp's `load_swa_pattern`: the file's
/// `attention.sliding_window_pattern` as one flag per layer, or as a period `p` (default
/// `period`) where every `p`-th layer is global (`il % p < p - 1` windowed; 0: all).
pub fn swa_layers(ld: &Loader<'_>, n_layer: usize, period: u32) -> Result<Vec<bool>> {
    if let Some(flags) = ld.opt_bool_array("attention.sliding_window_pattern")? {
        if flags.len() == n_layer {
            return Ok(flags);
        }
    }
    let p = ld.opt_u32("attention.sliding_window_pattern")?.unwrap_or(period) as usize;
    Ok((0..n_layer).map(|il| p == 0 || il % p < p - 1).collect())
}

/// Reads the common hyperparameters ([`Hparams::read`] under the `arch.` prefix) and
/// [`base_spec`], lets `tweak` adjust both (and check the hyperparameters), loads the
/// weights into a [`Transformer`]. What a built-in architecture's loader is, and what a
/// plug-in architecture of the llama family needs:
///
/// ```ignore
/// gguf_models::gguf_registry::submit!(gguf_models::Architecture::new("my-llama", |file| {
///     gguf_models::load_with(file, "my-llama", gguf_models::rope::RopeMode::Neox, |_, _, spec| {
///         spec.activation = gguf_models::transformer::Activation::Gelu;
///         Ok(())
///     })
/// }));
/// ```
pub fn load_with(
    file: Arc<SplitGguf>,
    arch: &'static str,
    rope_mode: RopeMode,
    tweak: impl FnOnce(&Loader<'_>, &mut Hparams, &mut Spec) -> Result<()>,
) -> Result<Box<dyn Model>> {
    let (hp, spec) = {
        let ld = Loader::with_shared(&file, arch);
        let mut hp = Hparams::read(&ld)?;
        let mut spec = base_spec(&ld, rope_mode)?;
        tweak(&ld, &mut hp, &mut spec)?;
        (hp, spec)
    };
    Ok(Box::new(Transformer::load(file, arch, hp, spec)?))
}
