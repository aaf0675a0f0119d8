//! `GGML_TYPE_F16` (id 1): IEEE half precision.
//! ggml: `ggml_fp16_to_fp32_row` / `ggml_fp32_to_fp16_row` (`ggml/src/ggml.c`), with the
//! scalar conversions of `ggml-impl.h` ([`crate::util::fp16_to_f32`]).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::util::{f32_to_fp16, fp16_to_f32};

/// Marker for `f16`.
pub struct F16;

impl GgmlType for F16 {
    const NAME: &'static str = "f16";
    const ID: u32 = 1;
    const BLOCK_SIZE: usize = 1;
    const TYPE_SIZE: usize = 2;
    const IS_QUANTIZED: bool = false;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *d = fp16_to_f32(u16::from_le_bytes([s[0], s[1]]));
        }
    }
}

/// `ggml_fp32_to_fp16_row`.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&f32_to_fp16(*s).to_le_bytes());
    }
}

fn quantize_rows(src: &[f32], dst: &mut [u8], _n_per_row: usize, _imatrix: Option<&[f32]>) {
    quantize(src, dst)
}

inventory::submit! { <F16 as GgmlType>::TRAITS }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_known_values() {
        let b = [0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00];
        let mut out = [0f32; 3];
        F16::dequantize(&b, &mut out);
        assert_eq!(out[0], 1.0);
        assert_eq!(out[1], -2.0);
        assert_eq!(out[2], 5.960_464_5e-8);
    }
}
