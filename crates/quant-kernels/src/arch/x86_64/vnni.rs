//! AVX-512 VNNI tile kernels: each weight block decoded once and dotted with up to eight
//! activation rows, for the legacy types (q4_0, q4_1, q5_0, q5_1, q8_0 × Q8_0/Q8_1) and
//! the K types (× Q8_K).
//!
//! The arithmetic per output is that of 256-bit (8-lane) kernels; several tokens run as
//! 512-bit vectors whose two 256-bit halves are two such kernels side by side (two tokens
//! of one row, or two rows of one token), every lane doing the same operations in the same
//! order, so the bits never depend on how many tokens share a tile. One token runs two
//! rows per 512-bit vector for the legacy types (with a weight prefetch stream to L2).
//!
//! Integer lane sums equal those of ggml's AVX2 kernels (`mul_sum_i8_pairs_float` /
//! `mul_sum_us8_pairs_float`, which on a VNNI build are `vpdpbusd` too): signed weights
//! are fed as `w + offset` (unsigned) and `offset · Σx` (per 4-byte lane, precomputed
//! once per tile for every activation block) is subtracted, which is exact. The float
//! accumulation per token is ggml's (8 lanes, `fmadd` per block, `hsum_float_8`), so the
//! results agree with the AVX2 kernels and the scalar twins within float rounding.

use core::arch::x86_64::*;
use std::sync::atomic::{AtomicU8, Ordering};

use super::tiles::{check_tile, dot_via_tile};
use crate::registry::Tile;
use crate::scalar::act::{Q8_0_BYTES, Q8_1_BYTES, Q8_K_BYTES};

static VNNI: AtomicU8 = AtomicU8::new(0);

/// AVX2/FMA/F16C plus AVX-512 F/BW/VL/VNNI are available and allowed by [`crate::cpu`]'s cap.
pub fn has_vnni() -> bool {
    match VNNI.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let yes = super::has_avx2()
                && crate::cpu::allows(crate::cpu::Level::Wide)
                && std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vl")
                && std::is_x86_feature_detected!("avx512vnni");
            VNNI.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
            yes
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn hsum_float_8(x: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// [`hsum_float_8`] of both 256-bit halves of `x` at once, each with its exact pairing
/// (`(a0+a4)+(a2+a6)` + `(a1+a5)+(a3+a7)`), in half the operations of two calls.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn hsum_float_8_pair(x: __m512) -> [f32; 2] {
    // 128-bit blocks swapped within each half: lanes 0..4 hold a_i + a_{i+4}.
    let s = _mm512_add_ps(x, _mm512_shuffle_f32x4::<0b10_11_00_01>(x, x));
    // Lanes 0, 1: (a0+a4)+(a2+a6), (a1+a5)+(a3+a7) (`movehl`).
    let s = _mm512_add_ps(s, _mm512_permute_ps::<0b01_00_11_10>(s));
    // Lane 0: their sum (`movehdup`, `add_ss`).
    let s = _mm512_add_ps(s, _mm512_permute_ps::<0b10_11_00_01>(s));
    [_mm512_cvtss_f32(s), _mm_cvtss_f32(_mm512_extractf32x4_ps::<2>(s))]
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn hsum_i32_8(a: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01>(s));
    _mm_cvtsi128_si32(s)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    let h = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// Two adjacent fp16 (`d`, `m`) at `p` → f32, one conversion.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn f16_pair_at(p: *const u8) -> (f32, f32) {
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn nibbles_32(p: *const u8) -> __m256i {
    // The 16 bytes in both halves, the high half shifted right by 4 (`vpsrlvw`).
    let both = _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i));
    let shifts = _mm256_set_epi16(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm256_and_si256(_mm256_set1_epi8(0xF), _mm256_srlv_epi16(both, shifts))
}

/// 32 bits → 32 bytes, `0x10` where the bit is set.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn bits_32_x10(p: *const u8) -> __m256i {
    let x32 = (p as *const u32).read_unaligned();
    let m = _mm256_movm_epi8(x32);
    _mm256_and_si256(m, _mm256_set1_epi8(0x10))
}

/// Per legacy weight type: block bytes, activation block bytes, offset of the activation
/// quants, whether it has a min (`m·s` term), the unsigned offset of its quants.
struct Legacy {
    /// Accumulate like llama.cpp's repacked 8×8 kernels (`gemv/gemm_q4_b32_8x8_q8_0`):
    /// per block the whole integer dot, then `acc = fma(Σ, d_w·d_x, acc)` in one float,
    /// instead of `vec_dot`'s 8 lanes. llama.cpp repacks every q4_0 weight with a row
    /// count divisible by 8 on AVX2 machines (all real model tensors), so that is the
    /// arithmetic its results carry.
    repack: bool,
    wb: usize,
    xb: usize,
    xq: usize,
    has_min: bool,
    offset: i8,
}

const Q4_0: Legacy = Legacy { repack: true, wb: 18, xb: Q8_0_BYTES, xq: 2, has_min: false, offset: 8 };
const Q4_1: Legacy = Legacy { repack: false, wb: 20, xb: Q8_1_BYTES, xq: 4, has_min: true, offset: 0 };
const Q5_0: Legacy = Legacy { repack: false, wb: 22, xb: Q8_0_BYTES, xq: 2, has_min: false, offset: 16 };
const Q5_1: Legacy = Legacy { repack: false, wb: 24, xb: Q8_1_BYTES, xq: 4, has_min: true, offset: 0 };
const Q8_0: Legacy = Legacy { repack: false, wb: Q8_0_BYTES, xb: Q8_0_BYTES, xq: 2, has_min: false, offset: -128 };

/// Per-tile activation data: scales as f32, `s` of Q8_1 as f32, `offset·Σx` lane sums,
/// and for the two-token kernels the quants and lane sums of token pairs side by side.
#[derive(Default)]
struct Prep {
    d: Vec<f32>,
    s: Vec<f32>,
    off: Vec<__m256i>,
    /// `xp[b·pairs + j]`: block `b` of tokens `2j` (low 256 bits) and `2j+1` (high; zero
    /// when there is no such token).
    xp: Vec<__m512i>,
    /// `offp[b·pairs + j]`: `off` of the same two (token, block)s.
    offp: Vec<__m512i>,
    /// `dxp[b·pairs + j]`: the activation scales of the same two (token, block)s, each
    /// in its 8 lanes.
    dxp: Vec<__m512>,
    /// The weight scales of the current row chunk as f32, `wd[r·nb + b]` (and the mins,
    /// `wm`, for types with one): converted once per chunk instead of once per 8-token
    /// group in the two-token kernels ([`prep_weight_scales`]).
    wd: Vec<f32>,
    wm: Vec<f32>,
}

/// Fills `p.wd` (and `p.wm` when the type has a min) with rows `0..rows` of the weights
/// at `w`: the same f16 → f32 conversions the kernels would do per block.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn prep_weight_scales(l: &Legacy, w: *const u8, w_stride: usize, rows: usize, nb: usize, p: &mut Prep) {
    p.wd.clear();
    p.wm.clear();
    for r in 0..rows {
        for b in 0..nb {
            let wb = w.add(r * w_stride + b * l.wb);
            if l.has_min {
                let (d, m) = f16_pair_at(wb);
                p.wd.push(d);
                p.wm.push(m);
            } else {
                p.wd.push(f16_at(wb));
            }
        }
    }
}

