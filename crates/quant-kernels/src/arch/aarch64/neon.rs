//! NEON dot products of quantized weight rows with quantized activation rows, after
//! ggml-cpu's `__ARM_NEON` paths (`ggml-cpu/arch/arm/quants.c`, `vec.cpp`): the same
//! nibble / high-bit unpacking and `i8 × i8 → i32` lane sums, through `SDOT`
//! (`ggml_vdotq_s32` with `__ARM_FEATURE_DOTPROD`) when the CPU has FEAT_DotProd and through
//! `vmull_s8` + `vpaddlq_s16` (its fallback) otherwise.
//!
//! Float arithmetic. The block sums are exact integers either way; what follows them
//! decides the rounding:
//! - Quantized types: one f32 multiply-add per block (per super-block for the K types) in
//!   block order, exactly as the generic kernels in `crate::scalar::dots` do, so every
//!   kernel here is bit-identical to the registered scalar kernel of its type. (ggml's
//!   NEON code instead multiplies the four int lanes into two float32x4 accumulators,
//!   and on ARM llama.cpp repacks Q4_0/Q4_K for its i8mm/dotprod GEMMs anyway, so no
//!   single ARM arithmetic exists to follow; the scalar one keeps every backend of this
//!   crate in agreement.)
//! - F32 and F16: ggml's NEON `ggml_vec_dot_f32` / `ggml_vec_dot_f16` without FP16
//!   vector arithmetic: four float32x4 FMA accumulators over 16-element steps, reduced
//!   as `GGML_F32x4_REDUCE` (`(s0+s2)+(s1+s3)`, then `(l0+l1)+(l2+l3)`), leftovers fused
//!   into an f32 sum (F32) or added as f32 products into an f64 sum (F16). Their scalar
//!   twins, in the same lane order, are [`f32_f32_twin`] and [`f16_f16_twin`].
//! - The Q8_0 / Q8_1 / Q8_K activation quantizers are bit-identical to `crate::scalar::act`
//!   (the x86 rounding: `id = 127/amax`, ties to even, out-of-range → `i32::MIN`, then
//!   saturation), not to ggml's ARM ones (`id = 1/d`), so activations do not depend on
//!   the backend. Q8_K is ggml's reference quantizer on every target.
//!
//! Every `pub fn` is a safe wrapper that never reads out of bounds (blocks are taken with
//! `chunks_exact`, as in the scalar kernels, and every vector load goes through a
//! bounds-checked sub-slice) and falls back to the scalar twin when the CPU lacks NEON.

use core::arch::aarch64::*;

use super::{has_dotprod, has_neon};
use crate::scalar::act::{Q8_0_BYTES, Q8_1_BYTES, Q8_K_BYTES};
use crate::scalar::dots::{q3_k_scales, scale_min_k4};
use crate::scalar::{act as sact, dots as sd, f16_at, f32_at};

// ---------------------------------------------------------------------------------------
// Loads: all through bounds-checked sub-slices.

/// 16 bytes of `b` from `at` (panics past the end).
#[target_feature(enable = "neon")]
#[inline]
fn ld_u8(b: &[u8], at: usize) -> uint8x16_t {
    let s = &b[at..at + 16];
    // SAFETY: `s` is exactly 16 readable bytes; `vld1q_u8` has no alignment requirement.
    unsafe { vld1q_u8(s.as_ptr()) }
}

/// 16 bytes of `b` from `at` as i8 lanes.
#[target_feature(enable = "neon")]
#[inline]
fn ld_i8(b: &[u8], at: usize) -> int8x16_t {
    vreinterpretq_s8_u8(ld_u8(b, at))
}

/// 8 bytes of `b` from `at`.
#[target_feature(enable = "neon")]
#[inline]
fn ld8_u8(b: &[u8], at: usize) -> uint8x8_t {
    let s = &b[at..at + 8];
    // SAFETY: `s` is exactly 8 readable bytes; `vld1_u8` has no alignment requirement.
    unsafe { vld1_u8(s.as_ptr()) }
}

/// Four little-endian f32 of `b` from byte `at`.
#[target_feature(enable = "neon")]
#[inline]
fn ld_f32(b: &[u8], at: usize) -> float32x4_t {
    vreinterpretq_f32_u8(ld_u8(b, at))
}

/// Four little-endian fp16 of `b` from byte `at`, widened to f32 (exact).
#[target_feature(enable = "neon")]
#[inline]
fn ld_f16(b: &[u8], at: usize) -> float32x4_t {
    let h = vreinterpret_u16_u8(ld8_u8(b, at));
    let r: float32x4_t;
    // SAFETY: FCVTL (half → single) is base Advanced SIMD, present on every CPU this
    // module runs on (callers are reached only after `has_neon()`); the asm touches only
    // its two vector registers (`pure, nomem, nostack`). (`vcvt_f32_f16` is still an
    // unstable intrinsic.)
    unsafe {
        core::arch::asm!("fcvtl {0:v}.4s, {1:v}.4h", out(vreg) r, in(vreg) h,
            options(pure, nomem, nostack, preserves_flags));
    }
    r
}

/// The little-endian fp16 at byte `at` of `b` as f32 (FCVT, exact; the same value as
/// `half`'s conversion used by the scalar twins, without its per-call feature check).
#[target_feature(enable = "neon")]
#[inline]
fn f16_le(b: &[u8], at: usize) -> f32 {
    let h = u16::from_le_bytes([b[at], b[at + 1]]);
    let r: f32;
    // SAFETY: scalar FCVT (half → single) is part of the base aarch64 FP unit; the asm
    // touches only its two registers.
    unsafe {
        core::arch::asm!("fcvt {0:s}, {1:h}", out(vreg) r, in(vreg) h, options(pure, nomem, nostack, preserves_flags));
    }
    r
}

/// The 8 + 8 bit masks `1 << (lane % 8)`, for spreading a u16 of high bits over 16 lanes.
static BIT_OF_LANE: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];

/// Lane `l` = 0x10 when bit `l` of the little-endian u16 `lo | hi << 8` is set, else 0.
#[target_feature(enable = "neon")]
#[inline]
fn high_bits(lo: u8, hi: u8) -> uint8x16_t {
    // SAFETY: `BIT_OF_LANE` is 16 readable bytes.
    let bits = unsafe { vld1q_u8(BIT_OF_LANE.as_ptr()) };
    let v = vcombine_u8(vdup_n_u8(lo), vdup_n_u8(hi));
    vandq_u8(vtstq_u8(v, bits), vdupq_n_u8(0x10))
}

// ---------------------------------------------------------------------------------------
// i8 · i8 → i32 lane sums.

/// `acc + Σ a·b` over four groups of four lanes with `SDOT`.
///
/// # Safety
/// The CPU must have FEAT_DotProd (`has_dotprod()`).
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: the caller guarantees SDOT exists; the asm touches only vector registers.
    // (`vdotq_s32` is still an unstable intrinsic.)
    unsafe {
        core::arch::asm!("sdot {0:v}.4s, {1:v}.16b, {2:v}.16b", inout(vreg) acc, in(vreg) a, in(vreg) b,
            options(pure, nomem, nostack, preserves_flags));
    }
    acc
}

/// `acc + Σ a·b` without SDOT: ggml's `ggml_vdotq_s32` fallback (`vmull_s8` into i16,
/// which holds any i8 product, then pairwise widening adds).
#[target_feature(enable = "neon")]
#[inline]
fn widen_dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let p0 = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    let p1 = vmull_high_s8(a, b);
    vaddq_s32(acc, vaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1)))
}

