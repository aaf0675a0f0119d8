//! AVX2 + FMA + F16C dot products of quantized weight rows with quantized activation
//! rows, ports of ggml-cpu's `__AVX2__` paths (`ggml-cpu/arch/x86/quants.c`): the same
//! integer lane sums and the same per-block `fmadd` into 8 float lanes followed by
//! `hsum_float_8`, so results match ggml's AVX2 kernels. Scalar twins:
//! `crate::scalar::dots`; activation quantizers' twins: `crate::scalar::act`.
//!
//! Every `pub fn` is a safe wrapper: it checks the block counts against the slice
//! lengths (a mismatch is a caller bug and panics rather than reading out of bounds) and
//! falls back to the scalar twin when the CPU lacks the features.

use core::arch::x86_64::*;

use crate::scalar::ops::DotLayout;

use super::has_avx2;
use crate::scalar::act::{Q8_0_BYTES, Q8_1_BYTES, Q8_K_BYTES};
use crate::scalar::{act as sact, dots as sd, legacy as sl};

// ---------------------------------------------------------------------------------------
// Helpers (ggml's static inline helpers of the same names).

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn hsum_float_8(x: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// fp16 at `p` → f32 (F16C, exact).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16_at(p: *const u8) -> f32 {
    let h = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f32_at(p: *const u8) -> f32 {
    (p as *const f32).read_unaligned()
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// 16 bytes of nibbles → 32 bytes: low nibbles in bytes 0..16, high nibbles in 16..32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn bytes_from_nibbles_32(p: *const u8) -> __m256i {
    let tmp = _mm_loadu_si128(p as *const __m128i);
    let bytes = _mm256_insertf128_si256::<1>(_mm256_castsi128_si256(tmp), _mm_srli_epi16::<4>(tmp));
    _mm256_and_si256(_mm256_set1_epi8(0xF), bytes)
}

/// 32 bits at `p` → 32 bytes, 0xFF where the bit is set.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn bytes_from_bits_32(p: *const u8) -> __m256i {
    let x32 = (p as *const u32).read_unaligned();
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x32 as i32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// Unsigned × signed byte pairs → 8 i32 lane sums (4 products each) as floats.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn mul_sum_us8_pairs_float(ax: __m256i, sy: __m256i) -> __m256 {
    let dot = _mm256_maddubs_epi16(ax, sy);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot))
}

/// Signed × signed byte pairs → 8 i32 lane sums as floats.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn mul_sum_i8_pairs_float(x: __m256i, y: __m256i) -> __m256 {
    let ax = _mm256_sign_epi8(x, x);
    let sy = _mm256_sign_epi8(y, x);
    mul_sum_us8_pairs_float(ax, sy)
}

/// Generates the safe wrapper `$name(n, w, x)` for `$imp(nb, w, x)`.
macro_rules! safe_dot {
    ($(#[$m:meta])* $name:ident, $imp:ident, $qk:expr, $wb:expr, $xb:expr, $twin:path) => {
        $(#[$m])*
        pub fn $name(n: usize, w: &[u8], x: &[u8]) -> f32 {
            let qk: usize = $qk;
            let nb = n / qk;
            assert!(nb * qk == n && w.len() >= nb * $wb && x.len() >= nb * $xb, "{}: bad row lengths", stringify!($name));
            if !has_avx2() {
                return $twin(n, w, x);
            }
            // SAFETY: the features the kernel is compiled for were detected above; it
            // reads `nb` blocks of `$wb` bytes from `w` and of `$xb` bytes from `x`, which
            // the assert guarantees are in bounds.
            unsafe { $imp(nb, w.as_ptr(), x.as_ptr()) }
        }
    };
}

// ---------------------------------------------------------------------------------------
// Legacy quants × Q8_0 / Q8_1.

safe_dot!(
    /// `ggml_vec_dot_q4_0_q8_0` (AVX2).
    q4_0_q8_0, q4_0_q8_0_imp, 32, 18, Q8_0_BYTES, sd::q4_0_q8_0
);
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_q8_0_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let off = _mm256_set1_epi8(8);
    for i in 0..nb {
        let (b, y) = (w.add(i * 18), x.add(i * Q8_0_BYTES));
        let d = _mm256_set1_ps(f16_at(b) * f16_at(y));
        let qx = _mm256_sub_epi8(bytes_from_nibbles_32(b.add(2)), off);
        let q = mul_sum_i8_pairs_float(qx, load256(y.add(2)));
        acc = _mm256_fmadd_ps(d, q, acc);
    }
    hsum_float_8(acc)
}

safe_dot!(
    /// `ggml_vec_dot_q4_1_q8_1` (AVX2; twin: [`crate::scalar::legacy::q4_1_q8_1`]).
    q4_1_q8_1, q4_1_q8_1_imp, 32, 20, Q8_1_BYTES, sl::q4_1_q8_1
);
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1_q8_1_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for i in 0..nb {
        let (b, y) = (w.add(i * 20), x.add(i * Q8_1_BYTES));
        // GCC fuses this (`vfmadd231ss`); the same bits, as the product of two fp16
        // values is exact in f32.
        summs += f16_at(b.add(2)) * f16_at(y.add(2));
        let d0d1 = _mm256_mul_ps(_mm256_set1_ps(f16_at(b)), _mm256_set1_ps(f16_at(y)));
        let qx = bytes_from_nibbles_32(b.add(4));
        let xy = mul_sum_us8_pairs_float(qx, load256(y.add(4)));
        acc = _mm256_fmadd_ps(d0d1, xy, acc);
    }
    hsum_float_8(acc) + summs
}

