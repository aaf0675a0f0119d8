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
use crate::scalar::dots as sd;
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

/// One tinyBLAS output: 16 fused lanes over `n` (a multiple of 16), [`sd::reduce16`] — the
/// arithmetic [`panel`] runs per output (the tests hold them to each other).
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
    sd::reduce16(&lanes)
}

/// Elements of `k` per pass of [`rows_panels`] for rows longer than [`ONE_PASS_UP_TO`]: 8
/// rows × 256 f32 (8 KiB) of weights and a 16-token tile's 8–16 KiB of activations stay in
/// L1 while every token group passes over them.
const KC: usize = 256;

/// Rows up to this many elements go in one pass (8 × 1024 f32 and 16 tokens of them fit
/// L1 already; more passes only add the accumulators' stores and loads).
const ONE_PASS_UP_TO: usize = 1024;

/// Tokens per register panel of [`rows_panels`]: 8 rows × 3 tokens = 24 accumulators, 3
/// activation vectors and one weight vector in the 32 registers; each activation load
/// feeds 8 FMAs (4 in a 4 × 4 block), each weight load 3.
const PANEL_TOKENS: usize = 3;

/// The accumulators of `R × C` outputs advanced over elements `k0..k1` (`k1 − k0` a
/// multiple of 16; f32 weight rows, the tokens f32 or, with `HX`, F16 widened as they are
/// loaded — exact): per output one 16-lane fused multiply-add chain in `k` order.
#[target_feature(enable = "avx512f,f16c")]
unsafe fn panel<const R: usize, const C: usize, const HX: bool>(
    k0: usize,
    k1: usize,
    w: &[*const f32; R],
    x: &[*const u8; C],
    acc: &mut [[__m512; C]; R],
) {
    let mut a = *acc;
    let mut i = k0;
    while i < k1 {
        let mut b = [_mm512_setzero_ps(); C];
        #[allow(clippy::needless_range_loop)] // indexed: LLVM keeps the arrays in registers
        for c in 0..C {
            b[c] = if HX {
                _mm512_cvtph_ps(_mm256_loadu_si256(x[c].add(2 * i) as *const __m256i))
            } else {
                _mm512_loadu_ps((x[c] as *const f32).add(i))
            };
        }
        #[allow(clippy::needless_range_loop)]
        for r in 0..R {
            let wv = _mm512_loadu_ps(w[r].add(i));
            for c in 0..C {
                a[r][c] = _mm512_fmadd_ps(wv, b[c], a[r][c]);
            }
        }
        i += 16;
    }
    *acc = a;
}

/// Rows `w[..R]` × every token of `xs` (f32 rows of `n` elements, `n % 16 == 0`) →
/// `out(r, token, value)`: [`panel`]s of [`PANEL_TOKENS`] tokens (leftover tokens one at a
/// time), `k` in passes of [`KC`] elements with each panel's accumulators kept in memory
/// between passes (f32 stores and loads: exact), so each output is still one fused-lane
/// chain in `k` order and [`sd::reduce16`] — tinyBLAS's bits — while the pass's weights and
/// activations stay in L1 (a 4 × 4 block over the whole row read the tile's activations
/// from L2 for every 4 rows: 16 bytes per FMA).
#[target_feature(enable = "avx512f,f16c")]
unsafe fn rows_panels<const R: usize, const HX: bool>(
    n: usize,
    w: &[*const f32; R],
    xs: &[*const u8],
    out: &mut dyn FnMut(usize, usize, f32),
) {
    const C: usize = PANEL_TOKENS;
    let groups = xs.len() / C;
    let mut accs = vec![[[_mm512_setzero_ps(); C]; R]; groups];
    let mut ones = vec![[[_mm512_setzero_ps(); 1]; R]; xs.len() - groups * C];
    let kc = if n <= ONE_PASS_UP_TO { n } else { KC };
    let mut k0 = 0;
    while k0 < n {
        let k1 = (k0 + kc).min(n);
        for (x, acc) in xs.chunks_exact(C).zip(accs.iter_mut()) {
            let x: &[*const u8; C] = x.try_into().expect("a panel's tokens");
            panel::<R, C, HX>(k0, k1, w, x, acc);
        }
        for (&x, acc) in xs[groups * C..].iter().zip(ones.iter_mut()) {
            panel::<R, 1, HX>(k0, k1, w, &[x], acc);
        }
        k0 = k1;
    }
    // each panel's R·C accumulators reduced 16 at a time (the last chunk zero-padded)
    let mut sums = [0f32; 16];
    let mut reduce = |v: &[__m512], first_token: usize, cols: usize| {
        for (k, chunk) in v.chunks(16).enumerate() {
            let mut x = [_mm512_setzero_ps(); 16];
            x[..chunk.len()].copy_from_slice(chunk);
            _mm512_storeu_ps(sums.as_mut_ptr(), reduce16_x16(&x));
            for (i, &s) in sums.iter().enumerate().take(chunk.len()) {
                let j = 16 * k + i;
                out(j / cols, first_token + j % cols, s);
            }
        }
    };
    for (g, acc) in accs.iter().enumerate() {
        reduce(acc.as_flattened(), g * C, C);
    }
    for (j, acc) in ones.iter().enumerate() {
        reduce(acc.as_flattened(), groups * C + j, 1);
    }
}

