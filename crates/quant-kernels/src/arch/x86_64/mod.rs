//! x86_64 kernels: AVX2 + FMA + F16C (`avx2.rs`, `ops.rs`, `lattice_avx2.rs`, the K-quant
//! tiles of `kquant_avx2.rs`, the q4_1/q5_0/q5_1/q8_0 tiles of `legacy_avx2.rs`), AVX-512 VNNI
//! (`vnni.rs`, `float512.rs`, `lattice_vnni.rs`, `q4_0x8.rs`), both ISAs from one body
//! (`iq4.rs`, `ternary.rs`, the F16 flash-attention chunk of `flash.rs`), AVX2 kernels that AVX-512 CPUs run too (`iq1.rs`,
//! `small_avx2.rs`), what their tile kernels share (`tiles.rs`) and the lattice
//! formats and driver of both ISAs (`lattice.rs`).

use std::sync::atomic::{AtomicU8, Ordering};

pub mod avx2;
#[cfg(test)]
mod engine_tests;
pub mod flash;
pub mod float256;
pub mod float512;
pub mod iq1;
pub mod iq4;
mod k16;
mod k8_avx2;
mod k_one_avx2;
pub mod kquant_avx2;
pub mod lattice;
pub mod lattice_avx2;
pub mod lattice_vnni;
pub mod legacy_avx2;
pub mod ops;
pub mod q4_0x8;
mod q4_k_one;
mod q6_k_one;
pub mod small_avx2;
pub mod ternary;
mod tiles;
pub mod vnni;

const UNKNOWN: u8 = 0;
const HAS: u8 = 1;
const HAS_NOT: u8 = 2;

static AVX2: AtomicU8 = AtomicU8::new(UNKNOWN);

/// AVX2, FMA and F16C are all available and allowed by [`crate::cpu`]'s cap (detected
/// once, then one relaxed load).
#[inline(always)]
pub fn has_avx2() -> bool {
    match AVX2.load(Ordering::Relaxed) {
        HAS => true,
        HAS_NOT => false,
        _ => {
            let yes = crate::cpu::allows(crate::cpu::Level::Simd)
                && std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c");
            AVX2.store(if yes { HAS } else { HAS_NOT }, Ordering::Relaxed);
            yes
        }
    }
}
