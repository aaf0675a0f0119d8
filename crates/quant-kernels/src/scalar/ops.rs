//! Scalar twins of [`crate::ops`], in ggml-cpu's arithmetic where it is defined
//! (`ggml-cpu/vec.h`, `vec.cpp`, `ops.cpp`).

use half::f16;

/// `Σ a·b`, summed in f64 as `ggml_vec_dot_f32`'s scalar path (`ggml_float`).
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x * y) as f64).sum::<f64>() as f32
}

/// `Σ a·b` with `a` in f16.
pub fn dot_f16_f32(a: &[f16], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x.to_f32() * y) as f64).sum::<f64>() as f32
}

/// `ggml_vec_dot_f16` scalar: `Σ a·b` of two f16 rows, summed in f64.
pub fn dot_f16_f16(a: &[f16], b: &[f16]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x.to_f32() * y.to_f32()) as f64).sum::<f64>() as f32
}

/// `y += a·x` (`ggml_vec_mad_f16` into an f32 accumulator).
pub fn axpy_f16(y: &mut [f32], a: f32, x: &[f16]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += x.to_f32() * a;
    }
}

/// `y += a·x`.
pub fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += x * a;
    }
}

/// `Σ x²` in f64 as `ggml_compute_forward_rms_norm_f32`.
pub fn sum_squares_f64(x: &[f32]) -> f64 {
    x.iter().map(|v| (v * v) as f64).sum()
}

/// `silu(x) = x / (1 + e^-x)` (`ggml_silu_f32`).
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `gate = silu(gate) · up`.
pub fn silu_mul_inplace(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// `ggml_gelu_f32`: the tanh approximation.
#[inline]
pub fn gelu_f32(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// ggml's `ggml_table_gelu_f16`: `fp16(gelu(f32(h)))` for every f16 bit pattern.
fn gelu_table() -> &'static [u16] {
    static TABLE: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    TABLE
        .get_or_init(|| (0..=u16::MAX).map(|h| f16::from_f32(gelu_f32(f16::from_bits(h).to_f32())).to_bits()).collect())
}

/// ggml's `ggml_vec_gelu_f32` with `GGML_GELU_FP16`: table lookup through f16 for
/// `-10 < x < 10`, `0` below, `x` above.
#[inline]
pub fn gelu_table_f32(x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        f16::from_bits(gelu_table()[f16::from_f32(x).to_bits() as usize]).to_f32()
    }
}

/// `gate = gelu(gate) · up` as `ggml_vec_geglu_f32` (f16 table).
pub fn gelu_mul_inplace(gate: &mut [f32], up: &[f32]) {
    let table = gelu_table();
    for (g, u) in gate.iter_mut().zip(up) {
        let x = *g;
        *g = if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x * u
        } else {
            f16::from_bits(table[f16::from_f32(x).to_bits() as usize]).to_f32() * u
        };
    }
}

/// `y = f16(x·a + y)` with the product and sum fused (ggml's `ggml_vec_mad_f16` on FMA
/// hardware), an f16 accumulator.
pub fn mad_f16(y: &mut [f16], a: f32, x: &[f16]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = f16::from_f32(x.to_f32().mul_add(a, y.to_f32()));
    }
}

/// `y = f16(y·a)` (`ggml_vec_scale_f16`).
pub fn scale_f16(y: &mut [f16], a: f32) {
    for y in y.iter_mut() {
        *y = f16::from_f32(y.to_f32() * a);
    }
}
