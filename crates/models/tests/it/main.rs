//! End-to-end tests of the engine on tiny random models written with this project's
//! writer: incremental decoding equals batch evaluation, every architecture loads,
//! third-party architectures register, bad files give clear errors.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gguf_format::{GgufFile, GgufWriter, Value};
use models::{Logits, Model, StateOptions};
use rand::{Rng, SeedableRng};

struct Tiny {
    arch: &'static str,
    n_embd: u64,
    n_layer: u64,
    n_head: u64,
    n_head_kv: u64,
    head: u64,
    n_ff: u64,
    n_vocab: u64,
    q8: bool,
    n_expert: u64,
}

impl Tiny {
    fn llama() -> Tiny {
        Tiny {
            arch: "llama",
            n_embd: 64,
            n_layer: 2,
            n_head: 4,
            n_head_kv: 2,
            head: 16,
            n_ff: 96,
            n_vocab: 50,
            q8: false,
            n_expert: 0,
        }
    }
}

fn rand_f32(rng: &mut rand::rngs::StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * scale).collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn write_tiny(t: &Tiny, path: &Path, skip: Option<&str>, extra: &[(&str, Value)]) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut w = GgufWriter::new();
    let a = t.arch;
    w.add_kv("general.architecture", a);
    w.add_kv(&format!("{a}.block_count"), t.n_layer as u32);
    w.add_kv(&format!("{a}.embedding_length"), t.n_embd as u32);
    w.add_kv(&format!("{a}.feed_forward_length"), t.n_ff as u32);
    w.add_kv(&format!("{a}.attention.head_count"), t.n_head as u32);
    w.add_kv(&format!("{a}.attention.head_count_kv"), t.n_head_kv as u32);
    w.add_kv(&format!("{a}.attention.key_length"), t.head as u32);
    w.add_kv(&format!("{a}.attention.value_length"), t.head as u32);
    w.add_kv(&format!("{a}.context_length"), 256u32);
    w.add_kv(&format!("{a}.attention.layer_norm_rms_epsilon"), 1e-5f32);
    if t.n_expert > 0 {
        w.add_kv(&format!("{a}.expert_count"), t.n_expert as u32);
        w.add_kv(&format!("{a}.expert_used_count"), 2u32);
        w.add_kv(&format!("{a}.expert_feed_forward_length"), t.n_ff as u32);
    }
    if a == "gemma3" {
        w.add_kv(&format!("{a}.attention.sliding_window"), 4u32);
    }
    for (k, v) in extra {
        w.add_kv(k, v.clone());
    }
    let q8 = ggml_quants::by_name("q8_0").unwrap();
    let mut add = |name: String, dims: Vec<u64>, scale: f32, ones: bool| {
        if skip == Some(name.as_str()) {
            return;
        }
        let n: u64 = dims.iter().product();
        let mut v = rand_f32(&mut rng, n as usize, scale);
        if ones {
            v.iter_mut().for_each(|x| *x += 1.0);
        }
        if t.q8 && dims.len() >= 2 && dims[0].is_multiple_of(32) {
            let bytes = q8.quantize_to_vec(&v, dims[0] as usize, None).unwrap();
            w.add_tensor_owned(&name, &dims, q8.id, bytes).unwrap();
        } else {
            w.add_tensor_owned(&name, &dims, 0, f32_bytes(&v)).unwrap();
        }
    };
    let (e, hd) = (t.n_embd, t.head);
    add("token_embd.weight".into(), vec![e, t.n_vocab], 1.0, false);
    add("output_norm.weight".into(), vec![e], 0.1, true);
    for il in 0..t.n_layer {
        let n = |s: &str| format!("blk.{il}.{s}");
        add(n("attn_norm.weight"), vec![e], 0.1, true);
        add(n("attn_q.weight"), vec![e, hd * t.n_head], 0.2, false);
        add(n("attn_k.weight"), vec![e, hd * t.n_head_kv], 0.2, false);
        add(n("attn_v.weight"), vec![e, hd * t.n_head_kv], 0.2, false);
        add(n("attn_output.weight"), vec![hd * t.n_head, e], 0.2, false);
        add(n("ffn_norm.weight"), vec![e], 0.1, true);
        if matches!(a, "qwen3" | "qwen3moe" | "gemma3") {
            add(n("attn_q_norm.weight"), vec![hd], 0.1, true);
            add(n("attn_k_norm.weight"), vec![hd], 0.1, true);
        }
        if a == "qwen2" {
            add(n("attn_q.bias"), vec![hd * t.n_head], 0.1, false);
            add(n("attn_k.bias"), vec![hd * t.n_head_kv], 0.1, false);
            add(n("attn_v.bias"), vec![hd * t.n_head_kv], 0.1, false);
        }
        if a == "gemma3" {
            add(n("post_attention_norm.weight"), vec![e], 0.1, true);
            add(n("post_ffw_norm.weight"), vec![e], 0.1, true);
        }
        if t.n_expert > 0 {
            add(n("ffn_gate_inp.weight"), vec![e, t.n_expert], 0.5, false);
            add(n("ffn_gate_exps.weight"), vec![e, t.n_ff, t.n_expert], 0.2, false);
            add(n("ffn_up_exps.weight"), vec![e, t.n_ff, t.n_expert], 0.2, false);
            add(n("ffn_down_exps.weight"), vec![t.n_ff, e, t.n_expert], 0.2, false);
        } else {
            add(n("ffn_gate.weight"), vec![e, t.n_ff], 0.2, false);
            add(n("ffn_up.weight"), vec![e, t.n_ff], 0.2, false);
            add(n("ffn_down.weight"), vec![t.n_ff, e], 0.2, false);
        }
    }
    w.write_to_path(path).unwrap();
}

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
            let mut t = Tiny::llama();
            t.arch = arch;
            t.q8 = q8;
            if arch == "qwen3moe" {
                t.n_expert = 4;
            }
            let (_d, p) = tmp("m.gguf");
            write_tiny(&t, &p, None, &[]);
            let (_f, model) = models::load(&p).unwrap();
            assert_eq!(model.arch(), arch);
            assert_eq!(model.n_vocab(), 50);
            check_incremental(model.as_ref(), 12, 2);
        }
    }
}

