//! AVX2 (+ FMA, F16C) tile kernels for IQ3_S and IQ2_XS (× Q8_K): the arithmetic of
//! [`super::lattice`] (and of the scalar twins in [`crate::scalar::lattice`]) without
//! AVX-512, for CPUs that have only AVX2.
//!
//! - `vec_dot` path: ggml's AVX2 `vec_dot` itself: grid magnitudes × sign-flipped
//!   activations with `maddubs`, the scale by `madd` per 16 elements, 8 lanes per row.
//! - tiled path: 8 rows per vector, one 32-bit lane per row as in the VNNI kernel, but with
//!   llama.cpp's AVX2 "act-bias" multiply: the activations are biased to `x + 128`
//!   (unsigned) and `maddubs`-ed with the signed weights, `madd` with the sub-block scale;
//!   the bias `128·Σ scale·w` of each row is subtracted once per block. Every pair sum stays
//!   below 2·255·62 < 2¹⁵, so the integers are exact and `s1` is the twin's.

use core::arch::x86_64::*;

use super::has_avx2;
use crate::registry::Tile;
use crate::scalar::act::Q8_K_BYTES;
use crate::scalar::iq4::Path;
use crate::scalar::lattice::{self as s, IQ2_S_BYTES, IQ2_XS_BYTES, IQ2_XXS_BYTES, IQ3_S_BYTES, IQ3_XXS_BYTES};
use ggml_quants::types::iq_tables::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS};

/// One lattice format's decoder (see `super::lattice`): group `g` as grid magnitudes and a
/// sign mask, and the two 16-element scales.
trait Lattice {
    const BYTES: usize;
    const NSUB: usize;
    const VEC_POST: f32;
    const TILED_MUL: f32;
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32);
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32);
}

struct Iq3S;
struct Iq2Xs;
struct Iq2Xxs;
struct Iq3Xxs;
struct Iq2S;

impl Lattice for Iq3S {
    const BYTES: usize = IQ3_S_BYTES;
    const NSUB: usize = 8;
    const VEC_POST: f32 = 1.0;
    const TILED_MUL: f32 = 1.0;

    #[inline(always)]
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32) {
        // Index k = qs[8g + k] | bit k of qh[g] << 8, all 8 at once, then one gather.
        let qs = _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.add(2 + 8 * g) as *const __m128i));
        let qh = _mm256_sllv_epi32(_mm256_set1_epi32(*b.add(66 + g) as i32), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1));
        let idx = _mm256_or_si256(qs, _mm256_and_si256(qh, _mm256_set1_epi32(256)));
        let grid = _mm256_i32gather_epi32::<4>(IQ3S_GRID.as_ptr() as *const i32, idx);
        (grid, (b.add(74 + 4 * g) as *const u32).read_unaligned())
    }

    #[inline(always)]
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32) {
        let s = 2 * ((*b.add(106 + g / 2) >> (4 * (g % 2))) & 0xF) as i32 + 1;
        (s, s)
    }
}

impl Lattice for Iq2Xs {
    const BYTES: usize = IQ2_XS_BYTES;
    const NSUB: usize = 16;
    const VEC_POST: f32 = 0.125;
    const TILED_MUL: f32 = 0.125;

    #[inline(always)]
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32) {
        let p = b.add(2 + 8 * g);
        // The 4 grid indices (low 9 bits of each u16), one gather of 4 × 8 bytes.
        let idx = _mm_and_si128(_mm_cvtepu16_epi32(_mm_loadl_epi64(p as *const __m128i)), _mm_set1_epi32(511));
        let grid = _mm256_i32gather_epi64::<8>(IQ2XS_GRID.as_ptr() as *const i64, idx);
        let q = |l: usize| (p as *const u16).add(l).read_unaligned() as usize;
        let sg = |l: usize| (*KSIGNS_IQ2XS.get_unchecked(q(l) >> 9) as u32) << (8 * l);
        (grid, sg(0) | sg(1) | sg(2) | sg(3))
    }

    #[inline(always)]
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32) {
        let sc = *b.add(66 + g);
        (2 * (sc & 0xF) as i32 + 1, 2 * (sc >> 4) as i32 + 1)
    }
}

/// The 4 sign bytes of group `g` from 7-bit `ksigns_iq2xs` indices packed in `aux` (bits `7l..7l+7`).
#[inline(always)]
fn ksigns4(aux: u32) -> u32 {
    let k = |l: u32| (KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize] as u32) << (8 * l);
    k(0) | k(1) | k(2) | k(3)
}

