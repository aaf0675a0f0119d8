//! ggml-cpu's F16 flash-attention chunk ([`crate::scalar::ops::flash_f16_chunk`], the
//! scalar twin) for the query heads sharing one KV head: each K and V row is read once
//! for all of them. AVX-512 keeps each head's f16 accumulator in registers (as f32 values
//! rounded to f16 after every operation, as ggml stores them); AVX2 keeps it in memory.
//! Every lane's operations are the twin's, so the results are bit-identical.

use core::arch::x86_64::*;

use half::f16;

use super::has_avx2;
use super::ops::{
    dot_f16_reduce256_imp, dot_f16_reduce512_imp, mad_f16_fp16_imp, mad_f16_imp, scale_f16_fp16_imp, scale_f16_imp,
};
use super::vnni::has_vnni;
use crate::scalar::ops::{self as sc, DotLayout, FlashF16};

/// [`sc::flash_f16_chunk`] on the widest path this CPU allows.
pub fn flash_f16_chunk(c: &FlashF16<'_>, q16: &[f16], m: &mut [f32], s: &mut [f32], acc16: &mut [f16]) {
    if !has_avx2() {
        return sc::flash_f16_chunk(c, q16, m, s, acc16);
    }
    if c.fp16 && !super::ops::has_fp16() {
        return sc::flash_f16_chunk(c, q16, m, s, acc16);
    }
    let (n, g) = (c.keys(), c.heads(q16, m, s, acc16));
    let wide = has_vnni() && c.layout == DotLayout::Avx512 && c.hk.is_multiple_of(64) && c.hk > 0;
    if wide && !c.fp16 && matches!(c.hv, 64 | 128 | 256) {
        let q: Vec<f32> = q16[..g * c.hk].iter().map(|x| x.to_f32()).collect();
        // SAFETY: AVX-512F checked (`has_vnni`); row `j < keys()` of K/V lies inside
        // `c.k`/`c.v`, head `h < heads()` inside `q`, `m`, `s` and `acc16`.
        unsafe { flash512_heads(c, n, g, &q, m, s, acc16.as_mut_ptr()) };
        return;
    }
    // SAFETY: features checked; the same bounds.
    unsafe { flash256_imp(c, n, g, q16.as_ptr(), m, s, acc16.as_mut_ptr()) }
}

/// The heads in batches whose accumulators fit 16 zmm registers.
///
/// # Safety
/// AVX-512F and F16C; `n ≤ c.keys()`, `g` heads in `q`, `m`, `s`, `acc`; `c.hv` one of
/// 64, 128, 256 and `c.hk` a multiple of 64.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn flash512_heads(c: &FlashF16<'_>, n: usize, g: usize, q: &[f32], m: &mut [f32], s: &mut [f32], acc: *mut f16) {
    let mut h0 = 0;
    while h0 < g {
        let b = g - h0;
        let (q, m, s, a) = (&q[h0 * c.hk..], &mut m[h0..], &mut s[h0..], acc.add(h0 * c.hv));
        h0 += match (c.hv, b) {
            (64, 1) => flash512::<4, 1>(c, n, q, m, s, a),
            (64, 2) => flash512::<4, 2>(c, n, q, m, s, a),
            (64, 3) => flash512::<4, 3>(c, n, q, m, s, a),
            (64, _) => flash512::<4, 4>(c, n, q, m, s, a),
            (128, 1) => flash512::<8, 1>(c, n, q, m, s, a),
            (128, _) => flash512::<8, 2>(c, n, q, m, s, a),
            _ => flash512::<16, 1>(c, n, q, m, s, a),
        };
    }
}

/// Keys per block: each block's scores are computed first, then its softmax steps (the
/// `expf` calls, which would spill every vector register), then its V rows.
const KB: usize = 16;

/// One block's softmax steps for one head, in key order: the new maximum, each key's
/// `(ms, vs)` (`ms ≠ 1` only where the maximum moved: the accumulator is rescaled first)
/// and the sum, as ggml updates them key by key.
#[inline]
fn softmax_steps(x: &[f32], m: &mut f32, s: &mut f32, ms: &mut [f32], vs: &mut [f32], moved: &mut [bool]) {
    for (jj, &x) in x.iter().enumerate() {
        let (mut a, mut b) = (1.0f32, 1.0f32);
        moved[jj] = x > *m;
        if moved[jj] {
            a = (*m - x).exp();
            *m = x;
        } else {
            b = (x - *m).exp();
        }
        ms[jj] = a;
        vs[jj] = b;
        *s = s.mul_add(a, b); // ggml-cpu is built with FP contraction: one FMA
    }
}

