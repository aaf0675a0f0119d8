//! `q5_0` (id 6) on CUDA: 32 5-bit codes, fp16 scale; the mat-vec uses q8_1's fp16 `s`. Kernels in `kernels/q5_0.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(6, "q5_0", include_str!("../../kernels/q5_0.cu"))
    .with_dequantize("dequantize_q5_0", "dequantize_q5_0_f16")
    .with_matvec("mmvq_q5_0", Act::Q8_1)
    .with_tolerance(2e-3));
