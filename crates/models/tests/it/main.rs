//! End-to-end tests of the engine on tiny random models written with this project's
//! writer: incremental decoding equals batch evaluation, every architecture loads,
//! third-party architectures register, bad files give clear errors.

mod batch;
mod split;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gguf_format::{GgufFile, GgufWriter, SplitGguf, Value};
use gguf_models::synthetic::{write, Tiny};
use gguf_models::{Logits, Model, StateOptions};

fn tmp(name: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join(name);
    (d, p)
}

fn opts(threads: usize) -> StateOptions {
    StateOptions { n_ctx: 64, n_threads: threads, ..Default::default() }
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = a.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Batch evaluation of a sequence and token-by-token decoding through the KV cache
/// give the same logits at every position.
fn check_incremental(model: &dyn Model, n_tokens: usize, threads: usize) {
    let tokens: Vec<u32> = (0..n_tokens as u32).map(|i| (i * 7 + 3) % model.n_vocab() as u32).collect();
    let mut st = model.new_state(&opts(threads)).unwrap();
    let all = model.forward(st.as_mut(), &tokens, Logits::All).unwrap();
    assert_eq!(all.len(), n_tokens * model.n_vocab());
    assert!(all.iter().all(|x| x.is_finite()));
    let mut st2 = model.new_state(&opts(1)).unwrap();
    let v = model.n_vocab();
    for (i, &t) in tokens.iter().enumerate() {
        let l = model.forward(st2.as_mut(), &[t], Logits::Last).unwrap();
        let d = max_rel_diff(&all[i * v..(i + 1) * v], &l);
        assert!(d < 2e-3, "{}: position {i}: relative difference {d}", model.arch());
    }
    assert_eq!(st2.n_past(), n_tokens);
}

#[test]
fn every_builtin_architecture_runs_and_decodes_incrementally() {
    for arch in ["llama", "qwen2", "qwen3", "gemma3", "qwen3moe"] {
        for q8 in [false, true] {
            let mut t = Tiny::new(arch);
            t.q8 = q8;
            let (_d, p) = tmp("m.gguf");
            write(&t, &p, None, &[]).unwrap();
            let (_f, model) = gguf_models::load(&p).unwrap();
            assert_eq!(model.arch(), arch);
            assert_eq!(model.n_vocab(), 50);
            check_incremental(model.as_ref(), 12, 2);
        }
    }
}

#[test]
fn the_sliding_window_changes_gemma3_logits_beyond_the_window() {
    let t = Tiny::new("gemma3");
    let (_d, p) = tmp("g.gguf");
    write(&t, &p, None, &[]).unwrap();
    let (_d2, p2) = tmp("g2.gguf");
    write(&t, &p2, None, &[("gemma3.attention.sliding_window_pattern", Value::U32(1))]).unwrap();
    let tokens: Vec<u32> = (0..10).collect();
    let run = |p: &Path| {
        let (_f, m) = gguf_models::load(p).unwrap();
        let mut st = m.new_state(&opts(1)).unwrap();
        m.forward(st.as_mut(), &tokens, Logits::All).unwrap()
    };
    let (a, b) = (run(&p), run(&p2));
    // within the window (first 4 positions) only the rope base differs; later, the mask too
    assert!(max_rel_diff(&a[9 * 50..], &b[9 * 50..]) > 1e-3);
}

/// `describe` (no weight read) gives what the loaded model's `describe` gives, for the
/// shared transformer and the families with models of their own; a broken file gives the
/// load's error.
#[test]
fn describe_is_the_loaded_models_description() {
    for arch in ["llama", "qwen3moe", "gemma3", "lfm2", "bert"] {
        for q8 in [false, true] {
            let mut t = Tiny::new(arch);
            t.q8 = q8;
            let (_d, p) = tmp("m.gguf");
            write(&t, &p, None, &[]).unwrap();
            let (f, model) = gguf_models::load(&p).unwrap();
            let text = gguf_models::describe(&f).unwrap();
            assert_eq!(text, model.describe());
            assert!(text.starts_with(arch), "{text}");
        }
    }
    let (_d, p) = tmp("m.gguf");
    write(&Tiny::new("llama"), &p, Some("blk.1.ffn_down.weight"), &[]).unwrap();
    let f = Arc::new(SplitGguf::open(&p).unwrap());
    let err = gguf_models::describe(&f).err().unwrap().to_string();
    assert!(err.contains("blk.1.ffn_down.weight"), "{err}");
}

#[test]
fn unknown_architecture_lists_the_known() {
    let t = Tiny::new("mamba9");
    let (_d, p) = tmp("u.gguf");
    write(&t, &p, None, &[]).unwrap();
    let err = gguf_models::load(&p).err().unwrap().to_string();
    assert!(err.contains("mamba9") && err.contains("llama") && err.contains("qwen3moe"), "{err}");
}

#[test]
fn missing_tensor_and_key_are_named() {
    let (_d, p) = tmp("m.gguf");
    write(&Tiny::new("llama"), &p, Some("blk.1.ffn_down.weight"), &[]).unwrap();
    let err = gguf_models::load(&p).err().unwrap().to_string();
    assert!(err.contains("blk.1.ffn_down.weight"), "{err}");

    let file = GgufFile::open(&p).unwrap();
    let mut w = GgufWriter::from_file(&file).unwrap();
    w.metadata_mut().remove("llama.embedding_length");
    let (_d2, p2) = tmp("k.gguf");
    w.write_to_path(&p2).unwrap();
    let err = gguf_models::load(&p2).err().unwrap().to_string();
    assert!(err.contains("llama.embedding_length"), "{err}");
}

#[test]
fn wrong_shape_is_named() {
    let t = Tiny::new("llama");
    let (_d, p) = tmp("s.gguf");
    // head_count 8 with key_length 16 wants attn_q of 128 rows; the file has 64
    write(&t, &p, None, &[("llama.attention.head_count", Value::U32(8))]).unwrap();
    let err = gguf_models::load(&p).err().unwrap().to_string();
    assert!(err.contains("attn_q.weight") && err.contains("shape"), "{err}");
}

#[test]
fn context_overflow_and_bad_token_are_errors() {
    let (_d, p) = tmp("c.gguf");
    write(&Tiny::new("llama"), &p, None, &[]).unwrap();
    let (_f, m) = gguf_models::load(&p).unwrap();
    let mut st = m.new_state(&StateOptions { n_ctx: 8, n_threads: 1, ..Default::default() }).unwrap();
    let err = m.forward(st.as_mut(), &[1; 9], Logits::Last).unwrap_err().to_string();
    assert!(err.contains("9 tokens") && err.contains("context of 8"), "{err}");
    let err = m.forward(st.as_mut(), &[1, 50], Logits::Last).unwrap_err().to_string();
    assert!(err.contains("50") && err.contains("out of range"), "{err}");
}

// A third-party architecture: registered from outside the crate, reusing the shared
// transformer with its own spec.
gguf_models::gguf_registry::submit! {
    gguf_models::Architecture {
        name: "toy-llama",
        load: |file: Arc<SplitGguf>| {
            let ld = gguf_models::loader::Loader::new(&file, "toy-llama");
            let hp = gguf_models::hparams::Hparams::read(&ld)?;
            let mut spec = gguf_models::transformer::Spec::llama(gguf_models::rope::RopeMode::Neox);
            spec.embed_scale = Some(2.0);
            spec.final_softcap = Some(5.0);
            spec.moe_norm_weights = false;
            Ok(Box::new(gguf_models::transformer::Transformer::load(file.clone(), "toy-llama", hp, spec)?))
        },
        ..gguf_models::Architecture::BASE
    }
}

#[test]
fn a_third_party_architecture_registers_and_runs() {
    assert!(gguf_models::architectures().iter().any(|a| a.name == "toy-llama"));
    let r = gguf_models::registry_problems();
    assert!(r.problems.is_empty() && r.overrides.is_empty(), "{r:?}");
    let t = Tiny::new("toy-llama");
    let (_d, p) = tmp("t.gguf");
    write(&t, &p, None, &[]).unwrap();
    let (_f, m) = gguf_models::load(&p).unwrap();
    let mut st = m.new_state(&opts(1)).unwrap();
    let l = m.forward(st.as_mut(), &[1, 2, 3], Logits::Last).unwrap();
    assert!(l.iter().all(|x| x.abs() <= 5.0), "softcap applies");
    check_incremental(m.as_ref(), 6, 1);
}

#[test]
fn an_unknown_tensor_type_is_named() {
    let (_d, p) = tmp("x.gguf");
    write(&Tiny::new("llama"), &p, None, &[]).unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    let name = b"blk.0.attn_q.weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    // n_dims (u32), two u64 dims, then the type id
    let ty = at + 4 + 16;
    assert_eq!(u32::from_le_bytes(bytes[ty..ty + 4].try_into().unwrap()), 0);
    bytes[ty..ty + 4].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    let err = gguf_models::load(&p).err().unwrap().to_string();
    assert!(err.contains("blk.0.attn_q.weight") && err.contains("99"), "{err}");
}

#[test]
fn long_batches_take_the_tiled_attention_path_and_still_match_decoding() {
    for arch in ["llama", "gemma3"] {
        let (_d, p) = tmp("long.gguf");
        write(&Tiny::new(arch), &p, None, &[]).unwrap();
        let (_f, model) = gguf_models::load(&p).unwrap();
        let tokens: Vec<u32> = (0..70u32).map(|i| (i * 13 + 5) % 50).collect();
        let o = StateOptions { n_ctx: 128, n_threads: 2, ..Default::default() };
        let mut st = model.new_state(&o).unwrap();
        let all = model.forward(st.as_mut(), &tokens, Logits::All).unwrap();
        let mut st2 = model.new_state(&o).unwrap();
        for (i, &t) in tokens.iter().enumerate() {
            let l = model.forward(st2.as_mut(), &[t], Logits::Last).unwrap();
            let d = max_rel_diff(&all[i * 50..(i + 1) * 50], &l);
            assert!(d < 5e-3, "{arch}: position {i}: relative difference {d}");
        }
    }
}

/// Patches the ggml type id of tensor `name` in a GGUF file's tensor table.
fn patch_tensor_type(path: &Path, name: &str, type_id: u32) {
    let mut b = std::fs::read(path).unwrap();
    let key = name.as_bytes();
    let at = b.windows(key.len()).position(|w| w == key).expect("tensor name in the table");
    let mut p = at + key.len();
    let n_dims = u32::from_le_bytes(b[p..p + 4].try_into().unwrap()) as usize;
    p += 4 + 8 * n_dims;
    b[p..p + 4].copy_from_slice(&type_id.to_le_bytes());
    std::fs::write(path, b).unwrap();
}

#[test]
fn unsupported_tensor_type_is_named() {
    let (_d, p) = tmp("t.gguf");
    write(&Tiny::new("llama"), &p, None, &[]).unwrap();
    // 99: no ggml type has that id; the file stays readable, the model must refuse it.
    patch_tensor_type(&p, "blk.0.attn_q.weight", 99);
    let err = gguf_models::load(&p).err().expect("a weight of an unknown type must not load").to_string();
    assert!(err.contains("blk.0.attn_q.weight"), "{err}");
}
