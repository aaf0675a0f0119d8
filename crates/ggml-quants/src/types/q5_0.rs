//! `GGML_TYPE_Q5_0` (id 6): blocks of 32 weights, one fp16 scale `d` and 32 5-bit codes
//! `q` (low nibbles in `qs`, fifth bits in the 32-bit mask `qh`), decoded as `(q - 16) * d`.
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_q5_0`
//! (`to_float`), `quantize_row_q5_0_ref` (`from_float_ref`), and `quantize_q5_0` /
//! `quantize_row_q5_0_impl` (what `ggml_quantize_chunk` calls: the reference quantizer
//! without an imatrix, an importance-weighted `make_qx_quants` search per block with one).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::util::{abs_max_first, c_f32_to_i32, make_qx_quants, read_f16, write_f16};

/// Elements per block (`QK5_0`).
pub const QK5_0: usize = 32;

/// ggml's `block_q5_0`: the byte layout of one block.
#[repr(C)]
pub struct BlockQ5_0 {
    /// Scale, fp16 little-endian.
    pub d: [u8; 2],
    /// Fifth bits, a little-endian `u32`: bit `j` belongs to element `j`.
    pub qh: [u8; 4],
    /// Low nibbles: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high one.
    pub qs: [u8; QK5_0 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 2 + 4 + QK5_0 / 2);

const TS: usize = std::mem::size_of::<BlockQ5_0>();

/// Marker for `q5_0`.
pub struct Q5_0;

impl GgmlType for Q5_0 {
    const NAME: &'static str = "q5_0";
    const ID: u32 = 6;
    const BLOCK_SIZE: usize = QK5_0;
    const TYPE_SIZE: usize = TS;
    const IS_QUANTIZED: bool = true;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_q5_0`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK5_0)) {
            let d = read_f16(b, 0);
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            let qs: &[u8; 16] = b[6..TS].try_into().unwrap();
            let (y0, y1) = y.split_at_mut(16);
            let y0: &mut [f32; 16] = y0.try_into().unwrap();
            let y1: &mut [f32; 16] = y1.try_into().unwrap();
            for j in 0..16 {
                let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
                let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
                let x0 = ((qs[j] & 0x0F) | xh_0) as i32 - 16;
                let x1 = ((qs[j] >> 4) | xh_1) as i32 - 16;
                y0[j] = x0 as f32 * d;
                y1[j] = x1 as f32 * d;
            }
        }
    }
}

inventory::submit! { <Q5_0 as GgmlType>::TRAITS }

/// Packs 32 5-bit codes (`l[j]` for element `j`) into `qs` and the `qh` bit mask, as the
/// tails of `quantize_row_q5_0_ref` and `quantize_row_q5_0_impl` do.
#[inline]
fn pack(l: &[u8; 32], yb: &mut [u8]) {
    let mut qh = 0u32;
    for j in 0..16 {
        let xi0 = l[j];
        let xi1 = l[j + 16];
        yb[6 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
        qh |= (((xi0 & 0x10) as u32) >> 4) << j;
        qh |= (((xi1 & 0x10) as u32) >> 4) << (j + 16);
    }
    yb[2..6].copy_from_slice(&qh.to_le_bytes());
}

/// `quantize_row_q5_0_ref`: per block, `d = max / -16` where `max` is the element of
/// largest magnitude, codes `min(31, (int8_t)(x / d + 16.5))`.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK5_0).zip(y.chunks_exact_mut(TS)) {
        let xb: &[f32; QK5_0] = xb.try_into().unwrap();
        let (_, max) = abs_max_first(xb);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_f16(yb, 0, d);
        let mut l = [0u8; 32];
        // `MIN(31, (int8_t)(x*id + 16.5f))` stored into a uint8_t.
        for (l, &v) in l.iter_mut().zip(xb) {
            *l = (c_f32_to_i32(v * id + 16.5) as i8).min(31) as u8;
        }
        pack(&l, yb);
    }
}

/// `quantize_row_q5_0_impl` with weights: one row of `x.len()` elements.
fn quantize_row_impl(x: &[f32], y: &mut [u8], quant_weights: &[f32]) {
    let n_per_row = x.len();
    let mut sum_x2 = 0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let sigma2 = sum_x2 / n_per_row as f32;
    let mut weight = [0f32; QK5_0];
    let mut l = [0i8; QK5_0];
    for ((xb, qw), yb) in x.chunks_exact(QK5_0).zip(quant_weights.chunks_exact(QK5_0)).zip(y.chunks_exact_mut(TS)) {
        for j in 0..QK5_0 {
            weight[j] = qw[j] * (sigma2 + xb[j] * xb[j]).sqrt();
        }
        let d = make_qx_quants(QK5_0, 16, xb, &mut l, 1, Some(&weight));
        write_f16(yb, 0, d);
        pack(&l.map(|v| v as u8), yb);
    }
}

/// `quantize_q5_0`: the reference quantizer over everything without an imatrix, the
/// importance-weighted search row by row with one.
fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    crate::util::quantize_rows_with(
        src,
        dst,
        n_per_row,
        imatrix,
        n_per_row / QK5_0 * TS,
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
        b[0..2].copy_from_slice(&0x3400u16.to_le_bytes()); // d = 0.25

        // Fifth bit set for elements 1 and 17 (bits 1 and 17 of qh).
        b[2..6].copy_from_slice(&((1u32 << 1) | (1 << 17)).to_le_bytes());
        for j in 0..16 {
            b[6 + j] = (j as u8) | ((15 - j as u8) << 4);
        }
        let mut out = [0f32; 32];
        Q5_0::dequantize(&b, &mut out);
        for j in 0..16 {
            let h = if j == 1 { 16 } else { 0 };
            assert_eq!(out[j], (j as i32 + h - 16) as f32 * 0.25);
            assert_eq!(out[16 + j], (15 - j as i32 + h - 16) as f32 * 0.25);
        }
    }

    #[test]
    fn roundtrip_error_is_bounded() {
        crate::util::test_rng::assert_roundtrip(quantize_ref, Q5_0::dequantize, TS, |xb| {
            xb.iter().fold(0f32, |a, v| a.max(v.abs())) / 16.0 * 1.01
        });
    }

    #[test]
    fn all_zero_row_gives_zero_block() {
        let x = [0f32; 64];
        let mut q = [0xAAu8; 2 * TS];
        quantize_rows(&x, &mut q, 64, None);
        for b in q.chunks(TS) {
            // d = 0 / -16 is -0.0 in ggml too; code 16 = (0, fifth bit set).
            assert_eq!(&b[..6], &[0, 0x80, 0xff, 0xff, 0xff, 0xff]);
            assert!(b[6..].iter().all(|&v| v == 0));
        }
        quantize_rows(&x, &mut q, 64, Some(&[1.0; 64]));
        let mut y = [1f32; 64];
        Q5_0::dequantize(&q, &mut y);
        assert!(y.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn imatrix_path_is_deterministic_and_close() {
        let err = crate::util::test_rng::imatrix_mse(quantize_rows, Q5_0::dequantize, TS);
        assert!(err < 0.003, "mse {err}");
    }
}
