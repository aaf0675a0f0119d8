//! AVX-512F kernels for F32 and F16 weight rows, in the arithmetic of an AVX-512 build of
//! ggml-cpu: `ggml_vec_dot_f32` / `ggml_vec_dot_f16` (4 × 16 lanes) for one token, and
//! llamafile's tinyBLAS (one 16-lane accumulator per output) for the products llama.cpp
//! hands to `llamafile_sgemm`: 2+ tokens, `k % 16 == 0`, row count a multiple of 4.
//! Each kernel's lanes are independent fused multiply-adds, so the results are
//! bit-identical to the scalar twins in [`crate::scalar::dots`].

use core::arch::x86_64::*;

use half::f16;

use super::vnni::has_vnni;
use crate::registry::Tile;
use crate::scalar::dots::{self as sd, reduce16};
use crate::scalar::ops::DotLayout;

/// Whether llama.cpp computes this product with tinyBLAS rather than `vec_dot`.
fn tinyblas_applies(t: &Tile<'_>) -> bool {
    !t.expert && t.total_tokens >= 2 && t.n.is_multiple_of(16) && t.total_rows.is_multiple_of(4)
}

/// F32 × F32, one token: `ggml_vec_dot_f32` of an AVX-512 build.
pub fn f32_f32(n: usize, w: &[u8], x: &[u8]) -> f32 {
    assert!(w.len() >= 4 * n && x.len() >= 4 * n, "f32 row shorter than {n} elements");
    if !has_vnni() {
        return sd::f32_f32_avx512(n, &w[..4 * n], &x[..4 * n]);
    }
    let np = n - n % 64;
    let mut acc = [0f32; 64];
    // SAFETY: AVX-512F checked; loads stay below `np <= n` elements of both rows.
    unsafe { f32_lanes_64(w.as_ptr() as *const f32, x.as_ptr() as *const f32, np, &mut acc) };
    let s = DotLayout::Avx512.reduce(&acc);
    sd::f32_leftovers(s, np, n, |i| (sd_f32(w, i), sd_f32(x, i)))
}

fn sd_f32(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

#[target_feature(enable = "avx512f")]
unsafe fn f32_lanes_64(a: *const f32, b: *const f32, np: usize, acc: &mut [f32; 64]) {
    let mut v = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i < np {
        for (j, vj) in v.iter_mut().enumerate() {
            *vj = _mm512_fmadd_ps(_mm512_loadu_ps(a.add(i + 16 * j)), _mm512_loadu_ps(b.add(i + 16 * j)), *vj);
        }
        i += 64;
    }
    for (j, vj) in v.iter().enumerate() {
        _mm512_storeu_ps(acc.as_mut_ptr().add(16 * j), *vj);
    }
}

/// F16 × F16, one token: `ggml_vec_dot_f16` of an AVX-512 build (the scalar twin is
/// [`crate::scalar::ops::dot_f16_ggml`] with [`DotLayout::Avx512`]).
pub fn f16_f16(n: usize, w: &[u8], x: &[u8]) -> f32 {
    assert!(w.len() >= 2 * n && x.len() >= 2 * n, "f16 row shorter than {n} elements");
    let h = |b: &[u8], i: usize| f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32();
    if !has_vnni() {
        let a: Vec<f16> = w[..2 * n].chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect();
        let b: Vec<f16> = x[..2 * n].chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect();
        return crate::scalar::ops::dot_f16_ggml(&a, &b, DotLayout::Avx512);
    }
    let np = n - n % 64;
    let mut acc = [0f32; 64];
    // SAFETY: AVX-512F/F16C checked; loads stay below `np <= n` elements of both rows.
    unsafe { f16_lanes_64(w.as_ptr(), x.as_ptr(), np, &mut acc) };
    let mut s = DotLayout::Avx512.reduce(&acc) as f64;
    for i in np..n {
        s += (h(w, i) * h(x, i)) as f64;
    }
    s as f32
}

#[target_feature(enable = "avx512f,f16c")]
unsafe fn f16_lanes_64(a: *const u8, b: *const u8, np: usize, acc: &mut [f32; 64]) {
    let ld = |p: *const u8| _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i));
    let mut v = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i < np {
        for (j, vj) in v.iter_mut().enumerate() {
            *vj = _mm512_fmadd_ps(ld(a.add(2 * (i + 16 * j))), ld(b.add(2 * (i + 16 * j))), *vj);
        }
        i += 64;
    }
    for (j, vj) in v.iter().enumerate() {
        _mm512_storeu_ps(acc.as_mut_ptr().add(16 * j), *vj);
    }
}

