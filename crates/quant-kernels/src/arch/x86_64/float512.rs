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
    let mut s = DotLayout::Avx512.reduce(&acc);
    for i in np..n {
        s = sd_f32(w, i).mul_add(sd_f32(x, i), s);
    }
    s
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

/// One tinyBLAS output: 16 fused lanes over `n` (a multiple of 16), [`reduce16`].
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

fn float_tile<const HALF: bool>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let one: crate::registry::VecDotFn = if HALF { f16_f16 } else { f32_f32 };
    if !tinyblas_applies(t) || !has_vnni() {
        return crate::matmul::tile_by_vec_dot(one, t, y, y_stride);
    }
    let row = t.n * if HALF { 2 } else { 4 };
    for r in 0..t.rows {
        let w = &t.w[r * t.w_stride..][..row];
        for tok in 0..t.tokens {
            let x = &t.x[tok * t.x_stride..][..row];
            // SAFETY: AVX-512F/F16C checked (`has_vnni`); both slices hold exactly `n`
            // elements and `n % 16 == 0` (`tinyblas_applies`), so every load is in bounds.
            y[tok * y_stride + r] = unsafe { tinyblas_imp::<HALF>(t.n, w.as_ptr(), x.as_ptr()) };
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

    fn rows(n: usize, seed: u32) -> (Vec<u8>, Vec<u8>) {
        let mut s = seed;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 8.0 - 4.0
        };
        let v: Vec<f32> = (0..2 * n).map(|_| r()).collect();
        (v[..n].iter().flat_map(|f| f.to_le_bytes()).collect(), v[n..].iter().flat_map(|f| f.to_le_bytes()).collect())
    }

    #[test]
    fn float_kernels_match_their_scalar_twins() {
        if !has_vnni() {
            return;
        }
        for n in [16, 48, 64, 80, 576, 1000] {
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
