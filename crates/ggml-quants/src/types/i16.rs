//! `GGML_TYPE_I16` (id 25): little-endian `i16` elements.
//!
//! ggml (llama.cpp `0c1e57098`, `ggml/src/ggml.c`): `type_traits[GGML_TYPE_I16]` has no
//! `to_float` and no `from_float_ref`, and `ggml_quantize_chunk` has no case for it, so
//! there is no quantizer here. The decoder widens each element with C's `(float)`
//! conversion (always exact);
//! ggml's `type_traits` has no conversion to f32 for this type.

use crate::registry::GgmlType;

const _: () = assert!(std::mem::size_of::<i16>() == 2);

/// Marker for `i16`.
pub struct I16;

impl GgmlType for I16 {
    const NAME: &'static str = "i16";
    const ID: u32 = 25;
    const BLOCK_SIZE: usize = 1;
    const TYPE_SIZE: usize = 2;
    const IS_QUANTIZED: bool = false;

    /// `(float)x` per element.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *d = i16::from_le_bytes(s.try_into().unwrap()) as f32;
        }
    }
}

inventory::submit! { <I16 as GgmlType>::TRAITS }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_known_values() {
        let b = [0x00, 0x00, 0xff, 0x7f, 0x00, 0x80, 0xff, 0xff];
        let mut out = [1f32; 4];
        I16::dequantize(&b, &mut out);
        assert_eq!(out, [0.0, 32767.0, -32768.0, -1.0]);
    }
}
