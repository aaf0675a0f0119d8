//! `GGML_TYPE_IQ1_S` (id 19): 1.5-bit codes, groups of 8 weights from the 2048-point
//! ternary grid [`IQ1S_GRID`] shifted by ±1/8, 3-bit scales per 32 weights (1.5625 bits per
//! weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq1_s`
//! (`to_float`) and `quantize_iq1_s` / `quantize_row_iq1_s_impl` (what
//! `ggml_quantize_chunk` calls; ggml requires an importance matrix and has no
//! `from_float_ref`).

use crate::registry::{GgmlType, QuantizeRowsFn};
use crate::types::iq_common::{glibc_msort_pairs, quantize_qk_rows_imatrix, GROUP_MAX_EPS_IQ1_S};
use crate::types::iq_grid::{iq1s, IqGrid};
use crate::types::iq_tables::IQ1S_GRID;
use crate::util::{c_max, f32_to_fp16, nearest_int, read_f16};
use crate::QK_K;

/// `IQ1S_DELTA`: the shift of the ternary grid.
pub const IQ1S_DELTA: f32 = 0.125;

/// ggml's `block_iq1_s` (50 bytes):
///
/// | offset | bytes | field | meaning                                                         |
/// |-------:|------:|-------|-----------------------------------------------------------------|
/// | 0      | 2     | `d`   | fp16 super-block scale                                          |
/// | 2      | 32    | `qs`  | low 8 bits of the grid index of each group of 8 weights         |
/// | 34     | 16    | `qh`  | u16 LE per 32 weights: index bits 8..11 of group `l` at bits `3l..`, 3-bit scale at 12..15, delta sign at 15 |
#[repr(C)]
pub struct BlockIq1S {
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
    /// Grid index low bits.
    pub qs: [u8; QK_K / 8],
    /// Grid index high bits, scales and delta signs (`uint16_t qh[8]`).
    pub qh: [u8; QK_K / 16],
}

const _: () = assert!(std::mem::size_of::<BlockIq1S>() == 2 + QK_K / 8 + QK_K / 16);
pub(crate) const TS: usize = std::mem::size_of::<BlockIq1S>();

/// Marker for `iq1_s`.
pub struct Iq1S;

