//! AVX-512 VNNI (256-bit `vpdpbusd` via AVX512VL) tile kernels for the lattice types IQ3_S
//! and IQ2_XS (× Q8_K), in the float arithmetic llama.cpp's CPU backend uses for the
//! product ([`crate::scalar::lattice`] holds the scalar twins and describes both paths).
//!
//! - `vec_dot` path (fewer than 8 tokens in the product, and every `matmul_rowwise`): one
//!   row at a time, 8 lanes per row as ggml's AVX2 `vec_dot` (lane `j` = elements `4j..4j+4`
//!   of every 32-element group): the grid magnitudes (unsigned) are `vpdpbusd`-ed with the
//!   activations whose signs were flipped where the weight is negative (a masked
//!   `0 − x`, wrapping on `−128` as ggml's `sign`/`xor` tricks), times the scale per lane.
//!   A row block is decoded once for every token of the tile.
//! - tiled path (8+ tokens): 8 rows at once with one 32-bit lane per row, as ggml's tiled
//!   VNNI kernel: each row's block is decoded to `w + 128` bytes, 8 rows are transposed so
//!   that one `vpdpbusd` with 4 broadcast activation bytes adds to all 8 rows, each
//!   sub-block's dot starts at `−128·bsum` (Q8_K's block sums) and is multiplied by the
//!   sub-block scale; per 256-block `r = f32(s1)·d_w`, `acc = fma(r, d_x, acc)`. A block of
//!   8 rows is decoded once per tile, for all of its tokens.
//!
//! The integer sums are exact, so the products agree bit for bit with the scalar twins for
//! any input, and with ggml for any activations its quantizer emits.

use core::arch::x86_64::*;

use super::vnni::{f16_at, has_vnni, hsum_float_8};
use crate::registry::Tile;
use crate::scalar::act::Q8_K_BYTES;
use crate::scalar::iq4::Path;
use crate::scalar::lattice::{self as s, IQ2_S_BYTES, IQ2_XS_BYTES, IQ2_XXS_BYTES, IQ3_S_BYTES, IQ3_XXS_BYTES};
use ggml_quants::types::iq_tables::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS};

/// One lattice format's decoder: group `g` (32 elements) of the block at `b` as grid
/// magnitudes (32 unsigned bytes) and a sign mask (bit `e` set: element `e` is negative),
/// and the scales of its two 16-element halves.
trait Lattice {
    /// Bytes per block.
    const BYTES: usize;
    /// Sub-blocks per 256 (one scale each) in the tiled path: 8 (32 elements) or 16.
    const NSUB: usize;
    /// `vec_dot`'s factor on the final sum.
    const VEC_POST: f32;
    /// The tiled path's factor on `fp16(d)`.
    const TILED_MUL: f32;
    /// Magnitudes and sign mask of group `g`.
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32);
    /// The odd scales `(2s + 1)` of the first and second 16 elements of group `g`.
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32);
    /// The sign masks of all 8 groups (as [`Lattice::group`]'s).
    #[inline(always)]
    unsafe fn signs(b: *const u8) -> [u32; 8] {
        core::array::from_fn(|g| Self::group(b, g).1)
    }
    /// The 16 odd scales of the block, one per 16 elements.
    #[inline(always)]
    unsafe fn scale16(b: *const u8) -> __m512i {
        let a: [i32; 16] = core::array::from_fn(|k| {
            let (lo, hi) = Self::scales(b, k / 2);
            if k % 2 == 0 {
                lo
            } else {
                hi
            }
        });
        _mm512_loadu_si512(a.as_ptr() as *const __m512i)
    }
}