/// One tinyBLAS output: 16 fused lanes over `n` (a multiple of 16), [`reduce16`] — the
/// arithmetic [`tinyblas_block`] runs per output (the tests hold them to each other).
#[cfg(test)]
#[target_feature(enable = "avx512f,f16c")]
unsafe fn tinyblas_imp<const HALF: bool>(n: usize, w: *const u8, x: *const u8) -> f32 {
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    while i < n {
        let (a, b) = if HALF {
            (
                _mm512_cvtph_ps(_mm256_loadu_si256(w.add(2 * i) as *const __m256i)),
                _mm512_cvtph_ps(_mm256_loadu_si256(x.add(2 * i) as *const __m256i)),
            )
        } else {
            (_mm512_loadu_ps(w.add(4 * i) as *const f32), _mm512_loadu_ps(x.add(4 * i) as *const f32))
        };
        acc = _mm512_fmadd_ps(a, b, acc);
        i += 16;
    }
    let mut lanes = [0f32; 16];
    _mm512_storeu_ps(lanes.as_mut_ptr(), acc);
    reduce16(&lanes)
}

/// `R × C` tinyBLAS outputs at once (rows `w[..R]` × tokens `x[..C]`), each with its own
/// 16-lane accumulator and fused multiply-adds in `k` order, [`reduce16`] — what
/// [`tinyblas_imp`] computes per output, with the loads shared and `R·C` independent FMA
/// chains in flight instead of one (llamafile's register blocking).
#[target_feature(enable = "avx512f,f16c")]
unsafe fn tinyblas_block<const HALF: bool, const R: usize, const C: usize>(
    n: usize,
    w: [*const u8; R],
    x: [*const u8; C],
    out: &mut [[f32; C]; R],
) {
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    let mut i = 0;
    while i < n {
        let mut b = [_mm512_setzero_ps(); C];
        #[allow(clippy::needless_range_loop)] // indexed: LLVM keeps the arrays in registers
        for c in 0..C {
            b[c] = ld16::<HALF>(x[c], i);
        }
        #[allow(clippy::needless_range_loop)]
        for r in 0..R {
            let a = ld16::<HALF>(w[r], i);
            for c in 0..C {
                acc[r][c] = _mm512_fmadd_ps(a, b[c], acc[r][c]);
            }
        }
        i += 16;
    }
    let mut lanes = [0f32; 16];
    for (ar, or) in acc.iter().zip(out.iter_mut()) {
        for (a, o) in ar.iter().zip(or.iter_mut()) {
            _mm512_storeu_ps(lanes.as_mut_ptr(), *a);
            *o = reduce16(&lanes);
        }
    }
}

/// 16 elements from `p` at element `i`: F16 widened (`_mm512_cvtph_ps`) or F32.
#[inline(always)]
unsafe fn ld16<const HALF: bool>(p: *const u8, i: usize) -> __m512 {
    // SAFETY: the caller keeps `i + 16` within the row.
    unsafe {
        if HALF {
            _mm512_cvtph_ps(_mm256_loadu_si256(p.add(2 * i) as *const __m256i))
        } else {
            _mm512_loadu_ps(p.add(4 * i) as *const f32)
        }
    }
}

