//! GGUF files: a zero-copy, never-panicking reader and a streaming, atomic writer.
//!
//! [`GgufFile::open`] memory-maps a file and parses its header, metadata and tensor
//! table; tensor data stays in the map and is handed out as borrowed `&[u8]` views
//! ([`GgufFile::tensor_data`]). [`Gguf::parse`] does the same over any byte slice and is
//! what the fuzz target drives. Every length, count, offset and shape is checked with
//! overflow-safe arithmetic against the bytes actually present before anything is
//! allocated, and every failure is an [`Error`] that names the key or tensor and the
//! byte offset.
//!
//! [`GgufWriter`] writes metadata in order, the tensor table, alignment padding and the
//! tensor data, streaming each tensor (never the whole file in memory) into a temporary
//! file that is renamed over the target only once complete. Reading a file written by
//! llama.cpp and writing it back with [`GgufWriter::from_file`] gives identical bytes.
//!
//! [`SplitGguf`] opens a model stored as `llama-gguf-split` shards
//! (`PREFIX-00001-of-0000N.gguf` …) — or a plain file — as one: the first shard's
//! metadata, every shard's tensors, each tensor's data from its shard's map.
//!
//! This crate does no quant math: it asks the `ggml-quants` registry only for a type's
//! block layout (to size tensor data). A tensor of a type the registry does not know keeps
//! the rest of the file readable; only its data view fails.
//!
//! Format reference: llama.cpp `ggml/src/gguf.cpp` at commit `0c1e57098`.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod atomic;
mod error;
mod mmap;
mod reader;
pub mod split;
mod value;
mod writer;

pub use atomic::AtomicFile;
pub use error::Error;
pub use reader::{Gguf, GgufFile, TensorInfo};
pub use split::SplitGguf;
pub use value::{Array, Metadata, StringArray, Value, ValueType};
pub use writer::{GgufWriter, StreamFn, TensorSource};

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `GGUF` as the first four bytes.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment used when `general.alignment` is absent (`GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that sets the data alignment.
pub const KEY_ALIGNMENT: &str = "general.alignment";
/// The most dimensions a tensor may have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Deepest nesting of arrays accepted.
pub const MAX_ARRAY_DEPTH: usize = 8;
