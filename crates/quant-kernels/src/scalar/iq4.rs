//! Scalar twins of the IQ4_NL, MXFP4 (× Q8_0) and IQ4_XS (× Q8_K) kernels, in the float
//! arithmetic of an x86 AVX2 / AVX-512 build of ggml-cpu, for every path llama.cpp may take
//! for a product (chosen per `matmul` call, see [`Path`]):
//!
//! - `vec_dot` (`ggml_vec_dot_iq4_nl_q8_0`, `_mxfp4_q8_0`, `_iq4_xs_q8_K`, AVX2 branch):
//!   per block 8 integer lanes (lane `j` sums elements `4j..4j+4` of each 32-element
//!   group), fused into 8 float accumulators with `d_w·d_x` — IQ4_NL and MXFP4 alternate
//!   two accumulators (even / odd blocks) and add them before the horizontal sum
//!   (`hsum_float_8`), a last odd block joins the sum as a scalar `fma`;
//! - repacked 8×8 (`gemv/gemm_q4_b32_8x8_q8_0_lut_avx`, IQ4_NL and MXFP4 weights whose row
//!   count is a multiple of 8): per block the whole integer dot, one scalar `fma` with
//!   `d_w·d_x` per block;
//! - llamafile's tinyBLAS (`tinyBLAS_Q0_AVX`, IQ4_NL not repacked, 2+ tokens, not an
//!   expert product): one 8-lane accumulator, `hsum`;
//! - the tiled matmul (`ggml-cpu/tiled`, IQ4_XS, 8+ tokens): per 256-block the exact
//!   integer sum `s1 = Σ ls·Σ w·x`, `r = s1·d_w` rounded, `acc = fma(r, d_x, acc)`.
//!
//! The integer sums are exact in all of them (ggml's `maddubs` pairs never saturate for
//! these codebooks and activations in `−127..=127`, which is all its quantizers emit).

use super::act::{Q8_0_BYTES, Q8_K_BYTES};
use super::{f16_at, f32_at};
use crate::registry::Tile;
use ggml_quants::types::iq_common::e8m0_to_fp32_half;
use ggml_quants::types::iq_tables::{KVALUES_FP4, KVALUES_IQ4NL};

/// Bytes per IQ4_NL block (fp16 `d`, 16 bytes of codes).
pub const IQ4_NL_BYTES: usize = 18;
/// Bytes per MXFP4 block (E8M0 `e`, 16 bytes of codes).
pub const MXFP4_BYTES: usize = 17;
/// Bytes per IQ4_XS block (fp16 `d`, u16 `scales_h`, 4 bytes `scales_l`, 128 bytes of codes).
pub const IQ4_XS_BYTES: usize = 136;

/// The arithmetic llama.cpp uses for one product (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// `ggml_vec_dot_*`.
    VecDot,
    /// The repacked 8×8 gemv / gemm kernels.
    Repack,
    /// llamafile's `tinyBLAS_Q0_AVX`.
    TinyBlas,
    /// The tiled matmul (IQ4_XS, 8+ tokens).
    Tiled,
}

/// IQ4_NL: repacked when the row count is a multiple of 8, else tinyBLAS for 2+ tokens
/// outside expert products, else `vec_dot`.
pub fn iq4_nl_path(t: &Tile<'_>) -> Path {
    if t.total_rows.is_multiple_of(8) {
        Path::Repack
    } else if !t.expert && t.total_tokens >= 2 {
        Path::TinyBlas
    } else {
        Path::VecDot
    }
}

/// MXFP4: repacked when the row count is a multiple of 8, else `vec_dot` (no tinyBLAS).
pub fn mxfp4_path(t: &Tile<'_>) -> Path {
    if t.total_rows.is_multiple_of(8) {
        Path::Repack
    } else {
        Path::VecDot
    }
}

/// IQ4_XS: the tiled matmul from 8 tokens on (never repacked), else `vec_dot`.
pub fn iq4_xs_path(t: &Tile<'_>) -> Path {
    if t.total_tokens >= 8 {
        Path::Tiled
    } else {
        Path::VecDot
    }
}

/// `hsum_float_8`: halves, then pairs, then neighbours.
#[inline(always)]
pub fn hsum8(v: &[f32; 8]) -> f32 {
    let t = [v[4] + v[0], v[5] + v[1], v[6] + v[2], v[7] + v[3]];
    (t[0] + t[2]) + (t[1] + t[3])
}

/// The 8 lane sums of one 32-element block: lane `j` = Σ of elements `4j..4j+4`, element
/// `e < 16` the low nibble of `codes[e]`, `e ≥ 16` the high nibble of `codes[e − 16]`.
#[inline(always)]
fn lanes32(codes: &[u8], lut: &[i8; 16], x: &[u8]) -> [i32; 8] {
    let mut l = [0i32; 8];
    for e in 0..32 {
        let c = if e < 16 { codes[e] & 0xF } else { codes[e - 16] >> 4 };
        l[e / 4] += lut[c as usize] as i32 * x[e] as i8 as i32;
    }
    l
}

