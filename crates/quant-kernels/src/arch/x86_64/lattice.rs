//! SIMD tile kernels for the lattice types IQ3_S, IQ2_XS, IQ2_XXS, IQ3_XXS and IQ2_S
//! (× Q8_K), on AVX2 ([`super::lattice_avx2`]) and AVX-512 VNNI ([`super::lattice_vnni`]),
//! in the float arithmetic llama.cpp's CPU backend uses for the product
//! ([`crate::scalar::lattice`] holds the scalar twins and describes both of its paths).
//!
//! This module holds what the two ISAs share: the block decoders ([`Lattice`]: grid
//! magnitudes, sign masks and scales of one 32-element group), the decoded 8-row block
//! ([`Rows8`]), and the one driver ([`tile_imp`]): bounds check, path choice (`vec_dot`
//! below 8 tokens, tiled from 8), the tiled path's weights-stationary loop (64 rows decoded
//! at a time into a per-thread buffer, then run against every token chunk) and the token
//! chunks. An ISA ([`Isa`]) supplies only its inner loops. The AVX2 tiles are registered
//! with [`crate::registry::ALL_TOKENS`] (row blocks with the whole batch), so each weight
//! row is decoded once per product; AVX-512 VNNI hands tiles of 8+ tokens to `k16`.

use core::arch::x86_64::*;

use super::tiles::{check_tile, row_offsets, TileArgs};
use crate::registry::Tile;
use crate::scalar::act::Q8_K_BYTES;
use crate::scalar::iq4::Path;
use crate::scalar::lattice::{self as s, IQ2_S_BYTES, IQ2_XS_BYTES, IQ2_XXS_BYTES, IQ3_S_BYTES, IQ3_XXS_BYTES};
use ggml_quants::types::iq_tables::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS};

/// One lattice format's decoder: group `g` (32 elements) of the block at `b` as grid
/// magnitudes (32 unsigned bytes) and a sign mask (bit `e` set: element `e` is negative),
/// and the scales of its two 16-element halves.
///
/// The methods are `#[inline(always)]` and use AVX2 intrinsics (the `signs` / `scale16`
/// overrides AVX-512 ones): they are called only from kernels compiled with those features.
pub(super) trait Lattice {
    /// Bytes per block.
    const BYTES: usize;
    /// Sub-blocks per 256 (one scale each) in the tiled path: 8 (32 elements) or 16.
    const NSUB: usize;
    /// `vec_dot`'s factor on the final sum.
    const VEC_POST: f32;
    /// The tiled path's factor on `fp16(d)`.
    const TILED_MUL: f32;
    /// Magnitudes and sign mask of group `g`.
    ///
    /// # Safety
    /// AVX2 present; `b` points at a whole block.
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32);
    /// The odd scales `(2s + 1)` of the first and second 16 elements of group `g`.
    ///
    /// # Safety
    /// `b` points at a whole block.
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32);
    /// The sign masks of all 8 groups (as [`Lattice::group`]'s).
    ///
    /// # Safety
    /// AVX-512 VNNI present (some overrides use it); `b` points at a whole block.
    #[inline(always)]
    unsafe fn signs(b: *const u8) -> [u32; 8] {
        core::array::from_fn(|g| Self::group(b, g).1)
    }
    /// The 16 odd scales of the block, one per 16 elements.
    ///
    /// # Safety
    /// AVX-512 F present; `b` points at a whole block.
    #[inline(always)]
    unsafe fn scale16(b: *const u8) -> __m512i {
        let a: [i32; 16] = core::array::from_fn(|k| {
            let (lo, hi) = Self::scales(b, k / 2);
            if k % 2 == 0 {
                lo
            } else {
                hi
            }
        });
        _mm512_loadu_si512(a.as_ptr() as *const __m512i)
    }
}

/// `2s + 1` of 16 nibbles: the low then the high nibble of each of 8 bytes at `p`.
#[inline(always)]
unsafe fn nibble_scales(p: *const u8) -> __m512i {
    let v = _mm_loadl_epi64(p as *const __m128i);
    let m = _mm_set1_epi8(0xF);
    let n = _mm_unpacklo_epi8(_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16::<4>(v), m));
    let z = _mm512_cvtepu8_epi32(n);
    _mm512_add_epi32(_mm512_add_epi32(z, z), _mm512_set1_epi32(1))
}

