//! Tile kernels for IQ4_NL and MXFP4 (× Q8_0) and IQ4_XS (× Q8_K) on AVX2 and on AVX-512
//! VNNI (256-bit `vpdpbusd` via AVX512VL), in the float arithmetic llama.cpp's CPU backend
//! uses for the product on an AVX2 / AVX-512 machine (`vec_dot`, the repacked 8×8 kernels,
//! tinyBLAS or the tiled matmul: see [`crate::scalar::iq4`], whose functions are the scalar
//! twins). One body of kernels serves both ISAs: they differ only in how 4 codes times 4
//! activations become a 32-bit lane ([`Mac`]), and each ISA compiles the body with its
//! own features (`run_avx2`, `run_vnni`).
//!
//! - AVX2: codes looked up (`vpshufb`) as signed `kvalue`s and multiplied as ggml's AVX2
//!   build does (`maddubs(|q|, sign(x, q))`, `madd` with ones).
//! - AVX-512 VNNI: codes looked up as `kvalue + 128` (unsigned) and dotted with the signed
//!   activations by `vpdpbusd`; `128·Σx` per 4-byte lane, computed once per tile for every
//!   activation block, is the accumulator's initial value (negated).
//!
//! Either way each lane is the exact `Σ kvalue·x` of its 4 elements — the lanes of ggml's
//! `maddubs`/`madd` sums.
//!
//! The paths whose float arithmetic works on whole-block sums (the repacked 8×8 kernels of
//! IQ4_NL and MXFP4, IQ4_XS's tiled matmul) run 8 weight rows at once with one 32-bit lane
//! per row, as llama.cpp's repacked kernels do: the 8 rows' codes are transposed on the
//! fly (or repacked at load time), 4 activations are broadcast per multiply, and no
//! horizontal sum is needed. The `vec_dot` and tinyBLAS paths keep 8 lanes per row and run
//! one row at a time.
//!
//! Products agree bit for bit with the scalar twins for any input, and with ggml for the
//! activations its quantizers produce (`−127..=127`; ggml's sign trick would differ on a
//! `−128`).

use core::arch::x86_64::*;

use super::has_avx2;
use super::k16;
use super::tiles::{
    check_tile, dot_via_tile, f16_at, hsum_float_8 as hsum_f8, hsum_i32_8 as hsum_i8, load256, prefetch_ahead,
    row_offsets, store_n,
};
use super::vnni::has_vnni;
use crate::registry::Tile;
use crate::scalar::act::{Q8_0_BYTES, Q8_K_BYTES};
use crate::scalar::iq4::{self as s, Path, IQ4_NL_BYTES, IQ4_XS_BYTES, MXFP4_BYTES};
use ggml_quants::types::iq_common::e8m0_to_fp32_half;
use ggml_quants::types::iq_tables::{KVALUES_FP4, KVALUES_IQ4NL};

/// How an ISA multiplies 4 codes by 4 activations into a 32-bit lane (the one part of these
/// kernels the ISAs do differently), and its entry into the kernels ([`Mac::run`]).
trait Mac {
    /// Backend name.
    const NAME: &'static str;
    /// Whether the tiled IQ4_XS path runs [`super::k16`]'s 16-token engine.
    const WIDE: bool;
    /// Whether codes are biased (`kvalue + 128`) and each dot starts at the activations'
    /// offset `−128·Σx` ([`prep`] computes them).
    const OFFSETS: bool;
    /// Whether the CPU (and [`crate::cpu`]'s cap) allows the kernels.
    fn available() -> bool;
    /// The codebook as the kernels look it up, in both 128-bit halves.
    ///
    /// # Safety
    /// The ISA's features present.
    unsafe fn lut(kv: &[i8; 16]) -> __m256i;
    /// `acc + Σ q·x` over each 4-byte lane (`q` looked up in [`Mac::lut`], `x` signed).
    ///
    /// # Safety
    /// The ISA's features present.
    unsafe fn dot(acc: __m256i, q: __m256i, x: __m256i) -> __m256i;
    /// `ls · (acc + Σ q·x)` over each 4-byte lane (the sub-block scale `ls` of IQ4_XS).
    ///
    /// # Safety
    /// The ISA's features present.
    #[inline(always)]
    unsafe fn dot_scaled(acc: __m256i, q: __m256i, x: __m256i, ls: i32) -> __m256i {
        _mm256_mullo_epi32(Self::dot(acc, q, x), _mm256_set1_epi32(ls))
    }
    /// `−128·Σx` per 4-byte lane of the 32 activation bytes at `p` (when [`Mac::OFFSETS`]).
    ///
    /// # Safety
    /// The ISA's features present; 32 readable bytes at `p`.
    unsafe fn neg_offset(p: *const u8) -> __m256i;
    /// The 32 codes of one block (16 bytes at `p`: low nibbles elements 0..16, high
    /// nibbles 16..32) looked up in `lut`.
    ///
    /// # Safety
    /// The ISA's features present; 16 readable bytes at `p`.
    #[inline(always)]
    unsafe fn decode32(p: *const u8, lut: __m256i) -> __m256i {
        let v = _mm_loadu_si128(p as *const __m128i);
        let m = _mm_set1_epi8(0xF);
        let codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(v), m), _mm_and_si128(v, m));
        _mm256_shuffle_epi8(lut, codes)
    }
    // The kernels below compiled with the ISA's features (`isa_entries!`), each a
    // function of its own as the one-ISA kernels were.
    //
    // Safety of each: [`Mac::available`]; every row, activation row (`a.nb` blocks) and
    // output it touches in bounds, as [`check_tile`] verifies.

    /// [`prep`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn prep(
        x: *const u8,
        x_stride: usize,
        tokens: usize,
        nb: usize,
        xb: usize,
        xq: usize,
        groups: usize,
        f16: bool,
        p: &mut Prep,
    );
    /// [`b32_imp`] with the codebook `kv`.
    unsafe fn b32_imp<const T: usize, const MX: bool, const P: u8>(a: &Args<'_>, kv: &[i8; 16], t0: usize);
    /// [`b32_rep8`] with the codebook `kv`.
    unsafe fn b32_rep8<const T: usize, const MX: bool>(a: &Args<'_>, kv: &[i8; 16], t0: usize, r0: usize, nr: usize);
    /// [`xs_tiled8`] with the codebook `kv`.
    unsafe fn xs_tiled8<const T: usize>(a: &Args<'_>, kv: &[i8; 16], t0: usize, r0: usize, nr: usize);
    /// [`xs_imp`] with the codebook `kv`.
    unsafe fn xs_imp<const T: usize>(a: &Args<'_>, kv: &[i8; 16], t0: usize);
    /// [`b32x8_imp`] with the codebook `kv`.
    unsafe fn b32x8_imp<const T: usize, const MX: bool>(a: &Args<'_>, kv: &[i8; 16], t0: usize);
}

/// A [`Mac`] impl's kernel entries: the generic bodies compiled with `$features`.
macro_rules! isa_entries {
    ($m:ty, $features:literal) => {
        #[target_feature(enable = $features)]
        unsafe fn prep(
            x: *const u8,
            x_stride: usize,
            tokens: usize,
            nb: usize,
            xb: usize,
            xq: usize,
            groups: usize,
            f16: bool,
            p: &mut Prep,
        ) {
            prep::<$m>(x, x_stride, tokens, nb, xb, xq, groups, f16, p)
        }
        #[target_feature(enable = $features)]
        unsafe fn b32_imp<const T: usize, const MX: bool, const P: u8>(a: &Args<'_>, kv: &[i8; 16], t0: usize) {
            b32_imp::<$m, T, MX, P>(a, <$m>::lut(kv), t0)
        }
        #[target_feature(enable = $features)]
        unsafe fn b32_rep8<const T: usize, const MX: bool>(
            a: &Args<'_>,
            kv: &[i8; 16],
            t0: usize,
            r0: usize,
            nr: usize,
        ) {
            b32_rep8::<$m, T, MX>(a, <$m>::lut(kv), t0, r0, nr)
        }
        #[target_feature(enable = $features)]
        unsafe fn xs_tiled8<const T: usize>(a: &Args<'_>, kv: &[i8; 16], t0: usize, r0: usize, nr: usize) {
            xs_tiled8::<$m, T>(a, <$m>::lut(kv), t0, r0, nr)
        }
        #[target_feature(enable = $features)]
        unsafe fn xs_imp<const T: usize>(a: &Args<'_>, kv: &[i8; 16], t0: usize) {
            xs_imp::<$m, T>(a, <$m>::lut(kv), t0)
        }
        #[target_feature(enable = $features)]
        unsafe fn b32x8_imp<const T: usize, const MX: bool>(a: &Args<'_>, kv: &[i8; 16], t0: usize) {
            b32x8_imp::<$m, T, MX>(a, <$m>::lut(kv), t0)
        }
    };
}

/// AVX-512 VNNI: biased codes (`kvalue + 128`, unsigned) `vpdpbusd`-ed with the signed
/// activations, each lane starting at `−128·Σx`.
struct Vnni;

impl Mac for Vnni {
    const NAME: &'static str = "avx512vnni";
    const WIDE: bool = true;
    const OFFSETS: bool = true;
    fn available() -> bool {
        has_vnni()
    }
    #[inline(always)]
    unsafe fn lut(kv: &[i8; 16]) -> __m256i {
        let b: [u8; 16] = core::array::from_fn(|i| (kv[i] as i32 + 128) as u8);
        _mm256_broadcastsi128_si256(_mm_loadu_si128(b.as_ptr() as *const __m128i))
    }
    #[inline(always)]
    unsafe fn dot(acc: __m256i, q: __m256i, x: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, q, x)
    }
    #[inline(always)]
    unsafe fn neg_offset(p: *const u8) -> __m256i {
        let o = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(-128), load256(p));
        _mm256_sub_epi32(_mm256_setzero_si256(), o)
    }
    #[inline(always)]
    unsafe fn decode32(p: *const u8, lut: __m256i) -> __m256i {
        // Both halves at once: one variable shift (AVX-512BW/VL) puts the high nibbles in
        // the upper 128 bits.
        let both = _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i));
        let shifts = _mm256_set_epi16(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0);
        _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_set1_epi8(0xF), _mm256_srlv_epi16(both, shifts)))
    }
    isa_entries!(Vnni, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni");
}

