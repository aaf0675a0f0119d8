//! `GGML_TYPE_IQ2_XXS` (id 16): "true" 2-bit codes on the E8 lattice, super-blocks of 256
//! in groups of 8 taken from the 256-point grid [`IQ2XXS_GRID`] with even-parity signs
//! (2.0625 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq2_xxs`
//! (`to_float`) and `quantize_iq2_xxs` / `quantize_row_iq2_xxs_impl` (what
//! `ggml_quantize_chunk` calls; ggml requires an importance matrix and has no
//! `from_float_ref`).

use crate::registry::{GgmlType, QuantizeRowsFn};
use crate::types::iq_common::quantize_qk_rows_imatrix;
use crate::types::iq_grid::iq2xxs;
use crate::types::iq_tables::{IQ2XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS};
use crate::util::{c_max, f32_to_fp16, make_qp_quants, nearest_int, read_f16, GROUP_MAX_EPS};
use crate::QK_K;

/// ggml's `block_iq2_xxs` (66 bytes):
///
/// | offset | bytes | field | meaning                                                         |
/// |-------:|------:|-------|-----------------------------------------------------------------|
/// | 0      | 2     | `d`   | fp16 super-block scale                                          |
/// | 2      | 64    | `qs`  | per 32 weights two u32 LE: the first holds four grid indices (one byte per 8 weights); the second four 7-bit sign indices (bits `7l..`) and a 4-bit scale (bits 28..32) |
///
/// Weight `8l + j` of group `ib32` decodes to `d·(0.5 + s)·0.25·grid[j]·±1`.
#[repr(C)]
pub struct BlockIq2Xxs {
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
    /// Grid indices, signs and scales (`uint16_t qs[32]` in ggml).
    pub qs: [u8; QK_K / 4],
}

const _: () = assert!(std::mem::size_of::<BlockIq2Xxs>() == 2 + QK_K / 8 * 2);
pub(crate) const TS: usize = std::mem::size_of::<BlockIq2Xxs>();

/// Marker for `iq2_xxs`.
pub struct Iq2Xxs;