safe_dot!(
    /// `ggml_vec_dot_q5_0_q8_0` (AVX2; twin: [`crate::scalar::legacy::q5_0_q8_0`]).
    q5_0_q8_0, q5_0_q8_0_imp, 32, 22, Q8_0_BYTES, sl::q5_0_q8_0
);
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_q8_0_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (b, y) = (w.add(i * 22), x.add(i * Q8_0_BYTES));
        let d = _mm256_set1_ps(f16_at(b) * f16_at(y));
        let mut qx = bytes_from_nibbles_32(b.add(6));
        let bxhi = _mm256_andnot_si256(bytes_from_bits_32(b.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
        qx = _mm256_or_si256(qx, bxhi);
        let q = mul_sum_i8_pairs_float(qx, load256(y.add(2)));
        acc = _mm256_fmadd_ps(d, q, acc);
    }
    hsum_float_8(acc)
}

safe_dot!(
    /// `ggml_vec_dot_q5_1_q8_1` (AVX2; twin: [`crate::scalar::legacy::q5_1_q8_1`]).
    q5_1_q8_1, q5_1_q8_1_imp, 32, 24, Q8_1_BYTES, sl::q5_1_q8_1
);
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_1_q8_1_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for i in 0..nb {
        let (b, y) = (w.add(i * 24), x.add(i * Q8_1_BYTES));
        // Fused by GCC, the same bits (see q4_1).
        summs += f16_at(b.add(2)) * f16_at(y.add(2));
        let d = _mm256_set1_ps(f16_at(b) * f16_at(y));
        let mut qx = bytes_from_nibbles_32(b.add(8));
        let bxhi = _mm256_and_si256(bytes_from_bits_32(b.add(4)), _mm256_set1_epi8(0x10));
        qx = _mm256_or_si256(qx, bxhi);
        let q = mul_sum_us8_pairs_float(qx, load256(y.add(4)));
        acc = _mm256_fmadd_ps(d, q, acc);
    }
    hsum_float_8(acc) + summs
}

safe_dot!(
    /// `ggml_vec_dot_q8_0_q8_0` (AVX2; twin: [`crate::scalar::legacy::q8_0_q8_0`]).
    q8_0_q8_0, q8_0_q8_0_imp, 32, Q8_0_BYTES, Q8_0_BYTES, sl::q8_0_q8_0
);
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_q8_0_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (b, y) = (w.add(i * Q8_0_BYTES), x.add(i * Q8_0_BYTES));
        let d = _mm256_set1_ps(f16_at(b) * f16_at(y));
        let q = mul_sum_i8_pairs_float(load256(b.add(2)), load256(y.add(2)));
        acc = _mm256_fmadd_ps(d, q, acc);
    }
    hsum_float_8(acc)
}

// ---------------------------------------------------------------------------------------
// K quants × Q8_K (block_q8_K: f32 d @0, qs @4, bsums @260).

/// ggml's `get_scale_shuffle_k4(i)`: broadcast 16-bit scale `i` to all lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn shuffle_k4(i: usize) -> __m256i {
    let lo = (2 * i) as i8;
    let hi = (2 * i + 1) as i8;
    let pair = (lo as u8 as i16) | ((hi as u8 as i16) << 8);
    _mm256_set1_epi16(pair)
}

/// ggml's `get_scale_shuffle_q3k(i)`: 16-bit scale `2i` in the low 128-bit lane, `2i+1` in the high.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn shuffle_q3k(i: usize) -> __m256i {
    let p = |k: usize| ((2 * k) as u8 as i16) | (((2 * k + 1) as u8 as i16) << 8);
    let a = _mm_set1_epi16(p(2 * i));
    let b = _mm_set1_epi16(p(2 * i + 1));
    _mm256_set_m128i(b, a)
}

