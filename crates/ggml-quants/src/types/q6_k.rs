//! `GGML_TYPE_Q6_K` (id 14): 6-bit K-quant, `x = d·sc·(q - 32)` over 16 sub-blocks of 16,
//! with signed 8-bit sub-block scales.
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_q6_K`
//! (`to_float`), `quantize_row_q6_K_ref` (`from_float_ref`, scale search by
//! `make_qx_quants` with `x²` weights), `quantize_row_q6_K_impl` (the same search with the
//! imatrix as weights) and `quantize_q6_K`, which `ggml_quantize_chunk`
//! (`ggml/src/ggml.c`) calls: the `_ref` over all rows without an imatrix, `_impl` row by
//! row with one. Layout from `block_q6_K` in `ggml/src/ggml-common.h`.

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
use crate::util::{make_qx_quants, nearest_int, read_f16, write_f16, GROUP_MAX_EPS};
use crate::QK_K;

/// `block_q6_K`, 210 bytes per 256 weights (6.5625 bits per weight):
///
/// | offset | bytes | field    | meaning                                                        |
/// |--------|-------|----------|----------------------------------------------------------------|
/// | 0      | 128   | `ql`     | low 4 bits; byte `64h + l` holds elements `128h + l` (low nibble) and `128h + l + 64` (high), byte `64h + 32 + l` elements `128h + l + 32` and `128h + l + 96` |
/// | 128    | 64    | `qh`     | high 2 bits; byte `32h + l` holds elements `128h + l + 32t` at bits `2t` |
/// | 192    | 16    | `scales` | signed 8-bit scale per sub-block of 16                          |
/// | 208    | 2     | `d`      | fp16 super-block scale                                          |
///
/// Element `e` decodes to `d·scales[e / 16]·(q - 32)` with the 6-bit code `q`.
/// The fp16 field is kept as raw little-endian bytes: blocks in a file are unaligned.
#[repr(C)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockQ6K {
    /// Low 4 bits of the quants.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of the quants.
    pub qh: [u8; QK_K / 4],
    /// Sub-block scales.
    pub scales: [i8; QK_K / 16],
    /// fp16 `d`, little-endian.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 2 + QK_K / 16 + 3 * QK_K / 4);

impl Default for BlockQ6K {
    fn default() -> Self {
        Self { ql: [0; QK_K / 2], qh: [0; QK_K / 4], scales: [0; QK_K / 16], d: [0; 2] }
    }
}

impl BlockQ6K {
    /// Bytes per block.
    pub const SIZE: usize = 210;

    /// Parses one block from `b[..210]`.
    #[inline]
    pub fn from_bytes(b: &[u8]) -> Self {
        let b: &[u8; Self::SIZE] = b[..Self::SIZE].try_into().expect("210 bytes");
        let mut blk = Self::default();
        blk.ql.copy_from_slice(&b[0..128]);
        blk.qh.copy_from_slice(&b[128..192]);
        for (s, &v) in blk.scales.iter_mut().zip(&b[192..208]) {
            *s = v as i8;
        }
        blk.d.copy_from_slice(&b[208..210]);
        blk
    }

    /// Writes the block to `out[..210]`.
    #[inline]
    pub fn write_to(&self, out: &mut [u8]) {
        let out: &mut [u8; Self::SIZE] = (&mut out[..Self::SIZE]).try_into().expect("210 bytes");
        out[0..128].copy_from_slice(&self.ql);
        out[128..192].copy_from_slice(&self.qh);
        for (o, &s) in out[192..208].iter_mut().zip(&self.scales) {
            *o = s as u8;
        }
        out[208..210].copy_from_slice(&self.d);
    }

    /// `d` widened to f32.
    #[inline]
    pub fn d(&self) -> f32 {
        read_f16(&self.d, 0)
    }

    /// Decodes the block into 256 floats (`dequantize_row_q6_K`).
    #[inline]
    pub fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = self.d();
        for (h, y) in y.chunks_exact_mut(128).enumerate() {
            let ql = &self.ql[64 * h..64 * h + 64];
            let qh = &self.qh[32 * h..32 * h + 32];
            let sc = &self.scales[8 * h..8 * h + 8];
            for (t, y) in y.chunks_exact_mut(32).enumerate() {
                // t = 0..4: low nibble of ql[l], low of ql[l + 32], high of ql[l], high of ql[l + 32].
                let lo = &ql[32 * (t & 1)..32 * (t & 1) + 32];
                let nib = 4 * (t >> 1);
                for (half, y) in y.chunks_exact_mut(16).enumerate() {
                    // `d * sc[is + 2t] * q`, evaluated left to right.
                    let dl = d * sc[half + 2 * t] as f32;
                    let lo = &lo[16 * half..16 * half + 16];
                    let qh = &qh[16 * half..16 * half + 16];
                    for ((y, &ql), &qh) in y.iter_mut().zip(lo).zip(qh) {
                        let q = (((ql >> nib) & 0xF) | (((qh >> (2 * t)) & 3) << 4)) as i32 - 32;
                        *y = dl * q as f32;
                    }
                }
            }
        }
    }
}

/// Marker for `q6_K`.
pub struct Q6K;

impl GgmlType for Q6K {
    const NAME: &'static str = "q6_K";
    const ID: u32 = 14;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = BlockQ6K::SIZE;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(BlockQ6K::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
            let y: &mut [f32; QK_K] = y.try_into().expect("QK_K floats");
            BlockQ6K::from_bytes(b).dequantize(y);
        }
    }
}

inventory::submit! { <Q6K as GgmlType>::TRAITS }

/// One super-block of `quantize_row_q6_K_impl`; with `quant_weights == None` it is
/// exactly `quantize_row_q6_K_ref` (the two differ only in the weights handed to
/// `make_qx_quants`). `quant_weights` are the 256 importance weights of this block.
fn quantize_block(x: &[f32], quant_weights: Option<&[f32]>) -> BlockQ6K {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; QK_K / 16];
    let mut y = BlockQ6K::default();

    let mut max_scale = 0f32;
    let mut max_abs_scale = 0f32;
    for ib in 0..QK_K / 16 {
        let qw = quant_weights.map(|q| &q[16 * ib..16 * ib + 16]);
        let scale = make_qx_quants(16, 32, &x[16 * ib..], &mut l[16 * ib..], 1, qw);
        scales[ib] = scale;
        let abs_scale = scale.abs();
        if abs_scale > max_abs_scale {
            max_abs_scale = abs_scale;
            max_scale = scale;
        }
    }

    if max_abs_scale < GROUP_MAX_EPS {
        // memset(&y[i], 0, ...); d = fp16(0) is also all zero bits.
        write_f16(&mut y.d, 0, 0.0);
        return y;
    }

    let iscale = -128.0 / max_scale;
    write_f16(&mut y.d, 0, 1.0 / iscale);
    for (s, &sc) in y.scales.iter_mut().zip(&scales) {
        // `MIN(127, nearest_int(...))` stored into int8_t.
        *s = 127.min(nearest_int(iscale * sc)) as i8;
    }

    let d_all = y.d();
    for j in 0..QK_K / 16 {
        let d = d_all * y.scales[j] as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let li = nearest_int(x[16 * j + ii] / d);
            l[16 * j + ii] = ((-32).max(31.min(li)) + 32) as i8;
        }
    }

    for (n, j) in (0..QK_K).step_by(128).enumerate() {
        let ql = &mut y.ql[64 * n..64 * n + 64];
        let qh = &mut y.qh[32 * n..32 * n + 32];
        for i in 0..32 {
            let (l1, l2, l3, l4) = (l[j + i] as i32, l[j + i + 32] as i32, l[j + i + 64] as i32, l[j + i + 96] as i32);
            let (q1, q2, q3, q4) = ((l1 & 0xF) as u8, (l2 & 0xF) as u8, (l3 & 0xF) as u8, (l4 & 0xF) as u8);
            ql[i] = q1 | (q3 << 4);
            ql[i + 32] = q2 | (q4 << 4);
            qh[i] = ((l1 >> 4) | ((l2 >> 4) << 2) | ((l3 >> 4) << 4) | ((l4 >> 4) << 6)) as u8;
        }
    }
    y
}

/// `quantize_row_q6_K_ref` (ggml's `from_float_ref`): encodes whole super-blocks of `src`.
pub fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockQ6K::SIZE)) {
        quantize_block(x, None).write_to(out);
    }
}

/// `quantize_q6_K`: without an imatrix the `_ref` over everything, with one
/// `quantize_row_q6_K_impl` row by row.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    let Some(qw) = imatrix else {
        quantize_ref(src, dst);
        return;
    };
    let row_size = n_per_row / QK_K * BlockQ6K::SIZE;
    for (x, y) in src.chunks_exact(n_per_row).zip(dst.chunks_exact_mut(row_size)) {
        for (ib, (xb, out)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(BlockQ6K::SIZE)).enumerate() {
            quantize_block(xb, Some(&qw[QK_K * ib..QK_K * (ib + 1)])).write_to(out);
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
        let t = crate::by_name("q6_K").unwrap();
        assert_eq!((t.id, t.block_size, t.type_size), (14, 256, 210));
        assert!(t.is_quantized && t.quantize_ref_fn.is_some() && !t.requires_imatrix);
    }

    /// The 6-bit code of element `e`, straight from the layout table.
    fn code(b: &[u8], e: usize) -> i32 {
        let (h, t, l) = (e / 128, e / 32 % 4, e % 32);
        let ql = b[64 * h + 32 * (t & 1) + l];
        let lo = if t < 2 { ql & 0xF } else { ql >> 4 };
        let hi = (b[128 + 32 * h + l] >> (2 * t)) & 3;
        (lo | (hi << 4)) as i32
    }

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; 210];
        b[192] = 2; // sub-block 0
        b[193] = (-3i8) as u8; // sub-block 1
        b[207] = (-128i8) as u8; // sub-block 15
        b[208..210].copy_from_slice(&f32_to_fp16(0.25).to_le_bytes());
        // Element 0: code 63 → +31. ql[0] low nibble 15, qh[0] bits 0-1 = 3.
        b[0] = 0x0F;
        b[128] = 0x03;
        // Element 16: code 0 → -32 (all zero bits).
        // Element 17: code 33 → +1: ql[17] low = 1, qh[17] bits 0-1 = 2.
        b[17] = 1;
        b[128 + 17] = 2;
        // Element 255: h = 1, t = 3, l = 31: ql[64 + 32 + 31] high nibble, qh[32 + 31] bits 6-7.
        b[127] = 0x50;
        b[191] = 0b01 << 6; // code 0x15 = 21 → -11
        let mut y = [0f32; 256];
        Q6K::dequantize(&b, &mut y);
        assert_eq!(y[0], 0.25 * 2.0 * 31.0);
        assert_eq!(y[1], 0.25 * 2.0 * -32.0);
        assert_eq!(y[16], 0.25 * -3.0 * -32.0);
        assert_eq!(y[17], 0.25 * -3.0 * 1.0);
        assert_eq!(y[255], 0.25 * -128.0 * -11.0);
        for (e, &v) in y.iter().enumerate() {
            let sc = b[192 + e / 16] as i8;
            assert_eq!(v, 0.25 * sc as f32 * (code(&b, e) - 32) as f32, "element {e}");
        }
    }

    #[test]
    fn roundtrip_error_is_bounded() {
        let n = 4 * QK_K;
        let x = gaussian(n, 5);
        let q = Q6K::TRAITS.quantize_to_vec(&x, n, None).unwrap();
        let y = Q6K::TRAITS.dequantize_to_vec(&q).unwrap();
        let im: Vec<f32> = (0..n).map(|i| 0.5 + (i % 3) as f32).collect();
        let qi = Q6K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        let yi = Q6K::TRAITS.dequantize_to_vec(&qi).unwrap();
        let var = x.iter().map(|v| v * v).sum::<f32>() / n as f32;
        for y in [y, yi] {
            let mse = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / n as f32;
            assert!(mse < 0.002 * var, "mse {mse} var {var}");
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() < 0.1 * var.sqrt() + 0.05, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn zero_rows_encode_to_zero() {
        let x = vec![0f32; 2 * QK_K];
        for im in [None, Some(vec![1f32; QK_K])] {
            let q = Q6K::TRAITS.quantize_to_vec(&x, QK_K, im.as_deref()).unwrap();
            assert!(q.iter().all(|&b| b == 0));
            assert!(Q6K::TRAITS.dequantize_to_vec(&q).unwrap().iter().all(|&v| v == 0.0));
        }
    }

    #[test]
    fn imatrix_path_is_deterministic_and_used() {
        let n = 2 * QK_K;
        let x = gaussian(3 * n, 17);
        let mut r = rng(3);
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.01).collect();
        let a = Q6K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        let b = Q6K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        assert_eq!(a, b);
        let plain = Q6K::TRAITS.quantize_to_vec(&x, n, None).unwrap();
        assert_ne!(a, plain);
        let mut r = vec![0u8; plain.len()];
        quantize_ref(&x, &mut r);
        assert_eq!(r, plain);
    }
}
