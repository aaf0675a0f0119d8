//! `GGML_TYPE_NVFP4` (id 40): NVIDIA's FP4, blocks of 64 E2M1 values in four sub-blocks of
//! 16, each with an unsigned E4M3 scale (4.5 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`, `ggml/src/ggml-impl.h`):
//! `dequantize_row_nvfp4` (`to_float`), `quantize_row_nvfp4_ref` (`from_float_ref`: scale
//! `ue4m3(amax / 6)`, each value to its nearest code) and `quantize_nvfp4`, which
//! `ggml_quantize_chunk` calls (the reference quantizer; the importance matrix is ignored).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq_common::{best_index_fp4, fp32_to_ue4m3, ue4m3_to_fp32};
use crate::types::iq_tables::KVALUES_FP4;

/// Elements per block (`QK_NVFP4`).
pub const QK_NVFP4: usize = 64;
/// Elements per scaled sub-block (`QK_NVFP4_SUB`).
pub const QK_NVFP4_SUB: usize = 16;
const N_SUB: usize = QK_NVFP4 / QK_NVFP4_SUB;

/// ggml's `block_nvfp4` (36 bytes):
///
/// | offset | bytes | field | meaning                                                         |
/// |-------:|------:|-------|-----------------------------------------------------------------|
/// | 0      | 4     | `d`   | UE4M3 scale of sub-block `s` (16 weights)                        |
/// | 4      | 32    | `qs`  | byte `8s + j`: weight `16s + j` (low nibble) and `16s + 8 + j` (high) |
#[repr(C)]
pub struct BlockNvfp4 {
    /// UE4M3 scales, one per sub-block.
    pub d: [u8; N_SUB],
    /// 4-bit E2M1 codes.
    pub qs: [u8; QK_NVFP4 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockNvfp4>() == N_SUB + QK_NVFP4 / 2);
const TS: usize = std::mem::size_of::<BlockNvfp4>();

/// Marker for `nvfp4`.
pub struct Nvfp4;

impl GgmlType for Nvfp4 {
    const NAME: &'static str = "nvfp4";
    const ID: u32 = 40;
    const BLOCK_SIZE: usize = QK_NVFP4;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_nvfp4`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        let kv = &KVALUES_FP4;
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK_NVFP4)) {
            for (s, yb) in y.chunks_exact_mut(QK_NVFP4_SUB).enumerate() {
                let d = ue4m3_to_fp32(b[s]);
                let qs = &b[N_SUB + s * (QK_NVFP4_SUB / 2)..N_SUB + (s + 1) * (QK_NVFP4_SUB / 2)];
                let (lo, hi) = yb.split_at_mut(QK_NVFP4_SUB / 2);
                for ((q, l), h) in qs.iter().zip(lo).zip(hi) {
                    *l = kv[(q & 0xF) as usize] as f32 * d;
                    *h = kv[(q >> 4) as usize] as f32 * d;
                }
            }
        }
    }
}

inventory::submit! { <Nvfp4 as GgmlType>::TRAITS }

/// `quantize_row_nvfp4_ref`.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    let kv = &KVALUES_FP4;
    for (xb, yb) in x.chunks_exact(QK_NVFP4).zip(y.chunks_exact_mut(TS)) {
        for (s, xs) in xb.chunks_exact(QK_NVFP4_SUB).enumerate() {
            let mut amax = 0f32;
            for &v in xs {
                if amax < v.abs() {
                    amax = v.abs();
                }
            }
            let ue = fp32_to_ue4m3(amax / 6.0);
            yb[s] = ue;
            let d = ue4m3_to_fp32(ue);
            for j in 0..QK_NVFP4_SUB / 2 {
                let x0 = best_index_fp4(kv, xs[j], d);
                let x1 = best_index_fp4(kv, xs[QK_NVFP4_SUB / 2 + j], d);
                yb[N_SUB + s * (QK_NVFP4_SUB / 2) + j] = x0 | (x1 << 4);
            }
        }
    }
}

/// `quantize_nvfp4`: the reference quantizer; ggml ignores the imatrix.
fn quantize_rows(src: &[f32], dst: &mut [u8], _n_per_row: usize, _imatrix: Option<&[f32]>) {
    quantize_ref(src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::iq_common::{rmse, test_rng};

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        b[0] = 7 << 3; // 1.0, halved: 0.5
        b[1] = (8 << 3) | 4; // 1.5·2 = 3, halved: 1.5
        b[4] = 0x57; // low: 12 → 6.0, high: 6 → 3.0 (times 0.5)
        b[12] = 0x0F; // sub-block 1, low: -12 → -18
        let mut y = [0f32; QK_NVFP4];
        Nvfp4::dequantize(&b, &mut y);
        assert_eq!((y[0], y[8], y[16], y[24]), (6.0, 3.0, -18.0, 0.0));
    }

    #[test]
    fn roundtrip_error_is_bounded() {
        let mut r = test_rng(13);
        let x: Vec<f32> = (0..8 * QK_NVFP4).map(|_| r() * 2.0).collect();
        let q = Nvfp4::TRAITS.quantize_to_vec(&x, 2 * QK_NVFP4, None).unwrap();
        let y = Nvfp4::TRAITS.dequantize_to_vec(&q).unwrap();
        assert!(rmse(&x, &y) < 0.15, "{}", rmse(&x, &y));
    }
}
