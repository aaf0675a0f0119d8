//! AVX2 tile kernels for the legacy formats q4_1, q5_1 (× Q8_1), q5_0 and q8_0 (× Q8_0): a
//! weight block is decoded once per row and multiplied with up to 8 tokens' activation
//! blocks, each output in the float arithmetic of ggml's AVX2 `vec_dot` for these types
//! (which llama.cpp's AVX2 build runs for every batch size — for q5_0 / q8_0 batches of
//! 2+ tokens through llamafile's `tinyBLAS_Q0_AVX`, whose per-output arithmetic is the
//! same; see [`crate::scalar::legacy`], the scalar twins). One row, the 8-lane
//! accumulators of 1..=8 tokens:
//!
//! - the block's bytes as `maddubs`' unsigned operand (q4_1 / q5_1: the values; q5_0 /
//!   q8_0: `|q|`, the sign moved onto the activations, ggml's `mul_sum_i8_pairs`), then
//!   `madd` with ones: exact i32 lanes, lane `j` the elements `4j..4j+4`;
//! - `d_w·d_x` (the scalar product's bits), `acc[t] = fma(d, f32(lanes), acc[t])` per
//!   block, `hsum_float_8` at the end;
//! - q4_1 / q5_1: the `m_w·s_x` terms of the 8 tokens as one lane-wise fma per block (ggml's
//!   `summs += m·s`; fused or not, the same bits: the fp16 product is exact), added after
//!   the horizontal sum.
//!
//! The activation scales (and sums) of a tile's tokens are gathered once per tile, block
//! by block, 8 tokens to a vector; a row's `d_w·d_x` and `Σ m_w·s_x` (and q5_0 / q5_1's
//! decoded blocks) are computed before its products, so the inner loop is `maddubs`,
//! `madd`, `cvt` and `fma` (`sign` too for q5_0 / q8_0) with `d` broadcast from memory.
//! One-token tiles run four rows at a time (`one_imp`), each row in the arithmetic of
//! [`super::avx2`]'s `vec_dot` (the same bits).

use core::arch::x86_64::*;

use super::avx2::{self, bytes_from_bits_32, bytes_from_nibbles_32};
use super::has_avx2;
use super::tiles::{check_tile, f16_at, hsum_float_8, load256, Ahead, TileArgs};
use crate::registry::{Tile, VecDotFn};
use crate::scalar::legacy::{self as s, Legacy};

const Q4_1: u8 = 0;
const Q5_0: u8 = 1;
const Q5_1: u8 = 2;
const Q8_0: u8 = 3;

/// The format of kernel `F`.
const fn fmt(f: u8) -> &'static Legacy {
    match f {
        Q4_1 => &s::Q4_1,
        Q5_0 => &s::Q5_0,
        Q5_1 => &s::Q5_1,
        _ => &s::Q8_0,
    }
}

/// Tokens per pass over a tile's rows.
const T_MAX: usize = 8;

/// Weight bytes of a chunk of rows that all of a tile's token groups run against (an L2
/// share, beside the tile's activations: 64 tokens of 2048 q8_0 columns are 136 KiB).
pub(super) const ROW_CHUNK_BYTES: usize = 192 * 1024;

/// Tokens per prompt tile of the legacy types, here and in the VNNI tiles (all rows, run in
/// L2-sized row chunks).
pub const TILE_TOKENS: usize = 64;

