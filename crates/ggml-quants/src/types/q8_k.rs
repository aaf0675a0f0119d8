//! `GGML_TYPE_Q8_K` (id 15): 8-bit K-quant used for activations in K-quant dot products:
//! 256 signed bytes under one `f32` scale, plus the sums of each group of 16 codes.
//!
//! Ports of ggml (llama.cpp commit `0c1e57098`, `ggml/src/ggml-quants.c`):
//! - `dequantize_row_q8_K` → [`Q8K::dequantize`];
//! - `quantize_row_q8_K_ref` → [`quantize_ref`].
//!
//! ggml's `type_traits[GGML_TYPE_Q8_K]` (`ggml/src/ggml.c`) names neither function (its
//! `to_float` and `from_float_ref` are `NULL`: the type only exists as the CPU backend's
//! `vec_dot_type`), and `ggml_quantize_chunk` rejects it, so there is no
//! `QUANTIZE_ROWS`. The registry still carries both ports, since kernels quantize
//! activations to Q8_K with them.
//!
//! One deliberate difference: for an all-zero block (`amax == 0`) the C writes `d = 0`
//! and zero codes but leaves `bsums` unwritten; [`quantize_ref`] writes the true sums,
//! zeros. The bytes match ggml whenever ggml's destination started zeroed.

use std::mem::{offset_of, size_of};

use crate::registry::{GgmlType, QuantizeRefFn};
use crate::util::nearest_int;
use crate::QK_K;

/// ggml's `block_q8_K` (`ggml/src/ggml-common.h`), 292 bytes, no padding:
///
/// | offset | size | field                                                   |
/// |-------:|-----:|---------------------------------------------------------|
/// | 0      | 4    | `d`: `f32` scale (little-endian)                        |
/// | 4      | 256  | `qs`: `int8_t` codes, weight `i` is `d * qs[i]`         |
/// | 260    | 32   | `bsums`: 16 × `int16_t` (little-endian), `bsums[j] = Σ qs[16j..16j+16]` |
///
/// Documents the layout; blocks are parsed from unaligned bytes through the offsets
/// below, never by casting.
#[repr(C)]
pub struct BlockQ8K {
    /// `f32` (little-endian) scale.
    pub d: [u8; 4],
    /// Signed 8-bit codes.
    pub qs: [i8; QK_K],
    /// `int16_t` (little-endian) sums of each 16 codes.
    pub bsums: [[u8; 2]; QK_K / 16],
}

const _: () = assert!(size_of::<BlockQ8K>() == 4 + QK_K + QK_K / 16 * 2);
const _: () = assert!(size_of::<BlockQ8K>() == 292);

const OFF_D: usize = offset_of!(BlockQ8K, d);
const OFF_QS: usize = offset_of!(BlockQ8K, qs);
const OFF_BSUMS: usize = offset_of!(BlockQ8K, bsums);
const BLOCK_BYTES: usize = size_of::<BlockQ8K>();

/// Marker for `q8_K`.
pub struct Q8K;

impl GgmlType for Q8K {
    const NAME: &'static str = "q8_K";
    const ID: u32 = 15;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = BLOCK_BYTES;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);

    /// `dequantize_row_q8_K`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(BLOCK_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
            let d = f32::from_le_bytes(b[OFF_D..OFF_D + 4].try_into().unwrap());
            let qs: &[u8; QK_K] = b[OFF_QS..OFF_QS + QK_K].try_into().unwrap();
            for (y, &q) in y.iter_mut().zip(qs) {
                *y = d * (q as i8) as f32;
            }
        }
    }
}

inventory::submit! { <Q8K as GgmlType>::TRAITS }