impl Lattice for Iq2Xxs {
    const BYTES: usize = IQ2_XXS_BYTES;
    const NSUB: usize = 8;
    const VEC_POST: f32 = 0.125;
    const TILED_MUL: f32 = 0.125;

    #[inline(always)]
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32) {
        let p = b.add(2 + 8 * g);
        let idx = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
        let grid = _mm256_i32gather_epi64::<8>(IQ2XXS_GRID.as_ptr() as *const i64, idx);
        (grid, ksigns4((p.add(4) as *const u32).read_unaligned()))
    }

    #[inline(always)]
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32) {
        let s = 2 * (*b.add(2 + 8 * g + 7) >> 4) as i32 + 1;
        (s, s)
    }
}

impl Lattice for Iq3Xxs {
    const BYTES: usize = IQ3_XXS_BYTES;
    const NSUB: usize = 8;
    const VEC_POST: f32 = 0.25;
    const TILED_MUL: f32 = 0.25;

    #[inline(always)]
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32) {
        let idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.add(2 + 8 * g) as *const __m128i));
        let grid = _mm256_i32gather_epi32::<4>(IQ3XXS_GRID.as_ptr() as *const i32, idx);
        (grid, ksigns4((b.add(66 + 4 * g) as *const u32).read_unaligned()))
    }

    #[inline(always)]
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32) {
        let s = 2 * (*b.add(66 + 4 * g + 3) >> 4) as i32 + 1;
        (s, s)
    }
}

impl Lattice for Iq2S {
    const BYTES: usize = IQ2_S_BYTES;
    const NSUB: usize = 16;
    const VEC_POST: f32 = 0.125;
    const TILED_MUL: f32 = 0.125;

    #[inline(always)]
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32) {
        // Index l = qs[4g + l] | bits 2l, 2l+1 of qh[g] << 8.
        let qs = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((b.add(2 + 4 * g) as *const i32).read_unaligned()));
        let qh = _mm_sllv_epi32(_mm_set1_epi32(*b.add(66 + g) as i32), _mm_setr_epi32(8, 6, 4, 2));
        let idx = _mm_or_si128(qs, _mm_and_si128(qh, _mm_set1_epi32(0x300)));
        let grid = _mm256_i32gather_epi64::<8>(IQ2S_GRID.as_ptr() as *const i64, idx);
        (grid, (b.add(34 + 4 * g) as *const u32).read_unaligned())
    }

    #[inline(always)]
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32) {
        let sc = *b.add(74 + g);
        (2 * (sc & 0xF) as i32 + 1, 2 * (sc >> 4) as i32 + 1)
    }
}

const TOK_CHUNK: usize = 16;

struct Args {
    w: *const u8,
    w_stride: usize,
    rows: usize,
    nb: usize,
    x: *const u8,
    x_stride: usize,
    y: *mut f32,
    y_stride: usize,
}

/// `hsum_float_8` (ggml's order).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn hsum_float_8(x: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16_at(p: *const u8) -> f32 {
    let h = (p as *const u16).read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// The 32-bit sign mask as bytes: `0xFF` where bit `e` is set.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn mask_bytes(m: u32) -> __m256i {
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let v = _mm256_shuffle_epi8(_mm256_set1_epi32(m as i32), spread);
    _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit)
}

/// The `vec_dot` path: rows one by one against tokens `t0..t0+nt`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_rows<L: Lattice>(a: &Args, t0: usize, nt: usize) {
    let zero = _mm256_setzero_si256();
    for r in 0..a.rows {
        let wr = a.w.add(r * a.w_stride);
        let mut acc = [_mm256_setzero_ps(); TOK_CHUNK];
        for b in 0..a.nb {
            let wb = wr.add(b * L::BYTES);
            let dw = f16_at(wb);
            let mut grid = [zero; 8];
            let mut mask = [zero; 8];
            let mut sc = [zero; 8];
            for g in 0..8 {
                let (gv, m) = L::group(wb, g);
                grid[g] = gv;
                mask[g] = mask_bytes(m);
                let (lo, hi) = L::scales(wb, g);
                sc[g] = _mm256_setr_epi16(
                    lo as i16, lo as i16, lo as i16, lo as i16, lo as i16, lo as i16, lo as i16, lo as i16, hi as i16,
                    hi as i16, hi as i16, hi as i16, hi as i16, hi as i16, hi as i16, hi as i16,
                );
            }
            for (t, acc) in acc.iter_mut().enumerate().take(nt) {
                let xb = a.x.add((t0 + t) * a.x_stride + b * Q8_K_BYTES);
                let mut lanes = zero;
                for g in 0..8 {
                    let xv = _mm256_loadu_si256(xb.add(4 + 32 * g) as *const __m256i);
                    let xs = _mm256_sub_epi8(_mm256_xor_si256(xv, mask[g]), mask[g]);
                    let dot = _mm256_maddubs_epi16(grid[g], xs);
                    lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(dot, sc[g]));
                }
                let d = dw * (xb as *const f32).read_unaligned();
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), *acc);
            }
        }
        for (t, acc) in acc.iter().enumerate().take(nt) {
            *a.y.add((t0 + t) * a.y_stride + r) = L::VEC_POST * hsum_float_8(*acc);
        }
    }
}

