//! `iq4_xs` (id 23) on CUDA: 256 4-bit indices into the non-linear codebook, 6-bit scales. Kernels in `kernels/iq4_xs.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(23, "iq4_xs", include_str!("../../kernels/iq4_xs.cu"))
    .with_dequantize("dequantize_iq4_xs", "dequantize_iq4_xs_f16")
    .with_matvec("mmvq_iq4_xs", Act::Q8_1)
    .with_tolerance(1e-4));
