//! Scalar twins of the AVX2 K-quant tile kernels (`arch/x86_64/kquant_avx2.rs`): the float
//! arithmetic an AVX2 build of ggml-cpu uses for a product of q2_K…q6_K weights with Q8_K
//! activations when it does not take `vec_dot` (see [`k_path`]):
//!
//! - the tiled K-quant matmul (`ggml-cpu/tiled`, `tiled_run_microtile_avx2`, 8+ tokens,
//!   weights not repacked): per 256-block the exact integer sums `s1 = Σ scale·Σ q·x` and
//!   (q2_K, q4_K, q5_K) `s2 = Σ min·bsum`, then `r = f32(s1)·d`, `r = fnmadd(dmin, f32(s2),
//!   r)`, `acc = fma(r, d_x, acc)`;
//! - q4_K repacked 8×8 (`ggml_gemv_q4_K_8x8_q8_K`, rows a multiple of 8): per block
//!   `acc = fma(f32(s1), d·d_x, acc)`, `acc_min = fma(f32(s2), dmin·d_x, acc_min)`, the
//!   result `acc − acc_min`; its 4-token gemm (`ggml_gemm_q4_K_8x8_q8_K`, the first
//!   `n − n % 4` tokens) does the same per 64-element pair of sub-blocks;
//! - q2_K repacked 8×8 (an AVX-512 build: `ggml_gemv/gemm_q2_K_8x8_q8_K`, rows a multiple
//!   of 8; the twin of `arch/x86_64/vnni.rs`'s q2_K tile, [`k_path`] being the AVX2
//!   build's): as q4_K's, the gemm per 128-element half.
//!
//! The integer sums are exact on every path (ggml's `maddubs` pairs cannot saturate for
//! these quants), so only the float steps above decide the bits.

use super::act::Q8_K_BYTES;
use super::{f16_at, f32_at, i16_at};
use crate::registry::Tile;
use crate::scalar::iq4::Path;

/// Block bytes of q2_K, q3_K, q4_K, q5_K, q6_K.
pub const Q2_K_BYTES: usize = 84;
/// q3_K block bytes.
pub const Q3_K_BYTES: usize = 110;
/// q4_K block bytes.
pub const Q4_K_BYTES: usize = 144;
/// q5_K block bytes.
pub const Q5_K_BYTES: usize = 176;
/// q6_K block bytes.
pub const Q6_K_BYTES: usize = 210;

/// ggml type ids of the K quants.
pub const Q2_K: u32 = 10;
/// q3_K id.
pub const Q3_K: u32 = 11;
/// q4_K id.
pub const Q4_K: u32 = 12;
/// q5_K id.
pub const Q5_K: u32 = 13;
/// q6_K id.
pub const Q6_K: u32 = 14;

/// From this many tokens in one product llama.cpp runs its tiled K-quant kernels.
pub const TILED_FROM: usize = 8;

/// Block bytes of K type `type_id` (`None` for other types).
pub fn block_bytes(type_id: u32) -> Option<usize> {
    Some(match type_id {
        Q2_K => Q2_K_BYTES,
        Q3_K => Q3_K_BYTES,
        Q4_K => Q4_K_BYTES,
        Q5_K => Q5_K_BYTES,
        Q6_K => Q6_K_BYTES,
        _ => return None,
    })
}

/// The path an AVX2 build of llama.cpp takes for the product a tile belongs to: q4_K
/// matrices of 8k rows are repacked (every token count, experts included); other K
/// matrices go through the tiled matmul from [`TILED_FROM`] tokens on, else `vec_dot`.
pub fn k_path(type_id: u32, t: &Tile<'_>) -> Path {
    if type_id == Q4_K && t.total_rows.is_multiple_of(8) {
        Path::Repack
    } else if t.total_tokens >= TILED_FROM {
        Path::Tiled
    } else {
        Path::VecDot
    }
}

/// One K block decoded to exact integers: element values as the integer sums use them
/// (q3_K `q − 4` where the high bit is clear, q6_K `q − 32`, the others unsigned), the
/// scale and the min of each 16-element group, and the two fp16 factors.
pub struct KDec {
    /// Element values.
    pub q: [i32; 256],
    /// Scale per 16-element group.
    pub sc: [i32; 16],
    /// Min per 16-element group (zero for q3_K, q6_K).
    pub mn: [i32; 16],
    /// `d`.
    pub d: f32,
    /// `dmin` (zero for q3_K, q6_K).
    pub dmin: f32,
}

/// `get_scale_min_k4` for all 8 sub-blocks of a q4_K / q5_K block.
fn scales_k4(s: &[u8]) -> ([i32; 8], [i32; 8]) {
    let (sc, mn) = crate::scalar::dots::scale_min_k4(s[..12].try_into().expect("12 scale bytes"));
    (sc.map(i32::from), mn.map(i32::from))
}

