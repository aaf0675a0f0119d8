//! The 16-token engine of the AVX-512 VNNI tiles of ggml-cpu's tiled formats (q2_K …
//! q6_K, IQ4_XS and the IQ2/IQ3 lattice types × Q8_K) for prompt batches: ggml-cpu's
//! tiled layout (`ggml-cpu/tiled`, `tiled_run_micro_vnni_8x16`), one `vpdpbusd` lane per
//! token.
//!
//! The tile's activations are transposed once per call into groups of 16 tokens
//! (`xq[kg]`: four consecutive quants of each of the 16 tokens, one 512-bit vector per
//! 4-element column group `kg`), with their block sums and scales; the weights are decoded
//! once per band of 8 rows into unsigned codes and i32 sub-block scales (a [`Format`]: the
//! K decoders of [`super::vnni`], or a [`Biased`] decoder of `iq4.rs` / `lattice_vnni.rs`).
//! The microkernel broadcasts four code bytes of a row and multiplies them into the 16
//! tokens' quants: 8 rows × 16 tokens per pass, 64 multiply-adds per instruction, where
//! the one-token-at-a-time kernels spend a `vpmulld` and a horizontal sum per sub-block
//! and token.
//!
//! The integer sums are exact, so each output has the bits of the arithmetic it mirrors
//! whatever the summation order of its integers; the float steps are those of the kernels
//! it stands in for, one lane per token:
//! - **tiled** (ggml-cpu's tiled kernels: q3_K, q5_K, q6_K, IQ4_XS, the lattice types, and
//!   q2_K/q4_K weights llama.cpp does not repack): per block
//!   `r = f32(Σ scale·(raw − bias·bsum))·d`, then `r = fnmadd(dmin, f32(Σ min·bsum), r)`
//!   (formats with mins) and `acc = fma(r, dx, acc)`;
//! - **batched** (llama.cpp's repacked `gemm_q4_K_8x8_q8_K` / `gemm_q2_K_8x8_q8_K`): per
//!   block and step of 64 (q4_K: two sub-blocks) or 128 elements (q2_K: eight)
//!   `acc = fma(f32(Σ sc·raw), d·dx, acc)` and `accm = fma(f32(Σ mn·bs), dmin·dx, accm)`,
//!   `acc − accm` last.
//!
//! The one-token kernels (`vnni.rs`'s `k_tile!`, `iq4.rs`'s `xs_tiled8`, `lattice_vnni.rs`'s
//! `tiled_rows`) are the oracle of the tests here: every output bit for bit.

use core::arch::x86_64::*;

use super::vnni::{
    decode_q2_k, decode_q3_k, decode_q4_k, decode_q5_k, decode_q6_k, KBlock, MODE_Q2, MODE_Q3, MODE_Q4, MODE_Q5,
    MODE_Q6,
};
use crate::scalar::act::Q8_K_BYTES;

/// Tokens per group (the lanes of one vector).
const G: usize = 16;
/// Weight rows per band (the accumulators of one pass).
const R: usize = 8;
/// 4-element column groups per 256-element block.
const KG: usize = 64;

/// Per-thread scratch: a tile's activations in groups of [`G`] tokens and one band of
/// decoded weight rows.
#[derive(Default)]
pub(super) struct K16 {
    /// `xq[(g·nb + b)·64 + kg]`: quants `4kg..4kg+4` of block `b` of the group's 16 tokens
    /// (token `l` in i32 lane `l`; missing tokens zero).
    xq: Vec<__m512i>,
    /// `bp16[(g·nb + b)·8 + q]`: the i16 block sums `2q`, `2q+1` (16 elements each) of
    /// each token as the two halves of its lane, for `vpdpwssd`.
    bp16: Vec<__m512i>,
    /// `bp32[(g·nb + b)·4 + p]`: the same for the 32-element sums `2p`, `2p+1`.
    bp32: Vec<__m512i>,
    /// `dx[g·nb + b]`: the activation scales of the group's tokens.
    dx: Vec<__m512>,
    /// `wq[r·nb·256 + b·256 + e]`: the band's unsigned codes, in element order.
    wq: Vec<u8>,
    /// `sc[(r·nb + b)·16 + s]`: sub-block scales (8 or 16 per block).
    sc: Vec<i32>,
    /// `scp[(r·nb + b)·8 + q]`: the i16 scales of 16-element groups `2q`, `2q+1` (q6_K,
    /// q3_K: the bias correction).
    scp: Vec<u32>,
    /// `mnp[(r·nb + b)·8 + q]`: the i16 mins of groups `2q`, `2q+1` (q2_K: 16-element,
    /// q4_K/q5_K: 32-element sub-blocks, four pairs).
    mnp: Vec<u32>,
    /// `d[r·nb + b]`, `dmin[r·nb + b]`.
    d: Vec<f32>,
    dmin: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::Cell<K16> = std::cell::Cell::new(K16::default());
}