/// `acc + Σ a·b` (lanes differ between the two paths; the total does not).
///
/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn dot<const SDOT: bool>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if SDOT {
        // SAFETY: forwarded from the caller.
        unsafe { sdot(acc, a, b) }
    } else {
        widen_dot(acc, a, b)
    }
}

/// `Σ a0·b0 + Σ a1·b1` as one i32 (32 products).
///
/// # Safety
/// As [`dot`].
#[target_feature(enable = "neon")]
#[inline]
unsafe fn dot32<const SDOT: bool>(a0: int8x16_t, b0: int8x16_t, a1: int8x16_t, b1: int8x16_t) -> i32 {
    // SAFETY: forwarded from the caller.
    unsafe { vaddvq_s32(dot::<SDOT>(dot::<SDOT>(vdupq_n_s32(0), a0, b0), a1, b1)) }
}

// ---------------------------------------------------------------------------------------
// Kernel bodies (generic over the dot path), one per weight type.

/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q4_0_body<const SDOT: bool>(w: &[u8], x: &[u8]) -> f32 {
    let m4 = vdupq_n_u8(0x0F);
    let s8 = vdupq_n_s8(8);
    let mut sumf = 0f32;
    for (b, y) in w.chunks_exact(18).zip(x.chunks_exact(Q8_0_BYTES)) {
        let v = ld_u8(b, 2);
        let lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, m4)), s8);
        let hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(v)), s8);
        // SAFETY: forwarded from the caller.
        let sumi = unsafe { dot32::<SDOT>(lo, ld_i8(y, 2), hi, ld_i8(y, 18)) };
        sumf += sumi as f32 * (f16_le(b, 0) * f16_le(y, 0));
    }
    sumf
}

/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q4_1_body<const SDOT: bool>(w: &[u8], x: &[u8]) -> f32 {
    let m4 = vdupq_n_u8(0x0F);
    let mut sumf = 0f32;
    for (b, y) in w.chunks_exact(20).zip(x.chunks_exact(Q8_1_BYTES)) {
        let v = ld_u8(b, 4);
        let lo = vreinterpretq_s8_u8(vandq_u8(v, m4));
        let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(v));
        // SAFETY: forwarded from the caller.
        let sumi = unsafe { dot32::<SDOT>(lo, ld_i8(y, 4), hi, ld_i8(y, 20)) };
        sumf += (f16_le(b, 0) * f16_le(y, 0)) * sumi as f32 + f16_le(b, 2) * f16_le(y, 2);
    }
    sumf
}

/// The 32 five-bit values of a Q5 block (nibbles at `qs`, high bits at `qh`), low half
/// and high half, minus `sub`.
#[target_feature(enable = "neon")]
#[inline]
fn q5_values(b: &[u8], qh: usize, qs: usize, sub: i8) -> (int8x16_t, int8x16_t) {
    let v = ld_u8(b, qs);
    let h0 = high_bits(b[qh], b[qh + 1]);
    let h1 = high_bits(b[qh + 2], b[qh + 3]);
    let s = vdupq_n_s8(sub);
    let lo = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v, vdupq_n_u8(0x0F)), h0)), s);
    let hi = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(v), h1)), s);
    (lo, hi)
}

/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q5_0_body<const SDOT: bool>(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in w.chunks_exact(22).zip(x.chunks_exact(Q8_0_BYTES)) {
        let (lo, hi) = q5_values(b, 2, 6, 16);
        // SAFETY: forwarded from the caller.
        let sumi = unsafe { dot32::<SDOT>(lo, ld_i8(y, 2), hi, ld_i8(y, 18)) };
        sumf += sumi as f32 * (f16_le(b, 0) * f16_le(y, 0));
    }
    sumf
}

/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q5_1_body<const SDOT: bool>(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in w.chunks_exact(24).zip(x.chunks_exact(Q8_1_BYTES)) {
        let (lo, hi) = q5_values(b, 4, 8, 0);
        // SAFETY: forwarded from the caller.
        let sumi = unsafe { dot32::<SDOT>(lo, ld_i8(y, 4), hi, ld_i8(y, 20)) };
        sumf += (f16_le(b, 0) * f16_le(y, 0)) * sumi as f32 + f16_le(b, 2) * f16_le(y, 2);
    }
    sumf
}

/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q8_0_body<const SDOT: bool>(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in w.chunks_exact(Q8_0_BYTES).zip(x.chunks_exact(Q8_0_BYTES)) {
        // SAFETY: forwarded from the caller.
        let sumi = unsafe { dot32::<SDOT>(ld_i8(b, 2), ld_i8(y, 2), ld_i8(b, 18), ld_i8(y, 18)) };
        sumf += sumi as f32 * (f16_le(b, 0) * f16_le(y, 0));
    }
    sumf
}

/// `Σ_j bsums[j] · mins[j / 2]` of a Q8_K block (exact in i32 for any bytes).
#[target_feature(enable = "neon")]
#[inline]
fn k_min_sum(y: &[u8], mn: &[u8; 8]) -> i32 {
    let p0 = vpaddlq_s16(vreinterpretq_s16_u8(ld_u8(y, 260)));
    let p1 = vpaddlq_s16(vreinterpretq_s16_u8(ld_u8(y, 276)));
    let m = vmovl_u8(vld1_u8_arr(mn));
    let m0 = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(m)));
    let m1 = vreinterpretq_s32_u32(vmovl_high_u16(m));
    vaddvq_s32(vaddq_s32(vmulq_s32(p0, m0), vmulq_s32(p1, m1)))
}

/// The 8 bytes of an array as a vector.
#[target_feature(enable = "neon")]
#[inline]
fn vld1_u8_arr(a: &[u8; 8]) -> uint8x8_t {
    ld8_u8(a, 0)
}

/// Q4_K/Q5_K: isum over the four 64-value chunks, `hb(c, half)` giving the 0/16 high bits
/// of the 16 lanes `half` of chunk `c`'s low (`hi == false`) or high nibbles.
///
/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn k4_isum<const SDOT: bool>(
    b: &[u8],
    qs: usize,
    y: &[u8],
    sc: &[u8; 8],
    hb: impl Fn(usize, bool, usize) -> uint8x16_t,
) -> i32 {
    let m4 = vdupq_n_u8(0x0F);
    let mut isum = 0i32;
    for c in 0..4 {
        let v0 = ld_u8(b, qs + 32 * c);
        let v1 = ld_u8(b, qs + 32 * c + 16);
        let l0 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v0, m4), hb(c, false, 0)));
        let l1 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v1, m4), hb(c, false, 1)));
        let h0 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(v0), hb(c, true, 0)));
        let h1 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(v1), hb(c, true, 1)));
        let q = 4 + 64 * c;
        // SAFETY: forwarded from the caller.
        let (lo, hi) = unsafe {
            (
                dot32::<SDOT>(l0, ld_i8(y, q), l1, ld_i8(y, q + 16)),
                dot32::<SDOT>(h0, ld_i8(y, q + 32), h1, ld_i8(y, q + 48)),
            )
        };
        isum += sc[2 * c] as i32 * lo + sc[2 * c + 1] as i32 * hi;
    }
    isum
}

/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q4_k_body<const SDOT: bool>(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    let zero = vdupq_n_u8(0);
    for (b, y) in w.chunks_exact(144).zip(x.chunks_exact(Q8_K_BYTES)) {
        let (sc, mn) = scale_min_k4(&b[4..16]);
        let summ = k_min_sum(y, &mn);
        // SAFETY: forwarded from the caller.
        let isum = unsafe { k4_isum::<SDOT>(b, 16, y, &sc, |_, _, _| zero) };
        let yd = f32_at(y, 0);
        sumf += f16_le(b, 0) * yd * isum as f32 - f16_le(b, 2) * yd * summ as f32;
    }
    sumf
}

