//! AVX-512 VNNI (256-bit `vpdpbusd` via AVX512VL) tile kernels for IQ4_NL and MXFP4 (× Q8_0)
//! and IQ4_XS (× Q8_K), in the float arithmetic llama.cpp's CPU backend uses for the
//! product on an AVX2 / AVX-512 machine (`vec_dot`, the repacked 8×8 kernels, tinyBLAS or
//! the tiled matmul: see [`crate::scalar::iq4`], whose functions are the scalar twins).
//!
//! Codes are looked up (`vpshufb`) as `kvalue + 128` (unsigned) and dotted with the signed
//! activations by `vpdpbusd`; `128·Σx` per 4-byte lane, computed once per tile for every
//! activation block, is the accumulator's initial value (negated), so each lane is the
//! exact `Σ kvalue·x` of its 4 elements — the lanes of ggml's `maddubs`/`madd` sums.
//!
//! The paths whose float arithmetic works on whole-block sums (the repacked 8×8 kernels of
//! IQ4_NL and MXFP4, IQ4_XS's tiled matmul) run 8 weight rows at once with one 32-bit lane
//! per row, as llama.cpp's repacked kernels do: the 8 rows' codes are transposed on the
//! fly, 4 activations are broadcast per `vpdpbusd`, and no horizontal sum is needed. The
//! `vec_dot` and tinyBLAS paths keep 8 lanes per row and run one row at a time.
//!
//! Products agree bit for bit with the scalar twins for any input, and with ggml for the
//! activations its quantizers produce (`−127..=127`; ggml's sign trick would differ on a
//! `−128`).

use core::arch::x86_64::*;

use super::tiles::{
    check_tile, dot_via_tile, f16_at, hsum_float_8 as hsum_f8, hsum_i32_8 as hsum_i8, load256, row_offsets, store_n,
};
use super::vnni::has_vnni;
use crate::registry::Tile;
use crate::scalar::act::{Q8_0_BYTES, Q8_K_BYTES};
use crate::scalar::iq4::{self as s, Path, IQ4_NL_BYTES, IQ4_XS_BYTES, MXFP4_BYTES};
use ggml_quants::types::iq_common::e8m0_to_fp32_half;
use ggml_quants::types::iq_tables::{KVALUES_FP4, KVALUES_IQ4NL};

/// The 32 codes of one block (16 bytes at `p`: low nibbles elements 0..16, high nibbles
/// 16..32) looked up in `lut` (the biased codebook in both 128-bit halves).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn decode32(p: *const u8, lut: __m256i) -> __m256i {
    let both = _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i));
    let shifts = _mm256_set_epi16(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_set1_epi8(0xF), _mm256_srlv_epi16(both, shifts)))
}

/// `kvalues + 128` in both halves of a vector.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn biased_lut(kv: &[i8; 16]) -> __m256i {
    let mut b = [0u8; 16];
    for (o, &k) in b.iter_mut().zip(kv) {
        *o = (k as i32 + 128) as u8;
    }
    _mm256_broadcastsi128_si256(_mm_loadu_si128(b.as_ptr() as *const __m128i))
}

