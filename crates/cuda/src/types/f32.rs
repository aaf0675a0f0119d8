//! `f32` (id 0) on CUDA: IEEE binary32. Kernels in `kernels/f32.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(0, "f32", include_str!("../../kernels/f32.cu"))
    .with_dequantize("dequantize_f32", "dequantize_f32_f16")
    .with_matvec("mmv_f32", Act::F32)
    .with_tolerance(1e-4));
