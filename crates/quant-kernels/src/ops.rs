//! f32 helpers for the forward pass (norms, activations, attention), with runtime
//! dispatch to the AVX2 versions in `arch::x86_64` and a scalar twin of each in
//! `scalar::ops`. Length mismatches are the caller's bug: every function works on the
//! common prefix (`min` of the lengths) and never panics on them.

use half::f16;

use crate::scalar::ops as sc;

#[cfg(target_arch = "x86_64")]
use crate::arch::x86_64 as x86;

/// `Σ a[i]·b[i]`.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::dot_f32(&a[..n], &b[..n]);
    }
    sc::dot_f32(&a[..n], &b[..n])
}

/// `Σ a[i]·b[i]` with `a` in f16 (K cache row · f32 query).
pub fn dot_f16_f32(a: &[f16], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::dot_f16_f32(&a[..n], &b[..n]);
    }
    sc::dot_f16_f32(&a[..n], &b[..n])
}

/// `Σ a[i]·b[i]` of two f16 rows, as ggml computes K·q for an F16 K cache (it converts q
/// to f16 first: use [`to_f16`]).
pub fn dot_f16_f16(a: &[f16], b: &[f16]) -> f32 {
    let n = a.len().min(b.len());
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::dot_f16_f16(&a[..n], &b[..n]);
    }
    sc::dot_f16_f16(&a[..n], &b[..n])
}

/// `y[i] += a·x[i]` with `x` in f16 (V cache accumulation).
pub fn axpy_f16(y: &mut [f32], a: f32, x: &[f16]) {
    let n = y.len().min(x.len());
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::axpy_f16(&mut y[..n], a, &x[..n]);
    }
    sc::axpy_f16(&mut y[..n], a, &x[..n])
}

/// `y[i] = f16(x[i]·a + y[i])`, fused, with an f16 accumulator: ggml's
/// `ggml_vec_mad_f16` (the V accumulation of its CPU flash attention).
pub fn mad_f16(y: &mut [f16], a: f32, x: &[f16]) {
    let n = y.len().min(x.len());
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::mad_f16(&mut y[..n], a, &x[..n]);
    }
    sc::mad_f16(&mut y[..n], a, &x[..n])
}

/// `y[i] = f16(y[i]·a)` (`ggml_vec_scale_f16`).
pub fn scale_f16(y: &mut [f16], a: f32) {
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::scale_f16(y, a);
    }
    sc::scale_f16(y, a)
}

/// Whether a native llama.cpp build on this CPU does its f16 vector ops (the V
/// accumulation of flash attention over an F16 cache) in half precision (AVX512-FP16,
/// `__AVX512FP16__`), within [`crate::cpu`]'s cap.
pub fn native_fp16_vec() -> bool {
    #[cfg(target_arch = "x86_64")]
    return x86::ops::has_fp16();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Mamba-2's scan step over one state row's whole lane blocks: see
/// [`crate::scalar::ops::ssm_scan_lanes`] (same bits, hardware FMAs where the CPU has them).
pub fn ssm_scan_lanes(s: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32, acc: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::ssm_scan_lanes(s, b, c, da, x_dt, acc);
    }
    sc::ssm_scan_lanes(s, b, c, da, x_dt, acc)
}

/// [`mad_f16`] as an AVX512-FP16 build of ggml computes it (`v` rounded to f16, one
/// half-precision FMA per element for the first `n & !127` elements).
pub fn mad_f16_fp16(y: &mut [f16], a: f32, x: &[f16]) {
    let n = y.len().min(x.len());
    #[cfg(target_arch = "x86_64")]
    return x86::ops::mad_f16_fp16(&mut y[..n], a, &x[..n]);
    #[cfg(not(target_arch = "x86_64"))]
    sc::mad_f16_fp16(&mut y[..n], a, &x[..n])
}

/// [`scale_f16`] as an AVX512-FP16 build of ggml computes it.
pub fn scale_f16_fp16(y: &mut [f16], a: f32) {
    #[cfg(target_arch = "x86_64")]
    return x86::ops::scale_f16_fp16(y, a);
    #[cfg(not(target_arch = "x86_64"))]
    sc::scale_f16_fp16(y, a)
}