impl GgmlType for Iq1S {
    const NAME: &'static str = "iq1_s";
    const ID: u32 = 19;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = TS;
    const REQUIRES_IMATRIX: bool = true;
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_iq1_s`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_K)) {
            let d = read_f16(b, 0);
            for (ib, y) in y.chunks_exact_mut(32).enumerate() {
                let qh = u16::from_le_bytes([b[34 + 2 * ib], b[35 + 2 * ib]]);
                let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
                let delta = if qh & 0x8000 != 0 { -IQ1S_DELTA } else { IQ1S_DELTA };
                for (l, y) in y.chunks_exact_mut(8).enumerate() {
                    let idx = b[2 + 4 * ib + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
                    let grid = IQ1S_GRID[idx].to_le_bytes();
                    for j in 0..8 {
                        y[j] = dl * (grid[j] as i8 as f32 + delta);
                    }
                }
            }
        }
    }
}

inventory::submit! { <Iq1S as GgmlType>::TRAITS }

/// `iq1_find_best_neighbour2`: among the neighbours of a level vector that is off the grid,
/// the grid point whose levels (mapped through `xg`, the shifted ternary values) times
/// `scale` are nearest to `xval` under `weight`; falls back to the whole grid (with ggml's
/// indexing of `xval` by the grid index, a bug that only matters for non-finite input).
/// Writes the point's levels to `l`.
pub(crate) fn find_best_neighbour2(
    g: &IqGrid<8>,
    map_value: i32,
    xval: &[f32],
    weight: &[f32],
    scale: f32,
    xg: &[f32; 3],
    l: &mut [i8],
) -> usize {
    let mut best_score = f32::MAX;
    let mut grid_index = usize::MAX;
    for &j in g.neighbours_of(map_value) {
        let pg = &g.grid[j as usize];
        let mut d2 = 0f32;
        for i in 0..8 {
            let q = xg[((pg[i] - 1) / 2) as usize];
            let w = weight[i];
            let diff = scale * q - xval[i];
            d2 += w * diff * diff;
        }
        if d2 < best_score {
            best_score = d2;
            grid_index = j as usize;
        }
    }
    if grid_index == usize::MAX {
        for (i, gi) in g.grid.iter().enumerate() {
            let mut d2 = 0f32;
            for j in 0..8 {
                let w = weight[j];
                let q = xg[((gi[j] - 1) / 2) as usize];
                let diff = scale * q - xval.get(i).copied().unwrap_or(f32::NAN);
                d2 += w * diff * diff;
            }
            if d2 < best_score {
                best_score = d2;
                grid_index = i;
            }
        }
    }
    // ggml aborts when nothing was found (NaN input); grid point 0 stands in.
    if grid_index == usize::MAX {
        grid_index = 0;
    }
    let pg = &g.grid[grid_index];
    for i in 0..8 {
        l[i] = (pg[i] - 1) / 2;
    }
    grid_index
}

/// `quantize_row_iq1_s_impl` for one super-block; `qw` its importance weights.
fn quantize_block(xbl: &[f32], qw: &[f32], y: &mut [u8]) {
    const BS: usize = 32;
    let g = iq1s();
    let x_p = [-1.0 + IQ1S_DELTA, IQ1S_DELTA, 1.0 + IQ1S_DELTA];
    let x_m = [-1.0 - IQ1S_DELTA, -IQ1S_DELTA, 1.0 - IQ1S_DELTA];
    let mut scales = [0f32; QK_K / BS];
    let mut shifts = [0i8; QK_K / BS];
    let mut weight = [0f32; BS];
    let mut sumx = [0f32; BS + 1];
    let mut sumw = [0f32; BS + 1];
    let mut pairs = [(0f32, 0u8); BS];
    let mut l = [0i8; BS];
    let mut index = [0u16; BS / 8];

    y[..TS].fill(0);
    let mut max_scale = 0f32;
    let mut sumx2 = 0f32;
    for &v in xbl {
        sumx2 += v * v;
    }
    let sigma2 = 2.0 * sumx2 / QK_K as f32;

    for ib in 0..QK_K / BS {
        let xb = &xbl[BS * ib..BS * ib + BS];
        let qwb = &qw[BS * ib..BS * ib + BS];
        for i in 0..BS {
            weight[i] = qwb[i] * (sigma2 + xb[i] * xb[i]).sqrt();
        }
        let mut max = xb[0].abs();
        for &v in &xb[1..] {
            max = c_max(max, v.abs());
        }
        if max < GROUP_MAX_EPS_IQ1_S {
            scales[ib] = 0.0;
            shifts[ib] = 1;
            continue;
        }
        for (j, p) in pairs.iter_mut().enumerate() {
            *p = (xb[j], j as u8);
        }
        glibc_msort_pairs(&mut pairs);
        sumx[0] = 0.0;
        sumw[0] = 0.0;
        for j in 0..BS {
            let i = pairs[j].1 as usize;
            sumx[j + 1] = sumx[j] + weight[i] * xb[i];
            sumw[j + 1] = sumw[j] + weight[i];
        }
        let mut best_score = -f32::MAX;
        let mut scale = max;
        let (mut besti1, mut besti2, mut best_shift) = (-1i32, -1i32, 0i8);
        for i1 in 0..=BS {
            for i2 in i1..=BS {
                let (a, b, c) = (sumx[i1] - sumx[0], sumx[i2] - sumx[i1], sumx[BS] - sumx[i2]);
                let (wa, wb, wc) = (sumw[i1] - sumw[0], sumw[i2] - sumw[i1], sumw[BS] - sumw[i2]);
                let sumqx = a * x_p[0] + b * x_p[1] + c * x_p[2];
                let sumq2 = wa * x_p[0] * x_p[0] + wb * x_p[1] * x_p[1] + wc * x_p[2] * x_p[2];
                if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                    scale = sumqx / sumq2;
                    best_score = scale * sumqx;
                    (besti1, besti2, best_shift) = (i1 as i32, i2 as i32, 1);
                }
                let sumqx = a * x_m[0] + b * x_m[1] + c * x_m[2];
                let sumq2 = wa * x_m[0] * x_m[0] + wb * x_m[1] * x_m[1] + wc * x_m[2] * x_m[2];
                if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                    scale = sumqx / sumq2;
                    best_score = scale * sumqx;
                    (besti1, besti2, best_shift) = (i1 as i32, i2 as i32, -1);
                }
            }
        }
        if besti1 < 0 || besti2 < 0 || best_shift == 0 {
            scales[ib] = 0.0;
            shifts[ib] = 1;
            continue;
        }
        let (b1, b2) = (besti1 as usize, besti2 as usize);
        for (j, p) in pairs.iter().enumerate() {
            l[p.1 as usize] = if j < b1 {
                0
            } else if j < b2 {
                1
            } else {
                2
            };
        }
        if scale < 0.0 {
            for v in &mut l {
                *v = 2 - *v;
            }
            scale = -scale;
            best_shift = -best_shift;
        }
        let mut all_on_grid = true;
        let xx = if best_shift == 1 { &x_p } else { &x_m };
        for k in 0..BS / 8 {
            let mut u = 0usize;
            for j in 0..8 {
                u |= (l[8 * k + j] as usize) << (2 * j);
            }
            let m = g.map[u];
            index[k] = if m < 0 {
                all_on_grid = false;
                find_best_neighbour2(
                    g,
                    m,
                    &xb[8 * k..8 * k + 8],
                    &weight[8 * k..8 * k + 8],
                    scale,
                    xx,
                    &mut l[8 * k..8 * k + 8],
                ) as u16
            } else {
                m as u16
            };
        }
        if !all_on_grid {
            let mut sumqx = 0f32;
            let mut sumq2 = 0f32;
            for k in 0..BS / 8 {
                let pg = &g.grid[index[k] as usize];
                for j in 0..8 {
                    let w = weight[8 * k + j];
                    let q = xx[((pg[j] - 1) / 2) as usize];
                    sumqx += w * q * xb[8 * k + j];
                    sumq2 += w * q * q;
                }
            }
            if sumqx > 0.0 && sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        let mut h = 0u16;
        for k in 0..BS / 8 {
            y[2 + (BS / 8) * ib + k] = (index[k] & 255) as u8;
            h |= (index[k] >> 8) << (3 * k);
        }
        y[34 + 2 * ib..36 + 2 * ib].copy_from_slice(&h.to_le_bytes());
        scales[ib] = scale;
        shifts[ib] = best_shift;
        max_scale = c_max(max_scale, scale);
    }

    #[allow(clippy::float_cmp)]
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 15.0;
    y[0..2].copy_from_slice(&f32_to_fp16(d * 1.125).to_le_bytes());
    let id = 1.0 / d;
    for ib in 0..QK_K / BS {
        let mut li = 0.max(7.min(nearest_int(0.5 * (id * scales[ib] - 1.0))));
        if shifts[ib] == -1 {
            li |= 8;
        }
        let at = 34 + 2 * ib;
        let h = u16::from_le_bytes([y[at], y[at + 1]]) | ((li as u16) << 12);
        y[at..at + 2].copy_from_slice(&h.to_le_bytes());
    }
}

/// `quantize_iq1_s`: `quantize_row_iq1_s_impl` row by row. The registry refuses a call
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
        let e = Iq1S::TRAITS.quantize_to_vec(&[1.0; QK_K], QK_K, None).unwrap_err();
        assert!(matches!(e, crate::Error::ImatrixRequired { type_name: "iq1_s" }), "{e}");
    }

    #[test]
    fn roundtrip_error_is_reasonable() {
        let mut r = test_rng(43);
        let n = 2 * QK_K;
        let x: Vec<f32> = (0..2 * n).map(|_| r()).collect();
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.1).collect();
        let q = Iq1S::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        let y = Iq1S::TRAITS.dequantize_to_vec(&q).unwrap();
        // 1.56 bits on U(-1, 1) (rms 0.58).
        assert!(rmse(&x, &y) < 0.4, "{}", rmse(&x, &y));
    }

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        crate::util::write_f16(&mut b, 0, 0.5);
        b[2] = 5; // group 0: grid point 0x100 + 5
        let qh: u16 = 1 | (2 << 12) | 0x8000; // high bits 1, scale 2 → 0.5·5, delta −1/8
        b[34..36].copy_from_slice(&qh.to_le_bytes());
        let mut y = [0f32; QK_K];
        Iq1S::dequantize(&b, &mut y);
        let g = IQ1S_GRID[0x105].to_le_bytes();
        for j in 0..8 {
            assert_eq!(y[j], 2.5 * (g[j] as i8 as f32 - 0.125));
        }
    }
}