/// [`sd::reduce16`] of 16 vectors at once, lane `i` of the result that of `v[i]`: the same
/// additions in the same tree per vector (high half + low half, then high quarter + low
/// quarter, then `(t0 + t2) + (t1 + t3)`), run across vectors with shuffles — a quarter of
/// the instructions of 16 reductions, which cost a sixth of a 2048-element panel's time.
#[target_feature(enable = "avx512f")]
unsafe fn reduce16_x16(v: &[__m512; 16]) -> __m512 {
    // halves: u[k] = [v[2k] t3 | v[2k+1] t3], t3[i] = v[8+i] + v[i]
    let u: [__m512; 8] = std::array::from_fn(|k| {
        let (a, b) = (v[2 * k], v[2 * k + 1]);
        let lo = _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b);
        let hi = _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b);
        _mm512_add_ps(hi, lo)
    });
    // quarters: w[m] 128-bit lane k = t6 of vector 4m + k, t6[j] = t3[4+j] + t3[j]
    let w: [__m512; 4] = std::array::from_fn(|m| {
        let (a, b) = (u[2 * m], u[2 * m + 1]);
        let lo = _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b);
        let hi = _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b);
        _mm512_add_ps(hi, lo)
    });
    // per 128-bit lane: [t0 + t2, t1 + t3, ..]
    let s: [__m512; 4] = std::array::from_fn(|m| _mm512_add_ps(w[m], _mm512_permute_ps::<0b01_00_11_10>(w[m])));
    // lane 4k + e of lo / hi: lane 0 / 1 of s[e]'s 128-bit lane k (vector 4e + k)
    let a = _mm512_unpacklo_ps(s[0], s[1]);
    let b = _mm512_unpacklo_ps(s[2], s[3]);
    let lo = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    let hi = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    let r = _mm512_add_ps(lo, hi);
    // lane 4k + e holds vector 4e + k: transpose the 4 × 4
    _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), r)
}

/// Rows `rows` of a tile (f32 row `r` at `row(r)`) × tokens `xs` through [`rows_panels`]:
/// 8 rows at a time, then 4, then one.
///
/// # Safety
/// AVX-512F present; every row and token pointer holds `n` f32, `n % 16 == 0`.
unsafe fn f32_panels<const HX: bool>(
    n: usize,
    rows: std::ops::Range<usize>,
    row: &dyn Fn(usize) -> *const f32,
    xs: &[*const u8],
    out: &mut dyn FnMut(usize, usize, f32),
) {
    let mut r0 = rows.start;
    while r0 < rows.end {
        let left = rows.end - r0;
        // SAFETY (all three): the caller's contract, for rows r0.. < rows.end.
        if left >= 8 {
            let w: [*const f32; 8] = std::array::from_fn(|r| row(r0 + r));
            unsafe { rows_panels::<8, HX>(n, &w, xs, &mut |r, t, v| out(r0 + r, t, v)) };
            r0 += 8;
        } else if left >= 4 {
            let w: [*const f32; 4] = std::array::from_fn(|r| row(r0 + r));
            unsafe { rows_panels::<4, HX>(n, &w, xs, &mut |r, t, v| out(r0 + r, t, v)) };
            r0 += 4;
        } else {
            unsafe { rows_panels::<1, HX>(n, &[row(r0)], xs, &mut |_, t, v| out(r0, t, v)) };
            r0 += 1;
        }
    }
}

