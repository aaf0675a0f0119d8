//! `GGML_TYPE_IQ4_XS` (id 23): IQ4_NL's non-linear codebook in super-blocks of 256 with
//! 6-bit sub-block scales (4.25 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq4_xs`
//! (`to_float`), `quantize_iq4_xs` (what `ggml_quantize_chunk` calls) and
//! `quantize_row_iq4_xs_ref` (`from_float_ref`, the same without an imatrix), through the
//! shared `quantize_row_iq4_nl_impl` (`quantize_nl_impl` in [`super::iq4_nl`]).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq4_nl::{quantize_nl_impl, XsScales};
use crate::types::iq_tables::KVALUES_IQ4NL;
use crate::util::read_f16;
use crate::QK_K;

/// ggml's `block_iq4_xs` (136 bytes):
///
/// | offset | bytes | field      | meaning                                                  |
/// |-------:|------:|------------|----------------------------------------------------------|
/// | 0      | 2     | `d`        | fp16 super-block scale                                   |
/// | 2      | 2     | `scales_h` | u16 LE: bits `2ib..2ib+2` are the high bits of scale `ib` |
/// | 4      | 4     | `scales_l` | low 4 bits of scale `ib` in nibble `ib % 2` of byte `ib / 2` |
/// | 8      | 128   | `qs`       | sub-block `ib`: byte `16ib + j` holds weights `32ib + j` (low) and `32ib + 16 + j` (high) |
///
/// Weight `32ib + k` decodes to `d·(ls - 32)·kvalues_iq4nl[q]` with the 6-bit `ls`.
#[repr(C)]
pub struct BlockIq4Xs {
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
    /// High 2 bits of the 8 sub-block scales (u16 LE).
    pub scales_h: [u8; 2],
    /// Low 4 bits of the sub-block scales.
    pub scales_l: [u8; QK_K / 64],
    /// 4-bit codes.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == 2 + 2 + QK_K / 64 + QK_K / 2);
const TS: usize = std::mem::size_of::<BlockIq4Xs>();

/// Marker for `iq4_xs`.
pub struct Iq4Xs;

impl GgmlType for Iq4Xs {
    const NAME: &'static str = "iq4_xs";
    const ID: u32 = 23;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_iq4_xs`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        let kv = &KVALUES_IQ4NL;
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_K)) {
            let d = read_f16(b, 0);
            let scales_h = u16::from_le_bytes([b[2], b[3]]);
            for (ib, yb) in y.chunks_exact_mut(32).enumerate() {
                let ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) as i32 | (((scales_h >> (2 * ib)) & 3) << 4) as i32;
                let dl = d * (ls - 32) as f32;
                let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
                let (lo, hi) = yb.split_at_mut(16);
                for ((q, l), h) in qs.iter().zip(lo).zip(hi) {
                    *l = dl * kv[(q & 0xf) as usize] as f32;
                    *h = dl * kv[(q >> 4) as usize] as f32;
                }
            }
        }
    }
}

inventory::submit! { <Iq4Xs as GgmlType>::TRAITS }

fn encode_block(x: &[f32], y: &mut [u8], l: &mut [u8; QK_K], qw: Option<&[f32]>) {
    let mut scales = [0f32; QK_K / 32];
    let (d, rest) = y.split_at_mut(2);
    let (sh, rest) = rest.split_at_mut(2);
    let (sl, qs) = rest.split_at_mut(QK_K / 64);
    let mut scales_h = 0u16;
    let dh = quantize_nl_impl(x, qs, Some(XsScales { scales_h: &mut scales_h, scales_l: sl }), &mut scales, l, qw, 7);
    d.copy_from_slice(&dh.to_le_bytes());
    sh.copy_from_slice(&scales_h.to_le_bytes());
}

/// `quantize_iq4_xs`: `quantize_row_iq4_nl_impl(QK_K, 32, ..., ntry = 7)` per super-block.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    let mut l = [0u8; QK_K];
    let row_bytes = n_per_row / QK_K * TS;
    for (xr, yr) in src.chunks_exact(n_per_row).zip(dst.chunks_exact_mut(row_bytes)) {
        for (ib, (xb, yb)) in xr.chunks_exact(QK_K).zip(yr.chunks_exact_mut(TS)).enumerate() {
            let qw = imatrix.map(|w| &w[ib * QK_K..(ib + 1) * QK_K]);
            encode_block(xb, yb, &mut l, qw);
        }
    }
}

/// `quantize_row_iq4_xs_ref`: `quantize_iq4_xs` on one row, no imatrix.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    quantize_rows(x, y, x.len(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::iq_common::{rmse, test_rng};

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        crate::util::write_f16(&mut b, 0, 0.25);
        b[2] = 0b0000_0110; // scales_h: ib0 high = 2, ib1 high = 1
        b[4] = 0x0F | (0x3 << 4); // ib0 low = 15, ib1 low = 3 → ls0 = 47, ls1 = 19 (dl = 3.75, -3.25)
        b[8] = 0x8F; // weight 0: code 15 (113), weight 16: code 8 (1)
        b[8 + 16] = 0x01; // weight 32: code 1 (-104)
        let mut y = [0f32; QK_K];
        Iq4Xs::dequantize(&b, &mut y);
        assert_eq!(y[0], 0.25 * 15.0 * 113.0);
        assert_eq!(y[16], 0.25 * 15.0);
        assert_eq!(y[32], 0.25 * -13.0 * -104.0);
    }

    #[test]
    fn roundtrip_error_is_small() {
        let mut r = test_rng(19);
        let n = 2 * QK_K;
        let x: Vec<f32> = (0..2 * n).map(|_| r()).collect();
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.1).collect();
        for w in [None, Some(&im[..])] {
            let q = Iq4Xs::TRAITS.quantize_to_vec(&x, n, w).unwrap();
            let y = Iq4Xs::TRAITS.dequantize_to_vec(&q).unwrap();
            assert!(rmse(&x, &y) < 0.07, "{}", rmse(&x, &y));
        }
        let z = Iq4Xs::TRAITS.quantize_to_vec(&vec![0f32; QK_K], QK_K, None).unwrap();
        let y = Iq4Xs::TRAITS.dequantize_to_vec(&z).unwrap();
        assert!(y.iter().all(|&v| v == 0.0));
    }
}
