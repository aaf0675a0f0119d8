//! Scalar twins of the lattice-type kernels (IQ3_S, IQ2_XS, IQ2_XXS, IQ3_XXS, IQ2_S × Q8_K), in the arithmetic of an
//! x86 AVX2 / AVX-512 VNNI build of ggml-cpu, for both paths llama.cpp takes (chosen per
//! `matmul` call, [`path`]):
//!
//! - `vec_dot` (`ggml_vec_dot_iq3_s_q8_K`, `_iq2_xs_q8_K`, their `__AVX2__` branch, which an
//!   AVX-512 build compiles too): per 256-block 8 integer lanes, lane `j` the exact
//!   `Σ scale·w·x` over elements `4j..4j+4` of every 32-element group, fused into 8 float
//!   accumulators with `d = d_w·d_x`; at the end `hsum_float_8`, times `0.125` for the IQ2
//!   types, `0.25` for IQ3_XXS.
//!   The weights are grid magnitudes and the signs go onto the activations
//!   (`_mm256_sign_epi8` / `xor − mask`), so an activation of `−128` under a negative sign
//!   stays `−128` (8-bit wrap), as in ggml;
//! - the tiled matmul (`ggml-cpu/tiled`, from 8 tokens): per 256-block, codes stored as
//!   `w + 128` and, per sub-block (32 elements for IQ3_S, 16 for IQ2_XS), the exact
//!   `raw = Σ (w + 128)·x` minus `128·bsum` (the Q8_K block sums), times the sub-block scale,
//!   summed to `s1`; `r = f32(s1)·d_w` (`d_w = fp16(d)` times the same factor),
//!   `acc = fma(r, d_x, acc)` block after block.
//!
//! Both weight formats decode to a [`Decoded`] block (signed weights, one scale per 16
//! elements), shared with the SIMD kernels' tests.

use super::act::Q8_K_BYTES;
use super::iq4::{hsum8, Path};
use super::{f16_at, f32_at, i16_at};
use crate::registry::Tile;
use ggml_quants::types::iq_tables::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS};

/// Bytes per IQ3_S block (fp16 `d`, 64 `qs`, 8 `qh`, 32 sign bytes, 4 scale bytes).
pub const IQ3_S_BYTES: usize = 110;
/// Bytes per IQ2_XS block (fp16 `d`, 32 × u16 `qs`, 8 scale bytes).
pub const IQ2_XS_BYTES: usize = 74;
/// Bytes per IQ2_XXS block (fp16 `d`, 8 bytes per 32: 4 grid indices, then signs and scale).
pub const IQ2_XXS_BYTES: usize = 66;
/// Bytes per IQ3_XXS block (fp16 `d`, 64 grid indices, 4 bytes of signs and scale per 32).
pub const IQ3_XXS_BYTES: usize = 98;
/// Bytes per IQ2_S block (fp16 `d`, 32 grid index bytes, 32 sign bytes, 8 `qh`, 8 scales).
pub const IQ2_S_BYTES: usize = 82;

/// One 256-element block decoded: signed weights (grid value with its sign) and the odd
/// scale `2s + 1` of every 16 elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Weight `e` of the block (without `d` and the scale).
    pub q: [i8; 256],
    /// Scale of elements `16k..16k+16`.
    pub sc: [i32; 16],
}

impl Default for Decoded {
    fn default() -> Self {
        Decoded { q: [0; 256], sc: [0; 16] }
    }
}

/// A lattice format: block bytes, decoder, and the constant factors of its two paths.
#[derive(Clone, Copy)]
pub struct Format {
    /// Bytes per 256-element block.
    pub bytes: usize,
    /// Decodes one block.
    pub decode: fn(&[u8], &mut Decoded),
    /// `vec_dot`'s factor on the horizontal sum (`0.125` for IQ2_XS, else 1).
    pub vec_post: f32,
    /// The tiled path's factor on `fp16(d)` (`0.125` for IQ2_XS, else 1).
    pub tiled_mul: f32,
    /// Elements per sub-block in the tiled path's bias correction (its `SUBBLK`).
    pub subblk: usize,
}

/// `block_iq3_s` → [`Decoded`] (as `dequantize_row_iq3_s`, without `d`).
pub fn decode_iq3_s(b: &[u8], out: &mut Decoded) {
    let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
    for g in 0..8 {
        let s = 2 * ((scales[g / 2] >> (4 * (g % 2))) & 0xF) as i32 + 1;
        out.sc[2 * g] = s;
        out.sc[2 * g + 1] = s;
        for k in 0..8 {
            let idx = qs[8 * g + k] as usize | ((((qh[g] >> k) & 1) as usize) << 8);
            let grid = IQ3S_GRID[idx].to_le_bytes();
            for (j, &v) in grid.iter().enumerate() {
                let e = 4 * k + j;
                let neg = (signs[4 * g + e / 8] >> (e % 8)) & 1 != 0;
                let v = v as i8;
                out.q[32 * g + e] = if neg { -v } else { v };
            }
        }
    }
}

