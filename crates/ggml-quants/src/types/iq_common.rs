//! Helpers shared by the IQ, TQ, FP4 and Q1_0/Q2_0 type modules: ports of the small
//! `static` routines of `ggml/src/ggml-quants.c` and `ggml/src/ggml-impl.h` (llama.cpp
//! `0c1e57098`) that those types use and the legacy/K types do not.
//!
//! The lattice search tables of the IQ quantizers (ggml's `iq2xs_init_impl` /
//! `iq3xs_init_impl`) live in [`super::iq_grid`].

use crate::util::c_f32_to_i32;
use crate::QK_K;

/// `GROUP_MAX_EPS_IQ3_XXS`.
pub const GROUP_MAX_EPS_IQ3_XXS: f32 = 1e-8;
/// `GROUP_MAX_EPS_IQ2_S`.
pub const GROUP_MAX_EPS_IQ2_S: f32 = 1e-8;
/// `GROUP_MAX_EPS_IQ1_M`.
pub const GROUP_MAX_EPS_IQ1_M: f32 = 1e-7;
/// `GROUP_MAX_EPS_IQ1_S`.
pub const GROUP_MAX_EPS_IQ1_S: f32 = 1e-12;

/// ggml's `quantize_iq*` row loop for a per-`QK_K`-block quantizer: `block` quantizes
/// every block of every row (`block_bytes` each), with the block's slice of the importance
/// matrix (`n_per_row` weights, the same for every row) when one is given.
pub(crate) fn quantize_qk_rows(
    src: &[f32],
    dst: &mut [u8],
    n_per_row: usize,
    block_bytes: usize,
    imatrix: Option<&[f32]>,
    block: impl Fn(&[f32], Option<&[f32]>, &mut [u8]),
) {
    if n_per_row == 0 {
        return;
    }
    let row_bytes = n_per_row / QK_K * block_bytes;
    for (xr, yr) in src.chunks_exact(n_per_row).zip(dst.chunks_exact_mut(row_bytes)) {
        for (ib, (x, y)) in xr.chunks_exact(QK_K).zip(yr.chunks_exact_mut(block_bytes)).enumerate() {
            block(x, imatrix.map(|w| &w[QK_K * ib..QK_K * (ib + 1)]), y);
        }
    }
}

/// [`quantize_qk_rows`] for the quantizers that need an importance matrix (IQ1_S, IQ2_XXS,
/// IQ2_XS): without one it writes nothing (the registry refuses such calls before).
pub(crate) fn quantize_qk_rows_imatrix(
    src: &[f32],
    dst: &mut [u8],
    n_per_row: usize,
    block_bytes: usize,
    imatrix: Option<&[f32]>,
    block: impl Fn(&[f32], &[f32], &mut [u8]),
) {
    if imatrix.is_some() {
        quantize_qk_rows(src, dst, n_per_row, block_bytes, imatrix, |x, w, y| block(x, w.expect("imatrix given"), y));
    }
}

/// `best_index_int8(n, val, x)`: index of the entry of the sorted table `val` nearest to
/// `x` (bisection, ties to the upper entry, as in ggml).
#[inline]
pub fn best_index_int8(val: &[i8], x: f32) -> usize {
    let n = val.len();
    if x <= val[0] as f32 {
        return 0;
    }
    if x >= val[n - 1] as f32 {
        return n - 1;
    }
    let (mut ml, mut mu) = (0usize, n - 1);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (val[mu - 1] as f32) < (val[mu] as f32) - x {
        mu - 1
    } else {
        mu
    }
}

/// Round half away from zero for `|x| < 2^23`, without a libm call (x86-64 without SSE4.1
/// has no rounding instruction, so `f32::round` is a call to `roundf`): truncate through
/// `cvttss2si`, then step by one when the (exactly computed) remainder reaches a half.
#[inline(always)]
fn round_small(x: f32) -> i32 {
    let t = x as i32;
    let f = x - t as f32;
    t + (f >= 0.5) as i32 - (f <= -0.5) as i32
}

/// Below this magnitude [`round_small`] is exact; at or above it every f32 is an integer.
const EXACT_INT: f32 = 8388608.0;

