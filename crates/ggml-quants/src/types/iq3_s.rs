//! `GGML_TYPE_IQ3_S` (id 21): 3-bit codes, groups of 4 weights from the 512-point grid
//! [`IQ3S_GRID`] with free signs and 4-bit scales per 32 weights (3.4375 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq3_s`
//! (`to_float`), `quantize_iq3_s` / `quantize_row_iq3_s_impl` (what `ggml_quantize_chunk`
//! calls) and `quantize_row_iq3_s_ref` (`from_float_ref`).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq_common::quantize_qk_rows;
use crate::types::iq_grid::iq3s;
use crate::types::iq_tables::{IQ3S_GRID, KMASK_IQ2XS};
use crate::util::{c_max, f32_to_fp16, nearest_int, read_f16};
use crate::QK_K;

/// ggml's `block_iq3_s` (110 bytes):
///
/// | offset | bytes | field    | meaning                                                  |
/// |-------:|------:|----------|----------------------------------------------------------|
/// | 0      | 2     | `d`      | fp16 super-block scale                                   |
/// | 2      | 64    | `qs`     | low 8 bits of the grid index of each group of 4 weights  |
/// | 66     | 8     | `qh`     | per 32 weights: bit `k` is bit 8 of the index of group `k` |
/// | 74     | 32    | `signs`  | one sign bit per weight                                  |
/// | 106    | 4     | `scales` | per 64 weights: 4-bit scale of the first 32 (low) and last 32 (high) |
///
/// A weight decodes to `d·(1 + 2s)·grid[j]·±1`.
#[repr(C)]
pub struct BlockIq3S {
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
    /// Grid index low bits.
    pub qs: [u8; QK_K / 4],
    /// Grid index high bits.
    pub qh: [u8; QK_K / 32],
    /// Sign bits.
    pub signs: [u8; QK_K / 8],
    /// 4-bit scales.
    pub scales: [u8; QK_K / 64],
}

const _: () = assert!(std::mem::size_of::<BlockIq3S>() == 2 + 13 * (QK_K / 32) + QK_K / 64);
pub(crate) const TS: usize = std::mem::size_of::<BlockIq3S>();

/// Marker for `iq3_s`.
pub struct Iq3S;

