//! `GGML_TYPE_Q4_1` (id 3): blocks of 32 weights, fp16 scale `d` and minimum `m`, 32 4-bit
//! codes `q`, decoded as `q * d + m`.
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_q4_1`
//! (`to_float`), `quantize_row_q4_1_ref` (`from_float_ref`), and `quantize_q4_1` /
//! `quantize_row_q4_1_impl` (what `ggml_quantize_chunk` calls: the reference quantizer
//! without an imatrix, an importance-weighted `make_qkx3_quants` search per block with one).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::util::{c_f32_to_i32, make_qkx3_quants, read_f16, write_f16};

/// Elements per block (`QK4_1`).
pub const QK4_1: usize = 32;

/// ggml's `block_q4_1`: the byte layout of one block.
#[repr(C)]
pub struct BlockQ4_1 {
    /// Scale, fp16 little-endian.
    pub d: [u8; 2],
    /// Minimum (added after scaling), fp16 little-endian.
    pub m: [u8; 2],
    /// Codes: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high one.
    pub qs: [u8; QK4_1 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 2 * 2 + QK4_1 / 2);

const TS: usize = std::mem::size_of::<BlockQ4_1>();

/// Marker for `q4_1`.
pub struct Q4_1;

impl GgmlType for Q4_1 {
    const NAME: &'static str = "q4_1";
    const ID: u32 = 3;
    const BLOCK_SIZE: usize = QK4_1;
    const TYPE_SIZE: usize = TS;
    const IS_QUANTIZED: bool = true;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_q4_1`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK4_1)) {
            let d = read_f16(b, 0);
            let m = read_f16(b, 2);
            let qs: &[u8; 16] = b[4..TS].try_into().unwrap();
            let (y0, y1) = y.split_at_mut(16);
            let y0: &mut [f32; 16] = y0.try_into().unwrap();
            let y1: &mut [f32; 16] = y1.try_into().unwrap();
            for j in 0..16 {
                let x0 = (qs[j] & 0x0F) as i32;
                let x1 = (qs[j] >> 4) as i32;
                y0[j] = x0 as f32 * d + m;
                y1[j] = x1 as f32 * d + m;
            }
        }
    }
}

inventory::submit! { <Q4_1 as GgmlType>::TRAITS }

/// `quantize_row_q4_1_ref`: per block, `d = (max - min) / 15`, `m = min`, codes
/// `min(15, (int8_t)((x - min) / d + 0.5))`.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK4_1).zip(y.chunks_exact_mut(TS)) {
        let mut min = f32::MAX;
        let mut max = -f32::MAX;
        for &v in xb {
            if v < min {
                min = v;
            }
            if v > max {
                max = v;
            }
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_f16(yb, 0, d);
        write_f16(yb, 2, min);
        for j in 0..16 {
            let x0 = (xb[j] - min) * id;
            let x1 = (xb[16 + j] - min) * id;
            // `MIN(15, (int8_t)(x + 0.5f))` stored into a uint8_t.
            let xi0 = (c_f32_to_i32(x0 + 0.5) as i8).min(15) as u8;
            let xi1 = (c_f32_to_i32(x1 + 0.5) as i8).min(15) as u8;
            yb[4 + j] = xi0 | (xi1 << 4);
        }
    }
}

/// `quantize_row_q4_1_impl` with weights: one row of `x.len()` elements.
fn quantize_row_impl(x: &[f32], y: &mut [u8], quant_weights: &[f32]) {
    let n_per_row = x.len();
    let mut sum_x2 = 0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let sigma2 = sum_x2 / n_per_row as f32;
    let mut weight = [0f32; QK4_1];
    let mut l = [0u8; QK4_1];
    let mut laux = [0u8; QK4_1];
    for ((xb, qw), yb) in x.chunks_exact(QK4_1).zip(quant_weights.chunks_exact(QK4_1)).zip(y.chunks_exact_mut(TS)) {
        for j in 0..QK4_1 {
            weight[j] = qw[j] * (sigma2 + xb[j] * xb[j]).sqrt();
        }
        let mut min = 0f32;
        let d = make_qkx3_quants(QK4_1, 15, xb, Some(&weight), &mut l, &mut min, &mut laux, -0.9, 0.05, 36, false);
        write_f16(yb, 0, d);
        write_f16(yb, 2, -min);
        for j in 0..16 {
            yb[4 + j] = l[j] | (l[j + 16] << 4);
        }
    }
}

/// `quantize_q4_1`: the reference quantizer over everything without an imatrix, the
/// importance-weighted search row by row with one.
fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    crate::util::quantize_rows_with(
        src,
        dst,
        n_per_row,
        imatrix,
        n_per_row / QK4_1 * TS,
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
        b[2..4].copy_from_slice(&0xc000u16.to_le_bytes()); // m = -2
        for j in 0..16 {
            b[4 + j] = (j as u8) | ((15 - j as u8) << 4);
        }
        let mut out = [0f32; 32];
        Q4_1::dequantize(&b, &mut out);
        for j in 0..16 {
            assert_eq!(out[j], j as f32 * 0.5 - 2.0);
            assert_eq!(out[16 + j], (15 - j) as f32 * 0.5 - 2.0);
        }
    }

    #[test]
    fn roundtrip_error_is_bounded() {
        crate::util::test_rng::assert_roundtrip(quantize_ref, Q4_1::dequantize, TS, |xb| {
            let (lo, hi) = xb.iter().fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            (hi - lo) / 15.0 * 0.51 + 2e-3
        });
    }

    #[test]
    fn all_zero_row_gives_zero_block() {
        let x = [0f32; 64];
        let mut q = [0xAAu8; 2 * TS];
        quantize_rows(&x, &mut q, 64, None);
        assert!(q.iter().all(|&v| v == 0));
        quantize_rows(&x, &mut q, 64, Some(&[1.0; 64]));
        let mut y = [1f32; 64];
        Q4_1::dequantize(&q, &mut y);
        assert!(y.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn imatrix_path_is_deterministic_and_close() {
        let err = crate::util::test_rng::imatrix_mse(quantize_rows, Q4_1::dequantize, TS);
        assert!(err < 0.005, "mse {err}");
    }
}
