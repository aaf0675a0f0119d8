//! AVX2 tile kernels for q2_K…q6_K × Q8_K in the arithmetic of llama.cpp's AVX2 build for
//! the whole product ([`crate::scalar::ktiled`], whose functions are the scalar twins):
//! the tiled K-quant matmul for 8+ tokens, q4_K's repacked 8×8 gemv / 4-token gemm for
//! matrices of 8k rows, and ggml's AVX2 `vec_dot` (the kernels of `avx2.rs`) otherwise.
//!
//! Each weight block is decoded once per row into eight 32-byte vectors of quants
//! (`q[k]` = elements `32k..32k+32`, unsigned), the i16 scale of each `maddubs` lane's
//! 16-element group, and per group the scale and the min as i16 (for `madd`s with the
//! Q8_K block sums), then dotted with up to 8 tokens' activations: `maddubs(q, x)` (no
//! saturation: `q ≤ 63`), `madd` with the lane scales, exact i32 sums. q3_K subtracts
//! `4·Σx` per lane where its high bit is clear, q6_K `32·Σ scale·bsum` per block — the
//! exact `Σ scale·value·x` either way; only the float steps of the path decide the bits.

use core::arch::x86_64::*;

use super::has_avx2;
use super::tiles::{check_tile, f16_at, hsum_i32_8, load256};
use crate::registry::Tile;
use crate::scalar::act::Q8_K_BYTES;
use crate::scalar::iq4::Path;
use crate::scalar::ktiled::{self as s, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K};

pub(super) struct KBlock {
    pub(super) q: [__m256i; 8],
    /// i16 scale per `maddubs` lane of `q[k]` (lanes 0–7: group `2k`, 8–15: `2k + 1`).
    pub(super) s16: [__m256i; 8],
    /// i16 scale per 16-element group (q6_K's `−32` correction).
    pub(super) sc16: __m256i,
    /// i16 min per 16-element group (q2_K, q4_K, q5_K).
    pub(super) mn16: __m256i,
    pub(super) d: f32,
    pub(super) dmin: f32,
}

/// Sixteen i8 group scales → the eight lane-scale vectors (`s16[k]`: group `2k` in the
/// low 128 bits, `2k + 1` in the high ones) and the scales as sixteen i16.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn group_scales(sc: __m128i) -> ([__m256i; 8], __m256i) {
    let sc16 = _mm256_cvtepi8_epi16(sc);
    let mut g = [0i16; 16];
    _mm256_storeu_si256(g.as_mut_ptr() as *mut __m256i, sc16);
    let s16 = core::array::from_fn(|k| _mm256_set_m128i(_mm_set1_epi16(g[2 * k + 1]), _mm_set1_epi16(g[2 * k])));
    (s16, sc16)
}