/// ggml's `get_scale_shuffle(i)` (16 × i8 → picks byte `2i` for 8 lanes and `2i+1` for 8).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn shuffle_q6(i: usize) -> __m128i {
    let a = (2 * i) as i8;
    let b = (2 * i + 1) as i8;
    _mm_set_epi8(b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a)
}

/// The Q4_K/Q5_K `utmp` rearrangement: 8 scales then 8 mins, one byte each.
#[inline(always)]
pub(super) fn k4_utmp(s: &[u8; 12]) -> [u32; 4] {
    const KMASK1: u32 = 0x3f3f3f3f;
    const KMASK2: u32 = 0x0f0f0f0f;
    const KMASK3: u32 = 0x03030303;
    let mut u = [
        u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
        u32::from_le_bytes([s[4], s[5], s[6], s[7]]),
        u32::from_le_bytes([s[8], s[9], s[10], s[11]]),
        0,
    ];
    u[3] = ((u[2] >> 4) & KMASK2) | (((u[1] >> 6) & KMASK3) << 4);
    let uaux = u[1] & KMASK1;
    u[1] = (u[2] & KMASK2) | (((u[0] >> 6) & KMASK3) << 4);
    u[2] = uaux;
    u[0] &= KMASK1;
    u
}

safe_dot!(
    /// `ggml_vec_dot_q2_K_q8_K` (AVX2).
    q2_k_q8_k, q2_k_q8_k_imp, 256, 84, Q8_K_BYTES, sd::q2_k_q8_k
);
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k_q8_k_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0xF);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (b, y) = (w.add(i * 84), x.add(i * Q8_K_BYTES));
        let yd = f32_at(y);
        let d = yd * f16_at(b.add(80));
        let dmin = -yd * f16_at(b.add(82));
        let mut q2 = b.add(16);
        let mut q8 = y.add(4);
        let mins_and_scales = _mm_loadu_si128(b as *const __m128i);
        let scales8 = _mm_and_si128(mins_and_scales, m4);
        let mins8 = _mm_and_si128(_mm_srli_epi16::<4>(mins_and_scales), m4);
        let mins = _mm256_cvtepi8_epi16(mins8);
        let prod = _mm256_madd_epi16(mins, load256(y.add(260)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
        let all_scales = _mm256_cvtepi8_epi16(scales8);
        let l = _mm256_extracti128_si256::<0>(all_scales);
        let h = _mm256_extracti128_si256::<1>(all_scales);
        let scales = [_mm256_set_m128i(l, l), _mm256_set_m128i(h, h)];
        let mut sumi = _mm256_setzero_si256();
        for sc in scales {
            let q2bits = load256(q2);
            q2 = q2.add(32);
            let q8_0 = load256(q8);
            let q8_1 = load256(q8.add(32));
            let q8_2 = load256(q8.add(64));
            let q8_3 = load256(q8.add(96));
            q8 = q8.add(128);
            let q2_0 = _mm256_and_si256(q2bits, m3);
            let q2_1 = _mm256_and_si256(_mm256_srli_epi16::<2>(q2bits), m3);
            let q2_2 = _mm256_and_si256(_mm256_srli_epi16::<4>(q2bits), m3);
            let q2_3 = _mm256_and_si256(_mm256_srli_epi16::<6>(q2bits), m3);
            let p0 = _mm256_madd_epi16(_mm256_shuffle_epi8(sc, shuffle_q3k(0)), _mm256_maddubs_epi16(q2_0, q8_0));
            let p1 = _mm256_madd_epi16(_mm256_shuffle_epi8(sc, shuffle_q3k(1)), _mm256_maddubs_epi16(q2_1, q8_1));
            let p2 = _mm256_madd_epi16(_mm256_shuffle_epi8(sc, shuffle_q3k(2)), _mm256_maddubs_epi16(q2_2, q8_2));
            let p3 = _mm256_madd_epi16(_mm256_shuffle_epi8(sc, shuffle_q3k(3)), _mm256_maddubs_epi16(q2_3, q8_3));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_float_8(acc)
}

safe_dot!(
    /// `ggml_vec_dot_q3_K_q8_K` (AVX2).
    q3_k_q8_k, q3_k_q8_k_imp, 256, 110, Q8_K_BYTES, sd::q3_k_q8_k
);
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_k_q8_k_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    const KMASK1: u32 = 0x03030303;
    const KMASK2: u32 = 0x0f0f0f0f;
    let m3 = _mm256_set1_epi8(3);
    let mone = _mm256_set1_epi8(1);
    let m32 = _mm_set1_epi8(32);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (b, y) = (w.add(i * 110), x.add(i * Q8_K_BYTES));
        let d = f32_at(y) * f16_at(b.add(108));
        let s = b.add(96) as *const u32;
        let aux = [s.read_unaligned(), s.add(1).read_unaligned(), s.add(2).read_unaligned()];
        let mut scales128 = _mm_set_epi32(
            (((aux[1] >> 4) & KMASK2) | (((aux[2] >> 6) & KMASK1) << 4)) as i32,
            (((aux[0] >> 4) & KMASK2) | (((aux[2] >> 4) & KMASK1) << 4)) as i32,
            ((aux[1] & KMASK2) | (((aux[2] >> 2) & KMASK1) << 4)) as i32,
            ((aux[0] & KMASK2) | ((aux[2] & KMASK1) << 4)) as i32,
        );
        scales128 = _mm_sub_epi8(scales128, m32);
        let all_scales = _mm256_cvtepi8_epi16(scales128);
        let l = _mm256_extracti128_si256::<0>(all_scales);
        let h = _mm256_extracti128_si256::<1>(all_scales);
        let scales = [_mm256_set_m128i(l, l), _mm256_set_m128i(h, h)];
        let hbits = load256(b);
        let mut sumi = _mm256_setzero_si256();
        let mut q3 = b.add(32);
        let mut q8 = y.add(4);
        let mut bit = 0i32;
        for sc in scales {
            let q3bits = load256(q3);
            q3 = q3.add(32);
            let mut p = [_mm256_setzero_si256(); 4];
            for (k, p) in p.iter_mut().enumerate() {
                let q3l = _mm256_and_si256(_mm256_srl_epi16(q3bits, _mm_cvtsi32_si128(2 * k as i32)), m3);
                let mask = _mm256_sll_epi16(mone, _mm_cvtsi32_si128(bit));
                let q3h =
                    _mm256_slli_epi16::<2>(_mm256_srl_epi16(_mm256_andnot_si256(hbits, mask), _mm_cvtsi32_si128(bit)));
                bit += 1;
                let q8k = load256(q8.add(32 * k));
                let p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q3l, q8k), _mm256_maddubs_epi16(q3h, q8k));
                *p = _mm256_madd_epi16(_mm256_shuffle_epi8(sc, shuffle_q3k(k)), p16);
            }
            q8 = q8.add(128);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3])));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_float_8(acc)
}

