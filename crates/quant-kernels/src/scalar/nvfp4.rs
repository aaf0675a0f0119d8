//! Scalar twin of the NVFP4 × Q8_0 kernel: `ggml_vec_dot_nvfp4_q8_0`'s `__AVX2__` branch
//! (which AVX-512 builds compile too). A 64-element block (4 UE4M3 sub-block scales, 32
//! bytes of E2M1 codes through `kvalues_fp4`) against two Q8_0 blocks: per Q8_0 block 8
//! integer lanes (lane `j` = elements `4j..4j+4`, the code's sign onto the activation byte,
//! wrapping, as `maddubs(|q|, sign(x, q))`), `acc = fma(s, lanes, acc)` with `s` the
//! sub-block's `ue4m3(d)·d_y` (lanes 0..4 the first 16 elements, 4..8 the second);
//! `hsum_float_8` at the end.

use super::act::Q8_0_BYTES;
use super::f16_at;
use super::iq4::hsum8;
use ggml_quants::types::iq_common::ue4m3_to_fp32;
use ggml_quants::types::iq_tables::KVALUES_FP4;

/// Bytes per NVFP4 block.
pub const NVFP4_BYTES: usize = 36;

/// The code of element `e` (0..64) of block `b`.
pub fn code(b: &[u8], e: usize) -> i8 {
    let (s, j) = (e / 16, e % 16);
    let q = b[4 + 8 * s + j % 8];
    KVALUES_FP4[if j < 8 { q & 0xF } else { q >> 4 } as usize]
}

/// `ggml_vec_dot_nvfp4_q8_0` (AVX2 branch).
pub fn nvfp4_q8_0(_n: usize, w: &[u8], x: &[u8]) -> f32 {
    let nb = (w.len() / NVFP4_BYTES).min(x.len() / (2 * Q8_0_BYTES));
    let mut acc = [0f32; 8];
    for ib in 0..nb {
        let b = &w[ib * NVFP4_BYTES..][..NVFP4_BYTES];
        for h in 0..2 {
            let y = &x[(2 * ib + h) * Q8_0_BYTES..][..Q8_0_BYTES];
            let dy = f16_at(y, 0);
            let s = [ue4m3_to_fp32(b[2 * h]) * dy, ue4m3_to_fp32(b[2 * h + 1]) * dy];
            let mut l = [0i32; 8];
            for e in 0..32 {
                let (q, xv) = (code(b, 32 * h + e), y[2 + e] as i8);
                let xs = if q < 0 { xv.wrapping_neg() } else { xv };
                l[e / 4] += q.unsigned_abs() as i32 * xs as i32;
            }
            for (j, (a, v)) in acc.iter_mut().zip(l).enumerate() {
                *a = s[j / 4].mul_add(v as f32, *a);
            }
        }
    }
    hsum8(&acc)
}

mod registration {
    use super::*;
    use crate::registry::Kernel;
    use ggml_quants::types::{nvfp4::Nvfp4, q8_0::Q8_0};
    use ggml_quants::GgmlType;

    inventory::submit! {
        Kernel::new(<Nvfp4 as GgmlType>::ID, "scalar", 0, <Q8_0 as GgmlType>::ID, nvfp4_q8_0)
    }
}
