//! `GGML_TYPE_IQ1_S` (id 19): 1.5-bit codes, groups of 8 weights from the 2048-point
//! ternary grid [`IQ1S_GRID`] shifted by ±1/8, 3-bit scales per 32 weights (1.5625 bits per
//! weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq1_s`
//! (`to_float`) and `quantize_iq1_s` / `quantize_row_iq1_s_impl` (what
//! `ggml_quantize_chunk` calls; ggml requires an importance matrix and has no
//! `from_float_ref`).

use crate::registry::{GgmlType, QuantizeRowsFn};
use crate::types::iq_tables::IQ1S_GRID;
use crate::util::read_f16;
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
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = None;

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
