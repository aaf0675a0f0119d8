//! `GGML_TYPE_IQ1_M` (id 29): 1.75-bit codes, groups of 8 weights from the ternary grid
//! [`IQ1S_GRID`] with a ±1/8 shift per group and 3-bit scales per 16 weights; the fp16
//! super-block scale is spread over the top nibbles of the scales (1.75 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq1_m`
//! (`to_float`) and `quantize_iq1_m` / `quantize_row_iq1_m_impl` (what
//! `ggml_quantize_chunk` calls; no `from_float_ref`).

use crate::registry::{GgmlType, QuantizeRowsFn};
use crate::types::iq1_s::find_best_neighbour2;
use crate::types::iq_common::{glibc_msort_pairs, quantize_qk_rows, GROUP_MAX_EPS_IQ1_M};
use crate::types::iq_grid::iq1s;
use crate::types::iq_tables::IQ1S_GRID;
use crate::util::{c_max, f32_to_fp16, fp16_to_f32, nearest_int};
use crate::QK_K;

/// `IQ1M_DELTA`: the shift of the ternary grid.
pub const IQ1M_DELTA: f32 = 0.125;

/// ggml's `block_iq1_m` (56 bytes):
///
/// | offset | bytes | field    | meaning                                                     |
/// |-------:|------:|----------|-------------------------------------------------------------|
/// | 0      | 32    | `qs`     | low 8 bits of the grid index of each group of 8 weights     |
/// | 32     | 16    | `qh`     | per 2 groups: index bits 8..11 (bits 0..3 / 4..7) and delta sign (bit 3 / 7) |
/// | 48     | 8     | `scales` | u16 LE per 64 weights: four 3-bit scales (bits `3k..`), bits 12..16 one nibble of the fp16 super-block scale |
#[repr(C)]
pub struct BlockIq1M {
    /// Grid index low bits.
    pub qs: [u8; QK_K / 8],
    /// Grid index high bits and delta signs.
    pub qh: [u8; QK_K / 16],
    /// 3-bit scales and the super-block scale's nibbles.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIq1M>() == QK_K / 8 + QK_K / 16 + QK_K / 32);
pub(crate) const TS: usize = std::mem::size_of::<BlockIq1M>();

/// Marker for `iq1_m`.
pub struct Iq1M;

impl GgmlType for Iq1M {
    const NAME: &'static str = "iq1_m";
    const ID: u32 = 29;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_iq1_m`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_K)) {
            let sc: [u16; 4] = std::array::from_fn(|k| u16::from_le_bytes([b[48 + 2 * k], b[49 + 2 * k]]));
            let scale = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
            let d = fp16_to_f32(scale);
            for (ib, y) in y.chunks_exact_mut(32).enumerate() {
                let s = sc[ib / 2] >> (6 * (ib % 2));
                let dl1 = d * (2 * (s & 0x7) + 1) as f32;
                let dl2 = d * (2 * ((s >> 3) & 0x7) + 1) as f32;
                let qs = &b[4 * ib..4 * ib + 4];
                let qh = &b[32 + 2 * ib..32 + 2 * ib + 2];
                let idx = [
                    qs[0] as usize | ((qh[0] as usize) << 8 & 0x700),
                    qs[1] as usize | ((qh[0] as usize) << 4 & 0x700),
                    qs[2] as usize | ((qh[1] as usize) << 8 & 0x700),
                    qs[3] as usize | ((qh[1] as usize) << 4 & 0x700),
                ];
                let delta = [
                    if qh[0] & 0x08 != 0 { -IQ1M_DELTA } else { IQ1M_DELTA },
                    if qh[0] & 0x80 != 0 { -IQ1M_DELTA } else { IQ1M_DELTA },
                    if qh[1] & 0x08 != 0 { -IQ1M_DELTA } else { IQ1M_DELTA },
                    if qh[1] & 0x80 != 0 { -IQ1M_DELTA } else { IQ1M_DELTA },
                ];
                for (l, y) in y.chunks_exact_mut(8).enumerate() {
                    let dl = if l < 2 { dl1 } else { dl2 };
                    let grid = IQ1S_GRID[idx[l]].to_le_bytes();
                    for j in 0..8 {
                        y[j] = dl * (grid[j] as i8 as f32 + delta[l]);
                    }
                }
            }
        }
    }
}

inventory::submit! { <Iq1M as GgmlType>::TRAITS }

fn fill_weights(xb: &[f32], qw: Option<&[f32]>, sigma2: f32, weight: &mut [f32]) {
    match qw {
        Some(qw) => {
            for i in 0..xb.len() {
                weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
            }
        }
        None => {
            for i in 0..xb.len() {
                weight[i] = xb[i] * xb[i];
            }
        }
    }
}

/// `quantize_row_iq1_m_impl` for one super-block; `qw` its importance weights (or none:
/// weights `x²`).
fn quantize_block(xbl: &[f32], qw: Option<&[f32]>, y: &mut [u8]) {
    const BS: usize = 16;
    const OFF_QH: usize = 32;
    const OFF_SC: usize = 48;
    let g = iq1s();
    let x_p = [-1.0 + IQ1M_DELTA, IQ1M_DELTA, 1.0 + IQ1M_DELTA];
    let x_m = [-1.0 - IQ1M_DELTA, -IQ1M_DELTA, 1.0 - IQ1M_DELTA];
    let masks: [u8; 4] = [0x00, 0x80, 0x08, 0x88];
    // The shifted ternary values of group `k` (0 or 1) under sign choice `best_k`.
    let xx_for = |k: usize, best_k: i32| -> &[f32; 3] {
        let plus = if k == 0 { best_k < 2 } else { best_k % 2 == 0 };
        if plus {
            &x_p
        } else {
            &x_m
        }
    };
    let mut scales = [0f32; QK_K / BS];
    let mut shifts = [0i32; QK_K / BS];
    let mut weight = [0f32; BS];
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
    let qw_of = |ib: usize| qw.map(|w| &w[BS * ib..BS * ib + BS]);

    for ib in 0..QK_K / BS {
        let xb = &xbl[BS * ib..BS * ib + BS];
        fill_weights(xb, qw_of(ib), sigma2, &mut weight);
        let mut max = xb[0].abs();
        for &v in &xb[1..] {
            max = c_max(max, v.abs());
        }
        if max < GROUP_MAX_EPS_IQ1_M {
            scales[ib] = 0.0;
            shifts[ib] = 0;
            continue;
        }
        for (j, p) in pairs.iter_mut().enumerate() {
            *p = (xb[j], j as u8);
        }
        glibc_msort_pairs(&mut pairs);
        let mut best_score = -f32::MAX;
        let mut scale = max;
        let (mut besti1, mut besti2, mut best_k) = (-1i32, -1i32, -1i32);
        {
            let mut px = [[0f32; BS + 1]; 2];
            let mut pw = [[0f32; BS + 1]; 2];
            for j in 0..BS {
                let i = pairs[j].1 as usize;
                let h = if i < BS / 2 { 0 } else { 1 };
                px[h][j + 1] = px[h][j] + weight[i] * xb[i];
                px[1 - h][j + 1] = px[1 - h][j];
                pw[h][j + 1] = pw[h][j] + weight[i];
                pw[1 - h][j + 1] = pw[1 - h][j];
            }
            let txs = [px[0][BS], px[1][BS]];
            let tws = [pw[0][BS], pw[1][BS]];
            let (p2, m2) = (x_p[2], x_m[2]);
            let cp1 = x_p[0] * x_p[0] - x_p[1] * x_p[1];
            let cp2 = x_p[1] * x_p[1] - x_p[2] * x_p[2];
            let cm1 = x_m[0] * x_m[0] - x_m[1] * x_m[1];
            let cm2 = x_m[1] * x_m[1] - x_m[2] * x_m[2];
            for i1 in 0..=BS {
                for i2 in i1..=BS {
                    let mut qx_p = [0f32; 2];
                    let mut qx_m = [0f32; 2];
                    let mut q2_p = [0f32; 2];
                    let mut q2_m = [0f32; 2];
                    for h in 0..2 {
                        let sx = px[h][i1] + px[h][i2];
                        qx_p[h] = txs[h] * p2 - sx;
                        qx_m[h] = txs[h] * m2 - sx;
                        q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                        q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
                    }
                    let sumqx = [qx_p[0] + qx_p[1], qx_p[0] + qx_m[1], qx_m[0] + qx_p[1], qx_m[0] + qx_m[1]];
                    let sumq2 = [q2_p[0] + q2_p[1], q2_p[0] + q2_m[1], q2_m[0] + q2_p[1], q2_m[0] + q2_m[1]];
                    for k in 0..4 {
                        if sumq2[k] > 0.0 && sumqx[k] * sumqx[k] > best_score * sumq2[k] {
                            scale = sumqx[k] / sumq2[k];
                            best_score = scale * sumqx[k];
                            (besti1, besti2, best_k) = (i1 as i32, i2 as i32, k as i32);
                        }
                    }
                }
            }
        }
        if besti1 < 0 || besti2 < 0 || best_k < 0 {
            scales[ib] = 0.0;
            shifts[ib] = 0;
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
            best_k = 3 - best_k;
        }
        let mut all_on_grid = true;
        for k in 0..BS / 8 {
            let xx = xx_for(k, best_k);
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
            let mut sumqx_f = 0f32;
            let mut sumq2_f = 0f32;
            for k in 0..BS / 8 {
                let xx = xx_for(k, best_k);
                let pg = &g.grid[index[k] as usize];
                for j in 0..8 {
                    let w = weight[8 * k + j];
                    let q = xx[((pg[j] - 1) / 2) as usize];
                    sumqx_f += w * q * xb[8 * k + j];
                    sumq2_f += w * q * q;
                }
            }
            if sumqx_f > 0.0 && sumq2_f > 0.0 {
                scale = sumqx_f / sumq2_f;
            }
        }
        y[2 * ib] = (index[0] & 255) as u8;
        y[2 * ib + 1] = (index[1] & 255) as u8;
        y[OFF_QH + ib] = ((index[0] >> 8) | ((index[1] >> 8) << 4)) as u8;
        scales[ib] = scale;
        shifts[ib] = best_k;
        max_scale = c_max(max_scale, scale);
    }

    #[allow(clippy::float_cmp)]
    if max_scale == 0.0 {
        return;
    }
    let mut sc = [0u16; 4];
    let mut d = max_scale / 15.0;
    let id = 1.0 / d;
    let mut sumqx_f = 0f32;
    let mut sumq2_f = 0f32;
    for ib in 0..QK_K / BS {
        let li = 0.max(7.min(nearest_int(0.5 * (id * scales[ib] - 1.0))));
        sc[ib / 4] |= (li << (3 * (ib % 4))) as u16;
        y[OFF_QH + ib] |= masks[shifts[ib] as usize];
        let xb = &xbl[BS * ib..BS * ib + BS];
        fill_weights(xb, qw_of(ib), sigma2, &mut weight);
        let qh = y[OFF_QH + ib] as usize;
        for k in 0..BS / 8 {
            let xx = xx_for(k, shifts[ib]);
            let gi = y[2 * ib + k] as usize + ((qh << (8 - 4 * k)) & 0x700);
            let pg = &g.grid[gi];
            for j in 0..8 {
                let w = weight[8 * k + j];
                let q = xx[((pg[j] - 1) / 2) as usize] * (2 * li + 1) as f32;
                sumqx_f += w * q * xb[8 * k + j];
                sumq2_f += w * q * q;
            }
        }
    }
    if sumq2_f > 0.0 {
        d = sumqx_f / sumq2_f;
    }
    let s = f32_to_fp16(d * 1.1125);
    sc[0] |= (s & 0x000f) << 12;
    sc[1] |= (s & 0x00f0) << 8;
    sc[2] |= (s & 0x0f00) << 4;
    sc[3] |= s & 0xf000;
    for (k, v) in sc.iter().enumerate() {
        y[OFF_SC + 2 * k..OFF_SC + 2 * k + 2].copy_from_slice(&v.to_le_bytes());
    }
}

/// `quantize_iq1_m`: `quantize_row_iq1_m_impl` row by row, with the importance matrix when
/// given, else weights `x²` (ggml does not require one for IQ1_M).
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    quantize_qk_rows(src, dst, n_per_row, TS, imatrix, quantize_block);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::iq_common::{rmse, test_rng};

    #[test]
    fn roundtrip_error_is_reasonable() {
        let mut r = test_rng(47);
        let n = 2 * QK_K;
        let x: Vec<f32> = (0..2 * n).map(|_| r()).collect();
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.1).collect();
        for w in [None, Some(&im[..])] {
            let q = Iq1M::TRAITS.quantize_to_vec(&x, n, w).unwrap();
            let y = Iq1M::TRAITS.dequantize_to_vec(&q).unwrap();
            assert!(rmse(&x, &y) < 0.4, "{}", rmse(&x, &y));
        }
    }

    #[test]
    fn decodes_super_block_scale_from_nibbles() {
        let mut b = [0u8; TS];
        let s = crate::util::f32_to_fp16(0.25);
        let sc: [u16; 4] = [(s & 0xf) << 12, (s & 0xf0) << 8, (s & 0xf00) << 4 | 3, s & 0xf000];
        for (k, v) in sc.iter().enumerate() {
            b[48 + 2 * k..50 + 2 * k].copy_from_slice(&v.to_le_bytes());
        }
        b[4 * 4] = 9; // sub-block 8 (first 16 of scales word 2): group 0 → grid point 9
        b[32 + 8] = 0x08; // its delta negative
        let mut y = [0f32; QK_K];
        Iq1M::dequantize(&b, &mut y);
        let g = IQ1S_GRID[9].to_le_bytes();
        // sub-block 8: scale 3 → 0.25·7
        for j in 0..8 {
            assert_eq!(y[128 + j], 1.75 * (g[j] as i8 as f32 - 0.125));
        }
    }
}
