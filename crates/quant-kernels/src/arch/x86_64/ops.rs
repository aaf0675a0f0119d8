//! AVX2 + FMA + F16C versions of the f32 helpers in `crate::ops` (scalar twins in
//! `crate::scalar::ops`), and AVX-512 ones of the flash-attention tiles' `gemm_fma` and
//! exp where the CPU has it. The safe wrappers fall back to the twin when the features
//! are missing, so they are sound on any CPU.

use core::arch::x86_64::*;

use half::f16;

use super::has_avx2;
use crate::scalar::ops as sc;
use crate::scalar::ops::DotLayout;

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn hsum(x: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// `Σ a·b` with four 8-lane FMA accumulators.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    if !has_avx2() {
        return sc::dot_f32(&a[..n], &b[..n]);
    }
    // SAFETY: AVX2/FMA/F16C checked above; every load reads `a[i..i+8]`/`b[i..i+8]` with
    // `i + 8 <= n <= len`.
    unsafe { dot_f32_imp(a.as_ptr(), b.as_ptr(), n) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f32_imp(a: *const f32, b: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i + 8 * k)), _mm256_loadu_ps(b.add(i + 8 * k)), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i)), _mm256_loadu_ps(b.add(i)), acc[0]);
        i += 8;
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut sum = hsum(s);
    while i < n {
        sum += *a.add(i) * *b.add(i);
        i += 1;
    }
    sum
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load_f16x8(p: *const f16) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// An element type the ggml-order dots read 8 at a time as f32 lanes.
pub(super) trait Lanes8: Copy {
    /// 8 elements at `p` widened to f32.
    ///
    /// # Safety
    /// AVX2 and F16C present; 8 readable elements at `p`.
    unsafe fn load8(p: *const Self) -> __m256;
}

impl Lanes8 for f16 {
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> __m256 {
        load_f16x8(p)
    }
}

impl Lanes8 for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
}

