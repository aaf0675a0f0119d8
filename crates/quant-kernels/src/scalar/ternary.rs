//! Scalar twins of the ternary kernels TQ1_0 and TQ2_0 (× Q8_K), in the arithmetic of
//! `ggml_vec_dot_tq1_0_q8_K` / `ggml_vec_dot_tq2_0_q8_K`'s AVX2 branch (which AVX-512
//! builds compile too; llama.cpp has no other path for these types: no repack, no
//! tinyBLAS, no tiled matmul).
//!
//! Both formats store each weight as a digit `0, 1, 2` (the ternary value plus one). ggml
//! multiplies the digits with the activations (`maddubs`) in 16 16-bit lanes, 16-bit lane
//! `k` taking elements `32r + 2k, 32r + 2k + 1` of each 32-element row `r` of the block,
//! subtracts the Q8_K block sum `bsums[k]` (of elements `16k..16k+16`: other elements
//! than the lane's, but the total is `Σ (digit − 1)·x`), pairs the lanes into 8 32-bit
//! ones, and per block `sumf = cvt(lanes)·d + sumf` with `d = d_x·d_w` (one rounding: GCC
//! contracts the `mul` and `add` into an FMA). The integers are exact, so the 32-bit lane
//! `j` is `Σ digit·x` over the elements whose position in their row is `4j..4j+4`, minus
//! `bsums[2j] + bsums[2j+1]`.

use super::act::Q8_K_BYTES;
use super::iq4::hsum8;
use super::{f16_at, f32_at, i16_at};

/// Bytes per TQ1_0 block (48 bytes of five base-3 digits each, 4 bytes of four, fp16 `d`).
pub const TQ1_0_BYTES: usize = 54;
/// Bytes per TQ2_0 block (64 bytes of four 2-bit digits each, fp16 `d`).
pub const TQ2_0_BYTES: usize = 66;

/// The digit of a base-3 packed byte already multiplied by `3ⁿ` (mod 256): its top
/// ternary digit, `(q·3) >> 8` (ggml's `dequantize_row_tq1_0`).
#[inline(always)]
fn top_trit(q: u8) -> u8 {
    ((q as u16 * 3) >> 8) as u8
}

/// The 256 digits (`0..=2`) of a TQ1_0 block, in element order.
pub fn digits_tq1_0(b: &[u8]) -> [u8; 256] {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let mut d = [0u8; 256];
    // Elements 0..160: byte m of qs[0..32], digit n at 32n + m.
    for n in 0..5 {
        for m in 0..32 {
            d[32 * n + m] = top_trit(b[m].wrapping_mul(POW3[n]));
        }
    }
    // Elements 160..240: byte m of qs[32..48], digit n at 160 + 16n + m.
    for n in 0..5 {
        for m in 0..16 {
            d[160 + 16 * n + m] = top_trit(b[32 + m].wrapping_mul(POW3[n]));
        }
    }
    // Elements 240..256: byte j of qh, digit n at 240 + 4n + j.
    for n in 0..4 {
        for j in 0..4 {
            d[240 + 4 * n + j] = top_trit(b[48 + j].wrapping_mul(POW3[n]));
        }
    }
    d
}

/// The 256 digits (`0..=2`, or 3 in a malformed block) of a TQ2_0 block, in element order:
/// bits `2l..2l+2` of byte `j + m` (`j` 0 or 32) are element `4j + 32l + m`.
pub fn digits_tq2_0(b: &[u8]) -> [u8; 256] {
    let mut d = [0u8; 256];
    for j in [0usize, 32] {
        for l in 0..4 {
            for m in 0..32 {
                d[4 * j + 32 * l + m] = (b[j + m] >> (2 * l)) & 3;
            }
        }
    }
    d
}

/// The 8 integer lanes of one block against one Q8_K block `y` (see the module docs).
#[inline(always)]
pub fn lanes(digits: &[u8; 256], y: &[u8]) -> [i32; 8] {
    let mut l = [0i32; 8];
    for (e, &q) in digits.iter().enumerate() {
        l[(e % 32) / 4] += q as i32 * y[4 + e] as i8 as i32;
    }
    for (j, lj) in l.iter_mut().enumerate() {
        *lj -= i16_at(y, 260 + 4 * j) as i32 + i16_at(y, 262 + 4 * j) as i32;
    }
    l
}

/// One output: blocks of `bytes` bytes decoded by `digits`, fp16 `d` at byte `bytes − 2`.
fn dot(w: &[u8], x: &[u8], bytes: usize, digits: fn(&[u8]) -> [u8; 256]) -> f32 {
    let nb = (w.len() / bytes).min(x.len() / Q8_K_BYTES);
    let mut acc = [0f32; 8];
    for ib in 0..nb {
        let b = &w[ib * bytes..(ib + 1) * bytes];
        let y = &x[ib * Q8_K_BYTES..(ib + 1) * Q8_K_BYTES];
        let d = f32_at(y, 0) * f16_at(b, bytes - 2);
        for (a, v) in acc.iter_mut().zip(lanes(&digits(b), y)) {
            *a = (v as f32).mul_add(d, *a);
        }
    }
    hsum8(&acc)
}

/// `ggml_vec_dot_tq1_0_q8_K` (AVX2).
pub fn tq1_0_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(w, x, TQ1_0_BYTES, digits_tq1_0)
}

/// `ggml_vec_dot_tq2_0_q8_K` (AVX2).
pub fn tq2_0_q8_k(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(w, x, TQ2_0_BYTES, digits_tq2_0)
}

mod registration {
    use super::*;
    use crate::registry::Kernel;
    use ggml_quants::types::{q8_k::Q8K, tq1_0::Tq1_0, tq2_0::Tq2_0};
    use ggml_quants::GgmlType;

    inventory::submit! {
        Kernel::new(<Tq1_0 as GgmlType>::ID, "scalar", 0, <Q8K as GgmlType>::ID, tq1_0_q8_k)
    }
    inventory::submit! {
        Kernel::new(<Tq2_0 as GgmlType>::ID, "scalar", 0, <Q8K as GgmlType>::ID, tq2_0_q8_k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digits are those of ggml's reference dequantizers (`(digit − 1)·d`).
    #[test]
    fn digits_follow_the_reference_dequantizers() {
        let mut seed = 0x1234_5678_9ABC_DEF0u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        };
        for (name, bytes, digits) in [
            ("tq1_0", TQ1_0_BYTES, digits_tq1_0 as fn(&[u8]) -> [u8; 256]),
            ("tq2_0", TQ2_0_BYTES, digits_tq2_0 as fn(&[u8]) -> [u8; 256]),
        ] {
            let t = ggml_quants::lookup_name(name).unwrap();
            for _ in 0..50 {
                let mut b: Vec<u8> = (0..bytes).map(|_| next()).collect();
                if name == "tq2_0" {
                    // Digit 3 does not occur in a quantized block (dequantized it would be 2).
                    for v in &mut b[..64] {
                        for l in 0..4 {
                            if (*v >> (2 * l)) & 3 == 3 {
                                *v &= !(1 << (2 * l));
                            }
                        }
                    }
                }
                b[bytes - 2..].copy_from_slice(&half::f16::from_f32(1.0).to_bits().to_le_bytes());
                let want = t.dequantize_to_vec(&b).unwrap();
                let got = digits(&b);
                for (e, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g as f32 - 1.0, w, "{name} element {e}");
                }
            }
        }
    }
}