/// `2s + 1` of 16 nibbles: the low then the high nibble of each of 8 bytes at `p`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn nibble_scales(p: *const u8) -> __m512i {
    let v = _mm_loadl_epi64(p as *const __m128i);
    let m = _mm_set1_epi8(0xF);
    let n = _mm_unpacklo_epi8(_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16::<4>(v), m));
    let z = _mm512_cvtepu8_epi32(n);
    _mm512_add_epi32(_mm512_add_epi32(z, z), _mm512_set1_epi32(1))
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

    #[inline(always)]
    unsafe fn signs(b: *const u8) -> [u32; 8] {
        core::array::from_fn(|g| (b.add(74 + 4 * g) as *const u32).read_unaligned())
    }

    #[inline(always)]
    unsafe fn scale16(b: *const u8) -> __m512i {
        // 4 scale bytes → 8 per-32 scales, each twice.
        let s8 = (b.add(106) as *const u32).read_unaligned() as i64;
        let z = nibble_scales(&s8 as *const i64 as *const u8);
        _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), z)
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

    #[inline(always)]
    unsafe fn signs(b: *const u8) -> [u32; 8] {
        // ksigns_iq2xs[s] = s | parity(s) << 7, for the 32 sign indices (bits 9.. of qs) at once.
        let q = _mm512_loadu_si512(b.add(2) as *const __m512i);
        let s7 = _mm512_srli_epi16::<9>(q);
        let mut p = _mm512_xor_si512(s7, _mm512_srli_epi16::<4>(s7));
        p = _mm512_xor_si512(p, _mm512_srli_epi16::<2>(p));
        p = _mm512_xor_si512(p, _mm512_srli_epi16::<1>(p));
        let s8 = _mm512_or_si512(s7, _mm512_slli_epi16::<7>(_mm512_and_si512(p, _mm512_set1_epi16(1))));
        let mut out = [0u32; 8];
        _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, _mm512_cvtepi16_epi8(s8));
        out
    }

    #[inline(always)]
    unsafe fn scale16(b: *const u8) -> __m512i {
        nibble_scales(b.add(66))
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

    #[inline(always)]
    unsafe fn scale16(b: *const u8) -> __m512i {
        nibble_scales(b.add(74))
    }
}

/// Most tokens one pass over a row block serves (its accumulators live on the stack).
const TOK_CHUNK: usize = 16;

/// Arguments shared by the inner kernels.
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

/// The `vec_dot` path: rows one by one against tokens `t0..t0+nt` (`nt ≤ TOK_CHUNK`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn vec_rows<L: Lattice>(a: &Args, t0: usize, nt: usize) {
    let zero = _mm256_setzero_si256();
    for r in 0..a.rows {
        let wr = a.w.add(r * a.w_stride);
        let mut acc = [_mm256_setzero_ps(); TOK_CHUNK];
        for b in 0..a.nb {
            let wb = wr.add(b * L::BYTES);
            let dw = f16_at(wb);
            let mut grid = [zero; 8];
            let mask = L::signs(wb);
            let s16 = L::scale16(wb);
            let mut sc = [zero; 8];
            for g in 0..8 {
                grid[g] = L::group(wb, g).0;
                let i = 2 * g as i32;
                let idx = _mm512_setr_epi32(i, i, i, i, i + 1, i + 1, i + 1, i + 1, 0, 0, 0, 0, 0, 0, 0, 0);
                sc[g] = _mm512_castsi512_si256(_mm512_permutexvar_epi32(idx, s16));
            }
            for (t, acc) in acc.iter_mut().enumerate().take(nt) {
                let xb = a.x.add((t0 + t) * a.x_stride + b * Q8_K_BYTES);
                let mut lanes = zero;
                for g in 0..8 {
                    let xv = _mm256_loadu_si256(xb.add(4 + 32 * g) as *const __m256i);
                    let xs = _mm256_mask_sub_epi8(xv, mask[g], zero, xv);
                    let dot = _mm256_dpbusd_epi32(zero, grid[g], xs);
                    lanes = _mm256_add_epi32(lanes, _mm256_mullo_epi32(dot, sc[g]));
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
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

/// Byte offsets of up to 8 rows `stride` apart; past the last of `n` rows the last one
/// repeats (its lanes are computed and not stored).
#[inline(always)]
fn row_offsets(n: usize, stride: usize) -> [usize; 8] {
    core::array::from_fn(|i| i.min(n - 1) * stride)
}

/// Stores lanes `0..n` of `v` at `p`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn store_n(p: *mut f32, v: __m256, n: usize) {
    if n == 8 {
        _mm256_storeu_ps(p, v);
    } else {
        _mm256_mask_storeu_ps(p, ((1u32 << n) - 1) as u8, v);
    }
}

/// One block of 8 rows decoded for the tiled path.
#[derive(Clone, Copy)]
struct Rows8 {
    /// `u[k]` lane `i`: row `i`'s biased codes `4k..4k+4`.
    u: [__m256i; 64],
    /// `sc[sub]` lane `i`: row `i`'s scale of sub-block `sub` (16 sub-blocks of 16; the
    /// 32-element formats use the even ones).
    sc: [__m256i; 16],
    /// Lane `i`: `fp16(d_i)·TILED_MUL`.
    dw: __m256,
}

/// Decodes block `b` of 8 rows (offsets `ro` from `w0`) into `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn decode_rows8<L: Lattice>(w0: *const u8, ro: &[usize; 8], b: usize, out: &mut Rows8) {
    let bias = _mm256_set1_epi8(-128);
    let mut scl = [[0i32; 8]; 16];
    let mut h = [0u16; 8];
    for g in 0..8 {
        let mut v = [_mm256_setzero_si256(); 8];
        for (i, vi) in v.iter_mut().enumerate() {
            let wb = w0.add(ro[i] + b * L::BYTES);
            let (grid, mask) = L::group(wb, g);
            // `w + 128`: 128 + |w| where positive, 128 − |w| where negative.
            *vi = _mm256_mask_sub_epi8(_mm256_add_epi8(grid, bias), mask, bias, grid);
            let (lo, hi) = L::scales(wb, g);
            scl[2 * g][i] = lo;
            scl[2 * g + 1][i] = hi;
        }
        let tr = transpose8(&v);
        out.u[8 * g..8 * g + 8].copy_from_slice(&tr);
    }
    for (i, hi) in h.iter_mut().enumerate() {
        *hi = (w0.add(ro[i] + b * L::BYTES) as *const u16).read_unaligned();
    }
    for (o, s) in out.sc.iter_mut().zip(&scl) {
        *o = _mm256_loadu_si256(s.as_ptr() as *const __m256i);
    }
    out.dw =
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i)), _mm256_set1_ps(L::TILED_MUL));
}

