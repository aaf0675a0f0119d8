//! The one error type of `quantize`.

use std::path::PathBuf;

/// Everything that can stop a quantization. Each variant names the file, tensor, recipe
/// or option involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing a GGUF file failed.
    #[error(transparent)]
    Gguf(#[from] gguf_format::Error),
    /// A quant type refused its input.
    #[error("{tensor}: {source}")]
    Quant {
        /// The tensor being converted.
        tensor: String,
        /// The cause.
        #[source]
        source: ggml_quants::Error,
    },
    /// An I/O error on `path`.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No recipe of that name or number.
    #[error("unknown recipe {name:?}; known: {known}")]
    UnknownRecipe {
        /// What was asked for.
        name: String,
        /// The registered names, comma-separated.
        known: String,
    },
    /// No ggml type of that name (in `--tensor-type`, `--output-tensor-type`, …).
    #[error("unknown ggml type {name:?} in {option}; known: {known}")]
    UnknownType {
        /// The option that named it.
        option: String,
        /// What was asked for.
        name: String,
        /// The registered type names.
        known: String,
    },
    /// A malformed command-line value (`--tensor-type`, `--override-kv`, `--prune-layers`).
    #[error("{option}: {reason}")]
    BadOption {
        /// The option.
        option: String,
        /// What is wrong.
        reason: String,
    },
    /// A key the rules need is missing or has the wrong type.
    #[error("{path}: {reason}")]
    BadModel {
        /// The input file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The importance-matrix file cannot be read.
    #[error("imatrix {path}: {reason}")]
    BadImatrix {
        /// The imatrix file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An imatrix entry's length does not match its tensor (an imatrix from another model).
    #[error("imatrix size {found} is different from tensor size {expected} for {tensor}")]
    ImatrixSize {
        /// The tensor.
        tensor: String,
        /// `ne[0] · ne[2]` of the tensor.
        expected: u64,
        /// The entry's length.
        found: u64,
    },
    /// The target type needs an importance matrix and none was given for this tensor.
    #[error("this quantization requires an importance matrix: tensor {tensor} as {type_name} (pass --imatrix FILE)")]
    ImatrixRequired {
        /// The tensor.
        tensor: String,
        /// The target type.
        type_name: &'static str,
    },
    /// The input is already quantized and `--allow-requantize` was not given.
    #[error("{tensor}: requantizing from type {type_name} is disabled (pass --allow-requantize)")]
    Requantize {
        /// The tensor.
        tensor: String,
        /// Its type in the input.
        type_name: &'static str,
    },
    /// A tensor's type cannot be converted to f32 or the target cannot be produced.
    #[error("{tensor}: {reason}")]
    Convert {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// Two recipes claim one name at one priority from one module (a registry problem).
    #[error("{0}")]
    Registry(String),
    /// A recipe's per-tensor rule refused a tensor.
    #[error("recipe {recipe}: {reason}")]
    Rule {
        /// The recipe.
        recipe: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The run was interrupted (Ctrl-C); nothing was written.
    #[error("interrupted; no output file written")]
    Interrupted,
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { path: path.into(), source }
    }
}