pub(super) struct Iq3S;
pub(super) struct Iq2Xs;
pub(super) struct Iq2Xxs;
pub(super) struct Iq3Xxs;
pub(super) struct Iq2S;

impl Lattice for Iq3S {
    const BYTES: usize = IQ3_S_BYTES;
    const NSUB: usize = 8;
    const VEC_POST: f32 = 1.0;
    const TILED_MUL: f32 = 1.0;

    #[inline(always)]
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32) {
        // Index k = qs[8g + k] | bit k of qh[g] << 8, all 8 at once, then one gather.
        let qs = _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.add(2 + 8 * g) as *const __m128i));
        let qh = _mm256_sllv_epi32(_mm256_set1_epi32(*b.add(66 + g) as i32), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1));
        let idx = _mm256_or_si256(qs, _mm256_and_si256(qh, _mm256_set1_epi32(256)));
        let grid = _mm256_i32gather_epi32::<4>(IQ3S_GRID.as_ptr() as *const i32, idx);
        (grid, (b.add(74 + 4 * g) as *const u32).read_unaligned())
    }

    #[inline(always)]
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32) {
        let s = 2 * ((*b.add(106 + g / 2) >> (4 * (g % 2))) & 0xF) as i32 + 1;
        (s, s)
    }

    #[inline(always)]
    unsafe fn signs(b: *const u8) -> [u32; 8] {
        core::array::from_fn(|g| (b.add(74 + 4 * g) as *const u32).read_unaligned())
    }

    #[inline(always)]
    unsafe fn scale16(b: *const u8) -> __m512i {
        // 4 scale bytes → 8 per-32 scales, each twice.
        let s8 = (b.add(106) as *const u32).read_unaligned() as i64;
        let z = nibble_scales(&s8 as *const i64 as *const u8);
        _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), z)
    }
}

impl Lattice for Iq2Xs {
    const BYTES: usize = IQ2_XS_BYTES;
    const NSUB: usize = 16;
    const VEC_POST: f32 = 0.125;
    const TILED_MUL: f32 = 0.125;

    #[inline(always)]
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32) {
        let p = b.add(2 + 8 * g);
        // The 4 grid indices (low 9 bits of each u16), one gather of 4 × 8 bytes.
        let idx = _mm_and_si128(_mm_cvtepu16_epi32(_mm_loadl_epi64(p as *const __m128i)), _mm_set1_epi32(511));
        let grid = _mm256_i32gather_epi64::<8>(IQ2XS_GRID.as_ptr() as *const i64, idx);
        let q = |l: usize| (p as *const u16).add(l).read_unaligned() as usize;
        let sg = |l: usize| (*KSIGNS_IQ2XS.get_unchecked(q(l) >> 9) as u32) << (8 * l);
        (grid, sg(0) | sg(1) | sg(2) | sg(3))
    }

    #[inline(always)]
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32) {
        let sc = *b.add(66 + g);
        (2 * (sc & 0xF) as i32 + 1, 2 * (sc >> 4) as i32 + 1)
    }

    #[inline(always)]
    unsafe fn signs(b: *const u8) -> [u32; 8] {
        // ksigns_iq2xs[s] = s | parity(s) << 7, for the 32 sign indices (bits 9.. of qs) at once.
        let q = _mm512_loadu_si512(b.add(2) as *const __m512i);
        let s7 = _mm512_srli_epi16::<9>(q);
        let mut p = _mm512_xor_si512(s7, _mm512_srli_epi16::<4>(s7));
        p = _mm512_xor_si512(p, _mm512_srli_epi16::<2>(p));
        p = _mm512_xor_si512(p, _mm512_srli_epi16::<1>(p));
        let s8 = _mm512_or_si512(s7, _mm512_slli_epi16::<7>(_mm512_and_si512(p, _mm512_set1_epi16(1))));
        let mut out = [0u32; 8];
        _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, _mm512_cvtepi16_epi8(s8));
        out
    }

    #[inline(always)]
    unsafe fn scale16(b: *const u8) -> __m512i {
        nibble_scales(b.add(66))
    }
}

/// The 4 sign bytes of group `g` from 7-bit `ksigns_iq2xs` indices packed in `aux` (bits `7l..7l+7`).
#[inline(always)]
fn ksigns4(aux: u32) -> u32 {
    let k = |l: u32| (KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize] as u32) << (8 * l);
    k(0) | k(1) | k(2) | k(3)
}