/// The tiled path for 8 decoded rows against `T` tokens whose Q8_K blocks start at `xb[t]`:
/// `acc[t] = fma(f32(s1)·d_w, d_x, acc[t])`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn tiled_tokens<L: Lattice, const T: usize>(d: &Rows8, xb: &[*const u8; T], acc: &mut [__m256; T]) {
    let words = 64 / L::NSUB;
    let mut s1 = [_mm256_setzero_si256(); T];
    for sub in 0..L::NSUB {
        let mut dot = [_mm256_setzero_si256(); T];
        for (t, dt) in dot.iter_mut().enumerate() {
            let bs = xb[t].add(260) as *const i16;
            let bsum = if L::NSUB == 16 {
                bs.add(sub).read_unaligned() as i32
            } else {
                bs.add(2 * sub).read_unaligned() as i32 + bs.add(2 * sub + 1).read_unaligned() as i32
            };
            *dt = _mm256_set1_epi32(-128 * bsum);
        }
        for k in sub * words..(sub + 1) * words {
            let u = d.u[k];
            for (t, dt) in dot.iter_mut().enumerate() {
                let xw = (xb[t].add(4 + 4 * k) as *const i32).read_unaligned();
                *dt = _mm256_dpbusd_epi32(*dt, u, _mm256_set1_epi32(xw));
            }
        }
        let sc = d.sc[if L::NSUB == 16 { sub } else { 2 * sub }];
        for (s, dt) in s1.iter_mut().zip(&dot) {
            *s = _mm256_add_epi32(*s, _mm256_mullo_epi32(*dt, sc));
        }
    }
    for t in 0..T {
        let r = _mm256_mul_ps(_mm256_cvtepi32_ps(s1[t]), d.dw);
        let dx = _mm256_set1_ps((xb[t] as *const f32).read_unaligned());
        acc[t] = _mm256_fmadd_ps(r, dx, acc[t]);
    }
}

/// Every 8-row group and block of the tile decoded: `out[(r0 / 8)·nb + b]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
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

