//! `GGML_TYPE_I8` (id 24): little-endian `i8` elements.
//!
//! ggml (llama.cpp `0c1e57098`, `ggml/src/ggml.c`): `type_traits[GGML_TYPE_I8]` has no
//! `to_float` and no `from_float_ref`, and `ggml_quantize_chunk` has no case for it, so
//! there is no quantizer here. The decoder widens each element with C's `(float)`
//! conversion (always exact);
//! ggml's `type_traits` has no conversion to f32 for this type.

use crate::registry::GgmlType;

const _: () = assert!(std::mem::size_of::<i8>() == 1);

/// Marker for `i8`.
pub struct I8;

impl GgmlType for I8 {
    const NAME: &'static str = "i8";
    const ID: u32 = 24;
    const BLOCK_SIZE: usize = 1;
    const TYPE_SIZE: usize = 1;
    const IS_QUANTIZED: bool = false;

    /// `(float)x` per element.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(1)) {
            *d = i8::from_le_bytes(s.try_into().unwrap()) as f32;
        }
    }
}

inventory::submit! { <I8 as GgmlType>::TRAITS }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_known_values() {
        let b = [0x00, 0x7f, 0x80, 0xff];
        let mut out = [1f32; 4];
        I8::dequantize(&b, &mut out);
        assert_eq!(out, [0.0, 127.0, -128.0, -1.0]);
    }
}