/// `block_iq2_xs` → [`Decoded`] (as `dequantize_row_iq2_xs`, without `d`).
pub fn decode_iq2_xs(b: &[u8], out: &mut Decoded) {
    for g in 0..8 {
        let sc = b[66 + g];
        out.sc[2 * g] = 2 * (sc & 0xF) as i32 + 1;
        out.sc[2 * g + 1] = 2 * (sc >> 4) as i32 + 1;
        for l in 0..4 {
            let at = 2 + 2 * (4 * g + l);
            let q = u16::from_le_bytes([b[at], b[at + 1]]);
            let grid = IQ2XS_GRID[(q & 511) as usize].to_le_bytes();
            let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
            for (j, &v) in grid.iter().enumerate() {
                let v = v as i8;
                out.q[32 * g + 8 * l + j] = if (signs >> j) & 1 != 0 { -v } else { v };
            }
        }
    }
}

/// Signed weight `v` of element `e` of a group: `v` negated where bit `e` of `signs` is set.
#[inline(always)]
fn signed(v: u8, signs: u32, e: usize) -> i8 {
    let v = v as i8;
    if (signs >> e) & 1 != 0 {
        -v
    } else {
        v
    }
}

/// `block_iq2_xxs` → [`Decoded`] (as `dequantize_row_iq2_xxs`, without `d`).
pub fn decode_iq2_xxs(b: &[u8], out: &mut Decoded) {
    for g in 0..8 {
        let at = 2 + 8 * g;
        let aux1 = u32::from_le_bytes([b[at + 4], b[at + 5], b[at + 6], b[at + 7]]);
        let s = 2 * (aux1 >> 28) as i32 + 1;
        out.sc[2 * g] = s;
        out.sc[2 * g + 1] = s;
        for l in 0..4 {
            let grid = IQ2XXS_GRID[b[at + l] as usize].to_le_bytes();
            let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize] as u32;
            for (j, &v) in grid.iter().enumerate() {
                out.q[32 * g + 8 * l + j] = signed(v, signs, j);
            }
        }
    }
}

/// `block_iq3_xxs` → [`Decoded`] (as `dequantize_row_iq3_xxs`, without `d`).
pub fn decode_iq3_xxs(b: &[u8], out: &mut Decoded) {
    for g in 0..8 {
        let at = 66 + 4 * g;
        let aux = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let s = 2 * (aux >> 28) as i32 + 1;
        out.sc[2 * g] = s;
        out.sc[2 * g + 1] = s;
        for l in 0..4 {
            let g1 = IQ3XXS_GRID[b[2 + 8 * g + 2 * l] as usize].to_le_bytes();
            let g2 = IQ3XXS_GRID[b[2 + 8 * g + 2 * l + 1] as usize].to_le_bytes();
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize] as u32;
            for j in 0..4 {
                out.q[32 * g + 8 * l + j] = signed(g1[j], signs, j);
                out.q[32 * g + 8 * l + 4 + j] = signed(g2[j], signs, 4 + j);
            }
        }
    }
}

/// `block_iq2_s` → [`Decoded`] (as `dequantize_row_iq2_s`, without `d`).
pub fn decode_iq2_s(b: &[u8], out: &mut Decoded) {
    for g in 0..8 {
        let sc = b[74 + g];
        out.sc[2 * g] = 2 * (sc & 0xF) as i32 + 1;
        out.sc[2 * g + 1] = 2 * (sc >> 4) as i32 + 1;
        let qh = b[66 + g] as usize;
        for l in 0..4 {
            let idx = b[2 + 4 * g + l] as usize | ((qh << (8 - 2 * l)) & 0x300);
            let grid = IQ2S_GRID[idx].to_le_bytes();
            let signs = b[34 + 4 * g + l] as u32;
            for (j, &v) in grid.iter().enumerate() {
                out.q[32 * g + 8 * l + j] = signed(v, signs, j);
            }
        }
    }
}

/// IQ2_XXS.
pub const IQ2_XXS: Format =
    Format { bytes: IQ2_XXS_BYTES, decode: decode_iq2_xxs, vec_post: 0.125, tiled_mul: 0.125, subblk: 32 };
/// IQ3_XXS.
pub const IQ3_XXS: Format =
    Format { bytes: IQ3_XXS_BYTES, decode: decode_iq3_xxs, vec_post: 0.25, tiled_mul: 0.25, subblk: 32 };
