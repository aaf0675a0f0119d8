//! `f16` (id 1) on CUDA: IEEE binary16. Kernels in `kernels/f16.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(1, "f16", include_str!("../../kernels/f16.cu"))
    .with_dequantize("dequantize_f16", "dequantize_f16_f16")
    .with_matvec("mmv_f16", Act::F32)
    .with_tolerance(1e-4));