impl Lattice for Iq2Xxs {
    const BYTES: usize = IQ2_XXS_BYTES;
    const NSUB: usize = 8;
    const VEC_POST: f32 = 0.125;
    const TILED_MUL: f32 = 0.125;

    #[inline(always)]
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32) {
        let p = b.add(2 + 8 * g);
        let idx = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
        let grid = _mm256_i32gather_epi64::<8>(IQ2XXS_GRID.as_ptr() as *const i64, idx);
        (grid, ksigns4((p.add(4) as *const u32).read_unaligned()))
    }

    #[inline(always)]
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32) {
        let s = 2 * (*b.add(2 + 8 * g + 7) >> 4) as i32 + 1;
        (s, s)
    }
}

impl Lattice for Iq3Xxs {
    const BYTES: usize = IQ3_XXS_BYTES;
    const NSUB: usize = 8;
    const VEC_POST: f32 = 0.25;
    const TILED_MUL: f32 = 0.25;

    #[inline(always)]
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32) {
        let idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.add(2 + 8 * g) as *const __m128i));
        let grid = _mm256_i32gather_epi32::<4>(IQ3XXS_GRID.as_ptr() as *const i32, idx);
        (grid, ksigns4((b.add(66 + 4 * g) as *const u32).read_unaligned()))
    }

    #[inline(always)]
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32) {
        let s = 2 * (*b.add(66 + 4 * g + 3) >> 4) as i32 + 1;
        (s, s)
    }
}

impl Lattice for Iq2S {
    const BYTES: usize = IQ2_S_BYTES;
    const NSUB: usize = 16;
    const VEC_POST: f32 = 0.125;
    const TILED_MUL: f32 = 0.125;

    #[inline(always)]
    unsafe fn group(b: *const u8, g: usize) -> (__m256i, u32) {
        // Index l = qs[4g + l] | bits 2l, 2l+1 of qh[g] << 8.
        let qs = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((b.add(2 + 4 * g) as *const i32).read_unaligned()));
        let qh = _mm_sllv_epi32(_mm_set1_epi32(*b.add(66 + g) as i32), _mm_setr_epi32(8, 6, 4, 2));
        let idx = _mm_or_si128(qs, _mm_and_si128(qh, _mm_set1_epi32(0x300)));
        let grid = _mm256_i32gather_epi64::<8>(IQ2S_GRID.as_ptr() as *const i64, idx);
        (grid, (b.add(34 + 4 * g) as *const u32).read_unaligned())
    }

    #[inline(always)]
    unsafe fn scales(b: *const u8, g: usize) -> (i32, i32) {
        let sc = *b.add(74 + g);
        (2 * (sc & 0xF) as i32 + 1, 2 * (sc >> 4) as i32 + 1)
    }

    #[inline(always)]
    unsafe fn scale16(b: *const u8) -> __m512i {
        nibble_scales(b.add(74))
    }
}

/// Most tokens one pass over a row block serves (its accumulators live on the stack).
pub(super) const TOK_CHUNK: usize = 16;

/// One 256-element block of 8 rows decoded for the tiled path, one 32-bit lane per row.
/// What the lanes hold is the ISA's: the VNNI kernel stores biased codes `w + 128` and
/// 32-bit scales (and leaves `corr` zero), the AVX2 one signed weights, 16-bit scales in
/// both halves of each lane and the bias correction of its biased activations.
#[derive(Clone, Copy)]
pub(super) struct Rows8 {
    /// `u[k]` lane `i`: row `i`'s codes `4k..4k+4`.
    pub u: [__m256i; 64],
    /// `sc[sub]` lane `i`: row `i`'s scale of sub-block `sub` (16 sub-blocks of 16; the
    /// 32-element formats use the even ones).
    pub sc: [__m256i; 16],
    /// Lane `i`: what the ISA subtracts from row `i`'s integer sum (AVX2: `128·Σ scale·w`).
    pub corr: __m256i,
    /// Lane `i`: `fp16(d_i)·TILED_MUL`.
    pub dw: __m256,
}

/// The inner kernels' view of a tile (bounds checked by [`tile_imp`]).
pub(super) type Args = TileArgs;

/// Rows decoded at a time by the tiled path (a multiple of 8): 64 rows of 2048 columns
/// decode to 168 KiB, an L2 share beside the token chunk's activations.
const SUB_ROWS: usize = 64;