/// IQ2_S.
pub const IQ2_S: Format =
    Format { bytes: IQ2_S_BYTES, decode: decode_iq2_s, vec_post: 0.125, tiled_mul: 0.125, subblk: 16 };

/// IQ3_S.
pub const IQ3_S: Format =
    Format { bytes: IQ3_S_BYTES, decode: decode_iq3_s, vec_post: 1.0, tiled_mul: 1.0, subblk: 32 };
/// IQ2_XS.
pub const IQ2_XS: Format =
    Format { bytes: IQ2_XS_BYTES, decode: decode_iq2_xs, vec_post: 0.125, tiled_mul: 0.125, subblk: 16 };

/// The path llama.cpp takes: its tiled matmul from 8 tokens, else `vec_dot`.
pub fn path(t: &Tile<'_>) -> Path {
    if t.total_tokens >= 8 {
        Path::Tiled
    } else {
        Path::VecDot
    }
}

/// `vec_dot`'s 8 lanes of one block: the sign of a weight goes onto the activation byte
/// (wrapping, as `_mm256_sign_epi8`), the magnitude multiplies it.
pub fn vec_lanes(dec: &Decoded, xq: &[u8]) -> [i32; 8] {
    let mut l = [0i32; 8];
    for e in 0..256 {
        let w = dec.q[e];
        let x = xq[e] as i8;
        let xs = if w < 0 { x.wrapping_neg() } else { x };
        l[(e % 32) / 4] += dec.sc[e / 16] * (w.unsigned_abs() as i32 * xs as i32);
    }
    l
}

/// The tiled path's `s1` of one block: `Σ_sub sc·(Σ (w + 128)·x − 128·bsum)`.
pub fn tiled_s1(f: &Format, dec: &Decoded, y: &[u8]) -> i32 {
    let xq = &y[4..260];
    let mut s1 = 0i32;
    for sub in 0..256 / f.subblk {
        let mut raw = 0i32;
        let range = sub * f.subblk..(sub + 1) * f.subblk;
        for (&w, &x) in dec.q[range.clone()].iter().zip(&xq[range]) {
            raw += (w as i32 + 128) * x as i8 as i32;
        }
        let mut bsum = 0i32;
        for u in 0..f.subblk / 16 {
            bsum += i16_at(y, 260 + 2 * (sub * f.subblk / 16 + u)) as i32;
        }
        s1 = s1.wrapping_add(dec.sc[sub * f.subblk / 16].wrapping_mul(raw - 128 * bsum));
    }
    s1
}

/// One output of format `f` against one Q8_K row along `path`.
pub fn dot_path(f: &Format, path: Path, w: &[u8], x: &[u8]) -> f32 {
    let nb = (w.len() / f.bytes).min(x.len() / Q8_K_BYTES);
    let mut dec = Decoded::default();
    let mut acc = [0f32; 8];
    let mut sum = 0f32;
    for ib in 0..nb {
        let b = &w[ib * f.bytes..(ib + 1) * f.bytes];
        let y = &x[ib * Q8_K_BYTES..(ib + 1) * Q8_K_BYTES];
        (f.decode)(b, &mut dec);
        let (dw, dx) = (f16_at(b, 0), f32_at(y, 0));
        if path == Path::Tiled {
            let r = tiled_s1(f, &dec, y) as f32 * (dw * f.tiled_mul);
            sum = r.mul_add(dx, sum);
        } else {
            let d = dw * dx;
            for (a, v) in acc.iter_mut().zip(vec_lanes(&dec, &y[4..260])) {
                *a = d.mul_add(v as f32, *a);
            }
        }
    }
    if path == Path::Tiled {
        sum
    } else {
        f.vec_post * hsum8(&acc)
    }
}

/// `ggml_vec_dot_iq3_s_q8_K` (AVX2 branch).
pub fn iq3_s_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_path(&IQ3_S, Path::VecDot, w, x)
}

/// `ggml_vec_dot_iq2_xs_q8_K` (AVX2 branch).
pub fn iq2_xs_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_path(&IQ2_XS, Path::VecDot, w, x)
}

/// `ggml_vec_dot_iq2_xxs_q8_K` (AVX2 branch).
pub fn iq2_xxs_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_path(&IQ2_XXS, Path::VecDot, w, x)
}

/// `ggml_vec_dot_iq3_xxs_q8_K` (AVX2 branch).
pub fn iq3_xxs_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_path(&IQ3_XXS, Path::VecDot, w, x)
}

/// `ggml_vec_dot_iq2_s_q8_K` (AVX2 branch).
pub fn iq2_s_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_path(&IQ2_S, Path::VecDot, w, x)
}

