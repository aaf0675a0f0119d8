//! Scalar twins of the IQ1_S and IQ1_M × Q8_K kernels, in the arithmetic of an x86 AVX2 /
//! AVX-512 VNNI build of ggml-cpu, for both paths llama.cpp takes (chosen per `matmul` call,
//! [`path`]):
//!
//! - `vec_dot` (`ggml_vec_dot_iq1_s_q8_K` / `_iq1_m_q8_K`, their `__AVX2__` branch, which
//!   an AVX-512 build compiles too): the ternary grid part as the lattice types' 8 integer
//!   lanes ([`vec_lanes`]: the grid sign goes onto the activation byte, wrapping), fused
//!   into 8 float accumulators with `d = d_x·d_w`. The `±1/8` shift: IQ1_S sums it per
//!   32-element group from the Q8_K block sums (exact integers) into one scalar float
//!   (`accum1 += d·sumi1`, contracted to an FMA by the C compiler) and ends with
//!   `hsum_float_8(accum) + 0.125·accum1`; IQ1_M keeps it as 8 more lanes (the shift's sign
//!   onto the activation byte per 8 elements, wrapping) and ends with
//!   `hsum_float_8(acc1) + 0.125·hsum_float_8(acc2)` (a power of two: exact either way);
//! - the tiled matmul (`ggml-cpu/tiled`, from 8 tokens): the weight `8·grid ± 1` per element,
//!   so the block is a lattice block ([`tiled_s1`], sub-blocks of 32 for IQ1_S and 16 for
//!   IQ1_M) with `d_w = fp16(d)·0.125`.

use super::act::Q8_K_BYTES;
use super::iq4::{hsum8, Path};
use super::lattice::{tiled_s1, vec_lanes, Decoded, Format};
use super::{f32_at, i16_at};
use crate::registry::Tile;
use ggml_quants::types::iq_tables::IQ1S_GRID;

pub use super::lattice::path;

/// Bytes per IQ1_S block (fp16 `d`, 32 grid index bytes, 8 × u16 `qh`).
pub const IQ1_S_BYTES: usize = 50;
/// Bytes per IQ1_M block (32 grid index bytes, 16 `qh`, 8 scale bytes holding the fp16 `d`).
pub const IQ1_M_BYTES: usize = 56;
/// ggml's `IQ1S_DELTA` / `IQ1M_DELTA`.
pub const DELTA: f32 = 0.125;

/// One block decoded: the grid values (`-1, 0, 1`) and the shift's sign of every element,
/// each with the odd scale of its 16 elements, and the block's fp16 scale.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Block1 {
    /// Grid value of each element and the scales.
    pub grid: Decoded,
    /// `±1`: the sign of each element's shift, and the same scales.
    pub delta: Decoded,
    /// The block scale's fp16 bits.
    pub d: u16,
}

impl Block1 {
    /// The tiled path's weights: `8·grid + shift` (as ggml's `tiled_unpk_tern8`).
    pub fn tiled(&self) -> Decoded {
        let mut out = Decoded { q: [0; 256], sc: self.grid.sc };
        for (o, (&g, &s)) in out.q.iter_mut().zip(self.grid.q.iter().zip(&self.delta.q)) {
            *o = 8 * g + s;
        }
        out
    }
}

fn sign(neg: bool) -> i8 {
    if neg {
        -1
    } else {
        1
    }
}

/// The 8 grid values of entry `idx`.
fn grid8(idx: usize) -> [i8; 8] {
    IQ1S_GRID[idx].to_le_bytes().map(|v| v as i8)
}

