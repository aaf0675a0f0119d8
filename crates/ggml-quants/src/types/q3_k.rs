//! `GGML_TYPE_Q3_K` (id 11): 3-bit K-quant, `x = d·(sc - 32)·(q - 4)` over 16 sub-blocks
//! of 16, with 6-bit sub-block scales.
//!
//! Ports (llama.cpp `0c1e57098`, `ggml/src/ggml-quants.c`): `dequantize_row_q3_K`
//! (`to_float`), `quantize_row_q3_K_ref` (`from_float_ref`, scale search by
//! `make_q3_quants`), `quantize_row_q3_K_impl` (imatrix search by `make_qx_quants`) and
//! `quantize_q3_K`, which `ggml_quantize_chunk` (`ggml/src/ggml.c`) calls: the `_ref` over
//! all rows without an imatrix, `_impl` row by row with one (so `_impl`'s branch for a null
//! imatrix is unreachable from there and is not ported). Layout from `block_q3_K` in
//! `ggml/src/ggml-common.h`.

use crate::registry::{GgmlType, QuantizeRefFn, QuantizeRowsFn};
#[cfg(test)]
use crate::util::make_q3_quants;
use crate::util::{make_qx_quants, nearest_int, read_f16, write_f16, GROUP_MAX_EPS};
use crate::QK_K;

/// `block_q3_K`, 110 bytes per 256 weights (3.4375 bits per weight):
///
/// | offset | bytes | field    | meaning                                                          |
/// |--------|-------|----------|------------------------------------------------------------------|
/// | 0      | 32    | `hmask`  | high (third) bit; bit `b` of byte `i` belongs to element `32b + i` |
/// | 32     | 64    | `qs`     | low 2 bits; byte `32h + l` holds elements `128h + l + 32s` at bits `2s` |
/// | 96     | 12    | `scales` | sixteen 6-bit scales offset by 32 (see [`BlockQ3K::scale`])      |
/// | 108    | 2     | `d`      | fp16 super-block scale                                           |
///
/// Scale `j`: low 4 bits from `scales[j]` (j < 8) or `scales[j - 8] >> 4`, high 2 bits
/// from `scales[8 + j % 4] >> (2 * (j / 4))`. Element `128h + 32s + 16k + l` decodes to
/// `d·(scale[8h + 2s + k] - 32)·(q - (high bit set ? 0 : 4))`.
/// The fp16 field is kept as raw little-endian bytes: blocks in a file are unaligned.
#[repr(C)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockQ3K {
    /// High bits of the quants.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of the quants.
    pub qs: [u8; QK_K / 4],
    /// Packed 6-bit scales.
    pub scales: [u8; 12],
    /// fp16 `d`, little-endian.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 2 + QK_K / 4 + QK_K / 8 + 12);

impl Default for BlockQ3K {
    fn default() -> Self {
        Self { hmask: [0; QK_K / 8], qs: [0; QK_K / 4], scales: [0; 12], d: [0; 2] }
    }
}

impl BlockQ3K {
    /// Bytes per block.
    pub const SIZE: usize = 110;

    /// Parses one block from `b[..110]`.
    #[inline]
    pub fn from_bytes(b: &[u8]) -> Self {
        let b: &[u8; Self::SIZE] = b[..Self::SIZE].try_into().expect("110 bytes");
        let mut blk = Self::default();
        blk.hmask.copy_from_slice(&b[0..32]);
        blk.qs.copy_from_slice(&b[32..96]);
        blk.scales.copy_from_slice(&b[96..108]);
        blk.d.copy_from_slice(&b[108..110]);
        blk
    }

    /// Writes the block to `out[..110]`.
    #[inline]
    pub fn write_to(&self, out: &mut [u8]) {
        let out: &mut [u8; Self::SIZE] = (&mut out[..Self::SIZE]).try_into().expect("110 bytes");
        out[0..32].copy_from_slice(&self.hmask);
        out[32..96].copy_from_slice(&self.qs);
        out[96..108].copy_from_slice(&self.scales);
        out[108..110].copy_from_slice(&self.d);
    }

    /// `d` widened to f32.
    #[inline]
    pub fn d(&self) -> f32 {
        read_f16(&self.d, 0)
    }