/// AVX2: signed codes, ggml's `mul_sum_i8_pairs` (`maddubs(|q|, sign(x, q))`, then `madd`
/// with ones), exact since every pair sum is at most `2·127·127 < 2¹⁵`.
struct Avx2;

impl Mac for Avx2 {
    const NAME: &'static str = "avx2";
    const WIDE: bool = false;
    const OFFSETS: bool = false;
    fn available() -> bool {
        has_avx2()
    }
    #[inline(always)]
    unsafe fn lut(kv: &[i8; 16]) -> __m256i {
        _mm256_broadcastsi128_si256(_mm_loadu_si128(kv.as_ptr() as *const __m128i))
    }
    #[inline(always)]
    unsafe fn dot(acc: __m256i, q: __m256i, x: __m256i) -> __m256i {
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))
    }
    /// As ggml's AVX2 `vec_dot_iq4_xs_q8_K`: the 16-bit pair sums times the scale by one
    /// `madd` (no accumulator: the AVX2 kernels have no offsets).
    #[inline(always)]
    unsafe fn dot_scaled(_acc: __m256i, q: __m256i, x: __m256i, ls: i32) -> __m256i {
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
        _mm256_madd_epi16(p, _mm256_set1_epi16(ls as i16))
    }
    #[inline(always)]
    unsafe fn neg_offset(_p: *const u8) -> __m256i {
        _mm256_setzero_si256()
    }
    isa_entries!(Avx2, "avx2,fma,f16c");
}

/// The lane offset `i` of the tile's activations (zero where the ISA needs none).
#[inline(always)]
unsafe fn off<M: Mac>(p: &Prep, i: usize) -> __m256i {
    if M::OFFSETS {
        *p.off.get_unchecked(i)
    } else {
        _mm256_setzero_si256()
    }
}

/// The offset `i` summed over its lanes (zero where the ISA needs none).
#[inline(always)]
unsafe fn tot<M: Mac>(p: &Prep, i: usize) -> i32 {
    if M::OFFSETS {
        *p.tot.get_unchecked(i)
    } else {
        0
    }
}
/// Per-tile activation set-up: scales and lane offsets.
#[derive(Default)]
struct Prep {
    /// Activation scales, block-major (`d[b·tokens + t]`).
    d: Vec<f32>,
    /// Lane offsets, token-major (`off[(t·nb + b)·groups + g]`, `groups` 32-element
    /// groups per activation block).
    off: Vec<__m256i>,
    /// The same offsets summed over each group's lanes (`−128·Σx` of 32 activations).
    tot: Vec<i32>,
}

thread_local! {
    static PREP: std::cell::Cell<Prep> = std::cell::Cell::new(Prep::default());
}

/// Fills `p` for `tokens` activation rows of `nb` blocks of `xb` bytes, the scale at byte 0
/// (fp16 when `f16`, else f32) and `groups` 32-byte groups of quants from byte `xq`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn prep<M: Mac>(
    x: *const u8,
    x_stride: usize,
    tokens: usize,
    nb: usize,
    xb: usize,
    xq: usize,
    groups: usize,
    f16: bool,
    p: &mut Prep,
) {
    p.d.clear();
    p.off.clear();
    p.tot.clear();
    p.d.resize(nb * tokens, 0.0);
    if M::OFFSETS {
        p.off.reserve(tokens * nb * groups);
        p.tot.reserve(tokens * nb * groups);
    }
    for t in 0..tokens {
        for b in 0..nb {
            let blk = x.add(t * x_stride + b * xb);
            p.d[b * tokens + t] = if f16 { f16_at(blk) } else { (blk as *const f32).read_unaligned() };
            if M::OFFSETS {
                for g in 0..groups {
                    let o = M::neg_offset(blk.add(xq + 32 * g));
                    p.off.push(o);
                    p.tot.push(hsum_i8(o));
                }
            }
        }
    }
}

const P_VECDOT: u8 = 0;
const P_REPACK: u8 = 1;
const P_TINY: u8 = 2;
const P_TILED: u8 = 3;

fn path_code(p: Path) -> u8 {
    match p {
        Path::VecDot => P_VECDOT,
        Path::Repack => P_REPACK,
        Path::TinyBlas => P_TINY,
        Path::Tiled => P_TILED,
    }
}

/// Arguments shared by the inner kernels.
struct Args<'a> {
    w: *const u8,
    w_stride: usize,
    rows: usize,
    nb: usize,
    x: *const u8,
    x_stride: usize,
    tokens: usize,
    p: &'a Prep,
    y: *mut f32,
    y_stride: usize,
}

