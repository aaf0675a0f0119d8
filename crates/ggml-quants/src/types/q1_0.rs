//! `GGML_TYPE_Q1_0` (id 41): blocks of 128 weights, one fp16 scale `d` and one sign bit
//! per weight, decoded as `±d` (1.125 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_q1_0`
//! (`to_float`), `quantize_row_q1_0_ref` (`from_float_ref`: `d` is the mean absolute
//! value, the bit is `x >= 0`) and `quantize_q1_0`, which `ggml_quantize_chunk` calls (the
//! reference quantizer over all rows; the importance matrix is ignored).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::util::{read_f16, write_f16};

/// Elements per block (`QK1_0`).
pub const QK1_0: usize = 128;

/// ggml's `block_q1_0` (18 bytes):
///
/// | offset | bytes | field | meaning                                     |
/// |-------:|------:|-------|---------------------------------------------|
/// | 0      | 2     | `d`   | fp16 scale                                  |
/// | 2      | 16    | `qs`  | bit `j % 8` of byte `j / 8`: weight `j` is `+d` if set, `-d` if clear |
#[repr(C)]
pub struct BlockQ1_0 {
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
    /// Sign bits.
    pub qs: [u8; QK1_0 / 8],
}

const _: () = assert!(std::mem::size_of::<BlockQ1_0>() == 2 + QK1_0 / 8);
const TS: usize = std::mem::size_of::<BlockQ1_0>();

/// Marker for `q1_0`.
pub struct Q1_0;

impl GgmlType for Q1_0 {
    const NAME: &'static str = "q1_0";
    const ID: u32 = 41;
    const BLOCK_SIZE: usize = QK1_0;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_q1_0`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK1_0)) {
            let d = read_f16(b, 0);
            let neg_d = -d;
            for (j, y) in y.iter_mut().enumerate() {
                *y = if (b[2 + j / 8] >> (j % 8)) & 1 != 0 { d } else { neg_d };
            }
        }
    }
}

inventory::submit! { <Q1_0 as GgmlType>::TRAITS }

/// `quantize_row_q1_0_ref`.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK1_0).zip(y.chunks_exact_mut(TS)) {
        let mut sum_abs = 0f32;
        for &v in xb {
            sum_abs += v.abs();
        }
        write_f16(yb, 0, sum_abs / QK1_0 as f32);
        let qs = &mut yb[2..];
        qs.fill(0);
        for (j, &v) in xb.iter().enumerate() {
            if v >= 0.0 {
                qs[j / 8] |= 1 << (j % 8);
            }
        }
    }
}

/// `quantize_q1_0`: the reference quantizer; ggml ignores the imatrix.
fn quantize_rows(src: &[f32], dst: &mut [u8], _n_per_row: usize, _imatrix: Option<&[f32]>) {
    quantize_ref(src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::iq_common::{rmse, test_rng};

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        write_f16(&mut b, 0, 0.75);
        b[2] = 0b1010_0001;
        b[17] = 0x80;
        let mut y = [0f32; QK1_0];
        Q1_0::dequantize(&b, &mut y);
        assert_eq!(&y[..8], &[0.75, -0.75, -0.75, -0.75, -0.75, 0.75, -0.75, 0.75]);
        assert_eq!(y[127], 0.75);
        assert_eq!(y[126], -0.75);
    }

    #[test]
    fn roundtrip_keeps_signs_and_mean_magnitude() {
        let mut r = test_rng(5);
        let x: Vec<f32> = (0..4 * QK1_0).map(|_| r()).collect();
        let q = Q1_0::TRAITS.quantize_to_vec(&x, 2 * QK1_0, None).unwrap();
        assert_eq!(q, Q1_0::TRAITS.quantize_to_vec(&x, 2 * QK1_0, Some(&[2.0; 2 * QK1_0])).unwrap());
        let y = Q1_0::TRAITS.dequantize_to_vec(&q).unwrap();
        for (a, b) in x.iter().zip(&y) {
            assert_eq!(*a >= 0.0, *b > 0.0);
        }
        // U(-1, 1): |x| is U(0, 1), the error ||x| - 0.5| has rms 1/√12 ≈ 0.29.
        assert!(rmse(&x, &y) < 0.32, "{}", rmse(&x, &y));
    }
}