/// Asks for the K and V rows of the block at `j0` (the cache is far larger than any
/// cache level at depth, and its rows are strided by every KV head's width).
#[inline]
fn prefetch_block(c: &FlashF16<'_>, j0: usize, n: usize) {
    for j in j0..(j0 + KB).min(n) {
        for (base, stride, w) in [(c.k.as_ptr(), c.k_stride, c.hk), (c.v.as_ptr(), c.v_stride, c.hv)] {
            let row = base.wrapping_add(j * stride) as *const i8;
            for off in (0..2 * w).step_by(64) {
                // SAFETY: a prefetch is only a hint: it never faults, whatever the address.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(off)) };
            }
        }
    }
}

/// `c·tanh(x)` when the soft-cap is on.
#[inline]
fn capped(raw: f32, cap: f32) -> f32 {
    if cap != 0.0 {
        cap * raw.tanh()
    } else {
        raw
    }
}

/// `H` heads of `16·V` V elements each over `n` keys; returns `H`.
#[allow(clippy::needless_range_loop)] // lanes indexed by head and vector, as in ggml
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[inline]
unsafe fn flash512<const V: usize, const H: usize>(
    c: &FlashF16<'_>,
    n: usize,
    q: &[f32],
    m: &mut [f32],
    s: &mut [f32],
    acc: *mut f16,
) -> usize {
    let hk = c.hk;
    let ld16 = |p: *const f16| _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i));
    // round to f16 and back: what ggml's f16 store and next load do
    let rt = |x: __m512| _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x));
    let (mut x, mut ms, mut vs) = ([[0f32; KB]; H], [[1f32; KB]; H], [[1f32; KB]; H]);
    let mut moved = [[false; KB]; H];
    let mut j0 = 0;
    while j0 < n {
        let nb = KB.min(n - j0);
        prefetch_block(c, j0 + KB, n);
        for jj in 0..nb {
            let kr = c.k.as_ptr().add((j0 + jj) * c.k_stride);
            for h in 0..H {
                // ggml_vec_dot_f16 of an AVX-512 build: 4 × 16 lanes, then GGML_F32x16_REDUCE
                let qh = q.as_ptr().add(h * hk);
                let mut d = [_mm512_setzero_ps(); 4];
                let mut i = 0;
                while i < hk {
                    for (l, dl) in d.iter_mut().enumerate() {
                        *dl = _mm512_fmadd_ps(ld16(kr.add(i + 16 * l)), _mm512_loadu_ps(qh.add(i + 16 * l)), *dl);
                    }
                    i += 64;
                }
                let t = _mm512_add_ps(_mm512_add_ps(d[0], d[2]), _mm512_add_ps(d[1], d[3]));
                let t3 = _mm256_add_ps(
                    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(t))),
                    _mm512_castps512_ps256(t),
                );
                let t6 = _mm_add_ps(_mm256_extractf128_ps::<1>(t3), _mm256_castps256_ps128(t3));
                let u = _mm_add_ps(t6, _mm_movehl_ps(t6, t6));
                x[h][jj] = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u))) * c.scale;
            }
        }
        for h in 0..H {
            for v in x[h][..nb].iter_mut() {
                *v = capped(*v, c.cap);
            }
            softmax_steps(&x[h][..nb], &mut m[h], &mut s[h], &mut ms[h], &mut vs[h], &mut moved[h]);
        }
        let mut a = [[_mm512_setzero_ps(); V]; H];
        for (h, ah) in a.iter_mut().enumerate() {
            for (v, y) in ah.iter_mut().enumerate() {
                *y = ld16(acc.add(h * 16 * V + 16 * v));
            }
        }
        for jj in 0..nb {
            let vr = c.v.as_ptr().add((j0 + jj) * c.v_stride);
            for h in 0..H {
                if moved[h][jj] {
                    let f = _mm512_set1_ps(ms[h][jj]);
                    for y in a[h].iter_mut() {
                        *y = rt(_mm512_mul_ps(*y, f));
                    }
                }
            }
            for v in 0..V {
                let vv = ld16(vr.add(16 * v));
                for h in 0..H {
                    a[h][v] = rt(_mm512_fmadd_ps(vv, _mm512_set1_ps(vs[h][jj]), a[h][v]));
                }
            }
        }
        for (h, ah) in a.iter().enumerate() {
            for (v, y) in ah.iter().enumerate() {
                let p = acc.add(h * 16 * V + 16 * v);
                _mm256_storeu_si256(p as *mut __m256i, _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(*y));
            }
        }
        j0 += nb;
    }
    H
}