/// IQ4_NL (`MX == false`) or MXFP4 rows against tokens `t0..t0+T`, along path `P`
/// (`vec_dot` or tinyBLAS: 8 lanes per row; the repacked path is [`b32_rep8`]).
#[inline(always)]
unsafe fn b32_imp<M: Mac, const T: usize, const MX: bool, const P: u8>(a: &Args<'_>, lut: __m256i, t0: usize) {
    let (wbytes, qs) = if MX { (MXFP4_BYTES, 1) } else { (IQ4_NL_BYTES, 2) };
    let nb = a.nb;
    // vec_dot pairs blocks (two accumulators); a last odd block is a scalar tail.
    let paired = if P == P_VECDOT { nb - nb % 2 } else { nb };
    for r in 0..a.rows {
        let wr = a.w.add(r * a.w_stride);
        let mut acc = [_mm256_setzero_ps(); T];
        let mut acc2 = [_mm256_setzero_ps(); T];
        let mut tail = [(0f32, 0i32); T];
        for b in 0..nb {
            let wb = wr.add(b * wbytes);
            let dw = if MX { e8m0_to_fp32_half(*wb) } else { f16_at(wb) };
            let q = M::decode32(wb.add(qs), lut);
            for t in 0..T {
                let tt = t0 + t;
                let xq = load256(a.x.add(tt * a.x_stride + b * Q8_0_BYTES + 2));
                let dot = M::dot(off::<M>(a.p, tt * nb + b), q, xq);
                let d = dw * *a.p.d.get_unchecked(b * a.tokens + tt);
                if b >= paired {
                    tail[t] = (d, hsum_i8(dot));
                } else if P == P_VECDOT && b % 2 == 1 {
                    acc2[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(dot), acc2[t]);
                } else {
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(dot), acc[t]);
                }
            }
        }
        for t in 0..T {
            let v = match P {
                P_TINY => hsum_f8(acc[t]),
                _ => {
                    let s = hsum_f8(_mm256_add_ps(acc[t], acc2[t]));
                    if paired < nb {
                        // vec_dot's scalar tail `sumf += d * sumi` (GCC does not fuse it).
                        s + tail[t].0 * tail[t].1 as f32
                    } else {
                        s
                    }
                }
            };
            *a.y.add((t0 + t) * a.y_stride + r) = v;
        }
    }
}

/// The 32 codes of one block in each of 8 rows (16 code bytes at `p + i·stride` for row
/// `i`), looked up in `lut`, transposed to one 32-bit lane per row: `u[g]` lane `i` holds
/// elements `4g..4g+4` of row `i` (low nibbles of code bytes `4g..4g+4` for `g < 4`, high
/// nibbles of bytes `4(g−4)..` for `g ≥ 4`).
#[inline(always)]
unsafe fn decode_t8(p: *const u8, ro: &[usize; 8], lut: __m256i) -> [__m256i; 8] {
    // Rows i and i + 4 in the two halves, then a 4 × 4 transpose of 32-bit words per half.
    let mut y = [_mm256_setzero_si256(); 4];
    for (i, yi) in y.iter_mut().enumerate() {
        let lo = _mm_loadu_si128(p.add(ro[i]) as *const __m128i);
        let hi = _mm_loadu_si128(p.add(ro[i + 4]) as *const __m128i);
        *yi = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi);
    }
    let a0 = _mm256_unpacklo_epi32(y[0], y[1]);
    let a1 = _mm256_unpackhi_epi32(y[0], y[1]);
    let a2 = _mm256_unpacklo_epi32(y[2], y[3]);
    let a3 = _mm256_unpackhi_epi32(y[2], y[3]);
    let r = [
        _mm256_unpacklo_epi64(a0, a2),
        _mm256_unpackhi_epi64(a0, a2),
        _mm256_unpacklo_epi64(a1, a3),
        _mm256_unpackhi_epi64(a1, a3),
    ];
    let m = _mm256_set1_epi8(0xF);
    let mut u = [_mm256_setzero_si256(); 8];
    for k in 0..4 {
        u[k] = _mm256_shuffle_epi8(lut, _mm256_and_si256(r[k], m));
        u[k + 4] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16::<4>(r[k]), m));
    }
    u
}

/// The weight scales of rows `0..8` (`stride` bytes apart) at `p` (fp16 or E8M0) as one vector.
#[inline(always)]
unsafe fn scales8<const MX: bool>(p: *const u8, ro: &[usize; 8]) -> __m256 {
    if MX {
        let mut e = [0f32; 8];
        for (i, ei) in e.iter_mut().enumerate() {
            *ei = e8m0_to_fp32_half(*p.add(ro[i]));
        }
        _mm256_loadu_ps(e.as_ptr())
    } else {
        f16x8(p, ro)
    }
}

/// The fp16 at `p + i·stride`, `i < 8`, as one vector.
#[inline(always)]
unsafe fn f16x8(p: *const u8, ro: &[usize; 8]) -> __m256 {
    let mut h = [0u16; 8];
    for (i, hi) in h.iter_mut().enumerate() {
        *hi = (p.add(ro[i]) as *const u16).read_unaligned();
    }
    _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i))
}

/// The repacked path for 8 rows at once (rows `r0..r0+8`), as llama.cpp's 8×8 kernels:
/// one 32-bit lane per row, so each multiply (weights of 8 rows, 4 activations
/// broadcast) adds to every row's block dot and no horizontal sum is needed; per block
/// `acc = fma(Σ, d_w·d_x, acc)` lane by lane, the scalar twin's arithmetic.
#[inline(always)]
unsafe fn b32_rep8<M: Mac, const T: usize, const MX: bool>(
    a: &Args<'_>,
    lut: __m256i,
    t0: usize,
    r0: usize,
    nr: usize,
) {
    let (wbytes, qs) = if MX { (MXFP4_BYTES, 1) } else { (IQ4_NL_BYTES, 2) };
    let nb = a.nb;
    let w0 = a.w.add(r0 * a.w_stride);
    let ro = row_offsets(nr, a.w_stride);
    // The next 8 rows (contiguous after these) are prefetched a few lines per block, so
    // that their weights stream in while these are computed (`wrapping_add`: past the last
    // rows the address is only prefetched, never read).
    let next = w0.wrapping_add(8 * a.w_stride);
    let pf_per_block = (8 * a.w_stride).div_ceil(64).div_ceil(nb);
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        if t0 == 0 {
            for l in 0..pf_per_block {
                _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add((b * pf_per_block + l) * 64) as *const i8);
            }
        }
        let wb = w0.add(b * wbytes);
        let u = decode_t8(wb.add(qs), &ro, lut);
        let dw = scales8::<MX>(wb, &ro);
        for (t, acc) in acc.iter_mut().enumerate() {
            let tt = t0 + t;
            let xq = a.x.add(tt * a.x_stride + b * Q8_0_BYTES + 2) as *const i32;
            let mut dot = _mm256_set1_epi32(tot::<M>(a.p, tt * nb + b));
            for (g, ug) in u.iter().enumerate() {
                dot = M::dot(dot, *ug, _mm256_set1_epi32(xq.add(g).read_unaligned()));
            }
            let d = _mm256_mul_ps(dw, _mm256_set1_ps(*a.p.d.get_unchecked(b * a.tokens + tt)));
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, *acc);
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        store_n(a.y.add((t0 + t) * a.y_stride + r0), *acc, nr);
    }
}

