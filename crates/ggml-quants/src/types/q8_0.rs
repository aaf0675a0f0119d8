//! `GGML_TYPE_Q8_0` (id 8): blocks of 32 weights, one fp16 scale `d` and 32 signed 8-bit
//! codes `q`, decoded as `q * d`.
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_q8_0`
//! (`to_float`), `quantize_row_q8_0_ref` (`from_float_ref`) and `quantize_q8_0` (what
//! `ggml_quantize_chunk` calls: the reference quantizer, the imatrix ignored).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq_common::c_roundf_i32;
use crate::util::{c_max, read_f16, write_f16};

/// Elements per block (`QK8_0`).
pub const QK8_0: usize = 32;

/// ggml's `block_q8_0`: the byte layout of one block.
#[repr(C)]
pub struct BlockQ8_0 {
    /// Scale, fp16 little-endian.
    pub d: [u8; 2],
    /// Codes, `int8_t` each.
    pub qs: [u8; QK8_0],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 2 + QK8_0);

const TS: usize = std::mem::size_of::<BlockQ8_0>();

/// Marker for `q8_0`.
pub struct Q8_0;

impl GgmlType for Q8_0 {
    const NAME: &'static str = "q8_0";
    const ID: u32 = 8;
    const BLOCK_SIZE: usize = QK8_0;
    const TYPE_SIZE: usize = TS;
    const IS_QUANTIZED: bool = true;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_q8_0`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK8_0)) {
            let d = read_f16(b, 0);
            let qs: &[u8; QK8_0] = b[2..TS].try_into().unwrap();
            let y: &mut [f32; QK8_0] = y.try_into().unwrap();
            for j in 0..QK8_0 {
                y[j] = qs[j] as i8 as f32 * d;
            }
        }
    }
}

inventory::submit! { <Q8_0 as GgmlType>::TRAITS }

/// `quantize_row_q8_0_ref`: per block, `d = amax / 127`, codes `roundf(x / d)`.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK8_0).zip(y.chunks_exact_mut(TS)) {
        let mut amax = 0f32;
        for &v in xb {
            amax = c_max(amax, v.abs());
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_f16(yb, 0, d);
        for j in 0..QK8_0 {
            let x0 = xb[j] * id;
            // `roundf` then C's float -> int8_t conversion (cvttss2si, low byte).
            yb[2 + j] = c_roundf_i32(x0) as u8;
        }
    }
}

/// `quantize_q8_0`: the reference quantizer over all rows; ggml ignores the imatrix.
fn quantize_rows(src: &[f32], dst: &mut [u8], _n_per_row: usize, _imatrix: Option<&[f32]>) {
    quantize_ref(src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::test_rng::vec32 as rng;

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        b[0..2].copy_from_slice(&0x3800u16.to_le_bytes()); // d = 0.5
        for j in 0..32 {
            b[2 + j] = (j as i32 * 8 - 128) as u8;
        }
        let mut out = [0f32; 32];
        Q8_0::dequantize(&b, &mut out);
        for (j, &o) in out.iter().enumerate() {
            assert_eq!(o, (j as f32 * 8.0 - 128.0) * 0.5);
        }
    }

    #[test]
    fn roundtrip_error_is_bounded() {
        let x = rng(7, 32 * 64);
        let mut q = vec![0u8; 64 * TS];
        quantize_ref(&x, &mut q);
        let mut y = vec![0f32; x.len()];
        Q8_0::dequantize(&q, &mut y);
        for (xb, yb) in x.chunks(32).zip(y.chunks(32)) {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (a, b) in xb.iter().zip(yb) {
                // Half a step, plus the fp16 rounding of d (2^-11 relative) at the ends.
                assert!((a - b).abs() <= amax / 127.0 * 0.5 + amax * 1e-3, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn all_zero_row_gives_zero_block() {
        let x = [0f32; 64];
        let mut q = [0xAAu8; 2 * TS];
        quantize_rows(&x, &mut q, 64, Some(&[1.0; 64]));
        assert!(q.iter().all(|&v| v == 0));
    }

    #[test]
    fn imatrix_is_ignored() {
        let x = rng(3, 128);
        let mut a = vec![0u8; 4 * TS];
        let mut b = vec![0u8; 4 * TS];
        quantize_rows(&x, &mut a, 64, None);
        quantize_rows(&x, &mut b, 64, Some(&[0.5; 64]));
        assert_eq!(a, b);
    }
}