thread_local! {
    /// The tiled path's decoded rows ([`decode_all`]), kept per thread between calls so that
    /// no call allocates once it has grown to the widest row group.
    static DECODED: core::cell::Cell<Vec<Rows8>> = const { core::cell::Cell::new(Vec::new()) };
}

/// An ISA's inner loops. Each method is a safe-to-call-only-after-[`tile_imp`]'s-checks
/// entry into kernels compiled with the ISA's features.
pub(super) trait Isa {
    /// Backend name (`"avx2"`, `"avx512vnni"`).
    const NAME: &'static str;
    /// Whether the CPU (and [`crate::cpu`]'s cap) allows the kernels.
    fn available() -> bool;
    /// The `vec_dot` path: rows one by one against tokens `t0..t0+nt` (`nt ≤ TOK_CHUNK`).
    ///
    /// # Safety
    /// [`Isa::available`]; `a`'s rows, blocks, tokens and outputs in bounds.
    unsafe fn vec_rows<L: Lattice>(a: &Args, t0: usize, nt: usize);
    /// Block `b` of 8 rows (byte offsets `ro` from `w0`) decoded for the tiled path.
    ///
    /// # Safety
    /// [`Isa::available`]; block `b` of every row `w0 + ro[i]` readable.
    unsafe fn decode_rows8<L: Lattice>(w0: *const u8, ro: &[usize; 8], b: usize) -> Rows8;
    /// The tiled path: rows in groups of 8 against tokens `t0..t0+nt`, the blocks decoded
    /// on the fly or taken from `pre` ([`decode_all`]'s layout).
    ///
    /// # Safety
    /// As [`Isa::vec_rows`]; `pre`, when given, decoded from this tile.
    unsafe fn tiled_rows<L: Lattice>(a: &Args, t0: usize, nt: usize, pre: Option<&[Rows8]>);
    /// The tiled path for the whole tile through a wide engine ([`super::k16`] on AVX-512
    /// VNNI), when the ISA has one and the tile is wide enough; false: not taken.
    ///
    /// # Safety
    /// As [`Isa::vec_rows`], for all `a.tokens` tokens.
    unsafe fn wide_rows<L: Lattice>(a: &Args) -> bool;
}

/// Every 8-row group and block of the tile decoded into `out`: `out[(r0 / 8)·nb + b]`.
///
/// # Safety
/// As [`Isa::vec_rows`].
unsafe fn decode_all<I: Isa, L: Lattice>(a: &Args, out: &mut Vec<Rows8>) {
    out.clear();
    out.reserve(a.rows.div_ceil(8) * a.nb);
    for r0 in (0..a.rows).step_by(8) {
        let ro = row_offsets((a.rows - r0).min(8), a.w_stride);
        for b in 0..a.nb {
            out.push(I::decode_rows8::<L>(a.w.add(r0 * a.w_stride), &ro, b));
        }
    }
}

/// The tile kernel of format `L` on ISA `I`, along [`s::path`].
pub(super) fn tile_imp<I: Isa, L: Lattice>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_run::<I, L>(t, y, y_stride, true)
}

/// [`tile_imp`], with or without the ISA's wide engine ([`Isa::wide_rows`]) for tiled
/// tiles (the tests compare the two).
pub(super) fn tile_run<I: Isa, L: Lattice>(t: &Tile<'_>, y: &mut [f32], y_stride: usize, wide: bool) {
    let nb = check_tile(t, y, y_stride, I::available(), I::NAME, 256, L::BYTES, Q8_K_BYTES);
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let args = Args::new(t, nb, y, y_stride);
    let tiled = s::path(t) == Path::Tiled;
    // SAFETY: `check_tile` verified the bounds of every weight row, activation row and
    // output of the tile, and that the CPU has the ISA's features.
    if tiled && wide && unsafe { I::wide_rows::<L>(&args) } {
        return;
    }
    let chunks = (0..t.tokens).step_by(TOK_CHUNK).map(|t0| (t0, (t.tokens - t0).min(TOK_CHUNK)));
    if tiled {
        // Weights-stationary: each group of `SUB_ROWS` rows decoded once into a per-thread
        // buffer (a few hundred KiB at most, reused between calls), then run against every
        // token chunk of the tile — no row's decoding repeats within a tile, and nothing
        // decoded outlives the call.
        let mut dec = DECODED.with(|c| c.take());
        for r0 in (0..t.rows).step_by(SUB_ROWS) {
            let nr = SUB_ROWS.min(t.rows - r0);
            // SAFETY: rows `r0..r0+nr` of the checked tile and their outputs (`check_tile`
            // verified every row's `nb` blocks, every activation row and output), the CPU
            // has the ISA's features; `dec` is decoded from exactly these rows.
            unsafe {
                let sub = Args { w: args.w.add(r0 * t.w_stride), rows: nr, y: args.y.add(r0), ..args };
                decode_all::<I, L>(&sub, &mut dec);
                for (t0, nt) in chunks.clone() {
                    I::tiled_rows::<L>(&sub, t0, nt, Some(&dec));
                }
            }
        }
        DECODED.with(|c| c.set(dec));
        return;
    }
    for (t0, nt) in chunks {
        // SAFETY: `check_tile` verified that every weight row (`nb` blocks), activation row
        // (`nb` Q8_K blocks) and output the kernels touch is in bounds, and that the CPU
        // has the features; the kernels read rows `0..rows` and tokens `t0..t0+nt`.
        unsafe { I::vec_rows::<L>(&args, t0, nt) };
    }
}

