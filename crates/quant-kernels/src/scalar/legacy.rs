//! Scalar twins of the AVX2 kernels of the legacy 32-element formats q4_1, q5_0, q5_1
//! (× Q8_1 / Q8_0) and q8_0 (× Q8_0): ggml's `__AVX2__` float arithmetic, which llama.cpp's
//! AVX2 build (`-DGGML_NATIVE=OFF -DGGML_AVX2=ON`, pinned source) runs for every output of
//! these types whatever the batch — `ggml_vec_dot_{q4_1_q8_1,q5_0_q8_0,q5_1_q8_1,q8_0_q8_0}`
//! (`ggml-cpu/arch/x86/quants.c`) for one token and for q4_1/q5_1 batches (neither llamafile's
//! sgemm nor the repack or tiled paths take them on x86), `tinyBLAS_Q0_AVX`
//! (`ggml-cpu/llamafile/sgemm.cpp`, `gemm4xN` / `gemmMx4` / `gemm`) for q5_0 and q8_0
//! batches of 2+ tokens, which per output is the same arithmetic:
//!
//! - per block 8 exact integer lanes (lane `j` = Σ of elements `4j..4j+4` of `w·x`:
//!   `maddubs` pairs, `madd` with ones; q5_0 / q8_0 through ggml's sign trick),
//! - `d = d_w·d_x` (one rounding), `acc[j] = fma(d, f32(lane j), acc[j])` in block order,
//! - `hsum_float_8(acc)` (halves, then pairs, then neighbours),
//! - q4_1 / q5_1: `+ summs`, where `summs += m_w·s_x` per block in block order (GCC's
//!   default `-ffp-contract=fast` fuses it into one `vfmadd231ss` in the pinned build; the
//!   same bits, because the product of two fp16 values, like `d_w·d_x`, is exact in f32).
//!
//! The integer lanes are exact for activations in `−127..=127` (all ggml's quantizers
//! emit): no `maddubs` pair saturates. What decides the bits is the order of the float
//! steps: 8 lane accumulators, the scale applied per block, the horizontal sum last.

use super::act::{Q8_0_BYTES, Q8_1_BYTES};
use super::f16_at;
use super::iq4::hsum8;

/// Bytes per q4_1 block (fp16 `d`, fp16 `m`, 16 bytes of nibbles).
pub const Q4_1_BYTES: usize = 20;
/// Bytes per q5_0 block (fp16 `d`, u32 `qh`, 16 bytes of nibbles).
pub const Q5_0_BYTES: usize = 22;
/// Bytes per q5_1 block (fp16 `d`, fp16 `m`, u32 `qh`, 16 bytes of nibbles).
pub const Q5_1_BYTES: usize = 24;
/// Bytes per q8_0 block (fp16 `d`, 32 signed bytes).
pub const Q8_0_W_BYTES: usize = 34;

/// One legacy format as the AVX2 kernels see it.
#[derive(Clone, Copy, Debug)]
pub struct Legacy {
    /// ggml type name.
    pub name: &'static str,
    /// Weight bytes per block.
    pub wb: usize,
    /// Activation bytes per block (Q8_0: 34, Q8_1: 36).
    pub xb: usize,
    /// Offset of the activation quants in their block (Q8_0: 2, Q8_1: 4).
    pub xq: usize,
    /// The format has a min (`m`, at byte 2) and its activations a sum (`s`, at byte 2).
    pub has_min: bool,
    /// Element `e` (`0..32`) of a weight block as the signed integer the kernel multiplies.
    pub value: fn(&[u8], usize) -> i32,
}

fn nibble(qs: &[u8], e: usize) -> i32 {
    (if e < 16 { qs[e] & 0xF } else { qs[e - 16] >> 4 }) as i32
}

fn high_bit(qh: &[u8], e: usize) -> i32 {
    ((u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]) >> e) & 1) as i32
}

/// q4_1 × Q8_1: `d·q + m`, `q` a nibble.
pub const Q4_1: Legacy =
    Legacy { name: "q4_1", wb: Q4_1_BYTES, xb: Q8_1_BYTES, xq: 4, has_min: true, value: |b, e| nibble(&b[4..], e) };
