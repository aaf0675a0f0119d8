//! Tile kernels for the ternary types TQ1_0 and TQ2_0 (× Q8_K) on AVX2 and AVX-512 VNNI,
//! in the arithmetic of ggml's AVX2 `vec_dot` ([`crate::scalar::ternary`] holds the scalar
//! twins and describes it): a block's digits are decoded once per row into 8 vectors of
//! 32 (row `r` = elements `32r..32r+32`) and dotted with every token of the tile; per
//! 32-bit lane the exact `Σ digit·x` minus two Q8_K block sums, then
//! `acc = fma(f32(lanes), d_x·d_w, acc)` block after block and `hsum_float_8`.
//!
//! The ISAs differ only in the integer multiply ([`Isa::rows8`]): AVX2 sums ggml's
//! `maddubs` pairs in 16 bits (at most `8·2·2·127`, exact) and widens them with one `madd`;
//! VNNI chains `vpdpbusd`. The digits come out as ggml computes them (TQ1_0's base-3
//! bytes scaled by `3ⁿ` with byte adds and shifts, the top digit by the `avg` trick, equal
//! to `(q·3) >> 8` for every byte), so the products agree bit for bit with the twins.

use core::arch::x86_64::*;

use super::has_avx2;
use super::tiles::{check_tile, dot_via_tile, f16_at, hsum_float_8, load256, TileArgs};
use super::vnni::has_vnni;
use crate::registry::Tile;
use crate::scalar::act::Q8_K_BYTES;
use crate::scalar::ternary::{TQ1_0_BYTES, TQ2_0_BYTES};

/// One ternary format: block size and digit decoder.
trait Format {
    /// Bytes per block (the fp16 scale is the last two).
    const BYTES: usize;
    /// The block's 256 digits (`0..=2`) as 8 rows of 32 bytes.
    ///
    /// # Safety
    /// AVX2 present; `b` points at a whole block.
    unsafe fn digits(b: *const u8) -> [__m256i; 8];
}

struct Tq1_0;
struct Tq2_0;

/// `q·3ⁿ` (mod 256) per byte from `q`: `×3` by two adds, `×9` by a shift and an add.
#[inline(always)]
unsafe fn times3(q: __m256i) -> __m256i {
    _mm256_add_epi8(q, _mm256_add_epi8(q, q))
}

#[inline(always)]
unsafe fn times9(q: __m256i) -> __m256i {
    _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16::<3>(q), _mm256_set1_epi8(-8)), q)
}

/// The top base-3 digit of every byte, `(q·3) >> 8`: ggml's `avg` trick.
#[inline(always)]
unsafe fn top_trit(q: __m256i) -> __m256i {
    let q = _mm256_subs_epu8(q, _mm256_set1_epi8(1));
    let q = _mm256_avg_epu8(q, _mm256_avg_epu8(q, _mm256_setzero_si256()));
    _mm256_and_si256(_mm256_srli_epi16::<6>(q), _mm256_set1_epi8(3))
}

impl Format for Tq1_0 {
    const BYTES: usize = TQ1_0_BYTES;

    #[inline(always)]
    unsafe fn digits(b: *const u8) -> [__m256i; 8] {
        // Rows 0..5: byte m of qs[0..32] scaled by 3ⁿ is element 32n + m.
        let q0 = load256(b);
        let (q1, q2) = (times3(q0), times9(q0));
        let (q3, q4) = (times9(q1), times9(q2));
        // Rows 5..8: qs[32..48] scaled by 1, 3 | 9, 27 | 81, then the 16 qh digits.
        let h = _mm_loadu_si128(b.add(32) as *const __m128i);
        let h = _mm256_broadcastsi128_si256(h);
        let h01 = _mm256_blend_epi32::<0xF0>(h, times3(h));
        let h23 = times9(h01);
        let qh = (b.add(48) as *const i32).read_unaligned();
        let qh16 = _mm256_cvtepu8_epi16(_mm_set1_epi32(qh));
        let qh16 = _mm256_mullo_epi16(qh16, _mm256_set_epi16(27, 27, 27, 27, 9, 9, 9, 9, 3, 3, 3, 3, 1, 1, 1, 1));
        let qh16 = _mm256_and_si256(qh16, _mm256_set1_epi16(0xFF));
        let qh8 = _mm_packus_epi16(_mm256_castsi256_si128(qh16), _mm256_extracti128_si256::<1>(qh16));
        let h45 = _mm256_inserti128_si256::<1>(times9(h23), qh8);
        [q0, q1, q2, q3, q4, h01, h23, h45].map(|v| top_trit(v))
    }
}