impl GgmlType for Iq3S {
    const NAME: &'static str = "iq3_s";
    const ID: u32 = 21;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_iq3_s`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_K)) {
            let d = read_f16(b, 0);
            for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
                let sc = b[106 + ib32 / 2];
                let db = d * (1 + 2 * if ib32 % 2 == 0 { sc & 0xf } else { sc >> 4 } as i32) as f32;
                let qh = b[66 + ib32] as usize;
                let qs = &b[2 + 8 * ib32..2 + 8 * ib32 + 8];
                for (l, y) in y.chunks_exact_mut(8).enumerate() {
                    let signs = b[74 + 4 * ib32 + l];
                    let g1 = IQ3S_GRID[qs[2 * l] as usize | ((qh << (8 - 2 * l)) & 256)].to_le_bytes();
                    let g2 = IQ3S_GRID[qs[2 * l + 1] as usize | ((qh << (7 - 2 * l)) & 256)].to_le_bytes();
                    for j in 0..4 {
                        y[j] = db * g1[j] as f32 * if signs & KMASK_IQ2XS[j] != 0 { -1.0 } else { 1.0 };
                        y[j + 4] = db * g2[j] as f32 * if signs & KMASK_IQ2XS[j + 4] != 0 { -1.0 } else { 1.0 };
                    }
                }
            }
        }
    }
}

inventory::submit! { <Iq3S as GgmlType>::TRAITS }

const OFF_QS: usize = 2;
const OFF_QH: usize = OFF_QS + QK_K / 4;
const OFF_SIGNS: usize = OFF_QH + QK_K / 32;
const OFF_SCALES: usize = OFF_SIGNS + QK_K / 8;

/// `quantize_row_iq3_s_impl(32, ...)` for one super-block; `qw` its importance weights.
///
/// Like ggml, the grid-index and sign bytes of a sub-block are written at a cursor that only
/// advances past sub-blocks that are not all zero (so a zero sub-block shifts the ones after
/// it), while the high index bits go to the sub-block's own `qh` position.
fn quantize_block(xbl: &[f32], qw: Option<&[f32]>, y: &mut [u8]) {
    const K_MAX_Q: i32 = 8;
    const BS: usize = 32;
    const BS4: usize = BS / 4;
    const BS8: usize = BS / 8;
    let g = iq3s();
    let mut scales = [0f32; QK_K / BS];
    let mut weight = [0f32; BS];
    let mut xval = [0f32; BS];
    let mut l = [0i8; BS];
    let mut waux = [0f32; BS];
    let mut block_signs = [0u8; BS8];

    y[..TS].fill(0);
    let mut qs_at = OFF_QS;
    let mut signs_at = OFF_SIGNS;
    let mut max_scale = 0f32;
    let mut sumx2 = 0f32;
    for &v in xbl {
        sumx2 += v * v;
    }
    let sigma2 = 2.0 * sumx2 / QK_K as f32;

    for ib in 0..QK_K / BS {
        let xb = &xbl[BS * ib..BS * ib + BS];
        match qw {
            Some(qw) => {
                let qwb = &qw[BS * ib..BS * ib + BS];
                for i in 0..BS {
                    weight[i] = qwb[i] * (sigma2 + xb[i] * xb[i]).sqrt();
                }
            }
            None => {
                for i in 0..BS {
                    weight[i] = xb[i] * xb[i];
                }
            }
        }
        for i in 0..BS {
            waux[i] = weight[i].sqrt();
        }
        for k in 0..BS8 {
            let mut s = 0u8;
            for i in 0..8 {
                if xb[8 * k + i] >= 0.0 {
                    xval[8 * k + i] = xb[8 * k + i];
                } else {
                    xval[8 * k + i] = -xb[8 * k + i];
                    s |= 1 << i;
                }
            }
            block_signs[k] = s;
        }
        let mut max = xval[0];
        for &v in &xval[1..] {
            max = c_max(max, v);
        }
        l.fill(0);
        #[allow(clippy::float_cmp)]
        if max == 0.0 {
            scales[ib] = 0.0;
            continue;
        }
        let mut scale = max / (2 * K_MAX_Q - 1) as f32;
        let mut is_on_grid = [false; BS4];
        g.scan_scale(&xval, &weight, &waux, (K_MAX_Q, 3), (9, 0.2, max), &mut scale, &mut l, &mut is_on_grid);
        g.refit_off_grid(&xval, &weight, &waux, (K_MAX_Q, 3), true, &mut scale, &mut l, &is_on_grid);
        if scale < 0.0 {
            scale = -scale;
            for s in &mut block_signs {
                *s = !*s;
            }
        }
        for k in 0..BS4 {
            let mut u = 0usize;
            for i in 0..4 {
                u |= (l[4 * k + i] as usize) << (3 * i);
            }
            // Not a grid point only for non-finite input (ggml aborts); index 0 stands in.
            let gi = g.map[u].max(0) as usize;
            y[qs_at + k] = (gi & 255) as u8;
            let pos = ib * BS4 + k;
            y[OFF_QH + pos / 8] |= ((gi >> 8) << (pos % 8)) as u8;
        }
        qs_at += BS4;
        y[signs_at..signs_at + BS8].copy_from_slice(&block_signs);
        signs_at += BS8;
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }

    #[allow(clippy::float_cmp)]
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    y[0..2].copy_from_slice(&f32_to_fp16(d * 1.033).to_le_bytes());
    let id = 1.0 / d;
    for ib in (0..QK_K / BS).step_by(2) {
        let l1 = 0.max(15.min(nearest_int(0.5 * (id * scales[ib] - 1.0))));
        let l2 = 0.max(15.min(nearest_int(0.5 * (id * scales[ib + 1] - 1.0))));
        y[OFF_SCALES + ib / 2] = (l1 | (l2 << 4)) as u8;
    }
}

/// `quantize_iq3_s`: `quantize_row_iq3_s_impl(32, ...)` row by row, with the importance
/// matrix when given, else weights `x²`.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    quantize_qk_rows(src, dst, n_per_row, TS, imatrix, quantize_block);
}

/// `quantize_row_iq3_s_ref`: the quantizer without an importance matrix.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    quantize_qk_rows(x, y, x.len(), TS, None, quantize_block);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::iq_common::{rmse, test_rng};

    #[test]
    fn roundtrip_error_is_reasonable() {
        let mut r = test_rng(37);
        let n = 2 * QK_K;
        let x: Vec<f32> = (0..2 * n).map(|_| r()).collect();
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.1).collect();
        for w in [None, Some(&im[..])] {
            let q = Iq3S::TRAITS.quantize_to_vec(&x, n, w).unwrap();
            let y = Iq3S::TRAITS.dequantize_to_vec(&q).unwrap();
            assert!(rmse(&x, &y) < 0.12, "{}", rmse(&x, &y));
        }
    }

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        crate::util::write_f16(&mut b, 0, 0.5);
        b[OFF_QS] = 3; // weights 0..4: grid point 256 + 3 (qh bit 0 set)
        b[OFF_QH] = 1;
        b[OFF_SIGNS] = 0b10; // weight 1 negative
        b[OFF_SCALES] = 2; // first 32: 0.5·(1 + 4) = 2.5
        let mut y = [0f32; QK_K];
        Iq3S::dequantize(&b, &mut y);
        let g = IQ3S_GRID[259].to_le_bytes();
        assert_eq!(&y[..4], &[2.5 * g[0] as f32, -2.5 * g[1] as f32, 2.5 * g[2] as f32, 2.5 * g[3] as f32]);
    }
}