/// The AVX2 chunk: ggml's dot per head, its f16 accumulator in memory; blocks of [`KB`]
/// keys as on AVX-512.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn flash256_imp(
    c: &FlashF16<'_>,
    n: usize,
    g: usize,
    q: *const f16,
    m: &mut [f32],
    s: &mut [f32],
    acc: *mut f16,
) {
    let (hk, hv) = (c.hk, c.hv);
    let np = hk - hk % c.layout.step();
    let (mut x, mut ms, mut vs, mut moved) = ([0f32; KB], [1f32; KB], [1f32; KB], [false; KB]);
    for h in 0..g {
        let qh = q.add(h * hk);
        let a = acc.add(h * hv);
        let mut j0 = 0;
        while j0 < n {
            let nb = KB.min(n - j0);
            prefetch_block(c, j0 + KB, n);
            for (jj, xj) in x[..nb].iter_mut().enumerate() {
                let kr = c.k.as_ptr().add((j0 + jj) * c.k_stride);
                let mut d = match c.layout {
                    DotLayout::Avx512 => dot_f16_reduce512_imp(kr, qh, np),
                    DotLayout::Avx2 => dot_f16_reduce256_imp(kr, qh, np),
                } as f64;
                for i in np..hk {
                    d += ((*kr.add(i)).to_f32() * (*qh.add(i)).to_f32()) as f64;
                }
                *xj = capped(d as f32 * c.scale, c.cap);
            }
            softmax_steps(&x[..nb], &mut m[h], &mut s[h], &mut ms, &mut vs, &mut moved);
            for jj in 0..nb {
                let vr = c.v.as_ptr().add((j0 + jj) * c.v_stride);
                if c.fp16 {
                    // `c.fp16` only reaches here with AVX512-FP16 checked (above)
                    if moved[jj] {
                        scale_f16_fp16_imp(a, ms[jj], hv);
                    }
                    mad_f16_fp16_imp(a, vs[jj], vr, hv);
                    continue;
                }
                if moved[jj] {
                    scale_f16_imp(a, ms[jj], hv);
                }
                mad_f16_imp(a, vs[jj], vr, hv);
            }
            j0 += nb;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunk equals its scalar twin bit for bit on the path this CPU takes (AVX-512
    /// for widths of 64/128/256, AVX2 otherwise): head widths on and off the dot's step,
    /// 1–8 heads per KV head, soft-cap on and off, both layouts, state carried between
    /// two calls.
    #[test]
    fn flash_f16_chunk_matches_its_scalar_twin() {
        let mut seed = 99u32;
        let mut r = move || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        };
        let shapes = [
            (64, 64, 4, 300, 0.0),
            (64, 64, 7, 50, 0.0),
            (128, 128, 2, 77, 0.0),
            (128, 128, 5, 20, 0.0),
            (256, 256, 3, 9, 50.0),
            (80, 80, 3, 40, 0.0),
            (96, 64, 8, 33, 30.0),
            (32, 32, 5, 1, 0.0),
            (576, 512, 4, 40, 0.0),
            (192, 192, 3, 30, 0.0),
        ];
        for (hk, hv, g, n, cap) in shapes {
            let (ks, vs) = (hk * 3 + 5, hv * 2 + 1);
            let k: Vec<f16> = (0..n * ks).map(|_| f16::from_f32(r() * 3.0)).collect();
            let v: Vec<f16> = (0..n * vs).map(|_| f16::from_f32(r())).collect();
            let q: Vec<f16> = (0..g * hk).map(|_| f16::from_f32(r() * 2.0)).collect();
            for (layout, fp16) in [(DotLayout::Avx512, false), (DotLayout::Avx2, false), (DotLayout::Avx512, true)] {
                let c =
                    FlashF16 { k: &k, v: &v, k_stride: ks, v_stride: vs, n, hk, hv, scale: 0.125, cap, layout, fp16 };
                let (mut m1, mut s1, mut a1) = (vec![f32::NEG_INFINITY; g], vec![0f32; g], vec![f16::ZERO; g * hv]);
                let (mut m2, mut s2, mut a2) = (m1.clone(), s1.clone(), a1.clone());
                // two calls: the state carries over
                for part in [&k[..], &k[(n / 2) * ks..]] {
                    let c = FlashF16 { k: part, ..c };
                    flash_f16_chunk(&c, &q, &mut m1, &mut s1, &mut a1);
                    sc::flash_f16_chunk(&c, &q, &mut m2, &mut s2, &mut a2);
                }
                let what = format!("hk={hk} hv={hv} g={g} {layout:?} fp16={fp16}");
                assert_eq!(m1, m2, "{what}");
                let bits = |x: &[f32]| x.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&s1), bits(&s2), "{what}");
                assert_eq!(a1, a2, "{what}");
                assert!(a1.iter().any(|x| x.to_f32() != 0.0), "{what}");
            }
        }
    }
}