/// `Σ a·b`, `a` in f16.
pub fn dot_f16_f32(a: &[f16], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    if !has_avx2() {
        return sc::dot_f16_f32(&a[..n], &b[..n]);
    }
    // SAFETY: features checked; loads stay below `n`.
    unsafe { dot_f16_f32_imp(a.as_ptr(), b.as_ptr(), n) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_f32_imp(a: *const f16, b: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(load_f16x8(a.add(i + 8 * k)), _mm256_loadu_ps(b.add(i + 8 * k)), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load_f16x8(a.add(i)), _mm256_loadu_ps(b.add(i)), acc[0]);
        i += 8;
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut sum = hsum(s);
    while i < n {
        sum += (*a.add(i)).to_f32() * *b.add(i);
        i += 1;
    }
    sum
}

/// `Σ a·b` of two f16 rows.
pub fn dot_f16_f16(a: &[f16], b: &[f16]) -> f32 {
    let n = a.len().min(b.len());
    if !has_avx2() {
        return sc::dot_f16_f16(&a[..n], &b[..n]);
    }
    // SAFETY: features checked; loads stay below `n`.
    unsafe { dot_f16_f16_imp(a.as_ptr(), b.as_ptr(), n) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_f16_imp(a: *const f16, b: *const f16, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(load_f16x8(a.add(i + 8 * k)), load_f16x8(b.add(i + 8 * k)), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load_f16x8(a.add(i)), load_f16x8(b.add(i)), acc[0]);
        i += 8;
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut sum = hsum(s);
    while i < n {
        sum += (*a.add(i)).to_f32() * (*b.add(i)).to_f32();
        i += 1;
    }
    sum
}

/// `y += a·x`, `x` in f16.
pub fn axpy_f16(y: &mut [f32], a: f32, x: &[f16]) {
    let n = y.len().min(x.len());
    if !has_avx2() {
        return sc::axpy_f16(&mut y[..n], a, &x[..n]);
    }
    // SAFETY: features checked; loads and stores stay below `n`.
    unsafe { axpy_f16_imp(y.as_mut_ptr(), a, x.as_ptr(), n) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn axpy_f16_imp(y: *mut f32, a: f32, x: *const f16, n: usize) {
    let va = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(y.add(i), _mm256_fmadd_ps(load_f16x8(x.add(i)), va, _mm256_loadu_ps(y.add(i))));
        i += 8;
    }
    while i < n {
        *y.add(i) += (*x.add(i)).to_f32() * a;
        i += 1;
    }
}

/// [`sc::stream_sum`] with a `prefetcht1` of the line `prefetch` bytes ahead per 64 bytes
/// read.
pub fn stream_sum_prefetch(bytes: &[u8], prefetch: usize) -> u64 {
    let mut acc = [0u64; 8];
    let mut chunks = bytes.chunks_exact(64);
    for c in &mut chunks {
        // SAFETY: SSE is part of x86-64; a prefetch never faults, and the address is only
        // formed with `wrapping_add`, never dereferenced.
        unsafe { _mm_prefetch::<_MM_HINT_T1>((c.as_ptr() as *const i8).wrapping_add(prefetch)) };
        sc::add_line(&mut acc, c);
    }
    sc::tail_sum(acc, chunks.remainder())
}

/// `y += a·x`.
pub fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    if !has_avx2() {
        return sc::axpy_f32(&mut y[..n], a, &x[..n]);
    }
    // SAFETY: features checked; loads and stores stay below `n`.
    unsafe { mad_f32_imp::<false>(y.as_mut_ptr(), a, x.as_ptr(), n) }
}

/// `y[i] = fma(x[i], a, y[i])` for every lane, tail included (`ggml_vec_mad_f32` as a
/// native build compiles it: SIMD FMAs, the scalar tail contracted to FMAs too).
pub fn mad_f32(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    if !has_avx2() {
        return sc::mad_f32(&mut y[..n], a, &x[..n]);
    }
    // SAFETY: features checked; loads and stores stay below `n`.
    unsafe { mad_f32_imp::<true>(y.as_mut_ptr(), a, x.as_ptr(), n) }
}

/// `y += a·x` by 8-lane FMAs; the tail fused too when `FUSED_TAIL` ([`mad_f32`]), else
/// rounded twice ([`axpy_f32`]).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mad_f32_imp<const FUSED_TAIL: bool>(y: *mut f32, a: f32, x: *const f32, n: usize) {
    let va = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(y.add(i), _mm256_fmadd_ps(_mm256_loadu_ps(x.add(i)), va, _mm256_loadu_ps(y.add(i))));
        i += 8;
    }
    while i < n {
        *y.add(i) = if FUSED_TAIL { (*x.add(i)).mul_add(a, *y.add(i)) } else { *y.add(i) + *x.add(i) * a };
        i += 1;
    }
}

/// `y = f16(fma(x, a, y))`, an f16 accumulator (`ggml_vec_mad_f16`).
pub fn mad_f16(y: &mut [f16], a: f32, x: &[f16]) {
    let n = y.len().min(x.len());
    if !has_avx2() {
        return sc::mad_f16(&mut y[..n], a, &x[..n]);
    }
    // SAFETY: features checked; loads and stores stay below `n`.
    unsafe { mad_f16_imp(y.as_mut_ptr(), a, x.as_ptr(), n) }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn mad_f16_imp(y: *mut f16, a: f32, x: *const f16, n: usize) {
    let va = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 8 <= n {
        let r = _mm256_fmadd_ps(load_f16x8(x.add(i)), va, load_f16x8(y.add(i)));
        _mm_storeu_si128(y.add(i) as *mut __m128i, _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(r));
        i += 8;
    }
    while i < n {
        *y.add(i) = f16::from_f32((*x.add(i)).to_f32().mul_add(a, (*y.add(i)).to_f32()));
        i += 1;
    }
}

/// `y = f16(y·a)` (`ggml_vec_scale_f16`).
pub fn scale_f16(y: &mut [f16], a: f32) {
    if !has_avx2() {
        return sc::scale_f16(y, a);
    }
    // SAFETY: features checked; loads and stores stay below `y.len()`.
    unsafe { scale_f16_imp(y.as_mut_ptr(), a, y.len()) }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn scale_f16_imp(y: *mut f16, a: f32, n: usize) {
    let va = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 8 <= n {
        let r = _mm256_mul_ps(load_f16x8(y.add(i)), va);
        _mm_storeu_si128(y.add(i) as *mut __m128i, _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(r));
        i += 8;
    }
    while i < n {
        *y.add(i) = f16::from_f32((*y.add(i)).to_f32() * a);
        i += 1;
    }
}

static FP16: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// AVX512-FP16 is available and [`crate::cpu`]'s cap is `native` (a native llama.cpp
/// build on this CPU then does its f16 vector ops in half precision: `__AVX512FP16__`).
pub fn has_fp16() -> bool {
    use std::sync::atomic::Ordering;
    match FP16.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let yes = super::vnni::has_vnni()
                && crate::cpu::allows(crate::cpu::Level::Native)
                && std::is_x86_feature_detected!("avx512fp16");
            FP16.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
            yes
        }
    }
}

/// [`sc::mad_f16_fp16`]: `vfmadd231ph` over the first `n & !127` elements.
pub fn mad_f16_fp16(y: &mut [f16], a: f32, x: &[f16]) {
    let n = y.len().min(x.len());
    if !has_fp16() {
        return sc::mad_f16_fp16(&mut y[..n], a, &x[..n]);
    }
    // SAFETY: AVX512-FP16 (and AVX2) checked; loads and stores stay below `n`.
    unsafe { mad_f16_fp16_imp(y.as_mut_ptr(), a, x.as_ptr(), n) }
}

/// [`sc::scale_f16_fp16`]: `vmulph` over the first `n & !127` elements.
pub fn scale_f16_fp16(y: &mut [f16], a: f32) {
    if !has_fp16() {
        return sc::scale_f16_fp16(y, a);
    }
    // SAFETY: AVX512-FP16 (and AVX2) checked; loads and stores stay below `y.len()`.
    unsafe { scale_f16_fp16_imp(y.as_mut_ptr(), a, y.len()) }
}

/// `n` elements: half-precision FMAs over `n & !127`, then [`mad_f16_imp`].
#[target_feature(enable = "avx512fp16,avx512f,avx512bw,avx2,fma,f16c")]
pub(super) unsafe fn mad_f16_fp16_imp(y: *mut f16, a: f32, x: *const f16, n: usize) {
    let np = n - n % sc::FP16_STEP;
    let va = _mm512_castsi512_ph(_mm512_set1_epi16(f16::from_f32(a).to_bits() as i16));
    let mut i = 0;
    while i < np {
        let vx = _mm512_castsi512_ph(_mm512_loadu_si512(x.add(i) as *const _));
        let vy = _mm512_castsi512_ph(_mm512_loadu_si512(y.add(i) as *const _));
        _mm512_storeu_si512(y.add(i) as *mut _, _mm512_castph_si512(_mm512_fmadd_ph(vx, va, vy)));
        i += 32;
    }
    mad_f16_imp(y.add(np), a, x.add(np), n - np);
}

/// `n` elements: half-precision products over `n & !127`, then [`scale_f16_imp`].
#[target_feature(enable = "avx512fp16,avx512f,avx512bw,avx2,fma,f16c")]
pub(super) unsafe fn scale_f16_fp16_imp(y: *mut f16, a: f32, n: usize) {
    let np = n - n % sc::FP16_STEP;
    let va = _mm512_castsi512_ph(_mm512_set1_epi16(f16::from_f32(a).to_bits() as i16));
    let mut i = 0;
    while i < np {
        let vy = _mm512_castsi512_ph(_mm512_loadu_si512(y.add(i) as *const _));
        _mm512_storeu_si512(y.add(i) as *mut _, _mm512_castph_si512(_mm512_mul_ph(vy, va)));
        i += 32;
    }
    scale_f16_imp(y.add(np), a, n - np);
}

#[cfg(test)]
mod f16_acc_tests {
    use super::*;

    /// The twin's single-rounding half FMA against `vfmadd231ph` on random bit patterns
    /// (every exponent, subnormals, ties after the f32 step), where the CPU has it.
    #[test]
    fn fma_f16_twin_rounds_as_avx512_fp16() {
        if !has_fp16() {
            return;
        }
        let mut s = 777u32;
        let mut bits = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 16) as u16
        };
        let finite = |h: f16| h.is_finite();
        let (mut x, mut v, mut y) = (vec![f16::ZERO; 128], vec![f16::ZERO; 128], vec![f16::ZERO; 128]);
        for _ in 0..4000 {
            for i in 0..128 {
                let pick = |b: u16| f16::from_bits(b);
                x[i] = pick(bits());
                y[i] = pick(bits());
                v[i] = pick(bits() & 0x7bff);
                if !finite(x[i]) || !finite(y[i]) {
                    (x[i], y[i]) = (f16::ONE, f16::ZERO);
                }
            }
            // one multiplier per call, as ggml's: every lane of this call uses v[0]
            let a = v[0].to_f32();
            let mut hw = y.clone();
            // SAFETY: AVX512-FP16 checked above; 128 elements.
            unsafe { mad_f16_fp16_imp(hw.as_mut_ptr(), a, x.as_ptr(), 128) };
            for i in 0..128 {
                let want = hw[i];
                let got = sc::fma_f16(x[i], v[0], y[i]);
                assert!(
                    want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()),
                    "fma({:?}, {:?}, {:?}): hw {want:?} twin {got:?}",
                    x[i],
                    v[0],
                    y[i]
                );
            }
        }
    }

    #[test]
    fn ssm_scan_lanes_matches_its_scalar_twin() {
        if !has_avx2() {
            return;
        }
        let mut seed = 777u32;
        let mut r = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
        };
        for (n, step) in [(128usize, 64usize), (64, 64), (32, 16), (256, 32)] {
            let (b, c): (Vec<f32>, Vec<f32>) = ((0..n).map(|_| r()).collect(), (0..n).map(|_| r()).collect());
            let s0: Vec<f32> = (0..n).map(|_| r()).collect();
            let (da, x_dt) = (r().abs() / 2.0, r());
            let (mut s1, mut s2) = (s0.clone(), s0);
            let (mut a1, mut a2) = (vec![0.5f32; step], vec![0.5f32; step]);
            ssm_scan_lanes(&mut s1, &b, &c, da, x_dt, &mut a1);
            sc::ssm_scan_lanes(&mut s2, &b, &c, da, x_dt, &mut a2);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&s1), bits(&s2), "state, n {n}");
            assert_eq!(bits(&a1), bits(&a2), "sums, n {n}");
        }
    }

    #[test]
    fn mad_and_scale_f16_match_their_scalar_twins() {
        let mut s = 12345u32;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
        };
        for n in [1, 7, 8, 9, 64, 77, 128, 256, 300, 512] {
            let x: Vec<f16> = (0..n).map(|_| f16::from_f32(r())).collect();
            let y0: Vec<f16> = (0..n).map(|_| f16::from_f32(r())).collect();
            let a = r();
            let (mut y1, mut y2) = (y0.clone(), y0.clone());
            mad_f16(&mut y1, a, &x);
            sc::mad_f16(&mut y2, a, &x);
            assert_eq!(y1, y2, "mad n={n}");
            scale_f16(&mut y1, a);
            sc::scale_f16(&mut y2, a);
            assert_eq!(y1, y2, "scale n={n}");
            // the AVX512-FP16 build's rounding (the twin alone where the CPU lacks it)
            let (mut h1, mut h2) = (y0.clone(), y0.clone());
            mad_f16_fp16(&mut h1, a, &x);
            sc::mad_f16_fp16(&mut h2, a, &x);
            assert_eq!(h1, h2, "mad fp16 n={n}");
            scale_f16_fp16(&mut h1, a);
            sc::scale_f16_fp16(&mut h2, a);
            assert_eq!(h1, h2, "scale fp16 n={n}");
            let xf: Vec<f32> = (0..n).map(|_| r()).collect();
            let yf: Vec<f32> = (0..n).map(|_| r()).collect();
            let (mut f1, mut f2) = (yf.clone(), yf.clone());
            mad_f32(&mut f1, a, &xf);
            sc::mad_f32(&mut f2, a, &xf);
            assert_eq!(f1, f2, "mad_f32 n={n}");
            // fused: differs from the twice-rounded axpy somewhere on these inputs
            let mut f3 = yf.clone();
            sc::axpy_f32(&mut f3, a, &xf);
            if n >= 64 {
                assert_ne!(f1, f3, "mad_f32 n={n} rounds like an unfused multiply-add");
            }
        }
    }
}

