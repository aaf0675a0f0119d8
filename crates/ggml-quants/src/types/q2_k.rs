//! `GGML_TYPE_Q2_K` (id 10): 2-bit K-quant, `x = d·sc·q - dmin·m` over 16 sub-blocks of 16.
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_q2_K`
//! (`to_float`), `quantize_row_q2_K_ref` (`from_float_ref`, scale search by
//! `make_qkx2_quants`), `quantize_row_q2_K_impl` (imatrix search by `make_qkx3_quants` and
//! `make_qp_quants`) and `quantize_q2_K`, which `ggml_quantize_chunk` (`ggml/src/ggml.c`)
//! calls: the `_ref` over all rows without an imatrix, `_impl` row by row with one. Layout
//! from `block_q2_K` in `ggml/src/ggml-common.h`.

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::util::{make_qkx2_quants, make_qkx3_quants, make_qp_quants, nearest_int, read_f16, write_f16};
use crate::QK_K;

/// `block_q2_K`, 84 bytes per 256 weights (2.625 bits per weight):
///
/// | offset | bytes | field    | meaning                                                     |
/// |--------|-------|----------|-------------------------------------------------------------|
/// | 0      | 16    | `scales` | per sub-block of 16: scale in bits 0-3, min in bits 4-7     |
/// | 16     | 64    | `qs`     | 2-bit codes; byte `32h + l` holds elements `128h + l + 32s` at bits `2s` |
/// | 80     | 2     | `d`      | fp16 super-block scale of the scales                        |
/// | 82     | 2     | `dmin`   | fp16 super-block scale of the mins                          |
///
/// Element `128h + 32s + 16k + l` decodes to
/// `d·(sc & 15)·q - dmin·(sc >> 4)` with `sc = scales[8h + 2s + k]`.
/// The fp16 fields are kept as raw little-endian bytes: blocks in a file are unaligned.
#[repr(C)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockQ2K {
    /// 4-bit scale (low nibble) and 4-bit min (high nibble) per sub-block.
    pub scales: [u8; QK_K / 16],
    /// 2-bit quants, four per byte.
    pub qs: [u8; QK_K / 4],
    /// fp16 `d`, little-endian.
    pub d: [u8; 2],
    /// fp16 `dmin`, little-endian.
    pub dmin: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 2 * 2 + QK_K / 16 + QK_K / 4);

impl Default for BlockQ2K {
    fn default() -> Self {
        Self { scales: [0; QK_K / 16], qs: [0; QK_K / 4], d: [0; 2], dmin: [0; 2] }
    }
}

impl BlockQ2K {
    /// Bytes per block.
    pub const SIZE: usize = 84;

    /// Parses one block from `b[..84]`.
    #[inline]
    pub fn from_bytes(b: &[u8]) -> Self {
        let b: &[u8; Self::SIZE] = b[..Self::SIZE].try_into().expect("84 bytes");
        let mut blk = Self::default();
        blk.scales.copy_from_slice(&b[0..16]);
        blk.qs.copy_from_slice(&b[16..80]);
        blk.d.copy_from_slice(&b[80..82]);
        blk.dmin.copy_from_slice(&b[82..84]);
        blk
    }

    /// Writes the block to `out[..84]`.
    #[inline]
    pub fn write_to(&self, out: &mut [u8]) {
        let out: &mut [u8; Self::SIZE] = (&mut out[..Self::SIZE]).try_into().expect("84 bytes");
        out[0..16].copy_from_slice(&self.scales);
        out[16..80].copy_from_slice(&self.qs);
        out[80..82].copy_from_slice(&self.d);
        out[82..84].copy_from_slice(&self.dmin);
    }

    /// `d` widened to f32.
    #[inline]
    pub fn d(&self) -> f32 {
        read_f16(&self.d, 0)
    }

    /// `dmin` widened to f32.
    #[inline]
    pub fn dmin(&self) -> f32 {
        read_f16(&self.dmin, 0)
    }

    /// Decodes the block into 256 floats (`dequantize_row_q2_K`).
    #[inline]
    pub fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = self.d();
        let min = self.dmin();
        for (h, (q, y)) in self.qs.chunks_exact(32).zip(y.chunks_exact_mut(128)).enumerate() {
            for (s, y) in y.chunks_exact_mut(32).enumerate() {
                let shift = 2 * s;
                for (k, y) in y.chunks_exact_mut(16).enumerate() {
                    let sc = self.scales[8 * h + 2 * s + k];
                    let dl = d * (sc & 0xF) as f32;
                    let ml = min * (sc >> 4) as f32;
                    for (y, &q) in y.iter_mut().zip(&q[16 * k..16 * k + 16]) {
                        *y = dl * ((q >> shift) & 3) as f32 - ml;
                    }
                }
            }
        }
    }
}

/// Marker for `q2_K`.
pub struct Q2K;

impl GgmlType for Q2K {
    const NAME: &'static str = "q2_K";
    const ID: u32 = 10;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = BlockQ2K::SIZE;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(BlockQ2K::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
            let y: &mut [f32; QK_K] = y.try_into().expect("QK_K floats");
            BlockQ2K::from_bytes(b).dequantize(y);
        }
    }
}

inventory::submit! { <Q2K as GgmlType>::TRAITS }

/// Packs 256 2-bit codes the way both quantizers do: byte `32h + l` of `qs` holds
/// `L[128h + l + 32s]` at bits `2s`.
#[inline]
fn pack_qs(l: &[u8; QK_K], qs: &mut [u8; QK_K / 4]) {
    for j in (0..QK_K).step_by(128) {
        for i in 0..32 {
            let v = l[j + i] as i32
                | ((l[j + i + 32] as i32) << 2)
                | ((l[j + i + 64] as i32) << 4)
                | ((l[j + i + 96] as i32) << 6);
            qs[j / 4 + i] = v as u8;
        }
    }
}

/// Requantizes each sub-block against its stored (scale, min), as both quantizers do
/// after the scale search. A sub-block whose decoded scale is zero keeps the codes of the
/// search.
#[inline]
fn requantize(x: &[f32], blk: &BlockQ2K, dm: f32, mm: f32, l: &mut [u8; QK_K]) {
    for j in 0..QK_K / 16 {
        let d = dm * (blk.scales[j] & 0xF) as f32;
        if d == 0.0 {
            continue;
        }
        let m = mm * (blk.scales[j] >> 4) as f32;
        for ii in 0..16 {
            let li = nearest_int((x[16 * j + ii] + m) / d);
            l[16 * j + ii] = 0.max(3.min(li)) as u8;
        }
    }
}

/// `quantize_row_q2_K_ref` for one super-block.
fn quantize_block_ref(x: &[f32]) -> BlockQ2K {
    const Q4SCALE: f32 = 15.0;
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 16];
    let mut weights = [0f32; 16];
    let mut mins = [0f32; QK_K / 16];
    let mut scales = [0f32; QK_K / 16];
    let mut y = BlockQ2K::default();

    let mut max_scale = 0f32;
    let mut max_min = 0f32;
    for j in 0..QK_K / 16 {
        for (w, &xi) in weights.iter_mut().zip(&x[16 * j..16 * j + 16]) {
            *w = xi.abs();
        }
        scales[j] = make_qkx2_quants(
            16,
            3,
            &x[16 * j..],
            &weights,
            &mut l[16 * j..],
            &mut mins[j],
            &mut laux,
            -0.5,
            0.1,
            15,
            true,
        );
        let scale = scales[j];
        if scale > max_scale {
            max_scale = scale;
        }
        let min = mins[j];
        if min > max_min {
            max_min = min;
        }
    }

    if max_scale > 0.0 {
        let iscale = Q4SCALE / max_scale;
        for (ys, &s) in y.scales.iter_mut().zip(&scales) {
            // `y[i].scales[j] = l;`: the int is truncated to uint8_t.
            *ys = nearest_int(iscale * s) as u8;
        }
        write_f16(&mut y.d, 0, max_scale / Q4SCALE);
    } else {
        y.scales = [0; QK_K / 16];
        write_f16(&mut y.d, 0, 0.0);
    }
    if max_min > 0.0 {
        let iscale = Q4SCALE / max_min;
        for (ys, &m) in y.scales.iter_mut().zip(&mins) {
            // `y[i].scales[j] |= (l << 4);`: int arithmetic, truncated on store.
            *ys = (*ys as i32 | (nearest_int(iscale * m) << 4)) as u8;
        }
        write_f16(&mut y.dmin, 0, max_min / Q4SCALE);
    } else {
        write_f16(&mut y.dmin, 0, 0.0);
    }
    let (dm, mm) = (y.d(), y.dmin());
    requantize(x, &y, dm, mm, &mut l);
    pack_qs(&l, &mut y.qs);
    y
}

/// `quantize_row_q2_K_impl` for one super-block: `quant_weights` are the 256 importance
/// weights of this block.
fn quantize_block_impl(x: &[f32], quant_weights: &[f32]) -> BlockQ2K {
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 16];
    let mut mins = [0f32; QK_K / 16];
    let mut scales = [0f32; QK_K / 16];
    let mut sw = [0f32; QK_K / 16];
    let mut weight = [0f32; 16];
    let mut ls = [0u8; QK_K / 16];
    let mut lm = [0u8; QK_K / 16];
    let mut y = BlockQ2K::default();

    let mut sumx2 = 0f32;
    for &xi in &x[..QK_K] {
        sumx2 += xi * xi;
    }
    let sigma2 = sumx2 / QK_K as f32;
    for j in 0..QK_K / 16 {
        let qw = &quant_weights[16 * j..16 * j + 16];
        for i in 0..16 {
            let xi = x[16 * j + i];
            weight[i] = qw[i] * (sigma2 + xi * xi).sqrt();
        }
        for &w in &weight {
            sw[j] += w;
        }
        scales[j] = make_qkx3_quants(
            16,
            3,
            &x[16 * j..],
            Some(&weight[..]),
            &mut l[16 * j..],
            &mut mins[j],
            &mut laux,
            -0.9,
            0.05,
            36,
            false,
        );
    }

    let dm = make_qp_quants(QK_K / 16, 15, &scales, &mut ls, &sw);
    let mm = make_qp_quants(QK_K / 16, 15, &mins, &mut lm, &sw);
    write_f16(&mut y.d, 0, dm);
    write_f16(&mut y.dmin, 0, mm);
    let (dm, mm) = (y.d(), y.dmin());

    for j in 0..QK_K / 16 {
        y.scales[j] = (ls[j] as i32 | ((lm[j] as i32) << 4)) as u8;
    }
    requantize(x, &y, dm, mm, &mut l);
    pack_qs(&l, &mut y.qs);
    y
}

/// `quantize_row_q2_K_ref` (ggml's `from_float_ref`): encodes whole super-blocks of `src`.
pub fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockQ2K::SIZE)) {
        quantize_block_ref(x).write_to(out);
    }
}

/// `quantize_q2_K`: without an imatrix the `_ref` over everything, with one
/// `quantize_row_q2_K_impl` row by row.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    let Some(qw) = imatrix else {
        quantize_ref(src, dst);
        return;
    };
    let row_size = n_per_row / QK_K * BlockQ2K::SIZE;
    for (x, y) in src.chunks_exact(n_per_row).zip(dst.chunks_exact_mut(row_size)) {
        for (ib, (xb, out)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(BlockQ2K::SIZE)).enumerate() {
            quantize_block_impl(xb, &qw[QK_K * ib..QK_K * (ib + 1)]).write_to(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::f32_to_fp16;

    use crate::util::test_rng::gaussian;
    use crate::util::test_rng::xorshift64 as rng;

    #[test]
    fn registered() {
        let t = crate::by_name("q2_K").unwrap();
        assert_eq!((t.id, t.block_size, t.type_size), (10, 256, 84));
        assert!(t.is_quantized && t.quantize_ref_fn.is_some() && !t.requires_imatrix);
    }

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; 84];
        // Sub-block 0: scale 3, min 2; sub-block 1: scale 1, min 0; sub-block 15: scale 15, min 15.
        b[0] = 0x23;
        b[1] = 0x01;
        b[15] = 0xFF;
        // qs[0]: codes 0,1,2,3 for elements 0, 32, 64, 96; qs[16]: code 3 for element 16.
        b[16] = 0b11_10_01_00;
        b[16 + 16] = 0b11;
        // qs[63] bits 6-7 (element 255): code 2.
        b[16 + 63] = 0b10 << 6;
        b[80..82].copy_from_slice(&f32_to_fp16(0.5).to_le_bytes());
        b[82..84].copy_from_slice(&f32_to_fp16(0.25).to_le_bytes());
        let mut y = [0f32; 256];
        Q2K::dequantize(&b, &mut y);
        assert_eq!(y[0], -0.5); // 0.5*3*0 - 0.25*2
        assert_eq!(y[1], -0.5);
        assert_eq!(y[16], 0.5 * 1.0 * 3.0); // sub-block 1
        assert_eq!(y[17], 0.0);
        // Element 32: sub-block 2 (scales[2] = 0), code 1 → 0.
        assert_eq!(y[32], 0.0);
        assert_eq!(y[255], 0.5 * 15.0 * 2.0 - 0.25 * 15.0);
        // A direct formula for every element.
        for (e, &v) in y.iter().enumerate() {
            let (h, s, k, l) = (e / 128, e / 32 % 4, e / 16 % 2, e % 16);
            let sc = b[8 * h + 2 * s + k];
            let q = (b[16 + 32 * h + 16 * k + l] >> (2 * s)) & 3;
            assert_eq!(v, 0.5 * (sc & 15) as f32 * q as f32 - 0.25 * (sc >> 4) as f32, "element {e}");
        }
    }

    #[test]
    fn roundtrip_error_is_bounded() {
        let n = 4 * QK_K;
        let x = gaussian(n, 7);
        let q = Q2K::TRAITS.quantize_to_vec(&x, n, None).unwrap();
        let y = Q2K::TRAITS.dequantize_to_vec(&q).unwrap();
        let im: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32).collect();
        let qi = Q2K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        let yi = Q2K::TRAITS.dequantize_to_vec(&qi).unwrap();
        let var = x.iter().map(|v| v * v).sum::<f32>() / n as f32;
        for y in [y, yi] {
            let mse = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / n as f32;
            assert!(mse < 0.15 * var, "mse {mse} var {var}");
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() < 0.6 * var.sqrt() + 0.5, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn zero_rows_encode_to_zero() {
        let x = vec![0f32; 2 * QK_K];
        let q = Q2K::TRAITS.quantize_to_vec(&x, QK_K, None).unwrap();
        assert!(q.iter().all(|&b| b == 0));
        let im = vec![1f32; QK_K];
        let q = Q2K::TRAITS.quantize_to_vec(&x, QK_K, Some(&im)).unwrap();
        assert!(q.iter().all(|&b| b == 0));
        assert!(Q2K::TRAITS.dequantize_to_vec(&q).unwrap().iter().all(|&v| v == 0.0));
    }

    #[test]
    fn imatrix_path_is_deterministic_and_used() {
        let n = 2 * QK_K;
        let x = gaussian(3 * n, 11);
        let mut r = rng(5);
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.01).collect();
        let a = Q2K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        let b = Q2K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        assert_eq!(a, b);
        let plain = Q2K::TRAITS.quantize_to_vec(&x, n, None).unwrap();
        assert_ne!(a, plain);
        let mut r = vec![0u8; plain.len()];
        quantize_ref(&x, &mut r);
        assert_eq!(r, plain);
    }
}
