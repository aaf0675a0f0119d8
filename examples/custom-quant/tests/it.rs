//! A GGUF file using the plug-in type is written, read back through the registry,
//! dequantized and inspected, with no change to any core crate.

use custom_quant::Q8_DEMO_ID;
use gguf_format::{GgufFile, GgufWriter};

// Link the plug-in and the built-in types.
use custom_quant as _;
use ggml_quants as _;

fn data(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect()
}

#[test]
fn plugin_type_is_registered_once() {
    let t = ggml_quants::by_id(Q8_DEMO_ID).expect("q8_demo registered");
    assert_eq!(t.name, "q8_demo");
    assert_eq!(ggml_quants::by_name("q8_demo").map(|t| t.id), Some(Q8_DEMO_ID));
    assert!(ggml_quants::registry_problems().is_empty(), "{:?}", ggml_quants::registry_problems());
    // The built-ins are still there alongside it.
    assert_eq!(ggml_quants::by_name("q4_K").map(|t| t.id), Some(12));
}

#[test]
fn gguf_roundtrip_through_the_registry() {
    let t = ggml_quants::by_id(Q8_DEMO_ID).unwrap();
    let (ne0, ne1) = (64usize, 3usize);
    let x = data(ne0 * ne1);
    let q = t.quantize_to_vec(&x, ne0, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "demo");
    w.add_tensor("demo.weight", &[ne0 as u64, ne1 as u64], Q8_DEMO_ID, &q).unwrap();
    w.write_to_path(&path).unwrap();

    let f = GgufFile::open(&path).unwrap();
    let info = f.tensor("demo.weight").unwrap();
    assert_eq!(info.type_name(), "q8_demo");
    assert_eq!(info.size, Some(q.len() as u64));
    let bytes = f.tensor_data(info).unwrap();
    assert_eq!(bytes, &q[..]);
    let y = info.require_type().unwrap().dequantize_to_vec(bytes).unwrap();
    for (a, b) in x.iter().zip(&y) {
        assert!((a - b).abs() <= 7.2 / 127.0 + 1e-6, "{a} vs {b}");
    }

    let json = gguf_cli::inspect::to_json(&f, false);
    assert_eq!(json["tensors"][0]["type"], "q8_demo");
    assert_eq!(json["type_mix"]["q8_demo"]["tensors"], 1);
}

/// The rebuilt `gguf` (this crate's `gguf-custom-quant`, `fn main` = `gguf_cli::main()`)
/// lists the plug-in type and reads a file that uses it, end to end through the binary.
#[test]
fn a_rebuilt_gguf_binary_knows_the_plugin() {
    let bin = env!("CARGO_BIN_EXE_gguf-custom-quant");
    let out = std::process::Command::new(bin).arg("types").output().unwrap();
    assert!(out.status.success());
    let types = String::from_utf8_lossy(&out.stdout);
    let row = types.lines().find(|l| l.contains("q8_demo")).unwrap_or_else(|| panic!("{types}"));
    assert!(row.trim_start().starts_with(&Q8_DEMO_ID.to_string()), "{row}");
    assert!(types.lines().any(|l| l.contains(" q4_K ")), "the built-ins too: {types}");

    let t = ggml_quants::by_id(Q8_DEMO_ID).unwrap();
    let x = data(64 * 2);
    let q = t.quantize_to_vec(&x, 64, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "demo");
    w.add_tensor("demo.weight", &[64, 2], Q8_DEMO_ID, &q).unwrap();
    w.write_to_path(&path).unwrap();
    let out = std::process::Command::new(bin).arg("inspect").arg(&path).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tensors"][0]["type"], "q8_demo");
    let f32_out = dir.path().join("w.f32");
    let out = std::process::Command::new(bin)
        .args(["dequant", path.to_str().unwrap(), "demo.weight", "-o", f32_out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&f32_out).unwrap().len(), 64 * 2 * 4);
}