/// [`crate::scalar::ops::dot_f16_ggml`] with the lane sums computed by AVX2 FMAs (lanes
/// are independent, so the result is bit-identical to the scalar twin).
pub fn dot_f16_ggml(a: &[f16], b: &[f16], layout: DotLayout) -> f32 {
    let n = a.len().min(b.len());
    if !has_avx2() {
        return sc::dot_f16_ggml(&a[..n], &b[..n], layout);
    }
    let step = layout.step();
    let np = n - n % step;
    // SAFETY: features checked; loads stay below `np <= n`.
    let mut sum = unsafe {
        match layout {
            sc::DotLayout::Avx512 => dot_f16_reduce512_imp(a.as_ptr(), b.as_ptr(), np),
            sc::DotLayout::Avx2 => dot_f16_reduce256_imp(a.as_ptr(), b.as_ptr(), np),
        }
    } as f64;
    for i in np..n {
        sum += (a[i].to_f32() * b[i].to_f32()) as f64;
    }
    sum as f32
}

/// `Σ a·b` of two f32 rows in the order of ggml-cpu's `ggml_vec_dot_f32` for `layout`
/// (the lanes and reduction of [`dot_f16_ggml`], the leftovers fused into the sum in
/// order); twin [`sc::dot_f32_ggml`].
pub fn dot_f32_ggml(a: &[f32], b: &[f32], layout: DotLayout) -> f32 {
    let n = a.len().min(b.len());
    if !has_avx2() {
        return sc::dot_f32_ggml(&a[..n], &b[..n], layout);
    }
    // SAFETY: features checked; every load is below `n`.
    unsafe { dot_f32_ggml_imp(&a[..n], &b[..n], layout) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f32_ggml_imp(a: &[f32], b: &[f32], layout: DotLayout) -> f32 {
    let n = a.len();
    let np = n - n % layout.step();
    let mut sum = match layout {
        sc::DotLayout::Avx512 => dot_f16_reduce512_imp(a.as_ptr(), b.as_ptr(), np),
        sc::DotLayout::Avx2 => dot_f16_reduce256_imp(a.as_ptr(), b.as_ptr(), np),
    };
    for i in np..n {
        sum = a[i].mul_add(b[i], sum);
    }
    sum
}

/// The 64 lanes of ggml's AVX-512 `ggml_vec_dot_f16` (four 16-lane accumulators, here
/// eight 8-lane ones: accumulator `k` is `v[2k]` low, `v[2k+1]` high) over `np` (a multiple
/// of 64) elements, reduced in registers in [`sc::DotLayout::reduce`]'s order:
/// `x0 = acc0 + acc2`, `x1 = acc1 + acc3`, `x0 + x1`, then `_mm512_reduce_add_ps`'s halves.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn dot_f16_reduce512_imp<T: Lanes8>(a: *const T, b: *const T, np: usize) -> f32 {
    let mut v = [_mm256_setzero_ps(); 8];
    let mut i = 0;
    while i < np {
        for (j, vj) in v.iter_mut().enumerate() {
            *vj = _mm256_fmadd_ps(T::load8(a.add(i + 8 * j)), T::load8(b.add(i + 8 * j)), *vj);
        }
        i += 64;
    }
    // 16-lane vectors as (low, high) pairs: x = (v0 + v4) + (v2 + v6), (v1 + v5) + (v3 + v7).
    let lo = _mm256_add_ps(_mm256_add_ps(v[0], v[4]), _mm256_add_ps(v[2], v[6]));
    let hi = _mm256_add_ps(_mm256_add_ps(v[1], v[5]), _mm256_add_ps(v[3], v[7]));
    // t3[i] = x[8 + i] + x[i]; t6[i] = t3[4 + i] + t3[i]; (t6[0] + t6[2]) + (t6[1] + t6[3]).
    let t3 = _mm256_add_ps(hi, lo);
    let t6 = _mm_add_ps(_mm256_extractf128_ps::<1>(t3), _mm256_castps256_ps128(t3));
    let u = _mm_add_ps(t6, _mm_movehl_ps(t6, t6));
    _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)))
}

