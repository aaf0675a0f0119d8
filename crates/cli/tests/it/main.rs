//! End-to-end tests of the `gguf` binary on small files written by our own writer.

mod bench;
mod chat;
mod device;
mod embed;
mod engine;
mod hostile;
mod interrupt;
mod sampling;
mod split;
mod split_model;
mod workflow;

use std::path::{Path, PathBuf};
use std::process::Command;

use gguf_format::{Array, GgufWriter, Value};

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn gguf(args: &[&str]) -> Out {
    let o =
        Command::new(env!("CARGO_BIN_EXE_gguf")).args(args).env("GGUF_CACHE", "/nonexistent-cache").output().unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn sample(dir: &Path) -> (PathBuf, Vec<f32>) {
    use ggml_quants as gq;
    let path = dir.join("sample.gguf");
    let x: Vec<f32> = (0..64 * 2).map(|i| (i as f32 - 64.0) / 16.0).collect();
    let q8 = gq::by_name("q8_0").unwrap().quantize_to_vec(&x, 64, None).unwrap();
    let f32b: Vec<u8> = x[..64].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "llama");
    w.add_kv("general.name", "sample");
    w.add_kv("llama.block_count", 1u32);
    w.add_kv("llama.rope.freq_base", 10000.0f32);
    w.add_kv("tokenizer.ggml.add_bos_token", true);
    w.add_kv("tokenizer.ggml.tokens", Array::String((0..20).map(|i| format!("t{i}").into_bytes()).collect()));
    w.add_kv("tokenizer.ggml.scores", Value::Array(Array::F32((0..20).map(|i| i as f32 * 0.5).collect())));
    w.add_tensor_owned("blk.0.attn_q.weight", &[64, 2], 8, q8).unwrap();
    w.add_tensor_owned("output_norm.weight", &[64], 0, f32b).unwrap();
    w.write_to_path(&path).unwrap();
    (path, x)
}

