//! What the x86 tile kernels of every ISA share: the one bounds check ([`check_tile`]),
//! `vec_dot` as a 1 × 1 tile ([`dot_via_tile`]), 8-row groups ([`row_offsets`],
//! [`store_n`], [`transpose8`]), ggml's horizontal sums and the one-token kernels'
//! prefetch helpers.
//!
//! The SIMD helpers here are `#[inline(always)]` and use AVX2 / FMA / F16C only: they are
//! called from kernels compiled with at least those features (the AVX2 and the AVX-512
//! VNNI ones), into which they inline.

use core::arch::x86_64::*;

use crate::registry::Tile;

/// Bounds of a tile for a kernel over blocks of `qk` elements (`w_block` weight bytes,
/// `x_block` activation bytes each); returns the blocks per row. Panics (a caller bug,
/// never reachable through `matmul`) rather than letting a kernel read or write out of
/// bounds, and when `features` (the kernel's CPU check) is false.
#[allow(clippy::too_many_arguments)]
pub(super) fn check_tile(
    t: &Tile<'_>,
    y: &[f32],
    y_stride: usize,
    features: bool,
    isa: &str,
    qk: usize,
    w_block: usize,
    x_block: usize,
) -> usize {
    assert!(features, "{isa} tile kernel called on a CPU without its features");
    assert!(t.n.is_multiple_of(qk), "tile: columns not a whole number of blocks");
    let nb = t.n / qk;
    if t.rows == 0 || t.tokens == 0 {
        return nb;
    }
    let (w_row, x_row) = (nb * w_block, nb * x_block);
    assert!(t.w_stride >= w_row && t.w.len() >= (t.rows - 1) * t.w_stride + w_row, "tile: weight rows");
    assert!(t.x_stride >= x_row && t.x.len() >= (t.tokens - 1) * t.x_stride + x_row, "tile: activation rows");
    assert!(y_stride >= t.rows && y.len() >= (t.tokens - 1) * y_stride + t.rows, "tile: output");
    nb
}

/// A checked tile as raw pointers and strides, for the inner kernels (which index it with
/// `add`): `rows` weight rows of `nb` blocks, `tokens` activation rows, outputs
/// `y[t·y_stride + r]`.
#[derive(Clone, Copy)]
pub(super) struct TileArgs {
    pub w: *const u8,
    pub w_stride: usize,
    pub rows: usize,
    pub nb: usize,
    pub x: *const u8,
    pub x_stride: usize,
    pub tokens: usize,
    pub y: *mut f32,
    pub y_stride: usize,
}

impl TileArgs {
    /// The pointers of `t` and `y` (bounds as [`check_tile`] verified them, `nb` blocks).
    pub fn new(t: &Tile<'_>, nb: usize, y: &mut [f32], y_stride: usize) -> Self {
        TileArgs {
            w: t.w.as_ptr(),
            w_stride: t.w_stride,
            rows: t.rows,
            nb,
            x: t.x.as_ptr(),
            x_stride: t.x_stride,
            tokens: t.tokens,
            y: y.as_mut_ptr(),
            y_stride,
        }
    }
}

