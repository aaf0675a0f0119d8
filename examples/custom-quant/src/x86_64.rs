//! The AVX2 + FMA kernels of `q8_demo`: [`vec_dot`] over GGUF's rows and [`tile`] over
//! the `q8_demo_x4` layout ([`LAYOUT`], owned by the `demo-avx2` kernel). The only
//! `unsafe` of the crate is here: unaligned loads from bounds-checked slices and the calls
//! into `#[target_feature]` functions after the runtime check
//! ([`quant_kernels::x86_64::has_avx2`], which honours the `GGUF_CPU_FEATURES` cap).
//!
//! Both compute exactly the lanes of [`crate::kernels`]' module docs: `vpmovsxbw` widens
//! 16 quants to `i16`, `vpmaddwd` sums adjacent products into 8 `i32` lanes (exact: no
//! saturation for any byte values), the two halves of a block are added, converted and
//! `fma`-ed with `d_w·d_x` into 8 `f32` lanes.

use core::arch::x86_64::*;

use quant_kernels::scalar::act::Q8_0_BYTES;
use quant_kernels::x86_64::has_avx2;
use quant_kernels::{Repack, Tile};

use crate::kernels::{block_scale, blocks, trace, vec_dot_scalar, Path};
use crate::layout::{self, GROUP_BLOCK, GROUP_ROWS};
use crate::Q8_DEMO_BYTES;

/// The layout, owned by the AVX2 kernel (registered in [`crate::kernels`]).
pub const LAYOUT: Repack = Repack { name: "q8_demo_x4", applies: layout::applies, repack: layout::repack, tile };

/// `q8_demo · Q8_0` of one row with AVX2 (the scalar twin without AVX2 or under the cap).
pub fn vec_dot(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let nb = blocks(n, w, x);
    if !has_avx2() {
        return vec_dot_scalar(n, w, x);
    }
    trace(Path::Avx2Dot);
    // SAFETY: AVX2 and FMA were detected at run time just above.
    unsafe { dot_avx2(nb, w, x) }
}

/// 16 signed bytes widened to 16 `i16`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn widen(b: &[u8]) -> __m256i {
    let b: &[u8; 16] = b[..16].try_into().expect("16 bytes");
    // SAFETY: `b` is 16 readable bytes; `loadu` has no alignment requirement.
    let v = unsafe { _mm_loadu_si128(b.as_ptr().cast()) };
    _mm256_cvtepi8_epi16(v)
}

/// The 8 lanes of the AVX2 horizontal sum, in [`crate::kernels`]' order.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn reduce(acc: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// One block's products in 8 `i32` lanes, converted to `f32`: weight halves `wl`, `wh`
/// against activation halves `xl`, `xh` (each 16 widened quants).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn block(wl: __m256i, wh: __m256i, xl: __m256i, xh: __m256i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(wl, xl), _mm256_madd_epi16(wh, xh)))
}

#[target_feature(enable = "avx2,fma")]
fn dot_avx2(nb: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (wb, xb) in w.chunks_exact(Q8_DEMO_BYTES).zip(x.chunks_exact(Q8_0_BYTES)).take(nb) {
        let p = block(widen(&wb[4..]), widen(&wb[20..]), widen(&xb[2..]), widen(&xb[18..]));
        acc = _mm256_fmadd_ps(p, _mm256_set1_ps(block_scale(wb, xb)), acc);
    }
    reduce(acc)
}

/// Tokens per pass of [`tile`] (4 rows × 4 tokens of accumulators).
const TOKENS: usize = 4;

/// Tile over `q8_demo_x4` rows × Q8_0 activations (the portable reader without AVX2).
pub fn tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = layout::check_tile(t, y, y_stride);
    if !has_avx2() {
        return layout::tile_scalar(t, y, y_stride);
    }
    trace(Path::Avx2Tile);
    // SAFETY: AVX2 and FMA were detected at run time just above; `check_tile` bounded the
    // rows, activations and outputs (the kernel indexes slices, so nothing is unchecked).
    unsafe { tile_avx2(t, nb, y, y_stride) }
}

#[target_feature(enable = "avx2,fma")]
fn tile_avx2(t: &Tile<'_>, nb: usize, y: &mut [f32], y_stride: usize) {
    let row = nb * Q8_DEMO_BYTES;
    for g in 0..t.rows / GROUP_ROWS {
        let gw = &t.w[g * GROUP_ROWS * row..][..GROUP_ROWS * row];
        let mut t0 = 0;
        while t0 < t.tokens {
            let nt = TOKENS.min(t.tokens - t0);
            let mut acc = [[_mm256_setzero_ps(); TOKENS]; GROUP_ROWS];
            for b in 0..nb {
                let blk = &gw[b * GROUP_BLOCK..][..GROUP_BLOCK];
                // Each token's activation block, widened once for the 4 rows.
                let mut xl = [_mm256_setzero_si256(); TOKENS];
                let mut xh = [_mm256_setzero_si256(); TOKENS];
                let mut xs: [&[u8]; TOKENS] = [&[]; TOKENS];
                for k in 0..nt {
                    let xb = &t.x[(t0 + k) * t.x_stride + b * Q8_0_BYTES..][..Q8_0_BYTES];
                    (xl[k], xh[k], xs[k]) = (widen(&xb[2..]), widen(&xb[18..]), xb);
                }
                for (r, acc) in acc.iter_mut().enumerate() {
                    let (wl, wh) = (widen(&blk[16 + 16 * r..]), widen(&blk[80 + 16 * r..]));
                    for k in 0..nt {
                        let d = _mm256_set1_ps(block_scale(&blk[4 * r..], xs[k]));
                        acc[k] = _mm256_fmadd_ps(block(wl, wh, xl[k], xh[k]), d, acc[k]);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                for (k, a) in acc.iter().take(nt).enumerate() {
                    y[(t0 + k) * y_stride + g * GROUP_ROWS + r] = reduce(*a);
                }
            }
            t0 += nt;
        }
    }
}
