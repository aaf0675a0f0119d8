//! AVX-512 VNNI (256-bit `vpdpbusd` via AVX512VL) inner loops of the lattice kernels
//! ([`super::lattice`] holds the formats and the driver; [`crate::scalar::lattice`] the
//! scalar twins, which describe both paths).
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
//!   sub-block scale; per 256-block `r = f32(s1)·d_w`, `acc = fma(r, d_x, acc)`.
//!
//! The integer sums are exact, so the products agree bit for bit with the scalar twins for
//! any input, and with ggml for any activations its quantizers emit.

use core::arch::x86_64::*;

use super::k16;
use super::lattice::{lattice_kernels, Args, Lattice, Rows8, TOK_CHUNK};
use super::tiles::{f16_at, hsum_float_8, row_offsets, store_n, transpose8};
use super::vnni::has_vnni;
use crate::scalar::act::Q8_K_BYTES;

lattice_kernels!(Vnni, "avx512vnni", has_vnni, 20, super::vnni::K_TILE_TOKENS);

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

/// Block `b` of 8 rows (offsets `ro` from `w0`) decoded: biased codes `w + 128`, 32-bit
/// scales, `corr` zero (the tiled loop starts each dot at `−128·bsum` instead).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn decode_rows8<L: Lattice>(w0: *const u8, ro: &[usize; 8], b: usize) -> Rows8 {
    let zero = _mm256_setzero_si256();
    let mut out = Rows8 { u: [zero; 64], sc: [zero; 16], corr: zero, dw: _mm256_setzero_ps() };
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
    out
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

/// The tiled path: rows in groups of 8 against tokens `t0..t0+nt` (`nt ≤ TOK_CHUNK`),
/// with the blocks decoded here or taken from `pre` (`super::lattice::decode_all`'s layout).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tiled_rows<L: Lattice>(a: &Args, t0: usize, nt: usize, pre: Option<&[Rows8]>) {
    let mut r0 = 0;
    while r0 < a.rows {
        let nr = (a.rows - r0).min(8);
        let w0 = a.w.add(r0 * a.w_stride);
        let ro = row_offsets(nr, a.w_stride);
        let mut acc = [_mm256_setzero_ps(); TOK_CHUNK];
        for b in 0..a.nb {
            let dec;
            let d: &Rows8 = match pre {
                Some(p) => p.get_unchecked((r0 / 8) * a.nb + b),
                None => {
                    dec = decode_rows8::<L>(w0, &ro, b);
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

/// Tokens of a tile from which the tiled path runs [`super::k16`]'s 16-token engine.
const WIDE_FROM: usize = 8;

/// Format `L` as [`super::k16`]'s engine decodes it: the codes `w + 128` of
/// [`decode_rows8`], in element order, and one scale per sub-block.
struct Wide<L>(core::marker::PhantomData<L>);

impl<L: Lattice> k16::Biased for Wide<L> {
    const BYTES: usize = L::BYTES;
    const SUB: usize = 256 / L::NSUB;

    #[inline(always)]
    unsafe fn decode(b: *const u8, codes: *mut u8, sc: &mut [i32; 16]) -> f32 {
        let bias = _mm256_set1_epi8(-128);
        for g in 0..8 {
            let (grid, mask) = L::group(b, g);
            let v = _mm256_mask_sub_epi8(_mm256_add_epi8(grid, bias), mask, bias, grid);
            _mm256_storeu_si256(codes.add(32 * g) as *mut __m256i, v);
            let (lo, hi) = L::scales(b, g);
            if L::NSUB == 16 {
                sc[2 * g] = lo;
                sc[2 * g + 1] = hi;
            } else {
                sc[g] = lo;
            }
        }
        f16_at(b) * L::TILED_MUL
    }
}

/// The tiled path through the 16-token engine (same arithmetic as [`tiled_rows`], bit
/// for bit), for tiles of [`WIDE_FROM`]+ tokens.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn wide_rows<L: Lattice>(a: &Args) -> bool {
    if a.tokens < WIDE_FROM {
        return false;
    }
    k16::run::<k16::Bias128<Wide<L>>>(a.w, a.w_stride, a.rows, a.nb, a.x, a.x_stride, a.tokens, true, a.y, a.y_stride);
    true
}