/// The tiled path: rows in groups of 8 against tokens `t0..t0+nt` (`nt ≤ TOK_CHUNK`),
/// with the blocks decoded here or taken from `pre` ([`decode_all`]'s layout).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tiled_rows<L: Lattice>(a: &Args, t0: usize, nt: usize, pre: Option<&[Rows8]>) {
    let mut dec = Rows8 { u: [_mm256_setzero_si256(); 64], sc: [_mm256_setzero_si256(); 16], dw: _mm256_setzero_ps() };
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
            let xrow = |t: usize| a.x.add((t0 + t) * a.x_stride + b * Q8_K_BYTES);
            let mut t = 0;
            while t < nt {
                let left = nt - t;
                let acc = &mut acc[t..];
                if left >= 8 {
                    let xb: [*const u8; 8] = core::array::from_fn(|i| xrow(t + i));
                    tiled_tokens::<L, 8>(d, &xb, (&mut acc[..8]).try_into().unwrap_unchecked());
                    t += 8;
                } else if left >= 4 {
                    let xb: [*const u8; 4] = core::array::from_fn(|i| xrow(t + i));
                    tiled_tokens::<L, 4>(d, &xb, (&mut acc[..4]).try_into().unwrap_unchecked());
                    t += 4;
                } else {
                    let xb: [*const u8; 1] = [xrow(t)];
                    tiled_tokens::<L, 1>(d, &xb, (&mut acc[..1]).try_into().unwrap_unchecked());
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

/// A tile's weights decoded for the tiled path, kept per thread: `matmul` runs the same row
/// tile once per token block (16 tokens), and decoding an IQ block costs as much as its
/// products with those tokens. An entry is used only if the tile's bytes equal the copy
/// kept with it (compared in full), so a reused address never returns stale codes.
struct Cached {
    /// (weight address, rows, stride, block bytes).
    key: (usize, usize, usize, usize),
    raw: Vec<u8>,
    dec: Vec<Rows8>,
}

/// Bytes of decoded and copied weights one thread keeps.
const CACHE_BYTES: usize = 8 << 20;

thread_local! {
    static CACHE: std::cell::RefCell<Vec<Cached>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn cached_bytes(c: &Cached) -> usize {
    c.raw.len() + c.dec.len() * core::mem::size_of::<Rows8>()
}

/// Bounds of a tile; panics (a caller bug, never reachable through `matmul`) rather than
/// letting a kernel read or write out of bounds. Also requires VNNI.
fn check(t: &Tile<'_>, y: &[f32], y_stride: usize, w_row: usize, x_row: usize) {
    assert!(has_vnni(), "VNNI tile kernel called on a CPU without AVX-512 VNNI");
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
                    // SAFETY: as below (`check` bounds every row and block, VNNI present).
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
        // has the features (`has_vnni`); the kernels read rows `0..rows` (8-row groups
        // repeat the last row instead of reading past it) and tokens `t0..t0+nt`.
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

/// `vec_dot` through a 1 × 1 tile.
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

/// `ggml_vec_dot_iq3_s_q8_K`.
pub fn iq3_s_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_via_tile(iq3_s_tile, n, w, x)
}

/// `ggml_vec_dot_iq2_xs_q8_K`.
pub fn iq2_xs_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_via_tile(iq2_xs_tile, n, w, x)
}

mod registration {
    use super::*;
    use crate::registry::Kernel;
    use ggml_quants::types::{iq2_s::Iq2S, iq2_xs::Iq2Xs, iq2_xxs::Iq2Xxs, iq3_s::Iq3S, iq3_xxs::Iq3Xxs, q8_k::Q8K};
    use ggml_quants::GgmlType;

    inventory::submit! {
        Kernel::new(<Iq3S as GgmlType>::ID, "avx512vnni", 20, <Q8K as GgmlType>::ID, iq3_s_q8_k)
            .with_available(has_vnni)
            .with_tile(iq3_s_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq2Xs as GgmlType>::ID, "avx512vnni", 20, <Q8K as GgmlType>::ID, iq2_xs_q8_k)
            .with_available(has_vnni)
            .with_tile(iq2_xs_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq2Xxs as GgmlType>::ID, "avx512vnni", 20, <Q8K as GgmlType>::ID, iq2_xxs_q8_k)
            .with_available(has_vnni)
            .with_tile(iq2_xxs_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq3Xxs as GgmlType>::ID, "avx512vnni", 20, <Q8K as GgmlType>::ID, iq3_xxs_q8_k)
            .with_available(has_vnni)
            .with_tile(iq3_xxs_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq2S as GgmlType>::ID, "avx512vnni", 20, <Q8K as GgmlType>::ID, iq2_s_q8_k)
            .with_available(has_vnni)
            .with_tile(iq2_s_tile)
    }
}