/// `block_iq1_s` → [`Block1`] (as `dequantize_row_iq1_s`).
pub fn decode_iq1_s(b: &[u8], out: &mut Block1) {
    out.d = u16::from_le_bytes([b[0], b[1]]);
    for g in 0..8 {
        let hw = u16::from_le_bytes([b[34 + 2 * g], b[35 + 2 * g]]);
        let ls = 2 * ((hw >> 12) & 7) as i32 + 1;
        let s = sign(hw & 0x8000 != 0);
        for k in [2 * g, 2 * g + 1] {
            out.grid.sc[k] = ls;
            out.delta.sc[k] = ls;
        }
        for l in 0..4 {
            let idx = b[2 + 4 * g + l] as usize | (((hw >> (3 * l)) & 7) as usize) << 8;
            let at = 32 * g + 8 * l;
            out.grid.q[at..at + 8].copy_from_slice(&grid8(idx));
            out.delta.q[at..at + 8].fill(s);
        }
    }
}

/// The fp16 bits of an IQ1_M block's scale (spread over the top nibbles of its scale words).
pub fn iq1_m_scale(b: &[u8]) -> u16 {
    let sc: [u16; 4] = core::array::from_fn(|k| u16::from_le_bytes([b[48 + 2 * k], b[49 + 2 * k]]));
    (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)
}

/// `block_iq1_m` → [`Block1`] (as `dequantize_row_iq1_m`).
pub fn decode_iq1_m(b: &[u8], out: &mut Block1) {
    out.d = iq1_m_scale(b);
    for g in 0..8 {
        let hw = u16::from_le_bytes([b[48 + 2 * (g / 2)], b[49 + 2 * (g / 2)]]);
        let sh = 6 * (g % 2);
        for (h, k) in [2 * g, 2 * g + 1].into_iter().enumerate() {
            let s = 2 * ((hw >> (sh + 3 * h)) & 7) as i32 + 1;
            out.grid.sc[k] = s;
            out.delta.sc[k] = s;
        }
        let (qh0, qh1) = (b[32 + 2 * g] as usize, b[33 + 2 * g] as usize);
        let qs = &b[4 * g..4 * g + 4];
        let idx = [
            qs[0] as usize | ((qh0 << 8) & 0x700),
            qs[1] as usize | ((qh0 << 4) & 0x700),
            qs[2] as usize | ((qh1 << 8) & 0x700),
            qs[3] as usize | ((qh1 << 4) & 0x700),
        ];
        let neg = [qh0 & 0x08 != 0, qh0 & 0x80 != 0, qh1 & 0x08 != 0, qh1 & 0x80 != 0];
        for l in 0..4 {
            let at = 32 * g + 8 * l;
            out.grid.q[at..at + 8].copy_from_slice(&grid8(idx[l]));
            out.delta.q[at..at + 8].fill(sign(neg[l]));
        }
    }
}

/// The two IQ1 formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// IQ1_S: shift per 32, summed from the Q8_K block sums.
    S,
    /// IQ1_M: shift per 8, as integer lanes.
    M,
}

impl Kind {
    /// Bytes per block.
    pub const fn bytes(self) -> usize {
        match self {
            Kind::S => IQ1_S_BYTES,
            Kind::M => IQ1_M_BYTES,
        }
    }
    /// Decodes one block.
    pub fn decode(self, b: &[u8], out: &mut Block1) {
        match self {
            Kind::S => decode_iq1_s(b, out),
            Kind::M => decode_iq1_m(b, out),
        }
    }
    /// The tiled path's sub-block (elements per scale of its bias correction).
    pub const fn subblk(self) -> usize {
        match self {
            Kind::S => 32,
            Kind::M => 16,
        }
    }
}

/// IQ1_S's integer shift sum of one block: `Σ_g (bsum_2g + bsum_2g+1)·sign_g·scale_g`.
pub fn iq1_s_shift(dec: &Block1, y: &[u8]) -> i32 {
    (0..8)
        .map(|g| {
            let bs = i16_at(y, 260 + 4 * g) as i32 + i16_at(y, 262 + 4 * g) as i32;
            bs * dec.delta.q[32 * g] as i32 * dec.delta.sc[2 * g]
        })
        .sum()
}

