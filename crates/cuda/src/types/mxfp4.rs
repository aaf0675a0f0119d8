//! `mxfp4` (id 39) on CUDA: 32 E2M1 codes, E8M0 scale. Kernels in `kernels/mxfp4.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(39, "mxfp4", include_str!("../../kernels/mxfp4.cu"))
    .with_dequantize("dequantize_mxfp4", "dequantize_mxfp4_f16")
    .with_matvec("mmvq_mxfp4", Act::Q8_1)
    .with_tolerance(1e-4));