pub use crate::scalar::ops::{DotLayout, FlashF16};

/// One chunk of ggml-cpu's F16 flash attention for the query heads sharing one KV head
/// (K/V rows read once for all of them), bit-identical to ggml per head: see
/// [`crate::scalar::ops::flash_f16_chunk`].
pub fn flash_f16_chunk(c: &FlashF16<'_>, q16: &[f16], m: &mut [f32], s: &mut [f32], acc16: &mut [f16]) {
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::flash::flash_f16_chunk(c, q16, m, s, acc16);
    }
    sc::flash_f16_chunk(c, q16, m, s, acc16)
}

/// The [`DotLayout`] a native llama.cpp build on this CPU uses (an AVX2 build's when
/// [`crate::cpu`]'s cap is below AVX-512).
pub fn native_dot_layout() -> DotLayout {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::allows(crate::cpu::Level::Wide) && std::is_x86_feature_detected!("avx512f") {
        return DotLayout::Avx512;
    }
    DotLayout::Avx2
}

/// `Σ a[i]·b[i]` of two f16 rows, bit-identical to ggml-cpu's `ggml_vec_dot_f16` for
/// `layout` (flash attention's K·q): same lanes, fused multiply-adds, same reduction.
pub fn dot_f16_ggml(a: &[f16], b: &[f16], layout: DotLayout) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::dot_f16_ggml(a, b, layout);
    }
    sc::dot_f16_ggml(a, b, layout)
}

/// `Σ a[i]·b[i]` of two f32 rows, bit-identical to ggml-cpu's `ggml_vec_dot_f32` for
/// `layout` (same lanes, fused multiply-adds, same reduction, leftovers fused in order).
pub fn dot_f32_ggml(a: &[f32], b: &[f32], layout: DotLayout) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::dot_f32_ggml(a, b, layout);
    }
    sc::dot_f32_ggml(a, b, layout)
}

/// `C[i][j] = fma-chain over k of B[k][j]·A[i][k]`, starting from `C`: ggml-cpu's
/// `simd_gemm`, bit-identical (its flash-attention tiles use it for K·q and P·V).
pub fn gemm_fma(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::gemm_fma(c, a, b, m, k, n);
    }
    sc::gemm_fma(c, a, b, m, k, n)
}

/// `x[i] = exp(x[i])` with ggml-cpu's polynomial `ggml_v_expf` (its softmax's exp) of the
/// build [`native_dot_layout`] names (AVX-512 and AVX2 round differently), bit-identical;
/// −∞ gives 0.
pub fn expf_ggml_inplace(x: &mut [f32]) {
    let layout = native_dot_layout();
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::expf_ggml_inplace(x, layout);
    }
    for v in x.iter_mut() {
        *v = sc::expf_ggml_for(*v, layout);
    }
}

/// The wrapping sum of `bytes` as little-endian `u64` words by eight independent
/// accumulators (one per word of a 64-byte line, so the loop is bound by memory, not by
/// the adds; a last partial word left out), reading with
/// software prefetches to L2 `prefetch` bytes ahead on x86-64 (`0`: none, the hardware
/// prefetcher alone): a stream-read loop for measuring the memory's read bandwidth.
pub fn stream_sum(bytes: &[u8], prefetch: usize) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if prefetch > 0 {
        return x86::ops::stream_sum_prefetch(bytes, prefetch);
    }
    let _ = prefetch;
    sc::stream_sum(bytes)
}

/// `y[i] += a·x[i]`.
pub fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::axpy_f32(&mut y[..n], a, &x[..n]);
    }
    sc::axpy_f32(&mut y[..n], a, &x[..n])
}

/// `y[i] = fma(x[i], a, y[i])` for every `i` (`ggml_vec_mad_f32`: flash attention's
/// `V += v·e^(s−M)` with an f32 V).
pub fn mad_f32(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::mad_f32(&mut y[..n], a, &x[..n]);
    }
    sc::mad_f32(&mut y[..n], a, &x[..n])
}