/// The tiled IQ4_XS path for 8 rows at once (one lane per row, as [`b32_rep8`]): per
/// 256-block the exact `s1 = Σ ls·dot`, `r = s1·d_w`, `acc = fma(r, d_x, acc)`.
#[inline(always)]
unsafe fn xs_tiled8<M: Mac, const T: usize>(a: &Args<'_>, lut: __m256i, t0: usize, r0: usize, nr: usize) {
    let nb = a.nb;
    let w0 = a.w.add(r0 * a.w_stride);
    let ro = row_offsets(nr, a.w_stride);
    let mut acc = [_mm256_setzero_ps(); T];
    let mut u = [[_mm256_setzero_si256(); 8]; 8];
    for b in 0..nb {
        let wb = w0.add(b * IQ4_XS_BYTES);
        // `ls[sb]`: the scale of sub-block `sb` in each of the 8 rows.
        let mut ls = [[0i32; 8]; 8];
        for (i, &o) in ro.iter().enumerate() {
            let sc = s::iq4_xs_scales(core::slice::from_raw_parts(wb.add(o), 8));
            for (row_scales, &l) in ls.iter_mut().zip(&sc) {
                row_scales[i] = l;
            }
        }
        for (sb, usb) in u.iter_mut().enumerate() {
            *usb = decode_t8(wb.add(8 + 16 * sb), &ro, lut);
        }
        let dw = f16x8(wb, &ro);
        for (t, acc) in acc.iter_mut().enumerate() {
            let tt = t0 + t;
            let xq = a.x.add(tt * a.x_stride + b * Q8_K_BYTES + 4) as *const i32;
            let mut s1 = _mm256_setzero_si256();
            for (sb, usb) in u.iter().enumerate() {
                let mut dot = _mm256_set1_epi32(tot::<M>(a.p, (tt * nb + b) * 8 + sb));
                for (g, ug) in usb.iter().enumerate() {
                    dot = M::dot(dot, *ug, _mm256_set1_epi32(xq.add(8 * sb + g).read_unaligned()));
                }
                let lsv = _mm256_loadu_si256(ls[sb].as_ptr() as *const __m256i);
                s1 = _mm256_add_epi32(s1, _mm256_mullo_epi32(dot, lsv));
            }
            let r = _mm256_mul_ps(_mm256_cvtepi32_ps(s1), dw);
            let dx = _mm256_set1_ps(*a.p.d.get_unchecked(b * a.tokens + tt));
            *acc = _mm256_fmadd_ps(r, dx, *acc);
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        store_n(a.y.add((t0 + t) * a.y_stride + r0), *acc, nr);
    }
}

/// Runs `rep8::<T>` over the rows in groups of up to 8 and the tokens in groups of up to 8.
macro_rules! by_rows8 {
    ($t:expr, $args:expr, $lut:expr, $rep8:ident, [$($g8:tt)*]) => {{
        let mut r0 = 0;
        while r0 < $t.rows {
            let nr = ($t.rows - r0).min(8);
            let mut t0 = 0;
            while t0 < $t.tokens {
                match $t.tokens - t0 {
                    1 => M::$rep8::<1, $($g8)*>(&$args, $lut, t0, r0, nr),
                    2 => M::$rep8::<2, $($g8)*>(&$args, $lut, t0, r0, nr),
                    3 => M::$rep8::<3, $($g8)*>(&$args, $lut, t0, r0, nr),
                    4 => M::$rep8::<4, $($g8)*>(&$args, $lut, t0, r0, nr),
                    5 => M::$rep8::<5, $($g8)*>(&$args, $lut, t0, r0, nr),
                    6 => M::$rep8::<6, $($g8)*>(&$args, $lut, t0, r0, nr),
                    7 => M::$rep8::<7, $($g8)*>(&$args, $lut, t0, r0, nr),
                    _ => M::$rep8::<8, $($g8)*>(&$args, $lut, t0, r0, nr),
                }
                t0 += 8;
            }
            r0 += 8;
        }
    }};
}

/// IQ4_XS rows against tokens `t0..t0+T` in vec_dot's arithmetic (8 lanes per row; the
/// tiled path is [`xs_tiled8`]).
#[inline(always)]
unsafe fn xs_imp<M: Mac, const T: usize>(a: &Args<'_>, lut: __m256i, t0: usize) {
    let nb = a.nb;
    for r in 0..a.rows {
        let wr = a.w.add(r * a.w_stride);
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..nb {
            let wb = wr.add(b * IQ4_XS_BYTES);
            prefetch_ahead::<IQ4_XS_BYTES, 4>(wb, XS_ROWS_AHEAD * a.w_stride);
            let dw = f16_at(wb);
            let ls = s::iq4_xs_scales(core::slice::from_raw_parts(wb, 8));
            let mut q = [_mm256_setzero_si256(); 8];
            for (sb, qv) in q.iter_mut().enumerate() {
                *qv = M::decode32(wb.add(8 + 16 * sb), lut);
            }
            for (t, acc) in acc.iter_mut().enumerate() {
                let tt = t0 + t;
                let xb = a.x.add(tt * a.x_stride + b * Q8_K_BYTES);
                let mut sumi = _mm256_setzero_si256();
                for sb in 0..8 {
                    let o = off::<M>(a.p, (tt * nb + b) * 8 + sb);
                    sumi = _mm256_add_epi32(sumi, M::dot_scaled(o, q[sb], load256(xb.add(4 + 32 * sb)), ls[sb]));
                }
                let dx = *a.p.d.get_unchecked(b * a.tokens + tt);
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx), _mm256_cvtepi32_ps(sumi), *acc);
            }
        }
        for (t, acc) in acc.iter().enumerate() {
            *a.y.add((t0 + t) * a.y_stride + r) = hsum_f8(*acc);
        }
    }
}

/// Rows ahead of its reads that [`xs_one512`] and [`xs_imp`] prefetch each row's weights.
const XS_ROWS_AHEAD: usize = 6;

/// One IQ4_XS block of one row against one token's Q8_K block, on AVX-512 VNNI: the 8
/// sub-blocks' lane sums `ls·Σ kvalue·x`, even sub-blocks in lanes 0–7, odd in 8–15.
/// Two sub-blocks per 512-bit register (codes split into nibbles 64 bytes at a time and
/// put in element order by one `vpermt2q`), offsets from `off` (the token's
/// `−128·Σx` per lane, 8 sub-blocks), the scales unpacked in a vector. The sums are
/// kept as floats: every lane sum is an integer of magnitude at most
/// `8·32·4·127·128 < 2²⁴`, so each step is exact and the sums are `xs_imp`'s integers.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI; a whole block at `wb`, the token's 8 sub-block offsets at `off`.
#[inline(always)]
unsafe fn xs_block512(wb: *const u8, xs: &[__m512i; 4], off: *const __m256i, lut: __m512i) -> __m512 {
    let sh = _mm256_set1_epi32((wb.add(2) as *const u16).read_unaligned() as i32);
    let sl = _mm256_set1_epi32((wb.add(4) as *const u32).read_unaligned() as i32);
    let lo =
        _mm256_and_si256(_mm256_srlv_epi32(sl, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)), _mm256_set1_epi32(0xF));
    let hi =
        _mm256_and_si256(_mm256_srlv_epi32(sh, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)), _mm256_set1_epi32(3));
    let ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32::<4>(hi)), _mm256_set1_epi32(32));
    let ls = _mm512_castps256_ps512(_mm256_cvtepi32_ps(ls));
    let m4 = _mm512_set1_epi8(0xF);
    let z0 = _mm512_loadu_si512(wb.add(8) as *const __m512i);
    let z1 = _mm512_loadu_si512(wb.add(72) as *const __m512i);
    let (l0, h0) = (_mm512_and_si512(z0, m4), _mm512_and_si512(_mm512_srli_epi16::<4>(z0), m4));
    let (l1, h1) = (_mm512_and_si512(z1, m4), _mm512_and_si512(_mm512_srli_epi16::<4>(z1), m4));
    // [lo(a), hi(a), lo(b), hi(b)] for sub-blocks (a, b) = (0, 1), (2, 3) of each half
    let ia = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    let ib = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    let q = [
        _mm512_permutex2var_epi64(l0, ia, h0),
        _mm512_permutex2var_epi64(l0, ib, h0),
        _mm512_permutex2var_epi64(l1, ia, h1),
        _mm512_permutex2var_epi64(l1, ib, h1),
    ];
    let mut s = _mm512_setzero_ps();
    for k in 0..4 {
        let o = _mm512_loadu_si512(off.add(2 * k) as *const __m512i);
        let dot = _mm512_dpbusd_epi32(o, _mm512_shuffle_epi8(lut, q[k]), xs[k]);
        let a = 2 * k as i32;
        let sc = _mm512_permutexvar_ps(
            _mm512_set_epi32(a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a, a, a, a, a, a, a, a),
            ls,
        );
        s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, s);
    }
    s
}