/// Two 256-bit halves → one 512-bit vector (`lo` in bits 0..256).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn join256(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn prep_legacy(l: &Legacy, x: *const u8, x_stride: usize, tokens: usize, nb: usize, p: &mut Prep) {
    let Prep { d, s, off, xp, offp, dxp, .. } = p;
    d.clear();
    s.clear();
    off.clear();
    xp.clear();
    offp.clear();
    dxp.clear();
    // `d` and `s` are block-major (`d[b·tokens + t]`) so that a block's scales for 8
    // consecutive tokens load as one vector; 8 floats of padding keep that load in bounds.
    d.resize(nb * tokens + 8, 0.0);
    if l.has_min {
        s.resize(nb * tokens + 8, 0.0);
    }
    // `offset` as an unsigned multiplier: 8 and 16 directly; for q8_0 the weights are fed
    // as w ^ 0x80 = w + 128, so 128 is subtracted. Stored negated: it is the initial
    // accumulator of the weight's `vpdpbusd`.
    let mult = _mm256_set1_epi8(if l.offset == -128 { -128 } else { l.offset });
    for t in 0..tokens {
        for b in 0..nb {
            let p = x.add(t * x_stride + b * l.xb);
            d[b * tokens + t] = f16_at(p);
            if l.has_min {
                s[b * tokens + t] = f16_at(p.add(2));
            }
            if l.offset != 0 {
                let o = _mm256_dpbusd_epi32(_mm256_setzero_si256(), mult, load256(p.add(l.xq)));
                off.push(_mm256_sub_epi32(_mm256_setzero_si256(), o));
            }
        }
    }
    // Only the 6- and 8-token groups (and 4-token ones without a min) run two tokens
    // per vector.
    if l.repack || !(tokens >= 8 || tokens == 6 || (tokens == 4 && !l.has_min)) {
        return;
    }
    let pairs = tokens.div_ceil(2);
    let z = _mm256_setzero_si256();
    for b in 0..nb {
        for j in 0..pairs {
            let (t, u) = (2 * j, 2 * j + 1);
            let xq = |t: usize| load256(x.add(t * x_stride + b * l.xb + l.xq));
            xp.push(join256(xq(t), if u < tokens { xq(u) } else { z }));
            let du = if u < tokens { d[b * tokens + u] } else { 0.0 };
            let (dt, du) = (_mm256_set1_ps(d[b * tokens + t]), _mm256_set1_ps(du));
            dxp.push(_mm512_castsi512_ps(join256(_mm256_castps_si256(dt), _mm256_castps_si256(du))));
            if l.offset != 0 {
                offp.push(join256(off[t * nb + b], if u < tokens { off[u * nb + b] } else { z }));
            }
        }
    }
}

/// Rows per pass of the two-token kernels (each activation load serves this many rows).
const PAIR_ROWS: usize = 4;

/// How far ahead of its reads the two-token kernels prefetch weights, in bytes.
const PREFETCH: usize = 1024;

thread_local! {
    /// Per-thread activation set-up buffers, reused across tile calls.
    static PREP: std::cell::Cell<Prep> = std::cell::Cell::new(Prep::default());
}

