//! q6_K × one Q8_K token on AVX-512 VNNI, four weight rows at a time, in the arithmetic of
//! ggml-cpu's AVX2 `ggml_vec_dot_q6_K_q8_K` (which an AVX-512 build runs): per block and
//! row the eight i32 lanes `sumi[l] = Σ_chunks scale·(q·x over elements 4l..4l+3 of each
//! 32-element chunk) − 32·(bsum[2l]·sc[2l] + bsum[2l+1]·sc[2l+1])`, then
//! `acc = fma(d·dx, float(sumi), acc)` lane by lane and `hsum_float_8(acc)` at the end — the
//! same float operations as the one-token path of `vnni::q6_k_imp`, so the same bits. The
//! lanes' integers are exact whatever the order; here each 512-bit vector holds 64
//! elements of a block (two 32-element chunks: lanes 0–7 the first, 8–15 the second,
//! folded together), the weights unpacked 64 at a time (`ql` low / high nibbles with the
//! `qh` bit pairs shifted per 256-bit half), products by `vpmaddubsw` (q ≤ 63: no
//! saturation) times the 16-element scales by `vpdpwssd`. The four rows' d are converted
//! together and each pair of rows shares its scale widening, fold and correction.

use core::arch::x86_64::*;

use super::tiles::Ahead;
use crate::scalar::act::Q8_K_BYTES;

/// Bytes of a q6_K block: `ql` 128, `qh` 64, `scales` 16, `d` 2.
const WB: usize = 210;

/// How far ahead (at least) the next rows are prefetched, as one address-order stream
/// ([`Ahead`]) rather than each row 6 rows ahead ([`super::tiles::prefetch_ahead`]): on a
/// Zen 5 VM (session 30) q6_K beyond the caches at two threads 82.5–82.9 % of the stream
/// loop (per row 78–79 %), 8192 columns 79–80 % (72–74 %); engine decode llama-1b Q4_K_M
/// (its output matrix is q6_K) 87.6 / 90.1 → 92.1 / 93.0 t/s, qwen3-1.7b Q4_K_M 60.9 / 62.4
/// → 63.9 / 63.8.
const AHEAD_BYTES: usize = 9 * 1024;

