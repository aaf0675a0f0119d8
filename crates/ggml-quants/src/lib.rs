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
//!
//! # Extending: a quant type from another crate
//!
//! Implement [`GgmlType`] on a marker and submit its traits; every reader of the workspace
//! (`gguf inspect`, `dequant`, the engine's generic path) then knows the type. Two types
//! of one id or name are a registry problem ([`registry_problems`]); `PRIORITY` above 0
//! replaces a built-in on purpose.
//!
//! ```
//! use ggml_quants::GgmlType;
//!
//! /// 32 signed bytes and an f32 scale per block.
//! struct Q8Mine;
//! impl GgmlType for Q8Mine {
//!     const NAME: &'static str = "q8_mine";
//!     const ID: u32 = 0x4000_0042; // far from ggml's ids
//!     const BLOCK_SIZE: usize = 32;
//!     const TYPE_SIZE: usize = 36;
//!     fn dequantize(src: &[u8], dst: &mut [f32]) {
//!         for (b, y) in src.chunks_exact(36).zip(dst.chunks_exact_mut(32)) {
//!             let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
//!             for (y, &q) in y.iter_mut().zip(&b[4..]) {
//!                 *y = d * q as i8 as f32;
//!             }
//!         }
//!     }
//! }
//! ggml_quants::inventory::submit! { <Q8Mine as GgmlType>::TRAITS }
//!
//! let t = ggml_quants::by_name("q8_mine").unwrap();
//! let mut block = vec![0u8; 36];
//! block[..4].copy_from_slice(&0.5f32.to_le_bytes());
//! block[4] = 3;
//! assert_eq!(t.dequantize_to_vec(&block).unwrap()[0], 1.5);
//! assert!(ggml_quants::registry_problems().problems.is_empty());
//! ```
//! `examples/custom-quant` adds kernels and a repacked layout for such a type.
#![forbid(unsafe_code)]
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