thread_local! {
    /// Per-thread scales of a tile ([`SC`] floats per block).
    static SCALES: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A weight block at `b` as (`maddubs`' unsigned operand, the signed values whose signs
/// go onto the activations — unused for q4_1 / q5_1).
///
/// # Safety
/// AVX2 present; the block's bytes readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn decode<const F: u8>(b: *const u8) -> (__m256i, __m256i) {
    match F {
        Q4_1 => (bytes_from_nibbles_32(b.add(4)), _mm256_setzero_si256()),
        Q5_1 => {
            let hi = _mm256_and_si256(bytes_from_bits_32(b.add(4)), _mm256_set1_epi8(0x10));
            (_mm256_or_si256(bytes_from_nibbles_32(b.add(8)), hi), _mm256_setzero_si256())
        }
        Q5_0 => {
            let hi = _mm256_andnot_si256(bytes_from_bits_32(b.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
            let q = _mm256_or_si256(bytes_from_nibbles_32(b.add(6)), hi);
            (_mm256_sign_epi8(q, q), q)
        }
        _ => {
            let q = load256(b.add(2));
            (_mm256_sign_epi8(q, q), q)
        }
    }
}

/// Floats per block in the scratch buffer: 8 `d_x`, 8 `s_x`, 8 `d_w·d_x` and (q5_0 /
/// q5_1) the 32 decoded bytes of the row at hand.
const SC: usize = 32;

/// Rows `0..a.rows` × tokens `t0..t0+T`; `sc` holds the tokens' scales ([`SC`] floats per
/// block, the last 8 of each written here).
///
/// # Safety
/// AVX2 present; `a` checked by [`check_tile`], `t0 + T ≤ a.tokens`, `sc` `SC·a.nb`
/// writable floats.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_imp<const F: u8, const T: usize>(a: &TileArgs, sc: *mut f32, t0: usize) {
    let f = fmt(F);
    let signed = matches!(F, Q5_0 | Q8_0);
    let ones = _mm256_set1_epi16(1);
    for r in 0..a.rows {
        let wr = a.w.add(r * a.w_stride);
        // The row's `d_w·d_x` for the 8 tokens of every block (one multiply a block, each
        // lane the scalar product's bits), and its `Σ m_w·s_x` (one lane-wise fma a block),
        // before the products: the loop below then broadcasts each `d` from memory.
        // q5_0 / q5_1 blocks are decoded there too (their decoding needs more constants
        // than the registers the products leave free).
        let pre = matches!(F, Q5_0 | Q5_1);
        let mut summs = _mm256_setzero_ps();
        for b in 0..a.nb {
            let (blk, sb) = (wr.add(b * f.wb), sc.add(SC * b));
            _mm256_storeu_ps(sb.add(16), _mm256_mul_ps(_mm256_set1_ps(f16_at(blk)), _mm256_loadu_ps(sb)));
            if f.has_min {
                summs = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(blk.add(2))), _mm256_loadu_ps(sb.add(8)), summs);
            }
            if pre {
                let (u, q) = decode::<F>(blk);
                _mm256_storeu_si256(sb.add(24) as *mut __m256i, if signed { q } else { u });
            }
        }
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..a.nb {
            let (u, q) = if pre {
                let v = _mm256_loadu_si256(sc.add(SC * b + 24) as *const __m256i);
                if signed {
                    (_mm256_sign_epi8(v, v), v)
                } else {
                    (v, v)
                }
            } else {
                decode::<F>(wr.add(b * f.wb))
            };
            let dd = sc.add(SC * b + 16);
            let xb = a.x.add(t0 * a.x_stride + b * f.xb + f.xq);
            for (t, acc) in acc.iter_mut().enumerate() {
                let y = load256(xb.add(t * a.x_stride));
                let y = if signed { _mm256_sign_epi8(y, q) } else { y };
                let lanes = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(u, y));
                *acc = _mm256_fmadd_ps(_mm256_broadcast_ss(&*dd.add(t)), _mm256_cvtepi32_ps(lanes), *acc);
            }
        }
        let mut sm = [0f32; T_MAX];
        _mm256_storeu_ps(sm.as_mut_ptr(), summs);
        for (t, acc) in acc.iter().enumerate() {
            let h = hsum_float_8(*acc);
            *a.y.add((t0 + t) * a.y_stride + r) = if f.has_min { h + sm[t] } else { h };
        }
    }
}

