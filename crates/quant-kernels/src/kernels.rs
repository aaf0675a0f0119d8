//! The built-in registry entries: one scalar kernel per supported type (priority 0), the
//! AVX2 kernels (priority 10) on x86_64, and the activation quantizers. A plug-in crate
//! adds its own with `inventory::submit! { quant_kernels::Kernel::new(..) }`; the kernel
//! chosen for a type decides whether its weights are repacked ([`Kernel::repack`]).

use ggml_quants::types::{bf16::BF16, f16::F16, f32::F32, q2_k::Q2K, q3_k::Q3K, q4_0::Q4_0, q4_1::Q4_1, q4_k::Q4K};
use ggml_quants::types::{q5_0::Q5_0, q5_1::Q5_1, q5_k::Q5K, q6_k::Q6K, q8_0::Q8_0, q8_1::Q8_1, q8_k::Q8K};
use ggml_quants::GgmlType;

use crate::registry::{always, ActQuantizer, Kernel};
use crate::scalar::{act, dots};

macro_rules! scalar_kernel {
    ($ty:ty, $act:ty, $f:path) => {
        inventory::submit! {
            Kernel::new(<$ty as GgmlType>::ID, "scalar", 0, <$act as GgmlType>::ID, $f)
        }
    };
}

scalar_kernel!(F32, F32, dots::f32_f32);
scalar_kernel!(F16, F16, dots::f16_f16);
scalar_kernel!(BF16, BF16, dots::bf16_bf16);
scalar_kernel!(Q4_0, Q8_0, dots::q4_0_q8_0);
scalar_kernel!(Q4_1, Q8_1, dots::q4_1_q8_1);
scalar_kernel!(Q5_0, Q8_0, dots::q5_0_q8_0);
scalar_kernel!(Q5_1, Q8_1, dots::q5_1_q8_1);
scalar_kernel!(Q8_0, Q8_0, dots::q8_0_q8_0);
scalar_kernel!(Q2K, Q8K, dots::q2_k_q8_k);
scalar_kernel!(Q3K, Q8K, dots::q3_k_q8_k);
scalar_kernel!(Q4K, Q8K, dots::q4_k_q8_k);
scalar_kernel!(Q5K, Q8K, dots::q5_k_q8_k);
scalar_kernel!(Q6K, Q8K, dots::q6_k_q8_k);

macro_rules! scalar_act {
    ($ty:ty, $f:path) => {
        inventory::submit! {
            ActQuantizer { type_id: <$ty as GgmlType>::ID, backend: "scalar", priority: 0, available: always, quantize: $f }
        }
    };
}

scalar_act!(Q8_0, act::quantize_q8_0);
scalar_act!(Q8_1, act::quantize_q8_1);
scalar_act!(Q8K, act::quantize_q8_k);
scalar_act!(F16, act::convert_f16);
scalar_act!(BF16, act::convert_bf16);
scalar_act!(F32, act::convert_f32);

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use crate::arch::x86_64::{avx2, float256, float512, has_avx2, q4_0x8, vnni};

    macro_rules! avx2_kernel {
        ($ty:ty, $act:ty, $f:path) => {
            inventory::submit! {
                Kernel::new(<$ty as GgmlType>::ID, "avx2", 10, <$act as GgmlType>::ID, $f).with_available(has_avx2)
            }
        };
    }

    inventory::submit! {
        Kernel::new(<F32 as GgmlType>::ID, "avx2", 10, <F32 as GgmlType>::ID, avx2::f32_f32)
            .with_available(has_avx2)
            .with_tile(float256::f32_tile)
    }
    inventory::submit! {
        Kernel::new(<F16 as GgmlType>::ID, "avx2", 10, <F16 as GgmlType>::ID, avx2::f16_f16)
            .with_available(has_avx2)
            .with_tile(float256::f16_tile)
    }
    avx2_kernel!(BF16, BF16, avx2::bf16_bf16);
    // Q4_0's AVX2 kernel (with its tile and repacked layout) is in `arch/x86_64/iq4.rs`.
    // Q4_1, Q5_0, Q5_1 and Q8_0's AVX2 kernels (`avx2.rs`'s `vec_dot`s, with tiles) are in
    // `arch/x86_64/legacy_avx2.rs`.
    // The K types' AVX2 kernels (their `vec_dot`s from `avx2.rs`, with tiles) are in
    // `arch/x86_64/kquant_avx2.rs`.

    macro_rules! vnni_kernel {
        ($ty:ty, $act:ty, $f:path, $tile:path $(, $repack:expr)?) => {
            inventory::submit! {
                Kernel::new(<$ty as GgmlType>::ID, "avx512vnni", 20, <$act as GgmlType>::ID, $f)
                    .with_available(vnni::has_vnni)
                    .with_tile($tile)
                    .with_tile_tokens(crate::arch::x86_64::legacy_avx2::TILE_TOKENS)
                    $(.with_repack($repack))?
            }
        };
    }

    vnni_kernel!(Q4_0, Q8_0, vnni::q4_0_q8_0, vnni::q4_0_tile, q4_0x8::LAYOUT);
    vnni_kernel!(Q4_1, Q8_1, vnni::q4_1_q8_1, vnni::q4_1_tile);
    vnni_kernel!(Q5_0, Q8_0, vnni::q5_0_q8_0, vnni::q5_0_tile);
    vnni_kernel!(Q5_1, Q8_1, vnni::q5_1_q8_1, vnni::q5_1_tile);
    vnni_kernel!(Q8_0, Q8_0, vnni::q8_0_q8_0, vnni::q8_0_tile);

    // The K types' tiles run their prompt batches through the 16-token engine
    // (`arch/x86_64/k16.rs`), which wants wide tiles.
    macro_rules! vnni_k_kernel {
        ($($ty:ty: $f:path, $tile:path;)*) => {$(
            inventory::submit! {
                Kernel::new(<$ty as GgmlType>::ID, "avx512vnni", 20, <Q8K as GgmlType>::ID, $f)
                    .with_available(vnni::has_vnni)
                    .with_tile($tile)
                    .with_tile_tokens(vnni::K_TILE_TOKENS)
            }
        )*};
    }
    vnni_k_kernel! {
        Q2K: vnni::q2_k_q8_k, vnni::q2_k_tile;
        Q3K: vnni::q3_k_q8_k, vnni::q3_k_tile;
        Q4K: vnni::q4_k_q8_k, vnni::q4_k_tile;
        Q5K: vnni::q5_k_q8_k, vnni::q5_k_tile;
        Q6K: vnni::q6_k_q8_k, vnni::q6_k_tile;
    }

    vnni_kernel!(F32, F32, float512::f32_f32, float512::f32_tile);
    vnni_kernel!(F16, F16, float512::f16_f16, float512::f16_tile);

    inventory::submit! {
        ActQuantizer { type_id: <Q8_0 as GgmlType>::ID, backend: "avx2", priority: 10, available: has_avx2, quantize: avx2::quantize_q8_0 }
    }
    inventory::submit! {
        ActQuantizer { type_id: <Q8K as GgmlType>::ID, backend: "avx2", priority: 10, available: has_avx2, quantize: avx2::quantize_q8_k }
    }
    inventory::submit! {
        ActQuantizer { type_id: <Q8_1 as GgmlType>::ID, backend: "avx2", priority: 10, available: has_avx2, quantize: avx2::quantize_q8_1 }
    }
}