/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q5_k_body<const SDOT: bool>(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    let sixteen = vdupq_n_u8(0x10);
    for (b, y) in w.chunks_exact(176).zip(x.chunks_exact(Q8_K_BYTES)) {
        let (sc, mn) = scale_min_k4(&b[4..16]);
        let summ = k_min_sum(y, &mn);
        let qh = [ld_u8(b, 16), ld_u8(b, 32)];
        let hb = |c: usize, hi: bool, half: usize| {
            let m = vdupq_n_u8(1 << (2 * c + hi as usize));
            vandq_u8(vtstq_u8(qh[half], m), sixteen)
        };
        // SAFETY: forwarded from the caller.
        let isum = unsafe { k4_isum::<SDOT>(b, 48, y, &sc, hb) };
        let yd = f32_at(y, 0);
        sumf += f16_le(b, 0) * yd * isum as f32 - f16_le(b, 2) * yd * summ as f32;
    }
    sumf
}

/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q6_k_body<const SDOT: bool>(w: &[u8], x: &[u8]) -> f32 {
    let m4 = vdupq_n_u8(0x0F);
    let m30 = vdupq_n_u8(0x30);
    let s32 = vdupq_n_s8(32);
    let mut sumf = 0f32;
    for (b, y) in w.chunks_exact(210).zip(x.chunks_exact(Q8_K_BYTES)) {
        let mut isum = 0i32;
        for j in 0..2 {
            for h in 0..2 {
                let qa = ld_u8(b, 64 * j + 16 * h);
                let qb = ld_u8(b, 64 * j + 32 + 16 * h);
                let qh = ld_u8(b, 128 + 32 * j + 16 * h);
                // (value, position in the 256) for the four groups of 16 these lanes feed.
                let groups = [
                    (vorrq_u8(vandq_u8(qa, m4), vshlq_n_u8::<4>(vandq_u8(qh, vdupq_n_u8(3)))), 0),
                    (vorrq_u8(vandq_u8(qb, m4), vandq_u8(vshlq_n_u8::<2>(qh), m30)), 32),
                    (vorrq_u8(vshrq_n_u8::<4>(qa), vandq_u8(qh, m30)), 64),
                    (vorrq_u8(vshrq_n_u8::<4>(qb), vandq_u8(vshrq_n_u8::<2>(qh), m30)), 96),
                ];
                for (v, off) in groups {
                    let pos = 128 * j + off + 16 * h;
                    let a = vsubq_s8(vreinterpretq_s8_u8(v), s32);
                    // SAFETY: forwarded from the caller.
                    let s = unsafe { vaddvq_s32(dot::<SDOT>(vdupq_n_s32(0), a, ld_i8(y, 4 + pos))) };
                    isum += b[192 + pos / 16] as i8 as i32 * s;
                }
            }
        }
        sumf += f16_le(b, 208) * f32_at(y, 0) * isum as f32;
    }
    sumf
}

/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q2_k_body<const SDOT: bool>(w: &[u8], x: &[u8]) -> f32 {
    let m3 = vdupq_n_u8(3);
    let mut sumf = 0f32;
    for (b, y) in w.chunks_exact(84).zip(x.chunks_exact(Q8_K_BYTES)) {
        // summs = Σ_j bsums[j] · (scales[j] >> 4), widened to i32 (exact for any bytes).
        let mins = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(vshrq_n_u8::<4>(ld_u8(b, 0)))));
        let mins_hi = vreinterpretq_s16_u16(vmovl_high_u8(vshrq_n_u8::<4>(ld_u8(b, 0))));
        let (bs0, bs1) = (vreinterpretq_s16_u8(ld_u8(y, 260)), vreinterpretq_s16_u8(ld_u8(y, 276)));
        let p = vaddq_s32(
            vaddq_s32(vmull_s16(vget_low_s16(bs0), vget_low_s16(mins)), vmull_high_s16(bs0, mins)),
            vaddq_s32(vmull_s16(vget_low_s16(bs1), vget_low_s16(mins_hi)), vmull_high_s16(bs1, mins_hi)),
        );
        let summs = vaddvq_s32(p);
        let mut isum = 0i32;
        for k in 0..2 {
            for half in 0..2 {
                let v = ld_u8(b, 16 + 32 * k + 16 * half);
                let parts = [
                    vandq_u8(v, m3),
                    vandq_u8(vshrq_n_u8::<2>(v), m3),
                    vandq_u8(vshrq_n_u8::<4>(v), m3),
                    vshrq_n_u8::<6>(v),
                ];
                for (s, a) in parts.into_iter().enumerate() {
                    let q = ld_i8(y, 4 + 128 * k + 32 * s + 16 * half);
                    // SAFETY: forwarded from the caller.
                    let d = unsafe { vaddvq_s32(dot::<SDOT>(vdupq_n_s32(0), vreinterpretq_s8_u8(a), q)) };
                    isum += (b[8 * k + 2 * s + half] & 0xF) as i32 * d;
                }
            }
        }
        let yd = f32_at(y, 0);
        let dall = yd * f16_le(b, 80);
        let dmin = yd * f16_le(b, 82);
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

/// # Safety
/// With `SDOT = true` the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q3_k_body<const SDOT: bool>(w: &[u8], x: &[u8]) -> f32 {
    let m3 = vdupq_n_u8(3);
    let four = vdupq_n_u8(4);
    let mut sumf = 0f32;
    for (b, y) in w.chunks_exact(110).zip(x.chunks_exact(Q8_K_BYTES)) {
        let scales = q3_k_scales(&b[96..108]);
        let mut isum = 0i32;
        for j in 0..2 {
            for half in 0..2 {
                let v = ld_u8(b, 32 + 32 * j + 16 * half);
                let hm = ld_u8(b, 16 * half);
                let parts = [
                    vandq_u8(v, m3),
                    vandq_u8(vshrq_n_u8::<2>(v), m3),
                    vandq_u8(vshrq_n_u8::<4>(v), m3),
                    vshrq_n_u8::<6>(v),
                ];
                for (s, q) in parts.into_iter().enumerate() {
                    // − 4 where the hmask bit is clear.
                    let clear = vmvnq_u8(vtstq_u8(hm, vdupq_n_u8(1 << (4 * j + s))));
                    let a = vsubq_s8(vreinterpretq_s8_u8(q), vreinterpretq_s8_u8(vandq_u8(clear, four)));
                    let pos = 128 * j + 32 * s + 16 * half;
                    // SAFETY: forwarded from the caller.
                    let d = unsafe { vaddvq_s32(dot::<SDOT>(vdupq_n_s32(0), a, ld_i8(y, 4 + pos))) };
                    isum += (scales[pos / 16] as i32 - 32) * d;
                }
            }
        }
        sumf += f16_le(b, 108) * f32_at(y, 0) * isum as f32;
    }
    sumf
}

