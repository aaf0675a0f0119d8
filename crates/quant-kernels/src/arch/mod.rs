//! Architecture-specific kernels: the crate's only `unsafe` besides the pool's lifetime
//! erasure. Every kernel here has a scalar twin in `crate::scalar` and is reached only
//! through a safe wrapper that checks the CPU features at run time.

#[cfg(target_arch = "x86_64")]
pub mod x86_64;

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