safe_dot!(
    /// `ggml_vec_dot_q4_K_q8_K` (AVX2).
    q4_k_q8_k, q4_k_q8_k_imp, 256, 144, Q8_K_BYTES, sd::q4_k_q8_k
);
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_q8_k_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0xF);
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for i in 0..nb {
        let (b, y) = (w.add(i * 144), x.add(i * Q8_K_BYTES));
        let yd = f32_at(y);
        let d = yd * f16_at(b);
        let dmin = -yd * f16_at(b.add(2));
        let u = k4_utmp(&*(b.add(4) as *const [u8; 12]));
        let mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(u[3] as i32, u[2] as i32, u[1] as i32, u[0] as i32));
        let q8sums = load256(y.add(260));
        let q8s = _mm_hadd_epi16(_mm256_extracti128_si256::<0>(q8sums), _mm256_extracti128_si256::<1>(q8sums));
        let prod = _mm_madd_epi16(_mm256_extracti128_si256::<1>(mins_and_scales), q8s);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        let sc128 = _mm256_extracti128_si256::<0>(mins_and_scales);
        let scales = _mm256_set_m128i(sc128, sc128);
        let mut sumi = _mm256_setzero_si256();
        let mut q4 = b.add(16);
        let mut q8 = y.add(4);
        for j in 0..4 {
            let scale_l = _mm256_shuffle_epi8(scales, shuffle_k4(2 * j));
            let scale_h = _mm256_shuffle_epi8(scales, shuffle_k4(2 * j + 1));
            let q4bits = load256(q4);
            q4 = q4.add(32);
            let q4l = _mm256_and_si256(q4bits, m4);
            let q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(q4bits), m4);
            let p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, load256(q8)));
            let p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, load256(q8.add(32))));
            q8 = q8.add(64);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    hsum_float_8(acc) + _mm_cvtss_f32(acc_m)
}

