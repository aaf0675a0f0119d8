//! The crate's one error type: each way the CUDA backend can be unavailable or fail, with
//! what was tried, so a caller can print it as is and fall back to the CPU.

/// What went wrong in the CUDA backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No CUDA driver library could be opened (no NVIDIA driver installed).
    #[error("no CUDA driver: {} not found (tried {})", tried.first().map(String::as_str).unwrap_or("libcuda"), tried.join(", "))]
    DriverNotFound {
        /// Library names and paths tried, in order.
        tried: Vec<String>,
    },
    /// The driver loaded but reports no device (or failed to initialise).
    #[error("CUDA driver found ({library}) but no CUDA device: {detail}")]
    NoDevice {
        /// The driver library that was opened.
        library: String,
        /// The driver's answer.
        detail: String,
    },
    /// `cuda:N` names a device that does not exist.
    #[error("CUDA device {ordinal} requested but only {count} device(s) present")]
    BadOrdinal {
        /// The requested ordinal.
        ordinal: usize,
        /// Devices present.
        count: usize,
    },
    /// No NVRTC library could be opened.
    #[error("NVRTC (the CUDA runtime compiler) not found: tried {}; set GGUF_NVRTC_LIB to libnvrtc.so.12 (e.g. from the nvidia-cuda-nvrtc-cu12 wheel)", tried.join(", "))]
    NvrtcNotFound {
        /// Library names and paths tried, in order.
        tried: Vec<String>,
    },
    /// The NVRTC library lacks a function this crate calls.
    #[error("NVRTC library {library} lacks {symbol}")]
    NvrtcSymbol {
        /// The library opened.
        library: String,
        /// The missing function.
        symbol: &'static str,
    },
    /// NVRTC rejected a kernel source.
    #[error("NVRTC failed to compile the CUDA kernels of {kernel} for {arch}: {status}\n{log}")]
    Compile {
        /// The registered source's name (a ggml type name, or `"ops"`).
        kernel: String,
        /// The virtual architecture compiled for, `compute_80`.
        arch: String,
        /// NVRTC's status.
        status: String,
        /// NVRTC's compile log.
        log: String,
    },
    /// The driver would not load compiled PTX, or a kernel entry point is missing from it.
    #[error("CUDA could not load the module of {kernel}: {detail}")]
    ModuleLoad {
        /// The registered source's name.
        kernel: String,
        /// The driver's answer.
        detail: String,
    },
    /// No CUDA kernels are registered for a type (or for the requested operation).
    #[error("no CUDA {op} kernel for type {type_name} (id {type_id})")]
    Unsupported {
        /// The operation: `"dequantize"`, `"mat-vec"`.
        op: &'static str,
        /// The ggml type name, or `"?"`.
        type_name: String,
        /// The GGUF type id.
        type_id: u32,
    },
    /// Buffer sizes or shapes that do not fit the operation.
    #[error("bad shape for {op}: {detail}")]
    Shape {
        /// The operation.
        op: &'static str,
        /// What does not fit.
        detail: String,
    },
    /// A driver call failed (allocation, copy, launch).
    #[error("CUDA driver call failed during {during}: {detail}")]
    Driver {
        /// What was being done.
        during: &'static str,
        /// The driver's answer.
        detail: String,
    },
    /// Reading or writing the kernel cache.
    #[error("CUDA kernel cache {path}: {source}")]
    Cache {
        /// The file or folder.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
