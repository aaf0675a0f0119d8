//! `GGML_TYPE_IQ3_XXS` (id 18): "true" 3-bit codes, groups of 4 weights from the 256-point
//! grid [`IQ3XXS_GRID`] with even-parity signs per 8 (3.0625 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq3_xxs`
//! (`to_float`), `quantize_iq3_xxs` / `quantize_row_iq3_xxs_impl(256, ...)` (what
//! `ggml_quantize_chunk` calls) and `quantize_row_iq3_xxs_ref` (`from_float_ref`).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq2_xxs::even_signs;
use crate::types::iq_common::{quantize_qk_rows, GROUP_MAX_EPS_IQ3_XXS};
use crate::types::iq_grid::iq3xxs;
use crate::types::iq_tables::{IQ3XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS};
use crate::util::{c_max, f32_to_fp16, nearest_int, read_f16};
use crate::QK_K;

/// ggml's `block_iq3_xxs` (98 bytes):
///
/// | offset | bytes | field | meaning                                                         |
/// |-------:|------:|-------|-----------------------------------------------------------------|
/// | 0      | 2     | `d`   | fp16 super-block scale                                          |
/// | 2      | 64    | `qs`  | one grid index per 4 weights                                    |
/// | 66     | 32    | scales and signs | per 32 weights a u32 LE: four 7-bit sign indices (bits `7l..`), 4-bit scale (bits 28..32) |
#[repr(C)]
pub struct BlockIq3Xxs {
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
    /// Grid indices, then scales and signs.
    pub qs: [u8; 3 * QK_K / 8],
}

const _: () = assert!(std::mem::size_of::<BlockIq3Xxs>() == 2 + 3 * (QK_K / 8));
pub(crate) const TS: usize = std::mem::size_of::<BlockIq3Xxs>();

/// Marker for `iq3_xxs`.
pub struct Iq3Xxs;