/// q5_0 × Q8_0: `d·(q − 16)`, `q` a nibble and its fifth bit from `qh`.
pub const Q5_0: Legacy = Legacy {
    name: "q5_0",
    wb: Q5_0_BYTES,
    xb: Q8_0_BYTES,
    xq: 2,
    has_min: false,
    value: |b, e| (nibble(&b[6..], e) | high_bit(&b[2..], e) << 4) - 16,
};
/// q5_1 × Q8_1: `d·q + m`, `q` a nibble and its fifth bit from `qh`.
pub const Q5_1: Legacy = Legacy {
    name: "q5_1",
    wb: Q5_1_BYTES,
    xb: Q8_1_BYTES,
    xq: 4,
    has_min: true,
    value: |b, e| nibble(&b[8..], e) | high_bit(&b[4..], e) << 4,
};
/// q8_0 × Q8_0: `d·q`, `q` a signed byte.
pub const Q8_0: Legacy = Legacy {
    name: "q8_0",
    wb: Q8_0_W_BYTES,
    xb: Q8_0_BYTES,
    xq: 2,
    has_min: false,
    value: |b, e| b[2 + e] as i8 as i32,
};

/// The 8 integer lanes of one block: lane `j` = Σ of elements `4j..4j+4` of `w·x`.
pub fn lanes(f: &Legacy, b: &[u8], y: &[u8]) -> [i32; 8] {
    let mut l = [0i32; 8];
    for e in 0..32 {
        l[e / 4] += (f.value)(b, e) * y[f.xq + e] as i8 as i32;
    }
    l
}

/// One output: weight row `w` · activation row `x` (whole blocks) in ggml's AVX2 order
/// (see the module docs).
pub fn dot(f: &Legacy, w: &[u8], x: &[u8]) -> f32 {
    let nb = (w.len() / f.wb).min(x.len() / f.xb);
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for ib in 0..nb {
        let b = &w[ib * f.wb..(ib + 1) * f.wb];
        let y = &x[ib * f.xb..(ib + 1) * f.xb];
        let d = f16_at(b, 0) * f16_at(y, 0);
        for (a, l) in acc.iter_mut().zip(lanes(f, b, y)) {
            *a = d.mul_add(l as f32, *a);
        }
        if f.has_min {
            summs += f16_at(b, 2) * f16_at(y, 2);
        }
    }
    // No `+ 0.0` for the formats without a min: it would turn a −0 into +0.
    if f.has_min {
        hsum8(&acc) + summs
    } else {
        hsum8(&acc)
    }
}

/// `ggml_vec_dot_q4_1_q8_1` (AVX2) / its rows in any batch.
pub fn q4_1_q8_1(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(&Q4_1, w, x)
}

/// `ggml_vec_dot_q5_0_q8_0` (AVX2) and `tinyBLAS_Q0_AVX<block_q5_0>`.
pub fn q5_0_q8_0(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(&Q5_0, w, x)
}

/// `ggml_vec_dot_q5_1_q8_1` (AVX2) / its rows in any batch.
pub fn q5_1_q8_1(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(&Q5_1, w, x)
}

/// `ggml_vec_dot_q8_0_q8_0` (AVX2) and `tinyBLAS_Q0_AVX<block_q8_0>`.
pub fn q8_0_q8_0(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(&Q8_0, w, x)
}

/// The format of weight type `type_id` (ggml ids: q4_1 3, q5_0 6, q5_1 7, q8_0 8).
pub fn format(type_id: u32) -> Option<&'static Legacy> {
    match type_id {
        3 => Some(&Q4_1),
        6 => Some(&Q5_0),
        7 => Some(&Q5_1),
        8 => Some(&Q8_0),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Handmade blocks: each element's value as the format defines it.
    #[test]
    fn values_decode_the_block_layouts() {
        // q5_0: nibble 0x3 / 0xC at element 0 / 16, fifth bits of elements 0 and 17 set.
        let mut b = [0u8; Q5_0_BYTES];
        b[6] = 0xC3;
        b[2..6].copy_from_slice(&(1u32 | 1 << 17).to_le_bytes());
        assert_eq!((Q5_0.value)(&b, 0), 0x13 - 16);
        assert_eq!((Q5_0.value)(&b, 16), 0xC - 16);
        assert_eq!((Q5_0.value)(&b, 17), 0x10 - 16);
        let mut b1 = [0u8; Q5_1_BYTES];
        b1[8] = 0xC3;
        b1[4..8].copy_from_slice(&(1u32 << 16).to_le_bytes());
        assert_eq!(((Q5_1.value)(&b1, 0), (Q5_1.value)(&b1, 16)), (3, 0x1C));
        let mut b4 = [0u8; Q4_1_BYTES];
        b4[4 + 15] = 0x5A;
        assert_eq!(((Q4_1.value)(&b4, 15), (Q4_1.value)(&b4, 31)), (0xA, 0x5));
        let mut b8 = [0u8; Q8_0_W_BYTES];
        b8[2 + 31] = 0x80;
        assert_eq!((Q8_0.value)(&b8, 31), -128);
    }
}