/// One Q8_0 row · one Q8_0 row of `n` elements (`ggml_vec_dot_q8_0_q8_0`: flash
/// attention's K·q over a Q8_0 cache), without the tile set-up of the matmul kernels. On
/// x86 ggml's AVX2 body, which its AVX-512 builds compile too (the `vpdpbusd` variant of
/// `mul_sum_i8_pairs_float` gives the same exact integer sums); elsewhere the registered
/// kernel.
pub fn dot_q8_0(n: usize, w: &[u8], x: &[u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        x86::avx2::q8_0_q8_0(n, w, x)
    }
    #[cfg(not(target_arch = "x86_64"))]
    match crate::registry::kernel_for(8) {
        Some(k) => (k.vec_dot)(n, w, x),
        None => crate::scalar::dots::q8_0_q8_0(n, w, x),
    }
}

/// f32 → f16, round to nearest even (`ggml_cpu_fp32_to_fp16`).
pub fn to_f16(x: &[f32], out: &mut [f16]) {
    for (o, v) in out.iter_mut().zip(x) {
        *o = f16::from_f32(*v);
    }
}

/// `out = x / sqrt(mean(x²) + eps) · w`, as `ggml_compute_forward_rms_norm_f32` (sum of
/// squares in f64, `mean` and `scale` in f32, `(x·scale)·w`). Works on the common prefix
/// of `x` and `out`; `w` shorter than that leaves the tail unscaled by `w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len().min(out.len());
    if n == 0 {
        return;
    }
    let scale = rms_scale(&x[..n], eps);
    for i in 0..n {
        let v = x[i] * scale;
        out[i] = if i < w.len() { v * w[i] } else { v };
    }
}

/// `1/√(mean(x²) + ε)` as ggml's `rms_norm` (sum of squares in f64, the mean rounded to f32).
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let mean = (sc::sum_squares_f64(x) / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// [`rms_norm`] of `x` into itself (the same arithmetic: the sum of squares is taken
/// before any element is written).
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    if x.is_empty() {
        return;
    }
    let scale = rms_scale(x, eps);
    for (i, v) in x.iter_mut().enumerate() {
        let s = *v * scale;
        *v = if i < w.len() { s * w[i] } else { s };
    }
}

/// In place: `x = exp(x - max) / Σ exp(x - max)` (`ggml_compute_forward_soft_max_f32`:
/// sum in f64, then a scale by `1/sum`).
pub fn softmax_inplace(x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    // ggml_compute_forward_soft_max_f32 / ggml_vec_soft_max_f32: whole vectors through
    // ggml_v_expf, each vector's sum reduced as the SIMD code does and added in f64; the
    // tail through libm expf; then one scale by (float)(1/sum).
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let layout = native_dot_layout();
    let lanes = if layout == DotLayout::Avx512 { 16 } else { 8 };
    let nv = x.len() - x.len() % lanes;
    for v in x[..nv].iter_mut() {
        *v -= max;
    }
    expf_ggml_inplace(&mut x[..nv]);
    let mut sum = 0f64;
    for c in x[..nv].chunks_exact(lanes) {
        sum += match layout {
            DotLayout::Avx512 => crate::scalar::dots::reduce16(c.try_into().expect("16 lanes")),
            DotLayout::Avx2 => {
                let h = [c[4] + c[0], c[5] + c[1], c[6] + c[2], c[7] + c[3]];
                (h[0] + h[2]) + (h[1] + h[3])
            }
        } as f64;
    }
    for v in x[nv..].iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    scale_inplace(x, (1.0 / sum) as f32);
}