/// A 32-element block format: bytes per block, the scale, where the codes start, codebook.
struct B32 {
    bytes: usize,
    scale: fn(&[u8]) -> f32,
    qs: usize,
    lut: &'static [i8; 16],
}

const NL: B32 = B32 { bytes: IQ4_NL_BYTES, scale: |b| f16_at(b, 0), qs: 2, lut: &KVALUES_IQ4NL };
/// Q4_0 is IQ4_NL's block (fp16 `d`, 16 bytes of nibbles) with the codebook `q − 8`.
const Q4: B32 = B32 { bytes: IQ4_NL_BYTES, scale: |b| f16_at(b, 0), qs: 2, lut: &KVALUES_Q4_0 };

/// Q4_0's nibbles as values (`q − 8`): the table llama.cpp's repacked q4_0 kernels look
/// them up in.
pub const KVALUES_Q4_0: [i8; 16] = [-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7];

/// Q4_0 on an x86 build: repacked (8×8, `gemv/gemm_q4_0_8x8_q8_0`, the IQ4_NL template)
/// when the row count is a multiple of 8, else `vec_dot` or tinyBLAS (one 8-lane
/// accumulator, `hsum`: the same arithmetic, reported as [`Path::VecDot`]).
pub fn q4_0_path(t: &Tile<'_>) -> Path {
    if t.total_rows.is_multiple_of(8) {
        Path::Repack
    } else {
        Path::VecDot
    }
}

/// Q4_0 × Q8_0 along `path`: `Repack`, or `VecDot` / `TinyBlas` (AVX2's
/// `ggml_vec_dot_q4_0_q8_0` and `tinyBLAS_Q0_AVX`, one accumulator).
pub fn q4_0_q8_0_path(path: Path, w: &[u8], x: &[u8]) -> f32 {
    let path = if path == Path::Repack { Path::Repack } else { Path::TinyBlas };
    b32_dot(&Q4, path, w, x)
}
const MX: B32 = B32 { bytes: MXFP4_BYTES, scale: |b| e8m0_to_fp32_half(b[0]), qs: 1, lut: &KVALUES_FP4 };

/// One output of a 32-element block format against Q8_0 activations along `path`.
fn b32_dot(f: &B32, path: Path, w: &[u8], x: &[u8]) -> f32 {
    let nb = (w.len() / f.bytes).min(x.len() / Q8_0_BYTES);
    let block = |ib: usize| {
        let b = &w[ib * f.bytes..(ib + 1) * f.bytes];
        let y = &x[ib * Q8_0_BYTES..(ib + 1) * Q8_0_BYTES];
        // ggml multiplies `d_x · d_w` (vec_dot, tinyBLAS) or `d_w · d_x` (repack): the same.
        ((f.scale)(b) * f16_at(y, 0), lanes32(&b[f.qs..f.qs + 16], f.lut, &y[2..34]))
    };
    match path {
        Path::Repack => {
            let mut acc = 0f32;
            for ib in 0..nb {
                let (d, l) = block(ib);
                acc = (l.iter().sum::<i32>() as f32).mul_add(d, acc);
            }
            acc
        }
        Path::TinyBlas | Path::Tiled => {
            let mut acc = [0f32; 8];
            for ib in 0..nb {
                let (d, l) = block(ib);
                for (a, v) in acc.iter_mut().zip(l) {
                    *a = d.mul_add(v as f32, *a);
                }
            }
            hsum8(&acc)
        }
        Path::VecDot => {
            let (mut a1, mut a2) = ([0f32; 8], [0f32; 8]);
            let mut ib = 0;
            while ib + 1 < nb {
                let (d0, l0) = block(ib);
                let (d1, l1) = block(ib + 1);
                for j in 0..8 {
                    a1[j] = d0.mul_add(l0[j] as f32, a1[j]);
                    a2[j] = d1.mul_add(l1[j] as f32, a2[j]);
                }
                ib += 2;
            }
            let sum: [f32; 8] = std::array::from_fn(|j| a1[j] + a2[j]);
            let mut s = hsum8(&sum);
            if ib < nb {
                // The scalar tail `sumf += d * (sumi1 + sumi2)` (not contracted).
                let (d, l) = block(ib);
                s += d * l.iter().sum::<i32>() as f32;
            }
            s
        }
    }
}

/// `ggml_vec_dot_iq4_nl_q8_0` (AVX2).
pub fn iq4_nl_q8_0(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    b32_dot(&NL, Path::VecDot, w, x)
}

/// `ggml_vec_dot_mxfp4_q8_0` (AVX2).
pub fn mxfp4_q8_0(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    b32_dot(&MX, Path::VecDot, w, x)
}

/// IQ4_NL × Q8_0 along `path` (`VecDot`, `Repack` or `TinyBlas`).
pub fn iq4_nl_q8_0_path(path: Path, w: &[u8], x: &[u8]) -> f32 {
    b32_dot(&NL, path, w, x)
}

