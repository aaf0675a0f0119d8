//! `GGML_TYPE_I32` (id 26): little-endian `i32` elements.
//!
//! ggml (llama.cpp `0c1e57098`, `ggml/src/ggml.c`): `type_traits[GGML_TYPE_I32]` has no
//! `to_float` and no `from_float_ref`, and `ggml_quantize_chunk` has no case for it, so
//! there is no quantizer here. The decoder widens each element with C's `(float)`
//! conversion (round to nearest even, exact up to 2^24), as ggml's CPU copy
//! (`ggml_compute_forward_dup_flt<int32_t, float>` in `ggml-cpu/ops.cpp`) does.

use crate::registry::GgmlType;

const _: () = assert!(std::mem::size_of::<i32>() == 4);

/// Marker for `i32`.
pub struct I32;

impl GgmlType for I32 {
    const NAME: &'static str = "i32";
    const ID: u32 = 26;
    const BLOCK_SIZE: usize = 1;
    const TYPE_SIZE: usize = 4;
    const IS_QUANTIZED: bool = false;

    /// `(float)x` per element.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
            *d = i32::from_le_bytes(s.try_into().unwrap()) as f32;
        }
    }
}

inventory::submit! { <I32 as GgmlType>::TRAITS }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_known_values() {
        let v = [0i32, -1, i32::MAX, i32::MIN, 16_777_217, 123_456];
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut out = [1f32; 6];
        I32::dequantize(&b, &mut out);
        assert_eq!(out, [0.0, -1.0, i32::MAX as f32, i32::MIN as f32, 16_777_216.0, 123_456.0]);
    }
}
