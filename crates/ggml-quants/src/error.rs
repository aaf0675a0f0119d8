//! The one error type of `ggml-quants`.

/// Everything that can go wrong when looking up, decoding or encoding a ggml type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No registered type has this GGUF/ggml id.
    #[error("unknown ggml type id {id} (known: {known})")]
    UnknownTypeId {
        /// The id found.
        id: u32,
        /// The registered ids and names, sorted.
        known: String,
    },
    /// Two registered types claim one id or name at the same priority (a registry
    /// problem, also reported by `registry_problems`).
    #[error("{0}")]
    Clash(String),
    /// No registered type has this name.
    #[error("unknown ggml type name {name:?} (known: {known})")]
    UnknownTypeName {
        /// The name asked for.
        name: String,
        /// The registered names, sorted.
        known: String,
    },
    /// An element count that is not a whole number of blocks.
    #[error("{type_name}: {n} elements is not a multiple of the block size {block_size}")]
    NotWholeBlocks {
        /// ggml name of the type.
        type_name: &'static str,
        /// Element count given.
        n: usize,
        /// Elements per block.
        block_size: usize,
    },
    /// A buffer whose length does not match what the operation needs.
    #[error("{type_name}: {what} has {found} bytes/elements, expected {expected}")]
    BadLength {
        /// ggml name of the type.
        type_name: &'static str,
        /// Which buffer.
        what: &'static str,
        /// What was expected.
        expected: usize,
        /// What was given.
        found: usize,
    },
    /// The type has no quantizer in ggml.
    #[error("{type_name}: ggml has no quantizer for this type")]
    NoQuantizer {
        /// ggml name of the type.
        type_name: &'static str,
    },
    /// The type's quantizer needs an importance matrix (ggml_quantize_requires_imatrix).
    #[error("{type_name}: quantizing to this type requires an importance matrix (imatrix)")]
    ImatrixRequired {
        /// ggml name of the type.
        type_name: &'static str,
    },
}