safe_dot!(
    /// `ggml_vec_dot_q5_K_q8_K` (AVX2).
    q5_k_q8_k, q5_k_q8_k_imp, 256, 176, Q8_K_BYTES, sd::q5_k_q8_k
);
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_k_q8_k_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0xF);
    let mone = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for i in 0..nb {
        let (b, y) = (w.add(i * 176), x.add(i * Q8_K_BYTES));
        let yd = f32_at(y);
        let d = yd * f16_at(b);
        let dmin = -yd * f16_at(b.add(2));
        let u = k4_utmp(&*(b.add(4) as *const [u8; 12]));
        let mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(u[3] as i32, u[2] as i32, u[1] as i32, u[0] as i32));
        let q8sums = load256(y.add(260));
        let q8s = _mm_hadd_epi16(_mm256_extracti128_si256::<0>(q8sums), _mm256_extracti128_si256::<1>(q8sums));
        let prod = _mm_madd_epi16(_mm256_extracti128_si256::<1>(mins_and_scales), q8s);
        let z = _mm_setzero_si128();
        let hs = _mm_hadd_epi32(_mm_hadd_epi32(prod, z), z);
        // `summs += dmin * hsum`, which GCC contracts to one fma (`-ffp-contract=fast`).
        summs = dmin.mul_add(_mm_extract_epi32::<0>(hs) as f32, summs);
        let sc128 = _mm256_extracti128_si256::<0>(mins_and_scales);
        let scales = _mm256_set_m128i(sc128, sc128);
        let hbits = load256(b.add(16));
        let mut hmask = mone;
        let mut sumi = _mm256_setzero_si256();
        let mut q5 = b.add(48);
        let mut q8 = y.add(4);
        let mut bit = 0i32;
        for j in 0..4 {
            let scale_0 = _mm256_shuffle_epi8(scales, shuffle_k4(2 * j));
            let scale_1 = _mm256_shuffle_epi8(scales, shuffle_k4(2 * j + 1));
            let q5bits = load256(q5);
            q5 = q5.add(32);
            let q5l_0 = _mm256_and_si256(q5bits, m4);
            let q5h_0 =
                _mm256_slli_epi16::<4>(_mm256_srl_epi16(_mm256_and_si256(hbits, hmask), _mm_cvtsi32_si128(bit)));
            bit += 1;
            let q5_0 = _mm256_add_epi8(q5l_0, q5h_0);
            hmask = _mm256_slli_epi16::<1>(hmask);
            let q5l_1 = _mm256_and_si256(_mm256_srli_epi16::<4>(q5bits), m4);
            let q5h_1 =
                _mm256_slli_epi16::<4>(_mm256_srl_epi16(_mm256_and_si256(hbits, hmask), _mm_cvtsi32_si128(bit)));
            bit += 1;
            let q5_1 = _mm256_add_epi8(q5l_1, q5h_1);
            hmask = _mm256_slli_epi16::<1>(hmask);
            let p16_0 = _mm256_madd_epi16(scale_0, _mm256_maddubs_epi16(q5_0, load256(q8)));
            let p16_1 = _mm256_madd_epi16(scale_1, _mm256_maddubs_epi16(q5_1, load256(q8.add(32))));
            q8 = q8.add(64);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16_0, p16_1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_float_8(acc) + summs
}

safe_dot!(
    /// `ggml_vec_dot_q6_K_q8_K` (AVX2).
    q6_k_q8_k, q6_k_q8_k_imp, 256, 210, Q8_K_BYTES, sd::q6_k_q8_k
);
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_q8_k_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (d, sumi) = q6_k_block(w.add(i * 210), x.add(i * Q8_K_BYTES));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_float_8(acc)
}

