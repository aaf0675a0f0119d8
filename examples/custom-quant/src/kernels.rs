//! `q8_demo`'s kernels: a portable `vec_dot` against Q8_0 activations (backend
//! `demo-scalar`) and, on x86-64, an AVX2 one (`demo-avx2`, in [`crate::x86_64`]) that
//! owns a load-time layout, [`crate::layout`]'s `q8_demo_x4`.
//!
//! ## Arithmetic (the same bits on every path)
//!
//! Per 32-element block the products `q_w[i]·q_x[i]` are summed exactly in `i32`, in 8
//! lanes: lane `j` holds elements `2j, 2j+1, 16+2j, 17+2j` (what `vpmaddwd` over two
//! 16-element halves gives). Each lane then accumulates `acc[j] = fma(lane_j, d_w·d_x,
//! acc[j])` in `f32`, block after block, and the 8 lanes are reduced as an AVX2 horizontal
//! sum does: `((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))`. The scalar twin below writes those
//! lanes out, so the AVX2 kernel, its repacked tile and the twin agree bit for bit
//! (tested), and a model gives the same logits with `GGUF_CPU_FEATURES=scalar`.

use half::f16;
use quant_kernels::scalar::act::Q8_0_BYTES;

use crate::{Q8_DEMO_BYTES, Q8_DEMO_ID};

/// ggml's id of `Q8_0`, the activation type (`vec_dot_type`) of every `q8_demo` kernel.
pub const Q8_0_ID: u32 = 8;

/// The scalar kernel's backend name (what `gguf types` shows under `GGUF_CPU_FEATURES=scalar`).
pub const SCALAR_BACKEND: &str = "demo-scalar";

/// The AVX2 kernel's backend name (what `gguf types` shows on an AVX2 CPU).
pub const AVX2_BACKEND: &str = "demo-avx2";

/// When set (to anything), the first use of each `q8_demo` path in a process writes one
/// line to stderr (`q8_demo: demo-avx2 vec_dot`, `q8_demo: demo-avx2 q8_demo_x4 tile`,
/// ...): how the end-to-end test sees which kernel and layout a `gguf` run used.
pub const TRACE_ENV: &str = "CUSTOM_QUANT_TRACE";

/// The paths [`trace`] reports.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Path {
    ScalarDot = 0,
    Avx2Dot = 1,
    Avx2Tile = 2,
    ScalarTile = 3,
}

/// Reports `path` once per process when [`TRACE_ENV`] is set.
#[inline]
pub(crate) fn trace(path: Path) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;
    static ON: OnceLock<bool> = OnceLock::new();
    static SEEN: [AtomicBool; 4] = [const { AtomicBool::new(false) }; 4];
    if *ON.get_or_init(|| std::env::var_os(TRACE_ENV).is_some()) && !SEEN[path as usize].swap(true, Ordering::Relaxed) {
        let what = match path {
            Path::ScalarDot => "demo-scalar vec_dot",
            Path::Avx2Dot => "demo-avx2 vec_dot",
            Path::Avx2Tile => "demo-avx2 q8_demo_x4 tile",
            Path::ScalarTile => "q8_demo_x4 portable tile",
        };
        eprintln!("q8_demo: {what}");
    }
}

/// Blocks of a row of `n` elements; panics naming the kernel if `n`, `w` or `x` do not
/// describe whole blocks of one row each.
pub(crate) fn blocks(n: usize, w: &[u8], x: &[u8]) -> usize {
    assert!(n.is_multiple_of(32), "q8_demo vec_dot: {n} columns is not a whole number of 32-element blocks");
    let nb = n / 32;
    assert_eq!(w.len(), nb * Q8_DEMO_BYTES, "q8_demo vec_dot: weight row bytes for {n} columns");
    assert_eq!(x.len(), nb * Q8_0_BYTES, "q8_demo vec_dot: Q8_0 activation row bytes for {n} columns");
    nb
}

/// `d_w · d_x` of block `b`: the weight's `f32` scale times the activation's `f16` one.
#[inline(always)]
pub(crate) fn block_scale(dw: &[u8], dx: &[u8]) -> f32 {
    f32::from_le_bytes([dw[0], dw[1], dw[2], dw[3]]) * f16::from_le_bytes([dx[0], dx[1]]).to_f32()
}

/// The 8-lane reduction of the AVX2 kernel's horizontal sum.
#[inline(always)]
pub(crate) fn reduce8(a: [f32; 8]) -> f32 {
    let h = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// One block's exact integer dot in the 8 lanes of the module docs; `qw`, `qx` are the
/// 32 quants of the weight and activation block.
#[inline(always)]
pub(crate) fn block_lanes(qw: &[u8], qx: &[u8]) -> [i32; 8] {
    let p = |i: usize| (qw[i] as i8 as i32) * (qx[i] as i8 as i32);
    std::array::from_fn(|j| (p(2 * j) + p(2 * j + 1)) + (p(16 + 2 * j) + p(17 + 2 * j)))
}

/// `q8_demo · Q8_0` of one row, the portable twin of the AVX2 kernel (same bits).
pub fn vec_dot_scalar(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let nb = blocks(n, w, x);
    trace(Path::ScalarDot);
    let mut acc = [0f32; 8];
    for (wb, xb) in w.chunks_exact(Q8_DEMO_BYTES).zip(x.chunks_exact(Q8_0_BYTES)).take(nb) {
        let d = block_scale(wb, xb);
        let s = block_lanes(&wb[4..], &xb[2..]);
        for (a, s) in acc.iter_mut().zip(s) {
            *a = (s as f32).mul_add(d, *a);
        }
    }
    reduce8(acc)
}

gguf_registry::submit!(quant_kernels::Kernel::new(Q8_DEMO_ID, SCALAR_BACKEND, 0, Q8_0_ID, vec_dot_scalar));

#[cfg(target_arch = "x86_64")]
gguf_registry::submit!(quant_kernels::Kernel::new(Q8_DEMO_ID, AVX2_BACKEND, 10, Q8_0_ID, crate::x86_64::vec_dot)
    .with_available(quant_kernels::x86_64::has_avx2)
    .with_repack(crate::x86_64::LAYOUT));
