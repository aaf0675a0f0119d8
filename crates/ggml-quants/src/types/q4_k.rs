//! `GGML_TYPE_Q4_K` (id 12): 4-bit K-quant, super-blocks of 256 weights in 8 sub-blocks
//! of 32, each sub-block `x = d·sc·q − dmin·m` with 6-bit `sc`/`m` (4.5 bits per weight).
//!
//! Ports of ggml (llama.cpp commit `0c1e57098`, `ggml/src/ggml-quants.c`):
//! - `dequantize_row_q4_K` → [`Q4K::dequantize`] (`type_traits[GGML_TYPE_Q4_K].to_float`);
//! - `quantize_row_q4_K_ref` → [`quantize_ref`] (`from_float_ref`), with its
//!   `make_qkx2_quants` scale/min search ([`crate::util::make_qkx2_quants`]);
//! - `quantize_q4_K` → [`quantize_rows`], as `ggml_quantize_chunk` calls it: the reference
//!   quantizer without an importance matrix, `quantize_row_q4_K_impl` (`make_qkx3_quants`
//!   per sub-block, `make_qp_quants` for the 6-bit scales) row by row with one.
//!
//! The scale search and the final re-quantization are shared with Q5_K
//! ([`super::q5_k`]), which differs only in `nmax`, the search grid and the bit packing.

use std::mem::{offset_of, size_of};

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::util::{
    f32_to_fp16, fp16_to_f32, get_scale_min_k4, make_qkx2_quants, make_qkx3_quants, make_qp_quants, nearest_int,
    read_f16,
};
use crate::QK_K;

/// Bytes of packed 6-bit sub-block scales and mins in a Q4_K/Q5_K block (`K_SCALE_SIZE`).
pub const K_SCALE_SIZE: usize = 12;