macro_rules! legacy_tile {
    ($name:ident, $imp:ident, $pairs:ident, $rows2:ident, $l:expr, $unpack:ident) => {
        /// Weight rows `0..rows` against tokens `t0..t0+T`.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $imp<const T: usize>(
            w: *const u8,
            w_stride: usize,
            rows: usize,
            nb: usize,
            x: *const u8,
            x_stride: usize,
            p: &Prep,
            tokens: usize,
            t0: usize,
            y: *mut f32,
            y_stride: usize,
        ) {
            let l = $l;
            let mut r0 = 0;
            if l.repack {
                r0 = rows - rows % 8;
                repack_rows8::<T>(w, w_stride, r0, nb, x, x_stride, p, tokens, t0, y, y_stride);
            }
            for r in r0..rows {
                let wr = w.add(r * w_stride);
                // ggml's float order exactly (one 8-lane accumulator per token, `fmadd`
                // by `d_w·d_x` per block, the `m·s` terms fused in block order), so the
                // result is bit-identical to ggml-cpu's vec_dot for the same activations.
                let mut acc = [_mm256_setzero_ps(); T];
                let mut summ = [0f32; T];
                let mut accs = [0f32; T];
                for b in 0..nb {
                    let wb = wr.add(b * l.wb);
                    let q = $unpack(wb);
                    let (dw, mw) = if l.has_min { f16_pair_at(wb) } else { (f16_at(wb), 0.0) };
                    // d_w·d_x for the T tokens at once (each product rounded as the
                    // scalar one), then broadcast per token.
                    let dd = _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_loadu_ps(p.d.as_ptr().add(b * tokens + t0)));
                    for t in 0..T {
                        let i = (t0 + t) * nb + b;
                        let xq = load256(x.add((t0 + t) * x_stride + b * l.xb + l.xq));
                        // `-offset·Σx` as the initial accumulator: lanes of Σ (q - offset)·x.
                        let init = if l.offset != 0 { *p.off.get_unchecked(i) } else { _mm256_setzero_si256() };
                        let dot = _mm256_dpbusd_epi32(init, q, xq);
                        if l.repack {
                            let d = _mm_cvtss_f32(_mm256_castps256_ps128(_mm256_permutexvar_ps(
                                _mm256_set1_epi32(t as i32),
                                dd,
                            )));
                            accs[t] = (hsum_i32_8(dot) as f32).mul_add(d, accs[t]);
                            continue;
                        }
                        let d = _mm256_permutexvar_ps(_mm256_set1_epi32(t as i32), dd);
                        acc[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot), acc[t]);
                        if l.has_min {
                            summ[t] = mw.mul_add(*p.s.get_unchecked(b * tokens + t0 + t), summ[t]);
                        }
                    }
                }
                for t in 0..T {
                    let v = if l.repack { accs[t] } else { hsum_float_8(acc[t]) + summ[t] };
                    *y.add((t0 + t) * y_stride + r) = v;
                }
            }
        }

        /// [`$imp`] for 2·P tokens (`t0..t0+nt`, `nt ≤ 2·P`) two at a time: token `t0+2j`
        /// in the low 256 bits of a 512-bit vector, `t0+2j+1` in the high ones. Every lane
        /// runs the operations of the 256-bit kernel in the same order (the weights
        /// broadcast to both halves, each half's `d_w·d_x` its token's), and the `m·s`
        /// terms of 8 tokens run as one lane-wise fma per block (`f32::mul_add` per
        /// lane), so each result has the bits of the one-token kernel. `R` rows share
        /// each activation load (a row's arithmetic does not depend on its neighbours);
        /// rows past the last multiple of `R` go through `R = 1`. `scales`: the rows'
        /// weight scales and mins as f32 (`Prep::wd` / `wm` from row 0, row-major by
        /// block). Not for `l.repack`.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $pairs<const P: usize, const R: usize>(
            w: *const u8,
            w_stride: usize,
            rows: usize,
            nb: usize,
            p: &Prep,
            scales: (*const f32, *const f32),
            tokens: usize,
            t0: usize,
            nt: usize,
            y: *mut f32,
            y_stride: usize,
        ) {
            let l = $l;
            let (wd, wm) = scales;
            let pairs = tokens.div_ceil(2);
            let j0 = t0 / 2;
            let full = rows / R * R;
            for r in (0..full).step_by(R) {
                let wr = w.add(r * w_stride);
                let mut acc = [[_mm512_setzero_ps(); P]; R];
                let mut summ = [_mm256_setzero_ps(); R];
                for b in 0..nb {
                    let mut q = [_mm512_setzero_si512(); R];
                    let mut dw = [_mm512_setzero_ps(); R];
                    let mut mw = [0f32; R];
                    for i in 0..R {
                        let wb = wr.add(i * w_stride + b * l.wb);
                        // The rows ahead (a tile's rows are contiguous), so that a weight
                        // stream from DRAM does not stall the loop.
                        _mm_prefetch::<_MM_HINT_T0>(wb.wrapping_add(PREFETCH) as *const i8);
                        q[i] = if l.offset == -128 {
                            // q8_0: broadcast straight from memory (a load, no shuffle),
                            // then w ^ 0x80 on both halves
                            _mm512_xor_si512(_mm512_broadcast_i64x4(load256(wb.add(2))), _mm512_set1_epi8(-128))
                        } else {
                            _mm512_broadcast_i64x4($unpack(wb))
                        };
                        // the chunk's scales, converted once ([`prep_weight_scales`])
                        let k = (r + i) * nb + b;
                        dw[i] = _mm512_set1_ps(*wd.add(k));
                        if l.has_min {
                            mw[i] = *wm.add(k);
                        }
                    }
                    let base = b * pairs + j0;
                    for j in 0..P {
                        let xq = *p.xp.get_unchecked(base + j);
                        let init = if l.offset != 0 { *p.offp.get_unchecked(base + j) } else { _mm512_setzero_si512() };
                        let dx = p.dxp.as_ptr().add(base + j);
                        for i in 0..R {
                            let dot = _mm512_dpbusd_epi32(init, q[i], xq);
                            // d_w·d_x of each half's token, rounded as the scalar product.
                            let d = _mm512_mul_ps(dw[i], *dx);
                            acc[i][j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot), acc[i][j]);
                        }
                    }
                    if l.has_min {
                        let s = _mm256_loadu_ps(p.s.as_ptr().add(b * tokens + t0));
                        for i in 0..R {
                            summ[i] = _mm256_fmadd_ps(_mm256_set1_ps(mw[i]), s, summ[i]);
                        }
                    }
                }
                for i in 0..R {
                    let mut sm = [0f32; 8];
                    _mm256_storeu_ps(sm.as_mut_ptr(), summ[i]);
                    for (j, acc) in acc[i].iter().enumerate() {
                        let v = hsum_float_8_pair(*acc);
                        for (h, v) in v.into_iter().enumerate() {
                            let t = 2 * j + h;
                            if t < nt {
                                *y.add((t0 + t) * y_stride + r + i) = v + sm[t];
                            }
                        }
                    }
                }
            }
            if full < rows {
                let w = w.add(full * w_stride);
                let scales = (wd.add(full * nb), if l.has_min { wm.add(full * nb) } else { wm });
                $pairs::<P, 1>(w, w_stride, rows - full, nb, p, scales, tokens, t0, nt, y.add(full), y_stride);
            }
        }

        /// [`$imp`] for tokens `t0..t0+T`, two rows at a time: row `r` in the low 256 bits
        /// of a 512-bit vector, row `r+1` in the high ones (each token's activation block
        /// broadcast to both), each half with its row's `d_w·d_x` and the two rows' `m·s`
        /// chains as two lanes of one fma: every lane runs the operations of the 256-bit
        /// kernel in its order (the same bits). An odd last row goes through [`$imp`].
        /// Not for `l.repack`.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $rows2<const T: usize>(
            w: *const u8,
            w_stride: usize,
            rows: usize,
            nb: usize,
            x: *const u8,
            x_stride: usize,
            p: &Prep,
            tokens: usize,
            t0: usize,
            y: *mut f32,
            y_stride: usize,
        ) {
            let l = $l;
            let half = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
            // Weights prefetched 8 rows ahead (at most 4 KiB, at least the next pair):
            // reading two rows at once, the hardware prefetcher alone falls behind
            // (measured on SmolLM2 decoding 2 sequences: 8.1 ms a step without, 6.9 ms
            // prefetching 2 rows ahead, 5.5 ms 8 rows ahead). To L2 (`prefetcht1`): a
            // T0 request holds an L1 fill buffer for the whole DRAM round trip.
            // A thread streaming alone wants the next pair further ahead: on a Zen 5 VM,
            // q8_0 beyond the caches at one thread 73–77 % of the stream loop 8 KiB ahead
            // against 55–63 % two rows (4352 B) ahead. At two threads (session 30, another
            // Zen 5 VM) two rows ahead read 72–74 %, 9 KiB ahead 83–85 % (2048 columns;
            // 5–8 KiB 67–79 %, 10–13 KiB 73–79 %, a distance of exactly 2 or 4 rows among
            // the worst), and a wide row wants a row and 3–4 KiB more (8192 columns: 8 KiB
            // 46 %, 12–24 KiB 74–75 %, two rows 74 %); q5_0 51 → 58 %, llama-1b Q8_0's
            // products 68–71 → 78 %.
            let pf =
                if crate::pool::job_threads() == 1 { (2 * w_stride).max(8192) } else { (w_stride + 4096).max(9216) };
            // One token over rows of 1 KiB or more: the pair `ahead_rows` on (at least 9 KiB
            // ahead) prefetched as one stream in address order at the rate the current pair
            // is read (`tiles::Ahead`), instead of each row `pf` ahead. Zen 5 VM, session 30:
            // q8_0 beyond the caches at two threads 91–93 % of the stream loop (per row
            // 82–85 %), a wide row (8192 columns) one pair ahead 90 % (75 %), one thread
            // 92–94 % (80 %); engine llama-1b Q8_0 decode 52.5 / 53.4 → 61.2 / 60.9 t/s,
            // `-t 1` 27.2 → 31.7. SmolLM2's 612-byte rows: −1 to −3 % (Q8_0, Q5_0), so
            // short rows keep the per-row prefetch.
            let stream = T == 1 && w_stride >= 1024;
            let ahead_rows = 9216usize.div_ceil(w_stride).max(2).next_multiple_of(2);
            for r in (0..rows / 2).map(|i| 2 * i) {
                let w0 = w.add(r * w_stride);
                let w1 = w0.add(w_stride);
                let mut acc = [_mm512_setzero_ps(); T];
                let mut summ = [_mm_setzero_ps(); T];
                let mut ahead = super::tiles::Ahead::new(w0.wrapping_add(ahead_rows * w_stride));
                for b in 0..nb {
                    let (b0, b1) = (w0.add(b * l.wb), w1.add(b * l.wb));
                    if stream {
                        ahead.advance(2 * l.wb);
                    } else {
                        _mm_prefetch::<_MM_HINT_T1>(b0.wrapping_add(pf) as *const i8);
                        _mm_prefetch::<_MM_HINT_T1>(b1.wrapping_add(pf) as *const i8);
                    }
                    let q = join256($unpack(b0), $unpack(b1));
                    // [d0, d1, ..] and [m0, m1, ..] (q4_1/q5_1) from fp16.
                    let (dw, mw) = if l.has_min {
                        let h = _mm_set_epi32(
                            0,
                            0,
                            (b1 as *const i32).read_unaligned(),
                            (b0 as *const i32).read_unaligned(),
                        );
                        let v = _mm_cvtph_ps(h);
                        (_mm_shuffle_ps::<0b10_00_10_00>(v, v), _mm_shuffle_ps::<0b11_01_11_01>(v, v))
                    } else {
                        let h0 = (b0 as *const u16).read_unaligned() as i32;
                        let h1 = (b1 as *const u16).read_unaligned() as i32;
                        (_mm_cvtph_ps(_mm_set_epi32(0, 0, 0, h1 << 16 | h0)), _mm_setzero_ps())
                    };
                    let dw = _mm512_permutexvar_ps(half, _mm512_castps128_ps512(dw));
                    for t in 0..T {
                        let i = (t0 + t) * nb + b;
                        let dx = *p.d.get_unchecked(b * tokens + t0 + t);
                        let xq = _mm512_broadcast_i64x4(load256(x.add((t0 + t) * x_stride + b * l.xb + l.xq)));
                        let init = if l.offset != 0 {
                            _mm512_broadcast_i64x4(*p.off.get_unchecked(i))
                        } else {
                            _mm512_setzero_si512()
                        };
                        let dot = _mm512_dpbusd_epi32(init, q, xq);
                        let d = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
                        acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot), acc[t]);
                        if l.has_min {
                            let s = _mm_set1_ps(*p.s.get_unchecked(b * tokens + t0 + t));
                            summ[t] = _mm_fmadd_ps(mw, s, summ[t]);
                        }
                    }
                }
                for t in 0..T {
                    let [lo, hi] = hsum_float_8_pair(acc[t]);
                    let yr = y.add((t0 + t) * y_stride + r);
                    *yr = lo + _mm_cvtss_f32(summ[t]);
                    *yr.add(1) = hi + _mm_cvtss_f32(_mm_movehdup_ps(summ[t]));
                }
            }
            if rows % 2 == 1 {
                let r = rows - 1;
                $imp::<T>(w.add(r * w_stride), w_stride, 1, nb, x, x_stride, p, tokens, t0, y.add(r), y_stride);
            }
        }

        /// VNNI tile kernel (see the module docs); falls back to the AVX2/scalar
        /// `vec_dot` loop when the CPU lacks the features.
        pub fn $name(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
            let l = $l;
            let nb = check_tile(t, y, y_stride, has_vnni(), "avx512vnni", 32, l.wb, l.xb);
            if t.rows == 0 || t.tokens == 0 {
                return;
            }
            // SAFETY: `check_tile` verified every row, activation row and output index the
            // kernel touches is in bounds; the features are detected at run time before
            // any call (`has_vnni`).
            unsafe {
                let mut p = PREP.with(|c| c.take());
                prep_legacy(&l, t.x.as_ptr(), t.x_stride, t.tokens, nb, &mut p);
                // The rows in L2-sized chunks, each against every 8-token group: a wide
                // tile (`legacy_avx2::TILE_TOKENS`, the AVX2 tiles' shape) reads its weights
                // from memory once and sets up its activations once. No row's arithmetic
                // depends on the chunking.
                let chunk = (super::legacy_avx2::ROW_CHUNK_BYTES / t.w_stride).max(16) / 16 * 16;
                let x = t.x.as_ptr();
                for c0 in (0..t.rows).step_by(chunk) {
                    let w = t.w.as_ptr().add(c0 * t.w_stride);
                    let yp = y.as_mut_ptr().add(c0);
                    let r = chunk.min(t.rows - c0);
                    if !l.repack && t.tokens >= 4 {
                        prep_weight_scales(&l, w, t.w_stride, r, nb, &mut p);
                    }
                    let sc = (p.wd.as_ptr(), p.wm.as_ptr());
                    let mut t0 = 0;
                    while t0 < t.tokens {
                        let (ws, xs, n) = (t.w_stride, t.x_stride, t.tokens);
                        let nt = (t.tokens - t0).min(8);
                        match (l.repack, nt) {
                            // Measured (AMD Zen 4): two rows per vector for 2, odd token
                            // counts and 4 with a min term; two tokens per vector else. One
                            // token: two rows per vector too, with the weights prefetched to
                            // L2 (`prefetcht1`) ahead of the pair — llama-1b Q8_0 decode on a
                            // Sapphire Rapids VM 12.4 → 19.3 t/s against the one-row kernel,
                            // which has no software prefetch (it was chosen on Zen 4, where the
                            // hardware prefetcher alone kept up with one row stream).
                            (false, 2) => $rows2::<2>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (false, 3) => $rows2::<3>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (false, 4) if l.has_min => $rows2::<4>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (false, 4) => $pairs::<2, PAIR_ROWS>(w, ws, r, nb, &p, sc, n, t0, nt, yp, y_stride),
                            (false, 5) => $rows2::<5>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (false, 6) => $pairs::<3, PAIR_ROWS>(w, ws, r, nb, &p, sc, n, t0, nt, yp, y_stride),
                            (false, 7) => $rows2::<7>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (false, 1) => $rows2::<1>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (false, 8) => $pairs::<4, PAIR_ROWS>(w, ws, r, nb, &p, sc, n, t0, nt, yp, y_stride),
                            (_, 1) => $imp::<1>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (_, 2) => $imp::<2>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (_, 3) => $imp::<3>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (_, 4) => $imp::<4>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (_, 5) => $imp::<5>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (_, 6) => $imp::<6>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            (_, 7) => $imp::<7>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                            _ => $imp::<8>(w, ws, r, nb, x, xs, &p, n, t0, yp, y_stride),
                        }
                        t0 += 8;
                    }
                }
                PREP.with(|c| c.set(p));
            }
        }
    };
}