    /// Sub-block scale `j` (0..16) with its offset removed: -32..=31. This is both the
    /// quantizers' `sc` and the `scales[is] - 32` of `dequantize_row_q3_K`'s `kmask`
    /// unpacking.
    #[inline]
    pub fn scale(&self, j: usize) -> i32 {
        let lo = if j < 8 { self.scales[j] & 0xF } else { self.scales[j - 8] >> 4 };
        let hi = (self.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        (lo | (hi << 4)) as i32 - 32
    }

    /// ORs the 6-bit code `l` (0..64) of scale `j` into `scales`, as both quantizers do
    /// (`scales` must start zeroed).
    #[inline]
    fn put_scale(&mut self, j: usize, l: i32) {
        if j < 8 {
            self.scales[j] = (l & 0xF) as u8;
        } else {
            self.scales[j - 8] = (self.scales[j - 8] as i32 | ((l & 0xF) << 4)) as u8;
        }
        let l = l >> 4;
        self.scales[j % 4 + 8] = (self.scales[j % 4 + 8] as i32 | (l << (2 * (j / 4)))) as u8;
    }

    /// Decodes the block into 256 floats (`dequantize_row_q3_K`).
    #[inline]
    pub fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d_all = self.d();
        let mut sc = [0f32; 16];
        for (j, s) in sc.iter_mut().enumerate() {
            *s = d_all * self.scale(j) as f32;
        }
        for (h, (q, y)) in self.qs.chunks_exact(32).zip(y.chunks_exact_mut(128)).enumerate() {
            for (s, y) in y.chunks_exact_mut(32).enumerate() {
                let shift = 2 * s;
                let m = 1u8 << (4 * h + s);
                for (k, y) in y.chunks_exact_mut(16).enumerate() {
                    let dl = sc[8 * h + 2 * s + k];
                    let q = &q[16 * k..16 * k + 16];
                    let hm = &self.hmask[16 * k..16 * k + 16];
                    for ((y, &q), &hm) in y.iter_mut().zip(q).zip(hm) {
                        let v = ((q >> shift) & 3) as i32 - if hm & m != 0 { 0 } else { 4 };
                        *y = dl * v as f32;
                    }
                }
            }
        }
    }
}

/// Marker for `q3_K`.
pub struct Q3K;

impl GgmlType for Q3K {
    const NAME: &'static str = "q3_K";
    const ID: u32 = 11;
    const BLOCK_SIZE: usize = QK_K;
    const TYPE_SIZE: usize = BlockQ3K::SIZE;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize_ref);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(BlockQ3K::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
            let y: &mut [f32; QK_K] = y.try_into().expect("QK_K floats");
            BlockQ3K::from_bytes(b).dequantize(y);
        }
    }
}

inventory::submit! { <Q3K as GgmlType>::TRAITS }

/// `nearest_int(t)` as an `f32`, clamped to `[-4, 3]`: the float form of the same
/// `1.5·2^23` trick (`(2^23 + m) - 1.5·2^23 = m - 2^22` exactly, for every input), so
/// that lanes of it vectorize. C's `MAX(-4, MIN(3, l))` on it is the integer clamp.
#[inline(always)]
fn nearest_q3(t: f32) -> f32 {
    let val = t + 12582912.0f32;
    let r = f32::from_bits((val.to_bits() & 0x007f_ffff) | 0x4b00_0000) - 12582912.0f32;
    let r = if r < 3.0 { r } else { 3.0 };
    if r > -4.0 {
        r
    } else {
        -4.0
    }
}

/// The tail both quantizers share once `scales` and `d` are stored: requantize each
/// sub-block against its decoded scale (a zero scale keeps the search's codes), then
/// split the codes into `hmask` and `qs`. Element-wise: each code is C's
/// `MAX(-4, MIN(3, nearest_int(x/d))) + 4`.
fn finish_block(x: &[f32], y: &mut BlockQ3K, l: &mut [i8; QK_K]) {
    let d_all = y.d();
    for j in 0..QK_K / 16 {
        let sc = y.scale(j);
        let d = d_all * sc as f32;
        if d == 0.0 {
            continue;
        }
        let xs: &[f32; 16] = x[16 * j..16 * j + 16].try_into().expect("16 values");
        let mut q = [0f32; 16];
        for ii in 0..16 {
            q[ii] = nearest_q3(xs[ii] / d) + 4.0;
        }
        for (o, v) in l[16 * j..16 * j + 16].iter_mut().zip(q) {
            *o = v as i8;
        }
    }

    // The high bit of codes 32k..32k+31 goes to bit k of hmask[0..32].
    let mut hmask = [0u8; QK_K / 8];
    for k in 0..QK_K / 32 {
        let c = &mut l[32 * k..32 * k + 32];
        for m in 0..32 {
            let hi = (c[m] > 3) as u8;
            hmask[m] |= hi << k;
            c[m] -= 4 * hi as i8;
        }
    }
    y.hmask = hmask;
    for j in (0..QK_K).step_by(128) {
        for i in 0..32 {
            let v = l[j + i] as u8
                | ((l[j + i + 32] as u8) << 2)
                | ((l[j + i + 64] as u8) << 4)
                | ((l[j + i + 96] as u8) << 6);
            y.qs[j / 4 + i] = v;
        }
    }
}