/// 8 × 8 transpose of 32-bit words: `out[k]` lane `i` = `v[i]` lane `k`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn transpose8(v: &[__m256i; 8]) -> [__m256i; 8] {
    let t0 = _mm256_unpacklo_epi32(v[0], v[1]);
    let t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    let t2 = _mm256_unpacklo_epi32(v[2], v[3]);
    let t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    let t4 = _mm256_unpacklo_epi32(v[4], v[5]);
    let t5 = _mm256_unpackhi_epi32(v[4], v[5]);
    let t6 = _mm256_unpacklo_epi32(v[6], v[7]);
    let t7 = _mm256_unpackhi_epi32(v[6], v[7]);
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    [
        _mm256_permute2x128_si256::<0x20>(u0, u4),
        _mm256_permute2x128_si256::<0x20>(u1, u5),
        _mm256_permute2x128_si256::<0x20>(u2, u6),
        _mm256_permute2x128_si256::<0x20>(u3, u7),
        _mm256_permute2x128_si256::<0x31>(u0, u4),
        _mm256_permute2x128_si256::<0x31>(u1, u5),
        _mm256_permute2x128_si256::<0x31>(u2, u6),
        _mm256_permute2x128_si256::<0x31>(u3, u7),
    ]
}

#[inline(always)]
fn row_offsets(n: usize, stride: usize) -> [usize; 8] {
    core::array::from_fn(|i| i.min(n - 1) * stride)
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn store_n(p: *mut f32, v: __m256, n: usize) {
    if n == 8 {
        _mm256_storeu_ps(p, v);
    } else {
        let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(p, mask, v);
    }
}

/// One block of 8 rows decoded for the tiled path.
#[derive(Clone, Copy)]
struct Rows8 {
    /// `u[k]` lane `i`: row `i`'s signed weights `4k..4k+4`.
    u: [__m256i; 64],
    /// `sc[sub]` lane `i`: row `i`'s scale of sub-block `sub`, in both 16-bit halves.
    sc: [__m256i; 16],
    /// Lane `i`: `128·Σ scale·w` of row `i` (the bias of `x + 128`).
    corr: __m256i,
    /// Lane `i`: `fp16(d_i)·TILED_MUL`.
    dw: __m256,
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_rows8<L: Lattice>(w0: *const u8, ro: &[usize; 8], b: usize, out: &mut Rows8) {
    let ones = _mm256_set1_epi8(1);
    let mut scl = [[0i32; 8]; 16];
    let mut corr = _mm256_setzero_si256();
    let mut h = [0u16; 8];
    for g in 0..8 {
        let mut v = [_mm256_setzero_si256(); 8];
        let mut wsum = [_mm256_setzero_si256(); 8];
        for (i, vi) in v.iter_mut().enumerate() {
            let wb = w0.add(ro[i] + b * L::BYTES);
            let (grid, mask) = L::group(wb, g);
            let m = mask_bytes(mask);
            *vi = _mm256_sub_epi8(_mm256_xor_si256(grid, m), m);
            let (lo, hi) = L::scales(wb, g);
            scl[2 * g][i] = lo;
            scl[2 * g + 1][i] = hi;
            let sc16 = _mm256_setr_epi16(
                lo as i16, lo as i16, lo as i16, lo as i16, lo as i16, lo as i16, lo as i16, lo as i16, hi as i16,
                hi as i16, hi as i16, hi as i16, hi as i16, hi as i16, hi as i16, hi as i16,
            );
            // Σ scale·w over the group, in 8 lanes (summed below, per row).
            wsum[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, *vi), sc16);
        }
        // Row i's group total lands in lane i of the transposed sum.
        let ws = transpose8(&wsum);
        let mut tot = ws[0];
        for w in &ws[1..] {
            tot = _mm256_add_epi32(tot, *w);
        }
        corr = _mm256_add_epi32(corr, tot);
        let tr = transpose8(&v);
        out.u[8 * g..8 * g + 8].copy_from_slice(&tr);
    }
    for (i, hi) in h.iter_mut().enumerate() {
        *hi = (w0.add(ro[i] + b * L::BYTES) as *const u16).read_unaligned();
    }
    for (o, s) in out.sc.iter_mut().zip(&scl) {
        let v = _mm256_loadu_si256(s.as_ptr() as *const __m256i);
        *o = _mm256_or_si256(v, _mm256_slli_epi32::<16>(v));
    }
    out.corr = _mm256_slli_epi32::<7>(corr);
    out.dw =
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i)), _mm256_set1_ps(L::TILED_MUL));
}

