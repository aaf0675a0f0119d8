//! `q8_1` (id 9) on CUDA: the activation format of every quantized mat-vec
//! (`quantize_q8_1`, quantize_row_q8_1_ref's arithmetic). Kernels in `kernels/q8_1.cu`.

use crate::registry::CudaKernels;

gguf_registry::submit!(CudaKernels::new(9, "q8_1", include_str!("../../kernels/q8_1.cu"))
    .with_dequantize("dequantize_q8_1", "dequantize_q8_1_f16")
    .with_quantize("quantize_q8_1"));