thread_local! {
    /// [`f16_widened`]'s f32 copy of one 8-row weight block.
    static WIDE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `n` (a multiple of 16) F16 values at `src` → f32 at `dst` (exact).
#[target_feature(enable = "avx512f,f16c")]
unsafe fn widen_f16(src: *const u8, dst: *mut f32, n: usize) {
    for i in (0..n).step_by(16) {
        _mm512_storeu_ps(dst.add(i), _mm512_cvtph_ps(_mm256_loadu_si256(src.add(2 * i) as *const __m256i)));
    }
}

/// The F16 tinyBLAS tile through the f32 panels: each 8-row weight block widened to f32
/// once before its pass over the tokens (each weight vector feeds 3 FMAs), the tokens
/// widened as they are loaded (each token vector feeds 8). F16 → F32 is exact and the
/// FMAs are the same, so every output keeps its bits. Widening the tile's tokens up front
/// instead cost as much as the products on a 16-row tile of 8192-element rows (2 threads,
/// 2048 × 8192 F16 × 512 tokens: 147–152 GFLOP/s against 178–181).
fn f16_widened(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let n = t.n;
    let xs: Vec<*const u8> = (0..t.tokens).map(|tok| t.x[tok * t.x_stride..][..2 * n].as_ptr()).collect();
    WIDE.with(|cell| {
        let wf = &mut *cell.borrow_mut();
        wf.resize(8 * n, 0.0);
        let mut r0 = 0;
        while r0 < t.rows {
            let nr = (t.rows - r0).min(8);
            for r in 0..nr {
                let src = &t.w[(r0 + r) * t.w_stride..][..2 * n];
                // SAFETY: AVX-512F/F16C checked by the caller (`has_vnni`); `src` holds `n`
                // F16 values, slot `r` of `wf` room for `n` f32.
                unsafe { widen_f16(src.as_ptr(), wf.as_mut_ptr().add(r * n), n) };
            }
            let wp = wf.as_ptr();
            // SAFETY: as above; slots 0..nr of `wf` hold `n` f32 and every token `n` F16
            // (`n % 16 == 0`, `tinyblas_applies`).
            unsafe {
                f32_panels::<true>(n, 0..nr, &|r| wp.add(r * n), &xs, &mut |r, tok, v| y[tok * y_stride + r0 + r] = v);
            }
            r0 += nr;
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
    let row = |r: usize| t.w[r * t.w_stride..].as_ptr() as *const f32;
    let xs: Vec<*const u8> = (0..t.tokens).map(|tok| t.x[tok * t.x_stride..].as_ptr()).collect();
    // SAFETY: AVX-512F checked (`has_vnni`); every row and token holds `n` f32 (asserted
    // above), `n % 16 == 0` (`tinyblas_applies`).
    unsafe { f32_panels::<false>(t.n, 0..t.rows, &row, &xs, &mut |r, tok, v| y[tok * y_stride + r] = v) };
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

    /// The register-blocked tiles (8×3 panels in passes over `k`, leftover tokens and rows) give every output
    /// the scalar tinyBLAS twin's bits, F32 and F16, on shapes with every kind of leftover.
    #[test]
    fn blocked_tinyblas_tiles_equal_the_per_output_twin() {
        if !has_vnni() {
            return;
        }
        // n = 80: one pass; 1040: four passes of KC = 256 and a short fifth
        for (n, nr, nt) in [
            (80, 4usize, 4usize),
            (80, 8, 5),
            (80, 6, 7),
            (80, 12, 2),
            (80, 3, 9),
            (1040, 16, 16),
            (1040, 13, 8),
            (1040, 21, 11),
        ] {
            let (w32, _) = rows(n * nr, 1 + (nr + n) as u32);
            let (x32, _) = rows(n * nt, 7 + (nt + n) as u32);
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
                        assert_eq!(
                            y[tok * nr + r].to_bits(),
                            want.to_bits(),
                            "half={half} n={n} {nr}x{nt} ({r},{tok})"
                        );
                    }
                }
            }
        }
    }

    /// Every vector's lanes of 16 reductions at once are [`sd::reduce16`]'s bits, on sums whose
    /// order matters (lanes of mixed magnitudes and signs).
    #[test]
    fn reduce16_x16_is_reduce16_per_vector() {
        if !has_vnni() {
            return;
        }
        let mut s = 99u32;
        for _ in 0..200 {
            let lanes: Vec<[f32; 16]> = (0..16)
                .map(|_| {
                    std::array::from_fn(|_| {
                        s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                        let m = ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 2.0;
                        m * 2f32.powi((s % 40) as i32 - 20)
                    })
                })
                .collect();
            let mut out = [0f32; 16];
            // SAFETY: AVX-512F checked above.
            unsafe {
                let v: [__m512; 16] = std::array::from_fn(|i| _mm512_loadu_ps(lanes[i].as_ptr()));
                _mm512_storeu_ps(out.as_mut_ptr(), reduce16_x16(&v));
            }
            for (i, l) in lanes.iter().enumerate() {
                assert_eq!(out[i].to_bits(), sd::reduce16(l).to_bits(), "vector {i}: {l:?}");
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
