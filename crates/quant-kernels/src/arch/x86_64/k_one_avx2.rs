//! AVX2 one-token (decode) kernels for q4_K and q6_K, four weight rows at a time: the
//! token's Q8_K block loaded once for the four rows, each row's block prefetched 6 rows
//! ahead ([`prefetch_ahead`], as the AVX-512 one-token kernels), each row's float steps
//! those of the kernel it stands in for, so the same bits:
//!
//! - [`q4_k_one`]: llama.cpp's repacked AVX2 `gemv_q4_K_8x8_q8_K` (the one-token path of
//!   `kquant_avx2.rs`'s q4_K tile for matrices of 8k rows): per block and row the exact
//!   integer sums `is = Σ scale·q·x` and `im = Σ min·bsum`, then
//!   `acc = fma(is, d·dx, acc)` and `accm = fma(im, dmin·dx, accm)`, `acc − accm` last —
//!   the four rows' float steps in the four lanes of one vector;
//! - [`q6_k_one`]: ggml's AVX2 `vec_dot_q6_K_q8_K` ([`avx2::q6_k_block`] per block and
//!   row, eight i32 lanes `fma`-accumulated, `hsum_float_8` at the end).

use core::arch::x86_64::*;

use super::avx2::{self, k4_utmp, shuffle_k4};
use super::tiles::{hsum_float_8, load256, prefetch_ahead};
use crate::scalar::act::Q8_K_BYTES;

/// Bytes of a q4_K block.
const Q4_K_BYTES: usize = 144;
/// Bytes of a q6_K block.
const Q6_K_BYTES: usize = 210;

/// Rows ahead of its reads that each row's weights are prefetched ([`prefetch_ahead`]).
const ROWS_AHEAD: usize = 6;

/// `rows − rows % 4` q4_K rows (`nb` blocks each, `w_stride` bytes apart) · one Q8_K row
/// `x`, results to `y[r]`; returns the rows done (the rest is the caller's).
///
/// # Safety
/// AVX2, FMA, F16C present; `rows` rows of `nb` blocks at `w`, `nb` Q8_K blocks at `x`,
/// `rows` floats at `y`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_one(
    w: *const u8,
    w_stride: usize,
    rows: usize,
    nb: usize,
    x: *const u8,
    y: *mut f32,
) -> usize {
    let m4 = _mm256_set1_epi8(0xF);
    let shuf: [__m256i; 8] = core::array::from_fn(|k| shuffle_k4(k));
    let r4 = rows - rows % 4;
    for r in (0..r4).step_by(4) {
        let mut acc = _mm_setzero_ps();
        let mut accm = _mm_setzero_ps();
        for b in 0..nb {
            let xb = x.add(b * Q8_K_BYTES);
            let dx = _mm_set1_ps((xb as *const f32).read_unaligned());
            let xs: [__m256i; 8] = core::array::from_fn(|k| load256(xb.add(4 + 32 * k)));
            // The 32-element sums of the token's block, as 8 i16.
            let bs = load256(xb.add(260));
            let bp = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256::<1>(bs));
            let mut is = [_mm256_setzero_si256(); 4];
            let mut im = [_mm_setzero_si128(); 4];
            let mut dd = [0i32; 4];
            for i in 0..4 {
                let wb = w.add((r + i) * w_stride + b * Q4_K_BYTES);
                prefetch_ahead::<Q4_K_BYTES, 3>(wb, ROWS_AHEAD * w_stride);
                dd[i] = (wb as *const i32).read_unaligned();
                let u = k4_utmp(&*(wb.add(4) as *const [u8; 12]));
                let s16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, u[1] as i32, u[0] as i32));
                im[i] = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, u[3] as i32, u[2] as i32)), bp);
                let sc = _mm256_broadcastsi128_si256(s16);
                let mut sum = _mm256_setzero_si256();
                for c in 0..4 {
                    let bits = load256(wb.add(16 + 32 * c));
                    let lo = _mm256_and_si256(bits, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
                    let pl =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xs[2 * c]), _mm256_shuffle_epi8(sc, shuf[2 * c]));
                    let ph = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(hi, xs[2 * c + 1]),
                        _mm256_shuffle_epi8(sc, shuf[2 * c + 1]),
                    );
                    sum = _mm256_add_epi32(sum, _mm256_add_epi32(pl, ph));
                }
                is[i] = sum;
            }
            // The four rows' exact sums side by side.
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(is[0], is[1]), _mm256_hadd_epi32(is[2], is[3]));
            let is4 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            let im4 = _mm_hadd_epi32(_mm_hadd_epi32(im[0], im[1]), _mm_hadd_epi32(im[2], im[3]));
            // d (low halves) and dmin (high halves) of the four rows.
            let dd = _mm_set_epi32(dd[3], dd[2], dd[1], dd[0]);
            let z = _mm_setzero_si128();
            let dv = _mm_cvtph_ps(_mm_packus_epi32(_mm_and_si128(dd, _mm_set1_epi32(0xffff)), z));
            let mv = _mm_cvtph_ps(_mm_packus_epi32(_mm_srli_epi32::<16>(dd), z));
            acc = _mm_fmadd_ps(_mm_cvtepi32_ps(is4), _mm_mul_ps(dv, dx), acc);
            accm = _mm_fmadd_ps(_mm_cvtepi32_ps(im4), _mm_mul_ps(mv, dx), accm);
        }
        _mm_storeu_ps(y.add(r), _mm_sub_ps(acc, accm));
    }
    r4
}

/// `rows − rows % 4` q6_K rows · one Q8_K row `x` (as [`q4_k_one`]), in the arithmetic of
/// ggml's AVX2 `vec_dot`; returns the rows done.
///
/// # Safety
/// As [`q4_k_one`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k_one(
    w: *const u8,
    w_stride: usize,
    rows: usize,
    nb: usize,
    x: *const u8,
    y: *mut f32,
) -> usize {
    let r4 = rows - rows % 4;
    for r in (0..r4).step_by(4) {
        let mut acc = [_mm256_setzero_ps(); 4];
        for b in 0..nb {
            let xb = x.add(b * Q8_K_BYTES);
            for (i, acc) in acc.iter_mut().enumerate() {
                let wb = w.add((r + i) * w_stride + b * Q6_K_BYTES);
                prefetch_ahead::<Q6_K_BYTES, 5>(wb, ROWS_AHEAD * w_stride);
                let (d, sumi) = avx2::q6_k_block(wb, xb);
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), *acc);
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            *y.add(r + i) = hsum_float_8(*acc);
        }
    }
    r4
}
