//! Scalar dot products of one weight row with one activation row, per weight type, in
//! the arithmetic of ggml-cpu's generic kernels (`ggml-cpu/quants.c`,
//! `ggml_vec_dot_<type>_<vec_dot_type>_generic`): exact integer sums per block, then one
//! f32 multiply-add per block (per super-block for the K types).
//!
//! Layouts are ggml's `block_*` structs (`ggml-common.h`); offsets are spelled out here.

use super::act::{Q8_0_BYTES, Q8_1_BYTES, Q8_K_BYTES};
use super::{f16_at, f32_at, i16_at};

/// Sum over (weight block, activation block) pairs.
#[inline(always)]
fn blocks<'a>(w: &'a [u8], wb: usize, x: &'a [u8], xb: usize) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
    w.chunks_exact(wb).zip(x.chunks_exact(xb))
}

#[inline(always)]
fn q8(x: &[u8], at: usize) -> i32 {
    x[at] as i8 as i32
}

/// `ggml_vec_dot_q4_0_q8_0`: block_q4_0 = fp16 d, 16 bytes of nibbles (low: 0..16, high: 16..32), value q − 8.
pub fn q4_0_q8_0(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in blocks(w, 18, x, Q8_0_BYTES) {
        let mut sumi = 0i32;
        for j in 0..16 {
            sumi += ((b[2 + j] & 0xF) as i32 - 8) * q8(y, 2 + j) + ((b[2 + j] >> 4) as i32 - 8) * q8(y, 18 + j);
        }
        sumf += sumi as f32 * (f16_at(b, 0) * f16_at(y, 0));
    }
    sumf
}

/// `ggml_vec_dot_q4_1_q8_1`: block_q4_1 = fp16 d, fp16 m, 16 bytes of nibbles; x = d·q + m.
pub fn q4_1_q8_1(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in blocks(w, 20, x, Q8_1_BYTES) {
        let mut sumi = 0i32;
        for j in 0..16 {
            sumi += (b[4 + j] & 0xF) as i32 * q8(y, 4 + j) + (b[4 + j] >> 4) as i32 * q8(y, 20 + j);
        }
        sumf += (f16_at(b, 0) * f16_at(y, 0)) * sumi as f32 + f16_at(b, 2) * f16_at(y, 2);
    }
    sumf
}

/// `ggml_vec_dot_q5_0_q8_0`: block_q5_0 = fp16 d, u32 qh (5th bits), 16 bytes of nibbles; value q − 16.
pub fn q5_0_q8_0(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in blocks(w, 22, x, Q8_0_BYTES) {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let mut sumi = 0i32;
        for j in 0..16 {
            let h0 = (((qh >> j) << 4) & 0x10) as i32;
            let h1 = ((qh >> (j + 12)) & 0x10) as i32;
            sumi += (((b[6 + j] & 0xF) as i32 | h0) - 16) * q8(y, 2 + j)
                + (((b[6 + j] >> 4) as i32 | h1) - 16) * q8(y, 18 + j);
        }
        sumf += sumi as f32 * (f16_at(b, 0) * f16_at(y, 0));
    }
    sumf
}

/// `ggml_vec_dot_q5_1_q8_1`: block_q5_1 = fp16 d, fp16 m, u32 qh, 16 bytes of nibbles; x = d·q + m.
pub fn q5_1_q8_1(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in blocks(w, 24, x, Q8_1_BYTES) {
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let mut sumi = 0i32;
        for j in 0..16 {
            let h0 = (((qh >> j) << 4) & 0x10) as i32;
            let h1 = ((qh >> (j + 12)) & 0x10) as i32;
            sumi += ((b[8 + j] & 0xF) as i32 | h0) * q8(y, 4 + j) + ((b[8 + j] >> 4) as i32 | h1) * q8(y, 20 + j);
        }
        sumf += (f16_at(b, 0) * f16_at(y, 0)) * sumi as f32 + f16_at(b, 2) * f16_at(y, 2);
    }
    sumf
}

/// `ggml_vec_dot_q8_0_q8_0`.
pub fn q8_0_q8_0(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in blocks(w, Q8_0_BYTES, x, Q8_0_BYTES) {
        let sumi: i32 = (0..32).map(|j| q8(b, 2 + j) * q8(y, 2 + j)).sum();
        sumf += sumi as f32 * (f16_at(b, 0) * f16_at(y, 0));
    }
    sumf
}

