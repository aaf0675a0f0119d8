//! Scalar twin of the Q1_0 × Q8_0 kernel: `ggml_vec_dot_q1_0_q8_0`'s `__AVX2__` branch (which
//! AVX-512 builds compile too). A 128-element block (fp16 `d`, 16 bytes of sign bits: set →
//! `+x`, clear → `−x`, wrapping as `sub(xor(x, m), m)` does) against four Q8_0 blocks: per
//! Q8_0 block 8 integer lanes (lane `j` = elements `4j..4j+4`), `acc_b = d_y0·lanes` then
//! `acc_b = fma(d_yk, lanes, acc_b)`, and `acc = fma(d, acc_b, acc)`; `hsum_float_8` at the end.

use super::act::Q8_0_BYTES;
use super::f16_at;
use super::iq4::hsum8;

/// Bytes per Q1_0 block.
pub const Q1_0_BYTES: usize = 18;

/// The 8 lanes of Q8_0 block `k` (of 4) against the sign bits of `b`.
pub fn lanes(b: &[u8], k: usize, y: &[u8]) -> [i32; 8] {
    let mut l = [0i32; 8];
    for e in 0..32 {
        let x = y[2 + e] as i8;
        let set = (b[2 + 4 * k + e / 8] >> (e % 8)) & 1 != 0;
        l[e / 4] += if set { x } else { x.wrapping_neg() } as i32;
    }
    l
}

/// `ggml_vec_dot_q1_0_q8_0` (AVX2 branch).
pub fn q1_0_q8_0(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let nb = (w.len() / Q1_0_BYTES).min(x.len() / (4 * Q8_0_BYTES));
    let mut acc = [0f32; 8];
    for ib in 0..nb {
        let b = &w[ib * Q1_0_BYTES..][..Q1_0_BYTES];
        let mut accb = [0f32; 8];
        for k in 0..4 {
            let y = &x[(4 * ib + k) * Q8_0_BYTES..][..Q8_0_BYTES];
            let dy = f16_at(y, 0);
            for (a, v) in accb.iter_mut().zip(lanes(b, k, y)) {
                *a = if k == 0 { dy * v as f32 } else { dy.mul_add(v as f32, *a) };
            }
        }
        let d = f16_at(b, 0);
        for (a, v) in acc.iter_mut().zip(accb) {
            *a = d.mul_add(v, *a);
        }
    }
    hsum8(&acc)
}

mod registration {
    use super::*;
    use crate::registry::Kernel;
    use ggml_quants::types::{q1_0::Q1_0, q8_0::Q8_0};
    use ggml_quants::GgmlType;

    inventory::submit! {
        Kernel::new(<Q1_0 as GgmlType>::ID, "scalar", 0, <Q8_0 as GgmlType>::ID, q1_0_q8_0)
    }
}