/// One block of `ggml_vec_dot_q6_K_q8_K` (AVX2): `d_x·d_w` and the eight i32 lanes of
/// `sumi`, which the caller accumulates as `acc = fma(d, float(sumi), acc)`.
///
/// # Safety
/// AVX2 present; a q6_K block at `b`, a Q8_K block at `y`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q6_k_block(b: *const u8, y: *const u8) -> (f32, __m256i) {
    let m3 = _mm256_set1_epi8(3);
    let m15 = _mm256_set1_epi8(15);
    let d = f32_at(y) * f16_at(b.add(208));
    let q8sums = load256(y.add(260));
    let scales = _mm_loadu_si128(b.add(192) as *const __m128i);
    let scales_16 = _mm256_cvtepi8_epi16(scales);
    let q8sclsub = _mm256_slli_epi32::<5>(_mm256_madd_epi16(q8sums, scales_16));
    let mut sumi = _mm256_setzero_si256();
    let mut q4 = b;
    let mut qh = b.add(128);
    let mut q8 = y.add(4);
    let mut is = 0;
    for _ in 0..2 {
        let q4bits1 = load256(q4);
        let q4bits2 = load256(q4.add(32));
        q4 = q4.add(64);
        let q4bits_h = load256(qh);
        qh = qh.add(32);
        let q4h_0 = _mm256_slli_epi16::<4>(_mm256_and_si256(q4bits_h, m3));
        let q4h_1 = _mm256_slli_epi16::<2>(_mm256_and_si256(q4bits_h, _mm256_set1_epi8(12)));
        let q4h_2 = _mm256_and_si256(q4bits_h, _mm256_set1_epi8(48));
        let q4h_3 = _mm256_srli_epi16::<2>(_mm256_and_si256(q4bits_h, _mm256_set1_epi8(-64)));
        let q4_0 = _mm256_or_si256(_mm256_and_si256(q4bits1, m15), q4h_0);
        let q4_1 = _mm256_or_si256(_mm256_and_si256(q4bits2, m15), q4h_1);
        let q4_2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(q4bits1), m15), q4h_2);
        let q4_3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(q4bits2), m15), q4h_3);
        let p16_0 = _mm256_maddubs_epi16(q4_0, load256(q8));
        let p16_1 = _mm256_maddubs_epi16(q4_1, load256(q8.add(32)));
        let p16_2 = _mm256_maddubs_epi16(q4_2, load256(q8.add(64)));
        let p16_3 = _mm256_maddubs_epi16(q4_3, load256(q8.add(96)));
        q8 = q8.add(128);
        let s0 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, shuffle_q6(is)));
        let s1 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, shuffle_q6(is + 1)));
        let s2 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, shuffle_q6(is + 2)));
        let s3 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, shuffle_q6(is + 3)));
        is += 4;
        let p0 = _mm256_madd_epi16(s0, p16_0);
        let p1 = _mm256_madd_epi16(s1, p16_1);
        let p2 = _mm256_madd_epi16(s2, p16_2);
        let p3 = _mm256_madd_epi16(s3, p16_3);
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p2, p3));
    }
    (d, _mm256_sub_epi32(sumi, q8sclsub))
}

// ---------------------------------------------------------------------------------------
// Float rows.

safe_dot!(
    /// `ggml_vec_dot_f32` (AVX2: 32-wide FMA steps, f32 accumulators).
    f32_f32, f32_f32_imp, 1, 4, 4, sd::f32_f32
);
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f32_f32_imp(n: usize, w: *const u8, x: *const u8) -> f32 {
    let (a, b) = (w as *const f32, x as *const f32);
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i + 8 * k)), _mm256_loadu_ps(b.add(i + 8 * k)), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i)), _mm256_loadu_ps(b.add(i)), acc[0]);
        i += 8;
    }
    let mut sum = hsum_float_8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    while i < n {
        sum += a.add(i).read_unaligned() * b.add(i).read_unaligned();
        i += 1;
    }
    sum
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load_f16x8(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load_bf16x8(p: *const u8) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i))))
}

macro_rules! half_dot {
    ($imp:ident, $load:ident, $scalar:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $imp(n: usize, w: *const u8, x: *const u8) -> f32 {
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i + 32 <= n {
                for (k, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_fmadd_ps($load(w.add(2 * (i + 8 * k))), $load(x.add(2 * (i + 8 * k))), *acc);
                }
                i += 32;
            }
            while i + 8 <= n {
                acc[0] = _mm256_fmadd_ps($load(w.add(2 * i)), $load(x.add(2 * i)), acc[0]);
                i += 8;
            }
            let mut sum = hsum_float_8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
            let conv = $scalar;
            while i < n {
                let a = u16::from_le_bytes([*w.add(2 * i), *w.add(2 * i + 1)]);
                let b = u16::from_le_bytes([*x.add(2 * i), *x.add(2 * i + 1)]);
                sum += conv(a) * conv(b);
                i += 1;
            }
            sum
        }
    };
}

half_dot!(bf16_bf16_imp, load_bf16x8, |h: u16| f32::from_bits((h as u32) << 16));