/// `Σ` of each of eight i32 vectors, as one vector (`out[r] = Σ lanes of v[r]`; exact).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn hsum_i32_8x8(v: &[__m256i; 8]) -> __m256i {
    let a01 = _mm256_hadd_epi32(v[0], v[1]);
    let a23 = _mm256_hadd_epi32(v[2], v[3]);
    let a45 = _mm256_hadd_epi32(v[4], v[5]);
    let a67 = _mm256_hadd_epi32(v[6], v[7]);
    let b0 = _mm256_hadd_epi32(a01, a23);
    let b1 = _mm256_hadd_epi32(a45, a67);
    _mm256_add_epi32(_mm256_permute2x128_si256::<0x20>(b0, b1), _mm256_permute2x128_si256::<0x31>(b0, b1))
}

/// The q4_0 repacked arithmetic (see [`Legacy::repack`]) for rows `0..rows` (a multiple
/// of 8) against tokens `t0..t0+T`, eight rows at a time: per block and token the eight
/// integer dots are reduced together and the eight `fma(Σ, d_w·d_x, acc)` run as one
/// vector — the same operations per output as the one-row loop, so the same bits.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn repack_rows8<const T: usize>(
    w: *const u8,
    w_stride: usize,
    rows: usize,
    nb: usize,
    x: *const u8,
    x_stride: usize,
    p: &Prep,
    tokens: usize,
    t0: usize,
    y: *mut f32,
    y_stride: usize,
) {
    let l = Q4_0;
    for r0 in (0..rows).step_by(8) {
        let mut acc = [_mm256_setzero_ps(); T];
        // The next eight rows (contiguous, 8·w_stride bytes), prefetched a slice per block
        // so the whole group is in cache when its turn comes.
        let next = w.add((r0 + 16) * w_stride);
        let span = if r0 + 16 < rows { 8 * w_stride } else { 0 };
        let per_block = span.div_ceil(nb.max(1));
        for b in 0..nb {
            let mut o = b * per_block;
            while o < ((b + 1) * per_block).min(span) {
                _mm_prefetch::<_MM_HINT_T1>(next.add(o) as *const i8);
                o += 64;
            }
            let mut dh = [0u16; 8];
            let mut q = [_mm256_setzero_si256(); 8];
            for (i, (dh, q)) in dh.iter_mut().zip(q.iter_mut()).enumerate() {
                let wb = w.add((r0 + i) * w_stride + b * l.wb);
                *dh = (wb as *const u16).read_unaligned();
                *q = unpack_q4_0(wb);
            }
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(dh.as_ptr() as *const __m128i));
            for (t, acc) in acc.iter_mut().enumerate() {
                let i = (t0 + t) * nb + b;
                let xq = load256(x.add((t0 + t) * x_stride + b * l.xb + l.xq));
                let init = *p.off.get_unchecked(i);
                let mut dots = [_mm256_setzero_si256(); 8];
                for (d, q) in dots.iter_mut().zip(&q) {
                    *d = _mm256_dpbusd_epi32(init, *q, xq);
                }
                let sums = _mm256_cvtepi32_ps(hsum_i32_8x8(&dots));
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(*p.d.get_unchecked(b * tokens + t0 + t)));
                *acc = _mm256_fmadd_ps(sums, d, *acc);
            }
        }
        for (t, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(y.add((t0 + t) * y_stride + r0), *acc);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn unpack_q4_0(b: *const u8) -> __m256i {
    nibbles_32(b.add(2))
}
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn unpack_q4_1(b: *const u8) -> __m256i {
    nibbles_32(b.add(4))
}
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn unpack_q5_0(b: *const u8) -> __m256i {
    _mm256_or_si256(nibbles_32(b.add(6)), bits_32_x10(b.add(2)))
}
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn unpack_q5_1(b: *const u8) -> __m256i {
    _mm256_or_si256(nibbles_32(b.add(8)), bits_32_x10(b.add(4)))
}
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn unpack_q8_0(b: *const u8) -> __m256i {
    _mm256_xor_si256(load256(b.add(2)), _mm256_set1_epi8(-128))
}

legacy_tile!(q4_0_tile, q4_0_imp, q4_0_pairs, q4_0_rows2, Q4_0, unpack_q4_0);
legacy_tile!(q4_1_tile, q4_1_imp, q4_1_pairs, q4_1_rows2, Q4_1, unpack_q4_1);
legacy_tile!(q5_0_tile, q5_0_imp, q5_0_pairs, q5_0_rows2, Q5_0, unpack_q5_0);
legacy_tile!(q5_1_tile, q5_1_imp, q5_1_pairs, q5_1_rows2, Q5_1, unpack_q5_1);
legacy_tile!(q8_0_tile, q8_0_imp, q8_0_pairs, q8_0_rows2, Q8_0, unpack_q8_0);

macro_rules! dot_of_tile {
    ($($dot:ident = $tile:ident;)*) => {$(
        /// One row · one activation row through the VNNI tile kernel.
        pub fn $dot(n: usize, w: &[u8], x: &[u8]) -> f32 {
            dot_via_tile($tile, n, w, x)
        }
    )*};
}

dot_of_tile! {
    q4_0_q8_0 = q4_0_tile;
    q4_1_q8_1 = q4_1_tile;
    q5_0_q8_0 = q5_0_tile;
    q5_1_q8_1 = q5_1_tile;
    q8_0_q8_0 = q8_0_tile;
}

// ---------------------------------------------------------------------------------------
// K quants × Q8_K (block_q8_K: f32 d @0, 256 × i8 @4, 16 × i16 bsums @260).
//
// Every K block is decoded once per row into eight 32-byte vectors of unsigned quants
// (`q[k]` = elements `32k..32k+32`), eight i32 lane-scale vectors (`sv[k]`: the scale of
// the 16- or 32-element sub-block each `vpdpbusd` lane belongs to), and per 16-element
// group the scale (for the offset correction `offset · Σx`) and the min, both as i16 for
// a `vpmaddwd` with the Q8_K block sums.

pub(super) struct KBlock {
    pub(super) q: [__m256i; 8],
    pub(super) sv: [__m256i; 8],
    /// i16 scale per 16-element group (offset types only).
    pub(super) sc16: __m256i,
    /// Mins: q2_K one i16 per 16-element group; q4_K/q5_K the 8 sub-block mins as i16
    /// in the low 128 bits.
    pub(super) mn16: __m256i,
    pub(super) d: f32,
    pub(super) dmin: f32,
}

/// Sixteen i8 scales (one per 16-element group) → the eight lane-scale vectors of the
/// `vpdpbusd` products: vector `k` covers groups `2k` (lanes 0–3) and `2k+1` (lanes 4–7).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn pair_scales_16(sc: __m128i) -> [__m256i; 8] {
    let lo = _mm256_cvtepi8_epi32(sc);
    let hi = _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(sc));
    let mut sv = [_mm256_setzero_si256(); 8];
    for j in 0..4 {
        let a = 2 * j as i32;
        let idx = _mm256_setr_epi32(a, a, a, a, a + 1, a + 1, a + 1, a + 1);
        sv[j] = _mm256_permutevar8x32_epi32(lo, idx);
        sv[j + 4] = _mm256_permutevar8x32_epi32(hi, idx);
    }
    sv
}