/// On one ISA: the [`Isa`] implementation (`$isa`, over the module's `vec_rows`,
/// `decode_rows8` and `tiled_rows`), the tile and `vec_dot` functions of the five formats, and
/// their registrations.
macro_rules! lattice_kernels {
    ($isa:ident, $name:literal, $available:path, $priority:expr, $tile_tokens:expr) => {
        /// This ISA's inner loops of the lattice kernels.
        pub(super) struct $isa;

        impl crate::arch::x86_64::lattice::Isa for $isa {
            const NAME: &'static str = $name;
            fn available() -> bool {
                $available()
            }
            unsafe fn vec_rows<L: Lattice>(a: &Args, t0: usize, nt: usize) {
                vec_rows::<L>(a, t0, nt)
            }
            unsafe fn decode_rows8<L: Lattice>(w0: *const u8, ro: &[usize; 8], b: usize) -> Rows8 {
                decode_rows8::<L>(w0, ro, b)
            }
            unsafe fn tiled_rows<L: Lattice>(a: &Args, t0: usize, nt: usize, pre: Option<&[Rows8]>) {
                tiled_rows::<L>(a, t0, nt, pre)
            }
            unsafe fn wide_rows<L: Lattice>(a: &Args) -> bool {
                wide_rows::<L>(a)
            }
        }

        crate::arch::x86_64::lattice::lattice_kernels!(@formats $isa, $priority, $tile_tokens;
            Iq3S, iq3_s, iq3_s_tile, iq3_s_q8_k;
            Iq2Xs, iq2_xs, iq2_xs_tile, iq2_xs_q8_k;
            Iq2Xxs, iq2_xxs, iq2_xxs_tile, iq2_xxs_q8_k;
            Iq3Xxs, iq3_xxs, iq3_xxs_tile, iq3_xxs_q8_k;
            Iq2S, iq2_s, iq2_s_tile, iq2_s_q8_k;
        );
    };
    (@formats $isa:ident, $priority:expr, $tile_tokens:expr; $($fmt:ident, $module:ident, $tile:ident, $dot:ident;)*) => {$(
        #[doc = concat!("`", stringify!($module), "` × Q8_K tile along [`crate::scalar::lattice::path`].")]
        pub fn $tile(t: &crate::registry::Tile<'_>, y: &mut [f32], y_stride: usize) {
            crate::arch::x86_64::lattice::tile_imp::<$isa, crate::arch::x86_64::lattice::$fmt>(t, y, y_stride)
        }

        #[doc = concat!("`ggml_vec_dot_", stringify!($module), "_q8_K` (a 1 × 1 tile).")]
        pub fn $dot(n: usize, w: &[u8], x: &[u8]) -> f32 {
            crate::arch::x86_64::tiles::dot_via_tile($tile, n, w, x)
        }

        inventory::submit! {
            crate::registry::Kernel::new(
                <ggml_quants::types::$module::$fmt as ggml_quants::GgmlType>::ID,
                <$isa as crate::arch::x86_64::lattice::Isa>::NAME,
                $priority,
                <ggml_quants::types::q8_k::Q8K as ggml_quants::GgmlType>::ID,
                $dot,
            )
            .with_available(<$isa as crate::arch::x86_64::lattice::Isa>::available)
            .with_tile($tile)
            .with_tile_tokens($tile_tokens)
        }
    )*};
}
pub(super) use lattice_kernels;
