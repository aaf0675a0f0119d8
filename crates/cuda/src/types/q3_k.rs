//! `q3_K` (id 11) on CUDA: 256 3-bit codes, 6-bit scales. Kernels in `kernels/q3_k.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(11, "q3_K", include_str!("../../kernels/q3_k.cu"))
    .with_dequantize("dequantize_q3_K", "dequantize_q3_K_f16")
    .with_matvec("mmvq_q3_K", Act::Q8_1)
    .with_tolerance(1e-4));
