//! CPU compute over ggml block formats: quantized mat-vec / mat-mat ([`matmul`]) with
//! kernels registered per (weight type, backend) in [`registry`], a persistent worker
//! [`Pool`], and the f32 helpers of the forward pass ([`ops`]).
//!
//! Activations are converted as ggml-cpu does (its `vec_dot_type` per weight type, with
//! the x86 quantizers' rounding), so results follow ggml's CPU backend; SIMD kernels are
//! picked at run time (`is_x86_feature_detected!`), each with a scalar twin in
//! `scalar`. A weight type with no kernel runs through a generic dequantize-a-row path.
//!
//! `unsafe` lives in `arch/` (SIMD kernels behind safe, feature-checking wrappers) and in
//! one lifetime erasure in `pool.rs`.
#![deny(missing_docs)]

mod arch;
pub mod cpu;
mod error;
mod kernels;
mod matmul;
pub mod ops;
mod pool;
pub mod registry;
mod rowdot;
pub mod scalar;

pub use error::Error;
pub use matmul::{matmul, matmul_expert, matmul_rowwise, tile_by_vec_dot, Matrix, Repacked};
pub use pool::{Pool, MAX_THREADS};
pub use registry::{kernel_info, registry_problems, Kernel, Repack, Tile};
pub use rowdot::{quantize_row, ActRow};

/// `inventory` re-exported so that plug-in crates can register kernels without naming
/// the dependency themselves.
pub use inventory;

/// Direct access to the SIMD kernels (for tests and benchmarks: each next to its scalar
/// twin in [`scalar`]).
#[cfg(target_arch = "x86_64")]
pub mod x86_64 {
    pub use crate::arch::x86_64::{avx2, has_avx2, vnni};
}
