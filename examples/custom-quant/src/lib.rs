//! A made-up quant type, `q8_demo`, registered from outside the core crates.
//!
//! This crate is the proof that adding a format needs no change to `ggml-quants`,
//! `gguf-format` or the CLI: implement [`GgmlType`] on a marker and `submit!` its traits.
//! Any binary that links this crate (`use custom_quant as _;`) can then read, write,
//! inspect and dequantize GGUF tensors of the new type.
//!
//! Layout of a `q8_demo` block (32 elements, 36 bytes): an `f32` scale `d`, then 32
//! signed bytes `q`; `x[i] = d * q[i]`.
#![deny(missing_docs)]

use ggml_quants::{GgmlType, QuantizeRefFn, QuantizeRowsFn};

/// The GGUF id claimed by the demo type: far above ggml's range so it never clashes.
pub const Q8_DEMO_ID: u32 = 0x4000_0001;

/// Marker for `q8_demo`.
pub struct Q8Demo;

impl GgmlType for Q8Demo {
    const NAME: &'static str = "q8_demo";
    const ID: u32 = Q8_DEMO_ID;
    const BLOCK_SIZE: usize = 32;
    const TYPE_SIZE: usize = 36;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize);
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = Some(quantize_rows);

    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(36).zip(dst.chunks_exact_mut(32)) {
            let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            for (yi, &q) in y.iter_mut().zip(&b[4..36]) {
                *yi = d * (q as i8) as f32;
            }
        }
    }
}

/// Symmetric absmax quantization of whole blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(36)) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[..4].copy_from_slice(&d.to_le_bytes());
        for (q, &v) in b[4..].iter_mut().zip(x) {
            *q = ((v * id).round() as i8) as u8;
        }
    }
}

fn quantize_rows(src: &[f32], dst: &mut [u8], _n_per_row: usize, _imatrix: Option<&[f32]>) {
    quantize(src, dst)
}

ggml_quants::inventory::submit! { <Q8Demo as GgmlType>::TRAITS }
