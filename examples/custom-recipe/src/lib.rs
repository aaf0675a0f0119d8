//! A quantization recipe registered from outside the core crates: `DEMO_ATTN_Q8_0`
//! (alias `demo-attn-q8`) keeps the attention matrices in Q8_0 and puts every other
//! quantizable tensor in Q4_0; `gguf quantize IN OUT DEMO_ATTN_Q8_0` in a binary that links
//! this crate uses it, and nothing in `quantize` or the CLI changes.
//!
//! A recipe is what llama-quantize calls a file type (`Q4_K_M`): a default tensor type,
//! the `general.file_type` number written, and a rule that moves tensors off the default.
//!
//! 1. **The rule** ([`rule`]): `fn(&Recipe, &TensorCtx, chosen) -> Result<type id,
//!    String>`. It sees each tensor that may be quantized (not norms, not 1-D tensors)
//!    with its name, [`gguf_quantize::Category`] (`AttentionQ`, `FfnDown`, `Output`, ...),
//!    shape and model facts (layers, experts, tied embeddings, whether an imatrix was
//!    given); `chosen` is the default type. An `Err` refuses the model with that reason.
//!    `--pure`, `--tensor-type`, `--output-tensor-type` and `--token-embedding-type`
//!    still win over it, and a type whose block does not divide a row falls back as in
//!    llama-quantize.
//! 2. **The entry**: `Recipe::new(name, ftype, default_type, rule)` with
//!    `.with_aliases(..)`, `.with_description(..)` (shown in `gguf quantize --help`);
//!    names match case-insensitively, the `ftype` number works as a name too.
//! 3. **Register it** with `gguf_registry::submit!(..)` (records this module). A name
//!    already taken is a clash in `gguf_quantize::recipe::registry_problems()` and
//!    `gguf types --check`; `.priority(1)` replaces a built-in deliberately.
//! 4. **A binary** (`src/bin/gguf-custom-recipe.rs`): `use custom_recipe as _;` and
//!    `fn main() -> ExitCode { gguf_cli::main() }`. The stock `gguf quantize` refuses the
//!    name, listing the recipes it knows.
//!
//! `tests/it.rs` quantizes a tiny F32 model through the rebuilt binary and reads the
//! output's types back with `inspect --json`.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use gguf_quantize::{Category, Recipe, TensorCtx};

/// The recipe's name.
pub const NAME: &str = "DEMO_ATTN_Q8_0";

/// The `general.file_type` it writes (far from llama.cpp's numbers).
pub const FTYPE: u32 = 200;

/// ggml's id of Q8_0 (the default, Q4_0, is given by name).
const Q8_0: u32 = 8;

/// Attention projections (Q, K, V, fused QKV, output) in Q8_0; the rest keeps the
/// default (Q4_0).
pub fn rule(_: &Recipe, t: &TensorCtx<'_>, chosen: u32) -> Result<u32, String> {
    Ok(match t.category {
        Category::AttentionQ
        | Category::AttentionK
        | Category::AttentionV
        | Category::AttentionQkv
        | Category::AttentionOutput => Q8_0,
        _ => chosen,
    })
}

gguf_registry::submit!(Recipe::new(NAME, FTYPE, "q4_0", rule)
    .with_aliases(&["demo-attn-q8"])
    .with_description("example: attention in Q8_0, the rest Q4_0"));

#[cfg(test)]
mod tests {
    #[test]
    fn registered_and_found_by_name_alias_and_number() {
        let r = gguf_quantize::recipe::lookup(super::NAME).unwrap();
        assert_eq!((r.origin, r.ftype, r.default_type), ("custom_recipe", super::FTYPE, "q4_0"));
        assert_eq!(gguf_quantize::recipe::lookup("Demo-Attn-Q8").unwrap().name, super::NAME);
        assert_eq!(gguf_quantize::recipe::lookup(&super::FTYPE.to_string()).unwrap().name, super::NAME);
        assert_eq!(super::Q8_0, ggml_id("q8_0"));
        let p = gguf_quantize::recipe::registry_problems();
        assert!(p.problems.is_empty() && p.overrides.is_empty(), "{p:?}");
    }

    fn ggml_id(name: &str) -> u32 {
        gguf_quantize::recipe::all().iter().find(|r| r.default_type == name).unwrap().default_traits().unwrap().id
    }
}
