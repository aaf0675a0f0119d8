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
//!
//! # Extending: a kernel from another crate
//!
//! A [`Kernel`] for a weight type (built-in or a plug-in type) with a priority above the
//! built-ins (scalar 0, AVX2/NEON 10, AVX-512 VNNI 20) is the one [`matmul`] uses wherever
//! its `available` check passes; a kernel may own a load-time layout
//! ([`Kernel::with_repack`]). `GGUF_CPU_FEATURES` ([`cpu`]) caps the built-in levels.
//!
//! ```
//! use quant_kernels::{matmul, Kernel, Matrix, Pool};
//!
//! /// q8_0 · q8_0 in plain Rust (ggml's block: f16 scale, 32 signed bytes).
//! fn dot(_n: usize, w: &[u8], x: &[u8]) -> f32 {
//!     w.chunks_exact(34).zip(x.chunks_exact(34)).map(|(a, b)| {
//!         let d = |c: &[u8]| half::f16::from_le_bytes([c[0], c[1]]).to_f32();
//!         let s: i32 = (2..34).map(|i| a[i] as i8 as i32 * b[i] as i8 as i32).sum();
//!         s as f32 * d(a) * d(b)
//!     }).sum()
//! }
//! quant_kernels::inventory::submit! { Kernel::new(8, "mine", 100, 8, dot) }
//!
//! assert_eq!(quant_kernels::kernel_info(8), "mine");
//! let t = ggml_quants::by_name("q8_0").unwrap();
//! let w = t.quantize_to_vec(&[0.5f32; 64], 32, None).unwrap();
//! let (mut y, pool) = (vec![0f32; 2], Pool::new(1));
//! matmul(&pool, &Matrix::new(8, &w, 2, 32).unwrap(), &[1.0; 32], 1, &mut y).unwrap();
//! assert!((y[0] - 16.0).abs() < 0.1);
//! ```
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
pub use matmul::{matmul, matmul_expert, matmul_rowwise, matmul_rowwise_group, tile_by_vec_dot, Matrix, Repacked};
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
