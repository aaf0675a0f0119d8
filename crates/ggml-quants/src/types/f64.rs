//! `GGML_TYPE_F64` (id 28): little-endian `f64` elements.
//!
//! ggml (llama.cpp `0c1e57098`, `ggml/src/ggml.c`): `type_traits[GGML_TYPE_F64]` has no
//! `to_float` and no `from_float_ref`, and `ggml_quantize_chunk` has no case for it, so
//! there is no quantizer here. The decoder narrows each element with C's `(float)`
//! conversion (round to nearest even, overflow to infinity, NaN stays NaN);
//! ggml's `type_traits` has no conversion to f32 for this type.

use crate::registry::GgmlType;

const _: () = assert!(std::mem::size_of::<f64>() == 8);

/// Marker for `f64`.
pub struct F64;

impl GgmlType for F64 {
    const NAME: &'static str = "f64";
    const ID: u32 = 28;
    const BLOCK_SIZE: usize = 1;
    const TYPE_SIZE: usize = 8;
    const IS_QUANTIZED: bool = false;

    /// `(float)x` per element.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(8)) {
            *d = f64::from_le_bytes(s.try_into().unwrap()) as f32;
        }
    }
}

inventory::submit! { <F64 as GgmlType>::TRAITS }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_known_values() {
        let v = [0.0f64, -1.5, 1e300, 0.1, f64::NAN, -1e-300];
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut out = [1f32; 6];
        F64::dequantize(&b, &mut out);
        assert_eq!(out[0].to_bits(), 0);
        assert_eq!(out[1], -1.5);
        assert_eq!(out[2], f32::INFINITY);
        assert_eq!(out[3], 0.1f32);
        assert!(out[4].is_nan());
        assert_eq!(out[5].to_bits(), 0x8000_0000);
    }
}