/// `ggml_vec_dot_f16` of an AVX2 build: four 8-lane fma accumulators over 32-element
/// steps, `GGML_F32x8_REDUCE` (`(a0 + a2) + (a1 + a3)`, halves, two `hadd`s), the
/// leftovers added in `ggml_float` (f64).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_f16_imp(n: usize, w: *const u8, x: *const u8) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let np = n - n % 32;
    for i in (0..np).step_by(32) {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(load_f16x8(w.add(2 * (i + 8 * k))), load_f16x8(x.add(2 * (i + 8 * k))), *acc);
        }
    }
    let mut lanes = [0f32; 32];
    for (k, acc) in acc.iter().enumerate() {
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8 * k), *acc);
    }
    let mut sum = DotLayout::Avx2.reduce(&lanes) as f64;
    let h = |p: *const u8, i: usize| half::f16::from_bits((p.add(2 * i) as *const u16).read_unaligned()).to_f32();
    for i in np..n {
        sum += (h(w, i) * h(x, i)) as f64;
    }
    sum as f32
}

/// The scalar twin of [`f16_f16`]: [`crate::scalar::ops::dot_f16_ggml`] in the AVX2 layout.
fn f16_f16_twin(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let v = |b: &[u8]| -> Vec<half::f16> {
        b[..2 * n].chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]])).collect()
    };
    crate::scalar::ops::dot_f16_ggml(&v(w), &v(x), DotLayout::Avx2)
}

safe_dot!(
    /// `ggml_vec_dot_f16` (AVX2 + F16C; twin: `f16_f16_twin`).
    f16_f16, f16_f16_imp, 1, 2, 2, f16_f16_twin
);
safe_dot!(
    /// `ggml_vec_dot_bf16` (AVX2: widen to f32 and FMA).
    bf16_bf16, bf16_bf16_imp, 1, 2, 2, sd::bf16_bf16
);

// ---------------------------------------------------------------------------------------
// Activation quantizers (ggml-cpu's x86 `quantize_row_q8_0` / `quantize_row_q8_1`).

/// `quantize_row_q8_0` (AVX2): bit-identical to [`crate::scalar::act::quantize_q8_0`].
pub fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let nb = src.len() / 32;
    assert!(dst.len() >= nb * Q8_0_BYTES, "quantize_q8_0: destination too short");
    if !has_avx2() {
        return sact::quantize_q8_0(src, dst);
    }
    // SAFETY: features checked; reads `nb * 32` floats of `src` and writes `nb` blocks of
    // `dst`, both in bounds.
    unsafe { quantize_q8_imp::<false>(nb, src.as_ptr(), dst.as_mut_ptr()) }
}

/// `quantize_row_q8_1` (AVX2): bit-identical to [`crate::scalar::act::quantize_q8_1`].
pub fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    let nb = src.len() / 32;
    assert!(dst.len() >= nb * Q8_1_BYTES, "quantize_q8_1: destination too short");
    if !has_avx2() {
        return sact::quantize_q8_1(src, dst);
    }
    // SAFETY: as for `quantize_q8_0`.
    unsafe { quantize_q8_imp::<true>(nb, src.as_ptr(), dst.as_mut_ptr()) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_q8_imp<const Q8_1: bool>(nb: usize, x: *const f32, y: *mut u8) {
    let bytes = if Q8_1 { Q8_1_BYTES } else { Q8_0_BYTES };
    let qs_off = if Q8_1 { 4 } else { 2 };
    let sign = _mm256_set1_ps(-0.0);
    for i in 0..nb {
        let x = x.add(32 * i);
        let y = y.add(bytes * i);
        let mut v =
            [_mm256_loadu_ps(x), _mm256_loadu_ps(x.add(8)), _mm256_loadu_ps(x.add(16)), _mm256_loadu_ps(x.add(24))];
        let mut max_abs = _mm256_andnot_ps(sign, v[0]);
        max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign, v[1]));
        max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign, v[2]));
        max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign, v[3]));
        let mut max4 = _mm_max_ps(_mm256_extractf128_ps::<1>(max_abs), _mm256_castps256_ps128(max_abs));
        max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
        max4 = _mm_max_ss(max4, _mm_movehdup_ps(max4));
        let max_scalar = _mm_cvtss_f32(max4);
        let d = max_scalar / 127.0;
        let dh = half::f16::from_f32(d).to_bits().to_le_bytes();
        *y = dh[0];
        *y.add(1) = dh[1];
        let id = if max_scalar != 0.0 { 127.0 / max_scalar } else { 0.0 };
        let mul = _mm256_set1_ps(id);
        for v in v.iter_mut() {
            *v = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(*v, mul));
        }
        let mut i0 = _mm256_cvtps_epi32(v[0]);
        let i1 = _mm256_cvtps_epi32(v[1]);
        let mut i2 = _mm256_cvtps_epi32(v[2]);
        let i3 = _mm256_cvtps_epi32(v[3]);
        if Q8_1 {
            let s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
            let s128 = _mm_add_epi32(_mm256_extracti128_si256::<1>(s), _mm256_castsi256_si128(s));
            let s64 = _mm_add_epi32(s128, _mm_unpackhi_epi64(s128, s128));
            let s32 = _mm_add_epi32(s64, _mm_shuffle_epi32::<0b01>(s64));
            let sum = _mm_cvtsi128_si32(s32);
            let sh = half::f16::from_f32(d * sum as f32).to_bits().to_le_bytes();
            *y.add(2) = sh[0];
            *y.add(3) = sh[1];
        }
        i0 = _mm256_packs_epi32(i0, i1);
        i2 = _mm256_packs_epi32(i2, i3);
        i0 = _mm256_packs_epi16(i0, i2);
        i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(y.add(qs_off) as *mut __m256i, i0);
    }
}

