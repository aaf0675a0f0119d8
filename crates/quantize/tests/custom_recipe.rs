//! A recipe registered from outside the crate (this test is its own crate): one
//! `submit!`, no change to the core, and `gguf quantize`'s lookup finds it; a second
//! registration of a built-in name is reported, a higher-priority one replaces it.
mod common;

use std::sync::atomic::AtomicBool;

use gguf_format::{GgufFile, SplitGguf};
use gguf_quantize::{recipe, Category, Params, Recipe, TensorCtx};

/// Attention in Q8_0, everything else in the default Q4_0.
fn attn_q8(_: &Recipe, t: &TensorCtx<'_>, chosen: u32) -> Result<u32, String> {
    let attn = matches!(
        t.category,
        Category::AttentionQ | Category::AttentionK | Category::AttentionV | Category::AttentionOutput
    );
    Ok(if attn { 8 } else { chosen })
}

gguf_quantize::gguf_registry::submit!(Recipe::new("DEMO_ATTN_Q8", 1000, "q4_0", attn_q8)
    .with_aliases(&["demo"])
    .with_description("test: attention in q8_0, the rest q4_0"));

// A second `Q8_0` at the built-in's priority: reported, and ordered by module name.
gguf_quantize::gguf_registry::submit!(Recipe::new("Q8_0", 7, "q8_0", gguf_quantize::recipe::uniform_rule));

// A replacement for `Q4_1` at a higher priority: listed as an override, and used.
gguf_quantize::gguf_registry::submit!(Recipe::new("Q4_1", 3, "q4_1", gguf_quantize::recipe::uniform_rule).priority(1));

#[test]
fn plug_in_recipe_is_found_and_applied() {
    let report = recipe::registry_problems();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert!(report.problems[0].contains("recipe `Q8_0` is registered 2 times at priority 0"), "{report:?}");
    // "custom_recipe" sorts before "gguf_quantize::recipes::legacy": the plug-in wins the tie.
    assert_eq!(recipe::lookup("q8_0").unwrap().origin, "custom_recipe");
    assert_eq!(report.overrides.len(), 1, "{report:?}");
    assert_eq!(recipe::lookup("Q4_1").unwrap().origin, "custom_recipe");
    assert_eq!(recipe::all().iter().filter(|r| r.name == "Q4_1").count(), 1);
    let r = recipe::lookup("demo").unwrap();
    assert_eq!(r.name, "DEMO_ATTN_Q8");
    assert_eq!(recipe::lookup("1000").unwrap().name, "DEMO_ATTN_Q8");
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in.gguf"), dir.path().join("out.gguf"));
    common::write_model(&src, &common::DENSE);
    let file = SplitGguf::open(&src).unwrap();
    let p = Params::new(r);
    let plan = gguf_quantize::plan(&file, &p).unwrap();
    gguf_quantize::write(&file, &plan, &p, &dst, &AtomicBool::new(false), &|_| {}).unwrap();
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
