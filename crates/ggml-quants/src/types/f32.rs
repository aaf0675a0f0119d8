//! `GGML_TYPE_F32` (id 0): plain little-endian IEEE single precision.
//! ggml: `type_traits[GGML_TYPE_F32]` (no `to_float`; `ggml_quantize_chunk` copies).

use crate::registry::GgmlType;

/// Marker for `f32`.
pub struct F32;

impl GgmlType for F32 {
    const NAME: &'static str = "f32";
    const ID: u32 = 0;
    const BLOCK_SIZE: usize = 1;
    const TYPE_SIZE: usize = 4;
    const IS_QUANTIZED: bool = false;
    const QUANTIZE_REF: Option<crate::registry::QuantizeRefFn> = Some(quantize);
    const QUANTIZE_ROWS: Option<crate::registry::QuantizeRowsFn> = Some(quantize_rows);

    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
            *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        }
    }
}

/// Copies `src` as little-endian bytes.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(4)) {
        d.copy_from_slice(&s.to_le_bytes());
    }
}

fn quantize_rows(src: &[f32], dst: &mut [u8], _n_per_row: usize, _imatrix: Option<&[f32]>) {
    quantize(src, dst)
}

inventory::submit! { <F32 as GgmlType>::TRAITS }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_bits() {
        let v = [1.5f32, -0.0, f32::INFINITY, f32::from_bits(0x7fc0_1234)];
        let mut b = [0u8; 16];
        quantize(&v, &mut b);
        let mut out = [0f32; 4];
        F32::dequantize(&b, &mut out);
        for (a, o) in v.iter().zip(out) {
            assert_eq!(a.to_bits(), o.to_bits());
        }
    }
}