/// One token × rows `0..a.rows − a.rows % 4`, four rows at a time; returns the rows done.
/// Each row's steps are those of [`super::avx2`]'s `vec_dot` (the same bits): the token's
/// block and scale are loaded once for the four rows, which are reduced at the end, and
/// the next four rows are prefetched (one stream a group ahead).
///
/// # Safety
/// AVX2 present; `a` checked by [`check_tile`] with one token.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn one_imp<const F: u8>(a: &TileArgs) -> usize {
    let f = fmt(F);
    let signed = matches!(F, Q5_0 | Q8_0);
    let ones = _mm256_set1_epi16(1);
    let r4 = a.rows - a.rows % 4;
    for r in (0..r4).step_by(4) {
        let w: [*const u8; 4] = core::array::from_fn(|i| a.w.add((r + i) * a.w_stride));
        let mut acc = [_mm256_setzero_ps(); 4];
        // Lanes 2i + 1: row i's `Σ m_w·s_x` (q4_1 / q5_1).
        let mut summs = _mm256_setzero_ps();
        let lane: [__m256i; 4] = core::array::from_fn(|i| _mm256_set1_epi32(2 * i as i32));
        let mut ahead = Ahead::new(a.w.wrapping_add((r + 4) * a.w_stride));
        for b in 0..a.nb {
            ahead.advance(4 * f.wb);
            let xb = a.x.add(b * f.xb);
            let dy = _mm256_set1_ps(f16_at(xb));
            let yv = load256(xb.add(f.xq));
            let blk: [*const u8; 4] = core::array::from_fn(|i| w[i].add(b * f.wb));
            // The four rows' `d` (and `m`) as fp16 pairs → f32 lanes 2i (2i + 1); each
            // product `d_w·d_x` the scalar one's bits, `m_w·s_x` exact.
            let dm = _mm_set_epi32(
                (blk[3] as *const i32).read_unaligned(),
                (blk[2] as *const i32).read_unaligned(),
                (blk[1] as *const i32).read_unaligned(),
                (blk[0] as *const i32).read_unaligned(),
            );
            let fdm = _mm256_cvtph_ps(dm);
            let dd = _mm256_mul_ps(fdm, dy);
            if f.has_min {
                summs = _mm256_fmadd_ps(fdm, _mm256_set1_ps(f16_at(xb.add(2))), summs);
            }
            for i in 0..4 {
                let d = _mm256_permutevar8x32_ps(dd, lane[i]);
                let (u, q) = decode::<F>(blk[i]);
                let yy = if signed { _mm256_sign_epi8(yv, q) } else { yv };
                let lanes = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(u, yy));
                acc[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[i]);
            }
        }
        let mut sm = [0f32; 8];
        _mm256_storeu_ps(sm.as_mut_ptr(), summs);
        for i in 0..4 {
            let h = hsum_float_8(acc[i]);
            *a.y.add(r + i) = if f.has_min { h + sm[2 * i + 1] } else { h };
        }
    }
    r4
}

/// The scales of tokens `t0..t0+nt` (`nt ≤ 8`), block by block: `d_x` in `sc[SC·b..][..8]`,
/// `s_x` (Q8_1) in `sc[SC·b + 8..][..8]`, zero past `nt`.
fn gather_scales(f: &Legacy, t: &Tile<'_>, nb: usize, t0: usize, nt: usize, sc: &mut [f32]) {
    sc.fill(0.0);
    for tt in 0..nt {
        let x = &t.x[(t0 + tt) * t.x_stride..];
        for b in 0..nb {
            let y = &x[b * f.xb..];
            sc[SC * b + tt] = half::f16::from_bits(u16::from_le_bytes([y[0], y[1]])).to_f32();
            if f.has_min {
                sc[SC * b + 8 + tt] = half::f16::from_bits(u16::from_le_bytes([y[2], y[3]])).to_f32();
            }
        }
    }
}

