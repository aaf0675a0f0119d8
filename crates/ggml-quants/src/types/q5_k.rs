//! `GGML_TYPE_Q5_K` (id 13): 5-bit K-quant, super-blocks of 256 weights in 8 sub-blocks
//! of 32, each sub-block `x = d·sc·q − dmin·m` with 6-bit `sc`/`m` (5.5 bits per weight).
//!
//! Ports of ggml (llama.cpp commit `0c1e57098`, `ggml/src/ggml-quants.c`):
//! - `dequantize_row_q5_K` → [`Q5K::dequantize`] (`type_traits[GGML_TYPE_Q5_K].to_float`);
//! - `quantize_row_q5_K_ref` → [`quantize_ref`] (`from_float_ref`), with its
//!   `make_qkx2_quants` scale/min search ([`crate::util::make_qkx2_quants`]);
//! - `quantize_q5_K` → [`quantize_rows`], as `ggml_quantize_chunk` calls it: the reference
//!   quantizer without an importance matrix, `quantize_row_q5_K_impl` (`make_qkx3_quants`
//!   per sub-block, `make_qp_quants` for the 6-bit scales) row by row with one.
//!
//! The scale search is Q4_K's ([`super::q4_k`]) with `nmax = 31`, its own search grid and
//! Q5_K's extra `MIN(63, ·)` on the imatrix path.

use std::mem::{offset_of, size_of};

use super::q4_k::{impl_scales, ref_scales, KHeader, K_SCALE_SIZE};
use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::util::{get_scale_min_k4, read_f16};
use crate::QK_K;

