//! Tile kernels for IQ1_S and IQ1_M (× Q8_K) on AVX2, which AVX-512 CPUs run too (ggml has
//! no AVX-512 branch for these types: its AVX-512 builds compile the AVX2 `vec_dot`, and
//! its tiled matmul's integers are exact on either ISA). The arithmetic is described in
//! [`crate::scalar::iq1`], whose twins these kernels match bit for bit:
//!
//! - below 8 tokens, ggml's AVX2 `vec_dot` per output: grid entries gathered 8 bytes at a
//!   time, `maddubs(|g|, sign(x, g))` widened by the group scales into 8 lanes, IQ1_S's shift
//!   from the Q8_K block sums, IQ1_M's as 8 more lanes;
//! - from 8 tokens, the tiled path: each block of 4 rows decoded once per tile into the
//!   weights `8·grid ± 1` (bytes), per-lane scale vectors and the bias `128·Σ scale·w`, then
//!   for every token `s1 = Σ madd(maddubs(x + 128, w), scale) − bias` (exact: the pairs are
//!   at most `2·255·9`), `r = f32(s1)·d_w`, `acc = fma(r, d_x, acc)`.

use core::arch::x86_64::*;

use super::has_avx2;
use super::tiles::{check_tile, dot_via_tile, hsum_float_8, hsum_i32_8, load256, mul_add_epi8, TileArgs};
use crate::registry::Tile;
use crate::scalar::act::Q8_K_BYTES;
use crate::scalar::iq1::{self as s, Block1, Kind, DELTA};
use crate::scalar::iq4::Path;
use ggml_quants::types::iq_tables::IQ1S_GRID;

/// The grid entry `idx` as 8 bytes (`-1, 0, 1`).
#[inline(always)]
fn grid(idx: usize) -> i64 {
    IQ1S_GRID[idx] as i64
}

/// `±1` bytes, 8 per 64-bit lane, negative (all ones) where `neg[l]` is 1; branch-free (the
/// shift signs are random bits).
///
/// # Safety
/// AVX2 present.
#[inline(always)]
unsafe fn signs4(neg: [usize; 4]) -> __m256i {
    let v = |n: usize| (n as i64).wrapping_neg() | 0x0101_0101_0101_0101;
    _mm256_set_epi64x(v(neg[3]), v(neg[2]), v(neg[1]), v(neg[0]))
}

/// A scale per 16 elements of a 32-element group as 16 i16 lanes.
///
/// # Safety
/// AVX2 present.
#[inline(always)]
unsafe fn scale_pair(lo: i32, hi: i32) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16))
}

/// `ggml_vec_dot_iq1_s_q8_K`, AVX2 branch, over `nb` blocks.
///
/// # Safety
/// AVX2, FMA, F16C present; `w` points at `nb` IQ1_S blocks and `x` at `nb` Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot_s(w: *const u8, x: *const u8, nb: usize) -> f32 {
    let mut accum = _mm256_setzero_ps();
    let mut accum1 = 0f32;
    for i in 0..nb {
        let b = w.add(i * s::IQ1_S_BYTES);
        let y = x.add(i * Q8_K_BYTES);
        let qs = b.add(2);
        let qh = |g: usize| (b.add(34 + 2 * g) as *const u16).read_unaligned() as usize;
        let bsum = |k: usize| (y.add(260 + 2 * k) as *const i16).read_unaligned() as i32;
        let mut sumi = _mm256_setzero_si256();
        let mut sumi1 = 0i32;
        for g in 0..8 {
            let h = qh(g);
            let q = qs.add(4 * g);
            let e = |l: usize| grid(*q.add(l) as usize | ((h >> (3 * l)) & 7) << 8);
            let q1b = _mm256_set_epi64x(e(3), e(2), e(1), e(0));
            let dot = mul_add_epi8(q1b, load256(y.add(4 + 32 * g)));
            let ls = 2 * ((h >> 12) & 7) as i32 + 1;
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(dot, _mm256_set1_epi16(ls as i16)));
            let sign = 1 - 2 * (h >> 15) as i32;
            sumi1 += (bsum(2 * g) + bsum(2 * g + 1)) * sign * ls;
        }
        let d = (y as *const f32).read_unaligned() * super::tiles::f16_at(b);
        accum = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), accum);
        accum1 = d.mul_add(sumi1 as f32, accum1);
    }
    hsum_float_8(accum) + DELTA * accum1
}

