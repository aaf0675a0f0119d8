//! `q8_K` (id 15) on CUDA: 256 8-bit codes, f32 scale (ggml's K-quant activation type). Kernels in `kernels/q8_k.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(15, "q8_K", include_str!("../../kernels/q8_k.cu"))
    .with_dequantize("dequantize_q8_K", "dequantize_q8_K_f16")
    .with_matvec("mmvq_q8_K", Act::Q8_1)
    .with_tolerance(1e-4));