/// C's `(int) lroundf(x)` on x86-64 glibc: round half away from zero into a `long`
/// (`LONG_MIN` for NaN and out-of-range values), then truncated to `int`.
#[inline]
pub fn c_lroundf_i32(x: f32) -> i32 {
    if x.abs() < EXACT_INT {
        return round_small(x);
    }
    let l: i64 = if x.is_nan() || !(-9.223372e18f32..9.223372e18f32).contains(&x) { i64::MIN } else { x as i64 };
    l as i32
}

/// C's `(int) roundf(x)` (cvttss2si of the rounded value).
#[inline]
pub fn c_roundf_i32(x: f32) -> i32 {
    if x.abs() < EXACT_INT {
        round_small(x)
    } else {
        c_f32_to_i32(x)
    }
}

/// `ggml_e8m0_to_fp32_half`: `2^(x - 128)` as an f32, denormal for `x < 2`.
#[inline]
pub fn e8m0_to_fp32_half(x: u8) -> f32 {
    let bits: u32 = if x < 2 { 0x0020_0000u32 << x } else { ((x - 1) as u32) << 23 };
    f32::from_bits(bits)
}

/// `ggml_ue4m3_to_fp32`: an unsigned E4M3 scale, halved (the E2M1 codebook is doubled).
/// The top bit is ignored, as in ggml; `0` and `0x7F` decode to zero.
#[inline]
pub fn ue4m3_to_fp32(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let exp = ((x >> 3) & 0xF) as i32;
    let man = (x & 0x7) as i32;
    // ldexpf of these small values is exact: a power-of-two scaling.
    let raw = if exp == 0 { man as f32 * pow2(-9) } else { (1.0 + man as f32 / 8.0) * pow2(exp - 7) };
    raw * 0.5
}

/// `2^e` for `-126 <= e <= 127`.
#[inline]
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// `ggml_fp32_to_ue4m3`: round to the nearest unsigned E4M3 (ties up in the mantissa),
/// saturating at 448, subnormals rounded half up.
#[inline]
pub fn fp32_to_ue4m3(x: f32) -> u8 {
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    if !(x > 0.0) {
        return 0;
    }
    let x = if x > 448.0 { 448.0 } else { x };
    let bits = x.to_bits();
    let fp32_exp = ((bits >> 23) & 0xFF) as i32 - 127;
    let fp32_man = ((bits >> 20) & 0x7) as i32;
    let mut e = fp32_exp + 7;
    if e <= 0 {
        let man = c_f32_to_i32(x * 512.0 + 0.5).min(7);
        if man < 1 {
            return 0;
        }
        return man as u8;
    }
    if e >= 15 {
        return 0x7E;
    }
    let round_bit = ((bits >> 19) & 1) as i32;
    let mut m = fp32_man + round_bit;
    if m > 7 {
        m = 0;
        e += 1;
        if e >= 15 {
            return 0x7E;
        }
    }
    ((e << 3) | m) as u8
}