/// Q8_K block sum `j` (of 16 values).
#[inline(always)]
fn bsum(y: &[u8], j: usize) -> i32 {
    i16_at(y, 260 + 2 * j) as i32
}

/// `Σ_{l<len} q8[at + l] · a[l]`.
#[inline(always)]
fn dot_i8(y: &[u8], at: usize, a: &[i8]) -> i32 {
    a.iter().enumerate().map(|(l, &v)| v as i32 * q8(y, at + l)).sum()
}

/// `ggml_vec_dot_q2_K_q8_K`: block_q2_K = `scales[16]` (low nibble scale, high nibble min),
/// `qs[64]` (2-bit), fp16 d, fp16 dmin.
pub fn q2_k_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in blocks(w, 84, x, Q8_K_BYTES) {
        let sc = &b[0..16];
        let summs: i32 = (0..16).map(|j| bsum(y, j) * (sc[j] >> 4) as i32).sum();
        let yd = f32_at(y, 0);
        let dall = yd * f16_at(b, 80);
        let dmin = yd * f16_at(b, 82);
        let mut isum = 0i32;
        let mut is = 0;
        let mut q8o = 4;
        for k in 0..2 {
            let q2 = &b[16 + 32 * k..16 + 32 * k + 32];
            for shift in [0, 2, 4, 6] {
                for half in 0..2 {
                    let d = (sc[is] & 0xF) as i32;
                    is += 1;
                    let s: i32 =
                        (0..16).map(|l| q8(y, q8o + 16 * half + l) * ((q2[16 * half + l] >> shift) & 3) as i32).sum();
                    isum += d * s;
                }
                q8o += 32;
            }
        }
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

/// The 16 signed 6-bit scales of a Q3_K block (before the −32).
pub(crate) fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    const K1: u32 = 0x0303_0303;
    const K2: u32 = 0x0f0f_0f0f;
    let a0 = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let a1 = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
    let tmp = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
    let out = [
        (a0 & K2) | ((tmp & K1) << 4),
        (a1 & K2) | (((tmp >> 2) & K1) << 4),
        ((a0 >> 4) & K2) | (((tmp >> 4) & K1) << 4),
        ((a1 >> 4) & K2) | (((tmp >> 6) & K1) << 4),
    ];
    let mut r = [0i8; 16];
    for (i, v) in out.iter().enumerate() {
        for (k, byte) in v.to_le_bytes().iter().enumerate() {
            r[4 * i + k] = *byte as i8;
        }
    }
    r
}

/// `ggml_vec_dot_q3_K_q8_K`: block_q3_K = `hmask[32]`, `qs[64]`, `scales[12]` (16 × 6 bit), fp16 d.
pub fn q3_k_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in blocks(w, 110, x, Q8_K_BYTES) {
        let hm = &b[0..32];
        let mut a = [0i8; 256];
        let mut m = 1u8;
        let mut o = 0;
        for j in 0..2 {
            let q3 = &b[32 + 32 * j..64 + 32 * j];
            for shift in [0, 2, 4, 6] {
                for l in 0..32 {
                    a[o + l] = ((q3[l] >> shift) & 3) as i8 - if hm[l] & m != 0 { 0 } else { 4 };
                }
                o += 32;
                m <<= 1;
            }
        }
        let scales = q3_k_scales(&b[96..108]);
        let isum: i32 = (0..16).map(|j| (scales[j] as i32 - 32) * dot_i8(y, 4 + 16 * j, &a[16 * j..16 * j + 16])).sum();
        sumf += f16_at(b, 108) * f32_at(y, 0) * isum as f32;
    }
    sumf
}

/// The 8 (scale, min) pairs of a Q4_K/Q5_K block (`get_scale_min_k4`).
#[inline(always)]
pub(crate) fn scale_min_k4(q: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..8 {
        if j < 4 {
            sc[j] = q[j] & 63;
            mn[j] = q[j + 4] & 63;
        } else {
            sc[j] = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
            mn[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        }
    }
    (sc, mn)
}

/// `ggml_vec_dot_q4_K_q8_K`: block_q4_K = fp16 d, fp16 dmin, `scales[12]`, `qs[128]`.
pub fn q4_k_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in blocks(w, 144, x, Q8_K_BYTES) {
        let (sc, mn) = scale_min_k4(&b[4..16]);
        let summ: i32 = (0..16).map(|j| bsum(y, j) * mn[j / 2] as i32).sum();
        let mut isum = 0i32;
        for c in 0..4 {
            let q4 = &b[16 + 32 * c..48 + 32 * c];
            let lo: i32 = (0..32).map(|l| (q4[l] & 0xF) as i32 * q8(y, 4 + 64 * c + l)).sum();
            let hi: i32 = (0..32).map(|l| (q4[l] >> 4) as i32 * q8(y, 36 + 64 * c + l)).sum();
            isum += sc[2 * c] as i32 * lo + sc[2 * c + 1] as i32 * hi;
        }
        let yd = f32_at(y, 0);
        sumf += f16_at(b, 0) * yd * isum as f32 - f16_at(b, 2) * yd * summ as f32;
    }
    sumf
}

