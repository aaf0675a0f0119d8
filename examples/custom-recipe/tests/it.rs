//! The plug-in recipe end to end: a tiny F32 model quantized through the rebuilt binary
//! (`gguf-custom-recipe quantize IN OUT DEMO_ATTN_Q8_0`), its output's types read back with
//! `inspect --json`, and the stock binary (`gguf-without-custom-recipe`: `gguf_cli::main()`
//! with nothing of this crate linked) refusing the name.

use std::process::{Command, Output};

use gguf_models::synthetic::{write, Tiny};

const PLUGIN: &str = env!("CARGO_BIN_EXE_gguf-custom-recipe");
const STOCK: &str = env!("CARGO_BIN_EXE_gguf-without-custom-recipe");

fn gguf(bin: &str, args: &[&str]) -> Output {
    Command::new(bin).args(args).env("GGUF_CACHE", "/nonexistent-cache").output().unwrap()
}

fn ok(o: &Output, what: &str) -> String {
    assert!(o.status.success(), "{what}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What the recipe promises for a tensor of the synthetic llama: attention projections
/// Q8_0, the other matrices Q4_0, 1-D tensors (norms) left in F32.
fn intended(name: &str, dims: usize) -> &'static str {
    let attn = ["attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight"];
    if dims == 1 {
        "f32"
    } else if attn.iter().any(|a| name.ends_with(a)) {
        "q8_0"
    } else {
        "q4_0"
    }
}

#[test]
fn the_rebuilt_binary_quantizes_with_the_plugin_recipe() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in.gguf"), dir.path().join("out.gguf"));
    write(&Tiny::new("llama").with_tokenizer(), &src, None, &[]).unwrap();
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    ok(&gguf(PLUGIN, &["quantize", s, d, "DEMO_ATTN_Q8_0"]), "quantize");

    let v: serde_json::Value = serde_json::from_str(&ok(&gguf(PLUGIN, &["inspect", d, "--json"]), "inspect")).unwrap();
    let tensors = v["tensors"].as_array().unwrap();
    let input: serde_json::Value =
        serde_json::from_str(&ok(&gguf(PLUGIN, &["inspect", s, "--json"]), "inspect in")).unwrap();
    assert_eq!(tensors.len(), input["tensors"].as_array().unwrap().len(), "every tensor written");
    let mut seen = std::collections::BTreeMap::new();
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let dims = t["shape"].as_array().map(Vec::len).unwrap_or_else(|| panic!("{t}"));
        let ty = t["type"].as_str().unwrap();
        assert_eq!(ty, intended(name, dims), "{name}");
        *seen.entry(ty.to_string()).or_insert(0) += 1;
    }
    // 2 layers × 4 attention matrices; token_embd and 3 FFN matrices × 2 layers; norms.
    assert_eq!(seen.get("q8_0"), Some(&8), "{seen:?}");
    assert_eq!(seen.get("q4_0"), Some(&7), "{seen:?}");
    let ftype = v["metadata"].as_array().unwrap().iter().find(|m| m["key"] == "general.file_type").unwrap();
    assert_eq!(ftype["value"], custom_recipe::FTYPE, "general.file_type is the recipe's number");

    // The quantized model runs.
    let o = gguf(PLUGIN, &["run", "-m", d, "-p", "hi", "-n", "2", "--temp", "0"]);
    ok(&o, "run the quantized model");

    // The alias and the number name it too (same bytes out).
    let d2 = dir.path().join("out2.gguf");
    ok(&gguf(PLUGIN, &["quantize", s, d2.to_str().unwrap(), "demo-attn-q8"]), "quantize by alias");
    assert!(std::fs::read(&d2).unwrap() == std::fs::read(&dst).unwrap(), "alias: a different file");
}

#[test]
fn the_stock_binary_refuses_the_name_listing_the_known_recipes() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in.gguf"), dir.path().join("out.gguf"));
    write(&Tiny::new("llama"), &src, None, &[]).unwrap();
    let o = gguf(STOCK, &["quantize", src.to_str().unwrap(), dst.to_str().unwrap(), "DEMO_ATTN_Q8_0"]);
    assert!(!o.status.success(), "the stock binary accepted the plug-in's recipe");
    let err = String::from_utf8_lossy(&o.stderr);
    let known = err.split_once("known: ").map(|k| k.1).unwrap_or_else(|| panic!("no list of known recipes: {err}"));
    assert!(err.contains("unknown recipe \"DEMO_ATTN_Q8_0\""), "{err}");
    for builtin in ["Q4_0", "Q8_0", "Q4_K_M", "IQ2_XXS", "COPY"] {
        assert!(known.split([',', ' ', '\n']).any(|n| n == builtin), "{builtin} missing from the list: {err}");
    }
    assert!(!known.contains("DEMO_ATTN_Q8_0"));
    assert!(!dst.exists(), "nothing written");
    // The rebuilt binary lists it in its help; the stock one does not.
    let help = |bin| ok(&gguf(bin, &["quantize", "--help"]), "quantize --help");
    assert!(help(PLUGIN).contains("DEMO_ATTN_Q8_0 / demo-attn-q8"));
    assert!(!help(STOCK).contains("DEMO_ATTN_Q8_0"));
}

#[test]
fn types_check_lists_the_plugin_and_is_sound() {
    let plug = ok(&gguf(PLUGIN, &["types", "--check"]), "types --check");
    let stock = ok(&gguf(STOCK, &["types", "--check"]), "stock types --check");
    let count = |s: &str| -> usize {
        let l = s.lines().find(|l| l.starts_with("recipes: ")).unwrap_or_else(|| panic!("{s}"));
        assert!(l.contains("0 problem(s)") && l.ends_with(": ok"), "{l}");
        l["recipes: ".len()..].split_whitespace().next().unwrap().parse().unwrap()
    };
    assert_eq!(count(&plug), count(&stock) + 1, "one recipe more with the plug-in:\n{plug}\n{stock}");
    assert!(!plug.contains("PROBLEMS"), "{plug}");
}