/// The tiled path for 8 decoded rows against `T` tokens, `xb[t]` their biased (`x + 128`)
/// codes and `dx[t]` their scales.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tiled_tokens<L: Lattice, const T: usize>(
    d: &Rows8,
    xb: &[*const u8; T],
    dx: &[f32; T],
    acc: &mut [__m256; T],
) {
    let words = 64 / L::NSUB;
    let mut s1 = [_mm256_setzero_si256(); T];
    for sub in 0..L::NSUB {
        let sc = d.sc[if L::NSUB == 16 { sub } else { 2 * sub }];
        for k in sub * words..(sub + 1) * words {
            let u = d.u[k];
            for (t, st) in s1.iter_mut().enumerate() {
                let xw = (xb[t].add(4 * k) as *const i32).read_unaligned();
                let p = _mm256_maddubs_epi16(_mm256_set1_epi32(xw), u);
                *st = _mm256_add_epi32(*st, _mm256_madd_epi16(p, sc));
            }
        }
    }
    for t in 0..T {
        let r = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s1[t], d.corr)), d.dw);
        acc[t] = _mm256_fmadd_ps(r, _mm256_set1_ps(dx[t]), acc[t]);
    }
}

/// Every 8-row group and block of the tile decoded: `out[(r0 / 8)·nb + b]`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_all<L: Lattice>(a: &Args, out: &mut [Rows8]) {
    let mut r0 = 0;
    while r0 < a.rows {
        let nr = (a.rows - r0).min(8);
        let ro = row_offsets(nr, a.w_stride);
        for b in 0..a.nb {
            decode_rows8::<L>(a.w.add(r0 * a.w_stride), &ro, b, &mut out[(r0 / 8) * a.nb + b]);
        }
        r0 += 8;
    }
}

/// The tiled path: rows in groups of 8 against tokens `t0..t0+nt`, the blocks decoded here
/// or taken from `pre` ([`decode_all`]'s layout).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tiled_rows<L: Lattice>(a: &Args, t0: usize, nt: usize, pre: Option<&[Rows8]>) {
    let mut dec = Rows8 {
        u: [_mm256_setzero_si256(); 64],
        sc: [_mm256_setzero_si256(); 16],
        corr: _mm256_setzero_si256(),
        dw: _mm256_setzero_ps(),
    };
    // The tokens' codes biased to `x + 128`, block after block.
    let mut xbuf = vec![0u8; a.nb * nt * 256];
    let mut dxs = vec![0f32; a.nb * nt];
    let bias = _mm256_set1_epi8(-128);
    for b in 0..a.nb {
        for t in 0..nt {
            let src = a.x.add((t0 + t) * a.x_stride + b * Q8_K_BYTES);
            dxs[b * nt + t] = (src as *const f32).read_unaligned();
            let dst = xbuf.as_mut_ptr().add((b * nt + t) * 256);
            for v in 0..8 {
                let x = _mm256_loadu_si256(src.add(4 + 32 * v) as *const __m256i);
                _mm256_storeu_si256(dst.add(32 * v) as *mut __m256i, _mm256_xor_si256(x, bias));
            }
        }
    }
    let mut r0 = 0;
    while r0 < a.rows {
        let nr = (a.rows - r0).min(8);
        let w0 = a.w.add(r0 * a.w_stride);
        let ro = row_offsets(nr, a.w_stride);
        let mut acc = [_mm256_setzero_ps(); TOK_CHUNK];
        for b in 0..a.nb {
            let d: &Rows8 = match pre {
                Some(p) => p.get_unchecked((r0 / 8) * a.nb + b),
                None => {
                    decode_rows8::<L>(w0, &ro, b, &mut dec);
                    &dec
                }
            };
            let xrow = |t: usize| xbuf.as_ptr().add((b * nt + t) * 256);
            let dx = |t: usize| dxs[b * nt + t];
            let mut t = 0;
            while t < nt {
                let left = nt - t;
                let acc = &mut acc[t..];
                if left >= 4 {
                    let xb: [*const u8; 4] = core::array::from_fn(|i| xrow(t + i));
                    let dd: [f32; 4] = core::array::from_fn(|i| dx(t + i));
                    tiled_tokens::<L, 4>(d, &xb, &dd, (&mut acc[..4]).try_into().unwrap_unchecked());
                    t += 4;
                } else {
                    tiled_tokens::<L, 1>(d, &[xrow(t)], &[dx(t)], (&mut acc[..1]).try_into().unwrap_unchecked());
                    t += 1;
                }
            }
        }
        for (t, acc) in acc.iter().enumerate().take(nt) {
            store_n(a.y.add((t0 + t) * a.y_stride + r0), *acc, nr);
        }
        r0 += 8;
    }
}

