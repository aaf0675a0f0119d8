//! A recipe registered from outside the crate (this test is its own crate): one
//! `inventory::submit!`, no change to the core, and `gguf quantize`'s lookup finds it.
mod common;

use std::sync::atomic::AtomicBool;

use gguf_format::{GgufFile, SplitGguf};
use quantize::{inventory, recipe, Category, Params, Recipe, TensorCtx};

/// Attention in Q8_0, everything else in the default Q4_0.
fn attn_q8(_: &Recipe, t: &TensorCtx<'_>, chosen: u32) -> Result<u32, String> {
    let attn = matches!(
        t.category,
        Category::AttentionQ | Category::AttentionK | Category::AttentionV | Category::AttentionOutput
    );
    Ok(if attn { 8 } else { chosen })
}

inventory::submit! {
    Recipe {
        name: "DEMO_ATTN_Q8",
        aliases: &["demo"],
        ftype: 1000,
        default_type: "q4_0",
        description: "test: attention in q8_0, the rest q4_0",
        copy_only: false,
        rule: attn_q8,
        order: 1000,
    }
}

#[test]
fn plug_in_recipe_is_found_and_applied() {
    assert!(recipe::registry_problems().is_empty(), "{:?}", recipe::registry_problems());
    let r = recipe::lookup("demo").unwrap();
    assert_eq!(r.name, "DEMO_ATTN_Q8");
    assert_eq!(recipe::lookup("1000").unwrap().name, "DEMO_ATTN_Q8");
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in.gguf"), dir.path().join("out.gguf"));
    common::write_model(&src, &common::DENSE);
    let file = SplitGguf::open(&src).unwrap();
    let p = Params::new(r);
    let plan = quantize::plan(&file, &p).unwrap();
    quantize::write(&file, &plan, &p, &dst, &AtomicBool::new(false), &|_| {}).unwrap();
    let out = GgufFile::open(&dst).unwrap();
    assert_eq!(out.metadata().get_u64("general.file_type"), Some(1000));
    for t in out.tensors() {
        let want = if t.name.contains(".attn_") && !t.name.contains("norm") {
            8
        } else if t.dims.len() == 1 {
            0
        } else {
            2
        };
        assert_eq!(t.type_id, want, "{}", t.name);
    }
}
