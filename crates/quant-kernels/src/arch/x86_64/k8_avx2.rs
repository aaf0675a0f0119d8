//! The 8-token engine of the AVX2 K-quant tiles (q2_K … q6_K × Q8_K) for prompt batches:
//! the AVX2 counterpart of `k16.rs`, one i32 lane per token.
//!
//! The tile's activations are transposed once per call into groups of 8 tokens (`xq[kg]`:
//! four consecutive quants of each of the 8 tokens, one 256-bit vector per 4-element
//! column group `kg`), with their 16-element block sums (in i16 pairs) and scales; the
//! weights are decoded once per band of [`R`] rows into unsigned codes (`kquant_avx2.rs`'s
//! decoders) and i16 sub-block scales. The microkernel broadcasts four code bytes of a row
//! and multiplies them into the 8 tokens' quants with `vpmaddubsw`, sums a few of those in
//! i16 (as many as cannot overflow for the format's largest code), then one `vpmaddwd`
//! with the sub-block's scale: 8 tokens × 4 elements per `vpmaddubsw`, where the
//! one-row kernels of `kquant_avx2.rs` spend a scale `vpmaddwd` per `vpmaddubsw` and a
//! horizontal sum per block, row and token.
//!
//! The integer sums are exact, so each output has the bits of the arithmetic it mirrors
//! whatever the summation order of its integers; the float steps are those of
//! `kquant_avx2.rs`'s kernels (llama.cpp's AVX2 build), one lane per token:
//! - **tiled** (ggml-cpu's tiled K-quant matmul): per block
//!   `r = f32(Σ scale·(code − bias)·x)·d`, then `r = fnmadd(dmin, f32(Σ min·bsum), r)`
//!   (q2_K, q4_K, q5_K) and `acc = fma(r, dx, acc)`;
//! - **batched** (q4_K, llama.cpp's repacked AVX2 `gemm_q4_K_8x8_q8_K`): per block and
//!   64-element step `acc = fma(f32(Σ sc·code·x), d·dx, acc)` and
//!   `accm = fma(f32(Σ mn·bsum), dmin·dx, accm)`, `acc − accm` last.
//!
//! The one-row kernels (`kquant_avx2.rs`'s `imp`) are the oracle of the tests here: every
//! output bit for bit.

use core::arch::x86_64::*;

use super::kquant_avx2::{decode_q2_k, decode_q3_k, decode_q4_k, decode_q5_k, decode_q6_k, KBlock};
use crate::scalar::act::Q8_K_BYTES;
use crate::scalar::ktiled::{Q2_K, Q3_K, Q4_K, Q5_K};

/// Tokens per group (the i32 lanes of one vector).
const G: usize = 8;
/// Weight rows per band (the accumulators of one pass: two vectors a row, plus the
/// activations and the broadcast codes, in AVX2's sixteen registers).
const R: usize = 4;
/// 4-element column groups per 256-element block.
const KG: usize = 64;

/// Elements per sub-block (one scale) of K type `ty`.
const fn sub_block(ty: u32) -> usize {
    if ty == Q4_K || ty == Q5_K {
        32
    } else {
        16
    }
}

/// Column groups summed in i16 before the scale's `vpmaddwd`: the most for which
/// `n · 2 · max_code · 128 ≤ 32767` (and a divisor of the sub-block's groups).
const fn chunk(ty: u32) -> usize {
    match ty {
        Q4_K => 8,        // codes ≤ 15: 8 · 3840
        Q5_K => 4,        // ≤ 31: 4 · 7936
        Q2_K | Q3_K => 4, // ≤ 3 / ≤ 7: the whole 16-element sub-block
        _ => 2,           // q6_K, ≤ 63: 2 · 16128
    }
}

/// The unsigned offset of the codes (code = value + bias): q6_K 32, q3_K 4.
const fn bias_shift(ty: u32) -> Option<i32> {
    match ty {
        Q3_K => Some(2),
        Q2_K | Q4_K | Q5_K => None,
        _ => Some(5),
    }
}

const fn has_min(ty: u32) -> bool {
    ty == Q2_K || ty == Q4_K || ty == Q5_K
}

