//! `GGML_TYPE_Q2_0` (id 42): blocks of 64 weights, one fp16 scale `d` and 2-bit codes
//! `q` decoded as `(q - 1)·d`, i.e. one of `-d, 0, d, 2d` (2.25 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_q2_0`
//! (`to_float`), `quantize_row_q2_0_ref` (`from_float_ref`: `d = amax`, codes
//! `clamp(round(x/d) + 1, 0, 3)`) and `quantize_q2_0`, which `ggml_quantize_chunk` calls
//! (the reference quantizer over all rows; the importance matrix is ignored).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq_common::c_roundf_i32;
use crate::util::{read_f16, write_f16};

/// Elements per block (`QK2_0`).
pub const QK2_0: usize = 64;

/// ggml's `block_q2_0` (18 bytes):
///
/// | offset | bytes | field | meaning                                              |
/// |-------:|------:|-------|------------------------------------------------------|
/// | 0      | 2     | `d`   | fp16 scale                                           |
/// | 2      | 16    | `qs`  | bits `2(j % 4)..` of byte `j / 4`: code of weight `j` |
#[repr(C)]
pub struct BlockQ2_0 {
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
    /// 2-bit codes, four per byte.
    pub qs: [u8; QK2_0 / 4],
}

const _: () = assert!(std::mem::size_of::<BlockQ2_0>() == 2 + QK2_0 / 4);
const TS: usize = std::mem::size_of::<BlockQ2_0>();

/// Marker for `q2_0`.
pub struct Q2_0;

impl GgmlType for Q2_0 {
    const NAME: &'static str = "q2_0";
    const ID: u32 = 42;
    const BLOCK_SIZE: usize = QK2_0;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_q2_0`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK2_0)) {
            let d = read_f16(b, 0);
            for (j, y) in y.iter_mut().enumerate() {
                let q = (b[2 + j / 4] >> ((j % 4) * 2)) & 3;
                *y = (q as i32 - 1) as f32 * d;
            }
        }
    }
}

inventory::submit! { <Q2_0 as GgmlType>::TRAITS }

/// `quantize_row_q2_0_ref`.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK2_0).zip(y.chunks_exact_mut(TS)) {
        let mut amax = 0f32;
        for &v in xb {
            let a = v.abs();
            if a > amax {
                amax = a;
            }
        }
        let d = amax;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        write_f16(yb, 0, d);
        // Byte `j / 4` gets weight `j` at bits `2(j % 4)`: four weights per byte.
        for (q4, x4) in yb[2..].iter_mut().zip(xb.chunks_exact(4)) {
            let mut b = 0u8;
            for (k, &w) in x4.iter().enumerate() {
                let q = c_roundf_i32(w * id).wrapping_add(1).clamp(0, 3);
                b |= (q as u8) << (2 * k);
            }
            *q4 = b;
        }
    }
}

/// `quantize_q2_0`: the reference quantizer; ggml ignores the imatrix.
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
        write_f16(&mut b, 0, 1.5);
        b[2] = 0b11_10_01_00;
        let mut y = [0f32; QK2_0];
        Q2_0::dequantize(&b, &mut y);
        assert_eq!(&y[..5], &[-1.5, 0.0, 1.5, 3.0, -1.5]);
    }

    #[test]
    fn roundtrip_error_is_bounded() {
        let mut r = test_rng(9);
        let x: Vec<f32> = (0..4 * QK2_0).map(|_| r()).collect();
        let q = Q2_0::TRAITS.quantize_to_vec(&x, QK2_0, None).unwrap();
        assert_eq!(q, Q2_0::TRAITS.quantize_to_vec(&x, QK2_0, Some(&[3.0; QK2_0])).unwrap());
        let y = Q2_0::TRAITS.dequantize_to_vec(&q).unwrap();
        for (xb, yb) in x.chunks(QK2_0).zip(y.chunks(QK2_0)) {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= amax * 0.501, "{a} vs {b}");
            }
        }
        assert!(rmse(&x, &y) < 0.35);
    }
}