/// IQ4_XS rows against one token in `vec_dot`'s arithmetic ([`xs_imp`] with `T = 1`, the
/// same bits) on AVX-512 VNNI: two rows per 512-bit accumulator (row `r` in lanes 0–7,
/// `r + 1` in 8–15), each row's weights prefetched [`XS_ROWS_AHEAD`] rows ahead; the
/// activations' offsets from `a.p` ([`prep`] for the one token).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI; `a` as for [`xs_imp`], with one token.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn xs_one512(a: &Args<'_>, kv: &[i8; 16]) {
    let lut = _mm512_broadcast_i32x4(_mm256_castsi256_si128(Vnni::lut(kv)));
    let nb = a.nb;
    let mut r = 0;
    while r < a.rows {
        // an odd last row runs as its own pair (its second half is not stored)
        let r1 = if r + 1 < a.rows { r + 1 } else { r };
        let (w0, w1) = (a.w.add(r * a.w_stride), a.w.add(r1 * a.w_stride));
        let mut acc = _mm512_setzero_ps();
        for b in 0..nb {
            let xb = a.x.add(b * Q8_K_BYTES + 4);
            let xs = [
                _mm512_loadu_si512(xb as *const __m512i),
                _mm512_loadu_si512(xb.add(64) as *const __m512i),
                _mm512_loadu_si512(xb.add(128) as *const __m512i),
                _mm512_loadu_si512(xb.add(192) as *const __m512i),
            ];
            let off = a.p.off.as_ptr().add(b * 8);
            let (b0, b1) = (w0.add(b * IQ4_XS_BYTES), w1.add(b * IQ4_XS_BYTES));
            prefetch_ahead::<IQ4_XS_BYTES, 4>(b0, XS_ROWS_AHEAD * a.w_stride);
            prefetch_ahead::<IQ4_XS_BYTES, 4>(b1, XS_ROWS_AHEAD * a.w_stride);
            let (s0, s1) = (xs_block512(b0, &xs, off, lut), xs_block512(b1, &xs, off, lut));
            // [row 0's 8 lane sums | row 1's]: even + odd sub-blocks (exact)
            let sum = _mm512_add_ps(
                _mm512_shuffle_f32x4::<0b01_00_01_00>(s0, s1),
                _mm512_shuffle_f32x4::<0b11_10_11_10>(s0, s1),
            );
            let dx = *a.p.d.get_unchecked(b);
            let d = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(f16_at(b0) * dx), _mm512_set1_ps(f16_at(b1) * dx));
            acc = _mm512_fmadd_ps(d, sum, acc);
        }
        *a.y.add(r) = hsum_f8(_mm512_castps512_ps256(acc));
        if r1 != r {
            *a.y.add(r1) = hsum_f8(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc))));
        }
        r += 2;
    }
}

/// Runs `imp::<T>` over the tile's tokens in groups of up to 4.
macro_rules! by_tokens {
    ($t:expr, $args:expr, $lut:expr, $imp:ident, $($g:tt)*) => {{
        let mut t0 = 0;
        while t0 < $t.tokens {
            match $t.tokens - t0 {
                1 => M::$imp::<1, $($g)*>(&$args, $lut, t0),
                2 => M::$imp::<2, $($g)*>(&$args, $lut, t0),
                3 => M::$imp::<3, $($g)*>(&$args, $lut, t0),
                _ => M::$imp::<4, $($g)*>(&$args, $lut, t0),
            }
            t0 += 4;
        }
    }};
}

/// Runs `imp::<T>` over the tile's tokens in groups of up to 8.
macro_rules! by_tokens8 {
    ($t:expr, $args:expr, $lut:expr, $imp:ident, $($g:tt)*) => {{
        let mut t0 = 0;
        while t0 < $t.tokens {
            match $t.tokens - t0 {
                1 => M::$imp::<1, $($g)*>(&$args, $lut, t0),
                2 => M::$imp::<2, $($g)*>(&$args, $lut, t0),
                3 => M::$imp::<3, $($g)*>(&$args, $lut, t0),
                4 => M::$imp::<4, $($g)*>(&$args, $lut, t0),
                5 => M::$imp::<5, $($g)*>(&$args, $lut, t0),
                6 => M::$imp::<6, $($g)*>(&$args, $lut, t0),
                7 => M::$imp::<7, $($g)*>(&$args, $lut, t0),
                _ => M::$imp::<8, $($g)*>(&$args, $lut, t0),
            }
            t0 += 8;
        }
    }};
}

/// What one tile runs: a 32-element format (IQ4_NL, or MXFP4 when `mx`) along a path
/// ([`path_code`]), IQ4_XS (`vec_dot` or tiled), or repacked 8-row groups of a 32-element
/// format.
#[derive(Clone, Copy)]
enum Job {
    B32 {
        mx: bool,
        path: u8,
    },
    Xs {
        tiled: bool,
    },
    B32x8 {
        mx: bool,
    },
    /// Q4_0 (IQ4_NL's block with the codebook `q − 8`): repacked 8×8 arithmetic on GGUF
    /// rows (`repack`) or tinyBLAS / `vec_dot`'s (one accumulator).
    Q4 {
        repack: bool,
    },
    /// Q4_0 rows in the repacked layout.
    Q4x8,
}

/// One tile on ISA `M`: the activation set-up into `p`, then `job`'s kernel over rows and
/// tokens.
///
/// # Safety
/// As [`Mac`]'s kernels, for the whole tile.
unsafe fn run<M: Mac>(job: Job, t: &Tile<'_>, y: *mut f32, y_stride: usize, nb: usize, p: &mut Prep) {
    match job {
        Job::Xs { .. } => M::prep(t.x.as_ptr(), t.x_stride, t.tokens, nb, Q8_K_BYTES, 4, 8, false, p),
        _ => M::prep(t.x.as_ptr(), t.x_stride, t.tokens, nb, Q8_0_BYTES, 2, 1, true, p),
    }
    let args = Args {
        w: t.w.as_ptr(),
        w_stride: t.w_stride,
        rows: t.rows,
        nb,
        x: t.x.as_ptr(),
        x_stride: t.x_stride,
        tokens: t.tokens,
        p,
        y,
        y_stride,
    };
    let mx = matches!(job, Job::B32 { mx: true, .. } | Job::B32x8 { mx: true });
    let lut = match job {
        Job::Q4 { .. } | Job::Q4x8 => &s::KVALUES_Q4_0,
        _ if mx => &KVALUES_FP4,
        _ => &KVALUES_IQ4NL,
    };
    match job {
        Job::Q4 { repack: true } => by_rows8!(t, args, lut, b32_rep8, [false]),
        Job::Q4 { repack: false } => by_tokens!(t, args, lut, b32_imp, false, P_TINY),
        Job::Q4x8 if !M::WIDE && t.tokens == 1 => q4x8_one_avx2(&args, 0),
        Job::Q4x8 => by_tokens8!(t, args, lut, b32x8_imp, false),
        Job::B32 { mx: false, path: P_REPACK } => by_rows8!(t, args, lut, b32_rep8, [false]),
        Job::B32 { mx: true, path: P_REPACK } => by_rows8!(t, args, lut, b32_rep8, [true]),
        Job::B32 { mx: false, path: P_TINY } => by_tokens!(t, args, lut, b32_imp, false, P_TINY),
        Job::B32 { mx: true, path: P_TINY } => by_tokens!(t, args, lut, b32_imp, true, P_TINY),
        Job::B32 { mx: false, .. } => by_tokens!(t, args, lut, b32_imp, false, P_VECDOT),
        Job::B32 { mx: true, .. } => by_tokens!(t, args, lut, b32_imp, true, P_VECDOT),
        Job::Xs { tiled: true } => by_rows8!(t, args, lut, xs_tiled8, []),
        Job::Xs { tiled: false } if M::WIDE && t.tokens == 1 => xs_one512(&args, lut),
        Job::Xs { tiled: false } => by_tokens!(t, args, lut, xs_imp,),
        // AVX-512 VNNI: two 8-row groups per 512-bit vector.
        Job::B32x8 { mx } if M::WIDE => b32x8_wide(&args, lut, mx),
        Job::B32x8 { mx: false } => by_tokens8!(t, args, lut, b32x8_imp, false),
        Job::B32x8 { mx: true } => by_tokens8!(t, args, lut, b32x8_imp, true),
    }
}

/// Runs `f` with the thread's activation set-up buffers (kept between tiles).
fn with_prep(f: impl FnOnce(&mut Prep)) {
    let mut p = PREP.with(|c| c.take());
    f(&mut p);
    PREP.with(|c| c.set(p));
}

