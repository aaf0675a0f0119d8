//! Q4_0 weights repacked at load time into groups of 8 rows (llama.cpp repacks every
//! q4_0 matrix whose row count is a multiple of 8 on AVX2 machines, `block_q4_0x8`).
//!
//! Layout per 8-row group and 32-column block (144 bytes, the size of the 8 original
//! blocks): the 8 fp16 scales, then four 32-byte vectors; vector `k` holds, for row `i`,
//! bytes `4k..4k+4` of that row's 16 quant bytes at `4i..4i+4`. Masking the low nibbles
//! of vector `k` gives, in i32 lane `i`, row `i`'s elements `4k..4k+4`; shifting gives
//! elements `16+4k..16+4k+4`. One `vpdpbusd` with the activation's 4 matching bytes
//! broadcast thus accumulates 4 products for all 8 rows: no horizontal sums.
//!
//! The arithmetic per output is the one of the unrepacked q4_0 kernel in [`super::vnni`]
//! (and of llama.cpp's `gemv/gemm_q4_0_8x8_q8_0`): per block the exact integer dot
//! `Σ (q − 8)·x`, then `acc = fma(Σ, d_w·d_x, acc)`, so the results are bit-identical.

use core::arch::x86_64::*;

use super::tiles::Ahead;
use super::vnni::has_vnni;
use crate::registry::{Repack, Tile};
use crate::scalar::act::Q8_0_BYTES;

const WB: usize = 18;
const GROUP_BLOCK: usize = 8 * WB;

/// llama.cpp repacks q4_0 matrices whose row count is a multiple of 8.
fn applies(rows: usize, cols: usize) -> bool {
    rows > 0 && rows.is_multiple_of(8) && cols.is_multiple_of(32)
}

/// GGUF q4_0 rows → the 8-row group layout (see the module docs).
pub fn repack(w: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let nb = cols / 32;
    let row = nb * WB;
    let mut out = vec![0u8; w.len()];
    // Fixed-size blocks, so that every copy below has constant bounds (no checks per
    // byte range: the repack runs over the whole file at load time).
    for (src, dst) in w.chunks_exact(8 * row).zip(out.chunks_exact_mut(8 * row)).take(rows / 8) {
        let rows8: [&[u8]; 8] = std::array::from_fn(|i| &src[i * row..(i + 1) * row]);
        for (b, ob) in dst.chunks_exact_mut(GROUP_BLOCK).enumerate() {
            let ob: &mut [u8; GROUP_BLOCK] = ob.try_into().expect("a group block");
            for (i, r) in rows8.iter().enumerate() {
                let blk: &[u8; WB] = r[b * WB..(b + 1) * WB].try_into().expect("a q4_0 block");
                ob[2 * i..2 * i + 2].copy_from_slice(&blk[..2]);
                for k in 0..4 {
                    let d = 16 + 32 * k + 4 * i;
                    ob[d..d + 4].copy_from_slice(&blk[2 + 4 * k..6 + 4 * k]);
                }
            }
        }
    }
    out
}