/// The 32 lanes of ggml's AVX2 `ggml_vec_dot_f16` (four 8-lane accumulators) over `np` (a
/// multiple of 32) elements, reduced in registers in [`sc::DotLayout::reduce`]'s order:
/// `(acc0 + acc2) + (acc1 + acc3)`, `t[i] = x[i] + x[4 + i]`, `(t0 + t1) + (t2 + t3)`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn dot_f16_reduce256_imp<T: Lanes8>(a: *const T, b: *const T, np: usize) -> f32 {
    let mut v = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < np {
        for (j, vj) in v.iter_mut().enumerate() {
            *vj = _mm256_fmadd_ps(T::load8(a.add(i + 8 * j)), T::load8(b.add(i + 8 * j)), *vj);
        }
        i += 32;
    }
    let x = _mm256_add_ps(_mm256_add_ps(v[0], v[2]), _mm256_add_ps(v[1], v[3]));
    let t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    // [t0 + t1, t2 + t3] then their sum.
    let u = _mm_add_ps(t, _mm_movehdup_ps(t));
    _mm_cvtss_f32(_mm_add_ss(u, _mm_movehl_ps(u, u)))
}

#[cfg(test)]
mod dot_ggml_tests {
    use super::*;

    /// `simd` against `twin` on random rows of every length class (whole steps, leftovers,
    /// empty) in both layouts, bit for bit; `conv` makes an element from an f32.
    fn against_twin<T>(
        seed: u32,
        conv: impl Fn(f32) -> T,
        simd: impl Fn(&[T], &[T], DotLayout) -> f32,
        twin: impl Fn(&[T], &[T], DotLayout) -> f32,
    ) {
        let mut s = seed;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 8.0 - 4.0
        };
        for layout in [sc::DotLayout::Avx512, sc::DotLayout::Avx2] {
            for n in [0, 1, 31, 32, 33, 63, 64, 65, 80, 96, 128, 129, 200, 256, 320] {
                let a: Vec<T> = (0..n).map(|_| conv(r())).collect();
                let b: Vec<T> = (0..n).map(|_| conv(r())).collect();
                let (x, y) = (simd(&a, &b, layout), twin(&a, &b, layout));
                assert_eq!(x.to_bits(), y.to_bits(), "{layout:?} n={n}");
            }
        }
    }

    #[test]
    fn dot_f16_ggml_matches_its_scalar_twin() {
        against_twin(777, f16::from_f32, dot_f16_ggml, sc::dot_f16_ggml);
    }

    #[test]
    fn dot_f32_ggml_matches_its_scalar_twin() {
        against_twin(4242, |x| x, dot_f32_ggml, sc::dot_f32_ggml);
    }
}

