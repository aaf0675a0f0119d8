//! `q5_1` (id 7) on CUDA: 32 5-bit codes, fp16 scale and min; the mat-vec uses q8_1's fp16 `s`. Kernels in `kernels/q5_1.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(7, "q5_1", include_str!("../../kernels/q5_1.cu"))
    .with_dequantize("dequantize_q5_1", "dequantize_q5_1_f16")
    .with_matvec("mmvq_q5_1", Act::Q8_1)
    .with_tolerance(2e-3));
