//! `demo-gelu-llama` end to end through the rebuilt binary: the stock binary refuses the
//! file naming the architecture; `gguf-custom-arch` runs it, with the logits the library
//! computes in-process (bit for bit) and not those of the same weights read as `llama`.

use std::path::{Path, PathBuf};
use std::process::Command;

use gguf_models::synthetic::{write, Tiny};
use gguf_models::Logits;

const WITH: &str = env!("CARGO_BIN_EXE_gguf-custom-arch");
const WITHOUT: &str = env!("CARGO_BIN_EXE_gguf-without-custom-arch");

fn tiny(dir: &Path, arch: &str) -> PathBuf {
    let p = dir.join(format!("{arch}.gguf"));
    write(&Tiny::new(arch).with_tokenizer(), &p, None, &[]).unwrap();
    p
}

fn logits(bin: &str, model: &Path, out: &Path) -> std::process::Output {
    Command::new(bin)
        .args(["logits", "-m", model.to_str().unwrap(), "--tokens", "1,2,3,4,5", "-o", out.to_str().unwrap()])
        .output()
        .unwrap()
}

fn f32s(path: &Path) -> Vec<f32> {
    std::fs::read(path).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn the_rebuilt_binary_runs_the_plugin_architecture() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tiny(dir.path(), custom_arch::NAME);
    let llama = tiny(dir.path(), "llama");

    // The stock binary does not know it, and says so by name.
    let o = logits(WITHOUT, &demo, &dir.path().join("x.f32"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0));
    assert!(err.contains("demo-gelu-llama") && err.contains("llama") && err.contains("qwen2"), "{err}");
    assert!(!dir.path().join("x.f32").exists());

    // The rebuilt one runs it: the library's logits, bit for bit.
    let out = dir.path().join("demo.f32");
    let o = logits(WITH, &demo, &out);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let got = f32s(&out);
    let (_f, model) = gguf_models::load(&demo).unwrap();
    let mut st = model.new_state(&gguf_models::StateOptions::default()).unwrap();
    let want = model.forward(st.as_mut(), &[1, 2, 3, 4, 5], Logits::All).unwrap();
    assert_eq!(got.len(), want.len());
    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "binary and library differ");
    assert!(got.iter().all(|v| v.abs() <= 30.0), "soft-cap not applied");

    // The same weights as plain llama (SiLU, no cap) give other logits: the spec applied.
    let out_llama = dir.path().join("llama.f32");
    assert!(logits(WITH, &llama, &out_llama).status.success());
    let base = f32s(&out_llama);
    let differ = got.iter().zip(&base).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert!(differ > got.len() / 2, "only {differ} of {} logits differ from llama's", got.len());

    // And it generates text.
    let o = Command::new(WITH).args(["run", "-m", demo.to_str().unwrap(), "-p", "hi", "-n", "4"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn the_registry_check_counts_the_plugin() {
    let with = Command::new(WITH).args(["types", "--check"]).output().unwrap();
    let without = Command::new(WITHOUT).args(["types", "--check"]).output().unwrap();
    assert!(with.status.success() && without.status.success());
    let line = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stdout).lines().find(|l| l.starts_with("architectures")).unwrap().to_string()
    };
    // This test links the plug-in too: the library's count is the rebuilt binary's.
    let n = gguf_models::architectures().len();
    assert!(line(&with).starts_with(&format!("architectures: {n} registered, 0 problem(s)")), "{}", line(&with));
    assert!(line(&without).starts_with(&format!("architectures: {} registered", n - 1)), "{}", line(&without));
    assert!(gguf_models::architectures().iter().any(|a| a.name == custom_arch::NAME && a.origin == "custom_arch"));
}
