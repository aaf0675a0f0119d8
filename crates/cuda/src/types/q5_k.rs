//! `q5_K` (id 13) on CUDA: 256 5-bit codes, 6-bit scales and mins. Kernels in `kernels/q5_k.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(13, "q5_K", include_str!("../../kernels/q5_k.cu"))
    .with_dequantize("dequantize_q5_K", "dequantize_q5_K_f16")
    .with_matvec("mmvq_q5_K", Act::Q8_1)
    .with_tolerance(1e-4));