/// ggml's `block_q5_K` (`ggml/src/ggml-common.h`), 176 bytes, no padding:
///
/// | offset | size | field                                                        |
/// |-------:|-----:|--------------------------------------------------------------|
/// | 0      | 2    | `d`: fp16 super-block scale of the 6-bit scales              |
/// | 2      | 2    | `dmin`: fp16 super-block scale of the 6-bit mins             |
/// | 4      | 12   | `scales`: 8 (scale, min) pairs, 6 bits each ([`get_scale_min_k4`]) |
/// | 16     | 32   | `qh`: fifth bits; bit `2c` of byte `l` belongs to weight `64c + l`, bit `2c + 1` to `64c + 32 + l` |
/// | 48     | 128  | `qs`: low 4 bits; byte `32c + l` holds weight `64c + l` (low nibble) and `64c + 32 + l` (high) |
///
/// Documents the layout; blocks are parsed from unaligned bytes through the offsets
/// below, never by casting.
#[repr(C)]
pub struct BlockQ5K {
    /// fp16 (little-endian) scale of the sub-block scales.
    pub d: [u8; 2],
    /// fp16 (little-endian) scale of the sub-block mins.
    pub dmin: [u8; 2],
    /// Packed 6-bit scales and mins.
    pub scales: [u8; K_SCALE_SIZE],
    /// High (fifth) bits of the quants.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits of the quants, two per byte.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockQ5K>() == 2 * 2 + K_SCALE_SIZE + QK_K / 2 + QK_K / 8);
const _: () = assert!(size_of::<BlockQ5K>() == 176);

const OFF_D: usize = offset_of!(BlockQ5K, d);
const OFF_DMIN: usize = offset_of!(BlockQ5K, dmin);
const OFF_SCALES: usize = offset_of!(BlockQ5K, scales);
const OFF_QH: usize = offset_of!(BlockQ5K, qh);
const OFF_QS: usize = offset_of!(BlockQ5K, qs);
const BLOCK_BYTES: usize = size_of::<BlockQ5K>();

/// Marker for `q5_K`.
pub struct Q5K;

impl GgmlType for Q5K {
    const NAME: &'static str = "q5_K";
    const ID: u32 = 13;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = BLOCK_BYTES;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_q5_K`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(BLOCK_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
            let d = read_f16(b, OFF_D);
            let min = read_f16(b, OFF_DMIN);
            let scales: &[u8; K_SCALE_SIZE] = b[OFF_SCALES..OFF_SCALES + K_SCALE_SIZE].try_into().unwrap();
            let qh: &[u8; QK_K / 8] = b[OFF_QH..OFF_QH + QK_K / 8].try_into().unwrap();
            for (c, (ql, y)) in b[OFF_QS..OFF_QS + QK_K / 2].chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
                let (sc, m) = get_scale_min_k4(2 * c, scales);
                let (d1, m1) = (d * sc as f32, min * m as f32);
                let (sc, m) = get_scale_min_k4(2 * c + 1, scales);
                let (d2, m2) = (d * sc as f32, min * m as f32);
                let ql: &[u8; 32] = ql.try_into().unwrap();
                let (lo, hi) = y.split_at_mut(32);
                let (s1, s2) = (2 * c as u32, 2 * c as u32 + 1);
                for ((y, &q), &h) in lo.iter_mut().zip(ql).zip(qh) {
                    *y = d1 * ((q & 0xF) + (((h >> s1) & 1) << 4)) as f32 - m1;
                }
                for ((y, &q), &h) in hi.iter_mut().zip(ql).zip(qh) {
                    *y = d2 * ((q >> 4) + (((h >> s2) & 1) << 4)) as f32 - m2;
                }
            }
        }
    }
}

inventory::submit! { <Q5K as GgmlType>::TRAITS }

/// `quantize_row_q5_K_ref`: encodes whole super-blocks of `src` into `dst`.
pub fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK_K];
    for (x, y) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BLOCK_BYTES)) {
        let x: &[f32; QK_K] = x.try_into().unwrap();
        let h = ref_scales(x, 31, -0.5, 15, &mut l);
        write_block(&h, &l, y);
    }
}

/// `quantize_q5_K(src, dst, nrow, n_per_row, imatrix)`: without `imatrix` the reference
/// quantizer over all of `src`, with it `quantize_row_q5_K_impl` row by row.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    let Some(qw) = imatrix else {
        return quantize_ref(src, dst);
    };
    let row_bytes = n_per_row / QK_K * BLOCK_BYTES;
    let mut l = [0u8; QK_K];
    for (xr, yr) in src.chunks_exact(n_per_row).zip(dst.chunks_exact_mut(row_bytes)) {
        for ((x, w), y) in xr.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(yr.chunks_exact_mut(BLOCK_BYTES)) {
            let h = impl_scales(x.try_into().unwrap(), w.try_into().unwrap(), 31, true, &mut l);
            write_block(&h, &l, y);
        }
    }
}

/// Writes the header and splits the 5-bit codes `l` (each `<= 31`) into `qs` and `qh`.
fn write_block(h: &KHeader, l: &[u8; QK_K], y: &mut [u8]) {
    y[OFF_D..OFF_D + 2].copy_from_slice(&h.d.to_le_bytes());
    y[OFF_DMIN..OFF_DMIN + 2].copy_from_slice(&h.dmin.to_le_bytes());
    y[OFF_SCALES..OFF_SCALES + K_SCALE_SIZE].copy_from_slice(&h.scales);
    let mut qh = [0u8; QK_K / 8];
    let (mut m1, mut m2) = (1u8, 2u8);
    for (ql, l) in y[OFF_QS..OFF_QS + QK_K / 2].chunks_exact_mut(32).zip(l.chunks_exact(64)) {
        for j in 0..32 {
            let mut l1 = l[j];
            if l1 > 15 {
                l1 -= 16;
                qh[j] |= m1;
            }
            let mut l2 = l[j + 32];
            if l2 > 15 {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[j] = l1 | (l2 << 4);
        }
        m1 <<= 2;
        m2 <<= 2;
    }
    y[OFF_QH..OFF_QH + QK_K / 8].copy_from_slice(&qh);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::q4_k::pack_scale_min;
    use crate::util::write_f16;

    use crate::util::test_rng::xorshift32 as rng;

    #[test]
    fn decodes_handmade_block() {
        let sm: [(u8, u8); 8] = [(1, 0), (2, 1), (3, 2), (63, 63), (17, 5), (40, 33), (0, 7), (63, 0)];
        let mut b = [0u8; BLOCK_BYTES];
        write_f16(&mut b, OFF_D, 0.5);
        write_f16(&mut b, OFF_DMIN, 0.25);
        let mut s = [0u8; K_SCALE_SIZE];
        for (j, &(a, m)) in sm.iter().enumerate() {
            pack_scale_min(j, a, m, &mut s);
        }
        b[OFF_SCALES..OFF_SCALES + K_SCALE_SIZE].copy_from_slice(&s);
        // Codes q(i) = (i * 11) % 32 for every weight i, split into qs/qh by hand.
        let code = |i: usize| ((i * 11) % 32) as u8;
        for c in 0..4 {
            for l in 0..32 {
                let (a, h) = (code(64 * c + l), code(64 * c + 32 + l));
                b[OFF_QS + 32 * c + l] = (a & 15) | ((h & 15) << 4);
                b[OFF_QH + l] |= ((a >> 4) << (2 * c)) | ((h >> 4) << (2 * c + 1));
            }
        }
        let mut y = [0f32; QK_K];
        Q5K::dequantize(&b, &mut y);
        for (i, &v) in y.iter().enumerate() {
            let (sc, m) = sm[i / 32];
            assert_eq!(v, 0.5 * sc as f32 * code(i) as f32 - 0.25 * m as f32, "i={i}");
        }
        // Literal spot checks: code(3) = 1 in sub-block 0 (0.5·1·q); code(98) = 22 in sub-block 3.
        assert_eq!(y[3], 0.5);
        assert_eq!(y[98], 31.5 * 22.0 - 15.75);

        // And write_block packs the same codes to the same bytes.
        let mut l = [0u8; QK_K];
        for (i, l) in l.iter_mut().enumerate() {
            *l = code(i);
        }
        let h = KHeader { d: 0x3800, dmin: 0x3400, scales: s };
        let mut b2 = [0u8; BLOCK_BYTES];
        write_block(&h, &l, &mut b2);
        assert_eq!(b, b2);
    }

    #[test]
    fn roundtrip_error_is_small() {
        let mut r = rng(5);
        let x: Vec<f32> = (0..4 * QK_K).map(|_| r()).collect();
        let q = Q5K::TRAITS.quantize_to_vec(&x, QK_K, None).unwrap();
        let mut q2 = vec![0u8; q.len()];
        quantize_ref(&x, &mut q2);
        assert_eq!(q, q2);
        let y = Q5K::TRAITS.dequantize_to_vec(&q).unwrap();
        let rmse = (x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / x.len() as f32).sqrt();
        // 32 levels over a range of 2: step ≈ 0.065, rms error ≈ 0.02.
        assert!(rmse < 0.025, "rmse {rmse}");
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 0.08, "{a} vs {b}");
        }
    }

    #[test]
    fn all_zero_rows() {
        let x = vec![0f32; 2 * QK_K];
        for im in [None, Some(&[1f32; 2 * QK_K][..])] {
            let q = Q5K::TRAITS.quantize_to_vec(&x, 2 * QK_K, im).unwrap();
            assert!(q.iter().all(|&b| b == 0));
            let y = Q5K::TRAITS.dequantize_to_vec(&q).unwrap();
            assert!(y.iter().all(|&v| v == 0.0));
        }
    }

    #[test]
    fn imatrix_path_is_deterministic_and_close() {
        let mut r = rng(1234);
        let n = 2 * QK_K;
        let x: Vec<f32> = (0..3 * n).map(|_| r() * 3.0).collect();
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.1).collect();
        let a = Q5K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        let b = Q5K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, Q5K::TRAITS.quantize_to_vec(&x, n, None).unwrap());
        let y = Q5K::TRAITS.dequantize_to_vec(&a).unwrap();
        let rmse = (x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / x.len() as f32).sqrt();
        assert!(rmse < 0.08, "rmse {rmse}");
    }
}
