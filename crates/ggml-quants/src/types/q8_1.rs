//! `GGML_TYPE_Q8_1` (id 9): blocks of 32 weights, fp16 scale `d`, fp16 `s = d * sum(q)` and
//! 32 signed 8-bit codes `q`. It is the activation format that the `q4_1`/`q5_1` dot
//! products consume, so ggml gives it only a `from_float_ref` and no `to_float`.
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `quantize_row_q8_1_ref`
//! (`from_float_ref`). `ggml_quantize_chunk` has no case for it (no rows quantizer here).
//! The decoder is `dequantize_row_q8_0`'s `q * d` on the same codes (`s` is redundant).

use crate::registry::{GgmlType, QuantizeRefFn};
use crate::util::{c_f32_to_i32, c_max, read_f16, write_f16};

/// Elements per block (`QK8_1`).
pub const QK8_1: usize = 32;

/// ggml's `block_q8_1`: the byte layout of one block.
#[repr(C)]
pub struct BlockQ8_1 {
    /// Scale, fp16 little-endian.
    pub d: [u8; 2],
    /// `d * sum(qs)`, fp16 little-endian.
    pub s: [u8; 2],
    /// Codes, `int8_t` each.
    pub qs: [u8; QK8_1],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 2 * 2 + QK8_1);

const TS: usize = std::mem::size_of::<BlockQ8_1>();

/// Marker for `q8_1`.
pub struct Q8_1;

impl GgmlType for Q8_1 {
    const NAME: &'static str = "q8_1";
    const ID: u32 = 9;
    const BLOCK_SIZE: usize = QK8_1;
    const TYPE_SIZE: usize = TS;
    const IS_QUANTIZED: bool = true;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);

    /// `q * d` per element, as `dequantize_row_q8_0` (ggml has no `to_float` for q8_1).
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK8_1)) {
            let d = read_f16(b, 0);
            let qs: &[u8; QK8_1] = b[4..TS].try_into().unwrap();
            let y: &mut [f32; QK8_1] = y.try_into().unwrap();
            for j in 0..QK8_1 {
                y[j] = qs[j] as i8 as f32 * d;
            }
        }
    }
}

inventory::submit! { <Q8_1 as GgmlType>::TRAITS }

/// `quantize_row_q8_1_ref`: per block, `d = amax / 127`, codes `roundf(x / d)`,
/// `s = sum(codes) * d`.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK8_1).zip(y.chunks_exact_mut(TS)) {
        let mut amax = 0f32;
        for &v in xb {
            amax = c_max(amax, v.abs());
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_f16(yb, 0, d);
        let mut sum = 0i32;
        for j in 0..QK8_1 / 2 {
            let v0 = xb[j] * id;
            let v1 = xb[QK8_1 / 2 + j] * id;
            // `roundf` then C's float -> int8_t conversion (cvttss2si, low byte).
            let q0 = c_f32_to_i32(v0.round()) as i8;
            let q1 = c_f32_to_i32(v1.round()) as i8;
            yb[4 + j] = q0 as u8;
            yb[4 + QK8_1 / 2 + j] = q1 as u8;
            sum += q0 as i32;
            sum += q1 as i32;
        }
        write_f16(yb, 2, sum as f32 * d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::test_rng::vec32 as rng;

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        b[0..2].copy_from_slice(&0x3800u16.to_le_bytes()); // d = 0.5
        b[2..4].copy_from_slice(&0x7bffu16.to_le_bytes()); // s is not used to decode
        for j in 0..32 {
            b[4 + j] = (j as i32 * 8 - 128) as u8;
        }
        let mut out = [0f32; 32];
        Q8_1::dequantize(&b, &mut out);
        for (j, &o) in out.iter().enumerate() {
            assert_eq!(o, (j as f32 * 8.0 - 128.0) * 0.5);
        }
    }

    #[test]
    fn roundtrip_error_is_bounded_and_s_is_the_sum() {
        let x = rng(7, 32 * 64);
        let mut q = vec![0u8; 64 * TS];
        quantize_ref(&x, &mut q);
        let mut y = vec![0f32; x.len()];
        Q8_1::dequantize(&q, &mut y);
        for ((xb, yb), b) in x.chunks(32).zip(y.chunks(32)).zip(q.chunks(TS)) {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= amax / 127.0 * 0.5 + amax * 1e-3, "{a} vs {b}");
            }
            let sum: i32 = b[4..].iter().map(|&v| v as i8 as i32).sum();
            assert_eq!(read_f16(b, 2), crate::util::fp16_to_f32(crate::util::f32_to_fp16(sum as f32 * (amax / 127.0))));
        }
    }

    #[test]
    fn all_zero_row_gives_zero_block() {
        let x = [0f32; 64];
        let mut q = [0xAAu8; 2 * TS];
        quantize_ref(&x, &mut q);
        assert!(q.iter().all(|&v| v == 0));
    }
}