/// An IQ4_NL (`MX == false`) or MXFP4 tile on ISA `M` along the path llama.cpp takes.
fn b32_tile<M: Mac, const MX: bool>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let wbytes = if MX { MXFP4_BYTES } else { IQ4_NL_BYTES };
    let nb = check_tile(t, y, y_stride, M::available(), M::NAME, 32, wbytes, Q8_0_BYTES);
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let path = path_code(if MX { s::mxfp4_path(t) } else { s::iq4_nl_path(t) });
    // SAFETY: `check_tile` verified that every weight row, activation row and output the
    // kernels touch is in bounds and that the CPU has the ISA's features.
    with_prep(|p| unsafe { run::<M>(Job::B32 { mx: MX, path }, t, y.as_mut_ptr(), y_stride, nb, p) });
}

/// An IQ4_XS tile on ISA `M` along [`s::iq4_xs_path`].
fn xs_tile<M: Mac>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    xs_run::<M>(t, y, y_stride, true)
}

/// Tokens of a tile from which the tiled IQ4_XS path runs the 16-token engine.
const WIDE_FROM: usize = 8;

/// IQ4_XS as [`super::k16`]'s engine decodes it: codes `kvalue + 128` (the VNNI
/// [`Mac::lut`]) in element order, the eight 6-bit scales, `fp16(d)`.
struct XsWide;

impl k16::Biased for XsWide {
    const BYTES: usize = IQ4_XS_BYTES;
    const SUB: usize = 32;

    #[inline(always)]
    unsafe fn decode(b: *const u8, codes: *mut u8, sc: &mut [i32; 16]) -> f32 {
        let lut = Vnni::lut(&KVALUES_IQ4NL);
        let ls = s::iq4_xs_scales(core::slice::from_raw_parts(b, 8));
        for (sb, &l) in ls.iter().enumerate() {
            _mm256_storeu_si256(codes.add(32 * sb) as *mut __m256i, Vnni::decode32(b.add(8 + 16 * sb), lut));
            sc[sb] = l;
        }
        f16_at(b)
    }
}

/// The VNNI IQ4_XS tile with or without the 16-token engine ([`xs_run`]).
#[cfg(test)]
pub(super) fn xs_run_vnni(t: &Tile<'_>, y: &mut [f32], y_stride: usize, wide: bool) {
    xs_run::<Vnni>(t, y, y_stride, wide)
}

/// [`xs_tile`], with or without the 16-token engine for the tiled path (the tests
/// compare the two).
fn xs_run<M: Mac>(t: &Tile<'_>, y: &mut [f32], y_stride: usize, wide: bool) {
    let nb = check_tile(t, y, y_stride, M::available(), M::NAME, 256, IQ4_XS_BYTES, Q8_K_BYTES);
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let tiled = s::iq4_xs_path(t) == Path::Tiled;
    if tiled && wide && M::WIDE && t.tokens >= WIDE_FROM {
        let (w, x, yp) = (t.w.as_ptr(), t.x.as_ptr(), y.as_mut_ptr());
        // SAFETY: `check_tile` verified the bounds of every weight row, activation row and
        // output, and the CPU's features; `M::WIDE` only on AVX-512 VNNI.
        unsafe {
            k16::run::<k16::Bias128<XsWide>>(w, t.w_stride, t.rows, nb, x, t.x_stride, t.tokens, true, yp, y_stride)
        };
        return;
    }
    // SAFETY: as in `b32_tile`: bounds and features checked by `check_tile`.
    with_prep(|p| unsafe { run::<M>(Job::Xs { tiled }, t, y.as_mut_ptr(), y_stride, nb, p) });
}

// ---------------------------------------------------------------------------------------
// Load-time repacking (llama.cpp's `block_iq4_nlx8` / `block_mxfp4x8`: it repacks IQ4_NL and
// MXFP4 matrices whose row count is a multiple of 8 on AVX2 machines).
//
// Layout per 8-row group and 32-column block (the size of the 8 original blocks): the 8
// scales (fp16, or E8M0 bytes), then four 32-byte vectors; vector `k` holds, for row `i`,
// code bytes `4k..4k+4` at `4i..4i+4`. The low nibbles of vector `k` are then, in 32-bit
// lane `i`, row `i`'s elements `4k..4k+4` and the high nibbles its elements `16+4k..`: the
// transposed codes of [`decode_t8`] without the shuffling, and the same arithmetic.

/// llama.cpp repacks IQ4_NL and MXFP4 matrices whose row count is a multiple of 8.
fn repack_applies(rows: usize, cols: usize) -> bool {
    rows > 0 && rows.is_multiple_of(8) && cols.is_multiple_of(32)
}

/// GGUF rows of a 32-element block format (`wb` bytes per block, `sb` scale bytes) → the
/// 8-row group layout.
fn repack_b32(w: &[u8], rows: usize, cols: usize, wb: usize, sb: usize) -> Vec<u8> {
    let nb = cols / 32;
    let row = nb * wb;
    let mut out = vec![0u8; w.len()];
    for g in 0..rows / 8 {
        for b in 0..nb {
            let o = g * 8 * row + b * 8 * wb;
            for i in 0..8 {
                let src = &w[(8 * g + i) * row + b * wb..][..wb];
                out[o + sb * i..o + sb * (i + 1)].copy_from_slice(&src[..sb]);
                for k in 0..4 {
                    let d = o + 8 * sb + 32 * k + 4 * i;
                    out[d..d + 4].copy_from_slice(&src[sb + 4 * k..sb + 4 * k + 4]);
                }
            }
        }
    }
    out
}

/// IQ4_NL rows → 8-row groups.
pub fn repack_iq4_nl(w: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    repack_b32(w, rows, cols, IQ4_NL_BYTES, 2)
}

/// MXFP4 rows → 8-row groups.
pub fn repack_mxfp4(w: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    repack_b32(w, rows, cols, MXFP4_BYTES, 1)
}

/// `GGML_E8M0_TO_FP32_HALF` of 8 bytes at `p`, as [`e8m0_to_fp32_half`].
#[inline(always)]
unsafe fn e8m0_half_x8(p: *const u8) -> __m256 {
    let v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
    let big = _mm256_slli_epi32::<23>(_mm256_sub_epi32(v, _mm256_set1_epi32(1)));
    let small = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), v);
    let is_small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v);
    _mm256_castsi256_ps(_mm256_blendv_epi8(big, small, is_small))
}

/// Repacked groups `0..groups` against tokens `t0..t0+T` (the arithmetic of [`b32_rep8`]).
#[inline(always)]
unsafe fn b32x8_imp<M: Mac, const T: usize, const MX: bool>(a: &Args<'_>, lut: __m256i, t0: usize) {
    let (wbytes, sb) = if MX { (MXFP4_BYTES, 1) } else { (IQ4_NL_BYTES, 2) };
    let nb = a.nb;
    let m4 = _mm256_set1_epi8(0xF);
    for g in 0..a.rows / 8 {
        let gw = a.w.add(g * 8 * a.w_stride);
        let mut acc = [_mm256_setzero_ps(); T];
        // one token: the next group streams in to L2 a block per block
        let mut ahead = super::tiles::Ahead::new(gw.wrapping_add(8 * a.w_stride));
        for b in 0..nb {
            if T == 1 {
                ahead.advance(8 * wbytes);
            }
            let p = gw.add(b * 8 * wbytes);
            let dw = if MX { e8m0_half_x8(p) } else { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) };
            let mut u = [_mm256_setzero_si256(); 8];
            for k in 0..4 {
                let v = load256(p.add(8 * sb + 32 * k));
                u[k] = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
                u[k + 4] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4));
            }
            for (t, acc) in acc.iter_mut().enumerate() {
                let tt = t0 + t;
                let xq = a.x.add(tt * a.x_stride + b * Q8_0_BYTES + 2) as *const i32;
                let mut dot = _mm256_set1_epi32(tot::<M>(a.p, tt * nb + b));
                for (k, uk) in u.iter().enumerate() {
                    dot = M::dot(dot, *uk, _mm256_set1_epi32(xq.add(k).read_unaligned()));
                }
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(*a.p.d.get_unchecked(b * a.tokens + tt)));
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, *acc);
            }
        }
        for (t, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(a.y.add((t0 + t) * a.y_stride + 8 * g), *acc);
        }
    }
}