/// The arithmetic of [`Biased`] formats with one scale per 16 elements.
pub(super) const MODE_B16: u8 = 16;
/// The arithmetic of [`Biased`] formats with one scale per 32 elements.
pub(super) const MODE_B32: u8 = 32;

/// Elements per sub-block of a mode.
const fn sub_block(mode: u8) -> usize {
    if mode == MODE_Q4 || mode == MODE_Q5 || mode == MODE_B32 {
        32
    } else {
        16
    }
}

/// The unsigned offset of a mode's codes (code = value + bias).
const fn bias(mode: u8) -> i32 {
    match mode {
        MODE_Q6 => 32,
        MODE_Q3 => 4,
        MODE_B16 | MODE_B32 => 128,
        _ => 0,
    }
}

const fn has_min(mode: u8) -> bool {
    mode == MODE_Q2 || mode == MODE_Q4 || mode == MODE_Q5
}

/// Weight bytes per block of a mode.
pub(super) const fn block_bytes(mode: u8) -> usize {
    match mode {
        MODE_Q2 => 84,
        MODE_Q3 => 110,
        MODE_Q4 => 144,
        MODE_Q5 => 176,
        _ => 210,
    }
}

/// A weight format the engine runs: its arithmetic ([`Format::MODE`]: a K type's, or
/// [`MODE_B16`]/[`MODE_B32`]) and a block decoder.
pub(super) trait Format {
    /// The arithmetic: one of `vnni.rs`'s `MODE_*`, [`MODE_B16`] or [`MODE_B32`].
    const MODE: u8;
    /// Bytes per 256-element block.
    const BYTES: usize;
    /// Decodes the block at `b` into slot `rb` (`row·nb + block`) of `p`'s band.
    ///
    /// # Safety
    /// AVX-512 VNNI present; the block readable; `p`'s band buffers sized by
    /// [`decode_band`].
    unsafe fn store(b: *const u8, p: &mut K16, rb: usize);
}

/// A K type (`MODE` one of `vnni.rs`'s `MODE_*`), decoded by [`super::vnni`]'s decoders.
pub(super) struct KQuant<const MODE: u8>;

impl<const MODE: u8> Format for KQuant<MODE> {
    const MODE: u8 = MODE;
    const BYTES: usize = block_bytes(MODE);

    #[inline(always)]
    unsafe fn store(b: *const u8, p: &mut K16, rb: usize) {
        let kb = decode::<MODE>(b);
        let q = p.wq.as_mut_ptr().add(rb * 256);
        for (k, v) in kb.q.iter().enumerate() {
            _mm256_storeu_si256(q.add(32 * k) as *mut __m256i, *v);
        }
        let sc = &mut p.sc[rb * 16..rb * 16 + 16];
        for (k, v) in kb.sv.iter().enumerate() {
            let mut l = [0i32; 8];
            _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, *v);
            if sub_block(MODE) == 32 {
                sc[k] = l[0];
            } else {
                sc[2 * k] = l[0];
                sc[2 * k + 1] = l[4];
            }
        }
        _mm256_storeu_si256(p.scp.as_mut_ptr().add(rb * 8) as *mut __m256i, kb.sc16);
        _mm256_storeu_si256(p.mnp.as_mut_ptr().add(rb * 8) as *mut __m256i, kb.mn16);
        p.d[rb] = kb.d;
        p.dmin[rb] = kb.dmin;
    }
}

/// A format of ggml-cpu's tiled matmul with `BIAS = 128` (IQ4_XS, the IQ2/IQ3 lattice
/// types): signed weights stored as `w + 128`, one scale per [`Biased::SUB`] elements,
/// no mins.
pub(super) trait Biased {
    /// Bytes per 256-element block.
    const BYTES: usize;
    /// Elements per scale: 16 or 32.
    const SUB: usize;
    /// Writes the block's 256 codes `w + 128` (element order) to `codes` and its scales
    /// to `sc[0..256 / SUB]`; returns the tiled path's f32 weight scale.
    ///
    /// # Safety
    /// AVX-512 VNNI present; the block readable, 256 bytes writable at `codes`.
    unsafe fn decode(b: *const u8, codes: *mut u8, sc: &mut [i32; 16]) -> f32;
}

