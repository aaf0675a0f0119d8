//! `q8_0` (id 8) on CUDA: 32 8-bit codes, fp16 scale. Kernels in `kernels/q8_0.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(8, "q8_0", include_str!("../../kernels/q8_0.cu"))
    .with_dequantize("dequantize_q8_0", "dequantize_q8_0_f16")
    .with_matvec("mmvq_q8_0", Act::Q8_1)
    .with_tolerance(1e-4));