/// IQ2_XXS tile along [`path`].
pub fn iq2_xxs_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_fmt(&IQ2_XXS, t, y, y_stride)
}

/// IQ3_XXS tile along [`path`].
pub fn iq3_xxs_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_fmt(&IQ3_XXS, t, y, y_stride)
}

/// IQ2_S tile along [`path`].
pub fn iq2_s_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_fmt(&IQ2_S, t, y, y_stride)
}

/// Every output of a tile of format `f` along [`path`].
pub fn tile_fmt(f: &Format, t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = t.n / 256;
    let p = path(t);
    for r in 0..t.rows {
        let wr = &t.w[r * t.w_stride..][..nb * f.bytes];
        for tok in 0..t.tokens {
            let xr = &t.x[tok * t.x_stride..][..nb * Q8_K_BYTES];
            y[tok * y_stride + r] = dot_path(f, p, wr, xr);
        }
    }
}

/// IQ3_S tile along [`path`].
pub fn iq3_s_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_fmt(&IQ3_S, t, y, y_stride)
}

/// IQ2_XS tile along [`path`].
pub fn iq2_xs_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_fmt(&IQ2_XS, t, y, y_stride)
}

mod registration {
    use super::*;
    use crate::registry::Kernel;
    use ggml_quants::types::{iq2_s::Iq2S, iq2_xs::Iq2Xs, iq2_xxs::Iq2Xxs, iq3_s::Iq3S, iq3_xxs::Iq3Xxs, q8_k::Q8K};
    use ggml_quants::GgmlType;

    inventory::submit! {
        Kernel::new(<Iq2Xxs as GgmlType>::ID, "scalar", 0, <Q8K as GgmlType>::ID, iq2_xxs_q8_k).with_tile(iq2_xxs_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq3Xxs as GgmlType>::ID, "scalar", 0, <Q8K as GgmlType>::ID, iq3_xxs_q8_k).with_tile(iq3_xxs_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq2S as GgmlType>::ID, "scalar", 0, <Q8K as GgmlType>::ID, iq2_s_q8_k).with_tile(iq2_s_tile)
    }

    inventory::submit! {
        Kernel::new(<Iq3S as GgmlType>::ID, "scalar", 0, <Q8K as GgmlType>::ID, iq3_s_q8_k).with_tile(iq3_s_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq2Xs as GgmlType>::ID, "scalar", 0, <Q8K as GgmlType>::ID, iq2_xs_q8_k).with_tile(iq2_xs_tile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggml_quants::GgmlType;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// The decoders times `fp16(d)` give `to_float` bit for bit (a random block: every
    /// index, sign and scale bit pattern is a valid block).
    #[test]
    fn decoders_match_dequantize() {
        let mut rng = StdRng::seed_from_u64(3);
        use ggml_quants::types::{iq2_s::Iq2S, iq2_xs::Iq2Xs, iq2_xxs::Iq2Xxs, iq3_s::Iq3S, iq3_xxs::Iq3Xxs};
        // The dequantizers' sub-block scale: `d·(2s + 1)` (IQ3_S) or `d·(0.5 + s)·k`.
        type Dequantize = fn(&[u8], &mut [f32]);
        let cases: [(Format, Dequantize, f32); 5] = [
            (IQ3_S, <Iq3S as GgmlType>::dequantize, 0.0),
            (IQ2_XS, <Iq2Xs as GgmlType>::dequantize, 0.25),
            (IQ2_XXS, <Iq2Xxs as GgmlType>::dequantize, 0.25),
            (IQ3_XXS, <Iq3Xxs as GgmlType>::dequantize, 0.5),
            (IQ2_S, <Iq2S as GgmlType>::dequantize, 0.25),
        ];
        for (f, deq, k) in cases {
            for _ in 0..200 {
                let mut b: Vec<u8> = (0..f.bytes).map(|_| rng.gen()).collect();
                b[..2].copy_from_slice(&rng.gen_range(0x1400u16..0x2C00).to_le_bytes());
                let mut want = [0f32; 256];
                deq(&b, &mut want);
                let mut dec = Decoded::default();
                (f.decode)(&b, &mut dec);
                let d = f16_at(&b, 0);
                for (e, want) in want.iter().enumerate() {
                    let got = if k == 0.0 {
                        d * dec.sc[e / 16] as f32 * dec.q[e] as f32
                    } else {
                        let db = d * (0.5 + ((dec.sc[e / 16] - 1) / 2) as f32) * k;
                        db * dec.q[e].unsigned_abs() as f32 * if dec.q[e] < 0 { -1.0 } else { 1.0 }
                    };
                    assert_eq!(got.to_bits(), want.to_bits(), "element {e}: {got} vs {want}");
                }
            }
        }
    }
}