/// Per-thread scratch: a tile's activations in groups of [`G`] tokens and one band of
/// decoded weight rows.
#[derive(Default)]
struct K8 {
    /// `xq[(g·nb + b)·64 + kg]`: quants `4kg..4kg+4` of block `b` of the group's 8 tokens
    /// (token `l` in i32 lane `l`; missing tokens zero).
    xq: Vec<__m256i>,
    /// `bp16[(g·nb + b)·8 + q]`: the i16 block sums `2q`, `2q+1` (16 elements each) of
    /// each token as the two halves of its lane, for `vpmaddwd`.
    bp16: Vec<__m256i>,
    /// `dx[g·nb + b]`: the activation scales of the group's tokens.
    dx: Vec<__m256>,
    /// `wq[r·nb·256 + b·256 + e]`: the band's unsigned codes, in element order.
    wq: Vec<u8>,
    /// `sc[(r·nb + b)·16 + s]`: sub-block `s`'s scale as two equal i16 halves.
    sc: Vec<u32>,
    /// `scp[(r·nb + b)·8 + q]`: the i16 scales of 16-element groups `2q`, `2q+1` (q6_K,
    /// q3_K: the bias correction).
    scp: Vec<u32>,
    /// `mnp[(r·nb + b)·8 + q]`: the i16 mins of 16-element groups `2q`, `2q+1` (q4_K,
    /// q5_K: each 32-element sub-block's min twice).
    mnp: Vec<u32>,
    /// `d[r·nb + b]`, `dmin[r·nb + b]`.
    d: Vec<f32>,
    dmin: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::Cell<K8> = std::cell::Cell::new(K8::default());
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn decode<const TY: u32>(b: *const u8) -> KBlock {
    match TY {
        Q2_K => decode_q2_k(b),
        Q3_K => decode_q3_k(b),
        Q4_K => decode_q4_k(b),
        Q5_K => decode_q5_k(b),
        _ => decode_q6_k(b),
    }
}

/// Decodes the block at `b` into slot `rb` (`row·nb + block`) of `p`'s band.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn store<const TY: u32>(b: *const u8, p: &mut K8, rb: usize) {
    let kb = decode::<TY>(b);
    let q = p.wq.as_mut_ptr().add(rb * 256);
    for (k, v) in kb.q.iter().enumerate() {
        _mm256_storeu_si256(q.add(32 * k) as *mut __m256i, *v);
    }
    let sc = p.sc.as_mut_ptr().add(rb * 16);
    for (k, v) in kb.s16.iter().enumerate() {
        // Lanes 0–7: group 2k's scale, 8–15: group 2k + 1's (q4_K/q5_K: sub-block k's).
        let mut l = [0u16; 16];
        _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, *v);
        let pair = |s: u16| (s as u32) | ((s as u32) << 16);
        if sub_block(TY) == 32 {
            *sc.add(k) = pair(l[0]);
        } else {
            *sc.add(2 * k) = pair(l[0]);
            *sc.add(2 * k + 1) = pair(l[8]);
        }
    }
    _mm256_storeu_si256(p.scp.as_mut_ptr().add(rb * 8) as *mut __m256i, kb.sc16);
    _mm256_storeu_si256(p.mnp.as_mut_ptr().add(rb * 8) as *mut __m256i, kb.mn16);
    p.d[rb] = kb.d;
    p.dmin[rb] = kb.dmin;
}

/// Transposes tokens `0..nt` of the tile (`x`, rows `x_stride` apart, `nb` Q8_K blocks
/// each) into `p`'s groups.
///
/// # Safety
/// The tokens' activation rows are readable.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn prep(x: *const u8, x_stride: usize, nt: usize, nb: usize, p: &mut K8) {
    let ng = nt.div_ceil(G);
    let (zi, zf) = (_mm256_setzero_si256(), _mm256_setzero_ps());
    p.xq.clear();
    p.xq.resize(ng * nb * KG, zi);
    p.bp16.clear();
    p.bp16.resize(ng * nb * 8, zi);
    p.dx.clear();
    p.dx.resize(ng * nb, zf);
    let xq = p.xq.as_mut_ptr() as *mut u32;
    let bp16 = p.bp16.as_mut_ptr() as *mut u32;
    let dx = p.dx.as_mut_ptr() as *mut f32;
    for tok in 0..nt {
        let (g, l) = (tok / G, tok % G);
        for b in 0..nb {
            let src = x.add(tok * x_stride + b * Q8_K_BYTES);
            let gb = g * nb + b;
            let codes = xq.add(gb * KG * G + l);
            for kg in 0..KG {
                *codes.add(kg * G) = (src.add(4 + 4 * kg) as *const u32).read_unaligned();
            }
            for q in 0..8 {
                *bp16.add((gb * 8 + q) * G + l) = (src.add(260 + 4 * q) as *const u32).read_unaligned();
            }
            *dx.add(gb * G + l) = (src as *const f32).read_unaligned();
        }
    }
}

