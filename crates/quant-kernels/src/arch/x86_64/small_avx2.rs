//! AVX2 `vec_dot`s of Q1_0, Q2_0 and NVFP4 (× Q8_0), which AVX-512 CPUs run too: ggml has no
//! AVX-512 branch, no repacked layout and no tiled path for these types, so a prompt batch
//! is `vec_dot` per output there as here. Q1_0 and NVFP4 are ports of ggml's `__AVX2__`
//! branches; Q2_0 computes the integer sums of ggml's generic code (its only x86 path) with
//! SIMD and keeps its scalar float steps. Twins: [`crate::scalar::q1_0`], [`crate::scalar::q2_0`],
//! [`crate::scalar::nvfp4`].

use core::arch::x86_64::*;

use super::has_avx2;
use super::tiles::{f16_at, hsum_float_8, hsum_i32_8, load256, mul_add_epi8};
use crate::scalar::act::Q8_0_BYTES;
use crate::scalar::nvfp4::NVFP4_BYTES;
use crate::scalar::q1_0::Q1_0_BYTES;
use crate::scalar::q2_0::Q2_0_BYTES;
use crate::scalar::{nvfp4 as snv, q1_0 as sq1, q2_0 as sq2};
use ggml_quants::types::iq_common::ue4m3_to_fp32;
use ggml_quants::types::iq_tables::KVALUES_FP4;

type Imp = unsafe fn(usize, *const u8, *const u8) -> f32;

/// Checks the row lengths (`qk` elements per block, `wb` weight and `xb` activation bytes
/// per block) and runs `imp` when AVX2 is there, the twin otherwise.
fn safe(
    n: usize,
    w: &[u8],
    x: &[u8],
    (qk, wb, xb): (usize, usize, usize),
    imp: Imp,
    twin: crate::registry::VecDotFn,
) -> f32 {
    let nb = n / qk;
    assert!(nb * qk == n && w.len() >= nb * wb && x.len() >= nb * xb, "vec_dot: bad row lengths");
    if !has_avx2() {
        return twin(n, w, x);
    }
    // SAFETY: the kernels are compiled for AVX2 + FMA + F16C, detected above; they read `nb`
    // blocks of `wb` bytes from `w` and of `xb` bytes from `x`, in bounds by the assert.
    unsafe { imp(nb, w.as_ptr(), x.as_ptr()) }
}

/// `ggml_vec_dot_q1_0_q8_0` (AVX2).
pub fn q1_0_q8_0(n: usize, w: &[u8], x: &[u8]) -> f32 {
    safe(n, w, x, (128, Q1_0_BYTES, 4 * Q8_0_BYTES), q1_0_imp, sq1::q1_0_q8_0)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q1_0_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    let byte_shuf = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let zero = _mm256_setzero_si256();
    let mut acc = _mm256_setzero_ps();
    for ib in 0..nb {
        let b = w.add(ib * Q1_0_BYTES);
        let mut accb = _mm256_setzero_ps();
        for k in 0..4 {
            let y = x.add((4 * ib + k) * Q8_0_BYTES);
            let bits = (b.add(2 + 4 * k) as *const i32).read_unaligned();
            let m = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(bits), byte_shuf), bit);
            let sm = _mm256_cmpeq_epi8(m, zero);
            let sy = _mm256_sub_epi8(_mm256_xor_si256(load256(y.add(2)), sm), sm);
            let s32 = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, sy), ones16));
            let dy = _mm256_set1_ps(f16_at(y));
            accb = if k == 0 { _mm256_mul_ps(dy, s32) } else { _mm256_fmadd_ps(dy, s32, accb) };
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(b)), accb, acc);
    }
    hsum_float_8(acc)
}