impl GgmlType for Iq3Xxs {
    const NAME: &'static str = "iq3_xxs";
    const ID: u32 = 18;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_iq3_xxs`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_K)) {
            let d = read_f16(b, 0);
            for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
                let at = 2 + QK_K / 4 + 4 * ib32;
                let aux = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
                let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
                let qs = &b[2 + 8 * ib32..2 + 8 * ib32 + 8];
                for (l, y) in y.chunks_exact_mut(8).enumerate() {
                    let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                    let g1 = IQ3XXS_GRID[qs[2 * l] as usize].to_le_bytes();
                    let g2 = IQ3XXS_GRID[qs[2 * l + 1] as usize].to_le_bytes();
                    for j in 0..4 {
                        y[j] = db * g1[j] as f32 * if signs & KMASK_IQ2XS[j] != 0 { -1.0 } else { 1.0 };
                        y[j + 4] = db * g2[j] as f32 * if signs & KMASK_IQ2XS[j + 4] != 0 { -1.0 } else { 1.0 };
                    }
                }
            }
        }
    }
}

inventory::submit! { <Iq3Xxs as GgmlType>::TRAITS }

/// `quantize_row_iq3_xxs_impl(256, ...)` for one super-block; `qw` its importance weights.
fn quantize_block(xbl: &[f32], qw: Option<&[f32]>, y: &mut [u8]) {
    const K_MAX_Q: i32 = 8;
    let g = iq3xxs();
    let mut scales = [0f32; QK_K / 32];
    let mut weight = [0f32; 32];
    let mut xval = [0f32; 32];
    let mut l = [0i8; 32];
    let mut waux = [0f32; 32];
    let mut block_signs = [0u8; 8];
    let mut q3 = [0u8; 3 * (QK_K / 8)];
    let mut scales_and_signs = [0u32; QK_K / 32];

    let mut max_scale = 0f32;
    let mut sumx2 = 0f32;
    for &v in xbl {
        sumx2 += v * v;
    }
    let sigma2 = 2.0 * sumx2 / QK_K as f32;

    for ib in 0..QK_K / 32 {
        let xb = &xbl[32 * ib..32 * ib + 32];
        match qw {
            Some(qw) => {
                let qwb = &qw[32 * ib..32 * ib + 32];
                for i in 0..32 {
                    weight[i] = qwb[i] * (sigma2 + xb[i] * xb[i]).sqrt();
                }
            }
            None => {
                for i in 0..32 {
                    weight[i] = xb[i] * xb[i];
                }
            }
        }
        for i in 0..32 {
            waux[i] = weight[i].sqrt();
        }
        for k in 0..4 {
            block_signs[k] = even_signs(&xb[8 * k..8 * k + 8], &weight[8 * k..8 * k + 8], &mut xval[8 * k..8 * k + 8]);
        }
        let mut max = xval[0];
        for &v in &xval[1..] {
            max = c_max(max, v);
        }
        l.fill(0);
        if max < GROUP_MAX_EPS_IQ3_XXS {
            scales[ib] = 0.0;
            continue;
        }
        let mut scale = max / (2 * K_MAX_Q - 1) as f32;
        let mut is_on_grid = [true; 8];
        g.scan_scale(&xval, &weight, &waux, (K_MAX_Q, 3), (15, 0.2, max), &mut scale, &mut l, &mut is_on_grid);
        g.refit_off_grid(&xval, &weight, &waux, (K_MAX_Q, 3), false, &mut scale, &mut l, &is_on_grid);
        if scale < 0.0 {
            scale = -scale;
            for s in &mut block_signs[..4] {
                *s = !*s & 127;
            }
        }
        for k in 0..8 {
            let mut u = 0usize;
            for i in 0..4 {
                u |= (l[4 * k + i] as usize) << (3 * i);
            }
            // Not a grid point only for non-finite input (ggml aborts); index 0 stands in.
            q3[8 * ib + k] = g.map[u].max(0) as u8;
        }
        scales_and_signs[ib] = block_signs[0] as u32
            | (block_signs[1] as u32) << 7
            | (block_signs[2] as u32) << 14
            | (block_signs[3] as u32) << 21;
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }

    y[..TS].fill(0);
    #[allow(clippy::float_cmp)]
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    y[0..2].copy_from_slice(&f32_to_fp16(d * 1.0125).to_le_bytes());
    let id = 1.0 / d;
    for ib in 0..QK_K / 32 {
        let li = 0.max(15.min(nearest_int(0.5 * (id * scales[ib] - 1.0))));
        scales_and_signs[ib] |= (li as u32) << 28;
    }
    y[2..2 + QK_K / 4].copy_from_slice(&q3[..QK_K / 4]);
    for (ib, w) in scales_and_signs.iter().enumerate() {
        let at = 2 + QK_K / 4 + 4 * ib;
        y[at..at + 4].copy_from_slice(&w.to_le_bytes());
    }
}

/// `quantize_iq3_xxs`: `quantize_row_iq3_xxs_impl(256, ...)` row by row, with the
/// importance matrix when given, else weights `x²`.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    quantize_qk_rows(src, dst, n_per_row, TS, imatrix, quantize_block);
}

/// `quantize_row_iq3_xxs_ref`: the quantizer without an importance matrix.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    quantize_qk_rows(x, y, x.len(), TS, None, quantize_block);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::iq_common::{rmse, test_rng};

    #[test]
    fn roundtrip_error_is_reasonable() {
        let mut r = test_rng(31);
        let n = 2 * QK_K;
        let x: Vec<f32> = (0..2 * n).map(|_| r()).collect();
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.1).collect();
        for w in [None, Some(&im[..])] {
            let q = Iq3Xxs::TRAITS.quantize_to_vec(&x, n, w).unwrap();
            let y = Iq3Xxs::TRAITS.dequantize_to_vec(&q).unwrap();
            assert!(rmse(&x, &y) < 0.15, "{}", rmse(&x, &y));
        }
    }

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        crate::util::write_f16(&mut b, 0, 1.0);
        b[2] = 1; // weights 0..4: grid point 1 = (20, 4, 4, 4)
        let aux: u32 = (1 << 28) | 1; // scale 1 → 1.5·0.5; signs ksigns[1] = 0x81
        b[2 + QK_K / 4..6 + QK_K / 4].copy_from_slice(&aux.to_le_bytes());
        let mut y = [0f32; QK_K];
        Iq3Xxs::dequantize(&b, &mut y);
        assert_eq!(&y[..5], &[-0.75 * 20.0, 0.75 * 4.0, 0.75 * 4.0, 0.75 * 4.0, 0.75 * 4.0]);
        assert_eq!(y[7], -0.75 * 4.0);
    }
}