/// The Q4_K/Q5_K 6-bit scales and mins (`get_scale_min_k4`).
#[inline(always)]
fn scale_min_k4(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    crate::scalar::dots::scale_min_k4(q)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn k4_common(b: *const u8) -> ([__m256i; 8], __m256i) {
    let (sc, mn) = scale_min_k4(&*(b.add(4) as *const [u8; 12]));
    let mut sv = [_mm256_setzero_si256(); 8];
    for j in 0..8 {
        sv[j] = _mm256_set1_epi32(sc[j] as i32);
    }
    // The 8 mins as i16 in the low half (ggml's `mins_and_scales` high half).
    let m = _mm_cvtepu8_epi16(_mm_loadl_epi64(mn.as_ptr() as *const __m128i));
    (sv, _mm256_castsi128_si256(m))
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn decode_q4_k(b: *const u8) -> KBlock {
    let m4 = _mm256_set1_epi8(0xF);
    let (sv, mn16) = k4_common(b);
    let mut q = [_mm256_setzero_si256(); 8];
    for c in 0..4 {
        let bits = load256(b.add(16 + 32 * c));
        q[2 * c] = _mm256_and_si256(bits, m4);
        q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
    }
    KBlock { q, sv, sc16: _mm256_setzero_si256(), mn16, d: f16_at(b), dmin: f16_at(b.add(2)) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn decode_q5_k(b: *const u8) -> KBlock {
    let m4 = _mm256_set1_epi8(0xF);
    let one = _mm256_set1_epi8(1);
    let (sv, mn16) = k4_common(b);
    let hbits = load256(b.add(16));
    let mut q = [_mm256_setzero_si256(); 8];
    for c in 0..4 {
        let bits = load256(b.add(48 + 32 * c));
        let h0 = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c as i32)), one);
        let h1 = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c as i32 + 1)), one);
        q[2 * c] = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_slli_epi16::<4>(h0));
        q[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4), _mm256_slli_epi16::<4>(h1));
    }
    KBlock { q, sv, sc16: _mm256_setzero_si256(), mn16, d: f16_at(b), dmin: f16_at(b.add(2)) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn decode_q6_k(b: *const u8) -> KBlock {
    let m3 = _mm256_set1_epi8(3);
    let m15 = _mm256_set1_epi8(15);
    let mut q = [_mm256_setzero_si256(); 8];
    for j in 0..2 {
        let ql1 = load256(b.add(64 * j));
        let ql2 = load256(b.add(64 * j + 32));
        let qh = load256(b.add(128 + 32 * j));
        q[4 * j] = _mm256_or_si256(_mm256_and_si256(ql1, m15), _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m3)));
        q[4 * j + 1] = _mm256_or_si256(
            _mm256_and_si256(ql2, m15),
            _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<2>(qh), m3)),
        );
        q[4 * j + 2] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m15),
            _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<4>(qh), m3)),
        );
        q[4 * j + 3] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql2), m15),
            _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<6>(qh), m3)),
        );
    }
    let sc = _mm_loadu_si128(b.add(192) as *const __m128i);
    let sv = pair_scales_16(sc);
    let sc16 = _mm256_cvtepi8_epi16(sc);
    KBlock { q, sv, sc16, mn16: _mm256_setzero_si256(), d: f16_at(b.add(208)), dmin: 0.0 }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn decode_q3_k(b: *const u8) -> KBlock {
    let m3 = _mm256_set1_epi8(3);
    let one = _mm256_set1_epi8(1);
    let hbits = load256(b);
    let mut q = [_mm256_setzero_si256(); 8];
    for j in 0..2 {
        let bits = load256(b.add(32 + 32 * j));
        for s in 0..4 {
            let k = 4 * j + s;
            let l = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * s as i32)), m3);
            let h = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(k as i32)), one);
            q[k] = _mm256_or_si256(l, _mm256_slli_epi16::<2>(h));
        }
    }
    // ggml's scale unpacking (`kmask1`/`kmask2`), then −32.
    const KMASK1: u32 = 0x03030303;
    const KMASK2: u32 = 0x0f0f0f0f;
    let s = b.add(96) as *const u32;
    let aux = [s.read_unaligned(), s.add(1).read_unaligned(), s.add(2).read_unaligned()];
    let sc = _mm_sub_epi8(
        _mm_set_epi32(
            (((aux[1] >> 4) & KMASK2) | (((aux[2] >> 6) & KMASK1) << 4)) as i32,
            (((aux[0] >> 4) & KMASK2) | (((aux[2] >> 4) & KMASK1) << 4)) as i32,
            ((aux[1] & KMASK2) | (((aux[2] >> 2) & KMASK1) << 4)) as i32,
            ((aux[0] & KMASK2) | ((aux[2] & KMASK1) << 4)) as i32,
        ),
        _mm_set1_epi8(32),
    );
    let sv = pair_scales_16(sc);
    let sc16 = _mm256_cvtepi8_epi16(sc);
    KBlock { q, sv, sc16, mn16: _mm256_setzero_si256(), d: f16_at(b.add(108)), dmin: 0.0 }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) unsafe fn decode_q2_k(b: *const u8) -> KBlock {
    let m3 = _mm256_set1_epi8(3);
    let mut q = [_mm256_setzero_si256(); 8];
    for j in 0..2 {
        let bits = load256(b.add(16 + 32 * j));
        for s in 0..4 {
            q[4 * j + s] = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * s as i32)), m3);
        }
    }
    let sv = pair_scales_16(_mm_and_si128(_mm_loadu_si128(b as *const __m128i), _mm_set1_epi8(0xF)));
    let mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(
        _mm_srli_epi16::<4>(_mm_loadu_si128(b as *const __m128i)),
        _mm_set1_epi8(0xF),
    ));
    KBlock { q, sv, sc16: _mm256_setzero_si256(), mn16, d: f16_at(b.add(80)), dmin: f16_at(b.add(82)) }
}

/// How a K type's constant terms enter the sum, each exactly as ggml's AVX2 kernel does
/// it (so the float results are bit-identical): q6_K subtracts `32·Σ scale·bsum` from the
/// integer lanes, q3_K subtracts `4·Σx` inside each product lane, q2_K adds the mins into
/// the main accumulator first, q5_K keeps a scalar min accumulator; q4_K follows
/// llama.cpp's repacked 8×8 kernels (which it uses for every q4_K weight on AVX2 machines):
/// per block one fma of the whole integer sum and one of the min sum, subtracted last.
pub(super) const MODE_Q6: u8 = 0;
pub(super) const MODE_Q3: u8 = 1;
pub(super) const MODE_Q2: u8 = 2;
pub(super) const MODE_Q4: u8 = 3;
pub(super) const MODE_Q5: u8 = 4;

/// Per-tile activation data of the two-token K kernels (see [`prep_k`]).
#[derive(Default)]
struct KPrep {
    /// `xq[(b·pairs + j)·8 + k]`: quants `32k..32k+32` of block `b` of tokens `2j` (low
    /// 256 bits) and `2j+1` (high; zero when there is no such token).
    xq: Vec<__m512i>,
    /// `bs[b·pairs + j]`: the 16 i16 block sums of the same two tokens (q6_K, q2_K).
    bs: Vec<__m512i>,
    /// `dx[b·tokens + t]`, then 8 floats of padding.
    dx: Vec<f32>,
    /// q4_K/q5_K: `qt[(b·4 + i)·tp + t]` = i32 lane `i` of token `t`'s pair sums of the
    /// block sums (`bsums[4i] + bsums[4i+1]`, `bsums[4i+2] + bsums[4i+3]` as two i16),
    /// tokens padded with zeros to `tp`, a multiple of 8.
    qt: Vec<i32>,
}

