//! `GGML_TYPE_I64` (id 27): little-endian `i64` elements.
//!
//! ggml (llama.cpp `0c1e57098`, `ggml/src/ggml.c`): `type_traits[GGML_TYPE_I64]` has no
//! `to_float` and no `from_float_ref`, and `ggml_quantize_chunk` has no case for it, so
//! there is no quantizer here. The decoder widens each element with C's `(float)`
//! conversion (round to nearest even, exact up to 2^24);
//! ggml's `type_traits` has no conversion to f32 for this type.

use crate::registry::GgmlType;

const _: () = assert!(std::mem::size_of::<i64>() == 8);

/// Marker for `i64`.
pub struct I64;

impl GgmlType for I64 {
    const NAME: &'static str = "i64";
    const ID: u32 = 27;
    const BLOCK_SIZE: usize = 1;
    const TYPE_SIZE: usize = 8;
    const IS_QUANTIZED: bool = false;

    /// `(float)x` per element.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(8)) {
            *d = i64::from_le_bytes(s.try_into().unwrap()) as f32;
        }
    }
}

inventory::submit! { <I64 as GgmlType>::TRAITS }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_known_values() {
        let v = [0i64, -1, i64::MAX, i64::MIN, 16_777_217, 123_456];
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut out = [1f32; 6];
        I64::dequantize(&b, &mut out);
        assert_eq!(out, [0.0, -1.0, i64::MAX as f32, i64::MIN as f32, 16_777_216.0, 123_456.0]);
    }
}