impl Format for Tq2_0 {
    const BYTES: usize = TQ2_0_BYTES;

    #[inline(always)]
    unsafe fn digits(b: *const u8) -> [__m256i; 8] {
        // Bits 2l..2l+2 of byte j + m are element 4j + 32l + m (j = 0, 32).
        let m = _mm256_set1_epi8(3);
        let (a, c) = (load256(b), load256(b.add(32)));
        [
            _mm256_and_si256(a, m),
            _mm256_and_si256(_mm256_srli_epi16::<2>(a), m),
            _mm256_and_si256(_mm256_srli_epi16::<4>(a), m),
            _mm256_and_si256(_mm256_srli_epi16::<6>(a), m),
            _mm256_and_si256(c, m),
            _mm256_and_si256(_mm256_srli_epi16::<2>(c), m),
            _mm256_and_si256(_mm256_srli_epi16::<4>(c), m),
            _mm256_and_si256(_mm256_srli_epi16::<6>(c), m),
        ]
    }
}

/// The inner kernel's view of a tile (bounds checked by [`tile_imp`]).
type Args = TileArgs;

/// Most tokens one pass over a row serves (their accumulators live on the stack).
const TOK_CHUNK: usize = 16;

/// An ISA: its integer multiply and its entry into the kernel.
trait Isa {
    /// Backend name.
    const NAME: &'static str;
    /// Whether the CPU (and [`crate::cpu`]'s cap) allows the kernels.
    fn available() -> bool;
    /// Per 4-byte lane, `Σ digit·x` over the 8 rows of 32 (`x` the 256 activation bytes).
    ///
    /// # Safety
    /// The ISA's features present; 256 readable bytes at `x`.
    unsafe fn rows8(d: &[__m256i; 8], x: *const u8) -> __m256i;
    /// [`rows`] compiled with the ISA's features.
    ///
    /// # Safety
    /// [`Isa::available`]; every row, activation row and output of `a` in bounds.
    unsafe fn run<F: Format>(a: &Args);
}

struct Avx2;
struct Vnni;