/// The [`Format`] of a [`Biased`] decoder.
pub(super) struct Bias128<D>(core::marker::PhantomData<D>);

impl<D: Biased> Format for Bias128<D> {
    const MODE: u8 = if D::SUB == 32 { MODE_B32 } else { MODE_B16 };
    const BYTES: usize = D::BYTES;

    #[inline(always)]
    unsafe fn store(b: *const u8, p: &mut K16, rb: usize) {
        let mut sc = [0i32; 16];
        p.d[rb] = D::decode(b, p.wq.as_mut_ptr().add(rb * 256), &mut sc);
        p.sc[rb * 16..rb * 16 + 16].copy_from_slice(&sc);
        for q in 0..8 {
            // The scales of 16-element groups 2q, 2q+1, for the bias correction.
            let (lo, hi) = if D::SUB == 16 { (sc[2 * q], sc[2 * q + 1]) } else { (sc[q], sc[q]) };
            p.scp[rb * 8 + q] = (lo as u16 as u32) | ((hi as u16 as u32) << 16);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn decode<const MODE: u8>(b: *const u8) -> KBlock {
    match MODE {
        MODE_Q2 => decode_q2_k(b),
        MODE_Q3 => decode_q3_k(b),
        MODE_Q4 => decode_q4_k(b),
        MODE_Q5 => decode_q5_k(b),
        _ => decode_q6_k(b),
    }
}

/// Transposes tokens `t0..t0+nt` of the tile (`x`, rows `x_stride` apart, `nb` Q8_K
/// blocks each) into `p`'s groups.
///
/// # Safety
/// The tokens' activation rows are readable.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn prep(x: *const u8, x_stride: usize, t0: usize, nt: usize, nb: usize, p: &mut K16) {
    let ng = nt.div_ceil(G);
    let (zi, zf) = (_mm512_setzero_si512(), _mm512_setzero_ps());
    p.xq.clear();
    p.xq.resize(ng * nb * KG, zi);
    p.bp16.clear();
    p.bp16.resize(ng * nb * 8, zi);
    p.bp32.clear();
    p.bp32.resize(ng * nb * 4, zi);
    p.dx.clear();
    p.dx.resize(ng * nb, zf);
    let xq = p.xq.as_mut_ptr() as *mut u32;
    let bp16 = p.bp16.as_mut_ptr() as *mut u32;
    let bp32 = p.bp32.as_mut_ptr() as *mut u32;
    let dx = p.dx.as_mut_ptr() as *mut f32;
    for tok in 0..nt {
        let (g, l) = (tok / G, tok % G);
        for b in 0..nb {
            let src = x.add((t0 + tok) * x_stride + b * Q8_K_BYTES);
            let gb = g * nb + b;
            let codes = xq.add(gb * KG * G + l);
            for kg in 0..KG {
                *codes.add(kg * G) = (src.add(4 + 4 * kg) as *const u32).read_unaligned();
            }
            let mut bs = [0i16; 16];
            for (q, v) in bs.iter_mut().enumerate() {
                *v = (src.add(260 + 2 * q) as *const i16).read_unaligned();
            }
            for q in 0..8 {
                *bp16.add((gb * 8 + q) * G + l) = (bs[2 * q] as u16 as u32) | ((bs[2 * q + 1] as u16 as u32) << 16);
            }
            for pp in 0..4 {
                // |Σ| ≤ 32 · 127: an i16 each.
                let lo = bs[4 * pp] + bs[4 * pp + 1];
                let hi = bs[4 * pp + 2] + bs[4 * pp + 3];
                *bp32.add((gb * 4 + pp) * G + l) = (lo as u16 as u32) | ((hi as u16 as u32) << 16);
            }
            *dx.add(gb * G + l) = (src as *const f32).read_unaligned();
        }
    }
}

/// Decodes rows `r0..r0+nr` (`nr ≤ 8`; the band's other rows are zero) into `p`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn decode_band<F: Format>(w: *const u8, w_stride: usize, r0: usize, nr: usize, nb: usize, p: &mut K16) {
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
            F::store(row.add(b * F::BYTES), p, r * nb + b);
        }
    }
}

