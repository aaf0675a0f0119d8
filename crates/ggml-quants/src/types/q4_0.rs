//! `GGML_TYPE_Q4_0` (id 2): blocks of 32 weights, one fp16 scale `d` and 32 4-bit codes
//! `q`, decoded as `(q - 8) * d`.
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_q4_0`
//! (`to_float`), `quantize_row_q4_0_ref` (`from_float_ref`), and `quantize_q4_0` /
//! `quantize_row_q4_0_impl` (what `ggml_quantize_chunk` calls: the reference quantizer
//! without an imatrix, an importance-weighted `make_qx_quants` search per block with one).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::util::{abs_max_first, c_f32_to_i32, make_qx_quants, read_f16, write_f16};

/// Elements per block (`QK4_0`).
pub const QK4_0: usize = 32;

/// ggml's `block_q4_0`: the byte layout of one block.
#[repr(C)]
pub struct BlockQ4_0 {
    /// Scale, fp16 little-endian.
    pub d: [u8; 2],
    /// Codes: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high one.
    pub qs: [u8; QK4_0 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 2 + QK4_0 / 2);

const TS: usize = std::mem::size_of::<BlockQ4_0>();

/// Marker for `q4_0`.
pub struct Q4_0;

impl GgmlType for Q4_0 {
    const NAME: &'static str = "q4_0";
    const ID: u32 = 2;
    const BLOCK_SIZE: usize = QK4_0;
    const TYPE_SIZE: usize = TS;
    const IS_QUANTIZED: bool = true;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_q4_0`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK4_0)) {
            let d = read_f16(b, 0);
            let qs: &[u8; 16] = b[2..TS].try_into().unwrap();
            let (y0, y1) = y.split_at_mut(16);
            let y0: &mut [f32; 16] = y0.try_into().unwrap();
            let y1: &mut [f32; 16] = y1.try_into().unwrap();
            for j in 0..16 {
                let x0 = (qs[j] & 0x0F) as i32 - 8;
                let x1 = (qs[j] >> 4) as i32 - 8;
                y0[j] = x0 as f32 * d;
                y1[j] = x1 as f32 * d;
            }
        }
    }
}

inventory::submit! { <Q4_0 as GgmlType>::TRAITS }

/// `quantize_row_q4_0_ref`: per block, `d = max / -8` where `max` is the element of largest
/// magnitude, codes `min(15, (int8_t)(x / d + 8.5))`.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK4_0).zip(y.chunks_exact_mut(TS)) {
        let xb: &[f32; QK4_0] = xb.try_into().unwrap();
        let (_, max) = abs_max_first(xb);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_f16(yb, 0, d);
        // `MIN(15, (int8_t)(x*id + 8.5f))` stored into a uint8_t.
        let mut q = [0u8; QK4_0];
        for (q, &v) in q.iter_mut().zip(xb) {
            *q = (c_f32_to_i32(v * id + 8.5) as i8).min(15) as u8;
        }
        for j in 0..16 {
            yb[2 + j] = q[j] | (q[16 + j] << 4);
        }
    }
}

/// `quantize_row_q4_0_impl` with weights: one row of `x.len()` elements.
fn quantize_row_impl(x: &[f32], y: &mut [u8], quant_weights: &[f32]) {
    let n_per_row = x.len();
    let mut sum_x2 = 0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let sigma2 = sum_x2 / n_per_row as f32;
    let mut weight = [0f32; QK4_0];
    let mut l = [0i8; QK4_0];
    for ((xb, qw), yb) in x.chunks_exact(QK4_0).zip(quant_weights.chunks_exact(QK4_0)).zip(y.chunks_exact_mut(TS)) {
        for j in 0..QK4_0 {
            weight[j] = qw[j] * (sigma2 + xb[j] * xb[j]).sqrt();
        }
        let d = make_qx_quants(QK4_0, 8, xb, &mut l, 1, Some(&weight));
        write_f16(yb, 0, d);
        for j in 0..16 {
            yb[2 + j] = l[j] as u8 | ((l[j + 16] as u8) << 4);
        }
    }
}

/// `quantize_q4_0`: the reference quantizer over everything without an imatrix, the
/// importance-weighted search row by row with one.
fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    crate::util::quantize_rows_with(
        src,
        dst,
        n_per_row,
        imatrix,
        n_per_row / QK4_0 * TS,
        quantize_ref,
        quantize_row_impl,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        b[0..2].copy_from_slice(&0x3800u16.to_le_bytes()); // d = 0.5
        for j in 0..16 {
            b[2 + j] = (j as u8) | ((15 - j as u8) << 4);
        }
        let mut out = [0f32; 32];
        Q4_0::dequantize(&b, &mut out);
        for j in 0..16 {
            assert_eq!(out[j], (j as f32 - 8.0) * 0.5);
            assert_eq!(out[16 + j], (7.0 - j as f32) * 0.5);
        }
    }

    #[test]
    fn roundtrip_error_is_bounded() {
        crate::util::test_rng::assert_roundtrip(quantize_ref, Q4_0::dequantize, TS, |xb| {
            xb.iter().fold(0f32, |a, v| a.max(v.abs())) / 8.0 * 1.01
        });
    }

    #[test]
    fn all_zero_row_gives_zero_block() {
        let x = [0f32; 64];
        let mut q = [0xAAu8; 2 * TS];
        quantize_rows(&x, &mut q, 64, None);
        for b in q.chunks(TS) {
            // d = 0 / -8 is -0.0 in ggml too.
            assert_eq!(&b[..2], &[0, 0x80]);
            assert!(b[2..].iter().all(|&v| v == 0x88));
        }
        quantize_rows(&x, &mut q, 64, Some(&[1.0; 64]));
        let mut y = [1f32; 64];
        Q4_0::dequantize(&q, &mut y);
        assert!(y.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn imatrix_path_is_deterministic_and_close() {
        let err = crate::util::test_rng::imatrix_mse(quantize_rows, Q4_0::dequantize, TS);
        assert!(err < 0.01, "mse {err}");
    }
}