/// [`sc::rope_rotate`] compiled with FMA (its `mul_add`s become `vfmadd` instead of a
/// library call; the bits are the twin's).
pub fn rope_rotate(x: &mut [f32], cache: &[f32], n_rot: usize, neox: bool) {
    if !has_avx2() {
        return sc::rope_rotate(x, cache, n_rot, neox);
    }
    // SAFETY: AVX2/FMA checked; the body is the safe twin's (bounds-checked indexing).
    unsafe { rope_rotate_fma(x, cache, n_rot, neox) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rope_rotate_fma(x: &mut [f32], cache: &[f32], n_rot: usize, neox: bool) {
    sc::rope_rotate(x, cache, n_rot, neox)
}

/// [`crate::scalar::ops::gemm_fma`] vectorized across `j` (each element keeps its own
/// sequential FMA chain over `k`, so the result is bit-identical to the scalar twin).
pub fn gemm_fma(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    assert!(c.len() >= m * n && a.len() >= m * k && b.len() >= k * n, "gemm_fma: short buffers");
    if !has_avx2() {
        return sc::gemm_fma(c, a, b, m, k, n);
    }
    if super::vnni::has_vnni() {
        // SAFETY: AVX-512F checked; every (masked) load and store stays inside the
        // `m·n`, `m·k` and `k·n` elements asserted above.
        return unsafe { gemm_fma_512_imp(c.as_mut_ptr(), a.as_ptr(), b.as_ptr(), m, k, n) };
    }
    // SAFETY: features checked; all indices stay below the lengths asserted above.
    unsafe { gemm_fma_imp(c.as_mut_ptr(), a.as_ptr(), b.as_ptr(), m, k, n) }
}

/// [`gemm_fma_imp`] on 16-lane vectors: blocks of 4 rows × 64 columns (16 accumulators), then
/// 16-column and masked column tails, then the last rows one at a time. Each element is
/// still one FMA chain over `k` from its own start value, so the bits do not change.
#[target_feature(enable = "avx512f")]
unsafe fn gemm_fma_512_imp(c: *mut f32, a: *const f32, b: *const f32, m: usize, k: usize, n: usize) {
    let mut i = 0;
    while i + 4 <= m {
        gemm_512_rows::<4>(c, a, b, i, k, n);
        i += 4;
    }
    while i < m {
        gemm_512_rows::<1>(c, a, b, i, k, n);
        i += 1;
    }
}

/// Rows `i..i + R` of [`gemm_fma_512_imp`], every column.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn gemm_512_rows<const R: usize>(c: *mut f32, a: *const f32, b: *const f32, i: usize, k: usize, n: usize) {
    let mut j = 0;
    while j + 64 <= n {
        gemm_512_block::<R, 4>(c, a, b, i, j, k, n, 0xffff);
        j += 64;
    }
    while j + 16 <= n {
        gemm_512_block::<R, 1>(c, a, b, i, j, k, n, 0xffff);
        j += 16;
    }
    if j < n {
        gemm_512_block::<R, 1>(c, a, b, i, j, k, n, (1u16 << (n - j)) - 1);
    }
}

/// Rows `i..i + R`, columns `j..j + 16·V` (the last vector's lanes limited to `mask`).
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_512_block<const R: usize, const V: usize>(
    c: *mut f32,
    a: *const f32,
    b: *const f32,
    i: usize,
    j: usize,
    k: usize,
    n: usize,
    mask: __mmask16,
) {
    let lanes = |v: usize| if v + 1 == V { mask } else { 0xffff };
    let mut acc = [[_mm512_setzero_ps(); V]; R];
    for (r, accr) in acc.iter_mut().enumerate() {
        for (v, x) in accr.iter_mut().enumerate() {
            *x = _mm512_maskz_loadu_ps(lanes(v), c.add((i + r) * n + j + 16 * v));
        }
    }
    for kk in 0..k {
        let mut bv = [_mm512_setzero_ps(); V];
        for (v, x) in bv.iter_mut().enumerate() {
            *x = _mm512_maskz_loadu_ps(lanes(v), b.add(kk * n + j + 16 * v));
        }
        for (r, accr) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*a.add((i + r) * k + kk));
            for (x, bx) in accr.iter_mut().zip(&bv) {
                *x = _mm512_fmadd_ps(*bx, av, *x);
            }
        }
    }
    for (r, accr) in acc.iter().enumerate() {
        for (v, x) in accr.iter().enumerate() {
            _mm512_mask_storeu_ps(c.add((i + r) * n + j + 16 * v), lanes(v), *x);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemm_fma_imp(c: *mut f32, a: *const f32, b: *const f32, m: usize, k: usize, n: usize) {
    // Register blocking (4 rows x 16 columns) changes nothing in any element's own
    // sequential FMA chain over `k`.
    let n16 = n - n % 16;
    let m4 = m - m % 4;
    let mut i = 0;
    while i < m4 {
        let mut j = 0;
        while j < n16 {
            let mut acc = [[_mm256_setzero_ps(); 2]; 4];
            for (r, accr) in acc.iter_mut().enumerate() {
                accr[0] = _mm256_loadu_ps(c.add((i + r) * n + j));
                accr[1] = _mm256_loadu_ps(c.add((i + r) * n + j + 8));
            }
            for kk in 0..k {
                let b0 = _mm256_loadu_ps(b.add(kk * n + j));
                let b1 = _mm256_loadu_ps(b.add(kk * n + j + 8));
                for (r, accr) in acc.iter_mut().enumerate() {
                    let av = _mm256_set1_ps(*a.add((i + r) * k + kk));
                    accr[0] = _mm256_fmadd_ps(b0, av, accr[0]);
                    accr[1] = _mm256_fmadd_ps(b1, av, accr[1]);
                }
            }
            for (r, accr) in acc.iter().enumerate() {
                _mm256_storeu_ps(c.add((i + r) * n + j), accr[0]);
                _mm256_storeu_ps(c.add((i + r) * n + j + 8), accr[1]);
            }
            j += 16;
        }
        if j < n {
            gemm_fma_rows(c, a, b, i, i + 4, j, k, n);
        }
        i += 4;
    }
    if i < m {
        gemm_fma_rows(c, a, b, i, m, 0, k, n);
    }
}

/// Rows `i0..i1`, columns `j0..n` of [`gemm_fma_imp`], 8 lanes then scalar.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_fma_rows(
    c: *mut f32,
    a: *const f32,
    b: *const f32,
    i0: usize,
    i1: usize,
    j0: usize,
    k: usize,
    n: usize,
) {
    for i in i0..i1 {
        let mut j = j0;
        while j + 8 <= n {
            let mut acc = _mm256_loadu_ps(c.add(i * n + j));
            for kk in 0..k {
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(b.add(kk * n + j)), _mm256_set1_ps(*a.add(i * k + kk)), acc);
            }
            _mm256_storeu_ps(c.add(i * n + j), acc);
            j += 8;
        }
        while j < n {
            let mut acc = *c.add(i * n + j);
            for kk in 0..k {
                acc = (*b.add(kk * n + j)).mul_add(*a.add(i * k + kk), acc);
            }
            *c.add(i * n + j) = acc;
            j += 1;
        }
    }
}

