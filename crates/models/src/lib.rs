//! Architectures, forward passes, KV cache and sampling for GGUF models.
//!
//! Architectures register themselves by `general.architecture` (an
//! `inventory::submit!` of a [`registry::Architecture`]); [`load`] opens a file and
//! dispatches. The built-in ones (llama, qwen2, qwen3, qwen3moe, deepseek2, gemma2, gemma3, smollm3, granite,
//! olmo2) share [`transformer::Transformer`], differing only in their
//! [`transformer::Spec`]. Weights stay quantized in the file's mmap (each shard's, for a
//! split model); `quant_kernels` computes on them in place.
//!
//! # Extending: an architecture from another crate
//!
//! An architecture is an [`Architecture`] entry: `general.architecture` and a loader. One
//! of the llama family states what differs from [`transformer::Spec::llama`] through
//! [`load_with`]; anything else implements [`Model`] and [`State`] itself.
//!
//! ```
//! use gguf_models::{rope::RopeMode, transformer::Activation, Architecture};
//!
//! gguf_models::gguf_registry::submit!(Architecture::new("my-llama", |file| {
//!     gguf_models::load_with(file, "my-llama", RopeMode::Neox, |_, _, spec| {
//!         spec.activation = Activation::Gelu;
//!         spec.qk_norm = true;
//!         Ok(())
//!     })
//! }));
//!
//! assert!(gguf_models::architectures().iter().any(|a| a.name == "my-llama"));
//! assert!(gguf_models::registry_problems().problems.is_empty());
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod arch;
pub mod blocks;
mod error;
pub mod hparams;
mod hybrid_state;
pub mod kv_cache;
pub mod loader;
pub mod model;
pub mod registry;
pub mod residency;
pub mod rope;
pub mod sampling;
pub mod synthetic;
pub mod transformer;

use std::path::Path;
use std::sync::Arc;

pub use arch::{base_spec, load_with};
pub use error::{Error, Result};
pub use kv_cache::CacheType;
pub use model::{normalize_embedding, Encoder, Logits, Model, Observer, Pooling, Segment, State, StateOptions};
pub use quant_kernels::{Pool, MAX_THREADS};
pub use registry::{architectures, describe, registry_problems, Architecture};

/// The registry crate, for `gguf_models::gguf_registry::submit!` in plug-in crates.
pub use gguf_registry;
pub use sampling::{Sampler, SamplerParams};

/// Re-exported for architectures registered from other crates.
pub use inventory;

/// Maps a GGUF file and loads the model it holds. A shard of a `llama-gguf-split` set
/// (`NAME-00001-of-0000N.gguf`, any of them) loads the whole set as one model, as
/// llama.cpp does; a missing or mismatched shard is an error naming it.
pub fn load(path: impl AsRef<Path>) -> Result<(Arc<gguf_format::SplitGguf>, Box<dyn Model>)> {
    let file = Arc::new(gguf_format::SplitGguf::open(path)?);
    let model = registry::load(file.clone())?;
    Ok((file, model))
}