#[test]
fn inspect_text_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = sample(dir.path());
    let o = gguf(&["inspect", path.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = o.stdout.replace(path.to_str().unwrap(), "<FILE>");
    insta::assert_snapshot!("inspect_text", text);
}

#[test]
fn inspect_names_the_architecture_and_what_this_build_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = sample(dir.path());
    let o = gguf(&["inspect", path.to_str().unwrap()]);
    assert!(o.stdout.contains("engine:    architecture `llama` runs in this build"), "{}", o.stdout);
    let f = gguf_format::GgufFile::open(&path).unwrap();
    let mut w = GgufWriter::from_file(&f).unwrap();
    w.add_kv("general.architecture", "nonesuch");
    let other = dir.path().join("other.gguf");
    w.write_to_path(&other).unwrap();
    let o = gguf(&["inspect", other.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let line = o.stdout.lines().find(|l| l.starts_with("engine:")).unwrap_or_default().to_string();
    assert!(line.contains("`nonesuch` is not one this build runs"), "{line}");
    for a in ["gpt-oss", "glm4moe", "lfm2", "mistral3", "qwen35", "gemma4", "llama"] {
        assert!(line.contains(a), "{a} missing from {line}");
    }
    // no settings for an architecture this build does not run
    assert!(!o.stdout.lines().any(|l| l.starts_with("model:")), "{}", o.stdout);
    let j = gguf(&["inspect", "--json", other.to_str().unwrap()]);
    assert_eq!(j.code, 0, "{}", j.stderr);
    let j: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    assert_eq!(j["engine"]["architecture"], "nonesuch");
    assert_eq!(j["engine"]["runs"], false);
    let known: Vec<&str> = j["engine"]["known"].as_array().unwrap().iter().filter_map(|k| k.as_str()).collect();
    for a in ["gpt-oss", "glm4moe", "lfm2", "mistral3", "qwen35", "gemma4", "llama"] {
        assert!(known.contains(&a), "{a} missing from {known:?}");
    }
    assert!(j["engine"].get("model").is_none() && j["engine"].get("error").is_none(), "{j}");
}

/// The report's `model:` line, if any.
fn model_line(stdout: &str) -> Option<&str> {
    stdout.lines().find_map(|l| l.strip_prefix("model:     "))
}

#[test]
fn inspect_shows_the_family_settings_of_a_file_that_loads() {
    use gguf_models::synthetic::{write, Tiny};
    let dir = tempfile::tempdir().unwrap();
    for arch in ["llama", "qwen3moe", "lfm2"] {
        let path = dir.path().join(format!("{arch}.gguf"));
        write(&Tiny::new(arch), &path, None, &[]).unwrap();
        let o = gguf(&["inspect", path.to_str().unwrap()]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let (_f, model) = gguf_models::load(&path).unwrap();
        assert_eq!(model_line(&o.stdout), Some(model.describe().as_str()), "{}", o.stdout);
        // the same settings in `--json`'s engine object
        let j = gguf(&["inspect", "--json", path.to_str().unwrap()]);
        let j: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
        assert_eq!(j["engine"]["architecture"], arch);
        assert_eq!(j["engine"]["runs"], true);
        assert_eq!(j["engine"]["model"], model.describe().as_str());
        assert!(j["engine"]["known"].as_array().unwrap().iter().any(|k| k == "qwen35"), "{j}");
        // right after the engine line; the rest of the report as before
        let lines: Vec<&str> = o.stdout.lines().collect();
        let at = lines.iter().position(|l| l.starts_with("model:")).unwrap();
        assert_eq!(lines[at - 1], format!("engine:    architecture `{arch}` runs in this build"));
        for part in ["\nmetadata:\n", "\ntensors:\n", "\ntype mix:\n", "\nparameters:"] {
            assert!(o.stdout.contains(part), "{part:?} missing: {}", o.stdout);
        }
    }
}

#[test]
fn inspect_names_what_stops_a_known_architecture_from_loading() {
    use gguf_models::synthetic::{write, Tiny};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write(&Tiny::new("llama"), &path, Some("blk.1.ffn_down.weight"), &[]).unwrap();
    let o = gguf(&["inspect", path.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    let line = model_line(&o.stdout).unwrap_or_default();
    assert!(line.starts_with("does not load: ") && line.contains("`blk.1.ffn_down.weight`"), "{}", o.stdout);
    let j = gguf(&["inspect", "--json", path.to_str().unwrap()]);
    let j: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    assert!(j["engine"]["error"].as_str().unwrap().contains("`blk.1.ffn_down.weight`"), "{j}");
    assert!(j["engine"].get("model").is_none(), "{j}");
    assert!(o.stdout.contains("blk.1.ffn_up.weight"), "the tensor table is still there: {}", o.stdout);
    // a missing hyperparameter is named the same way
    let f = gguf_format::GgufFile::open(&path).unwrap();
    let mut w = GgufWriter::from_file(&f).unwrap();
    w.metadata_mut().remove("llama.embedding_length");
    let other = dir.path().join("k.gguf");
    w.write_to_path(&other).unwrap();
    let o = gguf(&["inspect", other.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let line = model_line(&o.stdout).unwrap_or_default();
    assert!(line.starts_with("does not load: ") && line.contains("llama.embedding_length"), "{}", o.stdout);
}

#[test]
fn inspect_json_has_every_key_and_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = sample(dir.path());
    let o = gguf(&["inspect", "--json", path.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(j["metadata"].as_array().unwrap().len(), 7);
    assert_eq!(j["metadata"][5]["len"], 20);
    assert_eq!(j["metadata"][5]["truncated"], true);
    assert_eq!(j["metadata"][5]["value"].as_array().unwrap().len(), 8);
    assert_eq!(j["tensors"][0]["type"], "q8_0");
    assert_eq!(j["tensors"][0]["shape"], serde_json::json!([64, 2]));
    assert_eq!(j["tensors"][1]["offset"], 160);
    assert_eq!(j["parameters"], 192);
    let full = gguf(&["inspect", "--json", "--full", path.to_str().unwrap()]);
    let j: serde_json::Value = serde_json::from_str(&full.stdout).unwrap();
    assert_eq!(j["metadata"][5]["value"].as_array().unwrap().len(), 20);
    assert_eq!(j["metadata"][6]["value"][3], 1.5);
}

#[test]
fn dequant_writes_raw_f32_in_stored_order() {
    let dir = tempfile::tempdir().unwrap();
    let (path, x) = sample(dir.path());
    let out = dir.path().join("t.f32");
    let o = gguf(&["dequant", path.to_str().unwrap(), "output_norm.weight", "-o", out.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let bytes = std::fs::read(&out).unwrap();
    let got: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(got, x[..64]);
    let out2 = dir.path().join("q.f32");
    let o = gguf(&["dequant", path.to_str().unwrap(), "blk.0.attn_q.weight", "-o", out2.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::metadata(&out2).unwrap().len(), 128 * 4);
}

fn assert_clean_error(o: &Out, needle: &str) {
    assert_ne!(o.code, 0);
    assert!(o.stdout.is_empty(), "stdout: {}", o.stdout);
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {}", o.stderr);
    assert!(lines[0].starts_with("error: ") && lines[0].contains(needle), "{}", o.stderr);
}

#[test]
fn errors_are_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = sample(dir.path());
    let p = path.to_str().unwrap();
    assert_clean_error(&gguf(&["inspect", "/no/such/file.gguf"]), "/no/such/file.gguf");
    let out = dir.path().join("x.f32");
    let o = gguf(&["dequant", p, "nope", "-o", out.to_str().unwrap()]);
    assert_clean_error(&o, "no tensor named \"nope\"");
    assert!(!out.exists(), "no output file on error");

    let bytes = std::fs::read(&path).unwrap();
    let trunc = dir.path().join("trunc.gguf");
    std::fs::write(&trunc, &bytes[..100]).unwrap();
    assert_clean_error(&gguf(&["inspect", trunc.to_str().unwrap()]), "truncated");

    let notgguf = dir.path().join("not.gguf");
    std::fs::write(&notgguf, b"hello world, not a gguf").unwrap();
    assert_clean_error(&gguf(&["inspect", notgguf.to_str().unwrap()]), "not a GGUF file");
}

#[test]
fn unknown_tensor_type_keeps_the_file_inspectable() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = sample(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    // Patch the type id of the second tensor (f32 = 0) to an id nobody registers.
    let f = gguf_format::GgufFile::open(&path).unwrap();
    let info = &f.tensors()[1];
    let type_at = info.info_offset as usize + 8 + info.name.len() + 4 + 8 * info.dims.len();
    assert_eq!(&bytes[type_at..type_at + 4], &0u32.to_le_bytes());
    bytes[type_at..type_at + 4].copy_from_slice(&4242u32.to_le_bytes());
    let bad = dir.path().join("unknown.gguf");
    std::fs::write(&bad, &bytes).unwrap();
    let o = gguf(&["inspect", bad.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("type4242"), "{}", o.stdout);
    let out = dir.path().join("y.f32");
    let o = gguf(&["dequant", bad.to_str().unwrap(), "output_norm.weight", "-o", out.to_str().unwrap()]);
    assert_clean_error(&o, "unknown ggml type id 4242");
}

#[test]
fn bad_flags_are_rejected() {
    let o = gguf(&["inspect", "--bogus"]);
    assert_ne!(o.code, 0);
    assert!(o.stderr.contains("--bogus"));
}
