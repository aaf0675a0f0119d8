//! `GGML_TYPE_IQ2_S` (id 22): 2-bit E8-lattice codes from the 1024-point grid
//! [`IQ2S_GRID`] with free signs and 4-bit scales per 16 weights (2.5625 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq2_s`
//! (`to_float`), `quantize_iq2_s` / `quantize_row_iq2_s_impl` (what `ggml_quantize_chunk`
//! calls) and `quantize_row_iq2_s_ref` (`from_float_ref`: the same without an imatrix).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq_common::{quantize_qk_rows, GROUP_MAX_EPS_IQ2_S};
use crate::types::iq_grid::iq2s;
use crate::types::iq_tables::{IQ2S_GRID, KMASK_IQ2XS};
use crate::util::{c_max, f32_to_fp16, nearest_int, read_f16};
use crate::QK_K;

/// ggml's `block_iq2_s` (82 bytes):
///
/// | offset | bytes | field    | meaning                                                   |
/// |-------:|------:|----------|-----------------------------------------------------------|
/// | 0      | 2     | `d`      | fp16 super-block scale                                    |
/// | 2      | 32    | `qs`     | low 8 bits of the grid index of each group of 8 weights   |
/// | 34     | 32    | signs    | (second half of ggml's `qs`) one sign bit per weight       |
/// | 66     | 8     | `qh`     | per 32 weights: bits `2l..2l+2` are the index's bits 8..10 for group `l` |
/// | 74     | 8     | `scales` | per 32 weights: 4-bit scale of the first 16 (low) and last 16 (high) |
#[repr(C)]
pub struct BlockIq2S {
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
    /// Grid index low bits, then sign bits.
    pub qs: [u8; QK_K / 4],
    /// Grid index high bits.
    pub qh: [u8; QK_K / 32],
    /// 4-bit scales.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIq2S>() == 2 + QK_K / 4 + QK_K / 16);
pub(crate) const TS: usize = std::mem::size_of::<BlockIq2S>();

/// Marker for `iq2_s`.
pub struct Iq2S;

impl GgmlType for Iq2S {
    const NAME: &'static str = "iq2_s";
    const ID: u32 = 22;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_iq2_s`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_K)) {
            let d = read_f16(b, 0);
            for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
                let sc = b[74 + ib32];
                let qh = b[66 + ib32] as usize;
                let db = [d * (0.5 + (sc & 0xf) as f32) * 0.25, d * (0.5 + (sc >> 4) as f32) * 0.25];
                for (l, y) in y.chunks_exact_mut(8).enumerate() {
                    let dl = db[l / 2];
                    let idx = b[2 + 4 * ib32 + l] as usize | ((qh << (8 - 2 * l)) & 0x300);
                    let grid = IQ2S_GRID[idx].to_le_bytes();
                    let signs = b[34 + 4 * ib32 + l];
                    for j in 0..8 {
                        y[j] = dl * grid[j] as f32 * if signs & KMASK_IQ2XS[j] != 0 { -1.0 } else { 1.0 };
                    }
                }
            }
        }
    }
}

inventory::submit! { <Iq2S as GgmlType>::TRAITS }

const OFF_QS: usize = 2;
const OFF_SIGNS: usize = OFF_QS + QK_K / 8;
const OFF_QH: usize = OFF_QS + QK_K / 4;
const OFF_SCALES: usize = OFF_QH + QK_K / 32;

/// `quantize_row_iq2_s_impl` for one super-block; `qw` its importance weights.
fn quantize_block(xbl: &[f32], qw: Option<&[f32]>, y: &mut [u8]) {
    const K_MAX_Q: i32 = 3;
    let g = iq2s();
    let mut scales = [0f32; QK_K / 16];
    let mut weight = [0f32; 16];
    let mut xval = [0f32; 16];
    let mut l = [0i8; 16];
    let mut waux = [0f32; 16];
    let mut block_signs = [0u8; 2];

    y[..TS].fill(0);
    let mut max_scale = 0f32;
    let mut sumx2 = 0f32;
    for &v in xbl {
        sumx2 += v * v;
    }
    let sigma2 = 2.0 * sumx2 / QK_K as f32;

    for ib in 0..QK_K / 16 {
        let xb = &xbl[16 * ib..16 * ib + 16];
        match qw {
            Some(qw) => {
                let qwb = &qw[16 * ib..16 * ib + 16];
                for i in 0..16 {
                    weight[i] = qwb[i] * (sigma2 + xb[i] * xb[i]).sqrt();
                }
            }
            None => {
                for i in 0..16 {
                    weight[i] = 0.25 * sigma2 + xb[i] * xb[i];
                }
            }
        }
        for i in 0..16 {
            waux[i] = weight[i].sqrt();
        }
        for k in 0..2 {
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
        if max < GROUP_MAX_EPS_IQ2_S {
            scales[ib] = 0.0;
            continue;
        }
        let mut scale = max / (2 * K_MAX_Q - 1) as f32;
        let mut is_on_grid = [true; 2];
        g.scan_scale(&xval, &weight, &waux, (K_MAX_Q, 2), (9, 0.1, max), &mut scale, &mut l, &mut is_on_grid);
        g.refit_off_grid(&xval, &weight, &waux, (K_MAX_Q, 2), false, &mut scale, &mut l, &is_on_grid);
        if scale < 0.0 {
            scale = -scale;
            for s in &mut block_signs {
                *s = !*s;
            }
        }
        for k in 0..2 {
            let mut u = 0usize;
            for i in 0..8 {
                u |= (l[8 * k + i] as usize) << (2 * i);
            }
            // Not a grid point only for non-finite input (ggml aborts); index 0 stands in.
            let gi = g.map[u].max(0) as usize;
            let i8 = 2 * ib + k;
            y[OFF_QS + i8] = (gi & 255) as u8;
            y[OFF_QH + i8 / 4] |= ((gi >> 8) << (2 * (i8 % 4))) as u8;
            y[OFF_SIGNS + i8] = block_signs[k];
        }
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }

    #[allow(clippy::float_cmp)]
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    y[0..2].copy_from_slice(&f32_to_fp16(d * 0.9875).to_le_bytes());
    let id = 1.0 / d;
    for ib in 0..QK_K / 16 {
        let li = 0.max(15.min(nearest_int(0.5 * (id * scales[ib] - 1.0)))) as u8;
        if ib % 2 == 0 {
            y[OFF_SCALES + ib / 2] = li;
        } else {
            y[OFF_SCALES + ib / 2] |= li << 4;
        }
    }
}

/// `quantize_iq2_s`: `quantize_row_iq2_s_impl` row by row, with the importance matrix
/// when given, else weights `σ²/4 + x²`.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    quantize_qk_rows(src, dst, n_per_row, TS, imatrix, quantize_block);
}

/// `quantize_row_iq2_s_ref`: the quantizer without an importance matrix.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    quantize_qk_rows(x, y, x.len(), TS, None, quantize_block);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::iq_common::{rmse, test_rng};

    #[test]
    fn roundtrip_error_is_reasonable() {
        let mut r = test_rng(41);
        let n = 2 * QK_K;
        let x: Vec<f32> = (0..2 * n).map(|_| r()).collect();
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.1).collect();
        for w in [None, Some(&im[..])] {
            let q = Iq2S::TRAITS.quantize_to_vec(&x, n, w).unwrap();
            let y = Iq2S::TRAITS.dequantize_to_vec(&q).unwrap();
            assert!(rmse(&x, &y) < 0.25, "{}", rmse(&x, &y));
        }
    }

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        crate::util::write_f16(&mut b, 0, 1.0);
        b[OFF_QS + 1] = 7; // group 1 (weights 8..16): grid point 0x200 + 7
        b[OFF_QH] = 0b1000; // bits 2..4: high bits of group 1 = 2
        b[OFF_SIGNS + 1] = 1; // weight 8 negative
        b[OFF_SCALES] = 0x03; // first 16: 3.5·0.25
        let mut y = [0f32; QK_K];
        Iq2S::dequantize(&b, &mut y);
        let g = IQ2S_GRID[0x207].to_le_bytes();
        assert_eq!(y[8], -0.875 * g[0] as f32);
        assert_eq!(y[9], 0.875 * g[1] as f32);
    }
}
