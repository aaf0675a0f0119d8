//! AVX2 tiles for F32 and F16 weight rows in the arithmetic of an AVX2 build of ggml-cpu:
//! llamafile's tinyBLAS (`tinyBLAS<8, __m256, ..>`: one 8-lane fused accumulator per
//! output, `hsum`) for 2+ tokens outside expert products when `k % 8 == 0` and the row
//! count is a multiple of 4 (twins [`crate::scalar::dots::f32_f32_tinyblas8`] / `f16_f16_tinyblas8`),
//! `avx2.rs`'s `ggml_vec_dot_f32/f16` ports otherwise.

use core::arch::x86_64::*;

use super::has_avx2;
use super::tiles::hsum_float_8;
use crate::registry::Tile;

/// Whether an AVX2 build of llama.cpp computes this product with tinyBLAS.
pub fn tinyblas8_applies(t: &Tile<'_>) -> bool {
    !t.expert && t.total_tokens >= 2 && t.n.is_multiple_of(8) && t.total_rows.is_multiple_of(4)
}

/// 8 elements from `p` at element `i`: F16 widened (`_mm256_cvtph_ps`) or F32.
#[inline(always)]
unsafe fn ld8<const HALF: bool>(p: *const u8, i: usize) -> __m256 {
    // SAFETY: the caller keeps `i + 8` within the row.
    unsafe {
        if HALF {
            _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * i) as *const __m128i))
        } else {
            _mm256_loadu_ps(p.add(4 * i) as *const f32)
        }
    }
}

/// `R × C` tinyBLAS outputs (rows `w[..R]` × tokens `x[..C]`), each its own 8-lane fused
/// accumulator over `n` (a multiple of 8) in `k` order, `hsum` — one output's arithmetic
/// whatever the block (llamafile's register blocking; 4 × 2 keeps the 16 registers).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tinyblas8_block<const HALF: bool, const R: usize, const C: usize>(
    n: usize,
    w: [*const u8; R],
    x: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let mut i = 0;
    while i < n {
        let mut b = [_mm256_setzero_ps(); C];
        #[allow(clippy::needless_range_loop)] // indexed: LLVM keeps the arrays in registers
        for c in 0..C {
            b[c] = ld8::<HALF>(x[c], i);
        }
        #[allow(clippy::needless_range_loop)]
        for r in 0..R {
            let a = ld8::<HALF>(w[r], i);
            for c in 0..C {
                acc[r][c] = _mm256_fmadd_ps(a, b[c], acc[r][c]);
            }
        }
        i += 8;
    }
    for (ar, or) in acc.iter().zip(out.iter_mut()) {
        for (a, o) in ar.iter().zip(or.iter_mut()) {
            *o = hsum_float_8(*a);
        }
    }
}

/// Rows `r0..r0 + R` × tokens `t0..t0 + C` of a tile through [`tinyblas8_block`].
///
/// # Safety
/// AVX2/FMA/F16C present; the rows and tokens exist in `t`, each `t.n` elements with
/// `t.n % 8 == 0`.
unsafe fn block_into<const HALF: bool, const R: usize, const C: usize>(
    t: &Tile<'_>,
    r0: usize,
    t0: usize,
    y: &mut [f32],
    y_stride: usize,
) {
    let w: [*const u8; R] = std::array::from_fn(|r| t.w[(r0 + r) * t.w_stride..].as_ptr());
    let x: [*const u8; C] = std::array::from_fn(|c| t.x[(t0 + c) * t.x_stride..].as_ptr());
    let mut out = [[0f32; C]; R];
    // SAFETY: the caller's contract.
    unsafe { tinyblas8_block::<HALF, R, C>(t.n, w, x, &mut out) };
    for (r, or) in out.iter().enumerate() {
        for (c, o) in or.iter().enumerate() {
            y[(t0 + c) * y_stride + r0 + r] = *o;
        }
    }
}