/// ggml's `block_q4_K` (`ggml/src/ggml-common.h`), 144 bytes, no padding:
///
/// | offset | size | field                                                        |
/// |-------:|-----:|--------------------------------------------------------------|
/// | 0      | 2    | `d`: fp16 super-block scale of the 6-bit scales              |
/// | 2      | 2    | `dmin`: fp16 super-block scale of the 6-bit mins             |
/// | 4      | 12   | `scales`: 8 (scale, min) pairs, 6 bits each ([`get_scale_min_k4`]) |
/// | 16     | 128  | `qs`: 4-bit quants; byte `32c + l` holds weight `64c + l` (low nibble) and `64c + 32 + l` (high) |
///
/// Documents the layout; blocks are parsed from unaligned bytes through the offsets
/// below, never by casting.
#[repr(C)]
pub struct BlockQ4K {
    /// fp16 (little-endian) scale of the sub-block scales.
    pub d: [u8; 2],
    /// fp16 (little-endian) scale of the sub-block mins.
    pub dmin: [u8; 2],
    /// Packed 6-bit scales and mins.
    pub scales: [u8; K_SCALE_SIZE],
    /// 4-bit quants, two per byte.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockQ4K>() == 2 * 2 + K_SCALE_SIZE + QK_K / 2);
const _: () = assert!(size_of::<BlockQ4K>() == 144);

const OFF_D: usize = offset_of!(BlockQ4K, d);
const OFF_DMIN: usize = offset_of!(BlockQ4K, dmin);
const OFF_SCALES: usize = offset_of!(BlockQ4K, scales);
const OFF_QS: usize = offset_of!(BlockQ4K, qs);
const BLOCK_BYTES: usize = size_of::<BlockQ4K>();

/// Marker for `q4_K`.
pub struct Q4K;

impl GgmlType for Q4K {
    const NAME: &'static str = "q4_K";
    const ID: u32 = 12;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = BLOCK_BYTES;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_q4_K`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(BLOCK_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
            let d = read_f16(b, OFF_D);
            let min = read_f16(b, OFF_DMIN);
            let scales: &[u8; K_SCALE_SIZE] = b[OFF_SCALES..OFF_SCALES + K_SCALE_SIZE].try_into().unwrap();
            for (c, (q, y)) in b[OFF_QS..OFF_QS + QK_K / 2].chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
                let (sc, m) = get_scale_min_k4(2 * c, scales);
                let (d1, m1) = (d * sc as f32, min * m as f32);
                let (sc, m) = get_scale_min_k4(2 * c + 1, scales);
                let (d2, m2) = (d * sc as f32, min * m as f32);
                let q: &[u8; 32] = q.try_into().unwrap();
                let (lo, hi) = y.split_at_mut(32);
                for (y, &q) in lo.iter_mut().zip(q) {
                    *y = d1 * (q & 0xF) as f32 - m1;
                }
                for (y, &q) in hi.iter_mut().zip(q) {
                    *y = d2 * (q >> 4) as f32 - m2;
                }
            }
        }
    }
}

inventory::submit! { <Q4K as GgmlType>::TRAITS }

/// `quantize_row_q4_K_ref`: encodes whole super-blocks of `src` into `dst`.
pub fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK_K];
    for (x, y) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BLOCK_BYTES)) {
        let x: &[f32; QK_K] = x.try_into().unwrap();
        let h = ref_scales(x, 15, -1.0, 20, &mut l);
        write_block(&h, &l, y);
    }
}

/// `quantize_q4_K(src, dst, nrow, n_per_row, imatrix)`: without `imatrix` the reference
/// quantizer over all of `src`, with it `quantize_row_q4_K_impl` row by row.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    let Some(qw) = imatrix else {
        return quantize_ref(src, dst);
    };
    let row_bytes = n_per_row / QK_K * BLOCK_BYTES;
    let mut l = [0u8; QK_K];
    for (xr, yr) in src.chunks_exact(n_per_row).zip(dst.chunks_exact_mut(row_bytes)) {
        for ((x, w), y) in xr.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(yr.chunks_exact_mut(BLOCK_BYTES)) {
            let h = impl_scales(x.try_into().unwrap(), w.try_into().unwrap(), 15, false, &mut l);
            write_block(&h, &l, y);
        }
    }
}

fn write_block(h: &KHeader, l: &[u8; QK_K], y: &mut [u8]) {
    y[OFF_D..OFF_D + 2].copy_from_slice(&h.d.to_le_bytes());
    y[OFF_DMIN..OFF_DMIN + 2].copy_from_slice(&h.dmin.to_le_bytes());
    y[OFF_SCALES..OFF_SCALES + K_SCALE_SIZE].copy_from_slice(&h.scales);
    let qs = &mut y[OFF_QS..OFF_QS + QK_K / 2];
    for (q, l) in qs.chunks_exact_mut(32).zip(l.chunks_exact(64)) {
        let (lo, hi) = l.split_at(32);
        for ((q, &a), &b) in q.iter_mut().zip(lo).zip(hi) {
            *q = a | (b << 4);
        }
    }
}

/// The header of a Q4_K/Q5_K super-block: fp16 bits of `d` and `dmin`, packed scales.
pub(crate) struct KHeader {
    pub(crate) d: u16,
    pub(crate) dmin: u16,
    pub(crate) scales: [u8; K_SCALE_SIZE],
}

/// Packs sub-block `j`'s 6-bit scale `ls` and min `lm` as `quantize_row_q4_K_ref` does,
/// including its C truncations (`ls`/`lm` wider than 6 bits spill the way the C's do).
/// Sub-blocks must be packed in order 0..8.
#[inline]
pub(crate) fn pack_scale_min(j: usize, ls: u8, lm: u8, s: &mut [u8; K_SCALE_SIZE]) {
    if j < 4 {
        s[j] = ls;
        s[j + 4] = lm;
    } else {
        s[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
        s[j - 4] |= (((ls >> 4) as u32) << 6) as u8;
        s[j] |= (((lm >> 4) as u32) << 6) as u8;
    }
}

/// The scale/min search of `quantize_row_q{4,5}_K_ref` for one super-block
/// (`make_qkx2_quants` per sub-block, then 6-bit scales relative to the largest), followed
/// by the re-quantization of `x` against the rounded scales. Leaves the codes in `l`.
pub(crate) fn ref_scales(x: &[f32; QK_K], nmax: i32, rmin: f32, nstep: i32, l: &mut [u8; QK_K]) -> KHeader {
    let mut laux = [0u8; 32];
    let mut weights = [0f32; 32];
    let mut mins = [0f32; QK_K / 32];
    let mut scales = [0f32; QK_K / 32];
    let mut max_scale = 0f32;
    let mut max_min = 0f32;
    for j in 0..QK_K / 32 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        scales[j] = make_qkx2_quants(
            32,
            nmax,
            xs,
            &weights,
            &mut l[32 * j..32 * j + 32],
            &mut mins[j],
            &mut laux,
            rmin,
            0.1,
            nstep,
            false,
        );
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut s = [0u8; K_SCALE_SIZE];
    for j in 0..QK_K / 32 {
        // `uint8_t ls = nearest_int(...)`: truncate to a byte, then MIN(63, ls).
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        pack_scale_min(j, ls, lm, &mut s);
    }
    let h = KHeader { d: f32_to_fp16(max_scale / 63.0), dmin: f32_to_fp16(max_min / 63.0), scales: s };
    requantize(x, &h, nmax, l);
    h
}

/// `quantize_row_q{4,5}_K_impl` for one super-block under importance weights `qw`
/// (`make_qkx3_quants` per sub-block, `make_qp_quants` for the scales and mins), then the
/// re-quantization. `clamp63` is Q5_K's extra `MIN(63, ls)` (Q4_K has none).
pub(crate) fn impl_scales(x: &[f32; QK_K], qw: &[f32; QK_K], nmax: i32, clamp63: bool, l: &mut [u8; QK_K]) -> KHeader {
    let mut laux = [0u8; 32];
    let mut ls = [0u8; QK_K / 32];
    let mut lm = [0u8; QK_K / 32];
    let mut weights = [0f32; 32];
    let mut sw = [0f32; QK_K / 32];
    let mut mins = [0f32; QK_K / 32];
    let mut scales = [0f32; QK_K / 32];

    let mut sum_x2 = 0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let sigma2 = 2.0 * sum_x2 / QK_K as f32;
    for j in 0..QK_K / 32 {
        let xs = &x[32 * j..32 * j + 32];
        for ((w, &q), &v) in weights.iter_mut().zip(&qw[32 * j..32 * j + 32]).zip(xs) {
            *w = q * (sigma2 + v * v).sqrt();
        }
        let mut sumw = 0f32;
        for &w in &weights {
            sumw += w;
        }
        sw[j] = sumw;
        scales[j] = make_qkx3_quants(
            32,
            nmax,
            xs,
            Some(&weights),
            &mut l[32 * j..32 * j + 32],
            &mut mins[j],
            &mut laux,
            -0.9,
            0.05,
            36,
            false,
        );
    }
    let d_block = make_qp_quants(QK_K / 32, 63, &scales, &mut ls, &sw);
    let m_block = make_qp_quants(QK_K / 32, 63, &mins, &mut lm, &sw);
    let mut s = [0u8; K_SCALE_SIZE];
    for j in 0..QK_K / 32 {
        let (a, b) = if clamp63 { (ls[j].min(63), lm[j].min(63)) } else { (ls[j], lm[j]) };
        pack_scale_min(j, a, b, &mut s);
    }
    let h = KHeader { d: f32_to_fp16(d_block), dmin: f32_to_fp16(m_block), scales: s };
    requantize(x, &h, nmax, l);
    h
}

/// The last pass of the Q4_K/Q5_K quantizers: codes `x` against the stored (rounded)
/// scales and mins. A sub-block whose scale is zero keeps the codes already in `l`.
fn requantize(x: &[f32; QK_K], h: &KHeader, nmax: i32, l: &mut [u8; QK_K]) {
    let df = fp16_to_f32(h.d);
    let dminf = fp16_to_f32(h.dmin);
    for j in 0..QK_K / 32 {
        let (sc, m) = get_scale_min_k4(j, &h.scales);
        let d = df * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dminf * m as f32;
        for (l, &v) in l[32 * j..32 * j + 32].iter_mut().zip(&x[32 * j..32 * j + 32]) {
            *l = nearest_int((v + dm) / d).clamp(0, nmax) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::write_f16;

    use crate::util::test_rng::xorshift32 as rng;

    /// Packs eight (scale, min) pairs (each < 64) the way ggml does.
    fn pack(sm: [(u8, u8); 8]) -> [u8; K_SCALE_SIZE] {
        let mut s = [0u8; K_SCALE_SIZE];
        for (j, (a, b)) in sm.into_iter().enumerate() {
            pack_scale_min(j, a, b, &mut s);
        }
        s
    }

    #[test]
    fn decodes_handmade_block() {
        let sm = [(1, 0), (2, 1), (3, 2), (63, 63), (17, 5), (40, 33), (0, 7), (63, 0)];
        let mut b = [0u8; BLOCK_BYTES];
        write_f16(&mut b, OFF_D, 0.5);
        write_f16(&mut b, OFF_DMIN, 0.25);
        b[OFF_SCALES..OFF_SCALES + K_SCALE_SIZE].copy_from_slice(&pack(sm));
        for (i, q) in b[OFF_QS..].iter_mut().enumerate() {
            *q = (i % 16) as u8 | (((i * 7) % 16) as u8) << 4;
        }
        for (j, &(sc, m)) in sm.iter().enumerate() {
            assert_eq!(get_scale_min_k4(j, b[OFF_SCALES..OFF_SCALES + 12].try_into().unwrap()), (sc, m));
        }
        let mut y = [0f32; QK_K];
        Q4K::dequantize(&b, &mut y);
        for (i, &v) in y.iter().enumerate() {
            let (c, h, l) = (i / 64, (i / 32) % 2, i % 32);
            let byte = 32 * c + l;
            let q = if h == 0 { byte % 16 } else { (byte * 7) % 16 } as f32;
            let (sc, m) = sm[i / 32];
            assert_eq!(v, 0.5 * sc as f32 * q - 0.25 * m as f32, "i={i}");
        }
        // A few literal values: sub-block 0 is 0.5·1·q, sub-block 3 is 31.5·q − 15.75.
        assert_eq!(y[0], 0.0);
        assert_eq!(y[5], 2.5);
        assert_eq!(y[96 + 1], 31.5 * 7.0 - 15.75);
    }

    #[test]
    fn roundtrip_error_is_small() {
        let mut r = rng(7);
        let x: Vec<f32> = (0..4 * QK_K).map(|_| r()).collect();
        let q = Q4K::TRAITS.quantize_to_vec(&x, 2 * QK_K, None).unwrap();
        let mut q2 = vec![0u8; q.len()];
        quantize_ref(&x, &mut q2);
        assert_eq!(q, q2);
        let y = Q4K::TRAITS.dequantize_to_vec(&q).unwrap();
        let rmse = (x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / x.len() as f32).sqrt();
        // 16 levels over a range of 2: step ≈ 0.13, rms error ≈ step/√12 ≈ 0.04.
        assert!(rmse < 0.05, "rmse {rmse}");
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 0.15, "{a} vs {b}");
        }
    }

    #[test]
    fn all_zero_rows() {
        let x = vec![0f32; 2 * QK_K];
        for im in [None, Some(&[1f32; 2 * QK_K][..])] {
            let q = Q4K::TRAITS.quantize_to_vec(&x, 2 * QK_K, im).unwrap();
            assert!(q.iter().all(|&b| b == 0));
            let y = Q4K::TRAITS.dequantize_to_vec(&q).unwrap();
            assert!(y.iter().all(|&v| v == 0.0));
        }
    }

    #[test]
    fn imatrix_path_is_deterministic_and_close() {
        let mut r = rng(99);
        let n = 2 * QK_K;
        let x: Vec<f32> = (0..3 * n).map(|_| r() * 3.0).collect();
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.1).collect();
        let a = Q4K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        let b = Q4K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, Q4K::TRAITS.quantize_to_vec(&x, n, None).unwrap());
        let y = Q4K::TRAITS.dequantize_to_vec(&a).unwrap();
        let rmse = (x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / x.len() as f32).sqrt();
        assert!(rmse < 0.15, "rmse {rmse}");
    }
}
