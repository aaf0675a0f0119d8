//! `q4_K` (id 12) on CUDA: 256 4-bit codes, 6-bit scales and mins. Kernels in `kernels/q4_k.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(12, "q4_K", include_str!("../../kernels/q4_k.cu"))
    .with_dequantize("dequantize_q4_K", "dequantize_q4_K_f16")
    .with_matvec("mmvq_q4_K", Act::Q8_1)
    .with_tolerance(1e-4));
