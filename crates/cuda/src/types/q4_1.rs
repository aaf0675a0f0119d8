//! `q4_1` (id 3) on CUDA: 32 4-bit codes, fp16 scale and min; the mat-vec uses q8_1's fp16 `s`. Kernels in `kernels/q4_1.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(3, "q4_1", include_str!("../../kernels/q4_1.cu"))
    .with_dequantize("dequantize_q4_1", "dequantize_q4_1_f16")
    .with_matvec("mmvq_q4_1", Act::Q8_1)
    .with_tolerance(2e-3));