/// `ggml_vec_dot_iq1_m_q8_K`, AVX2 branch, over `nb` blocks.
///
/// # Safety
/// As [`vec_dot_s`], for IQ1_M blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_dot_m(w: *const u8, x: *const u8, nb: usize) -> f32 {
    let mut accum1 = _mm256_setzero_ps();
    let mut accum2 = _mm256_setzero_ps();
    let one = _mm256_set1_epi8(1);
    for i in 0..nb {
        let b = w.add(i * s::IQ1_M_BYTES);
        let y = x.add(i * Q8_K_BYTES);
        let blk = core::slice::from_raw_parts(b, s::IQ1_M_BYTES);
        let mut sumi1 = _mm256_setzero_si256();
        let mut sumi2 = _mm256_setzero_si256();
        for g in 0..8 {
            let hw = (b.add(48 + 2 * (g / 2)) as *const u16).read_unaligned() as i32;
            let sh = 6 * (g % 2);
            let sc = scale_pair(2 * ((hw >> sh) & 7) + 1, 2 * ((hw >> (sh + 3)) & 7) + 1);
            let (qh0, qh1) = (blk[32 + 2 * g] as usize, blk[33 + 2 * g] as usize);
            let q = &blk[4 * g..4 * g + 4];
            let q1b = _mm256_set_epi64x(
                grid(q[3] as usize | ((qh1 << 4) & 0x700)),
                grid(q[2] as usize | ((qh1 << 8) & 0x700)),
                grid(q[1] as usize | ((qh0 << 4) & 0x700)),
                grid(q[0] as usize | ((qh0 << 8) & 0x700)),
            );
            let delta = signs4([(qh0 >> 3) & 1, qh0 >> 7, (qh1 >> 3) & 1, qh1 >> 7]);
            let q8 = load256(y.add(4 + 32 * g));
            let dot1 = mul_add_epi8(q1b, q8);
            let dot2 = _mm256_maddubs_epi16(one, _mm256_sign_epi8(q8, delta));
            sumi1 = _mm256_add_epi32(sumi1, _mm256_madd_epi16(dot1, sc));
            sumi2 = _mm256_add_epi32(sumi2, _mm256_madd_epi16(dot2, sc));
        }
        let scale = s::iq1_m_scale(blk);
        let dw = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(scale as i32)));
        let d = _mm256_set1_ps((y as *const f32).read_unaligned() * dw);
        accum1 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi1), accum1);
        accum2 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi2), accum2);
    }
    hsum_float_8(accum1) + DELTA * hsum_float_8(accum2)
}

/// One block decoded for the tiled path.
#[derive(Clone, Copy)]
struct Tiled {
    /// `8·grid ± 1` of the 8 groups of 32.
    w: [__m256i; 8],
    /// The scale of every i16 pair lane, per group.
    sc: [__m256i; 8],
    /// `128·Σ scale·w`.
    bias: i32,
    /// `fp16(d)·0.125`.
    dw: f32,
}

/// Decodes one block (through the scalar decoder: once per tile, not per token).
///
/// # Safety
/// AVX2 present.
#[target_feature(enable = "avx2")]
unsafe fn decode_tiled(kind: Kind, b: &[u8]) -> Tiled {
    let mut dec = Block1::default();
    kind.decode(b, &mut dec);
    let t = dec.tiled();
    let mut bias = 0i32;
    for (e, &q) in t.q.iter().enumerate() {
        bias += 128 * t.sc[e / 16] * q as i32;
    }
    Tiled {
        w: core::array::from_fn(|g| load256(t.q.as_ptr().add(32 * g) as *const u8)),
        sc: core::array::from_fn(|g| scale_pair(t.sc[2 * g], t.sc[2 * g + 1])),
        bias,
        dw: half::f16::from_bits(dec.d).to_f32() * DELTA,
    }
}

/// Rows per decoded group of the tiled path.
const ROWS: usize = 4;