/// Decodes rows `r0..r0+nr` (`nr ≤ R`; the band's other rows are zero) into `p`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_band<const TY: u32, const WB: usize>(
    w: *const u8,
    w_stride: usize,
    r0: usize,
    nr: usize,
    nb: usize,
    p: &mut K8,
) {
    // Rows `0..nr` are overwritten whole; only a short band's other rows are zeroed.
    fn fit<T: Copy>(v: &mut Vec<T>, per_row: usize, nr: usize, zero: T) {
        v.resize(R * per_row, zero);
        v[nr * per_row..].fill(zero);
    }
    fit(&mut p.wq, nb * 256, nr, 0);
    fit(&mut p.sc, nb * 16, nr, 0);
    fit(&mut p.scp, nb * 8, nr, 0);
    fit(&mut p.mnp, nb * 8, nr, 0);
    fit(&mut p.d, nb, nr, 0.0);
    fit(&mut p.dmin, nb, nr, 0.0);
    for r in 0..nr {
        let row = w.add((r0 + r) * w_stride);
        for b in 0..nb {
            store::<TY>(row.add(b * WB), p, r * nb + b);
        }
    }
}

/// `Σ scale·Σ code·x` over sub-blocks `subs` of block `b`, for the band's rows against
/// the 8 tokens of `xq` (the group's block `b`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scaled_sums<const TY: u32>(
    p: &K8,
    xq: *const __m256i,
    nb: usize,
    b: usize,
    subs: core::ops::Range<usize>,
) -> [__m256i; R] {
    let ngk = sub_block(TY) / 4;
    let (wq, rs) = (p.wq.as_ptr().add(b * 256), nb * 256);
    let mut sum = [_mm256_setzero_si256(); R];
    for s in subs {
        let scale: [__m256i; R] =
            core::array::from_fn(|r| _mm256_set1_epi32(*p.sc.get_unchecked((r * nb + b) * 16 + s) as i32));
        for c0 in (ngk * s..ngk * (s + 1)).step_by(chunk(TY)) {
            let mut a = [_mm256_setzero_si256(); R];
            for kg in c0..c0 + chunk(TY) {
                let c = *xq.add(kg);
                for (r, a) in a.iter_mut().enumerate() {
                    let u = (wq.add(r * rs + 4 * kg) as *const i32).read_unaligned();
                    *a = _mm256_add_epi16(*a, _mm256_maddubs_epi16(_mm256_set1_epi32(u), c));
                }
            }
            for r in 0..R {
                sum[r] = _mm256_add_epi32(sum[r], _mm256_madd_epi16(a[r], scale[r]));
            }
        }
    }
    sum
}

/// `Σ pair·bsum` over the 16-element group pairs `qs` of slot `rb` (`table`: `scp` or
/// `mnp`) against block `gb` of the group: exact i32 per token.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn pair_sums(table: &[u32], bp16: &[__m256i], rb: usize, gb: usize, qs: core::ops::Range<usize>) -> __m256i {
    let mut s = _mm256_setzero_si256();
    for q in qs {
        let pr = _mm256_set1_epi32(*table.get_unchecked(rb * 8 + q) as i32);
        s = _mm256_add_epi32(s, _mm256_madd_epi16(pr, *bp16.get_unchecked(gb * 8 + q)));
    }
    s
}