/// One output of `kind` against one Q8_K row along `path`.
pub fn dot_path(kind: Kind, path: Path, w: &[u8], x: &[u8]) -> f32 {
    let bytes = kind.bytes();
    let nb = (w.len() / bytes).min(x.len() / Q8_K_BYTES);
    let fmt = Format { bytes, decode: |_, _| {}, vec_post: 1.0, tiled_mul: DELTA, subblk: kind.subblk() };
    let mut dec = Block1::default();
    let (mut acc1, mut acc2) = ([0f32; 8], [0f32; 8]);
    let (mut sum, mut shift) = (0f32, 0f32);
    for ib in 0..nb {
        let b = &w[ib * bytes..(ib + 1) * bytes];
        let y = &x[ib * Q8_K_BYTES..(ib + 1) * Q8_K_BYTES];
        kind.decode(b, &mut dec);
        let dw = half::f16::from_bits(dec.d).to_f32();
        let dx = f32_at(y, 0);
        if path == Path::Tiled {
            let r = tiled_s1(&fmt, &dec.tiled(), y) as f32 * (dw * DELTA);
            sum = r.mul_add(dx, sum);
            continue;
        }
        let d = dx * dw;
        for (a, v) in acc1.iter_mut().zip(vec_lanes(&dec.grid, &y[4..260])) {
            *a = d.mul_add(v as f32, *a);
        }
        match kind {
            Kind::S => shift = d.mul_add(iq1_s_shift(&dec, y) as f32, shift),
            Kind::M => {
                for (a, v) in acc2.iter_mut().zip(vec_lanes(&dec.delta, &y[4..260])) {
                    *a = d.mul_add(v as f32, *a);
                }
            }
        }
    }
    match (path, kind) {
        (Path::Tiled, _) => sum,
        (_, Kind::S) => hsum8(&acc1) + DELTA * shift,
        (_, Kind::M) => hsum8(&acc1) + DELTA * hsum8(&acc2),
    }
}

/// `ggml_vec_dot_iq1_s_q8_K` (AVX2 branch).
pub fn iq1_s_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_path(Kind::S, Path::VecDot, w, x)
}

/// `ggml_vec_dot_iq1_m_q8_K` (AVX2 branch).
pub fn iq1_m_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot_path(Kind::M, Path::VecDot, w, x)
}

/// Every output of a tile of `kind` along [`path`].
pub fn tile_kind(kind: Kind, t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    let nb = t.n / 256;
    let p = path(t);
    for r in 0..t.rows {
        let wr = &t.w[r * t.w_stride..][..nb * kind.bytes()];
        for tok in 0..t.tokens {
            let xr = &t.x[tok * t.x_stride..][..nb * Q8_K_BYTES];
            y[tok * y_stride + r] = dot_path(kind, p, wr, xr);
        }
    }
}

/// IQ1_S tile along [`path`].
pub fn iq1_s_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_kind(Kind::S, t, y, y_stride)
}

/// IQ1_M tile along [`path`].
pub fn iq1_m_tile(t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    tile_kind(Kind::M, t, y, y_stride)
}

mod registration {
    use super::*;
    use crate::registry::Kernel;
    use ggml_quants::types::{iq1_m::Iq1M, iq1_s::Iq1S, q8_k::Q8K};
    use ggml_quants::GgmlType;