/// `−128·Σx` per 4-byte lane of the 32 activation bytes at `p`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn neg_offset(p: *const u8) -> __m256i {
    let o = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(-128), load256(p));
    _mm256_sub_epi32(_mm256_setzero_si256(), o)
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
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
    p.d.clear();
    p.off.clear();
    p.tot.clear();
    p.d.resize(nb * tokens, 0.0);
    p.off.reserve(tokens * nb * groups);
    p.tot.reserve(tokens * nb * groups);
    for t in 0..tokens {
        for b in 0..nb {
            let blk = x.add(t * x_stride + b * xb);
            p.d[b * tokens + t] = if f16 { f16_at(blk) } else { (blk as *const f32).read_unaligned() };
            for g in 0..groups {
                let o = neg_offset(blk.add(xq + 32 * g));
                p.off.push(o);
                p.tot.push(hsum_i8(o));
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn b32_imp<const T: usize, const MX: bool, const P: u8>(a: &Args<'_>, lut: __m256i, t0: usize) {
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
            let q = decode32(wb.add(qs), lut);
            for t in 0..T {
                let tt = t0 + t;
                let xq = load256(a.x.add(tt * a.x_stride + b * Q8_0_BYTES + 2));
                let dot = _mm256_dpbusd_epi32(*a.p.off.get_unchecked(tt * nb + b), q, xq);
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn f16x8(p: *const u8, ro: &[usize; 8]) -> __m256 {
    let mut h = [0u16; 8];
    for (i, hi) in h.iter_mut().enumerate() {
        *hi = (p.add(ro[i]) as *const u16).read_unaligned();
    }
    _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i))
}

/// The repacked path for 8 rows at once (rows `r0..r0+8`), as llama.cpp's 8×8 kernels:
/// one 32-bit lane per row, so each `vpdpbusd` (weights of 8 rows, 4 activations
/// broadcast) adds to every row's block dot and no horizontal sum is needed; per block
/// `acc = fma(Σ, d_w·d_x, acc)` lane by lane, the scalar twin's arithmetic.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn b32_rep8<const T: usize, const MX: bool>(a: &Args<'_>, lut: __m256i, t0: usize, r0: usize, nr: usize) {
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
                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add((b * pf_per_block + l) * 64) as *const i8);
            }
        }
        let wb = w0.add(b * wbytes);
        let u = decode_t8(wb.add(qs), &ro, lut);
        let dw = scales8::<MX>(wb, &ro);
        for (t, acc) in acc.iter_mut().enumerate() {
            let tt = t0 + t;
            let xq = a.x.add(tt * a.x_stride + b * Q8_0_BYTES + 2) as *const i32;
            let mut dot = _mm256_set1_epi32(*a.p.tot.get_unchecked(tt * nb + b));
            for (g, ug) in u.iter().enumerate() {
                dot = _mm256_dpbusd_epi32(dot, *ug, _mm256_set1_epi32(xq.add(g).read_unaligned()));
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn xs_tiled8<const T: usize>(a: &Args<'_>, lut: __m256i, t0: usize, r0: usize, nr: usize) {
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
            let tot = a.p.tot.as_ptr().add((tt * nb + b) * 8);
            let mut s1 = _mm256_setzero_si256();
            for (sb, usb) in u.iter().enumerate() {
                let mut dot = _mm256_set1_epi32(*tot.add(sb));
                for (g, ug) in usb.iter().enumerate() {
                    dot = _mm256_dpbusd_epi32(dot, *ug, _mm256_set1_epi32(xq.add(8 * sb + g).read_unaligned()));
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
                    1 => $rep8::<1, $($g8)*>(&$args, $lut, t0, r0, nr),
                    2 => $rep8::<2, $($g8)*>(&$args, $lut, t0, r0, nr),
                    3 => $rep8::<3, $($g8)*>(&$args, $lut, t0, r0, nr),
                    4 => $rep8::<4, $($g8)*>(&$args, $lut, t0, r0, nr),
                    5 => $rep8::<5, $($g8)*>(&$args, $lut, t0, r0, nr),
                    6 => $rep8::<6, $($g8)*>(&$args, $lut, t0, r0, nr),
                    7 => $rep8::<7, $($g8)*>(&$args, $lut, t0, r0, nr),
                    _ => $rep8::<8, $($g8)*>(&$args, $lut, t0, r0, nr),
                }
                t0 += 8;
            }
            r0 += 8;
        }
    }};
}