/// `ggml_vec_dot_q5_K_q8_K`: block_q5_K = fp16 d, fp16 dmin, `scales[12]`, `qh[32]`, `qs[128]`.
pub fn q5_k_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in blocks(w, 176, x, Q8_K_BYTES) {
        let (sc, mn) = scale_min_k4(&b[4..16]);
        let qh = &b[16..48];
        let summ: i32 = (0..16).map(|j| bsum(y, j) * mn[j / 2] as i32).sum();
        let mut isum = 0i32;
        for c in 0..4 {
            let q4 = &b[48 + 32 * c..80 + 32 * c];
            let (m0, m1) = (1u8 << (2 * c), 1u8 << (2 * c + 1));
            let lo: i32 = (0..32)
                .map(|l| ((q4[l] & 0xF) as i32 + if qh[l] & m0 != 0 { 16 } else { 0 }) * q8(y, 4 + 64 * c + l))
                .sum();
            let hi: i32 = (0..32)
                .map(|l| ((q4[l] >> 4) as i32 + if qh[l] & m1 != 0 { 16 } else { 0 }) * q8(y, 36 + 64 * c + l))
                .sum();
            isum += sc[2 * c] as i32 * lo + sc[2 * c + 1] as i32 * hi;
        }
        let yd = f32_at(y, 0);
        sumf += f16_at(b, 0) * yd * isum as f32 - f16_at(b, 2) * yd * summ as f32;
    }
    sumf
}

