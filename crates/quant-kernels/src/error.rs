//! The one error type of `quant-kernels`.

/// Everything that can go wrong when setting up or running a kernel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The weight type id is not in the `ggml-quants` registry.
    #[error(transparent)]
    UnknownType(#[from] ggml_quants::Error),
    /// A buffer or dimension that does not match what the operation needs.
    #[error("{what}: expected {expected}, found {found}")]
    SizeMismatch {
        /// Which buffer or dimension.
        what: &'static str,
        /// What was expected.
        expected: usize,
        /// What was given.
        found: usize,
    },
    /// A column count that is not a whole number of blocks of the weight (or activation) type.
    #[error("{type_name}: {cols} columns is not a multiple of the block size {block_size}")]
    NotWholeBlocks {
        /// ggml name of the type.
        type_name: &'static str,
        /// Columns given.
        cols: usize,
        /// Elements per block.
        block_size: usize,
    },
    /// A row index past the end of the matrix.
    #[error("row {row} out of range (matrix has {rows} rows)")]
    RowOutOfRange {
        /// Row asked for.
        row: usize,
        /// Rows in the matrix.
        rows: usize,
    },
    /// The activation type a kernel asks for has no quantizer.
    #[error("kernel for {type_name} wants activations as type id {vec_dot_type}, which has no quantizer")]
    NoActivationQuantizer {
        /// ggml name of the weight type.
        type_name: &'static str,
        /// The activation (vec_dot) type id.
        vec_dot_type: u32,
    },
    /// A repacked matrix asked for something only GGUF's layout has (a single row).
    #[error("{type_name}: the matrix is repacked for its kernel; its rows cannot be read one by one")]
    RepackedRows {
        /// ggml name of the type.
        type_name: &'static str,
    },
    /// Dimensions whose product overflows `usize`.
    #[error("{what}: size overflows")]
    Overflow {
        /// Which size.
        what: &'static str,
    },
    /// `GGUF_CPU_FEATURES` holds a level this crate does not know.
    #[error("{}={value:?} is not a SIMD level (known: {known})", crate::cpu::ENV)]
    CpuFeatures {
        /// The value found.
        value: String,
        /// The accepted names.
        known: &'static str,
    },
}
