//! aarch64 kernels: NEON (`neon.rs`), with the SDOT instruction (`dotprod`) where the CPU
//! has it and the widening-multiply path of ggml's `ggml_vdotq_s32` fallback otherwise.
//!
//! Each NEON kernel is registered as backend `"neon"` (priority 10, above the scalar
//! kernels) and is bit-identical to a scalar twin: the quantized ones to the registered
//! scalar kernels in `crate::scalar::dots` (exact integer block sums, then the same f32
//! operations in the same order), F32/F16 to the twins in `neon.rs` that follow ggml's
//! NEON lane order, the Q8_0/Q8_1/Q8_K activation quantizers to `crate::scalar::act`.

use std::sync::atomic::{AtomicU8, Ordering};

use ggml_quants::types::{f16::F16, f32::F32, q2_k::Q2K, q3_k::Q3K, q4_0::Q4_0, q4_1::Q4_1, q4_k::Q4K};
use ggml_quants::types::{q5_0::Q5_0, q5_1::Q5_1, q5_k::Q5K, q6_k::Q6K, q8_0::Q8_0, q8_1::Q8_1, q8_k::Q8K};
use ggml_quants::GgmlType;

use crate::registry::{ActQuantizer, Kernel};

pub mod neon;

const UNKNOWN: u8 = 0;
const HAS: u8 = 1;
const HAS_NOT: u8 = 2;

static NEON: AtomicU8 = AtomicU8::new(UNKNOWN);
static DOTPROD: AtomicU8 = AtomicU8::new(UNKNOWN);

#[inline(always)]
fn cached(flag: &AtomicU8, detect: fn() -> bool) -> bool {
    match flag.load(Ordering::Relaxed) {
        HAS => true,
        HAS_NOT => false,
        _ => {
            let yes = detect();
            flag.store(if yes { HAS } else { HAS_NOT }, Ordering::Relaxed);
            yes
        }
    }
}

/// Advanced SIMD (NEON) is available (part of every aarch64 Linux target, still checked
/// at run time; detected once, then one relaxed load).
#[inline(always)]
pub fn has_neon() -> bool {
    cached(&NEON, || crate::cpu::allows(crate::cpu::Level::Simd) && std::arch::is_aarch64_feature_detected!("neon"))
}

/// NEON and the `SDOT` instruction (FEAT_DotProd) are available.
#[inline(always)]
pub fn has_dotprod() -> bool {
    has_neon()
        && cached(&DOTPROD, || {
            crate::cpu::allows(crate::cpu::Level::Wide) && std::arch::is_aarch64_feature_detected!("dotprod")
        })
}

macro_rules! neon_kernel {
    ($ty:ty, $act:ty, $f:path) => {
        inventory::submit! {
            Kernel::new(<$ty as GgmlType>::ID, "neon", 10, <$act as GgmlType>::ID, $f).with_available(has_neon)
        }
    };
}

neon_kernel!(F32, F32, neon::f32_f32);
neon_kernel!(F16, F16, neon::f16_f16);
neon_kernel!(Q4_0, Q8_0, neon::q4_0_q8_0);
neon_kernel!(Q4_1, Q8_1, neon::q4_1_q8_1);
neon_kernel!(Q5_0, Q8_0, neon::q5_0_q8_0);
neon_kernel!(Q5_1, Q8_1, neon::q5_1_q8_1);
neon_kernel!(Q8_0, Q8_0, neon::q8_0_q8_0);
neon_kernel!(Q2K, Q8K, neon::q2_k_q8_k);
neon_kernel!(Q3K, Q8K, neon::q3_k_q8_k);
neon_kernel!(Q4K, Q8K, neon::q4_k_q8_k);
neon_kernel!(Q5K, Q8K, neon::q5_k_q8_k);
neon_kernel!(Q6K, Q8K, neon::q6_k_q8_k);

inventory::submit! {
    ActQuantizer { type_id: <Q8_0 as GgmlType>::ID, backend: "neon", priority: 10, available: has_neon, quantize: neon::quantize_q8_0 }
}
inventory::submit! {
    ActQuantizer { type_id: <Q8K as GgmlType>::ID, backend: "neon", priority: 10, available: has_neon, quantize: neon::quantize_q8_k }
}
inventory::submit! {
    ActQuantizer { type_id: <Q8_1 as GgmlType>::ID, backend: "neon", priority: 10, available: has_neon, quantize: neon::quantize_q8_1 }
}