/// One safe, dispatching kernel per body: the SDOT build when the CPU has it, the
/// widening build otherwise, the scalar twin without NEON.
macro_rules! kernel {
    ($(#[$doc:meta])* $name:ident, $body:ident, $sdot:ident, $widen:ident, $twin:path) => {
        /// The body built with SDOT.
        ///
        /// # Safety
        /// The CPU must have NEON and FEAT_DotProd.
        #[target_feature(enable = "neon,dotprod")]
        pub(crate) unsafe fn $sdot(w: &[u8], x: &[u8]) -> f32 {
            // SAFETY: the caller guarantees FEAT_DotProd; the body reads only inside `w`, `x`.
            unsafe { $body::<true>(w, x) }
        }

        /// The body built without SDOT.
        ///
        /// # Safety
        /// The CPU must have NEON.
        #[target_feature(enable = "neon")]
        pub(crate) unsafe fn $widen(w: &[u8], x: &[u8]) -> f32 {
            // SAFETY: `SDOT = false` needs nothing beyond NEON; the body reads only inside `w`, `x`.
            unsafe { $body::<false>(w, x) }
        }

        $(#[$doc])*
        pub fn $name(n: usize, w: &[u8], x: &[u8]) -> f32 {
            if has_dotprod() {
                // SAFETY: NEON and FEAT_DotProd were detected at run time.
                unsafe { $sdot(w, x) }
            } else if has_neon() {
                // SAFETY: NEON was detected at run time.
                unsafe { $widen(w, x) }
            } else {
                $twin(n, w, x)
            }
        }
    };
}

kernel!(
    /// `ggml_vec_dot_q4_0_q8_0` (twin: `scalar::dots::q4_0_q8_0`, bit-identical).
    q4_0_q8_0, q4_0_body, q4_0_sdot, q4_0_widen, sd::q4_0_q8_0
);
kernel!(
    /// `ggml_vec_dot_q4_1_q8_1` (twin: `scalar::dots::q4_1_q8_1`, bit-identical).
    q4_1_q8_1, q4_1_body, q4_1_sdot, q4_1_widen, sd::q4_1_q8_1
);
kernel!(
    /// `ggml_vec_dot_q5_0_q8_0` (twin: `scalar::dots::q5_0_q8_0`, bit-identical).
    q5_0_q8_0, q5_0_body, q5_0_sdot, q5_0_widen, sd::q5_0_q8_0
);
kernel!(
    /// `ggml_vec_dot_q5_1_q8_1` (twin: `scalar::dots::q5_1_q8_1`, bit-identical).
    q5_1_q8_1, q5_1_body, q5_1_sdot, q5_1_widen, sd::q5_1_q8_1
);
kernel!(
    /// `ggml_vec_dot_q8_0_q8_0` (twin: `scalar::dots::q8_0_q8_0`, bit-identical).
    q8_0_q8_0, q8_0_body, q8_0_sdot, q8_0_widen, sd::q8_0_q8_0
);
kernel!(
    /// `ggml_vec_dot_q2_K_q8_K` (twin: `scalar::dots::q2_k_q8_k`, bit-identical).
    q2_k_q8_k, q2_k_body, q2_k_sdot, q2_k_widen, sd::q2_k_q8_k
);
kernel!(
    /// `ggml_vec_dot_q3_K_q8_K` (twin: `scalar::dots::q3_k_q8_k`, bit-identical).
    q3_k_q8_k, q3_k_body, q3_k_sdot, q3_k_widen, sd::q3_k_q8_k
);
kernel!(
    /// `ggml_vec_dot_q4_K_q8_K` (twin: `scalar::dots::q4_k_q8_k`, bit-identical).
    q4_k_q8_k, q4_k_body, q4_k_sdot, q4_k_widen, sd::q4_k_q8_k
);
kernel!(
    /// `ggml_vec_dot_q5_K_q8_K` (twin: `scalar::dots::q5_k_q8_k`, bit-identical).
    q5_k_q8_k, q5_k_body, q5_k_sdot, q5_k_widen, sd::q5_k_q8_k
);
kernel!(
    /// `ggml_vec_dot_q6_K_q8_K` (twin: `scalar::dots::q6_k_q8_k`, bit-identical).
    q6_k_q8_k, q6_k_body, q6_k_sdot, q6_k_widen, sd::q6_k_q8_k
);

// ---------------------------------------------------------------------------------------
// F32 and F16.

/// `GGML_F32x4_REDUCE` of the four accumulators: `(s0+s2)+(s1+s3)`, then
/// `vaddvq_f32` = `(l0+l1)+(l2+l3)` (spelled with two `FADDP`s).
#[target_feature(enable = "neon")]
#[inline]
fn reduce4(s: [float32x4_t; 4]) -> f32 {
    let v = vaddq_f32(vaddq_f32(s[0], s[2]), vaddq_f32(s[1], s[3]));
    let p = vpaddq_f32(v, v);
    vgetq_lane_f32::<0>(vpaddq_f32(p, p))
}

/// Four FMA accumulators over the first `np` (a multiple of 16) elements; `ld` loads
/// four elements from element index `i`.
#[target_feature(enable = "neon")]
#[inline]
fn fma_steps(np: usize, ld: impl Fn(usize) -> (float32x4_t, float32x4_t)) -> f32 {
    let mut s = [vdupq_n_f32(0.0); 4];
    for i in (0..np).step_by(16) {
        for (j, s) in s.iter_mut().enumerate() {
            let (a, b) = ld(i + 4 * j);
            *s = vfmaq_f32(*s, a, b);
        }
    }
    reduce4(s)
}

/// # Safety
/// The CPU must have NEON.
#[target_feature(enable = "neon")]
unsafe fn f32_neon(w: &[u8], x: &[u8]) -> f32 {
    let n = w.len().min(x.len()) / 4;
    let np = n & !15;
    let mut sumf = fma_steps(np, |i| (ld_f32(w, 4 * i), ld_f32(x, 4 * i)));
    for i in np..n {
        sumf = f32_at(w, 4 * i).mul_add(f32_at(x, 4 * i), sumf);
    }
    sumf
}

/// # Safety
/// The CPU must have NEON.
#[target_feature(enable = "neon")]
unsafe fn f16_neon(w: &[u8], x: &[u8]) -> f32 {
    let n = w.len().min(x.len()) / 2;
    let np = n & !15;
    let mut sumf = fma_steps(np, |i| (ld_f16(w, 2 * i), ld_f16(x, 2 * i))) as f64;
    for i in np..n {
        sumf += (f16_le(w, 2 * i) * f16_le(x, 2 * i)) as f64;
    }
    sumf as f32
}

/// Scalar twin of the NEON F32/F16 dot: `elem(row, i)` reads element `i`.
fn float_twin(n: usize, elem: impl Fn(&[u8], usize) -> f32, w: &[u8], x: &[u8]) -> f32 {
    let np = n & !15;
    // acc[4 * j + l]: lane l of accumulator j.
    let mut acc = [0f32; 16];
    for i in (0..np).step_by(16) {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = elem(w, i + k).mul_add(elem(x, i + k), *acc);
        }
    }
    let v: [f32; 4] = std::array::from_fn(|l| (acc[l] + acc[8 + l]) + (acc[4 + l] + acc[12 + l]));
    (v[0] + v[1]) + (v[2] + v[3])
}

/// Scalar twin of [`f32_f32`] (same lanes, same order of operations).
pub fn f32_f32_twin(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let n = w.len().min(x.len()) / 4;
    let np = n & !15;
    let mut sumf = float_twin(n, |b, i| f32_at(b, 4 * i), w, x);
    for i in np..n {
        sumf = f32_at(w, 4 * i).mul_add(f32_at(x, 4 * i), sumf);
    }
    sumf
}

/// Scalar twin of [`f16_f16`] (same lanes, same order of operations).
pub fn f16_f16_twin(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let n = w.len().min(x.len()) / 2;
    let np = n & !15;
    let mut sumf = float_twin(n, |b, i| f16_at(b, 2 * i), w, x) as f64;
    for i in np..n {
        sumf += (f16_at(w, 2 * i) * f16_at(x, 2 * i)) as f64;
    }
    sumf as f32
}

/// `ggml_vec_dot_f32` of a NEON build (twin: [`f32_f32_twin`], bit-identical).
pub fn f32_f32(n: usize, w: &[u8], x: &[u8]) -> f32 {
    if has_neon() {
        // SAFETY: NEON was detected at run time; the kernel reads only inside `w`, `x`.
        unsafe { f32_neon(w, x) }
    } else {
        f32_f32_twin(n, w, x)
    }
}

/// `ggml_vec_dot_f16` of a NEON build without FP16 vector arithmetic (twin:
/// [`f16_f16_twin`], bit-identical).
pub fn f16_f16(n: usize, w: &[u8], x: &[u8]) -> f32 {
    if has_neon() {
        // SAFETY: NEON was detected at run time; the kernel reads only inside `w`, `x`.
        unsafe { f16_neon(w, x) }
    } else {
        f16_f16_twin(n, w, x)
    }
}

// ---------------------------------------------------------------------------------------
// Activation quantizers (twins: `scalar::act`, bit-identical).

/// The eight f32x4 of a block of 32, `amax` over the non-NaN `|v|` (0 when none), and
/// the scalar quantizer's `d = amax/127`, `id = 127/amax`.
#[target_feature(enable = "neon")]
#[inline]
fn block_scale(x: &[f32]) -> ([float32x4_t; 8], f32, f32) {
    let x = &x[..32];
    // SAFETY: `x` is 32 readable f32; `vld1q_f32` needs only f32 alignment, which `&[f32]` has.
    let v: [float32x4_t; 8] = std::array::from_fn(|j| unsafe { vld1q_f32(x[4 * j..].as_ptr()) });
    // |v| with NaN lanes zeroed (the scalar `fold` never picks a NaN).
    let a: [float32x4_t; 8] = std::array::from_fn(|j| {
        let abs = vabsq_f32(v[j]);
        vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(abs), vceqq_f32(abs, abs)))
    });
    let m = vmaxq_f32(
        vmaxq_f32(vmaxq_f32(a[0], a[1]), vmaxq_f32(a[2], a[3])),
        vmaxq_f32(vmaxq_f32(a[4], a[5]), vmaxq_f32(a[6], a[7])),
    );
    let amax = vmaxvq_f32(m);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    (v, d, id)
}

