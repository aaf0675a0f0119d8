//! `q2_K` (id 10) on CUDA: 256 2-bit codes, 4-bit scales and mins. Kernels in `kernels/q2_k.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(10, "q2_K", include_str!("../../kernels/q2_k.cu"))
    .with_dequantize("dequantize_q2_K", "dequantize_q2_K_f16")
    .with_matvec("mmvq_q2_K", Act::Q8_1)
    .with_tolerance(1e-4));