thread_local! {
    static KPREP: std::cell::Cell<KPrep> = std::cell::Cell::new(KPrep::default());
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn prep_k(mode: u8, x: *const u8, x_stride: usize, tokens: usize, nb: usize, p: &mut KPrep) {
    let KPrep { xq, bs, dx, qt } = p;
    xq.clear();
    bs.clear();
    dx.clear();
    qt.clear();
    dx.resize(nb * tokens + 8, 0.0);
    let pairs = tokens.div_ceil(2);
    let tp = tokens.next_multiple_of(8);
    let z = _mm256_setzero_si256();
    let at = |t: usize, b: usize| x.add(t * x_stride + b * Q8_K_BYTES);
    for b in 0..nb {
        for t in 0..tokens {
            dx[b * tokens + t] = (at(t, b) as *const f32).read_unaligned();
        }
        for j in 0..pairs {
            let (t, u) = (2 * j, 2 * j + 1);
            for k in 0..8 {
                let hi = if u < tokens { load256(at(u, b).add(4 + 32 * k)) } else { z };
                xq.push(join256(load256(at(t, b).add(4 + 32 * k)), hi));
            }
            if mode == MODE_Q6 || mode == MODE_Q2 {
                let hi = if u < tokens { load256(at(u, b).add(260)) } else { z };
                bs.push(join256(load256(at(t, b).add(260)), hi));
            }
        }
    }
    if mode == MODE_Q4 || mode == MODE_Q5 {
        qt.resize(nb * 4 * tp, 0);
        for b in 0..nb {
            for t in 0..tokens {
                let q8sums = load256(at(t, b).add(260));
                let q8s = _mm_hadd_epi16(_mm256_extracti128_si256::<0>(q8sums), _mm256_extracti128_si256::<1>(q8sums));
                let mut l = [0i32; 4];
                _mm_storeu_si128(l.as_mut_ptr() as *mut __m128i, q8s);
                for (i, v) in l.into_iter().enumerate() {
                    qt[(b * 4 + i) * tp + t] = v;
                }
            }
        }
    }
}

/// i32 lane scales (values in i16 range) → the same scale in both i16 halves of each
/// lane, for `vpdpwssd`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn scale_pairs16(sv: __m256i) -> __m512i {
    let v = _mm256_or_si256(_mm256_and_si256(sv, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32::<16>(sv));
    _mm512_broadcast_i64x4(v)
}

/// `Σ` of the eight i32 lanes of each 256-bit half: `out[2j + h]` for half `h` of `v[j]`
/// (exact; missing pairs count as zero).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn hsum_halves<const P: usize>(v: &[__m512i; P]) -> __m256i {
    let mut h = [_mm256_setzero_si256(); 8];
    for (j, v) in v.iter().enumerate() {
        h[2 * j] = _mm512_castsi512_si256(*v);
        h[2 * j + 1] = _mm512_extracti64x4_epi64::<1>(*v);
    }
    hsum_i32_8x8(&h)
}

