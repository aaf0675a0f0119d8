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
//! the four rows reduced together. The four rows' block headers are unpacked together in
//! one 512-bit register instead of row by row in scalar code (one token in L2 on a Zen 5
//! VM: 39–43 → 44–50 GB/s per thread).

use core::arch::x86_64::*;

use super::tiles::Ahead;
use crate::scalar::act::Q8_K_BYTES;

/// Bytes of a q4_K block.
const WB: usize = 144;

/// How far ahead (at least) the next rows are prefetched, as one address-order stream
/// ([`Ahead`]) rather than each row 6 rows ahead ([`super::tiles::prefetch_ahead`]): on a
/// Zen 5 VM (session 30) q4_K 8192 × 2048 beyond the caches at two threads 85.6–86.6 % of
/// the stream loop at 7–9 KiB (12–16 KiB 84–85 %) against 80–81 % per row; engine decode
/// llama-1b Q4_K_M 86.9 / 88.0 → 92.2 / 92.7 t/s, qwen3-1.7b Q4_K_M 62.8 / 61.8 → 65.4 / 65.5.
const AHEAD_BYTES: usize = 9 * 1024;

/// 512-bit vectors per block in the token's layout: four activation vectors, the bsums, dx.
const LAY: usize = 6;

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
    let zero = _mm512_setzero_si512();
    // After `vpackssdw` of the lane sums of sub-blocks (a, a + 2) and (a + 1, a + 3), each
    // 128-bit lane holds four i16 of one sub-block then four of the next: lanes 0–1
    // sub-blocks (a, a + 1), lanes 2–3 (a + 2, a + 3). Each i16 takes its sub-block's scale,
    // row i's scales being i16 8i..8i + 7 of the four rows' unpacked scales.
    let sidx = |a: i16, i: i16| {
        let mut v = [0i16; 32];
        for (j, s) in v.iter_mut().enumerate() {
            *s = 8 * i + a + 2 * (j / 16) as i16 + ((j % 8) / 4) as i16;
        }
        _mm512_loadu_si512(v.as_ptr() as *const __m512i)
    };
    let sidx: [[__m512i; 4]; 2] = [0, 4].map(|a| core::array::from_fn(|i| sidx(a, i as i16)));
    // ggml's `get_scale_min_k4` for the four rows at once, each row's 16 header bytes
    // (d, dmin, 12 scale bytes: dwords dd, u0, u1, u2) in one 128-bit lane: scales s0–3 =
    // u0 & 0x3f…, s4–7 = (u2 & 0x0f…) | ((u0 >> 2) & 0x30…), mins m0–3 = u1 & 0x3f…,
    // m4–7 = ((u2 >> 4) & 0x0f…) | ((u1 >> 2) & 0x30…) — as dwords (u0, u2, u1, u2) shifted
    // right by (0, 0, 0, 4) and masked, or'ed with (u0, u0, u1, u1) >> 2 masked
    let lane4 = |a: i32, b: i32, c: i32, d: i32| _mm512_broadcast_i32x4(_mm_setr_epi32(a, b, c, d));
    let (k1, k2, k30) = (0x3f3f_3f3f, 0x0f0f_0f0f, 0x3030_3030);
    let shr = lane4(0, 0, 0, 4);
    let mask_a = lane4(k1, k2, k1, k2);
    let mask_b = lane4(0, k30, 0, k30);
    // dword 0 of each 128-bit lane of `a`, then of `b`
    let gather = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
    // (d0, m0, d1, m1, …) → (d0, d1, d2, d3, m0, m1, m2, m3)
    let split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    // The token's layout, once per call and shared by every row: per block the four
    // 512-bit activation vectors matching the weights' nibble order (elements 0–31 with
    // 64–95, 32–63 with 96–127, 128–159 with 192–223, 160–191 with 224–255), its
    // 32-element bsums as 8 i16 in each 128-bit lane, and dx in every lane.
    let mut lay = LAYOUT.with(|c| c.take());
    lay.clear();
    lay.reserve(LAY * nb);
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
        lay.push(_mm512_broadcast_i32x4(bp));
        lay.push(_mm512_castps_si512(_mm512_set1_ps((xb as *const f32).read_unaligned())));
    }
    // The 4-row group `ahead_rows` on (at least `AHEAD_BYTES` ahead) prefetched as one
    // stream in address order at the rate the current group is read.
    let ahead_rows = AHEAD_BYTES.div_ceil(w_stride).next_multiple_of(4);
    let r4 = rows - rows % 4;
    let mut r = 0;
    while r < r4 {
        let mut ahead = Ahead::new(w.wrapping_add((r + ahead_rows) * w_stride));
        // (acc for the four rows, accm for the four rows)
        let mut acc = _mm256_setzero_ps();
        for b in 0..nb {
            let l = &lay[LAY * b..LAY * (b + 1)];
            ahead.advance(4 * WB);
            let wb: [*const u8; 4] = core::array::from_fn(|i| w.add((r + i) * w_stride + b * WB));
            // the four rows' headers, row i in 128-bit lane i
            let ld = |i: usize| _mm_loadu_si128(wb[i] as *const __m128i);
            let mut hdr = _mm512_castsi128_si512(ld(0));
            hdr = _mm512_inserti32x4::<1>(hdr, ld(1));
            hdr = _mm512_inserti32x4::<2>(hdr, ld(2));
            hdr = _mm512_inserti32x4::<3>(hdr, ld(3));
            let p = _mm512_srlv_epi32(_mm512_shuffle_epi32::<0xED>(hdr), shr);
            let q = _mm512_and_si512(_mm512_srli_epi32::<2>(_mm512_shuffle_epi32::<0xA5>(hdr)), mask_b);
            // (p & mask_a) | q
            let sm = _mm512_ternarylogic_epi32::<0xEA>(p, mask_a, q);
            let s16 = _mm512_unpacklo_epi8(sm, zero);
            let im = _mm512_madd_epi16(_mm512_unpackhi_epi8(sm, zero), l[4]);
            let mut is = [_mm512_setzero_si512(); 4];
            for (i, is) in is.iter_mut().enumerate() {
                let z0 = _mm512_loadu_si512(wb[i].add(16) as *const __m512i);
                let z1 = _mm512_loadu_si512(wb[i].add(80) as *const __m512i);
                let q = [
                    _mm512_and_si512(z0, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(z0), m4),
                    _mm512_and_si512(z1, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(z1), m4),
                ];
                // four q·x products per i32 lane: |sum| ≤ 4·15·128, so `vpackssdw` is exact
                let p: [__m512i; 4] = core::array::from_fn(|k| _mm512_dpbusd_epi32(zero, q[k], l[k]));
                for h in 0..2 {
                    let pk = _mm512_packs_epi32(p[2 * h], p[2 * h + 1]);
                    *is = _mm512_dpwssd_epi32(*is, pk, _mm512_permutexvar_epi16(sidx[h][i], s16));
                }
            }
            // the four rows' sums side by side: [is0, is1, is2, is3]
            let t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(is[0], is[1]), _mm512_unpackhi_epi32(is[0], is[1]));
            let t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(is[2], is[3]), _mm512_unpackhi_epi32(is[2], is[3]));
            let u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
            let h = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64::<1>(u));
            let is4 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            // each lane's four mins products summed into all its dwords, then [im0..im3] and
            // the rows' (d, dmin) dwords gathered
            let im = _mm512_add_epi32(im, _mm512_shuffle_epi32::<0x4E>(im));
            let im = _mm512_add_epi32(im, _mm512_shuffle_epi32::<0xB1>(im));
            let g = _mm512_permutex2var_epi32(im, gather, hdr);
            let isim = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(is4), _mm512_castsi512_si128(g));
            // d (low half) and dmin (high half) of the four rows: [d0..d3, dmin0..dmin3]
            let dm = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm512_extracti32x4_epi32::<1>(g)), split);
            let vdx = _mm512_castps512_ps256(_mm512_castsi512_ps(l[5]));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isim), _mm256_mul_ps(dm, vdx), acc);
        }
        let a = _mm256_castps256_ps128(acc);
        _mm_storeu_ps(y.add(r), _mm_sub_ps(a, _mm256_extractf128_ps::<1>(acc)));
        r += 4;
    }
    LAYOUT.with(|c| c.set(lay));
    r4
}