#[test]
fn the_sliding_window_changes_gemma3_logits_beyond_the_window() {
    let mut t = Tiny::llama();
    t.arch = "gemma3";
    let (_d, p) = tmp("g.gguf");
    write_tiny(&t, &p, None, &[]);
    let (_d2, p2) = tmp("g2.gguf");
    write_tiny(&t, &p2, None, &[("gemma3.attention.sliding_window_pattern", Value::U32(1))]);
    let tokens: Vec<u32> = (0..10).collect();
    let run = |p: &Path| {
        let (_f, m) = models::load(p).unwrap();
        let mut st = m.new_state(&opts(1)).unwrap();
        m.forward(st.as_mut(), &tokens, Logits::All).unwrap()
    };
    let (a, b) = (run(&p), run(&p2));
    // within the window (first 4 positions) only the rope base differs; later, the mask too
    assert!(max_rel_diff(&a[9 * 50..], &b[9 * 50..]) > 1e-3);
}

#[test]
fn unknown_architecture_lists_the_known() {
    let mut t = Tiny::llama();
    t.arch = "mamba9";
    let (_d, p) = tmp("u.gguf");
    write_tiny(&t, &p, None, &[]);
    let err = models::load(&p).err().unwrap().to_string();
    assert!(err.contains("mamba9") && err.contains("llama") && err.contains("qwen3moe"), "{err}");
}