/// MXFP4 × Q8_0 along `path` (`VecDot` or `Repack`).
pub fn mxfp4_q8_0_path(path: Path, w: &[u8], x: &[u8]) -> f32 {
    b32_dot(&MX, path, w, x)
}

/// The 8 signed scales (`ls − 32`) of an IQ4_XS block.
#[inline(always)]
pub(crate) fn iq4_xs_scales(b: &[u8]) -> [i32; 8] {
    let sh = u16::from_le_bytes([b[2], b[3]]) as i32;
    std::array::from_fn(|ib| (((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) as i32 | (((sh >> (2 * ib)) & 3) << 4)) - 32)
}

/// IQ4_XS × Q8_K along `path` (`VecDot` or `Tiled`).
pub fn iq4_xs_q8_k_path(path: Path, w: &[u8], x: &[u8]) -> f32 {
    let nb = (w.len() / IQ4_XS_BYTES).min(x.len() / Q8_K_BYTES);
    let mut acc = [0f32; 8];
    let mut sum = 0f32;
    for ib in 0..nb {
        let b = &w[ib * IQ4_XS_BYTES..(ib + 1) * IQ4_XS_BYTES];
        let y = &x[ib * Q8_K_BYTES..(ib + 1) * Q8_K_BYTES];
        let ls = iq4_xs_scales(b);
        let mut lanes = [0i32; 8];
        for (sb, &s) in ls.iter().enumerate() {
            let l = lanes32(&b[8 + 16 * sb..24 + 16 * sb], &KVALUES_IQ4NL, &y[4 + 32 * sb..36 + 32 * sb]);
            for j in 0..8 {
                lanes[j] += s * l[j];
            }
        }
        let (dw, dx) = (f16_at(b, 0), f32_at(y, 0));
        if path == Path::Tiled {
            let r = lanes.iter().sum::<i32>() as f32 * dw;
            sum = r.mul_add(dx, sum);
        } else {
            let d = dw * dx;
            for (a, v) in acc.iter_mut().zip(lanes) {
                *a = d.mul_add(v as f32, *a);
            }
        }
    }
    if path == Path::Tiled {
        sum
    } else {
        hsum8(&acc)
    }
}

/// `ggml_vec_dot_iq4_xs_q8_K` (AVX2).
pub fn iq4_xs_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    iq4_xs_q8_k_path(Path::VecDot, w, x)
}

/// Every output of a tile through `dot(path, w_row, x_row)`.
fn tile_with(
    t: &Tile<'_>,
    y: &mut [f32],
    y_stride: usize,
    path: Path,
    w_row: usize,
    x_row: usize,
    dot: fn(Path, &[u8], &[u8]) -> f32,
) {
    for r in 0..t.rows {
        let wr = &t.w[r * t.w_stride..][..w_row];
        for tok in 0..t.tokens {
            let xr = &t.x[tok * t.x_stride..][..x_row];
            y[tok * y_stride + r] = dot(path, wr, xr);
        }
    }
}

/// IQ4_NL tile along the path llama.cpp takes for the whole product ([`iq4_nl_path`]).
pub fn iq4_nl_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = t.n / 32;
    tile_with(t, y, y_stride, iq4_nl_path(t), nb * IQ4_NL_BYTES, nb * Q8_0_BYTES, iq4_nl_q8_0_path)
}

/// Q4_0 tile along [`q4_0_path`] (the twin of the AVX2 Q4_0 tile kernel).
pub fn q4_0_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = t.n / 32;
    tile_with(t, y, y_stride, q4_0_path(t), nb * IQ4_NL_BYTES, nb * Q8_0_BYTES, q4_0_q8_0_path)
}

/// MXFP4 tile along [`mxfp4_path`].
pub fn mxfp4_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = t.n / 32;
    tile_with(t, y, y_stride, mxfp4_path(t), nb * MXFP4_BYTES, nb * Q8_0_BYTES, mxfp4_q8_0_path)
}

/// IQ4_XS tile along [`iq4_xs_path`].
pub fn iq4_xs_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = t.n / 256;
    tile_with(t, y, y_stride, iq4_xs_path(t), nb * IQ4_XS_BYTES, nb * Q8_K_BYTES, iq4_xs_q8_k_path)
}

mod registration {
    use super::*;
    use crate::registry::Kernel;
    use ggml_quants::types::{iq4_nl::Iq4Nl, iq4_xs::Iq4Xs, mxfp4::Mxfp4, q8_0::Q8_0, q8_k::Q8K};
    use ggml_quants::GgmlType;

    inventory::submit! {
        Kernel::new(<Iq4Nl as GgmlType>::ID, "scalar", 0, <Q8_0 as GgmlType>::ID, iq4_nl_q8_0).with_tile(iq4_nl_tile)
    }
    inventory::submit! {
        Kernel::new(<Mxfp4 as GgmlType>::ID, "scalar", 0, <Q8_0 as GgmlType>::ID, mxfp4_q8_0).with_tile(mxfp4_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq4Xs as GgmlType>::ID, "scalar", 0, <Q8K as GgmlType>::ID, iq4_xs_q8_k).with_tile(iq4_xs_tile)
    }
}
