//! `demo-parallel-llama` end to end through the rebuilt binary. The stock binary refuses the
//! file naming the architecture; `gguf-blocks-arch` runs it with the logits the library
//! computes in-process (bit for bit). With every `ffn_down` zero the parallel block equals
//! llama's sequential one, so its logits must equal the built-in llama's bit for bit: the
//! public blocks compute what the built-in transformer computes. With the real FFN weights
//! the two differ: the parallel order is what runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use gguf_format::{GgufFile, GgufWriter};
use gguf_models::synthetic::{write, Tiny};

const WITH: &str = env!("CARGO_BIN_EXE_gguf-blocks-arch");
const WITHOUT: &str = env!("CARGO_BIN_EXE_gguf-without-blocks-arch");
const TOKENS: &str = "1,2,3,4,5,6,7";

/// A tiny llama-layout file under `arch`; with `zero_ffn`, every `ffn_down` is zero.
fn tiny(dir: &Path, arch: &str, zero_ffn: bool) -> PathBuf {
    let name = format!("{arch}{}", if zero_ffn { "-zero" } else { "" });
    let src = dir.join(format!("{name}.src.gguf"));
    write(&Tiny::new(arch).with_tokenizer(), &src, None, &[]).unwrap();
    let p = dir.join(format!("{name}.gguf"));
    let f = GgufFile::open(&src).unwrap();
    let mut w = GgufWriter::new();
    *w.metadata_mut() = f.metadata().clone();
    for t in f.tensors() {
        let mut data = f.tensor_data(t).unwrap().to_vec();
        if zero_ffn && t.name.ends_with("ffn_down.weight") {
            assert_eq!(t.type_id, 0, "f32");
            data.fill(0);
        }
        w.add_tensor_owned(&t.name, &t.dims, t.type_id, data).unwrap();
    }
    w.write_to_path(&p).unwrap();
    p
}

fn logits(bin: &str, model: &Path, out: &Path) -> Vec<f32> {
    let o = Command::new(bin)
        .args(["logits", "-m", model.to_str().unwrap(), "--tokens", TOKENS, "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read(out).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn the_parallel_block_runs_through_the_rebuilt_binary() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let demo = tiny(d, blocks_arch::NAME, false);

    // The stock binary does not know it, and says so by name.
    let o = Command::new(WITHOUT)
        .args(["logits", "-m", demo.to_str().unwrap(), "--tokens", TOKENS, "-o", d.join("x").to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0));
    assert!(err.contains(blocks_arch::NAME), "{err}");

    // The rebuilt one runs it: the library's logits, bit for bit.
    let got = logits(WITH, &demo, &d.join("demo.f32"));
    let (_f, model) = gguf_models::load(&demo).unwrap();
    let mut st = model.new_state(&gguf_models::StateOptions::default()).unwrap();
    let ids: Vec<u32> = TOKENS.split(',').map(|t| t.parse().unwrap()).collect();
    let want = model.forward(st.as_mut(), &ids, gguf_models::Logits::All).unwrap();
    assert!(same_bits(&got, &want), "binary and library differ");

    // With the real FFN, the parallel block is not llama's sequential one.
    let llama = logits(WITH, &tiny(d, "llama", false), &d.join("llama.f32"));
    let differ = got.iter().zip(&llama).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert!(differ > got.len() / 2, "only {differ} of {} logits differ from llama's", got.len());

    // And it generates text, prompt then one token at a time through the cache.
    let o = Command::new(WITH).args(["run", "-m", demo.to_str().unwrap(), "-p", "hi", "-n", "4"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn with_a_zero_ffn_the_blocks_give_the_built_in_llama_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let demo = logits(WITH, &tiny(d, blocks_arch::NAME, true), &d.join("demo.f32"));
    let llama = logits(WITH, &tiny(d, "llama", true), &d.join("llama.f32"));
    assert!(same_bits(&demo, &llama), "the blocks and the built-in transformer differ");
    // Decoding token by token through the KV cache agrees too (the f16 decode path).
    let run = |m: &Path| {
        let o = Command::new(WITH)
            .args(["run", "-m", m.to_str().unwrap(), "-p", "hello", "-n", "12", "--temp", "0", "--json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["tokens"].as_array().unwrap().clone()
    };
    let (a, b) = (run(&tiny(d, blocks_arch::NAME, true)), run(&tiny(d, "llama", true)));
    assert_eq!(a.len(), 12);
    assert_eq!(a, b);
}