fn float_tile<const HALF: bool>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let one: crate::registry::VecDotFn = if HALF { super::avx2::f16_f16 } else { super::avx2::f32_f32 };
    if !tinyblas8_applies(t) || !has_avx2() {
        return crate::matmul::tile_by_vec_dot(one, t, y, y_stride);
    }
    let row = t.n * if HALF { 2 } else { 4 };
    assert!(
        t.rows == 0
            || t.tokens == 0
            || (t.w.len() >= (t.rows - 1) * t.w_stride + row && t.x.len() >= (t.tokens - 1) * t.x_stride + row),
        "tile shorter than its rows"
    );
    let (rb, tb) = (t.rows - t.rows % 4, t.tokens - t.tokens % 2);
    for r0 in (0..rb).step_by(4) {
        for t0 in (0..tb).step_by(2) {
            // SAFETY: AVX2/FMA/F16C checked (`has_avx2`); rows r0..r0+4 and tokens
            // t0..t0+2 exist with `n` elements each (asserted above), `n % 8 == 0`
            // (`tinyblas8_applies`).
            unsafe { block_into::<HALF, 4, 2>(t, r0, t0, y, y_stride) };
        }
        for t0 in tb..t.tokens {
            // SAFETY: as above, one token.
            unsafe { block_into::<HALF, 4, 1>(t, r0, t0, y, y_stride) };
        }
    }
    for r0 in rb..t.rows {
        for t0 in 0..t.tokens {
            // SAFETY: as above, one row and one token.
            unsafe { block_into::<HALF, 1, 1>(t, r0, t0, y, y_stride) };
        }
    }
}

/// F32 tile (AVX2): tinyBLAS where llama.cpp's AVX2 build uses it, else `vec_dot`.
pub fn f32_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    float_tile::<false>(t, y, y_stride)
}

/// F16 tile (AVX2): tinyBLAS where llama.cpp's AVX2 build uses it, else `vec_dot`.
pub fn f16_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    float_tile::<true>(t, y, y_stride)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scalar::dots as sd;

    fn rows(n: usize, seed: u32, half: bool) -> Vec<u8> {
        let mut s = seed;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
        };
        (0..n)
            .flat_map(|_| {
                let v = r();
                if half {
                    half::f16::from_f32(v).to_le_bytes().to_vec()
                } else {
                    v.to_le_bytes().to_vec()
                }
            })
            .collect()
    }

    /// Both paths of both tiles against their twins, bit for bit (tinyBLAS: the 8-lane twin;
    /// else the `vec_dot` port itself), and the two paths round differently somewhere.
    #[test]
    fn float_tiles_follow_the_avx2_builds_paths() {
        if !has_avx2() {
            return;
        }
        let mut differ = false;
        for half in [false, true] {
            for (n, nrows, total_rows, tokens) in
                [(512usize, 8usize, 8usize, 3usize), (520, 5, 5, 2), (64, 4, 4, 1), (1000, 4, 12, 4), (256, 6, 8, 5)]
            {
                let eb = if half { 2 } else { 4 };
                let w = rows(n * nrows, 7 + n as u32, half);
                let x = rows(n * tokens, 9 + n as u32, half);
                for expert in [false, true] {
                    let t = Tile {
                        n,
                        w: &w,
                        w_stride: n * eb,
                        rows: nrows,
                        x: &x,
                        x_stride: n * eb,
                        tokens,
                        batched: 0,
                        total_tokens: tokens,
                        total_rows,
                        expert,
                    };
                    let mut y = vec![f32::NAN; nrows * tokens];
                    if half {
                        f16_tile(&t, &mut y, nrows)
                    } else {
                        f32_tile(&t, &mut y, nrows)
                    }
                    let tiny = tinyblas8_applies(&t);
                    for tok in 0..tokens {
                        for r in 0..nrows {
                            let (wr, xr) = (&w[r * n * eb..][..n * eb], &x[tok * n * eb..][..n * eb]);
                            let tb =
                                if half { sd::f16_f16_tinyblas8(n, wr, xr) } else { sd::f32_f32_tinyblas8(n, wr, xr) };
                            let vd = if half {
                                super::super::avx2::f16_f16(n, wr, xr)
                            } else {
                                super::super::avx2::f32_f32(n, wr, xr)
                            };
                            let want = if tiny { tb } else { vd };
                            assert_eq!(
                                y[tok * nrows + r].to_bits(),
                                want.to_bits(),
                                "half {half} n {n} tiny {tiny} y[{tok}][{r}]"
                            );
                            differ |= tb.to_bits() != vd.to_bits();
                        }
                    }
                }
            }
        }
        assert!(differ, "tinyBLAS and vec_dot agree everywhere");
    }
}
