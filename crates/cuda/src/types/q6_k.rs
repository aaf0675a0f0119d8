//! `q6_K` (id 14) on CUDA: 256 6-bit codes, 8-bit scales. Kernels in `kernels/q6_k.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(14, "q6_K", include_str!("../../kernels/q6_k.cu"))
    .with_dequantize("dequantize_q6_K", "dequantize_q6_K_f16")
    .with_matvec("mmvq_q6_K", Act::Q8_1)
    .with_tolerance(1e-4));