/// IQ4_XS rows against tokens `t0..t0+T` in vec_dot's arithmetic (8 lanes per row; the
/// tiled path is [`xs_tiled8`]).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn xs_imp<const T: usize>(a: &Args<'_>, lut: __m256i, t0: usize) {
    let nb = a.nb;
    for r in 0..a.rows {
        let wr = a.w.add(r * a.w_stride);
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..nb {
            let wb = wr.add(b * IQ4_XS_BYTES);
            let dw = f16_at(wb);
            let ls = s::iq4_xs_scales(core::slice::from_raw_parts(wb, 8));
            let mut q = [_mm256_setzero_si256(); 8];
            for (sb, qv) in q.iter_mut().enumerate() {
                *qv = decode32(wb.add(8 + 16 * sb), lut);
            }
            for (t, acc) in acc.iter_mut().enumerate() {
                let tt = t0 + t;
                let xb = a.x.add(tt * a.x_stride + b * Q8_K_BYTES);
                let off = a.p.off.as_ptr().add((tt * nb + b) * 8);
                let mut sumi = _mm256_setzero_si256();
                for sb in 0..8 {
                    let dot = _mm256_dpbusd_epi32(*off.add(sb), q[sb], load256(xb.add(4 + 32 * sb)));
                    sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(dot, _mm256_set1_epi32(ls[sb])));
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

/// Runs `imp::<T>` over the tile's tokens in groups of up to 4.
macro_rules! by_tokens {
    ($t:expr, $args:expr, $lut:expr, $imp:ident, $($g:tt)*) => {{
        let mut t0 = 0;
        while t0 < $t.tokens {
            match $t.tokens - t0 {
                1 => $imp::<1, $($g)*>(&$args, $lut, t0),
                2 => $imp::<2, $($g)*>(&$args, $lut, t0),
                3 => $imp::<3, $($g)*>(&$args, $lut, t0),
                _ => $imp::<4, $($g)*>(&$args, $lut, t0),
            }
            t0 += 4;
        }
    }};
}

fn b32_tile<const MX: bool>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let wbytes = if MX { MXFP4_BYTES } else { IQ4_NL_BYTES };
    let nb = check_tile(t, y, y_stride, has_vnni(), "avx512vnni", 32, wbytes, Q8_0_BYTES);
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let path = path_code(if MX { s::mxfp4_path(t) } else { s::iq4_nl_path(t) });
    // SAFETY: `check_tile` verified that every weight row, activation row and output the
    // kernels touch is in bounds and that the CPU has the features (`has_vnni`).
    unsafe {
        let mut p = PREP.with(|c| c.take());
        prep(t.x.as_ptr(), t.x_stride, t.tokens, nb, Q8_0_BYTES, 2, 1, true, &mut p);
        let args = Args {
            w: t.w.as_ptr(),
            w_stride: t.w_stride,
            rows: t.rows,
            nb,
            x: t.x.as_ptr(),
            x_stride: t.x_stride,
            tokens: t.tokens,
            p: &p,
            y: y.as_mut_ptr(),
            y_stride,
        };
        let lut = biased_lut(if MX { &KVALUES_FP4 } else { &KVALUES_IQ4NL });
        match path {
            P_REPACK => by_rows8!(t, args, lut, b32_rep8, [MX]),
            P_TINY => by_tokens!(t, args, lut, b32_imp, MX, P_TINY),
            _ => by_tokens!(t, args, lut, b32_imp, MX, P_VECDOT),
        }
        PREP.with(|c| c.set(p));
    }
}

/// IQ4_NL × Q8_0 tile along the path llama.cpp takes for the product ([`s::iq4_nl_path`]).
pub fn iq4_nl_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    b32_tile::<false>(t, y, y_stride)
}

/// MXFP4 × Q8_0 tile along [`s::mxfp4_path`].
pub fn mxfp4_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    b32_tile::<true>(t, y, y_stride)
}

/// IQ4_XS × Q8_K tile along [`s::iq4_xs_path`].
pub fn iq4_xs_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = check_tile(t, y, y_stride, has_vnni(), "avx512vnni", 256, IQ4_XS_BYTES, Q8_K_BYTES);
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let tiled = s::iq4_xs_path(t) == Path::Tiled;
    // SAFETY: as in `b32_tile`: bounds and features checked by `check_tile`.
    unsafe {
        let mut p = PREP.with(|c| c.take());
        prep(t.x.as_ptr(), t.x_stride, t.tokens, nb, Q8_K_BYTES, 4, 8, false, &mut p);
        let args = Args {
            w: t.w.as_ptr(),
            w_stride: t.w_stride,
            rows: t.rows,
            nb,
            x: t.x.as_ptr(),
            x_stride: t.x_stride,
            tokens: t.tokens,
            p: &p,
            y: y.as_mut_ptr(),
            y_stride,
        };
        let lut = biased_lut(&KVALUES_IQ4NL);
        if tiled {
            by_rows8!(t, args, lut, xs_tiled8, []);
        } else {
            by_tokens!(t, args, lut, xs_imp,);
        }
        PREP.with(|c| c.set(p));
    }
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn e8m0_half_x8(p: *const u8) -> __m256 {
    let v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
    let big = _mm256_slli_epi32::<23>(_mm256_sub_epi32(v, _mm256_set1_epi32(1)));
    let small = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), v);
    let is_small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v);
    _mm256_castsi256_ps(_mm256_blendv_epi8(big, small, is_small))
}