/// In place: `gate = silu(gate) · up` (llama.cpp's swiglu).
pub fn silu_mul_inplace(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    // ggml_vec_swiglu_f32: whole vectors use ggml_v_silu (x / (1 + v_expf(0 - x))), the
    // tail the scalar ggml_silu_f32 (libm expf).
    let lanes = if native_dot_layout() == DotLayout::Avx512 { 16 } else { 8 };
    let nv = n - n % lanes;
    // In stack-sized chunks (the exponential is per element, so chunking changes nothing).
    let mut buf = [0f32; 256];
    for (gc, uc) in gate[..nv].chunks_mut(buf.len()).zip(up[..nv].chunks(buf.len())) {
        let e = &mut buf[..gc.len()];
        for (e, &g) in e.iter_mut().zip(gc.iter()) {
            *e = 0.0 - g;
        }
        expf_ggml_inplace(e);
        for ((g, u), e) in gc.iter_mut().zip(uc).zip(e.iter()) {
            *g = (*g / (1.0 + e)) * u;
        }
    }
    sc::silu_mul_inplace(&mut gate[nv..n], &up[nv..n]);
}

/// In place: `gate = gelu(gate) · up` (geglu), GELU through ggml's f16 lookup table as
/// ggml-cpu computes it (`GGML_GELU_FP16`).
pub fn gelu_mul_inplace(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    sc::gelu_mul_inplace(&mut gate[..n], &up[..n]);
}

/// `gelu(x)` as ggml-cpu computes it (f16 table).
pub fn gelu(x: f32) -> f32 {
    sc::gelu_table_f32(x)
}

/// `silu(x)`.
pub fn silu(x: f32) -> f32 {
    sc::silu(x)
}

/// `y[i] += x[i]`.
pub fn add_inplace(y: &mut [f32], x: &[f32]) {
    for (a, b) in y.iter_mut().zip(x) {
        *a += b;
    }
}

/// [`crate::scalar::ops::rope_rotate`]: one head vector's rope rotation, with hardware
/// FMA where the CPU has it (the same bits as the twin's `mul_add`).
pub fn rope_rotate(x: &mut [f32], cache: &[f32], n_rot: usize, neox: bool) {
    assert!(
        x.len() >= n_rot && cache.len() >= n_rot,
        "rope_rotate: {n_rot} rotated dims, head {} cache {}",
        x.len(),
        cache.len()
    );
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::ops::rope_rotate(x, cache, n_rot, neox);
    }
    sc::rope_rotate(x, cache, n_rot, neox)
}

/// `y[i] *= x[i]`.
pub fn mul_inplace(y: &mut [f32], x: &[f32]) {
    for (a, b) in y.iter_mut().zip(x) {
        *a *= b;
    }
}

/// `y[i] *= s`.
pub fn scale_inplace(y: &mut [f32], s: f32) {
    for a in y.iter_mut() {
        *a *= s;
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn stream_sum_is_the_wrapping_sum_at_any_prefetch_distance() {
        let words: Vec<u64> = (0..1003u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).chain([0xff; 5]).collect();
        for n in [0, 1, 7, 8, 9, 64, 1003] {
            let want = words[..n].iter().fold(0u64, |s, &w| s.wrapping_add(w));
            for pf in [0, 64, 4096, usize::MAX / 2] {
                // a partial last word (the 5 bytes of 0xff) is left out
                let end = if n == 1003 { bytes.len() } else { 8 * n };
                assert_eq!(stream_sum(&bytes[..end], pf), want, "{n} words, prefetch {pf}");
            }
        }
    }

    use super::*;

    #[test]
    fn rms_norm_in_place_has_the_bits_of_rms_norm() {
        let mut s = 11u32;
        for n in [1usize, 7, 64, 576, 2048] {
            let x: Vec<f32> = (0..n)
                .map(|_| {
                    s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                    (s >> 8) as f32 / (1u32 << 20) as f32 - 8.0
                })
                .collect();
            let w: Vec<f32> = x.iter().map(|v| v * 0.37 + 1.0).collect();
            let mut want = vec![0f32; n];
            rms_norm(&x, &w, 1e-6, &mut want);
            let mut got = x.clone();
            rms_norm_inplace(&mut got, &w, 1e-6);
            assert_eq!(got, want, "n={n}");
        }
    }
}
