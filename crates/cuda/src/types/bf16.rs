//! `bf16` (id 30) on CUDA: bfloat16. Kernels in `kernels/bf16.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(30, "bf16", include_str!("../../kernels/bf16.cu"))
    .with_dequantize("dequantize_bf16", "dequantize_bf16_f16")
    .with_matvec("mmv_bf16", Act::F32)
    .with_tolerance(1e-4));