/// q4_K / q5_K scales (one per 32-element sub-block) and mins (repeated per 16-group).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn k4_scales(b: *const u8) -> ([__m256i; 8], __m256i) {
    let (sc, mn) = crate::scalar::dots::scale_min_k4(&*(b.add(4) as *const [u8; 12]));
    let s16 = core::array::from_fn(|k| _mm256_set1_epi16(sc[k] as i16));
    let m: [i16; 16] = core::array::from_fn(|g| mn[g / 2] as i16);
    (s16, _mm256_loadu_si256(m.as_ptr() as *const __m256i))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn decode_q4_k(b: *const u8) -> KBlock {
    let m4 = _mm256_set1_epi8(0xF);
    let (s16, mn16) = k4_scales(b);
    let mut q = [_mm256_setzero_si256(); 8];
    for c in 0..4 {
        let bits = load256(b.add(16 + 32 * c));
        q[2 * c] = _mm256_and_si256(bits, m4);
        q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
    }
    KBlock { q, s16, sc16: _mm256_setzero_si256(), mn16, d: f16_at(b), dmin: f16_at(b.add(2)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn decode_q5_k(b: *const u8) -> KBlock {
    let m4 = _mm256_set1_epi8(0xF);
    let one = _mm256_set1_epi8(1);
    let (s16, mn16) = k4_scales(b);
    let hbits = load256(b.add(16));
    let mut q = [_mm256_setzero_si256(); 8];
    for c in 0..4 {
        let bits = load256(b.add(48 + 32 * c));
        let h0 = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c as i32)), one);
        let h1 = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c as i32 + 1)), one);
        q[2 * c] = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_slli_epi16::<4>(h0));
        q[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4), _mm256_slli_epi16::<4>(h1));
    }
    KBlock { q, s16, sc16: _mm256_setzero_si256(), mn16, d: f16_at(b), dmin: f16_at(b.add(2)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn decode_q6_k(b: *const u8) -> KBlock {
    let m3 = _mm256_set1_epi8(3);
    let m15 = _mm256_set1_epi8(15);
    let mut q = [_mm256_setzero_si256(); 8];
    for j in 0..2 {
        let ql1 = load256(b.add(64 * j));
        let ql2 = load256(b.add(64 * j + 32));
        let qh = load256(b.add(128 + 32 * j));
        q[4 * j] = _mm256_or_si256(_mm256_and_si256(ql1, m15), _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m3)));
        q[4 * j + 1] = _mm256_or_si256(
            _mm256_and_si256(ql2, m15),
            _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<2>(qh), m3)),
        );
        q[4 * j + 2] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m15),
            _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<4>(qh), m3)),
        );
        q[4 * j + 3] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql2), m15),
            _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<6>(qh), m3)),
        );
    }
    let (s16, sc16) = group_scales(_mm_loadu_si128(b.add(192) as *const __m128i));
    KBlock { q, s16, sc16, mn16: _mm256_setzero_si256(), d: f16_at(b.add(208)), dmin: 0.0 }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn decode_q3_k(b: *const u8) -> KBlock {
    let m3 = _mm256_set1_epi8(3);
    let one = _mm256_set1_epi8(1);
    let hbits = load256(b);
    let mut q = [_mm256_setzero_si256(); 8];
    for j in 0..2 {
        let bits = load256(b.add(32 + 32 * j));
        for s in 0..4 {
            let k = 4 * j + s;
            let l = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * s as i32)), m3);
            let h = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(k as i32)), one);
            q[k] = _mm256_or_si256(l, _mm256_slli_epi16::<2>(h));
        }
    }
    const KMASK1: u32 = 0x03030303;
    const KMASK2: u32 = 0x0f0f0f0f;
    let p = b.add(96) as *const u32;
    let aux = [p.read_unaligned(), p.add(1).read_unaligned(), p.add(2).read_unaligned()];
    let sc = _mm_sub_epi8(
        _mm_set_epi32(
            (((aux[1] >> 4) & KMASK2) | (((aux[2] >> 6) & KMASK1) << 4)) as i32,
            (((aux[0] >> 4) & KMASK2) | (((aux[2] >> 4) & KMASK1) << 4)) as i32,
            ((aux[1] & KMASK2) | (((aux[2] >> 2) & KMASK1) << 4)) as i32,
            ((aux[0] & KMASK2) | ((aux[2] & KMASK1) << 4)) as i32,
        ),
        _mm_set1_epi8(32),
    );
    let (s16, sc16) = group_scales(sc);
    KBlock { q, s16, sc16, mn16: _mm256_setzero_si256(), d: f16_at(b.add(108)), dmin: 0.0 }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn decode_q2_k(b: *const u8) -> KBlock {
    let m3 = _mm256_set1_epi8(3);
    let mut q = [_mm256_setzero_si256(); 8];
    for j in 0..2 {
        let bits = load256(b.add(16 + 32 * j));
        for s in 0..4 {
            q[4 * j + s] = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * s as i32)), m3);
        }
    }
    let raw = _mm_loadu_si128(b as *const __m128i);
    let (s16, _) = group_scales(_mm_and_si128(raw, _mm_set1_epi8(0xF)));
    let mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(raw), _mm_set1_epi8(0xF)));
    KBlock { q, s16, sc16: _mm256_setzero_si256(), mn16, d: f16_at(b.add(80)), dmin: f16_at(b.add(82)) }
}

