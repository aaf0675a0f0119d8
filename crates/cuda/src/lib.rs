//! The CUDA backend: per-type kernels written in CUDA C, embedded in this crate, compiled at
//! run time by NVRTC and run through `cudarc`'s driver API.
//!
//! Nothing here links CUDA at build time: `cudarc` opens `libcuda` with `dlopen` on first
//! use (and panics when it is absent, so [`probe::driver_library`] checks first), and
//! NVRTC is opened by [`nvrtc::Nvrtc`] from `GGUF_NVRTC_LIB` or the usual names. A machine
//! without a driver, a device or NVRTC gets an [`Error`] that says which, never a panic;
//! the CPU path does not depend on this crate.
//!
//! - [`registry`]: per type id, the `.cu` source and its entry points ([`CudaKernels`]),
//!   one module per type under `types/`; a plug-in type registers its own.
//! - [`nvrtc`], [`cache`]: compiling a source for a device's compute capability, with the
//!   PTX cached on disk per device.
//! - [`Device`]: one GPU: modules loaded on first use per type, dequantize, q8_1
//!   quantization and mat-vec on host buffers (what the kernel runner checks).
#![deny(missing_docs)]

pub mod cache;
mod device;
mod error;
pub mod nvrtc;
pub mod probe;
pub mod registry;
mod types;

pub use device::{parse_device, Device, DeviceSpec};
pub use error::{Error, Result};
pub use registry::{Act, CudaKernels, MatVec};