macro_rules! k_tile {
    ($name:ident, $run:ident, $dot:ident, $imp:ident, $pairs:ident, $wb:expr, $decode:ident, $mode:expr, $single:expr, $tiled_if:expr) => {
        /// Weight rows `0..rows` against tokens `t0..t0+T`.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $imp<const T: usize>(
            w: *const u8,
            w_stride: usize,
            rows: usize,
            nb: usize,
            x: *const u8,
            x_stride: usize,
            batched: usize,
            tiled: bool,
            rep: bool,
            t0: usize,
            y: *mut f32,
            y_stride: usize,
        ) {
            let mode: u8 = $mode;
            let four = _mm256_set1_epi8(4);
            for r in 0..rows {
                let wr = w.add(r * w_stride);
                let mut acc = [_mm256_setzero_ps(); T];
                let mut acc_m = [_mm_setzero_ps(); T];
                let mut summs = [0f32; T];
                for b in 0..nb {
                    let kb = $decode(wr.add(b * $wb));
                    for t in 0..T {
                        let xb = x.add((t0 + t) * x_stride + b * Q8_K_BYTES);
                        let dx = (xb as *const f32).read_unaligned();
                        let mut sumi = _mm256_setzero_si256();
                        let mut sub = [_mm256_setzero_si256(); 8];
                        for k in 0..8 {
                            let xk = load256(xb.add(4 + 32 * k));
                            let mut p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), kb.q[k], xk);
                            if mode == MODE_Q3 {
                                p = _mm256_sub_epi32(p, _mm256_dpbusd_epi32(_mm256_setzero_si256(), four, xk));
                            }
                            sub[k] = _mm256_mullo_epi32(p, kb.sv[k]);
                            sumi = _mm256_add_epi32(sumi, sub[k]);
                        }
                        if tiled {
                            // ggml-cpu's tiled K-quant matmul (batches of 8+ tokens):
                            // per block the exact integer sums, one f32 product with the
                            // weight scale, the mins folded in with one fnmadd, then one
                            // fma with the activation scale into the running sum.
                            let s1 = if mode == MODE_Q6 {
                                let corr = _mm256_madd_epi16(load256(xb.add(260)), kb.sc16);
                                hsum_i32_8(_mm256_sub_epi32(sumi, _mm256_slli_epi32::<5>(corr)))
                            } else {
                                hsum_i32_8(sumi)
                            };
                            let mut r = s1 as f32 * kb.d;
                            if mode == MODE_Q2 {
                                let s2 = hsum_i32_8(_mm256_madd_epi16(kb.mn16, load256(xb.add(260))));
                                r = (-kb.dmin).mul_add(s2 as f32, r);
                            } else if mode == MODE_Q4 || mode == MODE_Q5 {
                                let q8sums = load256(xb.add(260));
                                let q8s = _mm_hadd_epi16(
                                    _mm256_extracti128_si256::<0>(q8sums),
                                    _mm256_extracti128_si256::<1>(q8sums),
                                );
                                let prod = _mm_madd_epi16(_mm256_castsi256_si128(kb.mn16), q8s);
                                let z = _mm_setzero_si128();
                                let s2 = _mm_cvtsi128_si32(_mm_hadd_epi32(_mm_hadd_epi32(prod, z), z));
                                r = (-kb.dmin).mul_add(s2 as f32, r);
                            }
                            summs[t] = r.mul_add(dx, summs[t]);
                            continue;
                        }
                        if mode == MODE_Q2 && rep {
                            // llama.cpp's repacked q2_K (AVX-512, `q2_K_8x8`): the 4-token
                            // gemm takes one fma per 128-element half, the one-token gemv
                            // one per block, for the scales and for the mins (lane j of
                            // `prod`: groups 2j, 2j+1); the mins are subtracted last.
                            let prod = _mm256_madd_epi16(kb.mn16, load256(xb.add(260)));
                            let mut pm = [0i32; 8];
                            _mm256_storeu_si256(pm.as_mut_ptr() as *mut __m256i, prod);
                            let mut accm = _mm_cvtss_f32(acc_m[t]);
                            let mut accs = summs[t];
                            if t0 + t < batched {
                                for h in 0..2 {
                                    let lo = _mm256_add_epi32(sub[4 * h], sub[4 * h + 1]);
                                    let hi = _mm256_add_epi32(sub[4 * h + 2], sub[4 * h + 3]);
                                    let is = hsum_i32_8(_mm256_add_epi32(lo, hi));
                                    accs = (is as f32).mul_add(kb.d * dx, accs);
                                    let im: i32 = pm[4 * h..4 * h + 4].iter().sum();
                                    accm = (im as f32).mul_add(kb.dmin * dx, accm);
                                }
                            } else {
                                accs = (hsum_i32_8(sumi) as f32).mul_add(kb.d * dx, accs);
                                accm = (pm.iter().sum::<i32>() as f32).mul_add(kb.dmin * dx, accm);
                            }
                            summs[t] = accs;
                            acc_m[t] = _mm_set_ss(accm);
                            continue;
                        }
                        let dmin = -dx * kb.dmin;
                        if mode == MODE_Q6 {
                            let corr = _mm256_madd_epi16(load256(xb.add(260)), kb.sc16);
                            sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32::<5>(corr));
                        } else if mode == MODE_Q2 {
                            let prod = _mm256_madd_epi16(kb.mn16, load256(xb.add(260)));
                            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc[t]);
                        } else if mode == MODE_Q4 || mode == MODE_Q5 {
                            let q8sums = load256(xb.add(260));
                            let q8s = _mm_hadd_epi16(
                                _mm256_extracti128_si256::<0>(q8sums),
                                _mm256_extracti128_si256::<1>(q8sums),
                            );
                            let prod = _mm_madd_epi16(_mm256_castsi256_si128(kb.mn16), q8s);
                            if mode == MODE_Q4 && t0 + t < batched {
                                // llama.cpp's repacked 4-token gemm: one fma per 64-element
                                // pair of sub-blocks, for the scales and for the mins.
                                let pairs = _mm256_madd_epi16(q8sums, _mm256_set1_epi16(1));
                                let mut m = [0i32; 8];
                                _mm256_storeu_si256(m.as_mut_ptr() as *mut __m256i, pairs);
                                let mut mn = [0i16; 16];
                                _mm256_storeu_si256(mn.as_mut_ptr() as *mut __m256i, kb.mn16);
                                let mut accm = _mm_cvtss_f32(acc_m[t]);
                                let mut accs = summs[t];
                                for sb in 0..4 {
                                    let is = hsum_i32_8(_mm256_add_epi32(sub[2 * sb], sub[2 * sb + 1]));
                                    accs = (is as f32).mul_add(kb.d * dx, accs);
                                    let im = mn[2 * sb] as i32 * m[2 * sb] + mn[2 * sb + 1] as i32 * m[2 * sb + 1];
                                    accm = (im as f32).mul_add(kb.dmin * dx, accm);
                                }
                                summs[t] = accs;
                                acc_m[t] = _mm_set_ss(accm);
                                continue;
                            }
                            if mode == MODE_Q4 {
                                // llama.cpp repacks q4_K (8×8): whole-block integer sums,
                                // one fma each for the scales and the mins, subtracted last.
                                let z = _mm_setzero_si128();
                                let im = _mm_cvtsi128_si32(_mm_hadd_epi32(_mm_hadd_epi32(prod, z), z));
                                acc_m[t] = _mm_set_ss((im as f32).mul_add(kb.dmin * dx, _mm_cvtss_f32(acc_m[t])));
                                let is = hsum_i32_8(sumi);
                                summs[t] = (is as f32).mul_add(kb.d * dx, summs[t]);
                                continue;
                            } else {
                                let z = _mm_setzero_si128();
                                let hs = _mm_cvtsi128_si32(_mm_hadd_epi32(_mm_hadd_epi32(prod, z), z));
                                summs[t] = dmin.mul_add(hs as f32, summs[t]);
                            }
                        }
                        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * kb.d), _mm256_cvtepi32_ps(sumi), acc[t]);
                    }
                }
                for t in 0..T {
                    let mut v = hsum_float_8(acc[t]);
                    if tiled {
                        v = summs[t];
                    } else if mode == MODE_Q4 || (mode == MODE_Q2 && rep) {
                        v = summs[t] - _mm_cvtss_f32(acc_m[t]);
                    } else if mode == MODE_Q5 {
                        v += summs[t];
                    }
                    *y.add((t0 + t) * y_stride + r) = v;
                }
            }
        }

        /// [`$imp`] without the tiled and the 4-token (`batched`) arithmetic, for tokens
        /// `t0..t0+nt` (`nt ≤ 2·P`) two at a time: token `t0+2j` in the low 256 bits of a
        /// 512-bit vector, `t0+2j+1` in the high ones. The integer lanes are the same
        /// exact sums (`vpmaddubsw` pairs, which cannot saturate for these quants, times
        /// the lane scales by `vpdpwssd`, instead of `vpdpbusd` then `vpmulld`); every
        /// float lane runs the 256-bit kernel's operations in its order, and the per-token
        /// scalar chains (q4_K, q5_K) run 8 tokens as one vector of lane-wise fmas. So
        /// each result has the bits of the one-token kernel.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $pairs<const P: usize>(
            w: *const u8,
            w_stride: usize,
            rows: usize,
            nb: usize,
            p: &KPrep,
            tokens: usize,
            t0: usize,
            nt: usize,
            y: *mut f32,
            y_stride: usize,
        ) {
            let mode: u8 = $mode;
            let four = _mm512_set1_epi8(4);
            let pairs = tokens.div_ceil(2);
            let tp = tokens.next_multiple_of(8);
            let j0 = t0 / 2;
            let mut idx = [_mm512_setzero_si512(); P];
            for (j, v) in idx.iter_mut().enumerate() {
                let (a, b) = (2 * j as i32, 2 * j as i32 + 1);
                *v = _mm512_set_epi32(b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a);
            }
            for r in 0..rows {
                let wr = w.add(r * w_stride);
                let mut acc = [_mm512_setzero_ps(); P];
                // q4_K: Σ fma(is, d·dx) and Σ fma(im, dmin·dx); q5_K: Σ fma(-dx·dmin, hs).
                let mut summs = _mm256_setzero_ps();
                let mut acc_m = _mm256_setzero_ps();
                for b in 0..nb {
                    let wb = wr.add(b * $wb);
                    for o in [0, 64, 128, 192] {
                        _mm_prefetch::<_MM_HINT_T0>(wb.wrapping_add(PREFETCH + o) as *const i8);
                    }
                    let kb = $decode(wb);
                    let mut q = [_mm512_setzero_si512(); 8];
                    let mut sv = [_mm512_setzero_si512(); 8];
                    for k in 0..8 {
                        q[k] = _mm512_broadcast_i64x4(kb.q[k]);
                        sv[k] = scale_pairs16(kb.sv[k]);
                    }
                    let dx8 = _mm256_loadu_ps(p.dx.as_ptr().add(b * tokens + t0));
                    let dd = _mm512_castps256_ps512(_mm256_mul_ps(dx8, _mm256_set1_ps(kb.d)));
                    let dm = _mm512_castps256_ps512(_mm256_mul_ps(dx8, _mm256_set1_ps(-kb.dmin)));
                    let mut sums = [_mm512_setzero_si512(); P];
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let xq = p.xq.as_ptr().add((b * pairs + j0 + j) * 8);
                        let mut sumi = _mm512_setzero_si512();
                        for k in 0..8 {
                            let xk = *xq.add(k);
                            let mut p16 = _mm512_maddubs_epi16(q[k], xk);
                            if mode == MODE_Q3 {
                                p16 = _mm512_sub_epi16(p16, _mm512_maddubs_epi16(four, xk));
                            }
                            sumi = _mm512_dpwssd_epi32(sumi, p16, sv[k]);
                        }
                        if mode == MODE_Q4 {
                            sums[j] = sumi;
                            continue;
                        }
                        if mode == MODE_Q6 {
                            let bs = *p.bs.get_unchecked(b * pairs + j0 + j);
                            let corr = _mm512_madd_epi16(bs, _mm512_broadcast_i64x4(kb.sc16));
                            sumi = _mm512_sub_epi32(sumi, _mm512_slli_epi32::<5>(corr));
                        } else if mode == MODE_Q2 {
                            let bs = *p.bs.get_unchecked(b * pairs + j0 + j);
                            let prod = _mm512_madd_epi16(_mm512_broadcast_i64x4(kb.mn16), bs);
                            let d = _mm512_permutexvar_ps(idx[j], dm);
                            *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(prod), *acc);
                        }
                        let d = _mm512_permutexvar_ps(idx[j], dd);
                        *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi), *acc);
                    }
                    if mode == MODE_Q4 || mode == MODE_Q5 {
                        // Per token Σ mins·(pair sums of the block sums), exact.
                        let mn = _mm256_castsi256_si128(kb.mn16);
                        let qt = p.qt.as_ptr().add(b * 4 * tp + t0);
                        let mut hs = _mm256_setzero_si256();
                        for i in 0..4 {
                            let m =
                                _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(mn), _mm256_set1_epi32(i as i32));
                            let v = _mm256_loadu_si256(qt.add(i * tp) as *const __m256i);
                            hs = _mm256_dpwssd_epi32(hs, v, m);
                        }
                        let hs = _mm256_cvtepi32_ps(hs);
                        if mode == MODE_Q4 {
                            let is = _mm256_cvtepi32_ps(hsum_halves(&sums));
                            let dmd = _mm256_mul_ps(_mm256_set1_ps(kb.dmin), dx8);
                            acc_m = _mm256_fmadd_ps(hs, dmd, acc_m);
                            let ddx = _mm256_mul_ps(_mm256_set1_ps(kb.d), dx8);
                            summs = _mm256_fmadd_ps(is, ddx, summs);
                        } else {
                            summs = _mm256_fmadd_ps(_mm512_castps512_ps256(dm), hs, summs);
                        }
                    }
                }
                let mut sm = [0f32; 8];
                let mut am = [0f32; 8];
                _mm256_storeu_ps(sm.as_mut_ptr(), summs);
                _mm256_storeu_ps(am.as_mut_ptr(), acc_m);
                for t in 0..nt {
                    let a = acc[t / 2];
                    let half = if t % 2 == 0 {
                        _mm512_castps512_ps256(a)
                    } else {
                        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a)))
                    };
                    let v = if mode == MODE_Q4 {
                        sm[t] - am[t]
                    } else if mode == MODE_Q5 {
                        hsum_float_8(half) + sm[t]
                    } else {
                        hsum_float_8(half)
                    };
                    *y.add((t0 + t) * y_stride + r) = v;
                }
            }
        }

        /// VNNI tile kernel for a K type (see the section comment).
        pub fn $name(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
            $run(t, y, y_stride, true)
        }

        /// [`$name`], with or without the 16-token engine ([`super::k16`]) for the
        /// tokens whose arithmetic it mirrors.
        pub(super) fn $run(t: &Tile<'_>, y: &mut [f32], y_stride: usize, k16: bool) {
            let nb = check_tile(t, y, y_stride, has_vnni(), "avx512vnni", 256, $wb, Q8_K_BYTES);
            if t.rows == 0 || t.tokens == 0 {
                return;
            }
            let single: Option<crate::registry::VecDotFn> = $single;
            let tiled_if: fn(usize) -> bool = $tiled_if;
            let tiled = t.total_tokens >= TILED_FROM && tiled_if(t.total_rows);
            // q2_K weights llama.cpp repacked (on AVX-512) take its repacked arithmetic
            // outside the tiled path; q4_K's takes it whatever the rows.
            let rep = $mode == MODE_Q2 && !tiled_if(t.total_rows);
            if let (1, Some(f), false, false) = (t.tokens, single, tiled, rep) {
                // One token: the AVX2 kernel's cheaper per-block decode wins.
                return crate::matmul::tile_by_vec_dot(f, t, y, y_stride);
            }
            // SAFETY: `check_tile` verified the bounds of every weight row, activation row and
            // output the kernel touches, and that the CPU has the features.
            unsafe {
                let (w, x, yp) = (t.w.as_ptr(), t.x.as_ptr(), y.as_mut_ptr());
                // The two-token kernel serves the groups of 2+ tokens outside the tiled
                // and the 4-token arithmetic (all of `matmul_rowwise`'s).
                let mode: u8 = $mode;
                // The 16-token engine takes the leading tokens whose arithmetic it has:
                // all of a tiled call's, the batched ones of a q4_K call.
                let n16 = match (k16, tiled) {
                    (false, _) => 0,
                    (true, true) => t.tokens,
                    (true, false) if mode == MODE_Q4 || rep => t.batched,
                    _ => 0,
                };
                let n16 = if n16 >= K16_FROM { n16 } else { 0 };
                if n16 > 0 {
                    super::k16::run::<super::k16::KQuant<{ $mode }>>(
                        w, t.w_stride, t.rows, nb, x, t.x_stride, n16, tiled, yp, y_stride,
                    );
                }
                let two = |t0: usize| !tiled && !rep && (mode != MODE_Q4 || t0 >= t.batched) && t.tokens - t0 >= 2;
                let mut p = KPREP.with(|c| c.take());
                if (n16..t.tokens).step_by(8).any(two) {
                    prep_k(mode, x, t.x_stride, t.tokens, nb, &mut p);
                }
                let mut t0 = n16;
                while t0 < t.tokens {
                    let (ws, r, xs, bt) = (t.w_stride, t.rows, t.x_stride, t.batched);
                    let nt = (t.tokens - t0).min(8);
                    if two(t0) {
                        let n = t.tokens;
                        match nt {
                            2 => $pairs::<1>(w, ws, r, nb, &p, n, t0, nt, yp, y_stride),
                            3 | 4 => $pairs::<2>(w, ws, r, nb, &p, n, t0, nt, yp, y_stride),
                            5 | 6 => $pairs::<3>(w, ws, r, nb, &p, n, t0, nt, yp, y_stride),
                            _ => $pairs::<4>(w, ws, r, nb, &p, n, t0, nt, yp, y_stride),
                        }
                        t0 += 8;
                        continue;
                    }
                    if (mode == MODE_Q4 || mode == MODE_Q6) && !tiled && t.tokens - t0 == 1 && t0 >= bt {
                        // one q4_K / q6_K token: four rows at a time, the same arithmetic
                        let (xt, yt) = (x.add(t0 * xs), yp.add(t0 * y_stride));
                        let done = if mode == MODE_Q4 {
                            super::q4_k_one::q4_k_one(w, ws, r, nb, xt, yt)
                        } else {
                            super::q6_k_one::q6_k_one(w, ws, r, nb, xt, yt)
                        };
                        if done < r {
                            let (w, yp) = (w.add(done * ws), yp.add(done));
                            $imp::<1>(w, ws, r - done, nb, x, xs, bt, tiled, rep, t0, yp, y_stride);
                        }
                        break;
                    }
                    // Up to 8 tokens per decoded block; llama.cpp's repacked q4_K batches
                    // are 4 tokens, which `batched` tells the q4_K arithmetic per token.
                    match t.tokens - t0 {
                        1 => $imp::<1>(w, ws, r, nb, x, xs, bt, tiled, rep, t0, yp, y_stride),
                        2 => $imp::<2>(w, ws, r, nb, x, xs, bt, tiled, rep, t0, yp, y_stride),
                        3 => $imp::<3>(w, ws, r, nb, x, xs, bt, tiled, rep, t0, yp, y_stride),
                        4 => $imp::<4>(w, ws, r, nb, x, xs, bt, tiled, rep, t0, yp, y_stride),
                        5 => $imp::<5>(w, ws, r, nb, x, xs, bt, tiled, rep, t0, yp, y_stride),
                        6 => $imp::<6>(w, ws, r, nb, x, xs, bt, tiled, rep, t0, yp, y_stride),
                        7 => $imp::<7>(w, ws, r, nb, x, xs, bt, tiled, rep, t0, yp, y_stride),
                        _ => $imp::<8>(w, ws, r, nb, x, xs, bt, tiled, rep, t0, yp, y_stride),
                    }
                    t0 += 8;
                }
                KPREP.with(|c| c.set(p));
            }
        }

        /// One row · one activation row (the one-token path of the tile kernel).
        pub fn $dot(n: usize, w: &[u8], x: &[u8]) -> f32 {
            dot_via_tile($name, n, w, x)
        }
    };
}