/// `v · id` rounded to nearest even, converted as `_mm256_cvtps_epi32` does (out of range
/// and NaN → `i32::MIN`).
#[target_feature(enable = "neon")]
#[inline]
fn round_i32(v: float32x4_t, id: f32) -> int32x4_t {
    let r = vrndnq_f32(vmulq_n_f32(v, id));
    let ok = vandq_u32(vcgeq_f32(r, vdupq_n_f32(-2147483648.0)), vcltq_f32(r, vdupq_n_f32(2147483648.0)));
    vbslq_s32(ok, vcvtq_s32_f32(r), vdupq_n_s32(i32::MIN))
}

/// Saturates 8 i32 to i8 (as `packs`) and stores them in `out` (8 bytes).
#[target_feature(enable = "neon")]
#[inline]
fn store_i8(out: &mut [u8], a: int32x4_t, b: int32x4_t) {
    let q = vqmovn_s16(vcombine_s16(vqmovn_s32(a), vqmovn_s32(b)));
    let out = &mut out[..8];
    // SAFETY: `out` is exactly 8 writable bytes; `vst1_s8` has no alignment requirement.
    unsafe { vst1_s8(out.as_mut_ptr() as *mut i8, q) }
}

/// # Safety
/// The CPU must have NEON.
#[target_feature(enable = "neon")]
unsafe fn quantize_q8_0_neon(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(32).zip(dst.chunks_exact_mut(Q8_0_BYTES)) {
        let (v, d, id) = block_scale(x);
        y[0..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        for j in 0..4 {
            store_i8(&mut y[2 + 8 * j..], round_i32(v[2 * j], id), round_i32(v[2 * j + 1], id));
        }
    }
}

/// # Safety
/// The CPU must have NEON.
#[target_feature(enable = "neon")]
unsafe fn quantize_q8_1_neon(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(32).zip(dst.chunks_exact_mut(Q8_1_BYTES)) {
        let (v, d, id) = block_scale(x);
        y[0..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        let mut acc = vdupq_n_s32(0);
        for j in 0..4 {
            let (a, b) = (round_i32(v[2 * j], id), round_i32(v[2 * j + 1], id));
            acc = vaddq_s32(acc, vaddq_s32(a, b));
            store_i8(&mut y[4 + 8 * j..], a, b);
        }
        let sum = vaddvq_s32(acc);
        y[2..4].copy_from_slice(&half::f16::from_f32(d * sum as f32).to_bits().to_le_bytes());
    }
}

/// # Safety
/// The CPU must have NEON.
#[target_feature(enable = "neon")]
unsafe fn quantize_q8_k_neon(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(256).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
        let x = &x[..256];
        // SAFETY: `x` is 256 readable f32; `vld1q_f32` needs only f32 alignment.
        let v: [float32x4_t; 64] = std::array::from_fn(|j| unsafe { vld1q_f32(x[4 * j..].as_ptr()) });
        // amax over the non-NaN |v| (the reference's strict `>` never picks a NaN).
        let mut m = vdupq_n_f32(0.0);
        for v in &v {
            let a = vabsq_f32(*v);
            m = vmaxq_f32(m, vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(a), vceqq_f32(a, a))));
        }
        let amax = vmaxvq_f32(m);
        if amax == 0.0 {
            y.fill(0);
            continue;
        }
        // `max`: the first value whose |v| is amax (the reference keeps the first).
        let at = v.iter().position(|v| vmaxvq_u32(vceqq_f32(vabsq_f32(*v), vdupq_n_f32(amax))) != 0).unwrap_or(0);
        let max = x[4 * at..4 * at + 4].iter().copied().find(|v| v.abs() == amax).unwrap_or(amax);
        let iscale = -127.0 / max;
        // nearest_int(iscale·v) = (bits(iscale·v + 12582912) & 0x7fffff) − 0x400000, then
        // `min(127)` and the wrapping store into i8.
        let magic = vdupq_n_f32(12582912.0);
        let qs = &mut y[4..260];
        let mut q16 = [vdupq_n_s8(0); 16];
        for (g, q16) in q16.iter_mut().enumerate() {
            let r: [int16x4_t; 4] = std::array::from_fn(|k| {
                let t = vaddq_f32(vmulq_n_f32(v[4 * g + k], iscale), magic);
                let i =
                    vsubq_s32(vandq_s32(vreinterpretq_s32_f32(t), vdupq_n_s32(0x007f_ffff)), vdupq_n_s32(0x0040_0000));
                vmovn_s32(vminq_s32(i, vdupq_n_s32(127)))
            });
            *q16 = vcombine_s8(vmovn_s16(vcombine_s16(r[0], r[1])), vmovn_s16(vcombine_s16(r[2], r[3])));
            let out = &mut qs[16 * g..16 * g + 16];
            // SAFETY: `out` is exactly 16 writable bytes; `vst1q_s8` has no alignment requirement.
            unsafe { vst1q_s8(out.as_mut_ptr() as *mut i8, *q16) };
        }
        for (g, q16) in q16.iter().enumerate() {
            y[260 + 2 * g..262 + 2 * g].copy_from_slice(&vaddlvq_s8(*q16).to_le_bytes());
        }
        y[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

/// `quantize_row_q8_K` (= `quantize_row_q8_K_ref`) on NEON (twin: `scalar::act::quantize_q8_k`).
pub fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    if has_neon() {
        // SAFETY: NEON was detected at run time; the kernel touches only `src`, `dst`.
        unsafe { quantize_q8_k_neon(src, dst) }
    } else {
        sact::quantize_q8_k(src, dst)
    }
}

/// ggml-cpu's x86 `quantize_row_q8_0` rounding on NEON (twin: `scalar::act::quantize_q8_0`).
pub fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    if has_neon() {
        // SAFETY: NEON was detected at run time; the kernel touches only `src`, `dst`.
        unsafe { quantize_q8_0_neon(src, dst) }
    } else {
        sact::quantize_q8_0(src, dst)
    }
}