/// Repacked Q4_0 groups against one token on AVX2, in [`b32x8_imp`]'s arithmetic (the
/// same bits): each row's block dot `Σ (q − 8)·x` as `Σ q·x − 8·Σx` — the unsigned codes
/// by `vpmaddubsw` straight from the nibbles (no codebook lookup, no sign trick; eight
/// pair sums of at most `2·15·128` each fit 16 bits) and one `vpmaddwd` per block — with
/// the next group's bytes prefetched to L2 one block per block.
///
/// # Safety
/// AVX2, FMA, F16C; `a` as for [`b32x8_imp`], with one token and whole 8-row groups.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4x8_one_avx2(a: &Args<'_>, t0: usize) {
    const GB: usize = 8 * IQ4_NL_BYTES;
    let nb = a.nb;
    let m4 = _mm256_set1_epi8(0xF);
    let ones = _mm256_set1_epi16(1);
    let x = a.x.add(t0 * a.x_stride);
    for g in 0..a.rows / 8 {
        let gw = a.w.add(g * 8 * a.w_stride);
        let mut ahead = super::tiles::Ahead::new(gw.wrapping_add(nb * GB));
        let mut acc = _mm256_setzero_ps();
        for b in 0..nb {
            ahead.advance(GB);
            let p = gw.add(b * GB);
            let xb = x.add(b * Q8_0_BYTES + 2);
            let xq = xb as *const i32;
            let mut s16 = _mm256_setzero_si256();
            for k in 0..4 {
                let v = load256(p.add(16 + 32 * k));
                let lo = _mm256_and_si256(v, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo, _mm256_set1_epi32(xq.add(k).read_unaligned())));
                s16 =
                    _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi, _mm256_set1_epi32(xq.add(k + 4).read_unaligned())));
            }
            // 8·Σx over the block, in every lane
            let xs = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), load256(xb)), ones);
            let xs = _mm256_add_epi32(xs, _mm256_shuffle_epi32::<0b01_00_11_10>(xs));
            let xs = _mm256_add_epi32(xs, _mm256_shuffle_epi32::<0b10_11_00_01>(xs));
            let xs = _mm256_add_epi32(xs, _mm256_permute2x128_si256::<1>(xs, xs));
            let dot = _mm256_sub_epi32(_mm256_madd_epi16(s16, ones), _mm256_slli_epi32::<3>(xs));
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
            let d = _mm256_mul_ps(dw, _mm256_set1_ps(*a.p.d.get_unchecked(b * a.tokens + t0)));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, acc);
        }
        _mm256_storeu_ps(a.y.add(t0 * a.y_stride + 8 * g), acc);
    }
}

/// Repacked groups against all the tile's tokens on AVX-512 VNNI, eight at a time
/// ([`b32x8_imp16`]).
///
/// # Safety
/// AVX-512 VNNI present; the tile's bounds as [`b32x8_tile`] checks them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn b32x8_wide(a: &Args<'_>, kv: &[i8; 16], mx: bool) {
    let lut = Vnni::lut(kv);
    macro_rules! arms {
        ($t0:expr; $($n:literal)*) => {
            match a.tokens - $t0 {
                $($n => if mx { b32x8_imp16::<$n, true>(a, lut, $t0) } else { b32x8_imp16::<$n, false>(a, lut, $t0) },)*
                _ => if mx { b32x8_imp16::<8, true>(a, lut, $t0) } else { b32x8_imp16::<8, false>(a, lut, $t0) },
            }
        };
    }
    for t0 in (0..a.tokens).step_by(8) {
        arms!(t0; 1 2 3 4 5 6 7);
    }
}

/// [`b32x8_imp`] on AVX-512 VNNI with two 8-row groups per 512-bit vector (group `2g` in
/// the low half, `2g + 1` in the high one, so every lane runs the same operations in the
/// same order: the same bits); an odd last group through [`b32x8_imp`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn b32x8_imp16<const T: usize, const MX: bool>(a: &Args<'_>, lut: __m256i, t0: usize) {
    let (wbytes, sb) = if MX { (MXFP4_BYTES, 1) } else { (IQ4_NL_BYTES, 2) };
    let nb = a.nb;
    let groups = a.rows / 8;
    let m4 = _mm512_set1_epi8(0xF);
    let lut16 = _mm512_broadcast_i64x4(lut);
    let join = |lo: *const u8, hi: *const u8| {
        let l = _mm512_castsi256_si512(_mm256_loadu_si256(lo as *const __m256i));
        _mm512_inserti64x4::<1>(l, _mm256_loadu_si256(hi as *const __m256i))
    };
    for g in 0..groups / 2 {
        let gw0 = a.w.add(2 * g * 8 * a.w_stride);
        let gw1 = gw0.add(8 * a.w_stride);
        let mut acc = [_mm512_setzero_ps(); T];
        // one token: the next pair of groups streams in to L2 a block per block
        let mut ahead = super::tiles::Ahead::new(gw0.wrapping_add(16 * a.w_stride));
        for b in 0..nb {
            if T == 1 {
                ahead.advance(16 * wbytes);
            }
            let (p0, p1) = (gw0.add(b * 8 * wbytes), gw1.add(b * 8 * wbytes));
            let dw = if MX {
                _mm512_insertf32x8::<1>(_mm512_castps256_ps512(e8m0_half_x8(p0)), e8m0_half_x8(p1))
            } else {
                let h = _mm256_castsi128_si256(_mm_loadu_si128(p0 as *const __m128i));
                _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(h, _mm_loadu_si128(p1 as *const __m128i)))
            };
            let mut u = [_mm512_setzero_si512(); 8];
            for k in 0..4 {
                let v = join(p0.add(8 * sb + 32 * k), p1.add(8 * sb + 32 * k));
                u[k] = _mm512_shuffle_epi8(lut16, _mm512_and_si512(v, m4));
                u[k + 4] = _mm512_shuffle_epi8(lut16, _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4));
            }
            for (t, acc) in acc.iter_mut().enumerate() {
                let tt = t0 + t;
                let xq = a.x.add(tt * a.x_stride + b * Q8_0_BYTES + 2) as *const i32;
                let mut dot = _mm512_set1_epi32(tot::<Vnni>(a.p, tt * nb + b));
                for (k, uk) in u.iter().enumerate() {
                    dot = _mm512_dpbusd_epi32(dot, *uk, _mm512_set1_epi32(xq.add(k).read_unaligned()));
                }
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(*a.p.d.get_unchecked(b * a.tokens + tt)));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), d, *acc);
            }
        }
        for (t, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(a.y.add((t0 + t) * a.y_stride + 16 * g), *acc);
        }
    }
    if groups % 2 == 1 {
        let last = groups - 1;
        let rest = Args { w: a.w.add(last * 8 * a.w_stride), rows: 8, y: a.y.add(8 * last), ..*a };
        b32x8_imp::<Vnni, T, MX>(&rest, lut, t0);
    }
}

/// A tile of repacked IQ4_NL (`MX == false`) or MXFP4 rows (whole 8-row groups) on ISA `M`.
fn b32x8_tile<M: Mac, const MX: bool>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let wbytes = if MX { MXFP4_BYTES } else { IQ4_NL_BYTES };
    let nb = check_tile(t, y, y_stride, M::available(), M::NAME, 32, wbytes, Q8_0_BYTES);
    assert!(t.rows.is_multiple_of(8) && t.w_stride == wbytes * nb, "repacked tile: whole 8-row groups");
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    // SAFETY: `check_tile` bounds every group (`rows · w_stride` bytes), activation row and
    // output the kernel touches and checks the CPU features.
    with_prep(|p| unsafe { run::<M>(Job::B32x8 { mx: MX }, t, y.as_mut_ptr(), y_stride, nb, p) });
}

