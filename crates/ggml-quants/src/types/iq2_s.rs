//! `GGML_TYPE_IQ2_S` (id 22): 2-bit E8-lattice codes from the 1024-point grid
//! [`IQ2S_GRID`] with free signs and 4-bit scales per 16 weights (2.5625 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq2_s`
//! (`to_float`), `quantize_iq2_s` / `quantize_row_iq2_s_impl` (what `ggml_quantize_chunk`
//! calls) and `quantize_row_iq2_s_ref` (`from_float_ref`: the same without an imatrix).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq_tables::{IQ2S_GRID, KMASK_IQ2XS};
use crate::util::read_f16;
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
    const QUANTIZE_REF: Option<QuantizeRefFn> = None;
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = None;

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