/// A tile's decoded weights kept per thread (see `super::lattice`'s cache: the same row
/// tile comes once per 16-token block; an entry is used only if the tile's bytes equal its
/// copy, compared in full).
struct Cached {
    key: (usize, usize, usize, usize),
    raw: Vec<u8>,
    dec: Vec<Rows8>,
}

const CACHE_BYTES: usize = 8 << 20;

thread_local! {
    static CACHE: std::cell::RefCell<Vec<Cached>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn cached_bytes(c: &Cached) -> usize {
    c.raw.len() + c.dec.len() * core::mem::size_of::<Rows8>()
}

fn check(t: &Tile<'_>, y: &[f32], y_stride: usize, w_row: usize, x_row: usize) {
    assert!(has_avx2(), "AVX2 tile kernel called on a CPU without AVX2/FMA/F16C");
    assert!(t.n.is_multiple_of(256), "tile: columns not a whole number of blocks");
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    assert!(t.w_stride >= w_row && t.w.len() >= (t.rows - 1) * t.w_stride + w_row, "tile: weight rows");
    assert!(t.x_stride >= x_row && t.x.len() >= (t.tokens - 1) * t.x_stride + x_row, "tile: activation rows");
    assert!(y_stride >= t.rows && y.len() >= (t.tokens - 1) * y_stride + t.rows, "tile: output");
}

fn tile_imp<L: Lattice>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = t.n / 256;
    check(t, y, y_stride, nb * L::BYTES, nb * Q8_K_BYTES);
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let args = Args {
        w: t.w.as_ptr(),
        w_stride: t.w_stride,
        rows: t.rows,
        nb,
        x: t.x.as_ptr(),
        x_stride: t.x_stride,
        y: y.as_mut_ptr(),
        y_stride,
    };
    let tiled = s::path(t) == Path::Tiled;
    let groups = t.rows.div_ceil(8) * nb;
    let raw = &t.w[..(t.rows - 1) * t.w_stride + nb * L::BYTES];
    if tiled && raw.len() + groups * core::mem::size_of::<Rows8>() <= CACHE_BYTES {
        let key = (raw.as_ptr() as usize, t.rows, t.w_stride, L::BYTES);
        CACHE.with(|c| {
            let mut c = c.borrow_mut();
            let hit = c.iter().position(|e| e.key == key && e.raw[..] == raw[..]);
            let i = match hit {
                Some(i) => i,
                None => {
                    // SAFETY: the all-zero pattern is a valid `Rows8` (integer and float vectors).
                    let mut dec = vec![unsafe { core::mem::zeroed::<Rows8>() }; groups];
                    // SAFETY: as below (`check` bounds every row and block, AVX2 present).
                    unsafe { decode_all::<L>(&args, &mut dec) };
                    let e = Cached { key, raw: raw.to_vec(), dec };
                    let mut total = cached_bytes(&e);
                    for old in c.iter() {
                        total += cached_bytes(old);
                    }
                    while total > CACHE_BYTES && !c.is_empty() {
                        total -= cached_bytes(&c.remove(0));
                    }
                    c.push(e);
                    c.len() - 1
                }
            };
            let mut t0 = 0;
            while t0 < t.tokens {
                let nt = (t.tokens - t0).min(TOK_CHUNK);
                // SAFETY: as below; `dec` holds every group and block of this tile.
                unsafe { tiled_rows::<L>(&args, t0, nt, Some(&c[i].dec)) };
                t0 += nt;
            }
        });
        return;
    }
    let mut t0 = 0;
    while t0 < t.tokens {
        let nt = (t.tokens - t0).min(TOK_CHUNK);
        // SAFETY: `check` verified that every weight row (`nb` blocks), activation row
        // (`nb` Q8_K blocks) and output the kernels touch is in bounds, and that the CPU
        // has AVX2/FMA/F16C; 8-row groups repeat the last row instead of reading past it.
        unsafe {
            if tiled {
                tiled_rows::<L>(&args, t0, nt, None);
            } else {
                vec_rows::<L>(&args, t0, nt);
            }
        }
        t0 += nt;
    }
}