/// Rows `r0..r0 + R` × tokens `t0..t0 + C` of a tile through [`tinyblas_block`].
///
/// # Safety
/// AVX-512F/F16C present; the rows and tokens exist in `t`, each `t.n` elements with
/// `t.n % 16 == 0`.
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
    unsafe { tinyblas_block::<HALF, R, C>(t.n, w, x, &mut out) };
    for (r, or) in out.iter().enumerate() {
        for (c, o) in or.iter().enumerate() {
            y[(t0 + c) * y_stride + r0 + r] = *o;
        }
    }
}

thread_local! {
    /// [`f16_widened`]'s f32 copies: the tile's tokens, then one 4-row weight block.
    static WIDE: std::cell::RefCell<(Vec<f32>, Vec<f32>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// `n` (a multiple of 16) F16 values at `src` → f32 at `dst` (exact).
#[target_feature(enable = "avx512f,f16c")]
unsafe fn widen_f16(src: *const u8, dst: *mut f32, n: usize) {
    for i in (0..n).step_by(16) {
        _mm512_storeu_ps(dst.add(i), _mm512_cvtph_ps(_mm256_loadu_si256(src.add(2 * i) as *const __m256i)));
    }
}

/// The F16 tinyBLAS tile with both sides widened to f32 once — the tile's tokens up
/// front, each 4-row weight block before its pass over the tokens — then the F32 blocks:
/// F16 → F32 is exact and the FMAs are the same, so every output keeps its bits, without
/// one conversion per operand and block (they took a vector port beside each FMA).
fn f16_widened(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let n = t.n;
    let (rb, tb) = (t.rows - t.rows % 4, t.tokens - t.tokens % 4);
    WIDE.with(|cell| {
        let (xf, wf) = &mut *cell.borrow_mut();
        xf.resize(t.tokens * n, 0.0);
        wf.resize(4 * n, 0.0);
        for tok in 0..t.tokens {
            let src = &t.x[tok * t.x_stride..][..2 * n];
            // SAFETY: AVX-512F/F16C checked by the caller (`has_vnni`); `src` holds `n`
            // F16 values and `xf` room for `n` f32 at `tok·n`.
            unsafe { widen_f16(src.as_ptr(), xf.as_mut_ptr().add(tok * n), n) };
        }
        let xs: Vec<*const u8> = (0..t.tokens).map(|tok| xf[tok * n..].as_ptr() as *const u8).collect();
        let mut pass = |r0: usize, nr: usize| {
            for r in 0..nr {
                let src = &t.w[(r0 + r) * t.w_stride..][..2 * n];
                // SAFETY: as above, for weight row `r0 + r` into slot `r` of `wf`.
                unsafe { widen_f16(src.as_ptr(), wf.as_mut_ptr().add(r * n), n) };
            }
            let w4: [*const u8; 4] = std::array::from_fn(|r| wf[r * n..].as_ptr() as *const u8);
            let put = |y: &mut [f32], t0: usize, r: usize, c: usize, v: f32| y[(t0 + c) * y_stride + r0 + r] = v;
            if nr == 4 {
                for t0 in (0..tb).step_by(4) {
                    let mut out = [[0f32; 4]; 4];
                    // SAFETY: AVX-512F checked; the pointers hold `n` f32 each (`n % 16 == 0`).
                    unsafe { tinyblas_block::<false, 4, 4>(n, w4, std::array::from_fn(|c| xs[t0 + c]), &mut out) };
                    for (r, or) in out.iter().enumerate() {
                        for (c, v) in or.iter().enumerate() {
                            put(y, t0, r, c, *v);
                        }
                    }
                }
                for (t0, &x) in xs.iter().enumerate().skip(tb) {
                    let mut out = [[0f32; 1]; 4];
                    // SAFETY: as above, one token.
                    unsafe { tinyblas_block::<false, 4, 1>(n, w4, [x], &mut out) };
                    for (r, or) in out.iter().enumerate() {
                        put(y, t0, r, 0, or[0]);
                    }
                }
            } else {
                for (r, &w) in w4.iter().enumerate().take(nr) {
                    for (t0, &x) in xs.iter().enumerate() {
                        let mut out = [[0f32; 1]; 1];
                        // SAFETY: as above, one row and one token.
                        unsafe { tinyblas_block::<false, 1, 1>(n, [w], [x], &mut out) };
                        put(y, t0, r, 0, out[0][0]);
                    }
                }
            }
        };
        for r0 in (0..rb).step_by(4) {
            pass(r0, 4);
        }
        if rb < t.rows {
            pass(rb, t.rows - rb);
        }
    });
}

fn float_tile<const HALF: bool>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let one: crate::registry::VecDotFn = if HALF { f16_f16 } else { f32_f32 };
    if !tinyblas_applies(t) || !has_vnni() {
        return crate::matmul::tile_by_vec_dot(one, t, y, y_stride);
    }
    let row = t.n * if HALF { 2 } else { 4 };
    assert!(
        t.rows == 0
            || t.tokens == 0
            || (t.w.len() >= (t.rows - 1) * t.w_stride + row && t.x.len() >= (t.tokens - 1) * t.x_stride + row),
        "tile shorter than its rows"
    );
    if HALF {
        return f16_widened(t, y, y_stride);
    }
    // 4 rows × 4 tokens per block (16 accumulators, 8 loads: 24 of the 32 registers),
    // then the leftover tokens one at a time and the leftover rows one at a time
    let (rb, tb) = (t.rows - t.rows % 4, t.tokens - t.tokens % 4);
    for r0 in (0..rb).step_by(4) {
        for t0 in (0..tb).step_by(4) {
            // SAFETY: AVX-512F/F16C checked (`has_vnni`); rows r0..r0+4 < rows and
            // tokens t0..t0+4 < tokens hold `n` elements each (asserted above), `n % 16
            // == 0` (`tinyblas_applies`).
            unsafe { block_into::<HALF, 4, 4>(t, r0, t0, y, y_stride) };
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

/// F32 tile: tinyBLAS where llama.cpp uses it, else [`f32_f32`] per output.
pub fn f32_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    float_tile::<false>(t, y, y_stride)
}

/// F16 tile: tinyBLAS where llama.cpp uses it, else [`f16_f16`] per output.
pub fn f16_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    float_tile::<true>(t, y, y_stride)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The register-blocked tiles (4×4 blocks, leftover tokens and rows) give every output
    /// the scalar tinyBLAS twin's bits, F32 and F16, on shapes with every kind of leftover.
    #[test]
    fn blocked_tinyblas_tiles_equal_the_per_output_twin() {
        if !has_vnni() {
            return;
        }
        let n = 80;
        for (nr, nt) in [(4usize, 4usize), (8, 5), (6, 7), (12, 2), (3, 9)] {
            let (w32, _) = rows(n * nr, 1 + nr as u32);
            let (x32, _) = rows(n * nt, 7 + nt as u32);
            for half in [false, true] {
                let conv = |b: &[u8]| -> Vec<u8> {
                    if !half {
                        return b.to_vec();
                    }
                    b.chunks_exact(4)
                        .flat_map(|c| f16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
                        .collect()
                };
                let (w, x) = (conv(&w32), conv(&x32));
                let es = if half { 2 } else { 4 };
                let t = Tile {
                    n,
                    w: &w,
                    w_stride: n * es,
                    rows: nr,
                    x: &x,
                    x_stride: n * es,
                    tokens: nt,
                    batched: 0,
                    total_tokens: nt.max(2),
                    total_rows: nr.next_multiple_of(4),
                    expert: false,
                };
                let mut y = vec![0f32; nr * nt];
                if half {
                    f16_tile(&t, &mut y, nr);
                } else {
                    f32_tile(&t, &mut y, nr);
                }
                for r in 0..nr {
                    for tok in 0..nt {
                        let (wr, xr) = (&w[r * n * es..(r + 1) * n * es], &x[tok * n * es..(tok + 1) * n * es]);
                        let want = if half { sd::f16_f16_tinyblas(n, wr, xr) } else { sd::f32_f32_tinyblas(n, wr, xr) };
                        assert_eq!(y[tok * nr + r].to_bits(), want.to_bits(), "half={half} {nr}x{nt} ({r},{tok})");
                    }
                }
            }
        }
    }

    fn rows(n: usize, seed: u32) -> (Vec<u8>, Vec<u8>) {
        let mut s = seed;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 8.0 - 4.0
        };
        let v: Vec<f32> = (0..2 * n).map(|_| r()).collect();
        (v[..n].iter().flat_map(|f| f.to_le_bytes()).collect(), v[n..].iter().flat_map(|f| f.to_le_bytes()).collect())
    }

    /// ggml's leftover elements (past the last 64): blocks of 16 and 8 add rounded
    /// products, the last < 8 fused ones. With -1·1 first and c·c after (c = 1 + 2⁻¹²,
    /// exact product 1 + 2⁻¹¹ + 2⁻²⁴, rounded 1 + 2⁻¹¹) in an 8-element block: 2⁻¹¹; as one
    /// of the last < 8: 2⁻¹¹ + 2⁻²⁴.
    #[test]
    fn f32_leftovers_round_in_blocks_and_fuse_the_tail() {
        let c = 1.0f32 + 2f32.powi(-12);
        let b = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|f| f.to_le_bytes()).collect() };
        for (n, want) in [(2, 2f32.powi(-11) + 2f32.powi(-24)), (8, 2f32.powi(-11)), (64 + 17, 2f32.powi(-11))] {
            let (mut wv, mut xv) = (vec![0f32; n], vec![0f32; n]);
            let first = n - n % 64; // the leftovers start there
            (wv[first], xv[first]) = (-1.0, 1.0);
            (wv[first + 1], xv[first + 1]) = (c, c);
            let (w, x) = (b(&wv), b(&xv));
            assert_eq!(sd::f32_f32_avx512(n, &w, &x), want, "n={n}");
            assert_eq!(f32_f32(n, &w, &x), want, "n={n}");
        }
    }

    #[test]
    fn float_kernels_match_their_scalar_twins() {
        if !has_vnni() {
            return;
        }
        for n in [16, 48, 64, 80, 576, 1000, 7, 70] {
            let (w, x) = rows(n, n as u32);
            assert_eq!(f32_f32(n, &w, &x).to_bits(), sd::f32_f32_avx512(n, &w, &x).to_bits(), "f32 n={n}");
            let h = |b: &[u8]| -> Vec<u8> {
                b.chunks_exact(4)
                    .flat_map(|c| f16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
                    .collect()
            };
            let (wh, xh) = (h(&w), h(&x));
            let hv = |b: &[u8]| -> Vec<f16> { b.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect() };
            let want = crate::scalar::ops::dot_f16_ggml(&hv(&wh), &hv(&xh), DotLayout::Avx512);
            assert_eq!(f16_f16(n, &wh, &xh).to_bits(), want.to_bits(), "f16 n={n}");
            if n % 16 == 0 {
                // SAFETY: features checked above; rows hold `n` elements, `n % 16 == 0`.
                let (a, b) = unsafe {
                    (
                        tinyblas_imp::<false>(n, w.as_ptr(), x.as_ptr()),
                        tinyblas_imp::<true>(n, wh.as_ptr(), xh.as_ptr()),
                    )
                };
                assert_eq!(a.to_bits(), sd::f32_f32_tinyblas(n, &w, &x).to_bits(), "tinyblas f32 n={n}");
                assert_eq!(b.to_bits(), sd::f16_f16_tinyblas(n, &wh, &xh).to_bits(), "tinyblas f16 n={n}");
            }
        }
    }
}