impl GgmlType for Iq2Xxs {
    const NAME: &'static str = "iq2_xxs";
    const ID: u32 = 16;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = TS;
    const REQUIRES_IMATRIX: bool = true;
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_iq2_xxs`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_K)) {
            let d = read_f16(b, 0);
            for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
                let q = &b[2 + 8 * ib32..2 + 8 * ib32 + 8];
                let aux1 = u32::from_le_bytes([q[4], q[5], q[6], q[7]]);
                let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
                for (l, y) in y.chunks_exact_mut(8).enumerate() {
                    let grid = IQ2XXS_GRID[q[l] as usize].to_le_bytes();
                    let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
                    for j in 0..8 {
                        y[j] = db * grid[j] as f32 * if signs & KMASK_IQ2XS[j] != 0 { -1.0 } else { 1.0 };
                    }
                }
            }
        }
    }
}

inventory::submit! { <Iq2Xxs as GgmlType>::TRAITS }

/// Splits the signs off 8 values the way the IQ2 quantizers do: `xval = |x|`, and when an
/// odd number is negative the one with the least `w·x²` keeps its sign flipped back (the
/// grids only carry even-parity signs). Returns the 7 stored sign bits.
#[inline]
pub(crate) fn even_signs(xb: &[f32], weight: &[f32], xval: &mut [f32]) -> u8 {
    let mut nflip = 0;
    let mut s = 0u8;
    for i in 0..8 {
        if xb[i] >= 0.0 {
            xval[i] = xb[i];
        } else {
            xval[i] = -xb[i];
            nflip += 1;
            s |= 1 << i;
        }
    }
    if nflip % 2 == 1 {
        let mut imin = 0;
        let mut min = weight[0] * xb[0] * xb[0];
        for i in 1..8 {
            let ax = weight[i] * xb[i] * xb[i];
            if ax < min {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s ^= 1 << imin;
    }
    s & 127
}

/// `quantize_row_iq2_xxs_impl` for one super-block; `qw` is its 256 importance weights.
fn quantize_block(xbl: &[f32], qw: &[f32], y: &mut [u8]) {
    const K_MAX_Q: i32 = 3;
    let g = iq2xxs();
    let mut scales = [0f32; QK_K / 32];
    let mut weight = [0f32; 32];
    let mut xval = [0f32; 32];
    let mut l = [0i8; 32];
    let mut waux = [0f32; 32];
    let mut block_signs = [0u8; 4];
    let mut q2 = [0u32; 2 * (QK_K / 32)];
    let mut lu = [0u8; 32];

    let mut max_scale = 0f32;
    let mut sumx2 = 0f32;
    for &v in xbl {
        sumx2 += v * v;
    }
    let sigma2 = sumx2 / QK_K as f32;

    for ib in 0..QK_K / 32 {
        let xb = &xbl[32 * ib..32 * ib + 32];
        let qwb = &qw[32 * ib..32 * ib + 32];
        for i in 0..32 {
            weight[i] = qwb[i] * (sigma2 + xb[i] * xb[i]).sqrt();
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
        if max < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            l.fill(0);
            continue;
        }
        let mut scale = make_qp_quants(32, K_MAX_Q + 1, &xval, &mut lu, &weight);
        for i in 0..32 {
            l[i] = lu[i] as i8;
        }
        let eff_max = scale * K_MAX_Q as f32;
        if eff_max <= 0.0 {
            scales[ib] = 0.0;
            l.fill(0);
            continue;
        }
        let mut on_grid = [true; 4];
        g.scan_scale(&xval, &weight, &waux, (K_MAX_Q, 2), (6, 0.1, eff_max), &mut scale, &mut l, &mut on_grid);
        if scale > 0.0 {
            let id = 1.0 / scale;
            for k in 0..4 {
                let mut u = 0usize;
                for i in 0..8 {
                    let li = nearest_int(0.5 * (id * xval[8 * k + i] - 1.0));
                    u |= (0.max((K_MAX_Q - 1).min(li)) as usize) << (2 * i);
                }
                let mut gi = g.map[u];
                if gi < 0 {
                    gi = g.find_best_neighbour(
                        gi,
                        &xval[8 * k..8 * k + 8],
                        &waux[8 * k..8 * k + 8],
                        scale,
                        &mut l[8 * k..8 * k + 8],
                    ) as i32;
                }
                let pg = &g.grid[gi as usize];
                for i in 0..8 {
                    l[8 * k + i] = (pg[i] - 1) / 2;
                }
            }
            let mut sumqx = 0f32;
            let mut sumq2 = 0f32;
            for i in 0..32 {
                let w = weight[i];
                let q = (2 * l[i] as i32 + 1) as f32;
                sumqx += w * xval[i] * q;
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        if scale < 0.0 {
            scale = -scale;
            for s in &mut block_signs {
                *s = !*s & 127;
            }
        }
        for k in 0..4 {
            let mut u = 0u16;
            for i in 0..8 {
                u |= ((l[8 * k + i] as i32) << (2 * i)) as u16;
            }
            // ggml aborts ("point not on grid") if this is not a grid point, which takes a
            // non-finite input; index 0 stands in here.
            let gi = g.map.get(u as usize).copied().unwrap_or(-1).max(0) as u32;
            q2[2 * ib] |= gi << (8 * k);
            q2[2 * ib + 1] |= (block_signs[k] as u32) << (7 * k);
        }
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }

    y[..TS].fill(0);
    #[allow(clippy::float_cmp)]
    if max_scale == 0.0 {
        y[0..2].copy_from_slice(&f32_to_fp16(0.0).to_le_bytes());
        return;
    }
    let d = max_scale / 31.0;
    y[0..2].copy_from_slice(&f32_to_fp16(d).to_le_bytes());
    let id = 1.0 / d;
    for ib in 0..QK_K / 32 {
        let li = nearest_int(0.5 * (id * scales[ib] - 1.0));
        q2[2 * ib + 1] |= (0.max(15.min(li)) as u32) << 28;
    }
    for (i, w) in q2.iter().enumerate() {
        y[2 + 4 * i..6 + 4 * i].copy_from_slice(&w.to_le_bytes());
    }
}

/// `quantize_iq2_xxs`: `quantize_row_iq2_xxs_impl` row by row. The registry refuses a
/// call without an importance matrix ([`crate::Error::ImatrixRequired`]), as ggml asserts.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    quantize_qk_rows_imatrix(src, dst, n_per_row, TS, imatrix, quantize_block);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::iq_common::{rmse, test_rng};

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        crate::util::write_f16(&mut b, 0, 1.0);
        b[2] = 1; // group 0: grid point 1 = (43, 8, 8, ...) little-endian
        let aux1: u32 = (3 << 28) | 1; // scale 3 → 3.5·0.25; signs of group 0: ksigns[1] = 0x81
        b[6..10].copy_from_slice(&aux1.to_le_bytes());
        let mut y = [0f32; QK_K];
        Iq2Xxs::dequantize(&b, &mut y);
        let db = 3.5 * 0.25;
        assert_eq!(y[0], -db * 43.0);
        assert_eq!(y[1], db * 8.0);
        assert_eq!(y[7], -db * 8.0);
        assert_eq!(y[8], db * 8.0);
    }

    #[test]
    fn refuses_without_imatrix() {
        let x = vec![0.5f32; QK_K];
        let e = Iq2Xxs::TRAITS.quantize_to_vec(&x, QK_K, None).unwrap_err();
        assert!(matches!(e, crate::Error::ImatrixRequired { type_name: "iq2_xxs" }), "{e}");
        assert!(e.to_string().contains("requires an importance matrix"));
    }

    #[test]
    fn roundtrip_error_is_reasonable() {
        let mut r = test_rng(23);
        let n = 2 * QK_K;
        let x: Vec<f32> = (0..2 * n).map(|_| r()).collect();
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.1).collect();
        let q = Iq2Xxs::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        let y = Iq2Xxs::TRAITS.dequantize_to_vec(&q).unwrap();
        // 2 bits on uniform data: well below the signal's rms (0.58).
        assert!(rmse(&x, &y) < 0.3, "{}", rmse(&x, &y));
        let z = Iq2Xxs::TRAITS.quantize_to_vec(&vec![0f32; n], n, Some(&im)).unwrap();
        assert!(z.iter().all(|&b| b == 0));
    }
}