/// `best_index_mxfp4(x, e)`: the E2M1 code (of the doubled codebook `values`) whose value
/// times `e` is nearest to `x`, first index on ties.
#[inline]
pub fn best_index_fp4(values: &[i8; 16], x: f32, e: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (values[0] as f32 * e - x).abs();
    for (i, &v) in values.iter().enumerate().skip(1) {
        let err = (v as f32 * e - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

/// glibc's `qsort` as ggml's IQ1 quantizers call it on (value, index) pairs compared by
/// value only (`iq1_sort_helper`): glibc 2.x sorts small arrays with its top-down merge
/// sort (`msort_with_tmp`), which is stable; this is that merge sort, step for step, so
/// ties (and NaN, which compares equal to everything) land where glibc puts them.
pub fn glibc_msort_pairs(b: &mut [(f32, u8)]) {
    /// `iq1_sort_helper(a, b) <= 0`.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    fn cmp_le(a: f32, b: f32) -> bool {
        !(a > b)
    }
    fn rec(b: &mut [(f32, u8)], tmp: &mut Vec<(f32, u8)>) {
        let n = b.len();
        if n <= 1 {
            return;
        }
        let n1 = n / 2;
        rec(&mut b[..n1], tmp);
        rec(&mut b[n1..], tmp);
        tmp.clear();
        let (mut i, mut j) = (0, n1);
        while i < n1 && j < n {
            if cmp_le(b[i].0, b[j].0) {
                tmp.push(b[i]);
                i += 1;
            } else {
                tmp.push(b[j]);
                j += 1;
            }
        }
        tmp.extend_from_slice(&b[i..n1]);
        let k = tmp.len();
        b[..k].copy_from_slice(tmp);
    }
    let mut tmp = Vec::with_capacity(b.len());
    rec(b, &mut tmp);
}

/// A deterministic generator for unit tests: uniform floats in `[-1, 1)`.
#[cfg(test)]
pub(crate) fn test_rng(seed: u32) -> impl FnMut() -> f32 {
    let mut s = seed.max(1);
    move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        (s as f32 / u32::MAX as f32) * 2.0 - 1.0
    }
}

/// Root-mean-square difference of two equal-length slices (unit tests).
#[cfg(test)]
pub(crate) fn rmse(a: &[f32], b: &[f32]) -> f32 {
    (a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>() / a.len() as f32).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_index_int8_matches_nearest() {
        let v: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
        assert_eq!(best_index_int8(&v, -200.0), 0);
        assert_eq!(best_index_int8(&v, 200.0), 15);
        assert_eq!(best_index_int8(&v, 0.0), 8);
        assert_eq!(best_index_int8(&v, -4.5), 8); // tie between -10 and 1 goes up
        assert_eq!(best_index_int8(&v, -5.0), 7);
        assert_eq!(best_index_int8(&v, f32::NAN), 15);
    }

    #[test]
    fn lround_rounds_half_away_and_wraps_like_c() {
        assert_eq!(c_lroundf_i32(0.5), 1);
        assert_eq!(c_lroundf_i32(-0.5), -1);
        assert_eq!(c_lroundf_i32(1.49), 1);
        assert_eq!(c_lroundf_i32(f32::NAN), 0);
        assert_eq!(c_lroundf_i32(f32::INFINITY), 0);
        assert_eq!(c_lroundf_i32(4294967296.0 + 8192.0), 8192);
    }

    #[test]
    fn fast_rounding_matches_libm_round() {
        let mut xs = vec![0.0f32, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 1e-30, -1e-30];
        xs.extend([8388607.5f32, -8388607.5, 8388608.0, 4194303.5, 2147483520.0, 3e9, -3e9, 1e19, -1e19]);
        xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MAX, f32::MIN_POSITIVE]);
        let mut s = 0x9E37_79B9u32;
        for _ in 0..1_000_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            xs.push(f32::from_bits(s));
            xs.push((s as f32 / u32::MAX as f32 - 0.5) * 16.0);
        }
        for x in xs {
            assert_eq!(c_roundf_i32(x), c_f32_to_i32(x.round()), "roundf {x:e}");
            let l: i64 =
                if x.is_nan() || !(-9.223372e18f32..9.223372e18f32).contains(&x) { i64::MIN } else { x.round() as i64 };
            assert_eq!(c_lroundf_i32(x), l as i32, "lroundf {x:e}");
        }
    }

    #[test]
    fn ue4m3_roundtrips_every_code() {
        for c in 1u8..0x78 {
            let v = ue4m3_to_fp32(c) * 2.0;
            assert_eq!(fp32_to_ue4m3(v), c, "code {c:#x} = {v}");
        }
        assert_eq!(ue4m3_to_fp32(0x7E), 224.0); // exponent 15 only comes from saturation
        assert_eq!(fp32_to_ue4m3(1e9), 0x7E);
        assert_eq!(fp32_to_ue4m3(-1.0), 0);
        assert_eq!(fp32_to_ue4m3(f32::NAN), 0);
        assert_eq!(ue4m3_to_fp32(1), 2f32.powi(-10));
    }

    #[test]
    fn msort_is_stable_and_sorted() {
        let mut v: Vec<(f32, u8)> =
            [3.0, 1.0, 2.0, 1.0, -0.0, 0.0, 3.0, -5.0].iter().enumerate().map(|(i, &x)| (x, i as u8)).collect();
        glibc_msort_pairs(&mut v);
        let idx: Vec<u8> = v.iter().map(|p| p.1).collect();
        assert_eq!(idx, [7, 4, 5, 1, 3, 2, 0, 6]);
    }

    #[test]
    fn e8m0_half_is_a_power_of_two() {
        for x in 0u8..=254 {
            assert_eq!(e8m0_to_fp32_half(x), 2f64.powi(x as i32 - 128) as f32, "{x}");
        }
    }
}
