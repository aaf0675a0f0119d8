//! ggml's block formats: a registry of quant types, each with a bit-exact `dequantize`
//! and (where ggml has one) a byte-identical `quantize`.
//!
//! Every type lives in its own module and registers a [`TypeTraits`] with
//! [`inventory::submit!`]. Nothing in this crate matches on a type id: loaders look a type
//! up by its GGUF id ([`by_id`]) or its ggml name ([`by_name`]). A crate outside this
//! workspace adds a type the same way (see `examples/custom-quant`).
//!
//! The reference is ggml itself (llama.cpp commit `0c1e57098`, ggml 0.25.3):
//! `ggml/src/ggml-quants.c` for the routines and `ggml/src/ggml.c` (`type_traits`,
//! `ggml_quantize_chunk`) for the table. Each module cites the function it ports.
#![deny(missing_docs)]

mod error;
mod registry;
pub mod util;

pub mod types;

pub use error::Error;
pub use registry::{
    all, by_id, by_name, lookup_id, lookup_name, registry_problems, DequantizeFn, GgmlType, QuantizeRefFn,
    QuantizeRowsFn, TypeTraits,
};

/// `inventory` re-exported so that plug-in crates can register types without naming the
/// dependency themselves.
pub use inventory;

/// Elements in a K-quant super-block (`QK_K` in ggml).
pub const QK_K: usize = 256;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
