//! Scalar twin of the Q2_0 × Q8_0 kernel. ggml-cpu has no x86 SIMD branch for Q2_0: every
//! x86 build runs `ggml_vec_dot_q2_0_q8_0_generic`: per 64-element block (fp16 `d`, 2-bit
//! codes `q − 1`) against two Q8_0 blocks, `s += d_y·Σ` per Q8_0 block (exact products: 11
//! bits times at most 13), then `sumf += d·s`, not contracted to an FMA (checked against
//! libggml-cpu with `examples/ggml_compare.rs`; an FMA there differs on 2 of 3 rows). The
//! integer sums are exact, so a SIMD kernel need only compute them faster.

use super::act::Q8_0_BYTES;
use super::f16_at;

/// Bytes per Q2_0 block.
pub const Q2_0_BYTES: usize = 18;

/// `Σ (q − 1)·x` of Q8_0 block `k` (of 2) against `b`.
pub fn sum_block(b: &[u8], k: usize, y: &[u8]) -> i32 {
    (0..32).map(|e| (((b[2 + 8 * k + e / 4] >> (2 * (e % 4))) & 3) as i32 - 1) * y[2 + e] as i8 as i32).sum()
}

/// `ggml_vec_dot_q2_0_q8_0_generic`.
pub fn q2_0_q8_0(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let nb = (w.len() / Q2_0_BYTES).min(x.len() / (2 * Q8_0_BYTES));
    let mut sumf = 0f32;
    for ib in 0..nb {
        let b = &w[ib * Q2_0_BYTES..][..Q2_0_BYTES];
        let mut s = 0f32;
        for k in 0..2 {
            let y = &x[(2 * ib + k) * Q8_0_BYTES..][..Q8_0_BYTES];
            s += f16_at(y, 0) * sum_block(b, k, y) as f32;
        }
        sumf += f16_at(b, 0) * s;
    }
    sumf
}

mod registration {
    use super::*;
    use crate::registry::Kernel;
    use ggml_quants::types::{q2_0::Q2_0, q8_0::Q8_0};
    use ggml_quants::GgmlType;

    inventory::submit! {
        Kernel::new(<Q2_0 as GgmlType>::ID, "scalar", 0, <Q8_0 as GgmlType>::ID, q2_0_q8_0)
    }
}
