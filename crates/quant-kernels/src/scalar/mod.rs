//! Portable twins of every SIMD kernel: the same integer arithmetic, plain loops, no
//! `unsafe`. They are the registered `"scalar"` backend and the reference the SIMD
//! kernels are tested against.

pub mod act;
pub mod dots;
pub mod iq1;
pub mod iq4;
pub mod ktiled;
pub mod lattice;
pub mod legacy;
pub mod nvfp4;
pub mod ops;
pub mod q1_0;
pub mod q2_0;
pub mod ternary;

/// Reads a little-endian fp16 at `at` as f32 (exact, as F16C's `vcvtph2ps`).
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Reads a little-endian f32 at `at`.
#[inline(always)]
pub(crate) fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads a little-endian i16 at `at`.
#[inline(always)]
pub(crate) fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_le_bytes([b[at], b[at + 1]])
}
