//! `GGML_TYPE_IQ1_M` (id 29): 1.75-bit codes, groups of 8 weights from the ternary grid
//! [`IQ1S_GRID`] with a ±1/8 shift per group and 3-bit scales per 16 weights; the fp16
//! super-block scale is spread over the top nibbles of the scales (1.75 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq1_m`
//! (`to_float`) and `quantize_iq1_m` / `quantize_row_iq1_m_impl` (what
//! `ggml_quantize_chunk` calls; no `from_float_ref`).

use crate::registry::{GgmlType, QuantizeRowsFn};
use crate::types::iq_tables::IQ1S_GRID;
use crate::util::fp16_to_f32;
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
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = None;

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
