//! q4_K × one Q8_K token on AVX-512 VNNI, four weight rows at a time, in the arithmetic of
//! llama.cpp's repacked `q4_K_8x8` gemv: per block and row the exact integer sums
//! `is = Σ scale·q·x` and `im = Σ min·bsum`, then `acc = fma(is, d·dx, acc)` and
//! `accm = fma(im, dmin·dx, accm)`, the result `acc − accm` — the same float operations
//! per row as the one-token path of `vnni::q4_k_imp`, so the same bits. The integer sums
//! are computed in wider vectors (two sub-blocks per 512-bit register): `vpdpbusd` sums of
//! four q·x products per i32 lane (|sum| ≤ 4·15·128, so they narrow to i16 exactly), two
//! such vectors narrowed into one by `vpackssdw` and multiplied by the sub-block scales
//! with `vpdpwssd` (per 128 weights: two `vpdpbusd`, one pack, one `vpdpwssd`, one scale
//! permute, where `vpmaddubsw` + `vpdpwssd` took four multiply-adds and two permutes) — and
//! the four rows reduced together.

use core::arch::x86_64::*;

use super::tiles::prefetch_ahead;
use crate::scalar::act::Q8_K_BYTES;

/// Bytes of a q4_K block.
const WB: usize = 144;

/// Rows ahead of its reads that each row's weights are prefetched ([`prefetch_ahead`]).
const ROWS_AHEAD: usize = 6;

/// The 8 scales (low u64: bytes 0–7) and 8 mins (high u64) of a q4_K block's 12 scale
/// bytes (`get_scale_min_k4`), as ggml-cpu unpacks them with 32-bit masks.
#[inline(always)]
fn scales_mins(b: &[u8; 12]) -> (u64, u64) {
    const K1: u32 = 0x3f3f_3f3f;
    const K2: u32 = 0x0f0f_0f0f;
    const K3: u32 = 0x0303_0303;
    let u = [
        u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
    ];
    let s = [u[0] & K1, (u[2] & K2) | (((u[0] >> 6) & K3) << 4)];
    let m = [u[1] & K1, ((u[2] >> 4) & K2) | (((u[1] >> 6) & K3) << 4)];
    (s[0] as u64 | (s[1] as u64) << 32, m[0] as u64 | (m[1] as u64) << 32)
}

thread_local! {
    /// The token's activation layout ([`q4_k_one`]), kept per thread between calls so that
    /// no call allocates once it has grown to the longest row.
    static LAYOUT: core::cell::Cell<Vec<__m512i>> = const { core::cell::Cell::new(Vec::new()) };
}