/// [`crate::scalar::ops::expf_ggml_for`] `layout` on 8 lanes at a time, in place.
pub fn expf_ggml_inplace(x: &mut [f32], layout: DotLayout) {
    if !has_avx2() {
        for v in x.iter_mut() {
            *v = sc::expf_ggml_for(*v, layout);
        }
        return;
    }
    // SAFETY: features checked; loads and stores stay below `x.len()` (masked past it).
    unsafe {
        match layout {
            DotLayout::Avx512 if super::vnni::has_vnni() => expf_512_imp(x.as_mut_ptr(), x.len()),
            DotLayout::Avx512 => expf_ggml_imp(x.as_mut_ptr(), x.len()),
            DotLayout::Avx2 => expf_avx2_imp(x.as_mut_ptr(), x.len()),
        }
    }
}

/// ggml's AVX2 `ggml_v_expf`, intrinsic for intrinsic (twin:
/// [`crate::scalar::ops::expf_ggml_avx2`]); a tail under 8 lanes through the twin.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn expf_avx2_imp(x: *mut f32, len: usize) {
    let c = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
    let r = c(0x4b40_0000);
    let mut i = 0;
    while i + 8 <= len {
        let v = _mm256_loadu_ps(x.add(i));
        let z = _mm256_fmadd_ps(v, c(0x3fb8_aa3b), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(n, c(0x35bf_be8e), _mm256_fnmadd_ps(n, c(0x3f31_7200), v));
        let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
        let k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0))));
        let absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
        let cm = _mm256_cmp_ps::<_CMP_GT_OQ>(absn, _mm256_set1_ps(126.0));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
                u,
                _mm256_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
            ),
            u,
            _mm256_mul_ps(c(0x3f7f_fff6), b),
        );
        let out = if _mm256_movemask_ps(cm) == 0 {
            _mm256_fmadd_ps(j, k, k)
        } else {
            let g = _mm256_and_si256(
                _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())),
                _mm256_set1_epi32(0x8200_0000u32 as i32),
            );
            let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
            let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
            let d = _mm256_cmp_ps::<_CMP_GT_OQ>(absn, _mm256_set1_ps(192.0));
            _mm256_or_ps(
                _mm256_and_ps(d, _mm256_mul_ps(s1, s1)),
                _mm256_andnot_ps(
                    d,
                    _mm256_or_ps(
                        _mm256_and_ps(cm, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                        _mm256_andnot_ps(cm, _mm256_fmadd_ps(k, j, k)),
                    ),
                ),
            )
        };
        _mm256_storeu_ps(x.add(i), out);
        i += 8;
    }
    while i < len {
        *x.add(i) = sc::expf_ggml_avx2(*x.add(i));
        i += 1;
    }
}