/// One weight row · one activation row through a tile kernel (a 1 × 1 tile of a one-token
/// product, so the kernel takes llama.cpp's `vec_dot` arithmetic).
pub(super) fn dot_via_tile(tile: fn(&Tile<'_>, &mut [f32], usize), n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut y = [0f32];
    let t = Tile {
        n,
        w,
        w_stride: w.len(),
        rows: 1,
        x,
        x_stride: x.len(),
        tokens: 1,
        batched: 0,
        total_tokens: 1,
        total_rows: 1,
        expert: false,
    };
    tile(&t, &mut y, 1);
    y[0]
}

/// Byte offsets of up to 8 rows `stride` apart; past the last of `n` rows the last one
/// repeats (its lanes are computed and not stored).
#[inline(always)]
pub(super) fn row_offsets(n: usize, stride: usize) -> [usize; 8] {
    core::array::from_fn(|i| i.min(n - 1) * stride)
}

/// Stores lanes `0..n` (`1 ≤ n ≤ 8`) of `v` at `p`.
///
/// # Safety
/// AVX2 present; `p..p + n` writable.
#[inline(always)]
pub(super) unsafe fn store_n(p: *mut f32, v: __m256, n: usize) {
    if n == 8 {
        _mm256_storeu_ps(p, v);
    } else {
        let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(p, mask, v);
    }
}

/// 8 × 8 transpose of 32-bit words: `out[k]` lane `i` = `v[i]` lane `k`.
///
/// # Safety
/// AVX2 present.
#[inline(always)]
pub(super) unsafe fn transpose8(v: &[__m256i; 8]) -> [__m256i; 8] {
    let t0 = _mm256_unpacklo_epi32(v[0], v[1]);
    let t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    let t2 = _mm256_unpacklo_epi32(v[2], v[3]);
    let t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    let t4 = _mm256_unpacklo_epi32(v[4], v[5]);
    let t5 = _mm256_unpackhi_epi32(v[4], v[5]);
    let t6 = _mm256_unpacklo_epi32(v[6], v[7]);
    let t7 = _mm256_unpackhi_epi32(v[6], v[7]);
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    [
        _mm256_permute2x128_si256::<0x20>(u0, u4),
        _mm256_permute2x128_si256::<0x20>(u1, u5),
        _mm256_permute2x128_si256::<0x20>(u2, u6),
        _mm256_permute2x128_si256::<0x20>(u3, u7),
        _mm256_permute2x128_si256::<0x31>(u0, u4),
        _mm256_permute2x128_si256::<0x31>(u1, u5),
        _mm256_permute2x128_si256::<0x31>(u2, u6),
        _mm256_permute2x128_si256::<0x31>(u3, u7),
    ]
}

/// ggml's `hsum_float_8`: halves, then pairs, then neighbours.
///
/// # Safety
/// AVX2 present.
#[inline(always)]
pub(super) unsafe fn hsum_float_8(x: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The sum of 8 i32 lanes (exact, any order).
///
/// # Safety
/// AVX2 present.
#[inline(always)]
pub(super) unsafe fn hsum_i32_8(a: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01>(s));
    _mm_cvtsi128_si32(s)
}

/// The little-endian fp16 at `p` as f32 (`vcvtph2ps`, exact).
///
/// # Safety
/// F16C present; 2 readable bytes at `p`.
#[inline(always)]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    let h = (p as *const u16).read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// ggml's `mul_add_epi8`: `maddubs(|x|, sign(y, x))`, signed × signed byte pairs (a `y` of
/// −128 under a negative `x` stays −128: 8-bit wrap, as in ggml).
///
/// # Safety
/// AVX2 present.
#[inline(always)]
pub(super) unsafe fn mul_add_epi8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// 32 bytes at `p`, unaligned.
///
/// # Safety
/// AVX present; 32 readable bytes at `p`.
#[inline(always)]
pub(super) unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// A software prefetch stream one group of rows ahead of a one-token kernel: the group
/// after the one being read is prefetched at the rate the group is read (`advance` by the
/// bytes a block step consumes), one sequential stream whatever the row length — where
/// the hardware prefetcher, facing one stream per row of the group, falls behind.
///
/// The lines go to L2 (`prefetcht1`), not L1: a group is 4–8 KiB ahead, and T0 requests
/// hold L1 fill buffers for a DRAM round trip each, which the loads of the group being
/// read then wait for. Measured on a Sapphire Rapids VM (2 threads, llama-1b Q4_K_M
/// decode, 3 interleaved rounds): T0 23.6 t/s, T1 27.0, T2 26.8; the forced AVX2 path
/// 21.8 → 23.6 (the AMD EPYC of session 21 measured only T0).
/// Prefetches to L2 (`prefetcht1`) the `BYTES` bytes at `p + dist` as `N` prefetches:
/// at 0, 64, …, 64·(N − 2) and the last byte. A one-token kernel reading a few rows side
/// by side calls it per row and block with `dist` a few rows ahead, so each row stream is
/// fetched in step with its reads. `N` is the fewest that cover every line the block spans
/// at the alignments it has (a GGUF tensor starts on 32 bytes): a q4_K block (144 bytes,
/// at 16-byte offsets) spans at most 3 lines, a q6_K block (210 bytes, any even offset) 5.
/// A prefetch too many costs: measured on a Sapphire Rapids VM, 2 threads, q4_K 8192 ×
/// 2048 outside the cache: 23.3 GB/s with [`Ahead`] fetching the next 4-row group in
/// address order, 24.0–24.5 GB/s per row 6 rows ahead with 4 prefetches per block,
/// 24.9–26.4 GB/s with 3 (5 rows ahead 25.5, 4 rows ahead 21.7); q6_K with one line in
/// five left out 19–20 GB/s instead of 24–25.
///
/// # Safety
/// SSE present (every x86-64 CPU). The address need not be inside any allocation:
/// prefetches never fault, and the pointer is only offset with `wrapping_add`.
#[inline(always)]
pub(super) unsafe fn prefetch_ahead<const BYTES: usize, const N: usize>(p: *const u8, dist: usize) {
    let q = p.wrapping_add(dist);
    for k in 0..N - 1 {
        _mm_prefetch::<_MM_HINT_T1>(q.wrapping_add(64 * k) as *const i8);
    }
    _mm_prefetch::<_MM_HINT_T1>(q.wrapping_add(BYTES - 1) as *const i8);
}

pub(super) struct Ahead {
    p: *const u8,
    end: *const u8,
}

impl Ahead {
    /// A stream starting at `start` (need not be inside any allocation: prefetches never
    /// fault, and the pointer is only offset with `wrapping_add`).
    #[inline(always)]
    pub fn new(start: *const u8) -> Self {
        Ahead { p: start, end: start }
    }

    /// Prefetches the next `bytes` of the stream.
    ///
    /// # Safety
    /// SSE present (every x86-64 CPU).
    #[inline(always)]
    pub unsafe fn advance(&mut self, bytes: usize) {
        self.end = self.end.wrapping_add(bytes);
        while self.p < self.end {
            _mm_prefetch::<_MM_HINT_T1>(self.p as *const i8);
            self.p = self.p.wrapping_add(64);
        }
    }
}
