//! `GGML_TYPE_TQ2_0` (id 35): ternary weights, super-blocks of 256 values in
//! {-1, 0, 1}·d stored as 2-bit codes (2.0625 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_tq2_0`
//! (`to_float`), `quantize_row_tq2_0_ref` (`from_float_ref`: `d = amax`, codes
//! `lroundf(x/d) + 1`) and `quantize_tq2_0`, which `ggml_quantize_chunk` calls (the
//! reference quantizer; the importance matrix is ignored).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq_common::c_lroundf_i32;
use crate::util::{c_max, read_f16, write_f16};
use crate::QK_K;

/// ggml's `block_tq2_0` (66 bytes):
///
/// | offset | bytes | field | meaning                                                     |
/// |-------:|------:|-------|-------------------------------------------------------------|
/// | 0      | 64    | `qs`  | byte `32c + m`, bits `2l..`: code of weight `128c + 32l + m` |
/// | 64     | 2     | `d`   | fp16 scale                                                  |
///
/// A code `q` decodes to `(q - 1)·d` (code 3 gives `2d`, which ggml never writes).
#[repr(C)]
pub struct BlockTq2_0 {
    /// 2-bit codes.
    pub qs: [u8; QK_K / 4],
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockTq2_0>() == 2 + QK_K / 4);
const TS: usize = std::mem::size_of::<BlockTq2_0>();

/// Marker for `tq2_0`.
pub struct Tq2_0;

impl GgmlType for Tq2_0 {
    const NAME: &'static str = "tq2_0";
    const ID: u32 = 35;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_tq2_0`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_K)) {
            let d = read_f16(b, QK_K / 4);
            for (c, yc) in y.chunks_exact_mut(128).enumerate() {
                for (l, yl) in yc.chunks_exact_mut(32).enumerate() {
                    for (m, v) in yl.iter_mut().enumerate() {
                        let q = ((b[32 * c + m] >> (2 * l)) & 3) as i8;
                        *v = (q - 1) as f32 * d;
                    }
                }
            }
        }
    }
}

inventory::submit! { <Tq2_0 as GgmlType>::TRAITS }

/// `quantize_row_tq2_0_ref`.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(TS)) {
        let mut amax = 0f32;
        for &v in xb {
            amax = c_max(amax, v.abs());
        }
        let d = amax;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_f16(yb, QK_K / 4, d);
        for c in 0..2 {
            for m in 0..32 {
                let mut q: u8 = 0;
                for n in 0..4 {
                    let xi = c_lroundf_i32(xb[128 * c + m + n * 32] * id).wrapping_add(1);
                    q = q.wrapping_add(((xi & 3) << (2 * n)) as u8);
                }
                yb[32 * c + m] = q;
            }
        }
    }
}

/// `quantize_tq2_0`: the reference quantizer; ggml ignores the imatrix.
fn quantize_rows(src: &[f32], dst: &mut [u8], _n_per_row: usize, _imatrix: Option<&[f32]>) {
    quantize_ref(src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ternary_values_roundtrip_exactly() {
        let x: Vec<f32> = (0..2 * QK_K).map(|i| [0.25f32, 0.0, -0.25][(i * 5 + i / 7) % 3]).collect();
        let q = Tq2_0::TRAITS.quantize_to_vec(&x, 2 * QK_K, None).unwrap();
        let y = Tq2_0::TRAITS.dequantize_to_vec(&q).unwrap();
        assert_eq!(x, y);
    }

    #[test]
    fn decodes_code_three_as_two_d() {
        let mut b = [0u8; TS];
        write_f16(&mut b, QK_K / 4, 0.5);
        b[0] = 0b11_10_01_00;
        let mut y = [0f32; QK_K];
        Tq2_0::dequantize(&b, &mut y);
        assert_eq!((y[0], y[32], y[64], y[96]), (-0.5, 0.0, 0.5, 1.0));
    }
}