fn dot_via_tile(tile: fn(&Tile<'_>, &mut [f32], usize), n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut y = [0f32];
    let t = Tile {
        n,
        w,
        w_stride: w.len(),
        rows: 1,
        x,
        x_stride: x.len(),
        tokens: 1,
        batched: 0,
        total_tokens: 1,
        total_rows: 1,
        expert: false,
    };
    tile(&t, &mut y, 1);
    y[0]
}

/// IQ3_S × Q8_K tile along [`s::path`].
pub fn iq3_s_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_imp::<Iq3S>(t, y, y_stride)
}

/// IQ2_XS × Q8_K tile along [`s::path`].
pub fn iq2_xs_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_imp::<Iq2Xs>(t, y, y_stride)
}

/// IQ2_XXS × Q8_K tile along [`s::path`].
pub fn iq2_xxs_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_imp::<Iq2Xxs>(t, y, y_stride)
}

/// IQ3_XXS × Q8_K tile along [`s::path`].
pub fn iq3_xxs_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_imp::<Iq3Xxs>(t, y, y_stride)
}

/// IQ2_S × Q8_K tile along [`s::path`].
pub fn iq2_s_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_imp::<Iq2S>(t, y, y_stride)
}

/// `ggml_vec_dot_iq2_xxs_q8_K`.
pub fn iq2_xxs_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_via_tile(iq2_xxs_tile, n, w, x)
}

/// `ggml_vec_dot_iq3_xxs_q8_K`.
pub fn iq3_xxs_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_via_tile(iq3_xxs_tile, n, w, x)
}

/// `ggml_vec_dot_iq2_s_q8_K`.
pub fn iq2_s_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_via_tile(iq2_s_tile, n, w, x)
}

/// `ggml_vec_dot_iq3_s_q8_K` (AVX2).
pub fn iq3_s_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_via_tile(iq3_s_tile, n, w, x)
}

/// `ggml_vec_dot_iq2_xs_q8_K` (AVX2).
pub fn iq2_xs_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_via_tile(iq2_xs_tile, n, w, x)
}

mod registration {
    use super::*;
    use crate::registry::Kernel;
    use ggml_quants::types::{iq2_s::Iq2S, iq2_xs::Iq2Xs, iq2_xxs::Iq2Xxs, iq3_s::Iq3S, iq3_xxs::Iq3Xxs, q8_k::Q8K};
    use ggml_quants::GgmlType;

    inventory::submit! {
        Kernel::new(<Iq3S as GgmlType>::ID, "avx2", 10, <Q8K as GgmlType>::ID, iq3_s_q8_k)
            .with_available(has_avx2)
            .with_tile(iq3_s_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq2Xs as GgmlType>::ID, "avx2", 10, <Q8K as GgmlType>::ID, iq2_xs_q8_k)
            .with_available(has_avx2)
            .with_tile(iq2_xs_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq2Xxs as GgmlType>::ID, "avx2", 10, <Q8K as GgmlType>::ID, iq2_xxs_q8_k)
            .with_available(has_avx2)
            .with_tile(iq2_xxs_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq3Xxs as GgmlType>::ID, "avx2", 10, <Q8K as GgmlType>::ID, iq3_xxs_q8_k)
            .with_available(has_avx2)
            .with_tile(iq3_xxs_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq2S as GgmlType>::ID, "avx2", 10, <Q8K as GgmlType>::ID, iq2_s_q8_k)
            .with_available(has_avx2)
            .with_tile(iq2_s_tile)
    }
}