impl Isa for Avx2 {
    const NAME: &'static str = "avx2";
    fn available() -> bool {
        has_avx2()
    }
    #[inline(always)]
    unsafe fn rows8(d: &[__m256i; 8], x: *const u8) -> __m256i {
        let mut s = _mm256_setzero_si256();
        for (r, dr) in d.iter().enumerate() {
            s = _mm256_add_epi16(s, _mm256_maddubs_epi16(*dr, load256(x.add(32 * r))));
        }
        _mm256_madd_epi16(s, _mm256_set1_epi16(1))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run<F: Format>(a: &Args) {
        rows::<Self, F>(a)
    }
}

impl Isa for Vnni {
    const NAME: &'static str = "avx512vnni";
    fn available() -> bool {
        has_vnni()
    }
    #[inline(always)]
    unsafe fn rows8(d: &[__m256i; 8], x: *const u8) -> __m256i {
        let mut s = _mm256_setzero_si256();
        for (r, dr) in d.iter().enumerate() {
            s = _mm256_dpbusd_epi32(s, *dr, load256(x.add(32 * r)));
        }
        s
    }
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn run<F: Format>(a: &Args) {
        rows::<Self, F>(a)
    }
}

/// Every row of the tile against its tokens, `TOK_CHUNK` at a time, each block's digits
/// decoded once per row and chunk.
#[inline(always)]
unsafe fn rows<I: Isa, F: Format>(a: &Args) {
    let ones = _mm256_set1_epi16(1);
    for t0 in (0..a.tokens).step_by(TOK_CHUNK) {
        let nt = (a.tokens - t0).min(TOK_CHUNK);
        for r in 0..a.rows {
            let wr = a.w.add(r * a.w_stride);
            let mut acc = [_mm256_setzero_ps(); TOK_CHUNK];
            for b in 0..a.nb {
                let wb = wr.add(b * F::BYTES);
                let dw = f16_at(wb.add(F::BYTES - 2));
                let digits = F::digits(wb);
                for (t, acc) in acc.iter_mut().enumerate().take(nt) {
                    let xb = a.x.add((t0 + t) * a.x_stride + b * Q8_K_BYTES);
                    // bsums[2j] + bsums[2j + 1] in lane j.
                    let bs = _mm256_madd_epi16(load256(xb.add(260)), ones);
                    let lanes = _mm256_sub_epi32(I::rows8(&digits, xb.add(4)), bs);
                    let d = (xb as *const f32).read_unaligned() * dw;
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(d), *acc);
                }
            }
            for (t, acc) in acc.iter().enumerate().take(nt) {
                *a.y.add((t0 + t) * a.y_stride + r) = hsum_float_8(*acc);
            }
        }
    }
}

/// The tile kernel of format `F` on ISA `I` (every product in `vec_dot`'s arithmetic).
fn tile_imp<I: Isa, F: Format>(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = check_tile(t, y, y_stride, I::available(), I::NAME, 256, F::BYTES, Q8_K_BYTES);
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let a = Args::new(t, nb, y, y_stride);
    // SAFETY: `check_tile` verified that every weight row (`nb` blocks), activation row
    // (`nb` Q8_K blocks) and output the kernel touches is in bounds, and that the CPU has
    // the ISA's features.
    unsafe { I::run::<F>(&a) }
}

/// The tile and `vec_dot` functions on one ISA, and their registrations.
macro_rules! ternary_kernels {
    ($module:ident, $isa:ty, $priority:expr) => {
        /// The TQ1_0 and TQ2_0 kernels on one ISA.
        pub mod $module {
            use super::*;

            /// TQ1_0 × Q8_K tile.
            pub fn tq1_0_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
                tile_imp::<$isa, Tq1_0>(t, y, y_stride)
            }

            /// TQ2_0 × Q8_K tile.
            pub fn tq2_0_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
                tile_imp::<$isa, Tq2_0>(t, y, y_stride)
            }

            /// `ggml_vec_dot_tq1_0_q8_K`.
            pub fn tq1_0_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
                dot_via_tile(tq1_0_tile, n, w, x)
            }

            /// `ggml_vec_dot_tq2_0_q8_K`.
            pub fn tq2_0_q8_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
                dot_via_tile(tq2_0_tile, n, w, x)
            }

            mod registration {
                use super::*;
                use crate::registry::Kernel;
                use ggml_quants::types::{q8_k::Q8K, tq1_0, tq2_0};
                use ggml_quants::GgmlType;

                inventory::submit! {
                    Kernel::new(<tq1_0::Tq1_0 as GgmlType>::ID, <$isa as Isa>::NAME, $priority, <Q8K as GgmlType>::ID, tq1_0_q8_k)
                        .with_available(<$isa as Isa>::available)
                        .with_tile(tq1_0_tile)
                }
                inventory::submit! {
                    Kernel::new(<tq2_0::Tq2_0 as GgmlType>::ID, <$isa as Isa>::NAME, $priority, <Q8K as GgmlType>::ID, tq2_0_q8_k)
                        .with_available(<$isa as Isa>::available)
                        .with_tile(tq2_0_tile)
                }
            }
        }
    };
}

ternary_kernels!(avx2, Avx2, 10);
ternary_kernels!(vnni, Vnni, 20);
