//! The per-tensor types of llama.cpp's recipes on two small models (dense GQA-4 llama,
//! and a tied-embedding llama with 8 experts), as snapshots. Each snapshot line is a
//! tensor whose type differs from the recipe's default. These plans were checked against
//! the pinned llama-quantize: the files written from them are byte-identical to its
//! output (`cargo xtask verify quantize`; `tests/write_model.rs` writes these models).
mod common;

use std::fmt::Write;

use gguf_format::SplitGguf;
use gguf_quantize::{recipe, Params};

const RECIPES: &[&str] = &[
    "Q2_K",
    "Q3_K_S",
    "Q3_K_M",
    "Q3_K_L",
    "Q4_K_S",
    "Q4_K_M",
    "Q5_K_M",
    "Q6_K",
    "IQ3_M",
    "IQ4_XS",
    "MXFP4_MOE",
    "Q4_0",
    "F16",
];

fn plans(shape: &common::Shape) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    common::write_model(&path, shape);
    let file = SplitGguf::open(&path).unwrap();
    let mut s = String::new();
    for name in RECIPES {
        let r = recipe::lookup(name).unwrap();
        let plan = gguf_quantize::plan(&file, &Params::new(r)).unwrap();
        let default = r.default_traits().unwrap().id;
        writeln!(s, "{name} ({} bytes):", plan.size_out()).unwrap();
        for t in plan.tensors.iter().filter(|t| t.allows_quantization && t.to != default) {
            writeln!(s, "  {} {}", t.name, ggml_quants::by_id(t.to).unwrap().name).unwrap();
        }
    }
    s
}

#[test]
fn dense_gqa4_plans() {
    insta::assert_snapshot!(plans(&common::DENSE));
}

#[test]
fn moe8_plans() {
    insta::assert_snapshot!(plans(&common::Shape { n_expert: 8, tied: true, ..common::DENSE }));
}

#[test]
fn tensor_order_is_ggml_layer_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    common::write_model(&path, &common::DENSE);
    let file = SplitGguf::open(&path).unwrap();
    let plan = gguf_quantize::plan(&file, &Params::new(recipe::lookup("Q8_0").unwrap())).unwrap();
    let names: Vec<&str> = plan.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(&names[..4], ["output.weight", "output_norm.weight", "token_embd.weight", "blk.0.attn_k.weight"]);
    // Metadata: general.quantization_version then general.file_type appended last.
    let keys: Vec<&str> = plan.metadata.iter().map(|(k, _)| k).collect();
    assert_eq!(&keys[keys.len() - 2..], ["general.quantization_version", "general.file_type"]);
}

#[test]
fn prune_renumbers_layers_and_block_count() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    common::write_model(&path, &common::DENSE);
    let file = SplitGguf::open(&path).unwrap();
    let mut p = Params::new(recipe::lookup("Q4_K_M").unwrap());
    p.prune_layers = vec![3, 5];
    let plan = gguf_quantize::plan(&file, &p).unwrap();
    assert_eq!(plan.metadata.get_u64("llama.block_count"), Some(6));
    assert!(plan.tensors.iter().all(|t| !t.name.starts_with("blk.6.") && !t.name.starts_with("blk.7.")));
    let renamed = plan.tensors.iter().find(|t| t.name == "blk.3.attn_q.weight").unwrap();
    assert_eq!(renamed.imatrix_name, "blk.4.attn_q.weight");
}