/// Tile over repacked q4_0 rows (`t.rows` a multiple of 8) × Q8_0 activations.
pub fn tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    assert!(has_vnni(), "q4_0x8 tile called on a CPU without AVX-512 VNNI");
    let nb = t.n / 32;
    assert_eq!(nb * 32, t.n, "q4_0x8: columns not a whole number of blocks");
    assert!(t.rows.is_multiple_of(8), "q4_0x8: rows not a multiple of 8");
    if t.rows == 0 || t.tokens == 0 {
        return;
    }
    let row = nb * WB;
    let x_row = nb * Q8_0_BYTES;
    assert!(t.w_stride == row && t.w.len() >= t.rows * row, "q4_0x8: weight rows");
    assert!(t.x_stride >= x_row && t.x.len() >= (t.tokens - 1) * t.x_stride + x_row, "q4_0x8: activation rows");
    assert!(y_stride >= t.rows && y.len() >= (t.tokens - 1) * y_stride + t.rows, "q4_0x8: output");
    // Per (token, block): the activation scale and −8·Σx (the q4_0 offset).
    let mut dx = vec![0f32; t.tokens * nb];
    let mut off = vec![0i32; t.tokens * nb];
    for tok in 0..t.tokens {
        for b in 0..nb {
            let xb = &t.x[tok * t.x_stride + b * Q8_0_BYTES..][..Q8_0_BYTES];
            dx[tok * nb + b] = half::f16::from_le_bytes([xb[0], xb[1]]).to_f32();
            off[tok * nb + b] = -8 * xb[2..].iter().map(|&v| v as i8 as i32).sum::<i32>();
        }
    }
    // SAFETY: the asserts above bound every weight group, activation row and output the
    // kernel touches; the features were detected at run time (`has_vnni`).
    unsafe {
        // Pairs of 8-row groups, 16 rows per 512-bit vector, 8 tokens per pass. One token
        // keeps the one-group kernel (a single weight stream, as for the legacy tiles).
        let pairs = if t.tokens >= 2 { t.rows / 16 } else { 0 };
        let mut t0 = 0;
        while pairs > 0 && t0 < t.tokens {
            let a = (t.w.as_ptr(), pairs, nb, t.x.as_ptr(), t.x_stride, dx.as_ptr(), off.as_ptr());
            let (w, pairs, nb, x, xs, dx, off) = a;
            let yp = y.as_mut_ptr();
            match t.tokens - t0 {
                1 => imp16::<1>(w, pairs, nb, x, xs, dx, off, t0, yp, y_stride),
                2 => imp16::<2>(w, pairs, nb, x, xs, dx, off, t0, yp, y_stride),
                3 => imp16::<3>(w, pairs, nb, x, xs, dx, off, t0, yp, y_stride),
                4 => imp16::<4>(w, pairs, nb, x, xs, dx, off, t0, yp, y_stride),
                5 => imp16::<5>(w, pairs, nb, x, xs, dx, off, t0, yp, y_stride),
                6 => imp16::<6>(w, pairs, nb, x, xs, dx, off, t0, yp, y_stride),
                7 => imp16::<7>(w, pairs, nb, x, xs, dx, off, t0, yp, y_stride),
                _ => imp16::<8>(w, pairs, nb, x, xs, dx, off, t0, yp, y_stride),
            }
            t0 += 8;
        }
        // The groups left (the last of an odd number; all of them for one token).
        let r0 = 16 * pairs;
        let mut t0 = 0;
        while r0 < t.rows && t0 < t.tokens {
            let a = (t.w.as_ptr().add(r0 * row), t.rows - r0, nb, t.x.as_ptr(), t.x_stride, dx.as_ptr(), off.as_ptr());
            let (w, rows, nb, x, xs, dx, off) = a;
            let yp = y.as_mut_ptr().add(r0);
            match t.tokens - t0 {
                1 => imp::<1>(w, rows, nb, x, xs, dx, off, t0, yp, y_stride),
                2 => imp::<2>(w, rows, nb, x, xs, dx, off, t0, yp, y_stride),
                3 => imp::<3>(w, rows, nb, x, xs, dx, off, t0, yp, y_stride),
                _ => imp::<4>(w, rows, nb, x, xs, dx, off, t0, yp, y_stride),
            }
            t0 += 4;
        }
    }
}

/// Group pairs `0..pairs` (rows `16p..16p+16`) against tokens `t0..t0+T`: [`imp`] with
/// group `2p` in the low 256 bits and `2p+1` in the high ones of each vector, so every
/// lane runs the same operations in the same order (the same bits).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn imp16<const T: usize>(
    w: *const u8,
    pairs: usize,
    nb: usize,
    x: *const u8,
    x_stride: usize,
    dx: *const f32,
    off: *const i32,
    t0: usize,
    y: *mut f32,
    y_stride: usize,
) {
    let m4 = _mm512_set1_epi8(0xF);
    let join = |a: *const u8, b: *const u8| {
        let lo = _mm512_castsi256_si512(_mm256_loadu_si256(a as *const __m256i));
        _mm512_inserti64x4::<1>(lo, _mm256_loadu_si256(b as *const __m256i))
    };
    for g in 0..pairs {
        let gw0 = w.add(2 * g * 8 * nb * WB);
        let gw1 = gw0.add(8 * nb * WB);
        let mut acc = [_mm512_setzero_ps(); T];
        for b in 0..nb {
            let (p0, p1) = (gw0.add(b * GROUP_BLOCK), gw1.add(b * GROUP_BLOCK));
            let h0 = _mm256_castsi128_si256(_mm_loadu_si128(p0 as *const __m128i));
            let dh = _mm256_inserti128_si256::<1>(h0, _mm_loadu_si128(p1 as *const __m128i));
            let dw = _mm512_cvtph_ps(dh);
            let mut lo = [_mm512_setzero_si512(); 4];
            let mut hi = [_mm512_setzero_si512(); 4];
            for k in 0..4 {
                let v = join(p0.add(16 + 32 * k), p1.add(16 + 32 * k));
                lo[k] = _mm512_and_si512(v, m4);
                hi[k] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
            }
            for (t, acc) in acc.iter_mut().enumerate() {
                let i = (t0 + t) * nb + b;
                let xq = x.add((t0 + t) * x_stride + b * Q8_0_BYTES + 2);
                let mut s = _mm512_set1_epi32(*off.add(i));
                for k in 0..4 {
                    let xl = _mm512_set1_epi32((xq.add(4 * k) as *const i32).read_unaligned());
                    let xh = _mm512_set1_epi32((xq.add(16 + 4 * k) as *const i32).read_unaligned());
                    s = _mm512_dpbusd_epi32(s, lo[k], xl);
                    s = _mm512_dpbusd_epi32(s, hi[k], xh);
                }
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(*dx.add(i)));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, *acc);
            }
        }
        for (t, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(y.add((t0 + t) * y_stride + 16 * g), *acc);
        }
    }
}