/// `ggml_vec_dot_q6_K_q8_K`: block_q6_K = `ql[128]`, `qh[64]`, `scales[16]` (i8), fp16 d; value q − 32.
pub fn q6_k_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (b, y) in blocks(w, 210, x, Q8_K_BYTES) {
        let mut a = [0i8; 256];
        for j in 0..2 {
            let ql = &b[64 * j..64 * j + 64];
            let qh = &b[128 + 32 * j..160 + 32 * j];
            let a = &mut a[128 * j..128 * j + 128];
            for l in 0..32 {
                a[l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                a[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                a[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                a[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        let isum: i32 = (0..16).map(|j| b[192 + j] as i8 as i32 * dot_i8(y, 4 + 16 * j, &a[16 * j..16 * j + 16])).sum();
        sumf += f16_at(b, 208) * f32_at(y, 0) * isum as f32;
    }
    sumf
}

/// `ggml_vec_dot_f32` (scalar: sum in `ggml_float` = f64).
pub fn f32_f32(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let s: f64 = w.chunks_exact(4).zip(x.chunks_exact(4)).map(|(a, b)| (f32_at(a, 0) * f32_at(b, 0)) as f64).sum();
    s as f32
}

/// `ggml_vec_dot_f16` (activations converted to f16 first; scalar sums in f64).
pub fn f16_f16(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let s: f64 = w.chunks_exact(2).zip(x.chunks_exact(2)).map(|(a, b)| (f16_at(a, 0) * f16_at(b, 0)) as f64).sum();
    s as f32
}

/// `ggml_vec_dot_bf16` (activations converted to bf16 first; scalar sums in f64).
pub fn bf16_bf16(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let bf = |b: &[u8]| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
    let s: f64 = w.chunks_exact(2).zip(x.chunks_exact(2)).map(|(a, b)| (bf(a) * bf(b)) as f64).sum();
    s as f32
}

/// `_mm512_reduce_add_ps` of 16 lanes (halves, then quarters, pairs, neighbours), as GCC
/// and stdarch both expand it.
pub fn reduce16(v: &[f32; 16]) -> f32 {
    let mut t3 = [0f32; 8];
    for i in 0..8 {
        t3[i] = v[8 + i] + v[i];
    }
    let t6 = [t3[4] + t3[0], t3[5] + t3[1], t3[6] + t3[2], t3[7] + t3[3]];
    (t6[0] + t6[2]) + (t6[1] + t6[3])
}

/// `ggml_vec_dot_f32` of an AVX-512 build: 4 × 16 fused lanes over 64-element steps,
/// `GGML_F32x16_REDUCE`, then the leftovers as [`f32_leftovers`].
pub fn f32_f32_avx512(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let n = w.len().min(x.len()) / 4;
    let np = n - n % 64;
    let mut acc = [0f32; 64];
    for i in (0..np).step_by(64) {
        for (l, acc) in acc.iter_mut().enumerate() {
            *acc = f32_at(w, 4 * (i + l)).mul_add(f32_at(x, 4 * (i + l)), *acc);
        }
    }
    let s = super::ops::DotLayout::Avx512.reduce(&acc);
    f32_leftovers(s, np, n, |i| (f32_at(w, 4 * i), f32_at(x, 4 * i)))
}

/// The leftovers `np..n` of `ggml_vec_dot_f32` (`sumf += x[i]*y[i]`) as GCC builds them
/// for AVX-512 (disassembly of libggml-cpu): blocks of 16 and then one of 8 have their
/// products rounded (`vmulps`) and added to the sum lane by lane, in order; the last
/// fewer than 8 are fused multiply-adds (`vfmadd231ss`). `at(i)` is `(x[i], y[i])`.
pub fn f32_leftovers(mut s: f32, np: usize, n: usize, at: impl Fn(usize) -> (f32, f32)) -> f32 {
    let l = n - np;
    let mut i = np;
    let unfused = np + l / 16 * 16 + if l % 16 >= 8 { 8 } else { 0 };
    while i < unfused {
        let (a, b) = at(i);
        s += a * b;
        i += 1;
    }
    while i < n {
        let (a, b) = at(i);
        s = a.mul_add(b, s);
        i += 1;
    }
    s
}

/// One output of llamafile's tinyBLAS (`llamafile_sgemm`, which llama.cpp uses for F32 ×
/// F32 and F16 × F16 products of 2+ tokens when `k % 16 == 0` and the row count is a
/// multiple of 4): one 16-lane fused accumulator over `k`, then [`reduce16`]. `elem`
/// reads element `i` of a row.
fn tinyblas_dot(n: usize, elem: impl Fn(&[u8], usize) -> f32, w: &[u8], x: &[u8]) -> f32 {
    let mut acc = [0f32; 16];
    for i in (0..n - n % 16).step_by(16) {
        for (l, acc) in acc.iter_mut().enumerate() {
            *acc = elem(w, i + l).mul_add(elem(x, i + l), *acc);
        }
    }
    reduce16(&acc)
}

/// `tinyblas_dot` of f32 rows.
pub fn f32_f32_tinyblas(n: usize, w: &[u8], x: &[u8]) -> f32 {
    tinyblas_dot(n, |b, i| f32_at(b, 4 * i), w, x)
}

/// `tinyblas_dot` of f16 rows.
pub fn f16_f16_tinyblas(n: usize, w: &[u8], x: &[u8]) -> f32 {
    tinyblas_dot(n, |b, i| f16_at(b, 2 * i), w, x)
}

/// One output of an AVX2 build's tinyBLAS (`tinyBLAS<8, __m256, ..>`: `k % 8 == 0`, row
/// count a multiple of 4, 2+ tokens): one 8-lane fused accumulator over `k`, then its
/// `hsum` (halves, then pairs, then neighbours). `elem` reads element `i` of a row.
fn tinyblas8_dot(n: usize, elem: impl Fn(&[u8], usize) -> f32, w: &[u8], x: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for i in (0..n - n % 8).step_by(8) {
        for (l, acc) in acc.iter_mut().enumerate() {
            *acc = elem(w, i + l).mul_add(elem(x, i + l), *acc);
        }
    }
    super::iq4::hsum8(&acc)
}

/// `tinyblas8_dot` of f32 rows (AVX2 build).
pub fn f32_f32_tinyblas8(n: usize, w: &[u8], x: &[u8]) -> f32 {
    tinyblas8_dot(n, |b, i| f32_at(b, 4 * i), w, x)
}

/// `tinyblas8_dot` of f16 rows (AVX2 build).
pub fn f16_f16_tinyblas8(n: usize, w: &[u8], x: &[u8]) -> f32 {
    tinyblas8_dot(n, |b, i| f16_at(b, 2 * i), w, x)
}
