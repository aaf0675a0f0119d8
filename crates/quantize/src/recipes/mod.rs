//! The built-in recipes: every file type of the pinned llama-quantize (`QUANT_OPTIONS` in
//! `tools/quantize/quantize.cpp`), one module per family. Each registers itself; the
//! per-tensor rule of all of them is [`crate::rules::llama_cpp_rule`], which keys on the
//! recipe's `llama_ftype` as llama.cpp does. `order` is llama-quantize's table order.

mod float;
mod iq;
mod k_quants;
mod legacy;
mod mxfp4_moe;
mod ternary;

/// Registers a built-in recipe with llama.cpp's rule.
macro_rules! builtin {
    ($order:expr, $name:expr, [$($alias:expr),*], $ftype:expr, $default:expr, $desc:expr) => {
        inventory::submit! {
            $crate::recipe::Recipe {
                name: $name,
                aliases: &[$($alias),*],
                ftype: $ftype,
                default_type: $default,
                description: $desc,
                copy_only: false,
                rule: $crate::rules::llama_cpp_rule,
                order: $order,
                priority: 0,
                origin: module_path!(),
            }
        }
    };
}
pub(crate) use builtin;
