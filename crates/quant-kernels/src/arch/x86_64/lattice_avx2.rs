//! AVX2 (+ FMA, F16C) inner loops of the lattice kernels (IQ3_S, IQ2_XS, IQ2_XXS, IQ3_XXS,
//! IQ2_S × Q8_K): the arithmetic of [`super::lattice_vnni`] (and of the scalar twins in
//! [`crate::scalar::lattice`]) without AVX-512, for CPUs that have only AVX2; the formats
//! and the driver are [`super::lattice`]'s.
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
use super::lattice::{lattice_kernels, Args, Lattice, Rows8, TOK_CHUNK};
use super::tiles::{f16_at, hsum_float_8, row_offsets, store_n, transpose8};
use crate::scalar::act::Q8_K_BYTES;

lattice_kernels!(Avx2, "avx2", has_avx2, 10, crate::registry::ALL_TOKENS);

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

/// Block `b` of 8 rows (offsets `ro` from `w0`) decoded: signed weights, 16-bit scales in
/// both halves of each lane, `corr` the bias `128·Σ scale·w` of the biased activations.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_rows8<L: Lattice>(w0: *const u8, ro: &[usize; 8], b: usize) -> Rows8 {
    let zero = _mm256_setzero_si256();
    let mut out = Rows8 { u: [zero; 64], sc: [zero; 16], corr: zero, dw: _mm256_setzero_ps() };
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
    out
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

/// The tiled path: rows in groups of 8 against tokens `t0..t0+nt`, the blocks decoded here
/// or taken from `pre` (`super::lattice::decode_all`'s layout).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tiled_rows<L: Lattice>(a: &Args, t0: usize, nt: usize, pre: Option<&[Rows8]>) {
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
            let dec;
            let d: &Rows8 = match pre {
                Some(p) => p.get_unchecked((r0 / 8) * a.nb + b),
                None => {
                    dec = decode_rows8::<L>(w0, &ro, b);
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

/// No wide engine on AVX2: the tiled path runs [`tiled_rows`].
unsafe fn wide_rows<L: Lattice>(_a: &Args) -> bool {
    false
}