/// `ggml_vec_dot_q2_0_q8_0_generic`'s arithmetic, integer sums in AVX2.
pub fn q2_0_q8_0(n: usize, w: &[u8], x: &[u8]) -> f32 {
    safe(n, w, x, (64, Q2_0_BYTES, 2 * Q8_0_BYTES), q2_0_imp, sq2::q2_0_q8_0)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_0_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    // Per 128-bit lane (4 code bytes = 16 elements): the codes as [position p][byte b], and
    // the activations gathered to the same order (element 4b + p).
    let shifts = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    let gather = _mm256_setr_epi8(
        0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
    );
    let m3 = _mm256_set1_epi8(3);
    let mut sumf = 0f32;
    for ib in 0..nb {
        let b = w.add(ib * Q2_0_BYTES);
        let mut s = 0f32;
        for k in 0..2 {
            let y = x.add((2 * ib + k) * Q8_0_BYTES);
            let q = b.add(2 + 8 * k);
            let (lo, hi) = ((q as *const i32).read_unaligned(), (q.add(4) as *const i32).read_unaligned());
            let v = _mm256_set_m128i(_mm_set1_epi32(hi), _mm_set1_epi32(lo));
            let c = _mm256_and_si256(_mm256_srlv_epi32(v, shifts), m3);
            let xs = _mm256_shuffle_epi8(load256(y.add(2)), gather);
            let d16 = _mm256_sub_epi16(_mm256_maddubs_epi16(c, xs), _mm256_maddubs_epi16(ones8, xs));
            let sum = hsum_i32_8(_mm256_madd_epi16(d16, ones16));
            s += f16_at(y) * sum as f32;
        }
        sumf += f16_at(b) * s;
    }
    sumf
}

/// `ggml_vec_dot_nvfp4_q8_0` (AVX2).
pub fn nvfp4_q8_0(n: usize, w: &[u8], x: &[u8]) -> f32 {
    safe(n, w, x, (64, NVFP4_BYTES, 2 * Q8_0_BYTES), nvfp4_imp, snv::nvfp4_q8_0)
}

/// `ue4m3_to_fp32` of every byte (ggml's `ggml_table_f32_ue4m3`).
fn ue4m3_table() -> &'static [f32; 256] {
    static T: std::sync::OnceLock<[f32; 256]> = std::sync::OnceLock::new();
    T.get_or_init(|| core::array::from_fn(|b| ue4m3_to_fp32(b as u8)))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nvfp4_imp(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let ue = ue4m3_table();
    let values = _mm_loadu_si128(KVALUES_FP4.as_ptr() as *const __m128i);
    let m4 = _mm_set1_epi8(0x0f);
    let mone = _mm256_set1_epi16(1);
    let mut accum = _mm256_setzero_ps();
    for ib in 0..nb {
        let b = w.add(ib * NVFP4_BYTES);
        for h in 0..2 {
            let y = x.add((2 * ib + h) * Q8_0_BYTES);
            let qs = _mm_loadu_si128(b.add(4 + 16 * h) as *const __m128i);
            let lo = _mm_shuffle_epi8(values, _mm_and_si128(qs, m4));
            let hi = _mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16::<4>(qs), m4));
            let q4 = _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
            let p = _mm256_madd_epi16(mul_add_epi8(q4, load256(y.add(2))), mone);
            let dy = f16_at(y);
            let (s0, s1) = (ue[*b.add(2 * h) as usize] * dy, ue[*b.add(2 * h + 1) as usize] * dy);
            let scales = _mm256_set_m128(_mm_set1_ps(s1), _mm_set1_ps(s0));
            accum = _mm256_fmadd_ps(scales, _mm256_cvtepi32_ps(p), accum);
        }
    }
    hsum_float_8(accum)
}

mod registration {
    use super::*;
    use crate::registry::Kernel;
    use ggml_quants::types::{nvfp4::Nvfp4, q1_0::Q1_0, q2_0::Q2_0, q8_0::Q8_0};
    use ggml_quants::GgmlType;

    inventory::submit! {
        Kernel::new(<Q1_0 as GgmlType>::ID, "avx2", 10, <Q8_0 as GgmlType>::ID, q1_0_q8_0).with_available(has_avx2)
    }
    inventory::submit! {
        Kernel::new(<Q2_0 as GgmlType>::ID, "avx2", 10, <Q8_0 as GgmlType>::ID, q2_0_q8_0).with_available(has_avx2)
    }
    inventory::submit! {
        Kernel::new(<Nvfp4 as GgmlType>::ID, "avx2", 10, <Q8_0 as GgmlType>::ID, nvfp4_q8_0).with_available(has_avx2)
    }
}
