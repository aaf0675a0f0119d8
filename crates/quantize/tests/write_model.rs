//! `cargo test -p gguf-quantize --test write_model -- --ignored DIR` helper: writes the test
//! models to `$QUANTIZE_TEST_MODELS` so llama-quantize can be run on the same files.
mod common;

#[test]
#[ignore]
fn write_models_for_llama_quantize() {
    let dir = std::env::var("QUANTIZE_TEST_MODELS").expect("set QUANTIZE_TEST_MODELS to a folder");
    let dir = std::path::Path::new(&dir);
    common::write_model(&dir.join("dense.gguf"), &common::DENSE);
    let moe = common::Shape { n_expert: 8, tied: true, ..common::DENSE };
    common::write_model(&dir.join("moe8.gguf"), &moe);
}