#[test]
fn missing_tensor_and_key_are_named() {
    let (_d, p) = tmp("m.gguf");
    write_tiny(&Tiny::llama(), &p, Some("blk.1.ffn_down.weight"), &[]);
    let err = models::load(&p).err().unwrap().to_string();
    assert!(err.contains("blk.1.ffn_down.weight"), "{err}");

    let file = GgufFile::open(&p).unwrap();
    let mut w = GgufWriter::from_file(&file).unwrap();
    w.metadata_mut().remove("llama.embedding_length");
    let (_d2, p2) = tmp("k.gguf");
    w.write_to_path(&p2).unwrap();
    let err = models::load(&p2).err().unwrap().to_string();
    assert!(err.contains("llama.embedding_length"), "{err}");
}

#[test]
fn wrong_shape_is_named() {
    let t = Tiny::llama();
    let (_d, p) = tmp("s.gguf");
    // head_count 8 with key_length 16 wants attn_q of 128 rows; the file has 64
    write_tiny(&t, &p, None, &[("llama.attention.head_count", Value::U32(8))]);
    let err = models::load(&p).err().unwrap().to_string();
    assert!(err.contains("attn_q.weight") && err.contains("shape"), "{err}");
}

#[test]
fn context_overflow_and_bad_token_are_errors() {
    let (_d, p) = tmp("c.gguf");
    write_tiny(&Tiny::llama(), &p, None, &[]);
    let (_f, m) = models::load(&p).unwrap();
    let mut st = m.new_state(&StateOptions { n_ctx: 8, n_threads: 1, ..Default::default() }).unwrap();
    let err = m.forward(st.as_mut(), &[1; 9], Logits::Last).unwrap_err().to_string();
    assert!(err.contains("9 tokens") && err.contains("context of 8"), "{err}");
    let err = m.forward(st.as_mut(), &[1, 50], Logits::Last).unwrap_err().to_string();
    assert!(err.contains("50") && err.contains("out of range"), "{err}");
}

// A third-party architecture: registered from outside the crate, reusing the shared
// transformer with its own spec.
models::inventory::submit! {
    models::Architecture {
        name: "toy-llama",
        load: |file: Arc<GgufFile>| {
            let ld = models::loader::Loader::new(&file, "toy-llama");
            let hp = models::hparams::Hparams::read(&ld)?;
            let spec = models::transformer::Spec {
                rope_mode: models::rope::RopeMode::Neox,
                qk_norm: false,
                post_norms: false,
                activation: models::transformer::Activation::Silu,
                embed_scale: Some(2.0),
                attn_scale: None,
                swa: None,
                final_softcap: Some(5.0),
                moe_norm_weights: false,
            };
            Ok(Box::new(models::transformer::Transformer::load(file.clone(), "toy-llama", hp, spec)?))
        },
    }
}

#[test]
fn a_third_party_architecture_registers_and_runs() {
    assert!(models::architectures().iter().any(|a| a.name == "toy-llama"));
    let mut t = Tiny::llama();
    t.arch = "toy-llama";
    let (_d, p) = tmp("t.gguf");
    write_tiny(&t, &p, None, &[]);
    let (_f, m) = models::load(&p).unwrap();
    let mut st = m.new_state(&opts(1)).unwrap();
    let l = m.forward(st.as_mut(), &[1, 2, 3], Logits::Last).unwrap();
    assert!(l.iter().all(|x| x.abs() <= 5.0), "softcap applies");
    check_incremental(m.as_ref(), 6, 1);
}

#[test]
fn an_unknown_tensor_type_is_named() {
    let (_d, p) = tmp("x.gguf");
    write_tiny(&Tiny::llama(), &p, None, &[]);
    let mut bytes = std::fs::read(&p).unwrap();
    let name = b"blk.0.attn_q.weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    // n_dims (u32), two u64 dims, then the type id
    let ty = at + 4 + 16;
    assert_eq!(u32::from_le_bytes(bytes[ty..ty + 4].try_into().unwrap()), 0);
    bytes[ty..ty + 4].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    let err = models::load(&p).err().unwrap().to_string();
    assert!(err.contains("blk.0.attn_q.weight") && err.contains("99"), "{err}");
}