/// Groups `0..rows/8` against tokens `t0..t0+T`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn imp<const T: usize>(
    w: *const u8,
    rows: usize,
    nb: usize,
    x: *const u8,
    x_stride: usize,
    dx: *const f32,
    off: *const i32,
    t0: usize,
    y: *mut f32,
    y_stride: usize,
) {
    let m4 = _mm256_set1_epi8(0xF);
    for g in 0..rows / 8 {
        let gw = w.add(g * 8 * nb * WB);
        let mut acc = [_mm256_setzero_ps(); T];
        let mut ahead = Ahead::new(gw.wrapping_add(8 * nb * WB));
        for b in 0..nb {
            // One token: the next group's bytes are fetched to L2 one block per block
            // (llama-1b Q4_0 tg64 on Sapphire Rapids, 2 threads: 19.7 → 23.5 t/s).
            if T == 1 {
                ahead.advance(GROUP_BLOCK);
            }
            let p = gw.add(b * GROUP_BLOCK);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
            let mut lo = [_mm256_setzero_si256(); 4];
            let mut hi = [_mm256_setzero_si256(); 4];
            for k in 0..4 {
                let v = _mm256_loadu_si256(p.add(16 + 32 * k) as *const __m256i);
                lo[k] = _mm256_and_si256(v, m4);
                hi[k] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
            }
            for (t, acc) in acc.iter_mut().enumerate() {
                let i = (t0 + t) * nb + b;
                let xq = x.add((t0 + t) * x_stride + b * Q8_0_BYTES + 2);
                let mut s = _mm256_set1_epi32(*off.add(i));
                for k in 0..4 {
                    let xl = _mm256_set1_epi32((xq.add(4 * k) as *const i32).read_unaligned());
                    let xh = _mm256_set1_epi32((xq.add(16 + 4 * k) as *const i32).read_unaligned());
                    s = _mm256_dpbusd_epi32(s, lo[k], xl);
                    s = _mm256_dpbusd_epi32(s, hi[k], xh);
                }
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(*dx.add(i)));
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, *acc);
            }
        }
        for (t, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(y.add((t0 + t) * y_stride + 8 * g), *acc);
        }
    }
}

/// The layout, owned by the AVX-512 VNNI q4_0 kernel (`kernels.rs`).
pub const LAYOUT: Repack = Repack { name: "q4_0x8", applies, repack, tile };

#[cfg(test)]
mod tests {
    /// The layout of the module docs, byte by byte.
    fn reference(w: &[u8], rows: usize, cols: usize) -> Vec<u8> {
        let (nb, wb) = (cols / 32, super::WB);
        let row = nb * wb;
        let mut out = vec![0u8; w.len()];
        for g in 0..rows / 8 {
            for b in 0..nb {
                let o = g * 8 * row + b * super::GROUP_BLOCK;
                for i in 0..8 {
                    let src = &w[(8 * g + i) * row + b * wb..][..wb];
                    out[o + 2 * i..o + 2 * i + 2].copy_from_slice(&src[..2]);
                    for k in 0..4 {
                        for e in 0..4 {
                            out[o + 16 + 32 * k + 4 * i + e] = src[2 + 4 * k + e];
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn repack_follows_the_documented_layout() {
        let mut s = 5u32;
        for (rows, cols) in [(8, 32), (16, 96), (24, 2048), (8, 64)] {
            let w: Vec<u8> = (0..rows * cols / 32 * super::WB)
                .map(|_| {
                    s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                    (s >> 24) as u8
                })
                .collect();
            assert_eq!(super::repack(&w, rows, cols), reference(&w, rows, cols), "{rows}x{cols}");
        }
    }
}