/// Decodes one block of K type `type_id` (`b` at least its block bytes).
pub fn decode(type_id: u32, b: &[u8]) -> KDec {
    let mut k = KDec { q: [0; 256], sc: [0; 16], mn: [0; 16], d: 0.0, dmin: 0.0 };
    match type_id {
        Q2_K => {
            for (g, &v) in b[..16].iter().enumerate() {
                k.sc[g] = (v & 0xF) as i32;
                k.mn[g] = (v >> 4) as i32;
            }
            for e in 0..256 {
                let (n, j, l) = (e / 128, (e % 128) / 32, e % 32);
                k.q[e] = ((b[16 + 32 * n + l] >> (2 * j)) & 3) as i32;
            }
            k.d = f16_at(b, 80);
            k.dmin = f16_at(b, 82);
        }
        Q3_K => {
            let s = &b[96..108];
            let aux: [u32; 3] = std::array::from_fn(|i| u32::from_le_bytes(s[4 * i..4 * i + 4].try_into().unwrap()));
            let (m1, m2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
            let words = [
                (aux[0] & m2) | ((aux[2] & m1) << 4),
                (aux[1] & m2) | (((aux[2] >> 2) & m1) << 4),
                ((aux[0] >> 4) & m2) | (((aux[2] >> 4) & m1) << 4),
                ((aux[1] >> 4) & m2) | (((aux[2] >> 6) & m1) << 4),
            ];
            for g in 0..16 {
                k.sc[g] = ((words[g / 4] >> (8 * (g % 4))) & 0xFF) as i32 - 32;
            }
            for e in 0..256 {
                let (n, j, l) = (e / 128, (e % 128) / 32, e % 32);
                let q = ((b[32 + 32 * n + l] >> (2 * j)) & 3) as i32;
                let h = (b[l] >> (4 * n + j)) & 1;
                k.q[e] = q - if h == 0 { 4 } else { 0 };
            }
            k.d = f16_at(b, 108);
        }
        Q4_K | Q5_K => {
            let (sc, mn) = scales_k4(&b[4..16]);
            for g in 0..16 {
                k.sc[g] = sc[g / 2];
                k.mn[g] = mn[g / 2];
            }
            let qs = if type_id == Q4_K { 16 } else { 48 };
            for e in 0..256 {
                let (c, w) = (e / 64, e % 64);
                let byte = b[qs + 32 * c + w % 32];
                let mut q = if w < 32 { byte & 0xF } else { byte >> 4 } as i32;
                if type_id == Q5_K {
                    q |= (((b[16 + e % 32] >> (e / 32)) & 1) as i32) << 4;
                }
                k.q[e] = q;
            }
            k.d = f16_at(b, 0);
            k.dmin = f16_at(b, 2);
        }
        Q6_K => {
            for g in 0..16 {
                k.sc[g] = b[192 + g] as i8 as i32;
            }
            for n in 0..2 {
                for l in 0..32 {
                    let (ql0, ql1, qh) = (b[64 * n + l], b[64 * n + l + 32], b[128 + 32 * n + l]);
                    let e = 128 * n + l;
                    k.q[e] = ((ql0 & 0xF) | ((qh & 3) << 4)) as i32 - 32;
                    k.q[e + 32] = ((ql1 & 0xF) | (((qh >> 2) & 3) << 4)) as i32 - 32;
                    k.q[e + 64] = ((ql0 >> 4) | (((qh >> 4) & 3) << 4)) as i32 - 32;
                    k.q[e + 96] = ((ql1 >> 4) | (((qh >> 6) & 3) << 4)) as i32 - 32;
                }
            }
            k.d = f16_at(b, 208);
        }
        _ => panic!("ktiled::decode: type {type_id} is not a K quant"),
    }
    k
}

/// Per 16-element group of one block: `Σ q·x` and the Q8_K block sum.
fn group_sums(k: &KDec, y: &[u8]) -> ([i32; 16], [i32; 16]) {
    let mut dot = [0i32; 16];
    let mut bs = [0i32; 16];
    for g in 0..16 {
        for e in 16 * g..16 * g + 16 {
            dot[g] += k.q[e] * y[4 + e] as i8 as i32;
        }
        bs[g] = i16_at(y, 260 + 2 * g) as i32;
    }
    (dot, bs)
}

/// One q6_K row · one Q8_K row in the arithmetic of ggml-cpu's AVX2
/// `ggml_vec_dot_q6_K_q8_K` (what AVX2 and AVX-512 builds run for one token): per block
/// eight i32 lanes, lane `l` the scaled `q·x` (q unsigned, 0–63) of elements `4l..4l+3` of
/// every 32-element chunk minus `32·(bsum[2l]·sc[2l] + bsum[2l+1]·sc[2l+1])`, each lane then
/// `fma(d·dx, lane, acc[l])`; at the end ggml's `hsum_float_8`. The twin of the VNNI
/// one-token q6_K kernels.
pub fn q6_k_vec_dot(w: &[u8], x: &[u8]) -> f32 {
    let nb = (w.len() / 210).min(x.len() / Q8_K_BYTES);
    let mut acc = [0f32; 8];
    for ib in 0..nb {
        let k = decode(Q6_K, &w[ib * 210..(ib + 1) * 210]);
        let y = &x[ib * Q8_K_BYTES..(ib + 1) * Q8_K_BYTES];
        let mut lanes = [0i32; 8];
        for e in 0..256 {
            lanes[(e % 32) / 4] += k.sc[e / 16] * (k.q[e] + 32) * y[4 + e] as i8 as i32;
        }
        for (l, v) in lanes.iter_mut().enumerate() {
            let bs = |g: usize| i16_at(y, 260 + 2 * g) as i32;
            *v -= 32 * (bs(2 * l) * k.sc[2 * l] + bs(2 * l + 1) * k.sc[2 * l + 1]);
        }
        let d = f32_at(y, 0) * k.d;
        for (a, &v) in acc.iter_mut().zip(&lanes) {
            *a = d.mul_add(v as f32, *a);
        }
    }
    let s4: [f32; 4] = std::array::from_fn(|i| acc[4 + i] + acc[i]);
    (s4[0] + s4[2]) + (s4[1] + s4[3])
}

/// One output of K type `type_id` along `path` (`Tiled` or `Repack`; `batched`: a token
/// of the repacked 4-token gemm). Panics on `VecDot`, whose twin is the AVX2 `vec_dot`'s
/// (`scalar::dots`, close but not bit-identical).
pub fn k_dot_path(type_id: u32, path: Path, batched: bool, w: &[u8], x: &[u8]) -> f32 {
    let wb = block_bytes(type_id).expect("a K type");
    let nb = (w.len() / wb).min(x.len() / Q8_K_BYTES);
    let (mut acc, mut acc_m) = (0f32, 0f32);
    for ib in 0..nb {
        let k = decode(type_id, &w[ib * wb..(ib + 1) * wb]);
        let y = &x[ib * Q8_K_BYTES..(ib + 1) * Q8_K_BYTES];
        let dx = f32_at(y, 0);
        let (dot, bs) = group_sums(&k, y);
        let s = |g: std::ops::Range<usize>| -> (i32, i32) {
            g.map(|g| (k.sc[g] * dot[g], k.mn[g] * bs[g])).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        };
        match path {
            Path::Tiled => {
                let (s1, s2) = s(0..16);
                let mut r = s1 as f32 * k.d;
                if matches!(type_id, Q2_K | Q4_K | Q5_K) {
                    r = (-k.dmin).mul_add(s2 as f32, r);
                }
                acc = r.mul_add(dx, acc);
            }
            Path::Repack if batched => {
                // 16-element groups per fma step: q4_K 4 (a pair of sub-blocks), q2_K 8.
                let step = if type_id == Q2_K { 8 } else { 4 };
                for sb in 0..16 / step {
                    let (is, im) = s(step * sb..step * (sb + 1));
                    acc = (is as f32).mul_add(k.d * dx, acc);
                    acc_m = (im as f32).mul_add(k.dmin * dx, acc_m);
                }
            }
            Path::Repack => {
                let (is, im) = s(0..16);
                acc = (is as f32).mul_add(k.d * dx, acc);
                acc_m = (im as f32).mul_add(k.dmin * dx, acc_m);
            }
            _ => panic!("k_dot_path: no twin for {path:?}"),
        }
    }
    if path == Path::Repack {
        acc - acc_m
    } else {
        acc
    }
}

/// The twin of the AVX2 K tile for its `Tiled` / `Repack` regimes: every output through
/// [`k_dot_path`] along [`k_path`] (tokens below `t.batched` batched).
pub fn k_tile(type_id: u32, t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let path = k_path(type_id, t);
    let wb = block_bytes(type_id).expect("a K type");
    let nb = t.n / 256;
    for r in 0..t.rows {
        let wr = &t.w[r * t.w_stride..][..nb * wb];
        for tok in 0..t.tokens {
            let xr = &t.x[tok * t.x_stride..][..nb * Q8_K_BYTES];
            y[tok * y_stride + r] = k_dot_path(type_id, path, tok < t.batched, wr, xr);
        }
    }
}