/// Weight rows `0..rows` against tokens `t0..t0+T` along `path` (`Tiled` or `Repack`),
/// K type `TY` (`WB` bytes per block).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn imp<const TY: u32, const WB: usize, const T: usize>(
    t: &Tile<'_>,
    nb: usize,
    tiled: bool,
    t0: usize,
    y: *mut f32,
    y_stride: usize,
) {
    let four = _mm256_set1_epi8(4);
    let (w, x) = (t.w.as_ptr(), t.x.as_ptr());
    for r in 0..t.rows {
        let wr = w.add(r * t.w_stride);
        let mut acc = [0f32; T];
        let mut acc_m = [0f32; T];
        for b in 0..nb {
            let kb = match TY {
                Q2_K => decode_q2_k(wr.add(b * WB)),
                Q3_K => decode_q3_k(wr.add(b * WB)),
                Q4_K => decode_q4_k(wr.add(b * WB)),
                Q5_K => decode_q5_k(wr.add(b * WB)),
                _ => decode_q6_k(wr.add(b * WB)),
            };
            for tt in 0..T {
                let xb = x.add((t0 + tt) * t.x_stride + b * Q8_K_BYTES);
                let dx = (xb as *const f32).read_unaligned();
                let bsums = load256(xb.add(260));
                let mut sub = [_mm256_setzero_si256(); 8];
                for (k, sk) in sub.iter_mut().enumerate() {
                    let xk = load256(xb.add(4 + 32 * k));
                    let mut p = _mm256_maddubs_epi16(kb.q[k], xk);
                    if TY == Q3_K {
                        p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(four, xk));
                    }
                    *sk = _mm256_madd_epi16(p, kb.s16[k]);
                }
                let sum8 = |lo: usize, hi: usize| {
                    let mut v = sub[lo];
                    for s in &sub[lo + 1..hi] {
                        v = _mm256_add_epi32(v, *s);
                    }
                    v
                };
                // The min (q2/q4/q5) or offset (q6) terms per pair of groups, exact.
                let mins = _mm256_madd_epi16(kb.mn16, bsums);
                if tiled {
                    let mut s1 = hsum_i32_8(sum8(0, 8));
                    if TY == Q6_K {
                        s1 -= 32 * hsum_i32_8(_mm256_madd_epi16(kb.sc16, bsums));
                    }
                    let mut rr = s1 as f32 * kb.d;
                    if matches!(TY, Q2_K | Q4_K | Q5_K) {
                        rr = (-kb.dmin).mul_add(hsum_i32_8(mins) as f32, rr);
                    }
                    acc[tt] = rr.mul_add(dx, acc[tt]);
                } else if t0 + tt < t.batched {
                    // q4_K's repacked 4-token gemm: per 64-element pair of sub-blocks.
                    let mut m = [0i32; 8];
                    _mm256_storeu_si256(m.as_mut_ptr() as *mut __m256i, mins);
                    let (dd, dm) = (kb.d * dx, kb.dmin * dx);
                    for sb in 0..4 {
                        let is = hsum_i32_8(sum8(2 * sb, 2 * sb + 2));
                        acc[tt] = (is as f32).mul_add(dd, acc[tt]);
                        acc_m[tt] = ((m[2 * sb] + m[2 * sb + 1]) as f32).mul_add(dm, acc_m[tt]);
                    }
                } else {
                    // q4_K's repacked gemv: whole-block sums.
                    let is = hsum_i32_8(sum8(0, 8));
                    acc[tt] = (is as f32).mul_add(kb.d * dx, acc[tt]);
                    acc_m[tt] = (hsum_i32_8(mins) as f32).mul_add(kb.dmin * dx, acc_m[tt]);
                }
            }
        }
        for tt in 0..T {
            *y.add((t0 + tt) * y_stride + r) = if tiled { acc[tt] } else { acc[tt] - acc_m[tt] };
        }
    }
}