    inventory::submit! {
        Kernel::new(<Iq1S as GgmlType>::ID, "scalar", 0, <Q8K as GgmlType>::ID, iq1_s_q8_k).with_tile(iq1_s_tile)
    }
    inventory::submit! {
        Kernel::new(<Iq1M as GgmlType>::ID, "scalar", 0, <Q8K as GgmlType>::ID, iq1_m_q8_k).with_tile(iq1_m_tile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggml_quants::types::{iq1_m::Iq1M, iq1_s::Iq1S};
    use ggml_quants::GgmlType;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// A random block of `kind` with a sane fp16 scale (every other bit pattern is valid).
    pub(crate) fn random_block(rng: &mut StdRng, kind: Kind) -> Vec<u8> {
        let mut b: Vec<u8> = (0..kind.bytes()).map(|_| rng.gen()).collect();
        let d: u16 = rng.gen_range(0x1400u16..0x2C00);
        match kind {
            Kind::S => b[..2].copy_from_slice(&d.to_le_bytes()),
            Kind::M => {
                for k in 0..4 {
                    let at = 48 + 2 * k;
                    let w = u16::from_le_bytes([b[at], b[at + 1]]) & 0x0fff | ((d >> (4 * k)) & 0xf) << 12;
                    b[at..at + 2].copy_from_slice(&w.to_le_bytes());
                }
            }
        }
        b
    }

    /// The decoders give `to_float` bit for bit: `d·scale·(grid + shift/8)` per element, in
    /// the dequantizer's order (`dl = d·(2s + 1)`, then `dl·(grid + delta)`).
    #[test]
    fn decoders_match_dequantize() {
        let mut rng = StdRng::seed_from_u64(11);
        type Dequantize = fn(&[u8], &mut [f32]);
        let cases: [(Kind, Dequantize); 2] =
            [(Kind::S, <Iq1S as GgmlType>::dequantize), (Kind::M, <Iq1M as GgmlType>::dequantize)];
        for (kind, deq) in cases {
            for _ in 0..300 {
                let b = random_block(&mut rng, kind);
                let mut want = [0f32; 256];
                deq(&b, &mut want);
                let mut dec = Block1::default();
                kind.decode(&b, &mut dec);
                let d = half::f16::from_bits(dec.d).to_f32();
                for (e, want) in want.iter().enumerate() {
                    let dl = d * dec.grid.sc[e / 16] as f32;
                    let got = dl * (dec.grid.q[e] as f32 + DELTA * dec.delta.q[e] as f32);
                    assert_eq!(got.to_bits(), want.to_bits(), "{kind:?} element {e}: {got} vs {want}");
                }
            }
        }
    }

    /// Both paths are the exact dot product up to float rounding (a sanity check of the
    /// integer bookkeeping: a wrong shift sign or scale would be far off).
    #[test]
    fn paths_approximate_the_dequantized_dot() {
        let mut rng = StdRng::seed_from_u64(12);
        for kind in [Kind::S, Kind::M] {
            for _ in 0..50 {
                let nb = 3;
                let w: Vec<u8> = (0..nb).flat_map(|_| random_block(&mut rng, kind)).collect();
                let xf: Vec<f32> = (0..256 * nb).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
                let mut x = vec![0u8; nb * Q8_K_BYTES];
                crate::scalar::act::quantize_q8_k(&xf, &mut x);
                let mut wf = vec![0f32; 256 * nb];
                match kind {
                    Kind::S => <Iq1S as GgmlType>::dequantize(&w, &mut wf),
                    Kind::M => <Iq1M as GgmlType>::dequantize(&w, &mut wf),
                }
                let mut exact = 0f64;
                for ib in 0..nb {
                    let y = &x[ib * Q8_K_BYTES..];
                    let dx = f32_at(y, 0) as f64;
                    for e in 0..256 {
                        exact += wf[256 * ib + e] as f64 * dx * y[4 + e] as i8 as f64;
                    }
                }
                let scale: f64 = wf.iter().map(|v| v.abs() as f64).sum::<f64>() * f32_at(&x, 0).abs() as f64 * 128.0;
                for p in [Path::VecDot, Path::Tiled] {
                    let got = dot_path(kind, p, &w, &x) as f64;
                    assert!((got - exact).abs() <= 1e-5 * scale, "{kind:?} {p:?}: {got} vs {exact}");
                }
            }
        }
    }
}
