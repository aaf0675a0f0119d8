//! `GGML_TYPE_MXFP4` (id 39): OCP microscaling FP4, blocks of 32 E2M1 values sharing one
//! E8M0 (power of two) scale (4.25 bits per weight); gpt-oss ships its experts in it.
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_mxfp4`
//! (`to_float`), `quantize_row_mxfp4_ref` (`from_float_ref`: the exponent from
//! `floor(log2(amax)) - 2`, each value to its nearest code) and `quantize_mxfp4`, which
//! `ggml_quantize_chunk` calls (the reference quantizer; the importance matrix is ignored).
//! The codebook is ggml's doubled E2M1 table [`KVALUES_FP4`] with the scale halved
//! (`GGML_E8M0_TO_FP32_HALF`).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq_common::{best_index_fp4, e8m0_to_fp32_half};
use crate::types::iq_tables::KVALUES_FP4;
use crate::util::c_f32_to_i32;

/// Elements per block (`QK_MXFP4`).
pub const QK_MXFP4: usize = 32;

/// ggml's `block_mxfp4` (17 bytes):
///
/// | offset | bytes | field | meaning                                                   |
/// |-------:|------:|-------|-----------------------------------------------------------|
/// | 0      | 1     | `e`   | E8M0 exponent: scale `2^(e - 127)`                         |
/// | 1      | 16    | `qs`  | E2M1 codes: byte `j` holds weight `j` (low nibble) and `j + 16` (high) |
#[repr(C)]
pub struct BlockMxfp4 {
    /// E8M0 shared exponent.
    pub e: u8,
    /// 4-bit E2M1 codes.
    pub qs: [u8; QK_MXFP4 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockMxfp4>() == 1 + QK_MXFP4 / 2);
const TS: usize = std::mem::size_of::<BlockMxfp4>();

/// Marker for `mxfp4`.
pub struct Mxfp4;

impl GgmlType for Mxfp4 {
    const NAME: &'static str = "mxfp4";
    const ID: u32 = 39;
    const BLOCK_SIZE: usize = QK_MXFP4;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_mxfp4`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        let kv = &KVALUES_FP4;
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_MXFP4)) {
            let d = e8m0_to_fp32_half(b[0]);
            let (lo, hi) = y.split_at_mut(QK_MXFP4 / 2);
            for ((q, l), h) in b[1..].iter().zip(lo).zip(hi) {
                *l = kv[(q & 0xF) as usize] as f32 * d;
                *h = kv[(q >> 4) as usize] as f32 * d;
            }
        }
    }
}

inventory::submit! { <Mxfp4 as GgmlType>::TRAITS }

/// `quantize_row_mxfp4_ref`.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    let kv = &KVALUES_FP4;
    for (xb, yb) in x.chunks_exact(QK_MXFP4).zip(y.chunks_exact_mut(TS)) {
        let mut amax = 0f32;
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        // `(uint8_t)(floorf(log2f(amax)) - 2 + 127)`: glibc's log2f (Rust's f32::log2
        // calls it), then C's float -> uint8_t conversion (cvttss2si, low byte).
        let e = if amax > 0.0 { c_f32_to_i32(amax.log2().floor() - 2.0 + 127.0) as u8 } else { 0 };
        let d = e8m0_to_fp32_half(e);
        yb[0] = e;
        for j in 0..QK_MXFP4 / 2 {
            let x0 = best_index_fp4(kv, xb[j], d);
            let x1 = best_index_fp4(kv, xb[QK_MXFP4 / 2 + j], d);
            yb[1 + j] = x0 | (x1 << 4);
        }
    }
}

/// `quantize_mxfp4`: the reference quantizer; ggml ignores the imatrix.
fn quantize_rows(src: &[f32], dst: &mut [u8], _n_per_row: usize, _imatrix: Option<&[f32]>) {
    quantize_ref(src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::iq_common::{rmse, test_rng};

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        b[0] = 128; // scale 2, halved: 1
        b[1] = 0x9F; // low: code 15 (-12 → -6.0·2/2), high: code 9 (-1)
        b[2] = 0x07; // low: 12 → 12·1 = 12 (value 6.0 with scale 2)
        let mut y = [0f32; QK_MXFP4];
        Mxfp4::dequantize(&b, &mut y);
        assert_eq!((y[0], y[16], y[1], y[17]), (-12.0, -1.0, 12.0, 0.0));
    }

    #[test]
    fn roundtrip_error_is_bounded() {
        let mut r = test_rng(11);
        let x: Vec<f32> = (0..8 * QK_MXFP4).map(|_| r() * 5.0).collect();
        let q = Mxfp4::TRAITS.quantize_to_vec(&x, 4 * QK_MXFP4, None).unwrap();
        assert_eq!(q, Mxfp4::TRAITS.quantize_to_vec(&x, 4 * QK_MXFP4, Some(&[1.0; 4 * QK_MXFP4])).unwrap());
        let y = Mxfp4::TRAITS.dequantize_to_vec(&q).unwrap();
        assert!(rmse(&x, &y) < 0.5, "{}", rmse(&x, &y));
        let z = Mxfp4::TRAITS.quantize_to_vec(&[0.0; QK_MXFP4], QK_MXFP4, None).unwrap();
        assert!(z.iter().all(|&b| b == 0));
    }
}