/// Tokens from which a tile's leading tokens go through the 8-token engine (`k8_avx2.rs`).
const K8_FROM: usize = 8;

/// Tokens per prompt tile (all rows): the 8-token engine decodes a band once per tile.
const K_TILE_TOKENS: usize = 64;

/// A tile of K type `TY` along [`s::k_path`]; `vec_dot` through `avx2.rs`'s kernel.
fn tile<const TY: u32, const WB: usize>(
    vec_dot: crate::registry::VecDotFn,
    t: &Tile<'_>,
    y: &mut [f32],
    y_stride: usize,
) {
    tile_from::<TY, WB>(vec_dot, t, y, y_stride, K8_FROM)
}

/// A one-token kernel of `k_one_avx2.rs`: `(w, w_stride, rows, nb, x, y)` → rows done.
type OneFn = unsafe fn(*const u8, usize, usize, usize, *const u8, *mut f32) -> usize;

/// [`tile`] with the 8-token engine from `k8_from` tokens (`usize::MAX`: never).
fn tile_from<const TY: u32, const WB: usize>(
    vec_dot: crate::registry::VecDotFn,
    t: &Tile<'_>,
    y: &mut [f32],
    y_stride: usize,
    k8_from: usize,
) {
    let nb = check_tile(t, y, y_stride, has_avx2(), "avx2", 256, WB, Q8_K_BYTES);
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let path = s::k_path(TY, t);
    // One token, four rows at a time where a kernel has the path's arithmetic: q6_K's
    // `vec_dot`, q4_K's repacked gemv.
    let one: Option<OneFn> = match (TY, path, t.tokens, t.batched) {
        _ if t.rows < 4 => None,
        (Q6_K, Path::VecDot, 1, _) => Some(super::k_one_avx2::q6_k_one),
        (Q4_K, Path::Repack, 1, 0) => Some(super::k_one_avx2::q4_k_one),
        _ => None,
    };
    if let Some(one) = one {
        // SAFETY: `check_tile` bounds every weight row, the activation row and the outputs
        // and checked the CPU features.
        let r4 = unsafe { one(t.w.as_ptr(), t.w_stride, t.rows, nb, t.x.as_ptr(), y.as_mut_ptr()) };
        if r4 == t.rows {
            return;
        }
        let rest = Tile { w: &t.w[r4 * t.w_stride..], rows: t.rows - r4, ..*t };
        return tile_from::<TY, WB>(vec_dot, &rest, &mut y[r4..], y_stride, k8_from);
    }
    if path == Path::VecDot {
        return crate::matmul::tile_by_vec_dot(vec_dot, t, y, y_stride);
    }
    let tiled = path == Path::Tiled;
    let yp = y.as_mut_ptr();
    // The 8-token engine takes the leading tokens whose arithmetic it has: all of a tiled
    // call's, the batched ones of a q4_K call.
    let n8 = if tiled { t.tokens } else { t.batched.min(t.tokens) };
    let mut t0 = if n8 >= k8_from { n8 } else { 0 };
    if t0 > 0 {
        // SAFETY: as below, for tokens `0..t0`.
        unsafe {
            super::k8_avx2::run::<TY, WB>(
                t.w.as_ptr(),
                t.w_stride,
                t.rows,
                nb,
                t.x.as_ptr(),
                t.x_stride,
                t0,
                tiled,
                yp,
                y_stride,
            )
        };
    }
    while t0 < t.tokens {
        // SAFETY: `check_tile` bounds every weight row, activation row and output the
        // kernel touches and checked the CPU features.
        unsafe {
            match t.tokens - t0 {
                1 => imp::<TY, WB, 1>(t, nb, tiled, t0, yp, y_stride),
                2 => imp::<TY, WB, 2>(t, nb, tiled, t0, yp, y_stride),
                3 => imp::<TY, WB, 3>(t, nb, tiled, t0, yp, y_stride),
                4 => imp::<TY, WB, 4>(t, nb, tiled, t0, yp, y_stride),
                5 => imp::<TY, WB, 5>(t, nb, tiled, t0, yp, y_stride),
                6 => imp::<TY, WB, 6>(t, nb, tiled, t0, yp, y_stride),
                7 => imp::<TY, WB, 7>(t, nb, tiled, t0, yp, y_stride),
                _ => imp::<TY, WB, 8>(t, nb, tiled, t0, yp, y_stride),
            }
        }
        t0 += 8;
    }
}