/// `Σ scale·Σ code·x` over sub-blocks `subs` (`ngk` 4-element column groups each) of
/// block `b`, for the band's 8 rows against the 16 tokens of `xq` (the group's block `b`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn scaled_sums(
    p: &K16,
    xq: *const __m512i,
    nb: usize,
    b: usize,
    subs: core::ops::Range<usize>,
    ngk: usize,
) -> [__m512i; R] {
    let (wq, rs) = (p.wq.as_ptr(), nb * 256);
    let mut sum = [_mm512_setzero_si512(); R];
    for s in subs {
        let mut a = [_mm512_setzero_si512(); R];
        for kg in ngk * s..ngk * (s + 1) {
            let c = *xq.add(kg);
            for (r, a) in a.iter_mut().enumerate() {
                let u = (wq.add(r * rs + b * 256 + 4 * kg) as *const i32).read_unaligned();
                *a = _mm512_dpbusd_epi32(*a, _mm512_set1_epi32(u), c);
            }
        }
        for r in 0..R {
            let sc = _mm512_set1_epi32(*p.sc.get_unchecked((r * nb + b) * 16 + s));
            sum[r] = _mm512_add_epi32(sum[r], _mm512_mullo_epi32(a[r], sc));
        }
    }
    sum
}

/// The 8 × 16 outputs of the band in `p` against token group `g`, ggml's tiled
/// arithmetic (see the module comment).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn micro_tiled<F: Format>(p: &K16, nb: usize, g: usize) -> [__m512; R] {
    let mode = F::MODE;
    let sub = sub_block(mode);
    let (nsub, ngk) = (256 / sub, sub / 4);
    let mut facc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let gb = g * nb + b;
        let xq = p.xq.as_ptr().add(gb * KG);
        let s1 = scaled_sums(p, xq, nb, b, 0..nsub, ngk);
        let dx = *p.dx.get_unchecked(gb);
        for r in 0..R {
            let rb = r * nb + b;
            let mut v = s1[r];
            if bias(mode) != 0 {
                // Σ scale·bsum over the 16-element groups, exact.
                let mut corr = _mm512_setzero_si512();
                for q in 0..8 {
                    let sp = _mm512_set1_epi32(*p.scp.get_unchecked(rb * 8 + q) as i32);
                    corr = _mm512_dpwssd_epi32(corr, sp, *p.bp16.get_unchecked(gb * 8 + q));
                }
                v = _mm512_sub_epi32(v, _mm512_mullo_epi32(corr, _mm512_set1_epi32(bias(mode))));
            }
            let mut f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(*p.d.get_unchecked(rb)));
            if has_min(mode) {
                let mut s2 = _mm512_setzero_si512();
                if mode == MODE_Q2 {
                    for q in 0..8 {
                        let mp = _mm512_set1_epi32(*p.mnp.get_unchecked(rb * 8 + q) as i32);
                        s2 = _mm512_dpwssd_epi32(s2, mp, *p.bp16.get_unchecked(gb * 8 + q));
                    }
                } else {
                    for q in 0..4 {
                        let mp = _mm512_set1_epi32(*p.mnp.get_unchecked(rb * 8 + q) as i32);
                        s2 = _mm512_dpwssd_epi32(s2, mp, *p.bp32.get_unchecked(gb * 4 + q));
                    }
                }
                f = _mm512_fnmadd_ps(_mm512_set1_ps(*p.dmin.get_unchecked(rb)), _mm512_cvtepi32_ps(s2), f);
            }
            facc[r] = _mm512_fmadd_ps(f, dx, facc[r]);
        }
    }
    facc
}

/// The 8 × 16 outputs of the band in `p` (q4_K or q2_K) against token group `g`,
/// llama.cpp's repacked 4-token gemm arithmetic (see the module comment): one fma per
/// step of 64 (q4_K) or 128 (q2_K) elements for the scales and for the mins.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn micro_batched<F: Format>(p: &K16, nb: usize, g: usize) -> [__m512; R] {
    let q2 = F::MODE == MODE_Q2;
    let sub = sub_block(F::MODE);
    // Sub-blocks per fma step.
    let per_step = if q2 { 8 } else { 2 };
    let steps = 256 / sub / per_step;
    let ngk = sub / 4;
    let mut facc = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let gb = g * nb + b;
        let xq = p.xq.as_ptr().add(gb * KG);
        let dx = *p.dx.get_unchecked(gb);
        for st in 0..steps {
            let is = scaled_sums(p, xq, nb, b, st * per_step..(st + 1) * per_step, ngk);
            for r in 0..R {
                let ddx = _mm512_mul_ps(_mm512_set1_ps(*p.d.get_unchecked(r * nb + b)), dx);
                facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[r]), ddx, facc[r]);
            }
        }
    }
    for (r, facc) in facc.iter_mut().enumerate() {
        let mut accm = _mm512_setzero_ps();
        for b in 0..nb {
            let gb = g * nb + b;
            let rb = r * nb + b;
            let dm = _mm512_mul_ps(_mm512_set1_ps(*p.dmin.get_unchecked(rb)), *p.dx.get_unchecked(gb));
            for st in 0..steps {
                let mut im = _mm512_setzero_si512();
                if q2 {
                    // The mins of the half's 16-element groups, in pairs.
                    for q in 4 * st..4 * st + 4 {
                        let mp = _mm512_set1_epi32(*p.mnp.get_unchecked(rb * 8 + q) as i32);
                        im = _mm512_dpwssd_epi32(im, mp, *p.bp16.get_unchecked(gb * 8 + q));
                    }
                } else {
                    let mp = _mm512_set1_epi32(*p.mnp.get_unchecked(rb * 8 + st) as i32);
                    im = _mm512_dpwssd_epi32(im, mp, *p.bp32.get_unchecked(gb * 4 + st));
                }
                accm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), dm, accm);
            }
        }
        *facc = _mm512_sub_ps(*facc, accm);
    }
    facc
}

