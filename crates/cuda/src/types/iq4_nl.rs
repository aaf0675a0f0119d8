//! `iq4_nl` (id 20) on CUDA: 32 4-bit indices into the non-linear codebook. Kernels in `kernels/iq4_nl.cu`.

use crate::registry::{Act, CudaKernels};

gguf_registry::submit!(CudaKernels::new(20, "iq4_nl", include_str!("../../kernels/iq4_nl.cu"))
    .with_dequantize("dequantize_iq4_nl", "dequantize_iq4_nl_f16")
    .with_matvec("mmvq_iq4_nl", Act::Q8_1)
    .with_tolerance(1e-4));