/// ggml-cpu's x86 `quantize_row_q8_1` rounding on NEON (twin: `scalar::act::quantize_q8_1`).
pub fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    if has_neon() {
        // SAFETY: NEON was detected at run time; the kernel touches only `src`, `dst`.
        unsafe { quantize_q8_1_neon(src, dst) }
    } else {
        sact::quantize_q8_1(src, dst)
    }
}

#[cfg(test)]
mod tests {
    //! Every NEON kernel, in both builds (SDOT when this CPU has it, widening always),
    //! against its scalar twin bit for bit, on random blocks (every code, odd scales,
    //! Q8_K block sums of any value) and on really quantized rows.

    use super::*;
    use crate::registry::{act_quantizer_for, kernel_for, kernels_of};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    type Raw = unsafe fn(&[u8], &[u8]) -> f32;
    type Dot = fn(usize, &[u8], &[u8]) -> f32;

    /// A quantized weight type: name, block elements and bytes, fp16 fields, activation.
    struct Case {
        name: &'static str,
        qk: usize,
        bytes: usize,
        f16s: &'static [usize],
        act: Act,
        public: Dot,
        sdot: Raw,
        widen: Raw,
        twin: Dot,
    }

    #[derive(Clone, Copy, PartialEq)]
    enum Act {
        Q8_0,
        Q8_1,
        Q8K,
    }

    const CASES: &[Case] = &[
        Case {
            name: "q4_0",
            qk: 32,
            bytes: 18,
            f16s: &[0],
            act: Act::Q8_0,
            public: q4_0_q8_0,
            sdot: q4_0_sdot,
            widen: q4_0_widen,
            twin: sd::q4_0_q8_0,
        },
        Case {
            name: "q4_1",
            qk: 32,
            bytes: 20,
            f16s: &[0, 2],
            act: Act::Q8_1,
            public: q4_1_q8_1,
            sdot: q4_1_sdot,
            widen: q4_1_widen,
            twin: sd::q4_1_q8_1,
        },
        Case {
            name: "q5_0",
            qk: 32,
            bytes: 22,
            f16s: &[0],
            act: Act::Q8_0,
            public: q5_0_q8_0,
            sdot: q5_0_sdot,
            widen: q5_0_widen,
            twin: sd::q5_0_q8_0,
        },
        Case {
            name: "q5_1",
            qk: 32,
            bytes: 24,
            f16s: &[0, 2],
            act: Act::Q8_1,
            public: q5_1_q8_1,
            sdot: q5_1_sdot,
            widen: q5_1_widen,
            twin: sd::q5_1_q8_1,
        },
        Case {
            name: "q8_0",
            qk: 32,
            bytes: 34,
            f16s: &[0],
            act: Act::Q8_0,
            public: q8_0_q8_0,
            sdot: q8_0_sdot,
            widen: q8_0_widen,
            twin: sd::q8_0_q8_0,
        },
        Case {
            name: "q2_K",
            qk: 256,
            bytes: 84,
            f16s: &[80, 82],
            act: Act::Q8K,
            public: q2_k_q8_k,
            sdot: q2_k_sdot,
            widen: q2_k_widen,
            twin: sd::q2_k_q8_k,
        },
        Case {
            name: "q3_K",
            qk: 256,
            bytes: 110,
            f16s: &[108],
            act: Act::Q8K,
            public: q3_k_q8_k,
            sdot: q3_k_sdot,
            widen: q3_k_widen,
            twin: sd::q3_k_q8_k,
        },
        Case {
            name: "q4_K",
            qk: 256,
            bytes: 144,
            f16s: &[0, 2],
            act: Act::Q8K,
            public: q4_k_q8_k,
            sdot: q4_k_sdot,
            widen: q4_k_widen,
            twin: sd::q4_k_q8_k,
        },
        Case {
            name: "q5_K",
            qk: 256,
            bytes: 176,
            f16s: &[0, 2],
            act: Act::Q8K,
            public: q5_k_q8_k,
            sdot: q5_k_sdot,
            widen: q5_k_widen,
            twin: sd::q5_k_q8_k,
        },
        Case {
            name: "q6_K",
            qk: 256,
            bytes: 210,
            f16s: &[208],
            act: Act::Q8K,
            public: q6_k_q8_k,
            sdot: q6_k_sdot,
            widen: q6_k_widen,
            twin: sd::q6_k_q8_k,
        },
    ];

