//! The one error type of `gguf-format`.

use std::path::PathBuf;

/// Everything that can go wrong reading or writing a GGUF file. Parse errors carry the
/// byte offset where the problem was found and the key or tensor involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error on `path`.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file does not start with `GGUF`.
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// GGUF version 1 or a version from the future.
    #[error("unsupported GGUF version {version} at offset 4 (supported: 2 and 3)")]
    UnsupportedVersion {
        /// The version read.
        version: u32,
    },
    /// The version field reads as a small number only when byte-swapped.
    #[error("big-endian GGUF file (version {version} when byte-swapped) is not supported")]
    BigEndian {
        /// The byte-swapped version.
        version: u32,
    },
    /// The file ends before a field does.
    #[error("truncated file: {what} at offset {offset} needs {needed} bytes, only {available} remain")]
    Truncated {
        /// What was being read.
        what: String,
        /// Where.
        offset: u64,
        /// Bytes needed.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// A count that cannot fit in the remaining bytes.
    #[error("{what} at offset {offset}: count {count} cannot fit in the {available} bytes that remain (truncated or corrupt file)")]
    CountTooLarge {
        /// What was being counted.
        what: String,
        /// Where.
        offset: u64,
        /// The count read.
        count: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// A metadata value type id outside 0..=12.
    #[error("key {key:?}: invalid value type {type_id} at offset {offset}")]
    InvalidValueType {
        /// The key.
        key: String,
        /// The type id found.
        type_id: u32,
        /// Where.
        offset: u64,
    },
    /// A bool byte other than 0 or 1.
    #[error("key {key:?}: invalid bool byte {value} at offset {offset}")]
    InvalidBool {
        /// The key.
        key: String,
        /// The byte found.
        value: u8,
        /// Where.
        offset: u64,
    },
    /// A key or tensor name that is not UTF-8.
    #[error("{what} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// What was being read.
        what: String,
        /// Where.
        offset: u64,
    },
    /// Arrays nested deeper than [`crate::MAX_ARRAY_DEPTH`].
    #[error("key {key:?}: arrays nested deeper than {max} at offset {offset}")]
    TooDeep {
        /// The key.
        key: String,
        /// The limit.
        max: usize,
        /// Where.
        offset: u64,
    },
    /// The same key twice.
    #[error("duplicate metadata key {key:?} at offset {offset}")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Where the second one starts.
        offset: u64,
    },
    /// `general.alignment` of the wrong type, zero, or not a power of two.
    #[error("general.alignment: {reason}")]
    BadAlignment {
        /// What is wrong.
        reason: String,
    },
    /// The same tensor name twice.
    #[error("duplicate tensor name {name:?} at offset {offset}")]
    DuplicateTensor {
        /// The name.
        name: String,
        /// Where the second one starts.
        offset: u64,
    },
    /// A tensor with more than four dimensions, a negative dimension, or an element
    /// count that overflows.
    #[error("tensor {name:?} at offset {offset}: bad shape: {reason}")]
    BadShape {
        /// The tensor.
        name: String,
        /// Where its info starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A tensor of a type id the registry does not know.
    #[error("tensor {name:?}: unknown ggml type id {type_id}")]
    UnknownType {
        /// The tensor.
        name: String,
        /// The id.
        type_id: u32,
    },
    /// A tensor whose first dimension is not a whole number of blocks.
    #[error("tensor {name:?}: ne[0] = {ne0} is not a multiple of the {type_name} block size {block_size}")]
    NotWholeBlocks {
        /// The tensor.
        name: String,
        /// Its first dimension.
        ne0: u64,
        /// Its type.
        type_name: &'static str,
        /// The block size.
        block_size: usize,
    },
    /// A tensor offset that is not a multiple of the alignment.
    #[error("tensor {name:?}: data offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        /// The tensor.
        name: String,
        /// Its offset in the data section.
        offset: u64,
        /// The alignment.
        alignment: u64,
    },
    /// A tensor that extends beyond the end of the file.
    #[error("tensor {name:?}: data [{start}, {end}) extends past the end of the data section ({data_len} bytes)")]
    TensorOutOfBounds {
        /// The tensor.
        name: String,
        /// Start, relative to the data section.
        start: u64,
        /// End, relative to the data section.
        end: u64,
        /// Length of the data section.
        data_len: u64,
    },
    /// Two tensors whose data overlap.
    #[error("tensors {first:?} and {second:?} overlap (second starts at {offset}, first ends at {first_end})")]
    OverlappingTensors {
        /// The earlier tensor.
        first: String,
        /// The later tensor.
        second: String,
        /// Start of the second.
        offset: u64,
        /// End of the first.
        first_end: u64,
    },
    /// No tensor of that name.
    #[error("no tensor named {name:?}")]
    NoSuchTensor {
        /// The name asked for.
        name: String,
    },
    /// Writer: tensor data whose length does not match its type and shape.
    #[error("tensor {name:?}: data has {found} bytes, its type and shape need {expected}")]
    TensorSize {
        /// The tensor.
        name: String,
        /// Bytes needed.
        expected: u64,
        /// Bytes given.
        found: u64,
    },
    /// Writer: a value that cannot be written (e.g. an array mixing element types).
    #[error("key {key:?}: {reason}")]
    InvalidValue {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A split model whose shards do not form one consistent set (a `split.*` key
    /// missing or of the wrong type, a shard out of place, counts that disagree, a
    /// tensor in two shards, a file name that does not follow `PREFIX-NNNNN-of-NNNNN.gguf`).
    #[error("split model: {path}: {reason}")]
    Split {
        /// The shard at fault.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A shard of a split model that could not be opened or parsed.
    #[error("split model: shard {shard} of {count} ({path}): {}", cause_text(.cause))]
    SplitShard {
        /// 1-based shard number, as in its file name.
        shard: u32,
        /// Number of shards.
        count: u32,
        /// Its path.
        path: PathBuf,
        /// Why it could not be opened.
        cause: Box<Error>,
    },
    /// A type-registry error.
    #[error(transparent)]
    Quant(#[from] ggml_quants::Error),
}

/// A shard's open error without repeating its path (an I/O error names the file already
/// given by [`Error::SplitShard`]).
fn cause_text(cause: &Error) -> String {
    match cause {
        Error::Io { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}