/// `rows` q4_K rows (`nb` blocks each, `w_stride` bytes apart) · one Q8_K row `x`,
/// results to `y[r]`. Rows past the last multiple of 4 go to `rest`.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI; `rows` rows of `nb` blocks at `w`, `nb` Q8_K blocks at `x`,
/// `rows` floats at `y`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q4_k_one(
    w: *const u8,
    w_stride: usize,
    rows: usize,
    nb: usize,
    x: *const u8,
    y: *mut f32,
) -> usize {
    let m4 = _mm512_set1_epi8(0xF);
    // After `vpackssdw` of the lane sums of sub-blocks (a, a + 2) and (a + 1, a + 3), each
    // 128-bit lane holds four i16 of one sub-block then four of the next: lanes 0–1
    // sub-blocks (a, a + 1), lanes 2–3 (a + 2, a + 3). Each i16 takes its sub-block's scale.
    let sidx = |a: i16| {
        let mut v = [0i16; 32];
        for (j, s) in v.iter_mut().enumerate() {
            *s = a + 2 * (j / 16) as i16 + ((j % 8) / 4) as i16;
        }
        _mm512_loadu_si512(v.as_ptr() as *const __m512i)
    };
    let sidx = [sidx(0), sidx(4)];
    // The token's layout, once per call and shared by every row: per block the four
    // 512-bit activation vectors matching the weights' nibble order (elements 0–31 with
    // 64–95, 32–63 with 96–127, 128–159 with 192–223, 160–191 with 224–255), then its
    // 32-element bsums as 8 i16 beside dx.
    let mut lay = LAYOUT.with(|c| c.take());
    lay.clear();
    lay.reserve(5 * nb);
    for b in 0..nb {
        let xb = x.add(b * Q8_K_BYTES);
        let ld = |o: usize| _mm256_loadu_si256(xb.add(4 + o) as *const __m256i);
        let cat = |lo: __m256i, hi: __m256i| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
        lay.push(cat(ld(0), ld(64)));
        lay.push(cat(ld(32), ld(96)));
        lay.push(cat(ld(128), ld(192)));
        lay.push(cat(ld(160), ld(224)));
        let bs = _mm256_loadu_si256(xb.add(4 + 256) as *const __m256i);
        let bp = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256::<1>(bs));
        let dx = _mm_castps_si128(_mm_set1_ps((xb as *const f32).read_unaligned()));
        lay.push(_mm512_inserti32x4::<1>(_mm512_castsi128_si512(bp), dx));
    }
    let r4 = rows - rows % 4;
    let mut r = 0;
    while r < r4 {
        let mut acc = _mm_setzero_ps();
        let mut accm = _mm_setzero_ps();
        for b in 0..nb {
            let xs = &lay[5 * b..5 * b + 4];
            let bp = _mm512_castsi512_si128(lay[5 * b + 4]);
            let vdx = _mm_castsi128_ps(_mm512_extracti32x4_epi32::<1>(lay[5 * b + 4]));
            let mut is = [_mm512_setzero_si512(); 4];
            let mut im = [_mm_setzero_si128(); 4];
            let mut d = [0u64; 2];
            for (i, (is, im)) in is.iter_mut().zip(im.iter_mut()).enumerate() {
                let wb = w.add((r + i) * w_stride + b * WB);
                prefetch_ahead::<WB, 3>(wb, ROWS_AHEAD * w_stride);
                d[i / 2] |= ((wb as *const u32).read_unaligned() as u64) << (32 * (i % 2));
                let (s8, m8) = scales_mins(&*(wb.add(4) as *const [u8; 12]));
                let s16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(s8 as i64)));
                *im = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(m8 as i64)), bp);
                let z0 = _mm512_loadu_si512(wb.add(16) as *const __m512i);
                let z1 = _mm512_loadu_si512(wb.add(80) as *const __m512i);
                let q = [
                    _mm512_and_si512(z0, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(z0), m4),
                    _mm512_and_si512(z1, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(z1), m4),
                ];
                // four q·x products per i32 lane: |sum| ≤ 4·15·128, so `vpackssdw` is exact
                let p: [__m512i; 4] =
                    core::array::from_fn(|k| _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[k], xs[k]));
                for h in 0..2 {
                    let pk = _mm512_packs_epi32(p[2 * h], p[2 * h + 1]);
                    *is = _mm512_dpwssd_epi32(*is, pk, _mm512_permutexvar_epi16(sidx[h], s16));
                }
            }
            // the four rows' sums side by side: [is0, is1, is2, is3] and [im0, …, im3]
            let t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(is[0], is[1]), _mm512_unpackhi_epi32(is[0], is[1]));
            let t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(is[2], is[3]), _mm512_unpackhi_epi32(is[2], is[3]));
            let u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
            let h = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64::<1>(u));
            let is4 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            let im4 = _mm_hadd_epi32(_mm_hadd_epi32(im[0], im[1]), _mm_hadd_epi32(im[2], im[3]));
            // d (low half) and dmin (high half) of the four rows
            let dd = _mm_set_epi64x(d[1] as i64, d[0] as i64);
            let z = _mm_setzero_si128();
            let dv = _mm_cvtph_ps(_mm_packus_epi32(_mm_and_si128(dd, _mm_set1_epi32(0xffff)), z));
            let mv = _mm_cvtph_ps(_mm_packus_epi32(_mm_srli_epi32::<16>(dd), z));
            acc = _mm_fmadd_ps(_mm_cvtepi32_ps(is4), _mm_mul_ps(dv, vdx), acc);
            accm = _mm_fmadd_ps(_mm_cvtepi32_ps(im4), _mm_mul_ps(mv, vdx), accm);
        }
        _mm_storeu_ps(y.add(r), _mm_sub_ps(acc, accm));
        r += 4;
    }
    LAYOUT.with(|c| c.set(lay));
    r4
}