/// The tile of format `F`; one-token tiles through `vec_dot`.
fn tile<const F: u8>(vec_dot: VecDotFn, t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let f = fmt(F);
    let nb = check_tile(t, y, y_stride, has_avx2(), "avx2", 32, f.wb, f.xb);
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let a = TileArgs::new(t, nb, y, y_stride);
    if t.tokens == 1 {
        // SAFETY: `check_tile` bounds every weight row, the activation row and the outputs
        // and checked the CPU features.
        let r4 = unsafe { one_imp::<F>(&a) };
        let rest = Tile { w: &t.w[r4 * t.w_stride..], rows: t.rows - r4, ..*t };
        return crate::matmul::tile_by_vec_dot(vec_dot, &rest, &mut y[r4..], y_stride);
    }
    // Every 8-token group's scales once, then the rows in L2-sized chunks, each chunk
    // against every group: a tile of many tokens reads its weights from memory once.
    let groups = t.tokens.div_ceil(T_MAX);
    let mut sc = SCALES.with(|c| c.take());
    sc.resize(SC * nb * groups, 0.0);
    for g in 0..groups {
        let t0 = g * T_MAX;
        gather_scales(f, t, nb, t0, (t.tokens - t0).min(T_MAX), &mut sc[SC * nb * g..SC * nb * (g + 1)]);
    }
    let chunk = (ROW_CHUNK_BYTES / (nb * f.wb)).max(1);
    for r0 in (0..t.rows).step_by(chunk) {
        let rows = chunk.min(t.rows - r0);
        // SAFETY: rows `r0..r0+rows` of the checked tile and their outputs.
        let ac = unsafe { TileArgs { w: a.w.add(r0 * a.w_stride), rows, y: a.y.add(r0), ..a } };
        for g in 0..groups {
            let t0 = g * T_MAX;
            let nt = (t.tokens - t0).min(T_MAX);
            // SAFETY: `check_tile` bounds every weight row, activation row and output the
            // kernel touches and checked the CPU features; `t0 + nt ≤ tokens`, group `g`'s
            // slice of `sc` holds `SC·nb` floats.
            unsafe {
                let p = sc.as_mut_ptr().add(SC * nb * g);
                match nt {
                    1 => rows_imp::<F, 1>(&ac, p, t0),
                    2 => rows_imp::<F, 2>(&ac, p, t0),
                    3 => rows_imp::<F, 3>(&ac, p, t0),
                    4 => rows_imp::<F, 4>(&ac, p, t0),
                    5 => rows_imp::<F, 5>(&ac, p, t0),
                    6 => rows_imp::<F, 6>(&ac, p, t0),
                    7 => rows_imp::<F, 7>(&ac, p, t0),
                    _ => rows_imp::<F, 8>(&ac, p, t0),
                }
            }
        }
    }
    SCALES.with(|c| c.set(sc));
}

macro_rules! legacy_kernel {
    ($tile:ident, $f:ident, $vec_dot:path, $gt:ty, $act:ty) => {
        /// AVX2 tile (twin: [`crate::scalar::legacy`], per output).
        pub fn $tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
            tile::<$f>($vec_dot, t, y, y_stride)
        }

        inventory::submit! {
            crate::registry::Kernel::new(
                <$gt as ggml_quants::GgmlType>::ID,
                "avx2",
                10,
                <$act as ggml_quants::GgmlType>::ID,
                $vec_dot,
            )
            .with_available(has_avx2)
            .with_tile($tile)
            .with_tile_tokens(TILE_TOKENS)
        }
    };
}

use ggml_quants::types::{
    q4_1::Q4_1 as Q41, q5_0::Q5_0 as Q50, q5_1::Q5_1 as Q51, q8_0::Q8_0 as Q80, q8_1::Q8_1 as Q81,
};

legacy_kernel!(q4_1_tile, Q4_1, avx2::q4_1_q8_1, Q41, Q81);
legacy_kernel!(q5_0_tile, Q5_0, avx2::q5_0_q8_0, Q50, Q80);
legacy_kernel!(q5_1_tile, Q5_1, avx2::q5_1_q8_1, Q51, Q81);
legacy_kernel!(q8_0_tile, Q8_0, avx2::q8_0_q8_0, Q80, Q80);
