//! The crate's one error type.

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `general.architecture` names no registered architecture.
    #[error("unknown architecture `{name}` (known: {known})")]
    UnknownArchitecture {
        /// The name found in the file.
        name: String,
        /// The registered names, comma-separated.
        known: String,
    },
    /// A required metadata key is absent.
    #[error("missing required metadata key `{0}`")]
    MissingKey(String),
    /// A metadata key has the wrong type or an unusable value.
    #[error("metadata key `{key}`: {msg}")]
    BadKey {
        /// The key.
        key: String,
        /// What is wrong with it.
        msg: String,
    },
    /// A required tensor is absent.
    #[error("missing tensor `{0}`")]
    MissingTensor(String),
    /// A tensor's shape differs from what the hyperparameters imply.
    #[error("tensor `{name}` has shape {got:?}, expected {want:?}")]
    Shape {
        /// Tensor name.
        name: String,
        /// Its shape in the file (ggml order).
        got: Vec<u64>,
        /// The expected shape.
        want: Vec<u64>,
    },
    /// A tensor's type cannot be used where it is.
    #[error("tensor `{name}` of type {type_name}: {why}")]
    TensorType {
        /// Tensor name.
        name: String,
        /// Its type name.
        type_name: String,
        /// Why it cannot be used.
        why: String,
    },
    /// The hyperparameters contradict each other.
    #[error("invalid model: {0}")]
    Invalid(String),
    /// A buffer (the KV cache at a context size) larger than the machine can give.
    #[error("not enough memory: {0}")]
    OutOfMemory(String),
    /// More tokens than the context holds.
    #[error("{n_tokens} tokens do not fit in the context of {n_ctx} (at position {pos}); use a larger -c")]
    ContextFull {
        /// Tokens requested.
        n_tokens: usize,
        /// Context size.
        n_ctx: usize,
        /// Tokens already in the cache.
        pos: usize,
    },
    /// A token id is outside the vocabulary.
    #[error("token id {id} is out of range (vocabulary of {n_vocab})")]
    TokenOutOfRange {
        /// The id.
        id: u32,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// An unsupported option value.
    #[error("{0}")]
    Unsupported(String),
    /// Reading tensor data from the model file failed.
    #[error("reading tensor `{name}` from the model file: {source}")]
    Read {
        /// Tensor name.
        name: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// File-format error.
    #[error(transparent)]
    Format(#[from] gguf_format::Error),
    /// Quant-type error.
    #[error(transparent)]
    Quants(#[from] ggml_quants::Error),
    /// Kernel error.
    #[error(transparent)]
    Kernels(#[from] quant_kernels::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
