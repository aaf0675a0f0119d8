//! An architecture registered from outside the core crates: `demo-gelu-llama`, a llama
//! whose FFN gates with GELU instead of SiLU and whose logits are soft-capped at 30.
//!
//! An architecture is one [`gguf_models::Architecture`] entry: the `general.architecture`
//! value it answers to and a loader. One of the llama family only states what differs
//! from [`gguf_models::transformer::Spec::llama`] and lets [`gguf_models::load_with`] read the
//! hyperparameters (under its own `demo-gelu-llama.` prefix) and the weights:
//!
//! ```ignore
//! gguf_models::gguf_registry::submit!(gguf_models::Architecture::new(NAME, |file| {
//!     gguf_models::load_with(file, NAME, RopeMode::Normal, |_loader, _hparams, spec| {
//!         spec.activation = Activation::Gelu;
//!         spec.final_softcap = Some(30.0);
//!         Ok(())
//!     })
//! }));
//! ```
//!
//! Linking this crate (`use custom_arch as _;`) into any binary makes `gguf run`,
//! `logits`, `bench`, `serve` … load files of the new architecture; `gguf types --check`
//! counts it and reports a clash if another crate registers the same name at the same
//! priority. `src/bin/gguf-custom-arch.rs` is such a binary (one call to
//! `gguf_cli::main()`), `tests/it.rs` runs it end to end.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use gguf_models::rope::RopeMode;
use gguf_models::transformer::Activation;

/// The `general.architecture` this crate adds.
pub const NAME: &str = "demo-gelu-llama";

gguf_models::gguf_registry::submit!(gguf_models::Architecture::new(NAME, |file| {
    gguf_models::load_with(file, NAME, RopeMode::Normal, |_, _, spec| {
        spec.activation = Activation::Gelu;
        spec.final_softcap = Some(30.0);
        Ok(())
    })
}));
