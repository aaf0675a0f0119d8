//! `GGML_TYPE_IQ2_XS` (id 17): 2-bit E8-lattice codes from the 512-point grid
//! [`IQ2XS_GRID`] with even-parity signs and 4-bit scales per 16 weights (2.3125 bits per
//! weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq2_xs`
//! (`to_float`) and `quantize_iq2_xs` / `quantize_row_iq2_xs_impl` (what
//! `ggml_quantize_chunk` calls; ggml requires an importance matrix and has no
//! `from_float_ref`).

use crate::registry::{GgmlType, QuantizeRowsFn};
use crate::types::iq2_xxs::even_signs;
use crate::types::iq_common::quantize_qk_rows_imatrix;
use crate::types::iq_grid::iq2xs;
use crate::types::iq_tables::{IQ2XS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS};
use crate::util::{c_max, f32_to_fp16, nearest_int, read_f16, GROUP_MAX_EPS};
use crate::QK_K;

/// ggml's `block_iq2_xs` (74 bytes):
///
/// | offset | bytes | field    | meaning                                                   |
/// |-------:|------:|----------|-----------------------------------------------------------|
/// | 0      | 2     | `d`      | fp16 super-block scale                                    |
/// | 2      | 64    | `qs`     | u16 LE per 8 weights: grid index (bits 0..9), sign index (bits 9..16) |
/// | 66     | 8     | `scales` | per 32 weights: 4-bit scale of the first 16 (low) and last 16 (high) |
///
/// Weight `j` of group `l` decodes to `d·(0.5 + s)·0.25·grid[j]·±1`.
#[repr(C)]
pub struct BlockIq2Xs {
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
    /// Grid and sign indices (`uint16_t qs[32]`).
    pub qs: [u8; QK_K / 4],
    /// 4-bit scales.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIq2Xs>() == 2 + QK_K / 8 * 2 + QK_K / 32);
pub(crate) const TS: usize = std::mem::size_of::<BlockIq2Xs>();

/// Marker for `iq2_xs`.
pub struct Iq2Xs;

impl GgmlType for Iq2Xs {
    const NAME: &'static str = "iq2_xs";
    const ID: u32 = 17;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = TS;
    const REQUIRES_IMATRIX: bool = true;
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_iq2_xs`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_K)) {
            let d = read_f16(b, 0);
            for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
                let sc = b[66 + ib32];
                let db = [d * (0.5 + (sc & 0xf) as f32) * 0.25, d * (0.5 + (sc >> 4) as f32) * 0.25];
                for (l, y) in y.chunks_exact_mut(8).enumerate() {
                    let at = 2 + 2 * (4 * ib32 + l);
                    let q = u16::from_le_bytes([b[at], b[at + 1]]);
                    let grid = IQ2XS_GRID[(q & 511) as usize].to_le_bytes();
                    let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
                    for j in 0..8 {
                        y[j] = db[l / 2] * grid[j] as f32 * if signs & KMASK_IQ2XS[j] != 0 { -1.0 } else { 1.0 };
                    }
                }
            }
        }
    }
}

inventory::submit! { <Iq2Xs as GgmlType>::TRAITS }

/// `quantize_row_iq2_xs_impl` for one super-block; `qw` is its 256 importance weights.
fn quantize_block(xbl: &[f32], qw: &[f32], y: &mut [u8]) {
    const K_MAX_Q: i32 = 3;
    let g = iq2xs();
    let mut scales = [0f32; QK_K / 16];
    let mut weight = [0f32; 16];
    let mut xval = [0f32; 16];
    let mut l = [0i8; 16];
    let mut waux = [0f32; 16];
    let mut block_signs = [0u8; 2];
    let mut q2 = [0u16; 2 * (QK_K / 16)];

    let mut max_scale = 0f32;
    let mut sumx2 = 0f32;
    for &v in xbl {
        sumx2 += v * v;
    }
    let sigma2 = sumx2 / QK_K as f32;

    for ib in 0..QK_K / 16 {
        let xb = &xbl[16 * ib..16 * ib + 16];
        let qwb = &qw[16 * ib..16 * ib + 16];
        for i in 0..16 {
            weight[i] = qwb[i] * (sigma2 + xb[i] * xb[i]).sqrt();
        }
        for i in 0..16 {
            waux[i] = weight[i].sqrt();
        }
        for k in 0..2 {
            block_signs[k] = even_signs(&xb[8 * k..8 * k + 8], &weight[8 * k..8 * k + 8], &mut xval[8 * k..8 * k + 8]);
        }
        let mut max = xval[0];
        for &v in &xval[1..] {
            max = c_max(max, v);
        }
        l.fill(0);
        if max < GROUP_MAX_EPS {
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
                *s = !*s & 127;
            }
        }
        for k in 0..2 {
            let mut u = 0usize;
            for i in 0..8 {
                u |= (l[8 * k + i] as usize) << (2 * i);
            }
            // Not a grid point only for non-finite input (ggml aborts); index 0 stands in.
            let gi = g.map[u].max(0) as u16;
            q2[2 * ib + k] = gi | ((block_signs[k] as u16) << 9);
        }
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }

    y[..TS].fill(0);
    #[allow(clippy::float_cmp)]
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    y[0..2].copy_from_slice(&f32_to_fp16(d).to_le_bytes());
    let id = 1.0 / d;
    for ib in 0..QK_K / 16 {
        let li = 0.max(15.min(nearest_int(0.5 * (id * scales[ib] - 1.0)))) as u8;
        if ib % 2 == 0 {
            y[66 + ib / 2] = li;
        } else {
            y[66 + ib / 2] |= li << 4;
        }
    }
    for (i, w) in q2.iter().enumerate() {
        y[2 + 2 * i..4 + 2 * i].copy_from_slice(&w.to_le_bytes());
    }
}

/// `quantize_iq2_xs`: `quantize_row_iq2_xs_impl` row by row. The registry refuses a call
/// without an importance matrix ([`crate::Error::ImatrixRequired`]), as ggml asserts.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    quantize_qk_rows_imatrix(src, dst, n_per_row, TS, imatrix, quantize_block);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::iq_common::{rmse, test_rng};

    #[test]
    fn refuses_without_imatrix() {
        let e = Iq2Xs::TRAITS.quantize_to_vec(&[1.0; QK_K], QK_K, None).unwrap_err();
        assert!(matches!(e, crate::Error::ImatrixRequired { type_name: "iq2_xs" }), "{e}");
    }

    #[test]
    fn roundtrip_error_is_reasonable() {
        let mut r = test_rng(29);
        let n = 2 * QK_K;
        let x: Vec<f32> = (0..2 * n).map(|_| r()).collect();
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.1).collect();
        let q = Iq2Xs::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        let y = Iq2Xs::TRAITS.dequantize_to_vec(&q).unwrap();
        assert!(rmse(&x, &y) < 0.28, "{}", rmse(&x, &y));
    }

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        crate::util::write_f16(&mut b, 0, 2.0);
        let q: u16 = 1 | (1 << 9); // grid point 1, signs ksigns[1] = 0x81
        b[2..4].copy_from_slice(&q.to_le_bytes());
        b[66] = 0x21; // scales 1 (first 16) and 2 (last 16)
        let mut y = [0f32; QK_K];
        Iq2Xs::dequantize(&b, &mut y);
        let grid = IQ2XS_GRID[1].to_le_bytes();
        assert_eq!(y[0], -(2.0 * 1.5 * 0.25) * grid[0] as f32);
        assert_eq!(y[1], 2.0 * 1.5 * 0.25 * grid[1] as f32);
        assert_eq!(y[16], 2.0 * 2.5 * 0.25 * 8.0);
    }
}
