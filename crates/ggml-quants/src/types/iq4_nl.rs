//! `GGML_TYPE_IQ4_NL` (id 20): non-linear 4-bit codes, blocks of 32 weights with one fp16
//! scale; code `q` decodes to `d·kvalues_iq4nl[q]` (4.5 bits per weight).
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_iq4_nl`
//! (`to_float`), `quantize_row_iq4_nl_ref` (`from_float_ref`) and `quantize_iq4_nl` (what
//! `ggml_quantize_chunk` calls), both through `quantize_row_iq4_nl_impl`, which is shared
//! with IQ4_XS ([`super::iq4_xs`]) and lives here (`quantize_nl_impl`).

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::types::iq_common::best_index_int8;
use crate::types::iq_tables::KVALUES_IQ4NL;
use crate::util::{f32_to_fp16, nearest_int, read_f16, GROUP_MAX_EPS};

/// Elements per block (`QK4_NL`).
pub const QK4_NL: usize = 32;

/// ggml's `block_iq4_nl` (18 bytes):
///
/// | offset | bytes | field | meaning                                                        |
/// |-------:|------:|-------|----------------------------------------------------------------|
/// | 0      | 2     | `d`   | fp16 scale                                                     |
/// | 2      | 16    | `qs`  | byte `j`: code of weight `j` (low nibble) and `j + 16` (high)   |
#[repr(C)]
pub struct BlockIq4Nl {
    /// fp16 scale, little-endian.
    pub d: [u8; 2],
    /// 4-bit codes into [`KVALUES_IQ4NL`].
    pub qs: [u8; QK4_NL / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIq4Nl>() == 2 + QK4_NL / 2);
const TS: usize = std::mem::size_of::<BlockIq4Nl>();

/// Marker for `iq4_nl`.
pub struct Iq4Nl;

impl GgmlType for Iq4Nl {
    const NAME: &'static str = "iq4_nl";
    const ID: u32 = 20;
    const BLOCK_SIZE: usize = QK4_NL;
    const TYPE_SIZE: usize = TS;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    /// `dequantize_row_iq4_nl`.
    fn dequantize(src: &[u8], dst: &mut [f32]) {
        let kv = &KVALUES_IQ4NL;
        for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(QK4_NL)) {
            let d = read_f16(b, 0);
            let (lo, hi) = y.split_at_mut(QK4_NL / 2);
            for ((q, l), h) in b[2..].iter().zip(lo).zip(hi) {
                *l = d * kv[(q & 0xF) as usize] as f32;
                *h = d * kv[(q >> 4) as usize] as f32;
            }
        }
    }
}

inventory::submit! { <Iq4Nl as GgmlType>::TRAITS }

/// Where `quantize_row_iq4_nl_impl` writes an IQ4_XS super-block's 6-bit scales.
pub(crate) struct XsScales<'a> {
    pub(crate) scales_h: &'a mut u16,
    pub(crate) scales_l: &'a mut [u8],
}

/// `quantize_row_iq4_nl_impl(super_block_size, 32, x, dh, q4, scales_h, scales_l, scales,
/// weight, L, kvalues_iq4nl, quant_weights, ntry)`.
///
/// `l` is the caller's code buffer (`super_block_size` long); like ggml's `L` it keeps its
/// contents across calls, which matters where a zero block skips its search. Returns the
/// fp16 bits of `d`; the packed codes go to `q4` and, for IQ4_XS (`xs` given), the scales
/// to `xs`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn quantize_nl_impl(
    x: &[f32],
    q4: &mut [u8],
    xs: Option<XsScales<'_>>,
    scales: &mut [f32],
    l: &mut [u8],
    quant_weights: Option<&[f32]>,
    ntry: i32,
) -> u16 {
    const BS: usize = 32;
    let values = &KVALUES_IQ4NL;
    let sbs = x.len();
    let mut weight = [0f32; BS];
    let mut sigma2 = 0f32;
    for &v in x {
        sigma2 += v * v;
    }
    sigma2 *= 2.0 / sbs as f32;
    q4[..sbs / 2].fill(0);

    let mut max_scale = 0f32;
    let mut amax_scale = 0f32;
    let v0 = values[0] as f32;
    for ib in 0..sbs / BS {
        let xb = &x[ib * BS..ib * BS + BS];
        let lb = &mut l[ib * BS..ib * BS + BS];
        match quant_weights {
            Some(qw) => {
                let qw = &qw[ib * BS..ib * BS + BS];
                for j in 0..BS {
                    weight[j] = qw[j] * (sigma2 + xb[j] * xb[j]).sqrt();
                }
            }
            None => {
                for j in 0..BS {
                    weight[j] = xb[j] * xb[j];
                }
            }
        }
        let mut amax = 0f32;
        let mut max = 0f32;
        for &v in xb {
            let ax = v.abs();
            if ax > amax {
                amax = ax;
                max = v;
            }
        }
        if amax < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        let mut d = if ntry > 0 { -max / v0 } else { max / v0 };
        let mut id = 1.0 / d;
        let mut sumqx = 0f32;
        let mut sumq2 = 0f32;
        for j in 0..BS {
            let al = id * xb[j];
            let li = best_index_int8(values, al);
            lb[j] = li as u8;
            let q = values[li] as f32;
            let w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -ntry..=ntry {
            id = (itry + values[0] as i32) as f32 / max;
            sumqx = 0.0;
            sumq2 = 0.0;
            for j in 0..BS {
                let al = id * xb[j];
                let li = best_index_int8(values, al);
                let q = values[li] as f32;
                let w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        let abs_d = d.abs();
        if abs_d > amax_scale {
            amax_scale = abs_d;
            max_scale = d;
        }
    }

    let dh = if let Some(xs) = xs {
        let nb = sbs / BS;
        *xs.scales_h = 0;
        let d = -max_scale / 32.0;
        let dh = f32_to_fp16(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for ib in 0..nb {
            let mut li = nearest_int(id * scales[ib]);
            li = (-32).max(31.min(li));
            let dl = d * li as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            let xb = &x[ib * BS..ib * BS + BS];
            for (lj, &v) in l[ib * BS..ib * BS + BS].iter_mut().zip(xb) {
                *lj = best_index_int8(values, idl * v) as u8;
            }
            li += 32;
            let l_l = (li & 0xf) as u8;
            let l_h = (li >> 4) as u16;
            if ib % 2 == 0 {
                xs.scales_l[ib / 2] = l_l;
            } else {
                xs.scales_l[ib / 2] |= l_l << 4;
            }
            *xs.scales_h |= l_h << (2 * (ib % 8));
        }
        dh
    } else {
        let dh = f32_to_fp16(scales[0]);
        if ntry > 0 {
            let id = if scales[0] != 0.0 { 1.0 / scales[0] } else { 0.0 };
            for (lj, &v) in l[..sbs].iter_mut().zip(x) {
                *lj = best_index_int8(values, id * v) as u8;
            }
        }
        dh
    };

    for i in 0..sbs / 32 {
        for j in 0..16 {
            q4[16 * i + j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
    dh
}

fn encode_block(x: &[f32], y: &mut [u8], l: &mut [u8; QK4_NL], qw: Option<&[f32]>, ntry: i32) {
    let mut scale = [0f32; 1];
    let (d, qs) = y.split_at_mut(2);
    let dh = quantize_nl_impl(x, qs, None, &mut scale, l, qw, ntry);
    d.copy_from_slice(&dh.to_le_bytes());
}

/// `quantize_row_iq4_nl_ref` (`ntry = -1`: no scale search, no re-quantization).
///
/// ggml's code buffer `L` is uninitialised when the first block is all zero; here it
/// starts at zero, and otherwise carries over from block to block as in ggml.
pub fn quantize_ref(x: &[f32], y: &mut [u8]) {
    let mut l = [0u8; QK4_NL];
    for (xb, yb) in x.chunks_exact(QK4_NL).zip(y.chunks_exact_mut(TS)) {
        encode_block(xb, yb, &mut l, None, -1);
    }
}

/// `quantize_iq4_nl`: `quantize_row_iq4_nl_impl` with `ntry = 7` per block, the imatrix
/// (when given) sliced per block.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    let mut l = [0u8; QK4_NL];
    let row_bytes = n_per_row / QK4_NL * TS;
    for (xr, yr) in src.chunks_exact(n_per_row).zip(dst.chunks_exact_mut(row_bytes)) {
        for (ib, (xb, yb)) in xr.chunks_exact(QK4_NL).zip(yr.chunks_exact_mut(TS)).enumerate() {
            let qw = imatrix.map(|w| &w[ib * QK4_NL..(ib + 1) * QK4_NL]);
            encode_block(xb, yb, &mut l, qw, 7);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::iq_common::{rmse, test_rng};

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; TS];
        crate::util::write_f16(&mut b, 0, 0.5);
        b[2] = 0xF0;
        b[3] = 0x08;
        let mut y = [0f32; QK4_NL];
        Iq4Nl::dequantize(&b, &mut y);
        assert_eq!((y[0], y[16], y[1], y[17]), (-63.5, 56.5, 0.5, -63.5));
    }

    #[test]
    fn roundtrip_error_is_small_with_and_without_imatrix() {
        let mut r = test_rng(17);
        let n = 4 * QK4_NL;
        let x: Vec<f32> = (0..3 * n).map(|_| r()).collect();
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.1).collect();
        for w in [None, Some(&im[..])] {
            let q = Iq4Nl::TRAITS.quantize_to_vec(&x, n, w).unwrap();
            let y = Iq4Nl::TRAITS.dequantize_to_vec(&q).unwrap();
            assert!(rmse(&x, &y) < 0.06, "{}", rmse(&x, &y));
        }
        let mut q = vec![0u8; x.len() / QK4_NL * TS];
        quantize_ref(&x, &mut q);
        let y = Iq4Nl::TRAITS.dequantize_to_vec(&q).unwrap();
        assert!(rmse(&x, &y) < 0.08);
    }
}
