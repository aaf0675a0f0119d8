//! A made-up quant type, `q8_demo`, with its own kernels and load-time layout, registered
//! from outside the core crates: adding a format needs no change to `ggml-quants`,
//! `quant-kernels`, `models` or the CLI.
//!
//! Layout of a `q8_demo` block (32 elements, 36 bytes): an `f32` scale `d`, then 32
//! signed bytes `q`; `x[i] = d * q[i]`.
//!
//! The walk-through, one registration per extension point:
//!
//! 1. **The type** (this file): implement [`GgmlType`] on a marker (name, id, block size
//!    and bytes, `dequantize`, optionally `quantize`) and `submit!` its `TRAITS`. Every
//!    reader, writer, `inspect` and `dequant` now knows `q8_demo`.
//! 2. **Its kernels** ([`kernels`]): a `vec_dot(n, weight_row, activation_row)` against
//!    the activations' type (`vec_dot_type`, here Q8_0: `matmul` converts the activations
//!    with ggml-cpu's quantizer), registered with
//!    `gguf_registry::submit!(Kernel::new(id, backend, priority, vec_dot_type, vec_dot))`:
//!    a portable `demo-scalar` one and, on x86-64, an AVX2 `demo-avx2` one with
//!    `.with_available(quant_kernels::x86_64::has_avx2)` (runtime detection, capped by
//!    `GGUF_CPU_FEATURES`) and a higher priority. The best available kernel wins.
//! 3. **Its layout** ([`layout`], [`x86_64`]): `.with_repack(Repack { name, applies,
//!    repack, tile })` on the AVX2 kernel: the engine rewrites every dense weight matrix of
//!    the type once at load (`q8_demo_x4`: 4 rows interleaved, scales together) and runs
//!    the owner's `tile` over it. Only the kernel chosen for the type decides, so under
//!    `GGUF_CPU_FEATURES=scalar` the scalar kernel runs on GGUF's rows.
//! 4. **A binary** (`src/bin/gguf-custom-quant.rs`): `use custom_quant as _;` and
//!    `fn main() -> ExitCode { gguf_cli::main() }`: the whole `gguf` with the plug-in
//!    linked in — `gguf-custom-quant types` lists `q8_demo` with its kernel,
//!    `types --check` reports no clash, `run` and `logits` run a `q8_demo` model.
//!
//! Every path computes the same bits (the scalar twin is written in the AVX2 kernel's
//! lanes, see [`kernels`]): tested kernel against twin, repacked against plain `matmul`,
//! and end to end (`tests/it.rs`: `logits` of a tiny `q8_demo` llama through the rebuilt
//! binary, AVX2 + repack against `GGUF_CPU_FEATURES=scalar`).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod kernels;
pub mod layout;
#[cfg(target_arch = "x86_64")]
pub mod x86_64;

#[cfg(test)]
mod tests;

use ggml_quants::{GgmlType, QuantizeRefFn, QuantizeRowsFn};

/// The GGUF id claimed by the demo type: far above ggml's range so it never clashes.
pub const Q8_DEMO_ID: u32 = 0x4000_0001;

/// Bytes per `q8_demo` block (32 elements).
pub const Q8_DEMO_BYTES: usize = 36;

/// Marker for `q8_demo`.
pub struct Q8Demo;

impl GgmlType for Q8Demo {
    const NAME: &'static str = "q8_demo";
    const ID: u32 = Q8_DEMO_ID;
    const BLOCK_SIZE: usize = 32;
    const TYPE_SIZE: usize = Q8_DEMO_BYTES;
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