macro_rules! k_kernel {
    ($tile:ident, $ty:ident, $bytes:path, $vec_dot:path, $gt:ty) => {
        /// AVX2 tile along [`s::k_path`] (twin: [`s::k_tile`] off the `vec_dot` path).
        pub fn $tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
            tile::<$ty, { $bytes }>($vec_dot, t, y, y_stride)
        }

        inventory::submit! {
            crate::registry::Kernel::new(
                <$gt as ggml_quants::GgmlType>::ID,
                "avx2",
                10,
                <ggml_quants::types::q8_k::Q8K as ggml_quants::GgmlType>::ID,
                $vec_dot,
            )
            .with_available(has_avx2)
            .with_tile($tile)
            .with_tile_tokens(K_TILE_TOKENS)
        }
    };
}

use super::avx2;
use ggml_quants::types::{q2_k::Q2K, q3_k::Q3K, q4_k::Q4K, q5_k::Q5K, q6_k::Q6K};

k_kernel!(q2_k_tile, Q2_K, s::Q2_K_BYTES, avx2::q2_k_q8_k, Q2K);
k_kernel!(q3_k_tile, Q3_K, s::Q3_K_BYTES, avx2::q3_k_q8_k, Q3K);
k_kernel!(q4_k_tile, Q4_K, s::Q4_K_BYTES, avx2::q4_k_q8_k, Q4K);
k_kernel!(q5_k_tile, Q5_K, s::Q5_K_BYTES, avx2::q5_k_q8_k, Q5K);
k_kernel!(q6_k_tile, Q6_K, s::Q6_K_BYTES, avx2::q6_k_q8_k, Q6K);

#[cfg(test)]
mod tests {
    use super::super::engine_tests::{compare_all, Run, Shape};
    use super::*;

    fn run_k<const TY: u32, const WB: usize>(t: &Tile<'_>, y: &mut [f32], ys: usize, engine: bool) {
        let vd = match TY {
            Q2_K => avx2::q2_k_q8_k,
            Q3_K => avx2::q3_k_q8_k,
            Q4_K => avx2::q4_k_q8_k,
            Q5_K => avx2::q5_k_q8_k,
            _ => avx2::q6_k_q8_k,
        };
        tile_from::<TY, WB>(vd, t, y, ys, if engine { 1 } else { usize::MAX })
    }

    /// The 8-token engine against the one-row kernels it stands in for, bit for bit, over
    /// random matrices of every K type, ragged row bands and token groups, the tiled and
    /// the batched q4_K arithmetic.
    #[test]
    fn eight_token_engine_matches_the_one_row_kernels_bitwise() {
        if !has_avx2() {
            eprintln!("skipped: no AVX2 here");
            return;
        }
        let types: [(&str, Run); 5] = [
            ("q2_K", run_k::<Q2_K, { s::Q2_K_BYTES }>),
            ("q3_K", run_k::<Q3_K, { s::Q3_K_BYTES }>),
            ("q4_K", run_k::<Q4_K, { s::Q4_K_BYTES }>),
            ("q5_K", run_k::<Q5_K, { s::Q5_K_BYTES }>),
            ("q6_K", run_k::<Q6_K, { s::Q6_K_BYTES }>),
        ];
        compare_all(
            &types,
            8,
            24,
            &Shape { rows: &[8, 13, 24, 5, 7, 16, 40], total_rows: |case, rows| rows * 8 + case % 2 },
        );
    }
}