/// `quantize_row_q8_K` (ggml-cpu uses the reference on every target): bit-identical to
/// [`crate::scalar::act::quantize_q8_k`] — the same `-127/max` scale, `nearest_int`
/// through the `1.5·2²³` trick (a separate multiply and add, never fused), `MIN(127, ·)`,
/// and the first element of largest magnitude as `max`.
pub fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let nb = src.len() / 256;
    assert!(dst.len() >= nb * Q8_K_BYTES, "quantize_q8_k: destination too short");
    if !has_avx2() {
        return sact::quantize_q8_k(src, dst);
    }
    for (x, y) in src.chunks_exact(256).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
        // SAFETY: features checked; `x` is 256 floats and `y` 292 bytes.
        unsafe { quantize_q8_k_block(x.as_ptr(), y.as_mut_ptr()) }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_q8_k_block(x: *const f32, y: *mut u8) {
    let sign = _mm256_set1_ps(-0.0);
    let mut vmax = _mm256_setzero_ps();
    for k in 0..32 {
        vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x.add(8 * k))));
    }
    let m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(vmax), _mm256_castps256_ps128(vmax));
    let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    let amax = _mm_cvtss_f32(m4);
    if amax == 0.0 || amax.is_nan() {
        // Fall back to the reference for the degenerate cases (all zero, NaN).
        let xs = core::slice::from_raw_parts(x, 256);
        let ys = core::slice::from_raw_parts_mut(y, Q8_K_BYTES);
        return sact::quantize_q8_k(xs, ys);
    }
    // The first element whose magnitude is amax.
    let va = _mm256_set1_ps(amax);
    let mut max = 0f32;
    for k in 0..32 {
        let v = _mm256_loadu_ps(x.add(8 * k));
        let eq = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_andnot_ps(sign, v), va));
        if eq != 0 {
            max = *x.add(8 * k + eq.trailing_zeros() as usize);
            break;
        }
    }
    let iscale = -127.0 / max;
    let vs = _mm256_set1_ps(iscale);
    let magic = _mm256_set1_ps(12582912.0);
    let mant = _mm256_set1_epi32(0x007f_ffff);
    let bias = _mm256_set1_epi32(0x0040_0000);
    let cap = _mm256_set1_epi32(127);
    let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for g in 0..8 {
        let mut q = [_mm256_setzero_si256(); 4];
        for (k, q) in q.iter_mut().enumerate() {
            let v = _mm256_add_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(x.add(32 * g + 8 * k))), magic);
            let i = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(v), mant), bias);
            *q = _mm256_min_epi32(i, cap);
        }
        // bsums of the two 16-groups in these 32 values.
        for h in 0..2 {
            let s = _mm256_add_epi32(q[2 * h], q[2 * h + 1]);
            let s128 = _mm_add_epi32(_mm256_extracti128_si256::<1>(s), _mm256_castsi256_si128(s));
            let s64 = _mm_add_epi32(s128, _mm_unpackhi_epi64(s128, s128));
            let s32 = _mm_add_epi32(s64, _mm_shuffle_epi32::<0b01>(s64));
            let sum = (_mm_cvtsi128_si32(s32) as i16).to_le_bytes();
            *y.add(260 + 2 * (2 * g + h)) = sum[0];
            *y.add(260 + 2 * (2 * g + h) + 1) = sum[1];
        }
        let p01 = _mm256_packs_epi32(q[0], q[1]);
        let p23 = _mm256_packs_epi32(q[2], q[3]);
        let p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm);
        _mm256_storeu_si256(y.add(4 + 32 * g) as *mut __m256i, p);
    }
    let d = (1.0 / iscale).to_le_bytes();
    core::ptr::copy_nonoverlapping(d.as_ptr(), y, 4);
}
