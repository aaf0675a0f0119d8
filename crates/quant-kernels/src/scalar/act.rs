//! Activation quantizers as ggml-cpu runs them on x86 (`ggml-cpu/arch/x86/quants.c`):
//! `quantize_row_q8_0` / `quantize_row_q8_1` take `d = amax / 127`, multiply by
//! `id = 127 / amax` and round half to even (`_mm256_round_ps(.., _MM_ROUND_NEAREST)`),
//! which differs from the reference `quantize_row_q8_0_ref` (`1/d`, `roundf`). Q8_K uses
//! the reference quantizer on every ggml-cpu target, taken from `ggml-quants`.

/// Bytes per Q8_0 block: fp16 `d`, 32 × i8.
pub const Q8_0_BYTES: usize = 34;
/// Bytes per Q8_1 block: fp16 `d`, fp16 `s = d·Σq`, 32 × i8.
pub const Q8_1_BYTES: usize = 36;
/// Bytes per Q8_K block: f32 `d`, 256 × i8, 16 × i16 block sums.
pub const Q8_K_BYTES: usize = 292;

/// `amax`, `d` and `id` of one block of 32, as the x86 quantizer computes them.
#[inline(always)]
fn scale_of(x: &[f32]) -> (f32, f32) {
    let amax = x.iter().fold(0f32, |m, v| if v.abs() > m { v.abs() } else { m });
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    (d, id)
}

/// `_mm256_cvtps_epi32` of an already-rounded value, then `packs` saturation to i8.
#[inline(always)]
fn to_i8(v: f32) -> i8 {
    cvtps_epi32(v).clamp(-128, 127) as i8
}

/// `_mm256_cvtps_epi32` of one already-rounded value: out of range and NaN give `i32::MIN`.
#[inline(always)]
fn cvtps_epi32(v: f32) -> i32 {
    if (-2147483648.0..2147483648.0).contains(&v) {
        v as i32
    } else {
        i32::MIN
    }
}

/// ggml-cpu's x86 `quantize_row_q8_0`.
pub fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(32).zip(dst.chunks_exact_mut(Q8_0_BYTES)) {
        let (d, id) = scale_of(x);
        y[0..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        for (q, &v) in y[2..].iter_mut().zip(x) {
            *q = to_i8((v * id).round_ties_even()) as u8;
        }
    }
}

/// ggml-cpu's x86 `quantize_row_q8_1`: as Q8_0 plus `s = fp16(d · Σq)` (the sum taken
/// over the rounded values before saturation, which never triggers for finite input).
pub fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.chunks_exact(32).zip(dst.chunks_exact_mut(Q8_1_BYTES)) {
        let (d, id) = scale_of(x);
        y[0..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        let mut sum = 0i32;
        for (q, &v) in y[4..].iter_mut().zip(x) {
            let r = (v * id).round_ties_even();
            let i = cvtps_epi32(r);
            sum = sum.wrapping_add(i);
            *q = i.clamp(-128, 127) as i8 as u8;
        }
        y[2..4].copy_from_slice(&half::f16::from_f32(d * sum as f32).to_bits().to_le_bytes());
    }
}

/// `quantize_row_q8_K` (= `quantize_row_q8_K_ref` on every ggml-cpu target).
pub fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    ggml_quants::types::q8_k::quantize_ref(src, dst);
}

/// `ggml_cpu_fp32_to_fp16`: round to nearest even (F16C `vcvtps2ph` with mode 0).
pub fn convert_f16(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.iter().zip(dst.chunks_exact_mut(2)) {
        y.copy_from_slice(&half::f16::from_f32(*x).to_bits().to_le_bytes());
    }
}

/// `ggml_cpu_fp32_to_bf16`: round to nearest even, NaN kept quiet.
pub fn convert_bf16(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.iter().zip(dst.chunks_exact_mut(2)) {
        y.copy_from_slice(&ggml_quants::util::f32_to_bf16(*x).to_le_bytes());
    }
}

/// `ggml_cpu_fp32_to_fp32`: a copy.
pub fn convert_f32(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.iter().zip(dst.chunks_exact_mut(4)) {
        y.copy_from_slice(&x.to_le_bytes());
    }
}