/// `quantize_row_q8_K_ref`: encodes whole blocks of `src` into `dst` (see the module
/// docs for the all-zero block).
pub fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BLOCK_BYTES)) {
        let mut max = 0f32;
        let mut amax = 0f32;
        for &v in x {
            let ax = v.abs();
            if ax > amax {
                amax = ax;
                max = v;
            }
        }
        if amax == 0.0 {
            y.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        let mut qs = [0i8; QK_K];
        for (q, &v) in qs.iter_mut().zip(x) {
            // `y[i].qs[j] = MIN(127, v)`: an int stored into int8_t.
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (o, &q) in y[OFF_QS..OFF_QS + QK_K].iter_mut().zip(&qs) {
            *o = q as u8;
        }
        for (o, g) in y[OFF_BSUMS..OFF_BSUMS + QK_K / 8].chunks_exact_mut(2).zip(qs.chunks_exact(16)) {
            let sum: i32 = g.iter().map(|&q| q as i32).sum();
            o.copy_from_slice(&(sum as i16).to_le_bytes());
        }
        y[OFF_D..OFF_D + 4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::test_rng::xorshift32 as rng;

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[OFF_D..OFF_D + 4].copy_from_slice(&0.25f32.to_le_bytes());
        for i in 0..QK_K {
            b[OFF_QS + i] = (i as u8).wrapping_mul(3);
        }
        let mut y = [0f32; QK_K];
        Q8K::dequantize(&b, &mut y);
        for (i, &v) in y.iter().enumerate() {
            assert_eq!(v, 0.25 * ((i as u8).wrapping_mul(3) as i8) as f32, "i={i}");
        }
        assert_eq!(y[1], 0.75);
        assert_eq!(y[43], 0.25 * 129u8 as i8 as f32); // 129 → -127
        assert_eq!(y[43], -31.75);
    }

    #[test]
    fn quantize_known_block() {
        let mut x = [0f32; QK_K];
        x[0] = -2.0; // the largest magnitude is negative: iscale = 63.5, d = 1/63.5
        x[1] = 1.0;
        x[17] = 0.5;
        let mut b = [0u8; BLOCK_BYTES];
        quantize_ref(&x, &mut b);
        assert_eq!(f32::from_le_bytes(b[0..4].try_into().unwrap()), 1.0 / (-127.0f32 / -2.0));
        assert_eq!(b[OFF_QS] as i8, -127);
        assert_eq!(b[OFF_QS + 1] as i8, 64); // 63.5 rounds to even
        assert_eq!(b[OFF_QS + 17] as i8, 32); // 31.75
        assert_eq!(i16::from_le_bytes([b[OFF_BSUMS], b[OFF_BSUMS + 1]]), -63);
        assert_eq!(i16::from_le_bytes([b[OFF_BSUMS + 2], b[OFF_BSUMS + 3]]), 32);
        assert!(b[OFF_BSUMS + 4..].iter().all(|&v| v == 0));
    }

    #[test]
    fn roundtrip_error_is_small() {
        let mut r = rng(3);
        let x: Vec<f32> = (0..4 * QK_K).map(|_| r() * 10.0).collect();
        let mut q = vec![0u8; 4 * BLOCK_BYTES];
        Q8K::TRAITS.quantize_ref(&x, &mut q).unwrap();
        let y = Q8K::TRAITS.dequantize_to_vec(&q).unwrap();
        for (xb, yb) in x.chunks(QK_K).zip(y.chunks(QK_K)) {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= amax / 127.0 * 0.5001, "{a} vs {b}");
            }
        }
        for (b, qb) in q.chunks(BLOCK_BYTES).enumerate() {
            for j in 0..QK_K / 16 {
                let s: i32 = qb[OFF_QS + 16 * j..OFF_QS + 16 * j + 16].iter().map(|&v| v as i8 as i32).sum();
                let bs = i16::from_le_bytes([qb[OFF_BSUMS + 2 * j], qb[OFF_BSUMS + 2 * j + 1]]);
                assert_eq!(s, bs as i32, "block {b} group {j}");
            }
        }
    }

    #[test]
    fn all_zero_blocks() {
        let x = vec![0f32; 2 * QK_K];
        let mut q = vec![0xAAu8; 2 * BLOCK_BYTES];
        quantize_ref(&x, &mut q);
        assert!(q.iter().all(|&b| b == 0));
        let y = Q8K::TRAITS.dequantize_to_vec(&q).unwrap();
        assert!(y.iter().all(|&v| v == 0.0));
        assert!(Q8K::TRAITS.quantize_to_vec(&x, QK_K, None).is_err());
    }
}