/// `make_q3_quants(16, 4, x, L, true)` (the Q3_K reference scale search, `util`'s
/// general port) for one sub-block, bit for bit, with its refinement passes run four
/// elements at a time.
///
/// In a pass, element `i`'s trial (`slx`, `sl2`, `new_l`, the accept test) depends on the
/// elements before it only through `sumlx`/`suml2`, which change only when a trial is
/// accepted. So the trials of four elements are computed side by side with the current
/// sums, the first accepted one (in C's order) is taken, and the pass goes on right
/// after it with the new sums; a trial computed with sums that have since changed is
/// never used. Each lane does C's operations in C's order (`w*x[i]*l` is `(w·x)·l`,
/// never fused), so codes and scale are the C's.
fn make_q3_quants16(x: &[f32; 16], l: &mut [i8; 16]) -> f32 {
    // The first element of the largest |x| (C's `if (ax > amax)`; NaN never wins).
    let mut m = [0f32; 4];
    for c in x.chunks_exact(4) {
        for k in 0..4 {
            let a = c[k].abs();
            m[k] = if m[k] < a { a } else { m[k] };
        }
    }
    let amax = m.iter().fold(0f32, |a, &v| if a < v { v } else { a });
    if amax < GROUP_MAX_EPS {
        *l = [0; 16];
        return 0.0;
    }
    let max = x.iter().copied().find(|v| v.abs() == amax).expect("amax is one of the |x|");
    let iscale = -4.0f32 / max;
    let mut w = [0f32; 16];
    let mut wx = [0f32; 16];
    let mut lf = [0f32; 16];
    for i in 0..16 {
        w[i] = x[i] * x[i];
        wx[i] = w[i] * x[i];
        lf[i] = nearest_q3(iscale * x[i]);
    }
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..16 {
        sumlx += wx[i] * lf[i];
        suml2 += w[i] * lf[i] * lf[i];
    }
    for _itry in 0..5 {
        let mut n_changed = 0;
        let mut i0 = 0;
        while i0 < 16 {
            let c = i0 / 4 * 4;
            let lane = |a: &[f32; 16]| -> [f32; 4] { a[c..c + 4].try_into().expect("4 lanes") };
            let (xc, wc, wxc, lc) = (lane(x), lane(&w), lane(&wx), lane(&lf));
            let mut nl = [0f32; 4];
            let mut slx2 = [0f32; 4];
            let mut sl22 = [0f32; 4];
            let mut ok = [false; 4];
            for k in 0..4 {
                // C: slx = sumlx - w*x[i]*L[i]; if (slx > 0) { sl2 = suml2 - w*L[i]*L[i];
                // new_l = nearest_int(x[i]*sl2/slx), clamped; if (new_l != L[i]) {
                // slx += w*x[i]*new_l; sl2 += w*new_l*new_l;
                // accept if sl2 > 0 && slx*slx*suml2 > sumlx*sumlx*sl2 } }
                let slx = sumlx - wxc[k] * lc[k];
                let sl2 = suml2 - wc[k] * lc[k] * lc[k];
                nl[k] = nearest_q3(xc[k] * sl2 / slx);
                slx2[k] = slx + wxc[k] * nl[k];
                sl22[k] = sl2 + wc[k] * nl[k] * nl[k];
                ok[k] =
                    slx > 0.0 && nl[k] != lc[k] && sl22[k] > 0.0 && slx2[k] * slx2[k] * suml2 > sumlx * sumlx * sl22[k];
            }
            match (i0 - c..4).find(|&k| ok[k]) {
                Some(k) => {
                    lf[c + k] = nl[k];
                    sumlx = slx2[k];
                    suml2 = sl22[k];
                    n_changed += 1;
                    i0 = c + k + 1;
                }
                None => i0 = c + 4,
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for i in 0..16 {
        l[i] = (lf[i] + 4.0) as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// `quantize_row_q3_K_ref` for one super-block.
fn quantize_block_ref(x: &[f32]) -> BlockQ3K {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; QK_K / 16];
    let mut y = BlockQ3K::default();

    let mut max_scale = 0f32;
    let mut amax = 0f32;
    for j in 0..QK_K / 16 {
        let xs: &[f32; 16] = x[16 * j..16 * j + 16].try_into().expect("16 values");
        let ls: &mut [i8; 16] = (&mut l[16 * j..16 * j + 16]).try_into().expect("16 codes");
        scales[j] = make_q3_quants16(xs, ls);
        let scale = scales[j].abs();
        if scale > amax {
            amax = scale;
            max_scale = scales[j];
        }
    }

    // C's `if (max_scale)`: true for NaN too.
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for (j, &s) in scales.iter().enumerate() {
            // `int8_t l = nearest_int(...)`: truncated to int8 before the clamp.
            let li = nearest_int(iscale * s) as i8 as i32;
            let li = (-32).max(31.min(li)) + 32;
            y.put_scale(j, li);
        }
        write_f16(&mut y.d, 0, 1.0 / iscale);
    } else {
        write_f16(&mut y.d, 0, 0.0);
    }
    finish_block(x, &mut y, &mut l);
    y
}

/// `quantize_row_q3_K_impl` for one super-block: `quant_weights` are the 256 importance
/// weights of this block.
fn quantize_block_impl(x: &[f32], quant_weights: &[f32]) -> BlockQ3K {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; QK_K / 16];
    let mut weight = [0f32; 16];
    let mut sw = [0f32; QK_K / 16];
    let mut ls = [0i8; QK_K / 16];
    let mut y = BlockQ3K::default();

    let mut sumx2 = 0f32;
    for &xi in &x[..QK_K] {
        sumx2 += xi * xi;
    }
    let sigma2 = 2.0 * sumx2 / QK_K as f32;

    for j in 0..QK_K / 16 {
        let qw = &quant_weights[16 * j..16 * j + 16];
        for i in 0..16 {
            let xi = x[16 * j + i];
            weight[i] = qw[i] * (sigma2 + xi * xi).sqrt();
        }
        let mut sumw = 0f32;
        for &w in &weight {
            sumw += w;
        }
        sw[j] = sumw;
        scales[j] = make_qx_quants(16, 4, &x[16 * j..], &mut l[16 * j..], 1, Some(&weight[..]));
    }

    let d_block = make_qx_quants(QK_K / 16, 32, &scales, &mut ls, 1, Some(&sw[..]));
    for (j, &lj) in ls.iter().enumerate() {
        y.put_scale(j, lj as i32);
    }
    write_f16(&mut y.d, 0, d_block);
    finish_block(x, &mut y, &mut l);
    y
}

/// `quantize_row_q3_K_ref` (ggml's `from_float_ref`): encodes whole super-blocks of `src`.
pub fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockQ3K::SIZE)) {
        quantize_block_ref(x).write_to(out);
    }
}