/// The tiled path over a checked tile: groups of [`ROWS`] rows decoded once, then every
/// token against them.
///
/// # Safety
/// AVX2, FMA present; `a` checked by [`check_tile`] for `kind`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tiled_rows(kind: Kind, a: &TileArgs) {
    let bytes = kind.bytes();
    let flip = _mm256_set1_epi8(-128);
    let mut dec: Vec<Tiled> = Vec::with_capacity(ROWS * a.nb);
    for r0 in (0..a.rows).step_by(ROWS) {
        let nr = (a.rows - r0).min(ROWS);
        dec.clear();
        for r in r0..r0 + nr {
            let row = core::slice::from_raw_parts(a.w.add(r * a.w_stride), a.nb * bytes);
            dec.extend(row.chunks_exact(bytes).map(|b| decode_tiled(kind, b)));
        }
        for t in 0..a.tokens {
            let x = a.x.add(t * a.x_stride);
            let mut acc = [0f32; ROWS];
            for ib in 0..a.nb {
                let y = x.add(ib * Q8_K_BYTES);
                let xs: [__m256i; 8] = core::array::from_fn(|g| _mm256_xor_si256(load256(y.add(4 + 32 * g)), flip));
                let dx = (y as *const f32).read_unaligned();
                for (r, acc) in acc.iter_mut().enumerate().take(nr) {
                    let d = &dec[r * a.nb + ib];
                    let mut v = _mm256_setzero_si256();
                    for ((&x, &w), &sc) in xs.iter().zip(&d.w).zip(&d.sc) {
                        v = _mm256_add_epi32(v, _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), sc));
                    }
                    let s1 = hsum_i32_8(v) - d.bias;
                    let r = s1 as f32 * d.dw;
                    *acc = r.mul_add(dx, *acc);
                }
            }
            for (r, &v) in acc.iter().enumerate().take(nr) {
                *a.y.add(t * a.y_stride + r0 + r) = v;
            }
        }
    }
}

/// The tile kernel of `kind`, along [`s::path`].
fn tile_imp(kind: Kind, t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = check_tile(t, y, y_stride, has_avx2(), "avx2", 256, kind.bytes(), Q8_K_BYTES);
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let a = TileArgs::new(t, nb, y, y_stride);
    // SAFETY: `check_tile` verified the features and that every weight row (`nb` blocks),
    // activation row (`nb` Q8_K blocks) and output touched is in bounds.
    unsafe {
        if s::path(t) == Path::Tiled {
            return tiled_rows(kind, &a);
        }
        for r in 0..a.rows {
            let w = a.w.add(r * a.w_stride);
            for tok in 0..a.tokens {
                let x = a.x.add(tok * a.x_stride);
                *a.y.add(tok * a.y_stride + r) = match kind {
                    Kind::S => vec_dot_s(w, x, nb),
                    Kind::M => vec_dot_m(w, x, nb),
                };
            }
        }
    }
}

/// IQ1_S × Q8_K tile along [`crate::scalar::iq1::path`].
pub fn iq1_s_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_imp(Kind::S, t, y, y_stride)
}

/// IQ1_M × Q8_K tile along [`crate::scalar::iq1::path`].
pub fn iq1_m_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_imp(Kind::M, t, y, y_stride)
}

/// `ggml_vec_dot_iq1_s_q8_K` (a 1 × 1 tile).
pub fn iq1_s_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_via_tile(iq1_s_tile, n, w, x)
}

/// `ggml_vec_dot_iq1_m_q8_K` (a 1 × 1 tile).
pub fn iq1_m_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_via_tile(iq1_m_tile, n, w, x)
}

mod registration {
    use super::*;
    use crate::registry::Kernel;
    use ggml_quants::types::{iq1_m::Iq1M, iq1_s::Iq1S, q8_k::Q8K};
    use ggml_quants::GgmlType;

    inventory::submit! {
        Kernel::new(<Iq1S as GgmlType>::ID, "avx2", 10, <Q8K as GgmlType>::ID, iq1_s_q8_k)
            .with_available(has_avx2)
            .with_tile(iq1_s_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq1M as GgmlType>::ID, "avx2", 10, <Q8K as GgmlType>::ID, iq1_m_q8_k)
            .with_available(has_avx2)
            .with_tile(iq1_m_tile)
    }
}