/// A Q4_0 tile on ISA `M` along [`s::q4_0_path`], on GGUF rows (`REPACKED == false`) or on
/// rows in the repacked layout (whole 8-row groups).
fn q4_0_tile_on<M: Mac, const REPACKED: bool>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = check_tile(t, y, y_stride, M::available(), M::NAME, 32, IQ4_NL_BYTES, Q8_0_BYTES);
    if REPACKED {
        assert!(t.rows.is_multiple_of(8) && t.w_stride == IQ4_NL_BYTES * nb, "repacked tile: whole 8-row groups");
    }
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let job = if REPACKED { Job::Q4x8 } else { Job::Q4 { repack: s::q4_0_path(t) == Path::Repack } };
    // SAFETY: `check_tile` verified that every weight row (or 8-row group), activation row
    // and output the kernels touch is in bounds and that the CPU has the ISA's features.
    with_prep(|p| unsafe { run::<M>(job, t, y.as_mut_ptr(), y_stride, nb, p) });
}

/// Q4_0 on AVX2 in the arithmetic of llama.cpp's AVX2 build: its repacked 8×8 kernels
/// (the IQ4_NL template with Q4_0's codebook) for matrices of 8k rows — on GGUF rows or on
/// rows repacked at load ([`Q4_0_LAYOUT`]) — and `vec_dot` / tinyBLAS (one accumulator)
/// otherwise. The VNNI build has its own (`vnni.rs`, `q4_0x8.rs`).
pub mod q4_0_avx2 {
    use super::*;

    /// Q4_0 × Q8_0 tile along [`s::q4_0_path`] (twin: [`s::q4_0_tile`]).
    pub fn q4_0_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
        q4_0_tile_on::<Avx2, false>(t, y, y_stride)
    }

    /// Tile over repacked Q4_0 rows (whole 8-row groups) × Q8_0.
    pub fn q4_0x8_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
        q4_0_tile_on::<Avx2, true>(t, y, y_stride)
    }

    /// Q4_0 rows → 8-row groups (IQ4_NL's layout: the blocks have the same shape).
    pub fn repack_q4_0(w: &[u8], rows: usize, cols: usize) -> Vec<u8> {
        repack_b32(w, rows, cols, IQ4_NL_BYTES, 2)
    }

    /// The layout, owned by the AVX2 Q4_0 kernel.
    pub const Q4_0_LAYOUT: crate::registry::Repack =
        crate::registry::Repack { name: "q4_0x8", applies: repack_applies, repack: repack_q4_0, tile: q4_0x8_tile };

    mod registration {
        use super::*;
        use crate::registry::Kernel;
        use ggml_quants::types::{q4_0::Q4_0, q8_0::Q8_0};
        use ggml_quants::GgmlType;

        inventory::submit! {
            Kernel::new(<Q4_0 as GgmlType>::ID, "avx2", 10, <Q8_0 as GgmlType>::ID, super::super::super::avx2::q4_0_q8_0)
                .with_available(has_avx2)
                .with_tile(q4_0_tile)
                .with_repack(Q4_0_LAYOUT)
        }
    }
}

/// The public tile and `vec_dot` functions on one ISA, and their registrations (with the
/// repacked layouts llama.cpp uses on AVX2 and AVX-512 alike).
macro_rules! iq4_kernels {
    ($module:ident, $m:ty, $priority:expr) => {
        /// The IQ4_NL, MXFP4 and IQ4_XS kernels on one ISA.
        pub mod $module {
            use super::*;

            /// IQ4_NL × Q8_0 tile along the path llama.cpp takes ([`s::iq4_nl_path`]).
            pub fn iq4_nl_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
                b32_tile::<$m, false>(t, y, y_stride)
            }

            /// MXFP4 × Q8_0 tile along [`s::mxfp4_path`].
            pub fn mxfp4_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
                b32_tile::<$m, true>(t, y, y_stride)
            }

            /// IQ4_XS × Q8_K tile along [`s::iq4_xs_path`].
            pub fn iq4_xs_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
                xs_tile::<$m>(t, y, y_stride)
            }

            /// Tile over repacked IQ4_NL rows (whole 8-row groups) × Q8_0.
            pub fn iq4_nlx8_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
                b32x8_tile::<$m, false>(t, y, y_stride)
            }

            /// Tile over repacked MXFP4 rows (whole 8-row groups) × Q8_0.
            pub fn mxfp4x8_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
                b32x8_tile::<$m, true>(t, y, y_stride)
            }

            /// `ggml_vec_dot_iq4_nl_q8_0`.
            pub fn iq4_nl_q8_0(n: usize, w: &[u8], x: &[u8]) -> f32 {
                dot_via_tile(iq4_nl_tile, n, w, x)
            }

            /// `ggml_vec_dot_mxfp4_q8_0`.
            pub fn mxfp4_q8_0(n: usize, w: &[u8], x: &[u8]) -> f32 {
                dot_via_tile(mxfp4_tile, n, w, x)
            }

            /// `ggml_vec_dot_iq4_xs_q8_K`.
            pub fn iq4_xs_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
                dot_via_tile(iq4_xs_tile, n, w, x)
            }

            mod registration {
                use super::*;
                use crate::registry::{Kernel, Repack};
                use ggml_quants::types::{iq4_nl::Iq4Nl, iq4_xs::Iq4Xs, mxfp4::Mxfp4, q8_0::Q8_0, q8_k::Q8K};
                use ggml_quants::GgmlType;

                inventory::submit! {
                    Kernel::new(<Iq4Nl as GgmlType>::ID, <$m as Mac>::NAME, $priority, <Q8_0 as GgmlType>::ID, iq4_nl_q8_0)
                        .with_available(<$m as Mac>::available)
                        .with_tile(iq4_nl_tile)
                        .with_repack(Repack { name: "iq4_nlx8", applies: repack_applies, repack: repack_iq4_nl, tile: iq4_nlx8_tile })
                }
                inventory::submit! {
                    Kernel::new(<Mxfp4 as GgmlType>::ID, <$m as Mac>::NAME, $priority, <Q8_0 as GgmlType>::ID, mxfp4_q8_0)
                        .with_available(<$m as Mac>::available)
                        .with_tile(mxfp4_tile)
                        .with_repack(Repack { name: "mxfp4x8", applies: repack_applies, repack: repack_mxfp4, tile: mxfp4x8_tile })
                }
                inventory::submit! {
                    Kernel::new(<Iq4Xs as GgmlType>::ID, <$m as Mac>::NAME, $priority, <Q8K as GgmlType>::ID, iq4_xs_q8_k)
                        .with_available(<$m as Mac>::available)
                        .with_tile(iq4_xs_tile)
                        .with_tile_tokens(if <$m as Mac>::WIDE { crate::arch::x86_64::vnni::K_TILE_TOKENS } else { 0 })
                }
            }
        }
    };
}

iq4_kernels!(avx2, Avx2, 10);
iq4_kernels!(vnni, Vnni, 20);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_vector_conversion_matches_scalar_for_every_byte() {
        if !has_avx2() {
            return;
        }
        for base in (0..256).step_by(8) {
            let bytes: [u8; 8] = core::array::from_fn(|i| (base + i) as u8);
            let mut got = [0f32; 8];
            // SAFETY: AVX2 checked above; 8 readable bytes, 8 writable floats.
            unsafe { _mm256_storeu_ps(got.as_mut_ptr(), e8m0_half_x8(bytes.as_ptr())) };
            for (g, &b) in got.iter().zip(&bytes) {
                assert_eq!(g.to_bits(), e8m0_to_fp32_half(b).to_bits(), "e8m0 byte {b}");
            }
        }
    }
}
