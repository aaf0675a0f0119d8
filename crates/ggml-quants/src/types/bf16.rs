//! `GGML_TYPE_BF16` (id 30): bfloat16, the top half of an IEEE single.
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml.c`): `ggml_bf16_to_fp32_row` (`to_float`)
//! and `ggml_fp32_to_bf16_row_ref` (`from_float_ref`, and what `ggml_quantize_chunk`
//! calls), on the scalar conversions of `ggml-impl.h` ([`crate::util::bf16_to_f32`],
//! [`crate::util::f32_to_bf16`]: round to nearest even, NaN kept and made quiet).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::util::{bf16_to_f32, f32_to_bf16};

const _: () = assert!(std::mem::size_of::<u16>() == 2);

/// Marker for `bf16`.
pub struct BF16;

impl GgmlType for BF16 {
    const NAME: &'static str = "bf16";
    const ID: u32 = 30;
    const BLOCK_SIZE: usize = 1;
    const TYPE_SIZE: usize = 2;
    const IS_QUANTIZED: bool = false;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `ggml_bf16_to_fp32_row`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *d = bf16_to_f32(u16::from_le_bytes([s[0], s[1]]));
        }
    }
}

/// `ggml_fp32_to_bf16_row_ref`.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&f32_to_bf16(*s).to_le_bytes());
    }
}

/// `ggml_quantize_chunk` for bf16: `ggml_fp32_to_bf16_row_ref` over all rows.
fn quantize_rows(src: &[f32], dst: &mut [u8], _n_per_row: usize, _imatrix: Option<&[f32]>) {
    quantize(src, dst)
}

inventory::submit! { <BF16 as GgmlType>::TRAITS }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_known_values() {
        let b = [0x80, 0x3f, 0x00, 0xc0, 0x80, 0x7f, 0x01, 0x00];
        let mut out = [0f32; 4];
        BF16::dequantize(&b, &mut out);
        assert_eq!(out[0], 1.0);
        assert_eq!(out[1], -2.0);
        assert_eq!(out[2], f32::INFINITY);
        assert_eq!(out[3].to_bits(), 0x0001_0000); // a subnormal, not flushed
    }

    #[test]
    fn rounds_to_nearest_even_and_roundtrips() {
        let x = [1.0f32, f32::from_bits(0x3f80_8000), f32::from_bits(0x3f81_8000), -0.0, 3.0e38];
        let mut b = [0u8; 10];
        quantize(&x, &mut b);
        let mut y = [0f32; 5];
        BF16::dequantize(&b, &mut y);
        assert_eq!(y[0], 1.0);
        assert_eq!(y[1].to_bits(), 0x3f80_0000); // tie, rounds to even (down)
        assert_eq!(y[2].to_bits(), 0x3f82_0000); // tie, rounds to even (up)
        assert_eq!(y[3].to_bits(), 0x8000_0000);
        assert!((y[4] - 3.0e38).abs() <= 3.0e38 / 256.0);
    }

    #[test]
    fn nan_stays_nan_and_zero_rows_are_zero() {
        let mut b = [0u8; 2];
        quantize(&[f32::from_bits(0x7f80_0001)], &mut b);
        let mut y = [0f32; 1];
        BF16::dequantize(&b, &mut y);
        assert!(y[0].is_nan());
        let mut q = [0xAAu8; 16];
        quantize_rows(&[0.0; 8], &mut q, 4, Some(&[1.0; 4]));
        assert!(q.iter().all(|&v| v == 0));
    }
}