/// The [`R`] × 8 outputs of the band in `p` against token group `g`, the tiled
/// arithmetic (see the module comment).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn micro_tiled<const TY: u32>(p: &K8, nb: usize, g: usize) -> [__m256; R] {
    let nsub = 256 / sub_block(TY);
    let mut facc = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let gb = g * nb + b;
        let s1 = scaled_sums::<TY>(p, p.xq.as_ptr().add(gb * KG), nb, b, 0..nsub);
        let dx = *p.dx.get_unchecked(gb);
        for r in 0..R {
            let rb = r * nb + b;
            let mut v = s1[r];
            if let Some(sh) = bias_shift(TY) {
                // Σ scale·bsum over the 16-element groups, exact, times the bias.
                let corr = pair_sums(&p.scp, &p.bp16, rb, gb, 0..8);
                v = _mm256_sub_epi32(v, _mm256_sll_epi32(corr, _mm_cvtsi32_si128(sh)));
            }
            let mut f = _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(*p.d.get_unchecked(rb)));
            if has_min(TY) {
                let s2 = pair_sums(&p.mnp, &p.bp16, rb, gb, 0..8);
                f = _mm256_fnmadd_ps(_mm256_set1_ps(*p.dmin.get_unchecked(rb)), _mm256_cvtepi32_ps(s2), f);
            }
            facc[r] = _mm256_fmadd_ps(f, dx, facc[r]);
        }
    }
    facc
}

/// The [`R`] × 8 outputs of the band in `p` (q4_K) against token group `g`, llama.cpp's
/// repacked 4-token gemm arithmetic (see the module comment): one fma per 64-element step
/// for the scales and one for the mins.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn micro_batched(p: &K8, nb: usize, g: usize) -> [__m256; R] {
    let mut facc = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let gb = g * nb + b;
        let xq = p.xq.as_ptr().add(gb * KG);
        let dx = *p.dx.get_unchecked(gb);
        for st in 0..4 {
            let is = scaled_sums::<Q4_K>(p, xq, nb, b, 2 * st..2 * st + 2);
            for r in 0..R {
                let ddx = _mm256_mul_ps(_mm256_set1_ps(*p.d.get_unchecked(r * nb + b)), dx);
                facc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r]), ddx, facc[r]);
            }
        }
    }
    for (r, facc) in facc.iter_mut().enumerate() {
        let mut accm = _mm256_setzero_ps();
        for b in 0..nb {
            let (gb, rb) = (g * nb + b, r * nb + b);
            let dm = _mm256_mul_ps(_mm256_set1_ps(*p.dmin.get_unchecked(rb)), *p.dx.get_unchecked(gb));
            for st in 0..4 {
                let im = pair_sums(&p.mnp, &p.bp16, rb, gb, 2 * st..2 * st + 2);
                accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(im), dm, accm);
            }
        }
        *facc = _mm256_sub_ps(*facc, accm);
    }
    facc
}

/// Rows `0..rows` (of `nb` blocks of `WB` bytes, `w_stride` bytes apart) × tokens `0..nt`
/// (Q8_K rows `x_stride` bytes apart) into `y[t·y_stride + r]`: the tiled arithmetic, or
/// for q4_K with `!tiled` the batched one.
///
/// # Safety
/// The caller checked the tile (`check_tile`) for `nt` tokens and the CPU features
/// ([`super::has_avx2`]).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn run<const TY: u32, const WB: usize>(
    w: *const u8,
    w_stride: usize,
    rows: usize,
    nb: usize,
    x: *const u8,
    x_stride: usize,
    nt: usize,
    tiled: bool,
    y: *mut f32,
    y_stride: usize,
) {
    debug_assert!(tiled || TY == Q4_K, "only q4_K has the batched arithmetic on AVX2");
    let mut p = SCRATCH.with(|c| c.take());
    prep(x, x_stride, nt, nb, &mut p);
    let ng = nt.div_ceil(G);
    for r0 in (0..rows).step_by(R) {
        let nr = (rows - r0).min(R);
        decode_band::<TY, WB>(w, w_stride, r0, nr, nb, &mut p);
        for g in 0..ng {
            let acc = if tiled { micro_tiled::<TY>(&p, nb, g) } else { micro_batched(&p, nb, g) };
            let mut out = [[0f32; G]; R];
            for (o, a) in out.iter_mut().zip(acc) {
                _mm256_storeu_ps(o.as_mut_ptr(), a);
            }
            for l in 0..(nt - g * G).min(G) {
                let yt = y.add((g * G + l) * y_stride + r0);
                for (r, o) in out.iter().enumerate().take(nr) {
                    *yt.add(r) = o[l];
                }
            }
        }
    }
    SCRATCH.with(|c| c.set(p));
}