/// `rows` q6_K rows (`nb` blocks each, `w_stride` bytes apart) · one Q8_K row `x`,
/// results to `y[r]`. Returns the rows done (a multiple of 4); the rest is the caller's.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI; `rows` rows of `nb` blocks at `w`, `nb` Q8_K blocks at `x`,
/// `rows` floats at `y`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q6_k_one(
    w: *const u8,
    w_stride: usize,
    rows: usize,
    nb: usize,
    x: *const u8,
    y: *mut f32,
) -> usize {
    let m4 = _mm512_set1_epi8(0xF);
    let m30 = _mm512_set1_epi8(0x30);
    // the qh bit pair of an element moved to bits 4–5 of its byte, per 16-bit lane (the
    // first 256 bits being elements l, the second l + 32): for the low nibbles bits 0–1 / 2–3
    // shifted left by 4 / 2, for the high nibbles bits 4–5 / 6–7 right by 0 / 2 (bits a
    // 16-bit shift carries across bytes are masked off with the rest)
    let shl_lo = _mm512_inserti64x4::<1>(_mm512_set1_epi16(4), _mm256_set1_epi16(2));
    let shr_hi = _mm512_inserti64x4::<1>(_mm512_set1_epi16(0), _mm256_set1_epi16(2));
    // i16 pair lane j of the 64 elements starting at 64·k takes scale 4k + j/8 of its row,
    // the rows of a pair being i16 0–15 and 16–31 of their widened scales
    let sidx: [[__m512i; 2]; 4] = core::array::from_fn(|k| {
        core::array::from_fn(|i| {
            let mut v = [0i16; 32];
            for (j, s) in v.iter_mut().enumerate() {
                *s = (16 * i + 4 * k + j / 8) as i16;
            }
            _mm512_loadu_si512(v.as_ptr() as *const __m512i)
        })
    });
    // row 2p + h's d·dx in lanes 8h..8h + 7
    let didx: [__m512i; 2] = core::array::from_fn(|p| {
        let mut v = [0i32; 16];
        for (j, s) in v.iter_mut().enumerate() {
            *s = (2 * p + j / 8) as i32;
        }
        _mm512_loadu_si512(v.as_ptr() as *const __m512i)
    });
    // The 4-row group `ahead_rows` on (at least `AHEAD_BYTES` ahead) prefetched as one
    // stream in address order at the rate the current group is read.
    let ahead_rows = AHEAD_BYTES.div_ceil(w_stride).next_multiple_of(4);
    let r4 = rows - rows % 4;
    let mut r = 0;
    while r < r4 {
        // rows (0, 1) in acc[0], (2, 3) in acc[1]: lanes 0–7 the first row's, 8–15 the second's
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut ahead = Ahead::new(w.wrapping_add((r + ahead_rows) * w_stride));
        for b in 0..nb {
            ahead.advance(4 * WB);
            let xb = x.add(b * Q8_K_BYTES);
            let xs: [__m512i; 4] = core::array::from_fn(|k| _mm512_loadu_si512(xb.add(4 + 64 * k) as *const __m512i));
            let bsums = _mm512_broadcast_i64x4(_mm256_loadu_si256(xb.add(4 + 256) as *const __m256i));
            let wb: [*const u8; 4] = core::array::from_fn(|i| w.add((r + i) * w_stride + b * WB));
            // the four rows' d, then d·dx
            let mut dh = _mm_cvtsi32_si128((wb[0].add(208) as *const u16).read_unaligned() as i32);
            dh = _mm_insert_epi16::<1>(dh, (wb[1].add(208) as *const u16).read_unaligned() as i32);
            dh = _mm_insert_epi16::<2>(dh, (wb[2].add(208) as *const u16).read_unaligned() as i32);
            dh = _mm_insert_epi16::<3>(dh, (wb[3].add(208) as *const u16).read_unaligned() as i32);
            let d4 = _mm_mul_ps(_mm_set1_ps((xb as *const f32).read_unaligned()), _mm_cvtph_ps(dh));
            let d4 = _mm512_castps128_ps512(d4);
            for p in 0..2 {
                // the pair's 32 scales widened to i16 (row 2p in the low half)
                let sc8 = _mm256_inserti128_si256::<1>(
                    _mm256_castsi128_si256(_mm_loadu_si128(wb[2 * p].add(192) as *const __m128i)),
                    _mm_loadu_si128(wb[2 * p + 1].add(192) as *const __m128i),
                );
                let s16 = _mm512_cvtepi8_epi16(sc8);
                let mut lanes = [_mm512_setzero_si512(); 2];
                for (i, lanes) in lanes.iter_mut().enumerate() {
                    let wb = wb[2 * p + i];
                    for half in 0..2 {
                        let ql = _mm512_loadu_si512(wb.add(64 * half) as *const __m512i);
                        let qh = _mm256_loadu_si256(wb.add(128 + 32 * half) as *const __m256i);
                        let qh2 = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qh), qh);
                        let hl = _mm512_and_si512(_mm512_sllv_epi16(qh2, shl_lo), m30);
                        let hh = _mm512_and_si512(_mm512_srlv_epi16(qh2, shr_hi), m30);
                        // m4 ? nibble : high bits (0xCA: the bitwise select A ? B : C)
                        let q = [
                            _mm512_ternarylogic_epi32::<0xCA>(m4, ql, hl),
                            _mm512_ternarylogic_epi32::<0xCA>(m4, _mm512_srli_epi16::<4>(ql), hh),
                        ];
                        for (k2, q) in q.iter().enumerate() {
                            let k = 2 * half + k2;
                            let pr = _mm512_maddubs_epi16(*q, xs[k]);
                            *lanes = _mm512_dpwssd_epi32(*lanes, pr, _mm512_permutexvar_epi16(sidx[k][i], s16));
                        }
                    }
                }
                // each row's two 32-element chunks folded: [row 2p, row 2p + 1] in 8 lanes each
                let folded = _mm512_add_epi32(
                    _mm512_shuffle_i64x2::<0x44>(lanes[0], lanes[1]),
                    _mm512_shuffle_i64x2::<0xEE>(lanes[0], lanes[1]),
                );
                let corr = _mm512_slli_epi32::<5>(_mm512_madd_epi16(bsums, s16));
                let si = _mm512_sub_epi32(folded, corr);
                let dv = _mm512_permutexvar_ps(didx[p], d4);
                acc[p] = _mm512_fmadd_ps(dv, _mm512_cvtepi32_ps(si), acc[p]);
            }
        }
        for (p, a) in acc.iter().enumerate() {
            for h in 0..2 {
                let v = if h == 0 {
                    _mm512_castps512_ps256(*a)
                } else {
                    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(*a)))
                };
                // ggml's hsum_float_8
                let mut s = _mm_add_ps(_mm256_extractf128_ps::<1>(v), _mm256_castps256_ps128(v));
                s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                s = _mm_add_ss(s, _mm_movehdup_ps(s));
                *y.add(r + 2 * p + h) = _mm_cvtss_f32(s);
            }
        }
        r += 4;
    }
    r4
}