    fn gauss(rng: &mut StdRng) -> f32 {
        let u1: f32 = rng.gen_range(1e-7f32..1.0);
        let u2: f32 = rng.gen();
        (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
    }

    fn put_f16(b: &mut [u8], at: usize, v: f32) {
        b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
    }

    /// `nb` blocks of random bytes with sane fp16 fields (both signs, some zero).
    fn random_blocks(rng: &mut StdRng, nb: usize, bytes: usize, f16s: &[usize]) -> Vec<u8> {
        let mut v: Vec<u8> = (0..nb * bytes).map(|_| rng.gen()).collect();
        for b in v.chunks_exact_mut(bytes) {
            for &at in f16s {
                let s = if rng.gen_bool(0.05) { 0.0 } else { rng.gen_range(-0.1f32..0.1) };
                put_f16(b, at, s);
            }
        }
        v
    }

    fn real_weights(rng: &mut StdRng, name: &str, cols: usize) -> Vec<u8> {
        let x: Vec<f32> = (0..cols).map(|_| gauss(rng)).collect();
        ggml_quants::lookup_name(name).unwrap().quantize_to_vec(&x, cols, None).unwrap()
    }

    /// Activations for `cols` columns: quantized from gaussian data, or random bytes.
    fn acts(rng: &mut StdRng, act: Act, cols: usize, random: bool) -> Vec<u8> {
        let xf: Vec<f32> = (0..cols).map(|_| gauss(rng) * 3.0).collect();
        let (bytes, f16s): (usize, &[usize]) = match act {
            Act::Q8_0 => (Q8_0_BYTES, &[0]),
            Act::Q8_1 => (Q8_1_BYTES, &[0, 2]),
            Act::Q8K => (Q8_K_BYTES, &[]),
        };
        let qk = if act == Act::Q8K { 256 } else { 32 };
        if random {
            let mut v = random_blocks(rng, cols / qk, bytes, f16s);
            if act == Act::Q8K {
                for b in v.chunks_exact_mut(Q8_K_BYTES) {
                    b[0..4].copy_from_slice(&rng.gen_range(-0.05f32..0.05).to_le_bytes());
                    // Block sums of any i16 half the time (the kernels must stay exact).
                    if rng.gen_bool(0.5) {
                        for j in 0..16 {
                            let s: i16 = rng.gen_range(-2048..2048);
                            b[260 + 2 * j..262 + 2 * j].copy_from_slice(&s.to_le_bytes());
                        }
                    }
                }
            }
            v
        } else {
            let mut v = vec![0u8; cols / qk * bytes];
            match act {
                Act::Q8_0 => sact::quantize_q8_0(&xf, &mut v),
                Act::Q8_1 => sact::quantize_q8_1(&xf, &mut v),
                Act::Q8K => sact::quantize_q8_k(&xf, &mut v),
            }
            v
        }
    }

    /// Runs every build of `c` on (w, x) and checks each against the twin bit for bit.
    fn check(c: &Case, w: &[u8], x: &[u8], what: &str) -> f32 {
        let n = w.len() / c.bytes * c.qk;
        let want = (c.twin)(n, w, x);
        let got = (c.public)(n, w, x);
        assert_eq!(got.to_bits(), want.to_bits(), "{} {what}: public {got} vs twin {want}", c.name);
        // SAFETY: this module runs only on aarch64, where NEON is part of the target.
        let widened = unsafe { (c.widen)(w, x) };
        assert_eq!(widened.to_bits(), want.to_bits(), "{} {what}: widening {widened} vs twin {want}", c.name);
        if has_dotprod() {
            // SAFETY: FEAT_DotProd was detected at run time.
            let s = unsafe { (c.sdot)(w, x) };
            assert_eq!(s.to_bits(), want.to_bits(), "{} {what}: sdot {s} vs twin {want}", c.name);
        }
        want
    }

    #[test]
    fn quantized_kernels_are_bit_identical_to_scalar_twins() {
        let mut rng = StdRng::seed_from_u64(11);
        eprintln!("neon: sdot build {}", if has_dotprod() { "tested" } else { "not available on this CPU" });
        let mut compared = 0;
        for c in CASES {
            let mut nonzero = 0;
            for nb in [1usize, 2, 3, 5, 8] {
                let cols = nb * c.qk;
                for it in 0..24 {
                    let w = if it % 2 == 0 {
                        random_blocks(&mut rng, nb, c.bytes, c.f16s)
                    } else {
                        real_weights(&mut rng, c.name, cols)
                    };
                    let x = acts(&mut rng, c.act, cols, it % 3 == 0);
                    if check(c, &w, &x, &format!("{nb} blocks, case {it}")) != 0.0 {
                        nonzero += 1;
                    }
                    compared += 1;
                }
            }
            assert!(nonzero > 100, "{}: only {nonzero} nonzero results", c.name);
        }
        assert_eq!(compared, CASES.len() * 5 * 24);
    }

    /// Saturated codes everywhere (all nibbles 15 / 0, q8 ±127 and −128, extreme block
    /// sums): no lane overflows on either path.
    #[test]
    fn extreme_codes_stay_exact() {
        let mut rng = StdRng::seed_from_u64(12);
        for c in CASES {
            for fill in [0x00u8, 0xFF, 0x80, 0x7F, 0x88, 0x0F, 0xF0] {
                for xfill in [0x80u8, 0x7F, 0x81, 0xFF] {
                    let nb = 3;
                    let mut w = vec![fill; nb * c.bytes];
                    for b in w.chunks_exact_mut(c.bytes) {
                        for &at in c.f16s {
                            put_f16(b, at, 0.0123);
                        }
                    }
                    let mut x = acts(&mut rng, c.act, nb * c.qk, true);
                    let (bytes, qs, scale): (usize, usize, &[usize]) = match c.act {
                        Act::Q8_0 => (Q8_0_BYTES, 2, &[0]),
                        Act::Q8_1 => (Q8_1_BYTES, 4, &[0, 2]),
                        Act::Q8K => (Q8_K_BYTES, 4, &[]),
                    };
                    for b in x.chunks_exact_mut(bytes) {
                        let end = if c.act == Act::Q8K { 260 } else { bytes };
                        b[qs..end].fill(xfill);
                        if c.act == Act::Q8K {
                            let s = if xfill >= 0x80 { i16::MIN } else { i16::MAX };
                            for j in 0..16 {
                                b[260 + 2 * j..262 + 2 * j].copy_from_slice(&s.to_le_bytes());
                            }
                        }
                        for &at in scale {
                            put_f16(b, at, -0.75);
                        }
                    }
                    check(c, &w, &x, &format!("fill {fill:#x} x {xfill:#x}"));
                }
            }
        }
    }

    /// A changed code changes the result (the kernels read what they should), and the
    /// builds still agree with the twin after it.
    #[test]
    fn every_quant_byte_matters() {
        let mut rng = StdRng::seed_from_u64(13);
        for c in CASES {
            let nb = 2;
            let mut changed = 0;
            let trials = 60;
            for _ in 0..trials {
                let mut w = real_weights(&mut rng, c.name, nb * c.qk);
                let x = acts(&mut rng, c.act, nb * c.qk, false);
                let before = check(c, &w, &x, "before");
                let at = loop {
                    let at = rng.gen_range(0..w.len());
                    if !c.f16s.iter().any(|&f| at % c.bytes == f || at % c.bytes == f + 1) {
                        break at;
                    }
                };
                w[at] ^= 1 << rng.gen_range(0..8);
                if check(c, &w, &x, "after") != before {
                    changed += 1;
                }
            }
            assert!(changed > trials / 2, "{}: only {changed} of {trials} flipped bits changed the dot", c.name);
        }
    }

    /// Rows of unequal length: every build takes the same whole blocks as the twin.
    #[test]
    fn unequal_lengths_follow_the_twin() {
        let mut rng = StdRng::seed_from_u64(14);
        for c in CASES {
            let w = random_blocks(&mut rng, 4, c.bytes, c.f16s);
            let x = acts(&mut rng, c.act, 3 * c.qk, false);
            check(c, &w, &x, "4 weight blocks, 3 activation blocks");
            check(c, &w[..w.len() - 1], &x, "a partial weight block");
            check(c, &w[..2 * c.bytes], &x[..x.len() - 5], "a partial activation block");
            check(c, &[], &x, "no weights");
        }
    }

    fn float_rows(rng: &mut StdRng, n: usize, f16: bool) -> (Vec<u8>, Vec<u8>, Vec<f64>, Vec<f64>) {
        let mut row = || -> (Vec<u8>, Vec<f64>) {
            let mut bytes = Vec::new();
            let mut vals = Vec::new();
            for _ in 0..n {
                let v = gauss(rng) * if rng.gen_bool(0.02) { 300.0 } else { 1.0 };
                if f16 {
                    let h = if rng.gen_bool(0.05) {
                        // Any finite fp16, subnormals included.
                        half::f16::from_bits(rng.gen_range(0..0x7C00u16) | if rng.gen() { 0x8000 } else { 0 })
                    } else {
                        half::f16::from_f32(v)
                    };
                    bytes.extend_from_slice(&h.to_bits().to_le_bytes());
                    vals.push(h.to_f64());
                } else {
                    bytes.extend_from_slice(&v.to_le_bytes());
                    vals.push(v as f64);
                }
            }
            (bytes, vals)
        };
        let (w, wv) = row();
        let (x, xv) = row();
        (w, x, wv, xv)
    }

    /// F32/F16: NEON bit-identical to the lane-order twins; the twins within 1e-6 of
    /// Σ|w·x| of an f64 dot (so a twin that is wrong in the same way would still fail).
    #[test]
    fn float_kernels_are_bit_identical_to_twins() {
        let mut rng = StdRng::seed_from_u64(15);
        for f16 in [false, true] {
            let (public, twin): (Dot, Dot) = if f16 { (f16_f16, f16_f16_twin) } else { (f32_f32, f32_f32_twin) };
            for n in [0usize, 1, 7, 15, 16, 17, 31, 32, 33, 64, 67, 100, 576, 1000] {
                for _ in 0..20 {
                    let (w, x, wv, xv) = float_rows(&mut rng, n, f16);
                    let want = twin(n, &w, &x);
                    let got = public(n, &w, &x);
                    assert_eq!(got.to_bits(), want.to_bits(), "f16={f16} n={n}: neon {got} vs twin {want}");
                    let exact: f64 = wv.iter().zip(&xv).map(|(a, b)| a * b).sum();
                    let mag: f64 = wv.iter().zip(&xv).map(|(a, b)| (a * b).abs()).sum();
                    assert!(
                        (want as f64 - exact).abs() <= 1e-6 * mag + 1e-30,
                        "f16={f16} n={n}: twin {want} vs exact {exact} (mag {mag})"
                    );
                }
            }
        }
    }

    /// The F32 leftovers are fused, the F16 ones summed in f64: the two twins disagree
    /// with a plain sequential f32 sum somewhere (the lane order is really tested).
    #[test]
    fn float_twins_are_not_sequential_sums() {
        let mut rng = StdRng::seed_from_u64(16);
        let mut differs = 0;
        for _ in 0..50 {
            let (w, x, _, _) = float_rows(&mut rng, 67, false);
            let seq = w.chunks_exact(4).zip(x.chunks_exact(4)).fold(0f32, |s, (a, b)| s + f32_at(a, 0) * f32_at(b, 0));
            if f32_f32(67, &w, &x).to_bits() != seq.to_bits() {
                differs += 1;
            }
        }
        assert!(differs > 10, "{differs}");
    }

    fn check_quantizers(x: &[f32], what: &str) {
        let nb = x.len() / 32;
        let mut want0 = vec![0u8; nb * Q8_0_BYTES];
        sact::quantize_q8_0(x, &mut want0);
        let mut got0 = vec![0xAAu8; want0.len()];
        quantize_q8_0(x, &mut got0);
        assert_eq!(got0, want0, "q8_0 {what}");
        let mut want1 = vec![0u8; nb * Q8_1_BYTES];
        sact::quantize_q8_1(x, &mut want1);
        let mut got1 = vec![0xAAu8; want1.len()];
        quantize_q8_1(x, &mut got1);
        assert_eq!(got1, want1, "q8_1 {what}");
        if x.len().is_multiple_of(256) {
            let mut wantk = vec![0u8; x.len() / 256 * Q8_K_BYTES];
            sact::quantize_q8_k(x, &mut wantk);
            let mut gotk = vec![0xAAu8; wantk.len()];
            quantize_q8_k(x, &mut gotk);
            assert_eq!(gotk, wantk, "q8_K {what}");
        }
    }

    #[test]
    fn activation_quantizers_are_bit_identical_to_scalar_twins() {
        let mut rng = StdRng::seed_from_u64(17);
        for scale in [1e-30f32, 1e-3, 1.0, 300.0, 1e30] {
            for nb in [1usize, 2, 7, 8, 32] {
                for _ in 0..10 {
                    let x: Vec<f32> = (0..32 * nb).map(|_| gauss(&mut rng) * scale).collect();
                    check_quantizers(&x, &format!("scale {scale} nb {nb}"));
                }
            }
        }
        // Crafted: zeros, −0, ties (amax 127 → id 1, so k + 0.5 is a tie), ±amax ties,
        // NaN, ±inf, subnormals, huge values.
        let mut crafted: Vec<Vec<f32>> = vec![vec![0.0; 32], vec![-0.0; 32]];
        let mut ties: Vec<f32> = (0..32).map(|i| i as f32 - 16.5).collect();
        ties[0] = 127.0;
        crafted.push(ties);
        let mut pm = vec![0.5f32; 32];
        pm[3] = -2.0;
        pm[7] = 2.0;
        crafted.push(pm);
        let payload_nans = [f32::from_bits(0x7fc1_2345), f32::from_bits(0xff80_0001), f32::from_bits(0x7fff_ffff)];
        for special in
            [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e-45, -3e38, f32::MAX].into_iter().chain(payload_nans)
        {
            let mut v: Vec<f32> = (0..32).map(|_| gauss(&mut rng)).collect();
            v[rng.gen_range(0..32)] = special;
            crafted.push(v);
        }
        crafted.push(vec![f32::NAN; 32]);
        crafted.push((0..32).map(|i| i as f32 * 1e-45).collect());
        for (k, x) in crafted.iter().enumerate() {
            check_quantizers(x, &format!("crafted {k}"));
            // The same 32 values placed in a block of 256 (for Q8_K), at each eighth.
            for p in 0..8 {
                let mut wide: Vec<f32> = (0..256).map(|_| gauss(&mut rng) * 0.01).collect();
                wide[32 * p..32 * p + 32].copy_from_slice(x);
                check_quantizers(&wide, &format!("crafted {k} at {p}"));
            }
        }
        // Q8_K: ±max ties (the first one sets the sign of d), NaN-only, −0 only.
        let mut t = vec![0.25f32; 256];
        t[40] = -3.0;
        t[200] = 3.0;
        check_quantizers(&t, "q8_K -max first");
        t[10] = 3.0;
        check_quantizers(&t, "q8_K +max first");
        check_quantizers(&[f32::NAN; 256], "all NaN");
        check_quantizers(&[-0.0; 256], "all -0");
    }

    /// End to end: `matmul` on this CPU (NEON kernels and quantizers picked from the
    /// registry, any batch) gives the bits of the scalar kernel and scalar quantizer run
    /// row by row (the F32/F16 twins for the float types).
    #[test]
    fn matmul_is_bit_identical_to_scalar_rows() {
        let mut rng = StdRng::seed_from_u64(18);
        let pool = crate::Pool::new(2);
        let names = ["f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"];
        for name in names {
            let t = ggml_quants::lookup_name(name).unwrap();
            let scalar = kernels_of(t.id).iter().find(|k| k.backend == "scalar").unwrap();
            let act = ggml_quants::lookup_id(scalar.vec_dot_type).unwrap();
            let aq = crate::registry::act_quantizers_of(act.id).iter().find(|a| a.backend == "scalar").unwrap();
            let twin: Dot = match name {
                "f32" => f32_f32_twin,
                "f16" => f16_f16_twin,
                _ => scalar.vec_dot,
            };
            let (rows, cols) = (7, 512);
            let wf: Vec<f32> = (0..rows * cols).map(|_| gauss(&mut rng)).collect();
            let wq = t.quantize_to_vec(&wf, cols, None).unwrap();
            let m = crate::Matrix::new(t.id, &wq, rows, cols).unwrap();
            let row_bytes = wq.len() / rows;
            for n in [1usize, 3, 8, 9] {
                let x: Vec<f32> = (0..n * cols).map(|_| gauss(&mut rng) * 2.0).collect();
                let mut y = vec![0f32; n * rows];
                crate::matmul(&pool, &m, &x, n, &mut y).unwrap();
                for tok in 0..n {
                    let mut xq = vec![0u8; act.row_size(cols).unwrap()];
                    (aq.quantize)(&x[tok * cols..(tok + 1) * cols], &mut xq);
                    for r in 0..rows {
                        let want = twin(cols, &wq[r * row_bytes..(r + 1) * row_bytes], &xq);
                        let got = y[tok * rows + r];
                        assert_eq!(got.to_bits(), want.to_bits(), "{name} n={n} token {tok} row {r}: {got} vs {want}");
                    }
                }
            }
        }
    }

    #[test]
    fn registry_selects_neon() {
        for name in ["f32", "f16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"] {
            let id = ggml_quants::lookup_name(name).unwrap().id;
            assert!(kernels_of(id).iter().any(|k| k.backend == "neon"), "{name}");
            assert_eq!(kernel_for(id).unwrap().backend, "neon", "{name}");
        }
        for name in ["q8_0", "q8_1", "q8_K"] {
            let id = ggml_quants::lookup_name(name).unwrap().id;
            assert_eq!(act_quantizer_for(id).unwrap().backend, "neon", "{name}");
        }
    }
}