/// Repacked groups `0..groups` against tokens `t0..t0+T` (the arithmetic of [`b32_rep8`]).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn b32x8_imp<const T: usize, const MX: bool>(a: &Args<'_>, lut: __m256i, t0: usize) {
    let (wbytes, sb) = if MX { (MXFP4_BYTES, 1) } else { (IQ4_NL_BYTES, 2) };
    let nb = a.nb;
    let m4 = _mm256_set1_epi8(0xF);
    for g in 0..a.rows / 8 {
        let gw = a.w.add(g * 8 * a.w_stride);
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..nb {
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
                let mut dot = _mm256_set1_epi32(*a.p.tot.get_unchecked(tt * nb + b));
                for (k, uk) in u.iter().enumerate() {
                    dot = _mm256_dpbusd_epi32(dot, *uk, _mm256_set1_epi32(xq.add(k).read_unaligned()));
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

fn b32x8_tile<const MX: bool>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let wbytes = if MX { MXFP4_BYTES } else { IQ4_NL_BYTES };
    let nb = check_tile(t, y, y_stride, has_vnni(), "avx512vnni", 32, wbytes, Q8_0_BYTES);
    assert!(t.rows.is_multiple_of(8) && t.w_stride == wbytes * nb, "repacked tile: whole 8-row groups");
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    // SAFETY: `check_tile` bounds every group (`rows · w_stride` bytes), activation row and
    // output the kernel touches and checks the CPU features (`has_vnni`).
    unsafe {
        let mut p = PREP.with(|c| c.take());
        prep(t.x.as_ptr(), t.x_stride, t.tokens, nb, Q8_0_BYTES, 2, 1, true, &mut p);
        let args = Args {
            w: t.w.as_ptr(),
            w_stride: t.w_stride,
            rows: t.rows,
            nb,
            x: t.x.as_ptr(),
            x_stride: t.x_stride,
            tokens: t.tokens,
            p: &p,
            y: y.as_mut_ptr(),
            y_stride,
        };
        let lut = biased_lut(if MX { &KVALUES_FP4 } else { &KVALUES_IQ4NL });
        let mut t0 = 0;
        while t0 < t.tokens {
            match t.tokens - t0 {
                1 => b32x8_imp::<1, MX>(&args, lut, t0),
                2 => b32x8_imp::<2, MX>(&args, lut, t0),
                3 => b32x8_imp::<3, MX>(&args, lut, t0),
                4 => b32x8_imp::<4, MX>(&args, lut, t0),
                5 => b32x8_imp::<5, MX>(&args, lut, t0),
                6 => b32x8_imp::<6, MX>(&args, lut, t0),
                7 => b32x8_imp::<7, MX>(&args, lut, t0),
                _ => b32x8_imp::<8, MX>(&args, lut, t0),
            }
            t0 += 8;
        }
        PREP.with(|c| c.set(p));
    }
}

/// Tile over repacked IQ4_NL rows (whole 8-row groups) × Q8_0.
pub fn iq4_nlx8_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    b32x8_tile::<false>(t, y, y_stride)
}

/// Tile over repacked MXFP4 rows (whole 8-row groups) × Q8_0.
pub fn mxfp4x8_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    b32x8_tile::<true>(t, y, y_stride)
}

mod registration {
    use super::*;
    use crate::registry::{Kernel, Repack};
    use ggml_quants::types::{iq4_nl::Iq4Nl, iq4_xs::Iq4Xs, mxfp4::Mxfp4, q8_0::Q8_0, q8_k::Q8K};
    use ggml_quants::GgmlType;

    macro_rules! vnni_kernel {
        ($ty:ty, $act:ty, $dot:path, $tile:path $(, $repack:expr)?) => {
            inventory::submit! {
                Kernel::new(<$ty as GgmlType>::ID, "avx512vnni", 20, <$act as GgmlType>::ID, $dot)
                    .with_available(has_vnni)
                    .with_tile($tile)
                    $(.with_repack($repack))?
            }
        };
    }

    vnni_kernel!(
        Iq4Nl,
        Q8_0,
        iq4_nl_q8_0,
        iq4_nl_tile,
        Repack { name: "iq4_nlx8", applies: repack_applies, repack: repack_iq4_nl, tile: iq4_nlx8_tile }
    );
    vnni_kernel!(
        Mxfp4,
        Q8_0,
        mxfp4_q8_0,
        mxfp4_tile,
        Repack { name: "mxfp4x8", applies: repack_applies, repack: repack_mxfp4, tile: mxfp4x8_tile }
    );
    vnni_kernel!(Iq4Xs, Q8K, iq4_xs_q8_k, iq4_xs_tile);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_vector_conversion_matches_scalar_for_every_byte() {
        if !has_vnni() {
            return;
        }
        for base in (0..256).step_by(8) {
            let bytes: [u8; 8] = core::array::from_fn(|i| (base + i) as u8);
            let mut got = [0f32; 8];
            // SAFETY: VNNI (and so AVX2) checked above; 8 readable bytes, 8 writable floats.
            unsafe { _mm256_storeu_ps(got.as_mut_ptr(), e8m0_half_x8(bytes.as_ptr())) };
            for (g, &b) in got.iter().zip(&bytes) {
                assert_eq!(g.to_bits(), e8m0_to_fp32_half(b).to_bits(), "e8m0 byte {b}");
            }
        }
    }
}