/// Rows `0..rows` (of `nb` blocks, `w_stride` bytes apart) × tile tokens `0..nt` into
/// `y[t·y_stride + r]`: the tiled arithmetic, or for q4_K/q2_K with `!tiled` the batched one.
///
/// # Safety
/// The caller checked the tile (`check_tile`) for `nt` tokens and the CPU features
/// ([`super::vnni::has_vnni`]).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn run<F: Format>(
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
    let mut p = SCRATCH.with(|c| c.take());
    prep(x, x_stride, 0, nt, nb, &mut p);
    let ng = nt.div_ceil(G);
    for r0 in (0..rows).step_by(R) {
        let nr = (rows - r0).min(R);
        decode_band::<F>(w, w_stride, r0, nr, nb, &mut p);
        for g in 0..ng {
            let batched = !tiled && (F::MODE == MODE_Q4 || F::MODE == MODE_Q2);
            let acc = if batched { micro_batched::<F>(&p, nb, g) } else { micro_tiled::<F>(&p, nb, g) };
            let mut out = [[0f32; G]; R];
            for (o, a) in out.iter_mut().zip(acc) {
                _mm512_storeu_ps(o.as_mut_ptr(), a);
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

#[cfg(test)]
mod tests {
    use super::super::engine_tests::{compare_all, Run, Shape};

    /// The shapes of this engine's tests: odd total rows make q2_K/q4_K tiled, even ones
    /// (multiples of 8 here) their repacked arithmetic.
    const SHAPE: Shape = Shape {
        rows: &[8, 13, 24, 40, 7, 16],
        total_rows: |case, rows| if case % 2 == 0 { rows } else { rows * 8 + 1 },
    };
    use super::super::iq4::xs_run_vnni;
    use super::super::lattice::{tile_run, Iq2S, Iq2Xs, Iq2Xxs, Iq3S, Iq3Xxs};
    use super::super::lattice_vnni::Vnni;
    use super::super::vnni::{has_vnni, q2_k_run, q3_k_run, q4_k_run, q5_k_run, q6_k_run};

    /// The 16-token engine against the kernels it mirrors (`k16: false`), bit for bit,
    /// over random matrices of every K type, ragged row bands and token groups, the
    /// tiled and the batched q4_K/q2_K arithmetic.
    #[test]
    fn sixteen_token_engine_matches_the_one_token_kernels_bitwise() {
        if !has_vnni() {
            eprintln!("skipped: no AVX-512 VNNI here");
            return;
        }
        let types: [(&str, Run); 5] =
            [("q2_K", q2_k_run), ("q3_K", q3_k_run), ("q4_K", q4_k_run), ("q5_K", q5_k_run), ("q6_K", q6_k_run)];
        compare_all(&types, 16, 24, &SHAPE);
    }

    /// The same for the `BIAS = 128` formats: IQ4_XS and the lattice types, against their
    /// 8-row tiled kernels.
    #[test]
    fn sixteen_token_engine_matches_the_biased_tiled_kernels_bitwise() {
        if !has_vnni() {
            eprintln!("skipped: no AVX-512 VNNI here");
            return;
        }
        let types: [(&str, Run); 6] = [
            ("iq4_xs", xs_run_vnni),
            ("iq3_s", tile_run::<Vnni, Iq3S>),
            ("iq2_xs", tile_run::<Vnni, Iq2Xs>),
            ("iq2_xxs", tile_run::<Vnni, Iq2Xxs>),
            ("iq3_xxs", tile_run::<Vnni, Iq3Xxs>),
            ("iq2_s", tile_run::<Vnni, Iq2S>),
        ];
        compare_all(&types, 128, 14, &SHAPE);
    }
}
