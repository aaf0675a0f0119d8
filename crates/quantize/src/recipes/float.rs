//! F32, F16, BF16 (every 2-D weight converted, 1-D tensors kept) and COPY.

use super::builtin;
use crate::recipe::{uniform_rule, Recipe};
use crate::rules::ftype;

builtin!(36, "F16", [], ftype::F16, "f16", "14.00G, +0.0020 ppl @ Mistral-7B");
builtin!(37, "BF16", [], ftype::BF16, "bf16", "14.00G, -0.0050 ppl @ Mistral-7B");
builtin!(38, "F32", [], ftype::ALL_F32, "f32", "26.00G              @ 7B");

inventory::submit! {
    Recipe {
        name: "COPY",
        aliases: &[],
        ftype: ftype::ALL_F32,
        default_type: "f32",
        description: "only copy tensors, no quantizing",
        copy_only: true,
        rule: uniform_rule,
        order: 39,
        priority: 0,
        origin: module_path!(),
    }
}