/// ggml's AVX-512 `ggml_v_expf`, intrinsic for intrinsic (twin: [`sc::expf_ggml`]): 16
/// lanes with `vscalefps`, the last < 16 elements in a masked vector (lanes are independent).
#[target_feature(enable = "avx512f")]
unsafe fn expf_512_imp(x: *mut f32, len: usize) {
    let c = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
    let r = c(0x4b40_0000);
    let mut i = 0;
    while i < len {
        let mask: __mmask16 = if len - i >= 16 { 0xffff } else { (1u16 << (len - i)) - 1 };
        let v = _mm512_maskz_loadu_ps(mask, x.add(i));
        let z = _mm512_fmadd_ps(v, c(0x3fb8_aa3b), r);
        let n = _mm512_sub_ps(z, r);
        let b = _mm512_fnmadd_ps(n, c(0x35bf_be8e), _mm512_fnmadd_ps(n, c(0x3f31_7200), v));
        let d = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
        let u = _mm512_mul_ps(b, b);
        let j = _mm512_fmadd_ps(
            _mm512_fmadd_ps(
                _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
                u,
                _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
            ),
            u,
            _mm512_fmadd_ps(c(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
        );
        let mut out = _mm512_scalef_ps(j, n);
        if d != 0 {
            let le = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps());
            let alt = _mm512_mask_blend_ps(le, _mm512_set1_ps(f32::INFINITY), _mm512_setzero_ps());
            out = _mm512_mask_blend_ps(d, out, alt);
        }
        _mm512_mask_storeu_ps(x.add(i), mask, out);
        i += 16;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn expf_ggml_imp(x: *mut f32, len: usize) {
    let r = _mm256_set1_ps(f32::from_bits(0x4b40_0000));
    let mut i = 0;
    while i + 8 <= len {
        let v = _mm256_loadu_ps(x.add(i));
        let z = _mm256_fmadd_ps(v, _mm256_set1_ps(f32::from_bits(0x3fb8_aa3b)), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(
            n,
            _mm256_set1_ps(f32::from_bits(0x35bf_be8e)),
            _mm256_fnmadd_ps(n, _mm256_set1_ps(f32::from_bits(0x3f31_7200)), v),
        );
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(
                    _mm256_set1_ps(f32::from_bits(0x3c07_2010)),
                    b,
                    _mm256_set1_ps(f32::from_bits(0x3d2b_9f17)),
                ),
                u,
                _mm256_fmadd_ps(
                    _mm256_set1_ps(f32::from_bits(0x3e2a_af33)),
                    b,
                    _mm256_set1_ps(f32::from_bits(0x3eff_fedb)),
                ),
            ),
            u,
            _mm256_fmadd_ps(_mm256_set1_ps(f32::from_bits(0x3f7f_fff6)), b, _mm256_set1_ps(1.0)),
        );
        let mut jv = [0f32; 8];
        let mut nv = [0f32; 8];
        _mm256_storeu_ps(jv.as_mut_ptr(), j);
        _mm256_storeu_ps(nv.as_mut_ptr(), n);
        for l in 0..8 {
            // scaling and the out-of-range lanes as the scalar twin (exact either way)
            *x.add(i + l) = if nv[l].abs() > 192.0 {
                if nv[l] <= 0.0 {
                    0.0
                } else {
                    f32::INFINITY
                }
            } else {
                sc::scalef_pub(jv[l], nv[l])
            };
        }
        i += 8;
    }
    while i < len {
        *x.add(i) = sc::expf_ggml(*x.add(i));
        i += 1;
    }
}

#[cfg(test)]
mod tiled_tests {
    use super::*;

    #[test]
    fn gemm_expf_and_rope_match_their_scalar_twins() {
        let mut s = 99u32;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
        };
        for (n_rot, neox) in [(64, false), (64, true), (128, true), (6, false), (32, true)] {
            let cache: Vec<f32> = (0..n_rot).map(|_| r()).collect();
            let x0: Vec<f32> = (0..n_rot + 7).map(|_| r() * 30.0).collect();
            let (mut x1, mut x2) = (x0.clone(), x0.clone());
            rope_rotate(&mut x1, &cache, n_rot, neox);
            sc::rope_rotate(&mut x2, &cache, n_rot, neox);
            assert_eq!(x1, x2, "rope {n_rot} {neox}");
            assert_eq!(x1[n_rot..], x0[n_rot..], "rope past n_rot");
        }
        let shapes = [(5, 64, 67), (64, 64, 64), (9, 7, 16), (1, 256, 64), (4, 3, 5), (7, 64, 40), (6, 5, 129)];
        for (m, k, n) in shapes {
            let a: Vec<f32> = (0..m * k).map(|_| r()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| r()).collect();
            let c0: Vec<f32> = (0..m * n).map(|_| r()).collect();
            let (mut c1, mut c2) = (c0.clone(), c0.clone());
            gemm_fma(&mut c1, &a, &b, m, k, n);
            sc::gemm_fma(&mut c2, &a, &b, m, k, n);
            assert_eq!(c1, c2, "{m}x{k}x{n}");
        }
        let mut xs: Vec<f32> = (0..1000).map(|i| (i as f32 - 900.0) * 0.13).collect();
        xs.extend([f32::NEG_INFINITY, 0.0, -0.0, 88.0, -87.5, -100.0, -150.0]);
        // Past ±126 and ±192 (the two-factor scaling and the 0 / ∞ lanes of the AVX2 form)
        // and whole vectors of only in-range lanes (its fast return).
        xs.extend([-95.0, -90.0, -88.0, 87.0, 88.5, 89.0, 100.0, 140.0, f32::INFINITY]);
        xs.extend((0..16).map(|i| i as f32 * 0.25 - 2.0));
        // Dense random inputs, where a last-bit difference in the polynomial shows.
        xs.extend((0..20_000).map(|_| r() * 45.0 - 45.0));
        for layout in [DotLayout::Avx512, DotLayout::Avx2] {
            let want: Vec<f32> = xs.iter().map(|&x| sc::expf_ggml_for(x, layout)).collect();
            let mut got = xs.clone();
            expf_ggml_inplace(&mut got, layout);
            assert_eq!(
                got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "{layout:?}"
            );
            for (x, w) in (0..1000).map(|i| (i as f32 - 900.0) * 0.13).zip(&want) {
                let e = x.exp();
                assert!((w - e).abs() <= 4e-7 * e.max(1e-30), "{layout:?} {x}: {w} vs {e}");
            }
            let mut nan = [f32::NAN; 9];
            expf_ggml_inplace(&mut nan, layout);
            assert!(nan.iter().all(|v| v.is_nan()) && sc::expf_ggml_for(f32::NAN, layout).is_nan());
        }
        // The two forms round differently somewhere (the reason ggml's builds differ).
        let differ = (0..100_000).map(|i| i as f32 * 1e-3 - 50.0).any(|x| sc::expf_ggml(x) != sc::expf_ggml_avx2(x));
        assert!(differ, "the AVX2 and AVX-512 expf agree everywhere");
    }
}

/// [`sc::ssm_scan_lanes`] compiled with FMA and AVX2 (each `mul_add` one `vfmadd`,
/// vectorized across lanes: the same operations per element, so the same bits).
pub fn ssm_scan_lanes(s: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32, acc: &mut [f32]) {
    debug_assert!(super::has_avx2());
    // SAFETY: the caller checked AVX2 and FMA (`has_avx2`); the body is safe slice code.
    unsafe { ssm_scan_lanes_imp(s, b, c, da, x_dt, acc) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn ssm_scan_lanes_imp(s: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32, acc: &mut [f32]) {
    sc::ssm_scan_lanes(s, b, c, da, x_dt, acc)
}