/// `quantize_q3_K`: without an imatrix the `_ref` over everything, with one
/// `quantize_row_q3_K_impl` row by row.
pub fn quantize_rows(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>) {
    let Some(qw) = imatrix else {
        quantize_ref(src, dst);
        return;
    };
    let row_size = n_per_row / QK_K * BlockQ3K::SIZE;
    for (x, y) in src.chunks_exact(n_per_row).zip(dst.chunks_exact_mut(row_size)) {
        for (ib, (xb, out)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(BlockQ3K::SIZE)).enumerate() {
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

    /// The C loops as written (`make_q3_quants`, then the sequential requantize and
    /// hmask loops), the reference for the restructured encoder.
    fn quantize_block_seq(x: &[f32]) -> BlockQ3K {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; QK_K / 16];
        let mut y = BlockQ3K::default();
        let mut max_scale = 0f32;
        let mut amax = 0f32;
        for j in 0..QK_K / 16 {
            scales[j] = make_q3_quants(16, 4, &x[16 * j..], &mut l[16 * j..], true);
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales.iter().enumerate() {
                let li = nearest_int(iscale * s) as i8 as i32;
                y.put_scale(j, (-32).max(31.min(li)) + 32);
            }
            write_f16(&mut y.d, 0, 1.0 / iscale);
        } else {
            write_f16(&mut y.d, 0, 0.0);
        }
        let d_all = y.d();
        for j in 0..QK_K / 16 {
            let d = d_all * y.scale(j) as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let li = nearest_int(x[16 * j + ii] / d);
                l[16 * j + ii] = ((-4).max(3.min(li)) + 4) as i8;
            }
        }
        let (mut m, mut hm) = (0usize, 1u8);
        for lj in l.iter_mut() {
            if *lj > 3 {
                y.hmask[m] |= hm;
                *lj -= 4;
            }
            m += 1;
            if m == QK_K / 8 {
                m = 0;
                hm = hm.wrapping_shl(1);
            }
        }
        for j in (0..QK_K).step_by(128) {
            for i in 0..32 {
                let v = l[j + i] as i32
                    | ((l[j + i + 32] as i32) << 2)
                    | ((l[j + i + 64] as i32) << 4)
                    | ((l[j + i + 96] as i32) << 6);
                y.qs[j / 4 + i] = v as u8;
            }
        }
        y
    }

    #[test]
    fn the_restructured_search_is_the_sequential_one_bit_for_bit() {
        let mut r = rng(7);
        let mut changed = 0;
        for case in 0..3000u64 {
            let mut x = gaussian(QK_K, 1000 + case);
            match case % 6 {
                // heavy tails
                1 => x.iter_mut().for_each(|v| *v = v.powi(3)),
                // few distinct values: ties everywhere
                2 => x.iter_mut().for_each(|v| *v = (*v * 2.0).round() * 0.25),
                // zero, tiny and huge sub-blocks mixed
                3 => {
                    for (j, c) in x.chunks_mut(16).enumerate() {
                        let k = [0.0, 1e-20, 1e-7, 1.0, 3e4][j % 5];
                        c.iter_mut().for_each(|v| *v *= k);
                    }
                }
                // one outlier per sub-block
                4 => x.iter_mut().step_by(13).for_each(|v| *v *= 40.0 * r()),
                5 => x.iter_mut().for_each(|v| *v = v.abs() + 0.1),
                _ => {}
            }
            for j in 0..QK_K / 16 {
                let xs: &[f32; 16] = x[16 * j..16 * j + 16].try_into().unwrap();
                let (mut a, mut b) = ([0i8; 16], [0i8; 16]);
                let sa = make_q3_quants16(xs, &mut a);
                let sb = make_q3_quants(16, 4, xs, &mut b, true);
                assert_eq!((sa.to_bits(), a), (sb.to_bits(), b), "case {case} sub-block {j}: {xs:?}");
                let mut c = [0i8; 16];
                make_q3_quants(16, 4, xs, &mut c, false);
                changed += (c != b) as usize;
            }
            assert_eq!(quantize_block_ref(&x), quantize_block_seq(&x), "case {case}");
        }
        // the refinement did change codes (the passes were exercised)
        assert!(changed > 1_000, "{changed}");
    }

    #[test]
    fn registered() {
        let t = crate::by_name("q3_K").unwrap();
        assert_eq!((t.id, t.block_size, t.type_size), (11, 256, 110));
        assert!(t.is_quantized && t.quantize_ref_fn.is_some() && !t.requires_imatrix);
    }

    #[test]
    fn scale_packing_roundtrips() {
        let mut y = BlockQ3K::default();
        for j in 0..16 {
            y.put_scale(j, (j as i32 * 7 + 3) % 64);
        }
        for j in 0..16 {
            assert_eq!(y.scale(j), (j as i32 * 7 + 3) % 64 - 32, "scale {j}");
        }
    }

    #[test]
    fn decodes_handmade_block() {
        let mut b = [0u8; 110];
        // Scale 0 = 33 → +1, scale 1 = 30 → -2, scale 15 = 63 → 31.
        // scale 0: low nibble in scales[0], high bits in scales[8] bits 0-1.
        b[96] = 33 & 0xF;
        b[96 + 8] = (33 >> 4) & 3;
        b[96 + 1] = 30 & 0xF;
        b[96 + 9] = (30 >> 4) & 3;
        b[96 + 7] = (63 & 0xF) << 4; // scale 15: scales[7] high nibble
        b[96 + 11] = ((63 >> 4) & 3) << 6; // scales[8 + 3] bits 6-7
        b[108..110].copy_from_slice(&f32_to_fp16(0.5).to_le_bytes());
        // Element 0: q = 3, high bit set → 3. Element 1: q = 0, no high bit → -4.
        b[32] = 3;
        b[0] = 1;
        // Element 16 (sub-block 1): q = 2, high bit set → 2.
        b[32 + 16] = 2;
        b[16] = 1;
        // Element 255: h = 1, s = 3, k = 1, l = 15 → qs[32 + 31] bits 6-7, hmask[31] bit 7.
        b[32 + 63] = 1 << 6;
        b[31] = 0x80;
        let mut y = [0f32; 256];
        Q3K::dequantize(&b, &mut y);
        assert_eq!(y[0], 0.5 * 1.0 * 3.0);
        assert_eq!(y[1], 0.5 * 1.0 * -4.0);
        assert_eq!(y[16], 0.5 * -2.0 * 2.0);
        assert_eq!(y[17], 0.5 * -2.0 * -4.0);
        assert_eq!(y[255], 0.5 * 31.0 * 1.0);
        // Sub-block 2 has packed scale 0 → -32.
        assert_eq!(y[32], 0.5 * -32.0 * -4.0);
        // A direct formula for every element.
        let blk = BlockQ3K::from_bytes(&b);
        for (e, &v) in y.iter().enumerate() {
            let (h, s, k, l) = (e / 128, e / 32 % 4, e / 16 % 2, e % 16);
            let q = ((b[32 + 32 * h + 16 * k + l] >> (2 * s)) & 3) as i32;
            let high = b[16 * k + l] >> (4 * h + s) & 1;
            let q = q - if high == 1 { 0 } else { 4 };
            assert_eq!(v, 0.5 * blk.scale(8 * h + 2 * s + k) as f32 * q as f32, "element {e}");
        }
    }

    #[test]
    fn roundtrip_error_is_bounded() {
        let n = 4 * QK_K;
        let x = gaussian(n, 3);
        let q = Q3K::TRAITS.quantize_to_vec(&x, n, None).unwrap();
        let y = Q3K::TRAITS.dequantize_to_vec(&q).unwrap();
        let im: Vec<f32> = (0..n).map(|i| 0.5 + (i % 5) as f32).collect();
        let qi = Q3K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        let yi = Q3K::TRAITS.dequantize_to_vec(&qi).unwrap();
        let var = x.iter().map(|v| v * v).sum::<f32>() / n as f32;
        for y in [y, yi] {
            let mse = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / n as f32;
            assert!(mse < 0.05 * var, "mse {mse} var {var}");
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() < 0.4 * var.sqrt() + 0.3, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn zero_rows_encode_to_zero() {
        let x = vec![0f32; 2 * QK_K];
        for im in [None, Some(vec![1f32; QK_K])] {
            let q = Q3K::TRAITS.quantize_to_vec(&x, QK_K, im.as_deref()).unwrap();
            // d = 0; every code is -4 (no high bit), which decodes to zero.
            for blk in q.chunks_exact(BlockQ3K::SIZE) {
                assert!(blk[108..].iter().all(|&b| b == 0));
                assert!(blk[..32].iter().all(|&b| b == 0));
            }
            assert!(Q3K::TRAITS.dequantize_to_vec(&q).unwrap().iter().all(|&v| v == 0.0));
        }
    }

    #[test]
    fn imatrix_path_is_deterministic_and_used() {
        let n = 2 * QK_K;
        let x = gaussian(3 * n, 13);
        let mut r = rng(9);
        let im: Vec<f32> = (0..n).map(|_| r().abs() + 0.01).collect();
        let a = Q3K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        let b = Q3K::TRAITS.quantize_to_vec(&x, n, Some(&im)).unwrap();
        assert_eq!(a, b);
        let plain = Q3K::TRAITS.quantize_to_vec(&x, n, None).unwrap();
        assert_ne!(a, plain);
        let mut r = vec![0u8; plain.len()];
        quantize_ref(&x, &mut r);
        assert_eq!(r, plain);
    }
}
