//! `GGML_TYPE_TQ1_0` (id 34): ternary weights (BitNet b1.58, TriLMs), super-blocks of 256
//! values in {-1, 0, 1}·d packed five trits per byte (1.6875 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_tq1_0`
//! (`to_float`), `quantize_row_tq1_0_ref` (`from_float_ref`: `d = amax`, trits
//! `lroundf(x/d)`, packed base 3 and scaled to a byte by ceiling division) and
//! `quantize_tq1_0`, which `ggml_quantize_chunk` calls (the reference quantizer; the
//! importance matrix is ignored).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq_common::c_lroundf_i32;
use crate::util::{c_max, read_f16, write_f16};
use crate::QK_K;

const QS: usize = (QK_K - 4 * QK_K / 64) / 5;
const QH: usize = QK_K / 64;

/// ggml's `block_tq1_0` (54 bytes):
///
/// | offset | bytes | field | meaning                                                       |
/// |-------:|------:|-------|---------------------------------------------------------------|
/// | 0      | 48    | `qs`  | 5 trits per byte: bytes 0..32 weights `32n + m` (n = 0..5), bytes 32..48 weights `160 + 16n + m` |
/// | 48     | 4     | `qh`  | 4 trits per byte: weights `240 + 4n + j` (n = 0..4)              |
/// | 52     | 2     | `d`   | fp16 scale                                                    |
///
/// Trit `n` of a byte `q` is `((q·3^n mod 256)·3) >> 8`, minus one.
#[repr(C)]
pub struct BlockTq1_0 {
    /// Five trits per byte.
    pub qs: [u8; QS],
    /// Four trits per byte.
    pub qh: [u8; QH],
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockTq1_0>() == 2 + QK_K / 64 + (QK_K - 4 * QK_K / 64) / 5);
const TS: usize = std::mem::size_of::<BlockTq1_0>();
const POW3: [u8; 6] = [1, 3, 9, 27, 81, 243];

/// Marker for `tq1_0`.
pub struct Tq1_0;

#[inline]
fn trit(q: u8, n: usize) -> f32 {
    let q = q.wrapping_mul(POW3[n]);
    let xi = ((q as u16 * 3) >> 8) as i16;
    (xi - 1) as f32
}

impl GgmlType for Tq1_0 {
    const NAME: &'static str = "tq1_0";
    const ID: u32 = 34;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_tq1_0`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_K)) {
            let d = read_f16(b, QS + QH);
            let mut k = 0;
            for (j0, w) in [(0usize, 32usize), (32, 16)] {
                for n in 0..5 {
                    for m in 0..w {
                        y[k] = trit(b[j0 + m], n) * d;
                        k += 1;
                    }
                }
            }
            for n in 0..4 {
                for j in 0..QH {
                    y[k] = trit(b[QS + j], n) * d;
                    k += 1;
                }
            }
        }
    }
}

inventory::submit! { <Tq1_0 as GgmlType>::TRAITS }

/// Packs trits (each `lroundf(x·id) + 1`) base 3, then `ceil(q·256 / 243)` as a byte.
#[inline]
fn pack(xs: impl Iterator<Item = f32>, id: f32, extra_shift: bool) -> u8 {
    let mut q: u8 = 0;
    for x in xs {
        let xi = c_lroundf_i32(x * id).wrapping_add(1);
        q = (q as i32 * 3) as u8;
        q = (q as i32).wrapping_add(xi) as u8;
    }
    if extra_shift {
        q = (q as i32 * 3) as u8;
    }
    ((q as u16 as i32 * 256 + (243 - 1)) / 243) as u8
}

/// `quantize_row_tq1_0_ref`.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(TS)) {
        let mut amax = 0f32;
        for &v in xb {
            amax = c_max(amax, v.abs());
        }
        let d = amax;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_f16(yb, QS + QH, d);
        let mut off = 0;
        for m in 0..32 {
            yb[m] = pack((0..5).map(|n| xb[m + n * 32]), id, false);
        }
        off += 5 * 32;
        for m in 0..16 {
            yb[32 + m] = pack((0..5).map(|n| xb[off + m + n * 16]), id, false);
        }
        off += 5 * 16;
        for j in 0..QH {
            yb[QS + j] = pack((0..4).map(|m| xb[off + j + m * QH]), id, true);
        }
    }
}

/// `quantize_tq1_0`: the reference quantizer; ggml ignores the imatrix.
fn quantize_rows(src: &[f32], dst: &mut [u8], _n_per_row: usize, _imatrix: Option<&[f32]>) {
    quantize_ref(src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ternary_values_roundtrip_exactly() {
        // Values already on the ternary lattice {-1, 0, 1}·0.5 come back unchanged.
        let x: Vec<f32> = (0..2 * QK_K).map(|i| [0.5f32, 0.0, -0.5][(i * 7 + i / 3) % 3]).collect();
        let q = Tq1_0::TRAITS.quantize_to_vec(&x, QK_K, None).unwrap();
        assert_eq!(q, Tq1_0::TRAITS.quantize_to_vec(&x, QK_K, Some(&[1.0; QK_K])).unwrap());
        let y = Tq1_0::TRAITS.dequantize_to_vec(&q).unwrap();
        assert_eq!(x, y);
    }

    #[test]
    fn every_byte_decodes_to_trits() {
        let mut b = vec![0u8; TS];
        write_f16(&mut b, QS + QH, 1.0);
        for v in 0..=255u8 {
            b[..QS + QH].fill(v);
            let mut y = [0f32; QK_K];
            Tq1_0::dequantize(&b, &mut y);
            assert!(y.iter().all(|&t| t == -1.0 || t == 0.0 || t == 1.0));
        }
    }
}
