//! `q4_0` (id 2) on CUDA: 32 4-bit codes, fp16 scale; the mat-vec uses q8_1's fp16 `s`. Kernels in `kernels/q4_0.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(2, "q4_0", include_str!("../../kernels/q4_0.cu"))
    .with_dequantize("dequantize_q4_0", "dequantize_q4_0_f16")
    .with_matvec("mmvq_q4_0", Act::Q8_1)
    .with_tolerance(2e-3));