use super::avx2;

/// From this many tokens in one `matmul` llama.cpp runs its tiled K-quant kernels
/// (`ggml-cpu/tiled`, `ggml_tiled_min_batch`) for weights it has not repacked.
const TILED_FROM: usize = 8;

/// Tokens of a tile from which the K tiles run [`super::k16`]'s 16-token engine.
const K16_FROM: usize = 8;

/// Tokens per tile the K tiles ask [`crate::matmul`] for ([`crate::registry::Kernel::tile_tokens`]):
/// four 16-token groups per decoded weight band.
pub const K_TILE_TOKENS: usize = 64;

/// llama.cpp repacks q2_K (AVX-512) and q4_K (AVX2) weights whose row count is a
/// multiple of 8; only the others reach its tiled kernels.
fn unless_repacked(rows: usize) -> bool {
    !rows.is_multiple_of(8)
}

fn always(_rows: usize) -> bool {
    true
}

k_tile!(
    q2_k_tile,
    q2_k_run,
    q2_k_q8_k,
    q2_k_imp,
    q2_k_pairs,
    84,
    decode_q2_k,
    MODE_Q2,
    Some(avx2::q2_k_q8_k),
    unless_repacked
);
k_tile!(q3_k_tile, q3_k_run, q3_k_q8_k, q3_k_imp, q3_k_pairs, 110, decode_q3_k, MODE_Q3, Some(avx2::q3_k_q8_k), always);
k_tile!(q4_k_tile, q4_k_run, q4_k_q8_k, q4_k_imp, q4_k_pairs, 144, decode_q4_k, MODE_Q4, None, unless_repacked);
k_tile!(q5_k_tile, q5_k_run, q5_k_q8_k, q5_k_imp, q5_k_pairs, 176, decode_q5_k, MODE_Q5, None, always);
k_tile!(q6_k_tile, q6_k_run, q6_k_q8_k, q6_k_imp, q6_k_pairs, 210, decode_q6_k, MODE_Q6, None, always);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hsum_pair_has_the_bits_of_two_hsum_float_8() {
        if !has_vnni() {
            return;
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Values of mixed magnitude and sign (and exact zeros), so that the pairing
            // changes the rounding.
            let m = ((seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32;
            let e = ((seed >> 3) % 40) as i32 - 20;
            if seed.is_multiple_of(17) {
                -0.0
            } else {
                m * 2f32.powi(e)
            }
        };
        for _ in 0..100_000 {
            let v: [f32; 16] = std::array::from_fn(|_| next());
            // SAFETY: the features were checked above.
            unsafe {
                let x = _mm512_loadu_ps(v.as_ptr());
                let got = hsum_float_8_pair(x);
                let lo = hsum_float_8(_mm256_loadu_ps(v.as_ptr()));
                let hi = hsum_float_8(_mm256_loadu_ps(v.as_ptr().add(8)));
                assert_eq!((got[0].to_bits(), got[1].to_bits()), (lo.to_bits(), hi.to_bits()), "{v:?}");
            }
        }
    }
}
