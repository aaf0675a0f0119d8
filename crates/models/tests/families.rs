//! Issue 15's families on tiny random-weight files written with this project's writer:
//! each loads under its own name, what sets it apart from the llama block has the effect
//! it should (checked against the llama block on the same weights), and bad input — a
//! missing key or tensor, an inconsistent shape — is refused with an error naming it.
//! The comparison with llama.cpp is `cargo xtask verify families`.

use std::path::PathBuf;

use gguf_format::Value;
use gguf_models::synthetic::{write, Tiny};
use gguf_models::{CacheType, Logits, Pooling, StateOptions};

fn tmp(name: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join(name);
    (d, p)
}

/// The logits at every position of `tokens` for the file `t` (with `extra` keys).
fn logits_of(t: &Tiny, extra: &[(&str, Value)], tokens: &[u32]) -> (String, usize, Vec<f32>) {
    let (_d, p) = tmp("m.gguf");
    write(t, &p, None, extra).unwrap();
    let (_f, model) = gguf_models::load(&p).unwrap();
    let mut st = model.new_state(&StateOptions { n_ctx: 64, n_threads: 1, ..Default::default() }).unwrap();
    let all = model.forward(st.as_mut(), tokens, Logits::All).unwrap();
    assert!(all.iter().all(|x| x.is_finite()));
    (model.arch().to_string(), model.n_vocab(), all)
}

/// The error loading `t` (without tensor `skip`, with `extra` keys) gives.
fn load_error(t: &Tiny, skip: Option<&str>, extra: &[(&str, Value)]) -> String {
    let (_d, p) = tmp("bad.gguf");
    write(t, &p, skip, extra).unwrap();
    match gguf_models::load(&p) {
        Ok(_) => panic!("{} loaded without {skip:?} / with {extra:?}", t.arch),
        Err(e) => e.to_string(),
    }
}

/// The model of `t` fed `tokens` one at a time gives each position's logits of one batch
/// (within 2e-2: other kernels for one row); returns the model's description and the
/// state it was left in.
fn decodes_incrementally(t: &Tiny, tokens: &[u32]) -> (String, Box<dyn gguf_models::State>) {
    let (_, v, all) = logits_of(t, &[], tokens);
    let (_d, p) = tmp("inc.gguf");
    write(t, &p, None, &[]).unwrap();
    let (_f, model) = gguf_models::load(&p).unwrap();
    let mut st = model.new_state(&StateOptions { n_ctx: 64, n_threads: 1, ..Default::default() }).unwrap();
    for (i, &tok) in tokens.iter().enumerate() {
        let one = model.forward(st.as_mut(), &[tok], Logits::Last).unwrap();
        let row = &all[i * v..(i + 1) * v];
        let diff = row.iter().zip(&one).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff <= 2e-2, "{}: position {i}: {diff}", t.arch);
    }
    (model.describe(), st)
}

fn rows_differ(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).any(|(x, y)| (x - y).abs() > 1e-4 * x.abs().max(1.0))
}

// ---- smollm3 ----

fn smollm3() -> Tiny {
    let mut t = Tiny::new("smollm3");
    t.n_layer = 4; // layer 3 is the NoPE one
    t
}

#[test]
fn smollm3_drops_rope_on_every_fourth_layer() {
    let tokens = [3u32, 14, 15, 9, 26, 5];
    let (arch, v, smol) = logits_of(&smollm3(), &[], &tokens);
    assert_eq!(arch, "smollm3");
    let mut as_llama = smollm3();
    as_llama.arch = "llama".into();
    let (_, _, llama) = logits_of(&as_llama, &[], &tokens);
    // Position 0 rotates by angle 0: rope or not, the same numbers.
    assert_eq!(smol[..v], llama[..v]);
    // Later positions see layer 3's unrotated Q and K.
    for i in 1..tokens.len() {
        assert!(rows_differ(&smol[i * v..(i + 1) * v], &llama[i * v..(i + 1) * v]), "position {i}");
    }
    // With 3 layers there is no NoPE layer: smollm3 is the llama block.
    let (mut a, mut b) = (smollm3(), smollm3());
    a.n_layer = 3;
    b.n_layer = 3;
    b.arch = "llama".into();
    assert_eq!(logits_of(&a, &[], &tokens).2, logits_of(&b, &[], &tokens).2);
}

#[test]
fn smollm3_bad_input_is_named() {
    let err = load_error(&smollm3(), Some("blk.3.attn_k.weight"), &[]);
    assert!(err.contains("blk.3.attn_k.weight"), "{err}");
    // A llama file relabelled smollm3: its keys are under `llama.`.
    let err = load_error(&Tiny::new("llama"), None, &[("general.architecture", Value::from("smollm3"))]);
    assert!(err.contains("smollm3.block_count"), "{err}");
    // 6 heads of 16 do not match the 64-wide attn_q.
    let err = load_error(&smollm3(), None, &[("smollm3.attention.head_count", Value::U32(6))]);
    assert!(err.contains("blk.0.attn_q.weight"), "{err}");
    // Partial rope is not smollm3's.
    let err = load_error(&smollm3(), None, &[("smollm3.rope.dimension_count", Value::U32(8))]);
    assert!(err.contains("n_rot=8"), "{err}");
}

// ---- gpt-oss ----

#[test]
fn gpt_oss_decodes_incrementally_as_in_one_batch() {
    let t = Tiny::new("gpt-oss");
    let tokens = [5u32, 17, 2, 40, 11, 9, 33, 8];
    let (arch, v, all) = logits_of(&t, &[], &tokens);
    assert_eq!(arch, "gpt-oss");
    decodes_incrementally(&t, &tokens);
    // the window (4 on even layers) matters past position 3
    let (_, _, wide) = logits_of(&t, &[("gpt-oss.attention.sliding_window", Value::U32(64))], &tokens);
    assert_eq!(all[..4 * v], wide[..4 * v]);
    assert!(rows_differ(&all[4 * v..], &wide[4 * v..]));
}

#[test]
fn gpt_oss_bad_input_is_named() {
    let t = Tiny::new("gpt-oss");
    for missing in ["blk.1.attn_sinks.weight", "blk.0.ffn_down_exps.bias", "blk.1.attn_output.bias", "output.weight"] {
        let err = load_error(&t, Some(missing), &[]);
        assert!(err.contains(missing), "{missing}: {err}");
    }
    let err = load_error(&t, None, &[("gpt-oss.expert_count", Value::U32(0))]);
    assert!(err.contains("gpt-oss.expert_count"), "{err}");
    let err = {
        let (_d, p) = tmp("bad.gguf");
        write(&t, &p, None, &[]).unwrap();
        let f = gguf_format::GgufFile::open(&p).unwrap();
        let mut w = gguf_format::GgufWriter::from_file(&f).unwrap();
        w.metadata_mut().remove("gpt-oss.attention.sliding_window");
        let p2 = p.with_extension("2.gguf");
        w.write_to_path(&p2).unwrap();
        gguf_models::load(&p2).err().expect("no window must not load").to_string()
    };
    assert!(err.contains("gpt-oss.attention.sliding_window"), "{err}");
    let err = load_error(&t, None, &[("gpt-oss.expert_used_count", Value::U32(5))]);
    assert!(err.contains("gpt-oss.expert_used_count = 5"), "{err}");
}

// ---- mistral3 ----

#[test]
fn mistral3_is_llama_until_the_attention_temperature_acts() {
    let tokens = [3u32, 14, 15, 9, 26, 5, 31, 2];
    let (arch, v, m3) = logits_of(&Tiny::new("mistral3"), &[], &tokens);
    assert_eq!(arch, "mistral3");
    let (_, _, llama) = logits_of(&Tiny::new("llama"), &[], &tokens);
    assert_eq!(m3, llama, "without a temperature mistral3 is the llama block");
    // β 0.5 over L = 3: rows at positions 0..3 are scaled by 1, later ones by more
    let temp = [
        ("mistral3.attention.temperature_scale", Value::F32(0.5)),
        ("mistral3.rope.scaling.original_context_length", Value::U32(3)),
    ];
    let (_, _, warm) = logits_of(&Tiny::new("mistral3"), &temp, &tokens);
    assert_eq!(warm[..3 * v], llama[..3 * v]);
    assert!(rows_differ(&warm[3 * v..], &llama[3 * v..]));
    // llama.cpp's factor: log(floor(p / L) + 1)·β + 1
    use gguf_models::blocks::temperature;
    assert_eq!(temperature(16383, 0.1, 16384), 1.0);
    assert_eq!(temperature(16384, 0.1, 16384), (2f64.ln() * 0.1f32 as f64 + 1.0) as f32);
    assert_eq!(temperature(3 * 16384 + 5, 0.1, 16384), (4f64.ln() * 0.1f32 as f64 + 1.0) as f32);
}

/// YaRN under `arch` with `extras` (beta fast/slow, log multiplier) on top of the same
/// scaling, for the check that only the families llama.cpp reads them for are moved.
fn yarn_keys(arch: &str, extras: bool) -> Vec<(String, Value)> {
    let mut k = vec![
        (format!("{arch}.rope.scaling.type"), Value::from("yarn")),
        (format!("{arch}.rope.scaling.factor"), Value::F32(4.0)),
        (format!("{arch}.rope.scaling.original_context_length"), Value::U32(8)),
    ];
    if extras {
        k.push((format!("{arch}.rope.scaling.yarn_beta_fast"), Value::F32(8.0)));
        k.push((format!("{arch}.rope.scaling.yarn_beta_slow"), Value::F32(2.0)));
        k.push((format!("{arch}.rope.scaling.yarn_log_multiplier"), Value::F32(0.1)));
    }
    k
}

#[test]
fn yarn_extras_are_read_only_where_llama_cpp_reads_them() {
    let tokens = [3u32, 14, 15, 9, 26, 5, 31, 2];
    for (arch, reads) in [("mistral3", true), ("llama", false), ("qwen3", false)] {
        let t = Tiny::new(arch);
        let logits = |extras| {
            let keys = yarn_keys(arch, extras);
            let keys: Vec<(&str, Value)> = keys.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
            logits_of(&t, &keys, &tokens).2
        };
        let (plain, extra) = (logits(false), logits(true));
        assert_eq!(rows_differ(&plain, &extra), reads, "{arch}: YaRN extras read = {reads}");
    }
}

#[test]
fn mistral3_bad_input_is_named() {
    let err = load_error(&Tiny::new("mistral3"), Some("blk.1.ffn_norm.weight"), &[]);
    assert!(err.contains("blk.1.ffn_norm.weight"), "{err}");
    let err = load_error(&Tiny::new("mistral3"), None, &[("mistral3.rope.dimension_count", Value::U32(8))]);
    assert!(err.contains("rope dims 8"), "{err}");
    let bad = [
        ("mistral3.attention.temperature_scale", Value::F32(0.1)),
        ("mistral3.rope.scaling.original_context_length", Value::U32(0)),
    ];
    let err = load_error(&Tiny::new("mistral3"), None, &bad);
    assert!(err.contains("mistral3.rope.scaling.original_context_length"), "{err}");
}

// ---- glm4moe ----

#[test]
fn glm4moe_runs_its_dense_and_moe_layers_and_decodes_incrementally() {
    let t = Tiny::new("glm4moe");
    let tokens = [5u32, 17, 2, 40, 11, 9, 33, 8];
    let (arch, _, all) = logits_of(&t, &[], &tokens);
    assert_eq!(arch, "glm4moe");
    let (describe, _) = decodes_incrementally(&t, &tokens);
    assert!(describe.contains("glm4moe: 2 layers"), "{describe}");
    // the selection bias and the weight scale take part
    let (_, _, scaled) = logits_of(&t, &[("glm4moe.expert_weights_scale", Value::F32(2.5))], &tokens);
    assert!(rows_differ(&all, &scaled));
    // a last multi-token-prediction block is not run: 3 blocks with 1 MTP block is the 2-layer model
    // whose layer 1 is the last one run (the file has no blk.2 tensors)
    let mut three = Tiny::new("glm4moe");
    three.n_layer = 3;
    let (_, _, mtp) = logits_of(
        &Tiny::new("glm4moe"),
        &[("glm4moe.block_count", Value::U32(3)), ("glm4moe.nextn_predict_layers", Value::U32(1))],
        &tokens,
    );
    assert_eq!(mtp, all);
    let (_, _, full) = logits_of(&three, &[], &tokens);
    assert!(rows_differ(&full, &all));
}

#[test]
fn glm4moe_bad_input_is_named() {
    let t = Tiny::new("glm4moe");
    let err = load_error(&t, Some("blk.1.exp_probs_b.bias"), &[]);
    assert!(err.contains("blk.1.exp_probs_b.bias"), "{err}");
    let err = load_error(&t, Some("blk.1.ffn_up_shexp.weight"), &[]);
    assert!(err.contains("blk.1.ffn_up_shexp.weight"), "{err}");
    let err = load_error(&t, Some("blk.0.ffn_gate.weight"), &[]);
    assert!(err.contains("blk.0.ffn_gate.weight"), "{err}");
    let err = load_error(&t, None, &[("glm4moe.nextn_predict_layers", Value::U32(2))]);
    assert!(err.contains("glm4moe.nextn_predict_layers"), "{err}");
    let err = load_error(&t, None, &[("glm4moe.expert_gating_func", Value::U32(9))]);
    assert!(err.contains("glm4moe.expert_gating_func"), "{err}");
    let err = load_error(&t, None, &[("glm4moe.expert_count", Value::U32(0))]);
    assert!(err.contains("glm4moe.expert_count"), "{err}");
}

// ---- deepseek2 ----

#[test]
fn deepseek2_runs_its_latent_attention_and_decodes_incrementally() {
    let tokens = [5u32, 17, 2, 40, 11, 9, 33, 8];
    for q_lora in [0, 24] {
        let t = Tiny { q_lora, ..Tiny::new("deepseek2") };
        let (arch, _, all) = logits_of(&t, &[], &tokens);
        assert_eq!(arch, "deepseek2");
        let (describe, st) = decodes_incrementally(&t, &tokens);
        assert!(describe.contains(&format!("MLA (q rank {q_lora}, kv rank 32, rope dims 8")), "{describe}");
        // one compressed row per token and layer: 40 f16 values of K, no V
        assert_eq!(st.cache_bytes(), 2 * 64 * 40 * 2, "{describe}");
        // group-limited routing takes part: 2 groups of 2 experts, 1 chosen
        let groups =
            [("deepseek2.expert_group_count", Value::U32(2)), ("deepseek2.expert_group_used_count", Value::U32(1))];
        let (_, _, grouped) = logits_of(&t, &groups, &tokens);
        assert!(rows_differ(&all, &grouped));
        // YaRN changes the rope and the score scale
        let yarn = [
            ("deepseek2.rope.scaling.type", Value::from("yarn")),
            ("deepseek2.rope.scaling.factor", Value::F32(40.0)),
            ("deepseek2.rope.scaling.original_context_length", Value::U32(16)),
            ("deepseek2.rope.scaling.yarn_log_multiplier", Value::F32(0.0707)),
        ];
        let (_, _, scaled) = logits_of(&t, &yarn, &tokens);
        assert!(rows_differ(&all, &scaled));
    }
}

#[test]
fn deepseek2_bad_input_is_named() {
    let t = Tiny::new("deepseek2");
    for missing in ["blk.0.attn_k_b.weight", "blk.1.attn_kv_a_norm.weight", "blk.1.ffn_up_shexp.weight"] {
        let err = load_error(&t, Some(missing), &[]);
        assert!(err.contains(missing), "{err}");
    }
    let err = load_error(&Tiny { q_lora: 24, ..Tiny::new("deepseek2") }, Some("blk.0.attn_q_a_norm.weight"), &[]);
    assert!(err.contains("blk.0.attn_q_a_norm.weight"), "{err}");
    let err = load_error(&t, None, &[("deepseek2.attention.key_length_mla", Value::U32(0))]);
    assert!(err.contains("deepseek2.attention.key_length_mla") && err.contains("convert"), "{err}");
    let err = load_error(&t, None, &[("deepseek2.attention.key_length", Value::U32(32))]);
    assert!(err.contains("key_length"), "{err}");
    let err = load_error(&t, None, &[("deepseek2.expert_group_count", Value::U32(3))]);
    assert!(err.contains("deepseek2.expert_group_count"), "{err}");
    let err = load_error(&t, None, &[("deepseek2.expert_group_count", Value::U32(2))]);
    assert!(err.contains("deepseek2.expert_group_used_count"), "{err}");
    let err = load_error(
        &t,
        None,
        &[("deepseek2.expert_count", Value::U32(0)), ("deepseek2.expert_used_count", Value::U32(0))],
    );
    assert!(err.contains("deepseek2.expert_count"), "{err}");
    let err = load_error(&t, None, &[("deepseek2.attention.temperature_scale", Value::F32(0.1))]);
    assert!(err.contains("deepseek2.attention.temperature_length"), "{err}");
}

// ---- lfm2 ----

#[test]
fn lfm2_carries_its_conv_state_and_decodes_incrementally() {
    let t = Tiny::new("lfm2");
    let tokens = [5u32, 17, 2, 40, 11, 9, 33, 8];
    let (arch, v, all) = logits_of(&t, &[], &tokens);
    assert_eq!(arch, "lfm2");
    // token by token (the conv state carries the last two inputs) as in one batch
    let (describe, mut st) = decodes_incrementally(&t, &tokens);
    assert!(describe.contains("1 short convolution of 3 taps, 1 attention"), "{describe}");
    // the convolution sees the two tokens before: changing token 0 changes positions 1 and 2
    // even with the attention layer's view of it, and truncating forgets the state
    let mut other = tokens;
    other[0] = 6;
    let (_, _, changed) = logits_of(&t, &[], &other);
    assert!(rows_differ(&changed[v..2 * v], &all[v..2 * v]));
    st.truncate(3);
    assert_eq!(st.n_past(), 0);
}

#[test]
fn lfm2_bad_input_is_named() {
    let t = Tiny::new("lfm2");
    for missing in ["blk.0.shortconv.conv.weight", "blk.1.attn_q_norm.weight", "token_embd_norm.weight"] {
        let err = load_error(&t, Some(missing), &[]);
        assert!(err.contains(missing), "{missing}: {err}");
    }
    let err = load_error(&t, None, &[("lfm2.shortconv.l_cache", Value::U32(1))]);
    assert!(err.contains("lfm2.shortconv.l_cache"), "{err}");
    let err = load_error(&t, None, &[("lfm2.attention.head_count_kv", Value::Array(gguf_format::Array::I32(vec![0])))]);
    assert!(err.contains("lfm2.attention.head_count_kv"), "{err}");
}

#[test]
fn lfm2moe_routes_its_later_layers() {
    let t = Tiny::new("lfm2moe");
    let (describe, _) = decodes_incrementally(&t, &[5u32, 17, 2, 40, 11, 9]);
    assert!(describe.starts_with("lfm2moe: 2 layers") && describe.contains("4 experts (2 used)"), "{describe}");
    let err = load_error(&t, Some("blk.1.exp_probs_b.bias"), &[]);
    assert!(err.contains("blk.1.exp_probs_b.bias"), "{err}");
    let err = load_error(&t, Some("blk.1.ffn_gate_exps.weight"), &[]);
    assert!(err.contains("blk.1.ffn_gate_exps.weight"), "{err}");
    let err = load_error(&t, None, &[("lfm2moe.expert_gating_func", Value::U32(7))]);
    assert!(err.contains("lfm2moe.expert_gating_func"), "{err}");
    // lfm2 itself has no experts
    let err = load_error(&t, None, &[("general.architecture", Value::from("lfm2"))]);
    assert!(err.contains("lfm2.block_count"), "{err}");
}

// ---- granite ----

fn granite_keys(logit: f32) -> Vec<(&'static str, Value)> {
    vec![("granite.logit_scale", Value::F32(logit))]
}

#[test]
fn granite_multipliers_act_where_llama_cpp_applies_them() {
    let tokens = [7u32, 1, 30, 22, 4];
    let granite = Tiny::new("granite");
    let mut as_llama = Tiny::new("granite");
    as_llama.arch = "llama".into();
    let (_, v, llama) = logits_of(&as_llama, &[], &tokens);
    // Neutral multipliers (the attention scale is 1/√16 = 0.25 exactly): the llama block.
    let mut neutral = granite_keys(1.0);
    neutral.push(("granite.attention.scale", Value::F32(0.25)));
    let (arch, _, g) = logits_of(&granite, &neutral, &tokens);
    assert_eq!(arch, "granite");
    assert_eq!(g, llama);
    // logit_scale 8: every logit divided by 8 (a power of two: exact).
    let (_, _, g) = logits_of(&granite, &granite_keys(8.0), &tokens);
    assert_eq!(g, llama.iter().map(|x| x * 0.125).collect::<Vec<_>>());
    // Each of the other multipliers changes the result.
    for (key, value) in [
        ("granite.residual_scale", Value::F32(0.22)),
        ("granite.embedding_scale", Value::F32(12.0)),
        ("granite.attention.scale", Value::F32(0.015625)),
    ] {
        let mut keys = granite_keys(1.0);
        keys.push((key, value));
        let (_, _, g) = logits_of(&granite, &keys, &tokens);
        assert!(rows_differ(&g, &llama), "{key} had no effect");
    }
    // rope.scaling.finetuned = false: no rope anywhere (position 0 alike, later not).
    let mut keys = granite_keys(1.0);
    keys.push(("granite.rope.scaling.finetuned", Value::Bool(false)));
    let (_, _, g) = logits_of(&granite, &keys, &tokens);
    assert_eq!(g[..v], llama[..v]);
    assert!(rows_differ(&g[v..], &llama[v..]));
}

#[test]
fn granite_bad_input_is_named() {
    let t = Tiny::new("granite");
    let err = load_error(&t, None, &[]);
    assert!(err.contains("granite.logit_scale"), "{err}");
    let err = load_error(&t, None, &granite_keys(0.0));
    assert!(err.contains("granite.logit_scale"), "{err}");
    let err = load_error(&t, Some("blk.1.ffn_up.weight"), &granite_keys(8.0));
    assert!(err.contains("blk.1.ffn_up.weight"), "{err}");
    let mut keys = granite_keys(8.0);
    keys.push(("granite.rope.scaling.finetuned", Value::U32(1)));
    let err = load_error(&t, None, &keys);
    assert!(err.contains("granite.rope.scaling.finetuned"), "{err}");
    let mut keys = granite_keys(8.0);
    keys.push(("granite.feed_forward_length", Value::U32(80)));
    let err = load_error(&t, None, &keys);
    assert!(err.contains("blk.0.ffn_gate.weight"), "{err}");
}

// ---- olmo2 ----

/// A 2-layer olmo2 file (64 wide, 4 heads / 2 KV heads of 16): no pre-norms, whole-width
/// QK-norm, post-norms, untied output; `skip` leaves a tensor out, `q_norm` sets
/// `attn_q_norm`'s width.
fn olmo2_file(path: &std::path::Path, skip: Option<&str>, q_norm: u64) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let (e, nh, nkv, hd, ff, nv) = (64u64, 4u64, 2u64, 16u64, 96u64, 50u64);
    let mut w = gguf_format::GgufWriter::new();
    w.add_kv("general.architecture", "olmo2");
    for (k, v) in [
        ("block_count", 2),
        ("embedding_length", e),
        ("feed_forward_length", ff),
        ("attention.head_count", nh),
        ("attention.head_count_kv", nkv),
        ("context_length", 256),
    ] {
        w.add_kv(&format!("olmo2.{k}"), v as u32);
    }
    w.add_kv("olmo2.attention.layer_norm_rms_epsilon", 1e-6f32);
    let mut t = |name: &str, dims: &[u64], mean: f32| {
        if skip == Some(name) {
            return;
        }
        let n: u64 = dims.iter().product();
        let v: Vec<u8> = (0..n).flat_map(|_| (mean + (rng.gen::<f32>() * 2.0 - 1.0) * 0.3).to_le_bytes()).collect();
        w.add_tensor_owned(name, dims, 0, v).unwrap();
    };
    t("token_embd.weight", &[e, nv], 0.0);
    for il in 0..2 {
        let p = |s: &str| format!("blk.{il}.{s}");
        t(&p("attn_q.weight"), &[e, nh * hd], 0.0);
        t(&p("attn_k.weight"), &[e, nkv * hd], 0.0);
        t(&p("attn_v.weight"), &[e, nkv * hd], 0.0);
        t(&p("attn_output.weight"), &[nh * hd, e], 0.0);
        t(&p("attn_q_norm.weight"), &[q_norm], 1.0);
        t(&p("attn_k_norm.weight"), &[nkv * hd], 1.0);
        t(&p("post_attention_norm.weight"), &[e], 1.0);
        t(&p("ffn_gate.weight"), &[e, ff], 0.0);
        t(&p("ffn_up.weight"), &[e, ff], 0.0);
        t(&p("ffn_down.weight"), &[ff, e], 0.0);
        t(&p("post_ffw_norm.weight"), &[e], 1.0);
    }
    t("output_norm.weight", &[e], 1.0);
    t("output.weight", &[e, nv], 0.0);
    w.write_to_path(path).unwrap();
}

#[test]
fn olmo2_runs_without_pre_norms_and_decodes_incrementally() {
    let (_d, p) = tmp("olmo2.gguf");
    olmo2_file(&p, None, 64);
    let (_f, model) = gguf_models::load(&p).unwrap();
    assert_eq!(model.arch(), "olmo2");
    let v = model.n_vocab();
    let tokens = [5u32, 17, 2, 40, 11, 9];
    let opts = StateOptions { n_ctx: 64, n_threads: 1, ..Default::default() };
    let mut st = model.new_state(&opts).unwrap();
    let all = model.forward(st.as_mut(), &tokens, Logits::All).unwrap();
    let mut st1 = model.new_state(&opts).unwrap();
    for (i, &t) in tokens.iter().enumerate() {
        let one = model.forward(st1.as_mut(), &[t], Logits::Last).unwrap();
        let row = &all[i * v..(i + 1) * v];
        let scale = row.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = row.iter().zip(&one).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff <= 2e-3 * scale, "position {i}: {diff} of {scale}");
    }
}

#[test]
fn olmo2_bad_input_is_named() {
    let (_d, p) = tmp("olmo2.gguf");
    // A per-head QK-norm (qwen3's shape) is not olmo2's.
    olmo2_file(&p, None, 16);
    let err = gguf_models::load(&p).err().expect("per-head attn_q_norm must not load").to_string();
    assert!(err.contains("blk.0.attn_q_norm.weight"), "{err}");
    for name in ["output.weight", "blk.1.post_ffw_norm.weight", "blk.0.attn_k_norm.weight"] {
        olmo2_file(&p, Some(name), 64);
        let err = gguf_models::load(&p).err().expect("a missing tensor must not load").to_string();
        assert!(err.contains(name), "{name}: {err}");
    }
}

// ---- gemma2 ----

/// A 4-layer gemma2 file (64 wide, 4 heads / 2 KV heads of 16, 50 tokens): post-norms, no
/// QK-norm, tied output; `skip` leaves a tensor out, `extra` adds keys (after the file's
/// own, so they replace them), `output` adds an untied `output.weight`.
fn gemma2_file(path: &std::path::Path, skip: Option<&str>, extra: &[(&str, Value)], output: bool) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let (e, nh, nkv, hd, ff, nv) = (64u64, 4u64, 2u64, 16u64, 96u64, 50u64);
    let mut w = gguf_format::GgufWriter::new();
    w.add_kv("general.architecture", "gemma2");
    for (k, v) in [
        ("block_count", 4),
        ("embedding_length", e),
        ("feed_forward_length", ff),
        ("attention.head_count", nh),
        ("attention.head_count_kv", nkv),
        ("context_length", 256),
    ] {
        w.add_kv(&format!("gemma2.{k}"), v as u32);
    }
    w.add_kv("gemma2.attention.layer_norm_rms_epsilon", 1e-6f32);
    for (k, v) in extra {
        w.add_kv(k, v.clone());
    }
    let mut t = |name: &str, dims: &[u64], mean: f32| {
        if skip == Some(name) {
            return;
        }
        let n: u64 = dims.iter().product();
        let v: Vec<u8> = (0..n).flat_map(|_| (mean + (rng.gen::<f32>() * 2.0 - 1.0) * 0.5).to_le_bytes()).collect();
        w.add_tensor_owned(name, dims, 0, v).unwrap();
    };
    t("token_embd.weight", &[e, nv], 0.0);
    for il in 0..4 {
        let p = |s: &str| format!("blk.{il}.{s}");
        t(&p("attn_norm.weight"), &[e], 1.0);
        t(&p("attn_q.weight"), &[e, nh * hd], 0.0);
        t(&p("attn_k.weight"), &[e, nkv * hd], 0.0);
        t(&p("attn_v.weight"), &[e, nkv * hd], 0.0);
        t(&p("attn_output.weight"), &[nh * hd, e], 0.0);
        t(&p("post_attention_norm.weight"), &[e], 1.0);
        t(&p("ffn_norm.weight"), &[e], 1.0);
        t(&p("ffn_gate.weight"), &[e, ff], 0.0);
        t(&p("ffn_up.weight"), &[e, ff], 0.0);
        t(&p("ffn_down.weight"), &[ff, e], 0.0);
        t(&p("post_ffw_norm.weight"), &[e], 1.0);
    }
    t("output_norm.weight", &[e], 1.0);
    if output {
        t("output.weight", &[e, nv], 0.0);
    }
    w.write_to_path(path).unwrap();
}

/// gemma2's logits at every position of `tokens` with `extra` keys.
fn gemma2_logits(extra: &[(&str, Value)], tokens: &[u32]) -> (usize, Vec<f32>) {
    let (_d, p) = tmp("gemma2.gguf");
    gemma2_file(&p, None, extra, false);
    let (_f, model) = gguf_models::load(&p).unwrap();
    assert_eq!(model.arch(), "gemma2");
    let mut st = model.new_state(&StateOptions { n_ctx: 64, n_threads: 1, ..Default::default() }).unwrap();
    let all = model.forward(st.as_mut(), tokens, Logits::All).unwrap();
    assert!(all.iter().all(|x| x.is_finite()));
    (model.n_vocab(), all)
}

#[test]
fn gemma2_soft_caps_act_where_llama_cpp_applies_them() {
    let tokens = [3u32, 14, 15, 9, 26, 5, 41];
    let (v, base) = gemma2_logits(&[], &tokens);
    // The default final cap is 30: every logit inside ±30.
    assert!(base.iter().all(|x| x.abs() < 30.0));
    // The final cap is c·tanh(x/c) of the logits: an (almost) linear cap of 1e4 capped
    // again at 2 gives the cap of 2.
    let (_, wide) = gemma2_logits(&[("gemma2.final_logit_softcapping", Value::F32(1e4))], &tokens);
    let (_, tight) = gemma2_logits(&[("gemma2.final_logit_softcapping", Value::F32(2.0))], &tokens);
    assert!(wide.iter().any(|x| x.abs() > 2.0), "logits too small to test the cap");
    for (w, t) in wide.iter().zip(&tight) {
        let want = 2.0 * (w / 2.0).tanh();
        assert!((want - t).abs() <= 1e-4 * want.abs().max(1.0), "{t} vs {want}");
    }
    // The attention cap acts on the scores: position 0 attends to itself alone (softmax
    // of one score is 1, whatever the cap), later positions change.
    let (_, capped) = gemma2_logits(&[("gemma2.attn_logit_softcapping", Value::F32(0.05))], &tokens);
    assert_eq!(capped[..v], base[..v]);
    for i in 1..tokens.len() {
        assert!(rows_differ(&capped[i * v..(i + 1) * v], &base[i * v..(i + 1) * v]), "position {i}");
    }
    // A window of 2 on layers 0 and 2 changes only positions 2 and later.
    let (_, windowed) = gemma2_logits(&[("gemma2.attention.sliding_window", Value::U32(2))], &tokens);
    assert_eq!(windowed[..2 * v], base[..2 * v]);
    assert!(rows_differ(&windowed[2 * v..], &base[2 * v..]));
}

#[test]
fn gemma2_decodes_incrementally_as_in_one_batch() {
    let (_d, p) = tmp("gemma2.gguf");
    gemma2_file(&p, None, &[("gemma2.attention.sliding_window", Value::U32(3))], false);
    let (_f, model) = gguf_models::load(&p).unwrap();
    let v = model.n_vocab();
    let tokens = [5u32, 17, 2, 40, 11, 9, 33, 8];
    let opts = StateOptions { n_ctx: 64, n_threads: 1, ..Default::default() };
    let mut st = model.new_state(&opts).unwrap();
    let all = model.forward(st.as_mut(), &tokens, Logits::All).unwrap();
    let mut st1 = model.new_state(&opts).unwrap();
    for (i, &t) in tokens.iter().enumerate() {
        let one = model.forward(st1.as_mut(), &[t], Logits::Last).unwrap();
        let row = &all[i * v..(i + 1) * v];
        let diff = row.iter().zip(&one).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff <= 2e-2, "position {i}: {diff}");
    }
}

#[test]
fn gemma2_bad_input_is_named() {
    let (_d, p) = tmp("gemma2.gguf");
    for name in ["blk.1.post_ffw_norm.weight", "blk.3.post_attention_norm.weight", "blk.2.attn_v.weight"] {
        gemma2_file(&p, Some(name), &[], false);
        let err = gguf_models::load(&p).err().expect("a missing tensor must not load").to_string();
        assert!(err.contains(name), "{name}: {err}");
    }
    // llama.cpp loads token_embd as the output: a file with its own has a tensor too many.
    gemma2_file(&p, None, &[], true);
    let err = gguf_models::load(&p).err().expect("an untied output must not load").to_string();
    assert!(err.contains("output.weight"), "{err}");
    for key in ["gemma2.final_logit_softcapping", "gemma2.attn_logit_softcapping"] {
        gemma2_file(&p, None, &[(key, Value::F32(0.0))], false);
        let err = gguf_models::load(&p).err().expect("a zero cap must not load").to_string();
        assert!(err.contains(key), "{err}");
        gemma2_file(&p, None, &[(key, Value::from("fifty"))], false);
        let err = gguf_models::load(&p).err().expect("a string cap must not load").to_string();
        assert!(err.contains(key), "{err}");
    }
    // 8 heads of 8 wide do not match the 64-wide attn_k of 2 heads of 16.
    gemma2_file(&p, None, &[("gemma2.attention.head_count", Value::U32(8))], false);
    let err = gguf_models::load(&p).err().expect("inconsistent heads must not load").to_string();
    assert!(err.contains("blk.0.attn_k.weight") || err.contains("blk.0.attn_q.weight"), "{err}");
}

/// Random K/V caches of `n_kv` positions (2 KV heads of 32) and `n` query rows (4 heads)
/// at the last `n` positions, with the values the caches hold, for the attention tests.
struct AttnCase {
    kc: gguf_models::kv_cache::CacheMatrix,
    vc: gguf_models::kv_cache::CacheMatrix,
    kr: Vec<Vec<f32>>,
    vr: Vec<Vec<f32>>,
    q: Vec<f32>,
    n: usize,
    pos0: usize,
}

const ATTN_HEADS: gguf_models::blocks::Heads =
    gguf_models::blocks::Heads { n_head: 4, n_head_kv: 2, head_k: 32, head_v: 32 };

impl AttnCase {
    fn new(ct: gguf_models::CacheType, n: usize, n_kv: usize, n_ctx: usize, seed: u64) -> AttnCase {
        use gguf_models::kv_cache::CacheMatrix;
        use rand::{Rng, SeedableRng};
        let (nh, nkv, hk) = (4usize, 2usize, 32usize);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let new = || CacheMatrix::new(ct, n_ctx, nkv * hk).unwrap();
        let (mut kc, mut vc) = (new(), new());
        let (mut kr, mut vr) = (vec![vec![0f32; nkv * hk]; n_kv], vec![vec![0f32; nkv * hk]; n_kv]);
        for p in 0..n_kv {
            kr[p].iter_mut().for_each(|x| *x = rng.gen::<f32>() * 4.0 - 2.0);
            vr[p].iter_mut().for_each(|x| *x = rng.gen::<f32>() * 2.0 - 1.0);
            kc.write(p, &kr[p]);
            vc.write(p, &vr[p]);
            // the reference reads what the cache holds
            kc.read(p, 0, &mut kr[p]);
            vc.read(p, 0, &mut vr[p]);
        }
        let q: Vec<f32> = (0..n * nh * hk).map(|_| rng.gen::<f32>() * 4.0 - 2.0).collect();
        AttnCase { kc, vc, kr, vr, q, n, pos0: n_kv - n }
    }

    fn attend(&self, pool: &gguf_models::Pool, sc: &gguf_models::blocks::Scores<'_>) -> Vec<f32> {
        use gguf_models::blocks::{attend_with, SeqView};
        let view = [SeqView { row0: 0, n: self.n, pos0: self.pos0, k: &self.kc, v: &self.vc }];
        let mut o = vec![0f32; self.n * 4 * 32];
        attend_with(pool, ATTN_HEADS, &view, &self.q, sc, &mut o);
        o
    }

    /// The largest difference of `o` from an f64 softmax(f(k·q))·V, each head's softmax
    /// with one more term `exp(sink)` where `sinks` has one.
    fn worst(&self, o: &[f32], f: impl Fn(f64) -> f64, sinks: Option<&[f32]>) -> f64 {
        let (nh, nkv, hk) = (4usize, 2usize, 32usize);
        let mut worst = 0f64;
        for t in 0..self.n {
            for h in 0..nh {
                let kvh = h / (nh / nkv);
                let qh = &self.q[(t * nh + h) * hk..(t * nh + h + 1) * hk];
                let s: Vec<f64> = (0..=self.pos0 + t)
                    .map(|j| f(qh.iter().zip(&self.kr[j][kvh * hk..]).map(|(a, b)| *a as f64 * *b as f64).sum()))
                    .collect();
                let sink = sinks.map(|v| v[h] as f64);
                let m = s.iter().cloned().chain(sink).fold(f64::MIN, f64::max);
                let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = w.iter().sum::<f64>() + sink.map_or(0.0, |x| (x - m).exp());
                for d in 0..hk {
                    let want: f64 =
                        w.iter().enumerate().map(|(j, wj)| wj * self.vr[j][kvh * hk + d] as f64).sum::<f64>() / z;
                    worst = worst.max((o[(t * nh + h) * hk + d] as f64 - want).abs());
                }
            }
        }
        worst
    }
}

/// `attend_softcap` against an f64 reference of softmax(c·tanh(k·q·scale/c))·V, over an
/// F16 and a Q8_0 cache, on ggml's three paths (one query: decode; 5 rows: one chunk; 70
/// rows: tiles); without a cap it is `attend` bit for bit.
#[test]
fn attention_soft_cap_matches_a_reference_on_every_path() {
    use gguf_models::blocks::{attend, attend_softcap, SeqView};
    let pool = gguf_models::Pool::new(1);
    for ct in [gguf_models::CacheType::F16, gguf_models::CacheType::Q8_0] {
        for n in [1usize, 5, 70] {
            let c = AttnCase::new(ct, n, n.max(40), 128, 3);
            let view = [SeqView { row0: 0, n, pos0: c.pos0, k: &c.kc, v: &c.vc }];
            let (scale, cap) = (0.25f32, 1.5f32);
            let mut o = vec![0f32; n * 4 * 32];
            attend_softcap(&pool, ATTN_HEADS, &view, &c.q, scale, Some(cap), None, &mut o);
            let mut plain = vec![0f32; n * 4 * 32];
            attend(&pool, ATTN_HEADS, &view, &c.q, scale, None, &mut plain);
            let mut off = vec![0f32; n * 4 * 32];
            attend_softcap(&pool, ATTN_HEADS, &view, &c.q, scale, None, None, &mut off);
            assert_eq!(plain, off, "{ct:?} n={n}");
            let worst = c.worst(&o, |d| cap as f64 * (d * scale as f64 / cap as f64).tanh(), None);
            // q is rounded to f16 (F16 cache) or Q8_0: a few 1e-3 at most
            assert!(worst < 2e-2, "{ct:?} n={n}: {worst}");
            assert!(rows_differ(&o, &plain), "{ct:?} n={n}: the cap had no effect");
        }
    }
}

/// Attention sinks (gpt-oss) against an f64 reference on every path — decode over one
/// chunk and split over two threads' chunks (600 cells), 5 rows, 70 rows in tiles — with
/// sinks above and below the scores; a sink of -1e30 adds `exp(-inf) = 0` and leaves the
/// output bit for bit as without sinks.
#[test]
fn attention_sinks_match_a_reference_on_every_path() {
    use gguf_models::blocks::Scores;
    let pool = gguf_models::Pool::new(2);
    let sinks = [3.0f32, -2.0, 0.5, 9.0];
    for ct in [gguf_models::CacheType::F16, gguf_models::CacheType::Q8_0] {
        for (n, n_kv) in [(1usize, 40usize), (1, 600), (5, 40), (70, 100)] {
            let c = AttnCase::new(ct, n, n_kv, 1024, 5);
            let scale = 0.25f32;
            let plain = c.attend(&pool, &Scores { scale, softcap: None, window: None, sinks: None });
            let low = c.attend(&pool, &Scores { scale, softcap: None, window: None, sinks: Some(&[-1e30; 4]) });
            assert_eq!(plain, low, "{ct:?} n={n} n_kv={n_kv}: a -1e30 sink changed the output");
            let o = c.attend(&pool, &Scores { scale, softcap: None, window: None, sinks: Some(&sinks) });
            let worst = c.worst(&o, |d| d * scale as f64, Some(&sinks));
            assert!(worst < 2e-2, "{ct:?} n={n} n_kv={n_kv}: {worst}");
            assert!(rows_differ(&o, &plain), "{ct:?} n={n} n_kv={n_kv}: the sinks had no effect");
        }
    }
}

// ---- phi3 ----

/// How [`phi3_file`] lays its weights out.
#[derive(Clone, Copy, PartialEq)]
enum Phi3Layout {
    /// phi3: fused `attn_qkv` and gate+up `ffn_up`.
    Fused,
    /// phi3 with separate `attn_q`/`attn_k`/`attn_v` (fused `ffn_up`).
    SeparateQkv,
    /// The same numbers as a qwen2 file: separate Q/K/V, `ffn_gate` and `ffn_up`.
    Qwen2,
}

/// A 2-layer phi3 file (64 wide, 4 heads / 2 KV heads of 16, FFN 96, 50 tokens) whose
/// numbers do not depend on `layout`; `factors` adds LongRoPE short/long factors (original
/// context 32), `skip` leaves a tensor out, `extra` adds keys, `tensors` adds F32 tensors.
fn phi3_file(
    path: &std::path::Path,
    layout: Phi3Layout,
    factors: Option<(f32, f32)>,
    skip: Option<&str>,
    extra: &[(&str, Value)],
    tensors: &[(&str, Vec<u64>)],
) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let (e, nh, nkv, hd, ff, nv) = (64u64, 4u64, 2u64, 16u64, 96u64, 50u64);
    let arch = if layout == Phi3Layout::Qwen2 { "qwen2" } else { "phi3" };
    let mut w = gguf_format::GgufWriter::new();
    w.add_kv("general.architecture", arch);
    for (k, v) in [
        ("block_count", 2),
        ("embedding_length", e),
        ("feed_forward_length", ff),
        ("attention.head_count", nh),
        ("attention.head_count_kv", nkv),
        ("context_length", 256),
        ("rope.scaling.original_context_length", 32),
    ] {
        w.add_kv(&format!("{arch}.{k}"), v as u32);
    }
    w.add_kv(&format!("{arch}.attention.layer_norm_rms_epsilon"), 1e-5f32);
    for (k, v) in extra {
        w.add_kv(k, v.clone());
    }
    let mut rand_vec =
        |n: u64, mean: f32| -> Vec<f32> { (0..n).map(|_| mean + (rng.gen::<f32>() * 2.0 - 1.0) * 0.4).collect() };
    let mut put = |name: &str, dims: &[u64], v: &[f32]| {
        if skip != Some(name) {
            w.add_tensor_owned(name, dims, 0, v.iter().flat_map(|x| x.to_le_bytes()).collect()).unwrap();
        }
    };
    let t = rand_vec(e * nv, 0.0);
    put("token_embd.weight", &[e, nv], &t);
    if let Some((short, long)) = factors {
        put("rope_factors_short.weight", &[hd / 2], &vec![short; hd as usize / 2]);
        put("rope_factors_long.weight", &[hd / 2], &vec![long; hd as usize / 2]);
    }
    for il in 0..2 {
        let p = |s: &str| format!("blk.{il}.{s}");
        put(&p("attn_norm.weight"), &[e], &rand_vec(e, 1.0));
        // rows of `cols` numbers: a part of a fused matrix is a range of its rows
        let (qd, kd) = (nh * hd, nkv * hd);
        let qkv = rand_vec(e * (qd + 2 * kd), 0.0);
        if layout == Phi3Layout::Fused {
            put(&p("attn_qkv.weight"), &[e, qd + 2 * kd], &qkv);
        } else {
            let (q, rest) = qkv.split_at((e * qd) as usize);
            let (k, v) = rest.split_at((e * kd) as usize);
            put(&p("attn_q.weight"), &[e, qd], q);
            put(&p("attn_k.weight"), &[e, kd], k);
            put(&p("attn_v.weight"), &[e, kd], v);
        }
        put(&p("attn_output.weight"), &[qd, e], &rand_vec(qd * e, 0.0));
        put(&p("ffn_norm.weight"), &[e], &rand_vec(e, 1.0));
        let up = rand_vec(e * 2 * ff, 0.0);
        if layout == Phi3Layout::Qwen2 {
            let (g, u) = up.split_at((e * ff) as usize);
            put(&p("ffn_gate.weight"), &[e, ff], g);
            put(&p("ffn_up.weight"), &[e, ff], u);
        } else {
            put(&p("ffn_up.weight"), &[e, 2 * ff], &up);
        }
        put(&p("ffn_down.weight"), &[ff, e], &rand_vec(ff * e, 0.0));
    }
    put("output_norm.weight", &[e], &rand_vec(e, 1.0));
    for (name, dims) in tensors {
        let n = dims.iter().product();
        put(name, dims, &rand_vec(n, 1.0));
    }
    w.write_to_path(path).unwrap();
}

/// The logits of `tokens` (every position) for a [`phi3_file`] at a context of 32.
fn phi3_logits(layout: Phi3Layout, factors: Option<(f32, f32)>, tokens: &[u32]) -> (String, usize, Vec<f32>) {
    let (_d, p) = tmp("phi3.gguf");
    phi3_file(&p, layout, factors, None, &[], &[]);
    let (_f, model) = gguf_models::load(&p).unwrap();
    let mut st = model.new_state(&StateOptions { n_ctx: 32, n_threads: 1, ..Default::default() }).unwrap();
    let all = model.forward(st.as_mut(), tokens, Logits::All).unwrap();
    assert!(all.iter().all(|x| x.is_finite()));
    (model.arch().to_string(), model.n_vocab(), all)
}

#[test]
fn phi3_fused_projections_compute_the_separate_ones() {
    let tokens = [3u32, 14, 15, 9, 26, 5];
    let (arch, _, fused) = phi3_logits(Phi3Layout::Fused, None, &tokens);
    assert_eq!(arch, "phi3");
    let (_, _, separate) = phi3_logits(Phi3Layout::SeparateQkv, None, &tokens);
    // The same rows in one product or three (the kernels pick one arithmetic for
    // both here: every row count a multiple of 4 — llama.cpp fuses for the product's sake).
    assert!(!rows_differ(&fused, &separate));
    // As qwen2 (NeoX rope, separate gate and up, the scale 1/4 on the scores instead of
    // on q — a power of two, exact either way): the llama block of the same numbers.
    let (arch, _, qwen2) = phi3_logits(Phi3Layout::Qwen2, None, &tokens);
    assert_eq!(arch, "qwen2");
    assert!(!rows_differ(&fused, &qwen2));
}

#[test]
fn phi3_short_rope_factors_apply_up_to_the_original_context() {
    let tokens = [3u32, 14, 15, 9, 26, 5];
    let (_, v, plain) = phi3_logits(Phi3Layout::Fused, None, &tokens);
    let (_, _, short) = phi3_logits(Phi3Layout::Fused, Some((4.0, 1.0)), &tokens);
    // Factors divide the rope frequencies: position 0 (angle 0) alike, later positions not.
    assert_eq!(short[..v], plain[..v]);
    assert!(rows_differ(&short[v..], &plain[v..]));
    // The long factors are not used at a context of 32 (= the original one).
    let (_, _, other_long) = phi3_logits(Phi3Layout::Fused, Some((4.0, 9.0)), &tokens);
    assert_eq!(other_long, short);
    // Short factors of 1 are no factors.
    let (_, _, ones) = phi3_logits(Phi3Layout::Fused, Some((1.0, 9.0)), &tokens);
    assert_eq!(ones, plain);
    // A longer context would need the long factors: refused, naming the limit.
    let (_d, p) = tmp("phi3.gguf");
    phi3_file(&p, Phi3Layout::Fused, Some((4.0, 9.0)), None, &[], &[]);
    let (_f, model) = gguf_models::load(&p).unwrap();
    let err = model.new_state(&StateOptions { n_ctx: 33, n_threads: 1, ..Default::default() }).err().unwrap();
    assert!(err.to_string().contains("-c 32"), "{err}");
}

#[test]
fn phi3_bad_input_is_named() {
    let (_d, p) = tmp("phi3.gguf");
    let load_err = |p: &std::path::Path| gguf_models::load(p).err().expect("must not load").to_string();
    for name in ["blk.1.ffn_up.weight", "blk.0.ffn_down.weight", "output_norm.weight"] {
        phi3_file(&p, Phi3Layout::Fused, None, Some(name), &[], &[]);
        let err = load_err(&p);
        assert!(err.contains(name), "{name}: {err}");
    }
    // Without the fused attn_qkv the separate projections are looked for.
    phi3_file(&p, Phi3Layout::Fused, None, Some("blk.1.attn_qkv.weight"), &[], &[]);
    let err = load_err(&p);
    assert!(err.contains("blk.1.attn_q.weight"), "{err}");
    // A qwen2 file relabelled phi3: its keys are under `qwen2.`.
    phi3_file(&p, Phi3Layout::Qwen2, None, None, &[("general.architecture", Value::from("phi3"))], &[]);
    let err = load_err(&p);
    assert!(err.contains("phi3.block_count"), "{err}");
    phi3_file(&p, Phi3Layout::Fused, None, None, &[("phi3.feed_forward_length", Value::U32(64))], &[]);
    let err = load_err(&p);
    assert!(err.contains("blk.0.ffn_up.weight"), "{err}");
    // Q must be n_embd wide: 8 heads of 16 are not.
    phi3_file(&p, Phi3Layout::Fused, None, None, &[("phi3.attention.key_length", Value::U32(8))], &[]);
    let err = load_err(&p);
    assert!(err.contains("n_embd 64 / 4 heads"), "{err}");
    // Rope factors of the wrong length, and the llama-style rope_freqs phi3 does not read.
    phi3_file(&p, Phi3Layout::Fused, None, None, &[], &[("rope_factors_short.weight", vec![4])]);
    let err = load_err(&p);
    assert!(err.contains("rope_factors_short.weight"), "{err}");
    phi3_file(&p, Phi3Layout::Fused, None, None, &[], &[("rope_freqs.weight", vec![8])]);
    let err = load_err(&p);
    assert!(err.contains("rope_freqs.weight"), "{err}");
}

#[test]
fn every_family_is_registered_once() {
    let names: Vec<&str> = gguf_models::architectures().iter().map(|a| a.name).collect();
    for n in [
        "smollm3",
        "granite",
        "olmo2",
        "gemma2",
        "phi3",
        "qwen35",
        "qwen35moe",
        "granitehybrid",
        "gemma4",
        "gpt-oss",
        "mistral3",
        "glm4moe",
    ] {
        assert_eq!(names.iter().filter(|&&x| x == n).count(), 1, "{names:?}");
    }
    assert!(gguf_models::registry_problems().problems.is_empty());
}

// ---- qwen35 ----

/// A 3-layer qwen35 file (64 wide; gated attention 4 heads / 2 KV heads of 16, rope on 8
/// dims, sections 2/1/1/0; delta nets of 2 key heads / 4 value heads of 16, conv 4; FFN
/// 96; 50 tokens): layers 0 and 2 delta nets, layer 1 attention (full_attention_interval
/// 2) — every layer a delta net when `extra` has `attention.recurrent_layers`; `skip`
/// leaves a tensor out, `dims` overrides shapes.
fn qwen35_file(path: &std::path::Path, skip: Option<&str>, extra: &[(&str, Value)], dims: &[(&str, Vec<u64>)]) {
    qwen35_write(path, "qwen35", skip, extra, dims)
}

/// [`qwen35_file`] under `arch`: `qwen35moe` has 4 routed experts of 32 units (2 used)
/// and a shared expert of 48 units with its one-output gate in place of the FFN.
fn qwen35_write(
    path: &std::path::Path,
    arch: &str,
    skip: Option<&str>,
    extra: &[(&str, Value)],
    dims: &[(&str, Vec<u64>)],
) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(35);
    let (e, nh, nkv, hd, ff, nv) = (64u64, 4u64, 2u64, 16u64, 96u64, 50u64);
    let (d_conv, hk, nk, nvh) = (4u64, 16u64, 2u64, 4u64);
    let (kd, vd) = (nk * hk, nvh * hk);
    let ch = 2 * kd + vd;
    let moe = arch == "qwen35moe";
    let (n_exp, ff_exp, ff_sh) = (4u64, 32u64, 48u64);
    let mut w = gguf_format::GgufWriter::new();
    w.add_kv("general.architecture", arch);
    for (k, v) in [
        ("block_count", 3),
        ("embedding_length", e),
        ("feed_forward_length", ff),
        ("attention.head_count", nh),
        ("attention.head_count_kv", nkv),
        ("attention.key_length", hd),
        ("attention.value_length", hd),
        ("rope.dimension_count", 8),
        ("context_length", 256),
        ("full_attention_interval", 2),
        ("ssm.conv_kernel", d_conv),
        ("ssm.state_size", hk),
        ("ssm.group_count", nk),
        ("ssm.time_step_rank", nvh),
        ("ssm.inner_size", vd),
    ] {
        w.add_kv(&format!("{arch}.{k}"), v as u32);
    }
    if moe {
        for (k, v) in [
            ("expert_count", n_exp),
            ("expert_used_count", 2),
            ("expert_feed_forward_length", ff_exp),
            ("expert_shared_feed_forward_length", ff_sh),
        ] {
            w.add_kv(&format!("{arch}.{k}"), v as u32);
        }
    }
    w.add_kv(&format!("{arch}.attention.layer_norm_rms_epsilon"), 1e-6f32);
    w.add_kv(&format!("{arch}.rope.dimension_sections"), gguf_format::Array::I32(vec![2, 1, 1, 0]));
    for (k, v) in extra {
        w.add_kv(k, v.clone());
    }
    let all_delta = extra.iter().any(|(k, _)| *k == format!("{arch}.attention.recurrent_layers"));
    let mut rand_vec =
        |n: u64, mean: f32| -> Vec<f32> { (0..n).map(|_| mean + (rng.gen::<f32>() * 2.0 - 1.0) * 0.4).collect() };
    let mut put = |name: &str, shape: &[u64], mean: f32| {
        let shape = dims.iter().find(|(n, _)| *n == name).map_or(shape.to_vec(), |(_, d)| d.clone());
        let v = rand_vec(shape.iter().product(), mean);
        if skip != Some(name) {
            w.add_tensor_owned(name, &shape, 0, v.iter().flat_map(|x| x.to_le_bytes()).collect()).unwrap();
        }
    };
    put("token_embd.weight", &[e, nv], 0.0);
    for il in 0..3 {
        let p = |s: &str| format!("blk.{il}.{s}");
        put(&p("attn_norm.weight"), &[e], 1.0);
        if il != 1 || all_delta {
            put(&p("attn_qkv.weight"), &[e, ch], 0.0);
            put(&p("attn_gate.weight"), &[e, vd], 0.0);
            put(&p("ssm_conv1d.weight"), &[d_conv, ch], 0.0);
            put(&p("ssm_dt.bias"), &[nvh], 0.0);
            put(&p("ssm_a"), &[nvh], -2.0);
            put(&p("ssm_beta.weight"), &[e, nvh], 0.0);
            put(&p("ssm_alpha.weight"), &[e, nvh], 0.0);
            put(&p("ssm_norm.weight"), &[hk], 1.0);
            put(&p("ssm_out.weight"), &[vd, e], 0.0);
        } else {
            put(&p("attn_q.weight"), &[e, 2 * nh * hd], 0.0);
            put(&p("attn_k.weight"), &[e, nkv * hd], 0.0);
            put(&p("attn_v.weight"), &[e, nkv * hd], 0.0);
            put(&p("attn_output.weight"), &[nh * hd, e], 0.0);
            put(&p("attn_q_norm.weight"), &[hd], 1.0);
            put(&p("attn_k_norm.weight"), &[hd], 1.0);
        }
        put(&p("post_attention_norm.weight"), &[e], 1.0);
        if moe {
            put(&p("ffn_gate_inp.weight"), &[e, n_exp], 0.0);
            put(&p("ffn_gate_exps.weight"), &[e, ff_exp, n_exp], 0.0);
            put(&p("ffn_up_exps.weight"), &[e, ff_exp, n_exp], 0.0);
            put(&p("ffn_down_exps.weight"), &[ff_exp, e, n_exp], 0.0);
            put(&p("ffn_gate_inp_shexp.weight"), &[e], 0.0);
            put(&p("ffn_gate_shexp.weight"), &[e, ff_sh], 0.0);
            put(&p("ffn_up_shexp.weight"), &[e, ff_sh], 0.0);
            put(&p("ffn_down_shexp.weight"), &[ff_sh, e], 0.0);
        } else {
            put(&p("ffn_gate.weight"), &[e, ff], 0.0);
            put(&p("ffn_up.weight"), &[e, ff], 0.0);
            put(&p("ffn_down.weight"), &[ff, e], 0.0);
        }
    }
    put("output_norm.weight", &[e], 1.0);
    w.write_to_path(path).unwrap();
}

fn qwen35_model(extra: &[(&str, Value)]) -> (tempfile::TempDir, Box<dyn gguf_models::Model>) {
    let (d, p) = tmp("qwen35.gguf");
    qwen35_file(&p, None, extra, &[]);
    let (_f, model) = gguf_models::load(&p).unwrap();
    (d, model)
}

fn qwen35_state(model: &dyn gguf_models::Model, n_ubatch: usize) -> Box<dyn gguf_models::State> {
    model.new_state(&StateOptions { n_ctx: 64, n_threads: 2, n_ubatch, ..Default::default() }).unwrap()
}

#[test]
fn qwen35_carries_its_recurrent_state_across_calls() {
    let (_d, model) = qwen35_model(&[]);
    assert_eq!(model.arch(), "qwen35");
    let desc = model.describe();
    assert!(desc.contains("2 gated delta net, 1 gated attention"), "{desc}");
    let v = model.n_vocab();
    let tokens = [3u32, 14, 15, 9, 26, 5, 35, 8];
    let mut st = qwen35_state(model.as_ref(), 512);
    let all = model.forward(st.as_mut(), &tokens, Logits::All).unwrap();
    assert!(all.iter().all(|x| x.is_finite()));
    assert_eq!(st.n_past(), tokens.len());
    // The same tokens in ubatches of 3, and one at a time: the conv and delta-rule states
    // (and the KV cache) carry the sequence from call to call. One token per call runs the
    // one-token kernels (llama.cpp's `ub 1` arithmetic, which `verify families` matches bit
    // for bit), a batch the tile kernels: their rounding differs by up to 1.7e-4 of a logit
    // here (since the convolution sums its taps as the reference does); a state not
    // carried is off by O(1).
    let far = |a: &[f32], b: &[f32]| a.iter().zip(b).any(|(x, y)| (x - y).abs() > 1e-3 * x.abs().max(1.0));
    for ub in [3, 1] {
        let mut st = qwen35_state(model.as_ref(), ub);
        let got = model.forward(st.as_mut(), &tokens, Logits::All).unwrap();
        assert!(!far(&all, &got), "ubatch {ub}");
        let mut st = qwen35_state(model.as_ref(), 512);
        let mut last = Vec::new();
        for &t in &tokens {
            last = model.forward(st.as_mut(), &[t], Logits::Last).unwrap();
        }
        assert!(!far(&all[(tokens.len() - 1) * v..], &last));
    }
    // A recurrent state cannot roll back: truncating forgets the sequence, and the next
    // forward starts it again.
    st.truncate(5);
    assert_eq!(st.n_past(), 0);
    let again = model.forward(st.as_mut(), &tokens, Logits::All).unwrap();
    assert_eq!(again, all);
    assert!(st.cache_bytes() > 0);
}

#[test]
fn qwen35_delta_net_layers_remember_earlier_tokens() {
    // Only delta nets: what position 3 sees of token 0 went through the recurrent state.
    let recr = Value::Array(gguf_format::Array::Bool(vec![true, true, true]));
    let (_d, model) = qwen35_model(&[("qwen35.attention.recurrent_layers", recr)]);
    let desc = model.describe();
    assert!(desc.contains("3 gated delta net, 0 gated attention"), "{desc}");
    let v = model.n_vocab();
    let run = |tokens: &[u32]| {
        let mut st = qwen35_state(model.as_ref(), 512);
        model.forward(st.as_mut(), tokens, Logits::All).unwrap()
    };
    let a = run(&[3, 14, 15, 9]);
    let b = run(&[4, 14, 15, 9]);
    assert!(rows_differ(&a[3 * v..], &b[3 * v..]));
    // causal: a later token does not change earlier logits
    let c = run(&[3, 14, 15, 10]);
    assert_eq!(a[..3 * v], c[..3 * v]);
}

#[test]
fn qwen35_bad_input_is_named() {
    let (_d, p) = tmp("qwen35.gguf");
    let load_err = |p: &std::path::Path| gguf_models::load(p).err().expect("must not load").to_string();
    for name in ["blk.0.ssm_a", "blk.2.ssm_conv1d.weight", "blk.0.attn_gate.weight", "blk.1.attn_q_norm.weight"] {
        qwen35_file(&p, Some(name), &[], &[]);
        let err = load_err(&p);
        assert!(err.contains(name), "{name}: {err}");
    }
    for key in ["ssm.state_size", "ssm.conv_kernel", "rope.dimension_sections"] {
        let (_d2, p2) = tmp("k.gguf");
        // a key removed: the writer's later value for the same key replaces it, so rename
        // the architecture's copy by writing the file without it
        qwen35_file_without_key(&p2, key);
        let err = load_err(&p2);
        assert!(err.contains(&format!("qwen35.{key}")), "{key}: {err}");
    }
    // inconsistent shapes: the conv kernel over the wrong channels, the gated q of one
    // head's rows per head
    qwen35_file(&p, None, &[], &[("blk.0.ssm_conv1d.weight", vec![4, 64])]);
    let err = load_err(&p);
    assert!(err.contains("blk.0.ssm_conv1d.weight"), "{err}");
    qwen35_file(&p, None, &[], &[("blk.1.attn_q.weight", vec![64, 64])]);
    let err = load_err(&p);
    assert!(err.contains("blk.1.attn_q.weight"), "{err}");
    // value heads not a multiple of key heads; key and value state widths that differ
    qwen35_file(&p, None, &[("qwen35.ssm.group_count", Value::U32(3))], &[]);
    let err = load_err(&p);
    assert!(err.contains("qwen35.ssm.group_count"), "{err}");
    qwen35_file(&p, None, &[("qwen35.ssm.inner_size", Value::U32(128))], &[]);
    let err = load_err(&p);
    assert!(err.contains("qwen35.ssm.state_size"), "{err}");
    // a rotated pair in the fourth M-RoPE section
    qwen35_file(
        &p,
        None,
        &[("qwen35.rope.dimension_sections", Value::Array(gguf_format::Array::I32(vec![1, 1, 1, 1])))],
        &[],
    );
    let err = load_err(&p);
    assert!(err.contains("qwen35.rope.dimension_sections"), "{err}");
}

/// [`qwen35_file`] without the metadata key `qwen35.{key}`.
fn qwen35_file_without_key(path: &std::path::Path, key: &str) {
    qwen35_file(path, None, &[], &[]);
    let f = gguf_format::GgufFile::open(path).unwrap();
    let mut w = gguf_format::GgufWriter::from_file(&f).unwrap();
    w.metadata_mut().remove(&format!("qwen35.{key}"));
    let tmp = path.with_extension("tmp.gguf");
    w.write_to_path(&tmp).unwrap();
    drop(f);
    std::fs::rename(&tmp, path).unwrap();
}

// ---- gemma4 ----

/// What a tiny gemma4 file holds beyond the defaults of [`gemma4_file`].
#[derive(Default)]
struct G4 {
    /// Layer 1 gets an `attn_v` equal to its `attn_k` (else it has none: V = K).
    v_copy_of_k: bool,
    /// No per-layer embeddings (`embedding_length_per_layer_input` 0, none of their tensors).
    no_per_layer: bool,
    /// Every layer's per-layer projection `blk.N.proj` all zeros.
    zero_proj: bool,
    /// 26B-A4B's MoE layers: 4 routed experts of 32 (2 used) beside every FFN.
    moe: bool,
    /// With `moe`: gate and up as one `ffn_gate_up_exps` (else split), same values.
    fused: bool,
    /// With `moe`: every `ffn_down_exps.scale` this value (else drawn).
    expert_scale: Option<f32>,
}

/// A 4-layer gemma4 file (64 wide; 2 heads / 1 KV head, 16 wide on the windowed layers 0
/// and 2 (window 4, rope on 16 dims), 32 wide on the global layers 1 and 3 (proportional
/// rope: rope_freqs 1 for 4 of 16 pairs, 1e30 for the rest); the last two layers share the
/// first two's KV caches; FFN 96, 192 on the shared layers; per-layer embeddings of 8; 50
/// tokens), layer 1 without `attn_v`. `skip` leaves a tensor out, `dims` overrides shapes,
/// `drop_key` leaves a `gemma4.*` key out.
fn gemma4_file(
    path: &std::path::Path,
    g: &G4,
    skip: Option<&str>,
    extra: &[(&str, Value)],
    dims: &[(&str, Vec<u64>)],
    drop_key: Option<&str>,
) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let (e, nh, nkv, h_swa, h_full, nv) = (64u64, 2u64, 1u64, 16u64, 32u64, 50u64);
    // the per-layer tensors' values are drawn either way (the other tensors keep theirs)
    let n_pl = 8u64;
    let per_layer_name = |name: &str| {
        name.starts_with("per_layer_") || [".inp_gate.", ".proj.", ".post_norm."].iter().any(|s| name.contains(s))
    };
    let swa = [true, false, true, false];
    let ff = [96i32, 96, 192, 192];
    let arch = "gemma4";
    let mut w = gguf_format::GgufWriter::new();
    w.add_kv("general.architecture", arch);
    let mut keys: Vec<(&str, Value)> = vec![
        ("block_count", Value::U32(4)),
        ("embedding_length", Value::U32(e as u32)),
        ("feed_forward_length", Value::Array(gguf_format::Array::I32(ff.to_vec()))),
        ("attention.head_count", Value::U32(nh as u32)),
        ("attention.head_count_kv", Value::U32(nkv as u32)),
        ("attention.key_length", Value::U32(h_full as u32)),
        ("attention.value_length", Value::U32(h_full as u32)),
        ("attention.key_length_swa", Value::U32(h_swa as u32)),
        ("attention.value_length_swa", Value::U32(h_swa as u32)),
        ("rope.dimension_count", Value::U32(h_full as u32)),
        ("rope.dimension_count_swa", Value::U32(h_swa as u32)),
        ("rope.freq_base", Value::F32(1e6)),
        ("rope.freq_base_swa", Value::F32(1e4)),
        ("context_length", Value::U32(256)),
        ("attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
        ("attention.sliding_window", Value::U32(4)),
        ("attention.sliding_window_pattern", Value::Array(gguf_format::Array::Bool(swa.to_vec()))),
        ("attention.shared_kv_layers", Value::U32(2)),
        ("embedding_length_per_layer_input", Value::U32(if g.no_per_layer { 0 } else { n_pl as u32 })),
        ("final_logit_softcapping", Value::F32(30.0)),
    ];
    let (n_exp, fe) = (4u64, 32u64);
    if g.moe {
        keys.push(("expert_count", Value::U32(n_exp as u32)));
        keys.push(("expert_used_count", Value::U32(2)));
        keys.push(("expert_feed_forward_length", Value::U32(fe as u32)));
    }
    keys.retain(|(k, _)| Some(*k) != drop_key);
    for (k, v) in keys {
        w.add_kv(&format!("{arch}.{k}"), v);
    }
    for (k, v) in extra {
        w.add_kv(k, v.clone());
    }
    let mut rand_vec =
        |n: u64, mean: f32| -> Vec<f32> { (0..n).map(|_| mean + (rng.gen::<f32>() * 2.0 - 1.0) * 0.4).collect() };
    // a tensor of random values around `mean`, or of `data` when given; returns its values
    let mut put = |name: &str, shape: &[u64], mean: f32, data: Option<Vec<f32>>| -> Vec<f32> {
        let shape = dims.iter().find(|(n, _)| *n == name).map_or(shape.to_vec(), |(_, d)| d.clone());
        let n: u64 = shape.iter().product();
        let mut v = data.unwrap_or_else(|| rand_vec(n, mean));
        v.resize(n as usize, 0.5);
        if g.zero_proj && name.ends_with(".proj.weight") {
            v.fill(0.0); // drawn all the same: the other tensors keep their values
        }
        if skip != Some(name) && !(g.no_per_layer && per_layer_name(name)) {
            w.add_tensor_owned(name, &shape, 0, v.iter().flat_map(|x| x.to_le_bytes()).collect()).unwrap();
        }
        v
    };
    put("token_embd.weight", &[e, nv], 0.0, None);
    let half = h_full / 2;
    put("rope_freqs.weight", &[half], 0.0, Some((0..half).map(|i| if i < 4 { 1.0 } else { 1e30 }).collect()));
    {
        put("per_layer_token_embd.weight", &[n_pl * 4, nv], 0.0, None);
        put("per_layer_model_proj.weight", &[e, n_pl * 4], 0.0, None);
        put("per_layer_proj_norm.weight", &[n_pl], 1.0, None);
    }
    for il in 0..4usize {
        let p = |s: &str| format!("blk.{il}.{s}");
        let head = if swa[il] { h_swa } else { h_full };
        let has_kv = il < 2;
        put(&p("attn_norm.weight"), &[e], 1.0, None);
        put(&p("attn_q.weight"), &[e, nh * head], 0.0, None);
        if has_kv {
            let k = put(&p("attn_k.weight"), &[e, nkv * head], 0.0, None);
            if il == 0 {
                put(&p("attn_v.weight"), &[e, nkv * head], 0.0, None);
            } else if g.v_copy_of_k {
                put(&p("attn_v.weight"), &[e, nkv * head], 0.0, Some(k));
            }
            put(&p("attn_k_norm.weight"), &[head], 1.0, None);
        }
        put(&p("attn_output.weight"), &[nh * head, e], 0.0, None);
        put(&p("attn_q_norm.weight"), &[head], 0.3, None);
        put(&p("post_attention_norm.weight"), &[e], 1.0, None);
        put(&p("ffn_norm.weight"), &[e], 1.0, None);
        let f = ff[il] as u64;
        put(&p("ffn_gate.weight"), &[e, f], 0.0, None);
        put(&p("ffn_up.weight"), &[e, f], 0.0, None);
        put(&p("ffn_down.weight"), &[f, e], 0.0, None);
        put(&p("post_ffw_norm.weight"), &[e], 1.0, None);
        if g.moe {
            put(&p("ffn_gate_inp.weight"), &[e, n_exp], 0.0, None);
            put(&p("ffn_gate_inp.scale"), &[e], 1.0, None);
            put(&p("pre_ffw_norm_2.weight"), &[e], 1.0, None);
            put(&p("post_ffw_norm_1.weight"), &[e], 1.0, None);
            put(&p("post_ffw_norm_2.weight"), &[e], 1.0, None);
            // the experts' values from their own generator: the same whether fused or split
            let mut r = rand::rngs::StdRng::seed_from_u64(40 + il as u64);
            let mut draw = |n: u64| -> Vec<f32> { (0..n).map(|_| (r.gen::<f32>() * 2.0 - 1.0) * 0.4).collect() };
            let (gate, up) = (draw(e * fe * n_exp), draw(e * fe * n_exp));
            if g.fused {
                let per = (e * fe) as usize;
                let gu: Vec<f32> = (0..n_exp as usize)
                    .flat_map(|x| gate[x * per..(x + 1) * per].iter().chain(&up[x * per..(x + 1) * per]).copied())
                    .collect();
                put(&p("ffn_gate_up_exps.weight"), &[e, 2 * fe, n_exp], 0.0, Some(gu));
            } else {
                put(&p("ffn_gate_exps.weight"), &[e, fe, n_exp], 0.0, Some(gate));
                put(&p("ffn_up_exps.weight"), &[e, fe, n_exp], 0.0, Some(up));
            }
            put(&p("ffn_down_exps.weight"), &[fe, e, n_exp], 0.0, Some(draw(fe * e * n_exp)));
            let scale = g.expert_scale.map(|v| vec![v; n_exp as usize]);
            put(&p("ffn_down_exps.scale"), &[n_exp], 1.0, scale);
        }
        put(&p("inp_gate.weight"), &[e, n_pl], 0.0, None);
        put(&p("proj.weight"), &[n_pl, e], 0.0, None);
        put(&p("post_norm.weight"), &[e], 1.0, None);
        put(&p("layer_output_scale.weight"), &[1], 0.0, Some(vec![0.8]));
    }
    put("output_norm.weight", &[e], 1.0, None);
    w.write_to_path(path).unwrap();
}

fn gemma4_logits(g: &G4, tokens: &[u32], n_ubatch: usize) -> (String, Vec<f32>) {
    let (_d, p) = tmp("gemma4.gguf");
    gemma4_file(&p, g, None, &[], &[], None);
    let (_f, model) = gguf_models::load(&p).unwrap();
    let mut st = model.new_state(&StateOptions { n_ctx: 64, n_threads: 2, n_ubatch, ..Default::default() }).unwrap();
    let all = model.forward(st.as_mut(), tokens, Logits::All).unwrap();
    assert!(all.iter().all(|x| x.is_finite()));
    (model.describe(), all)
}

#[test]
fn gemma4_runs_its_layer_kinds_across_ubatches() {
    let tokens = [3u32, 14, 15, 9, 26, 5, 35, 8, 2, 41];
    let (desc, all) = gemma4_logits(&G4::default(), &tokens, 512);
    for want in
        ["2 windowed, window 4, heads of 16", "2 global, heads of 32", "2 layers sharing", "1 layers with V = K"]
    {
        assert!(desc.contains(want), "{want}: {desc}");
    }
    // The KV-shared layers read the caches the earlier layers wrote in earlier calls too.
    // (one-token products take other f32 kernels than batches: close, not equal)
    for (ub, tol) in [(3, 1e-4f32), (1, 1e-2)] {
        let (_, got) = gemma4_logits(&G4::default(), &tokens, ub);
        let worst = all.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst < tol, "ubatch {ub}: max diff {worst}");
    }
    // causal: a later token does not change earlier logits; the window and the shared caches
    // make a token 5 positions back still matter through the global layers
    let mut other = tokens;
    other[9] = 40;
    let (_, b) = gemma4_logits(&G4::default(), &other, 512);
    let v = all.len() / tokens.len();
    assert_eq!(all[..9 * v], b[..9 * v]);
    let mut first = tokens;
    first[0] = 4;
    let (_, c) = gemma4_logits(&G4::default(), &first, 512);
    assert!(rows_differ(&all[9 * v..], &c[9 * v..]));
}

#[test]
fn gemma4_v_is_k_without_attn_v() {
    // A layer without attn_v computes what the same layer with attn_v = attn_k does.
    let tokens = [3u32, 14, 15, 9, 26];
    let (d1, a) = gemma4_logits(&G4::default(), &tokens, 512);
    let (d2, b) = gemma4_logits(&G4 { v_copy_of_k: true, ..Default::default() }, &tokens, 512);
    assert!(d1.contains("V = K") && !d2.contains("V = K"), "{d1} / {d2}");
    assert_eq!(a, b);
}

#[test]
fn gemma4_per_layer_embeddings_add_their_projection() {
    // With every per-layer projection zero the per-layer path adds post_norm(0) = 0: the
    // logits of the same file without per-layer embeddings, bit for bit.
    let tokens = [3u32, 14, 15, 9, 26];
    let (_, without) = gemma4_logits(&G4 { no_per_layer: true, ..Default::default() }, &tokens, 512);
    let (_, zero) = gemma4_logits(&G4 { zero_proj: true, ..Default::default() }, &tokens, 512);
    let (_, with) = gemma4_logits(&G4::default(), &tokens, 512);
    assert_eq!(without, zero);
    assert!(rows_differ(&without, &with));
}

#[test]
fn gemma4_bad_input_is_named() {
    let (_d, p) = tmp("gemma4.gguf");
    let g = G4::default();
    let load_err = |p: &std::path::Path| gguf_models::load(p).err().expect("must not load").to_string();
    for name in [
        "rope_freqs.weight",
        "blk.1.attn_k.weight",
        "blk.0.attn_v.weight",
        "blk.3.attn_q_norm.weight",
        "per_layer_model_proj.weight",
        "blk.2.inp_gate.weight",
        "blk.1.post_ffw_norm.weight",
    ] {
        gemma4_file(&p, &g, Some(name), &[], &[], None);
        if name == "blk.0.attn_v.weight" {
            // optional (V = K): then it loads
            continue;
        }
        let err = load_err(&p);
        assert!(err.contains(name), "{name}: {err}");
    }
    gemma4_file(&p, &g, Some("blk.0.attn_v.weight"), &[], &[], None);
    assert!(gguf_models::load(&p).is_ok());
    for key in [
        "attention.key_length_swa",
        "attention.sliding_window",
        "attention.sliding_window_pattern",
        "embedding_length_per_layer_input",
        "feed_forward_length",
    ] {
        gemma4_file(&p, &g, None, &[], &[], Some(key));
        let err = load_err(&p);
        assert!(err.contains(&format!("gemma4.{key}")), "{key}: {err}");
    }
    // inconsistent: too many shared layers, KV heads not dividing the heads, a shared
    // layer of another kind than its source, a pattern of the wrong length, rope factors
    // of the wrong length, a Q projection of the wrong width
    let bad: [(&str, Value, &str); 4] = [
        ("gemma4.attention.shared_kv_layers", Value::U32(3), "gemma4.attention.shared_kv_layers"),
        ("gemma4.attention.head_count_kv", Value::U32(3), "2 query heads and 3 KV heads"),
        (
            "gemma4.attention.sliding_window_pattern",
            Value::Array(gguf_format::Array::Bool(vec![false, true, true, false])),
            "shares the KV cache of layer 0",
        ),
        (
            "gemma4.attention.sliding_window_pattern",
            Value::Array(gguf_format::Array::Bool(vec![true, false])),
            "gemma4.attention.sliding_window_pattern",
        ),
    ];
    for (k, v, want) in bad {
        gemma4_file(&p, &g, None, &[(k, v)], &[], None);
        let err = load_err(&p);
        assert!(err.contains(want), "{k}: {err}");
    }
    gemma4_file(&p, &g, None, &[], &[("rope_freqs.weight", vec![8])], None);
    let err = load_err(&p);
    assert!(err.contains("rope_freqs.weight"), "{err}");
    gemma4_file(&p, &g, None, &[], &[("blk.2.attn_q.weight", vec![64, 64])], None);
    let err = load_err(&p);
    assert!(err.contains("blk.2.attn_q.weight"), "{err}");
}

#[test]
fn gemma4_moe_layers_route_beside_the_shared_ffn() {
    let tokens = [3u32, 14, 15, 9, 26, 5, 35, 8, 2, 41];
    let moe = G4 { moe: true, ..Default::default() };
    let (desc, all) = gemma4_logits(&moe, &tokens, 512);
    assert!(desc.contains("4 MoE layers (4 experts, 2 used"), "{desc}");
    // fused gate+up experts compute what the split ones do, bit for bit
    let (_, fused) = gemma4_logits(&G4 { moe: true, fused: true, ..Default::default() }, &tokens, 512);
    assert_eq!(all, fused);
    // the experts act: scaled to zero (post_norm_2(0) = 0) the logits change
    let (_, dense) = gemma4_logits(&G4::default(), &tokens, 512);
    assert!(rows_differ(&all, &dense));
    let (_, silent) = gemma4_logits(&G4 { moe: true, expert_scale: Some(0.0), ..Default::default() }, &tokens, 512);
    assert!(rows_differ(&all, &silent));
    // routing per token: a batch of 3 and of 512 route alike
    let (_, ub3) = gemma4_logits(&moe, &tokens, 3);
    let worst = all.iter().zip(&ub3).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-3, "ubatch 3: max diff {worst}");
}

#[test]
fn gemma4_moe_bad_input_is_named() {
    let (_d, p) = tmp("gemma4moe.gguf");
    let load_err = |p: &std::path::Path| gguf_models::load(p).err().expect("must not load").to_string();
    for (g, name) in [
        (G4 { moe: true, ..Default::default() }, "blk.0.ffn_gate_inp.scale"),
        (G4 { moe: true, ..Default::default() }, "blk.1.pre_ffw_norm_2.weight"),
        (G4 { moe: true, ..Default::default() }, "blk.2.post_ffw_norm_1.weight"),
        (G4 { moe: true, ..Default::default() }, "blk.3.ffn_up_exps.weight"),
        (G4 { moe: true, fused: true, ..Default::default() }, "blk.3.ffn_down_exps.weight"),
    ] {
        gemma4_file(&p, &g, Some(name), &[], &[], None);
        let err = load_err(&p);
        assert!(err.contains(name), "{name}: {err}");
    }
    let moe = G4 { moe: true, ..Default::default() };
    for key in ["expert_count", "expert_feed_forward_length"] {
        gemma4_file(&p, &moe, None, &[], &[], Some(key));
        let err = load_err(&p);
        assert!(err.contains(&format!("gemma4.{key}")), "{key}: {err}");
    }
    gemma4_file(&p, &moe, None, &[("gemma4.expert_used_count", Value::U32(5))], &[], None);
    let err = load_err(&p);
    assert!(err.contains("gemma4.expert_used_count"), "{err}");
    gemma4_file(&p, &moe, None, &[], &[("blk.0.ffn_down_exps.scale", vec![3])], None);
    let err = load_err(&p);
    assert!(err.contains("blk.0.ffn_down_exps.scale"), "{err}");
}

// ---- bert, nomic-bert (encoders) ----

fn encoder(arch: &str) -> Tiny {
    let mut t = Tiny::new(arch);
    t.n_head_kv = t.n_head;
    t
}

/// The model of `t` (written without `skip`, with `extra`), loaded.
fn load_encoder(
    t: &Tiny,
    skip: Option<&str>,
    extra: &[(&str, Value)],
) -> (tempfile::TempDir, Box<dyn gguf_models::Model>) {
    let (d, p) = tmp("enc.gguf");
    write(t, &p, skip, extra).unwrap();
    let (_f, model) = gguf_models::load(&p).unwrap();
    (d, model)
}

fn embed(model: &dyn gguf_models::Model, seqs: &[&[u32]], pooling: Pooling) -> Vec<Vec<f32>> {
    let pool = gguf_models::Pool::new(2);
    let enc = model.encoder().expect("an encoder");
    let out = enc.embed(&pool, seqs, pooling).unwrap();
    assert!(out.iter().flatten().all(|x| x.is_finite()));
    out
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn encoders_load_pool_and_refuse_decoding() {
    let seq: &[u32] = &[2, 7, 30, 11, 41, 3];
    for arch in ["bert", "nomic-bert"] {
        let (_d, model) = load_encoder(&encoder(arch), None, &[]);
        assert_eq!(model.arch(), arch);
        assert!(model.describe().contains("encoder"), "{}", model.describe());
        let enc = model.encoder().unwrap();
        assert_eq!((enc.n_embd_out(), enc.n_cls_out(), enc.pooling()), (64, 2, Pooling::Mean));
        let err = model.new_state(&StateOptions::default()).err().unwrap().to_string();
        assert!(err.contains("gguf embed"), "{err}");
        let none = embed(model.as_ref(), &[seq], Pooling::None).remove(0);
        assert_eq!(none.len(), seq.len() * 64);
        let rows: Vec<&[f32]> = none.chunks(64).collect();
        // every row is LayerNorm'd output: different per token
        assert!(rows_differ(rows[0], rows[1]));
        let cls = embed(model.as_ref(), &[seq], Pooling::Cls).remove(0);
        assert_eq!(bits(&cls), bits(rows[0]), "{arch}: cls is the first row");
        let last = embed(model.as_ref(), &[seq], Pooling::Last).remove(0);
        assert_eq!(bits(&last), bits(rows[seq.len() - 1]), "{arch}: last is the last row");
        let mean = embed(model.as_ref(), &[seq], Pooling::Mean).remove(0);
        for (c, m) in mean.iter().enumerate() {
            let want = rows.iter().map(|r| r[c] as f64).sum::<f64>() / rows.len() as f64;
            assert!((*m as f64 - want).abs() < 1e-5, "{arch}: mean channel {c}: {m} vs {want}");
        }
        let rank = embed(model.as_ref(), &[seq], Pooling::Rank).remove(0);
        assert_eq!(rank.len(), 2);
        assert!(rank != cls[..2], "{arch}: the classifier head ran");
    }
}

#[test]
fn encoder_sequences_do_not_depend_on_each_other_and_attend_both_ways() {
    for arch in ["bert", "nomic-bert"] {
        let (_d, model) = load_encoder(&encoder(arch), None, &[]);
        let a: Vec<u32> = (0..70).map(|i| (i * 7 % 48) + 2).collect(); // 70 rows: the tiled path
        let b: &[u32] = &[2, 9, 3];
        for pooling in [Pooling::None, Pooling::Mean, Pooling::Cls] {
            let alone = embed(model.as_ref(), &[&a], pooling);
            let both = embed(model.as_ref(), &[b, &a, b], pooling);
            assert_eq!(bits(&alone[0]), bits(&both[1]), "{arch} {pooling:?}");
            assert_eq!(bits(&both[0]), bits(&both[2]), "{arch} {pooling:?}");
        }
        // non-causal: a later token changes the first token's output
        for s in [&a[..5], &a[..]] {
            let mut c = s.to_vec();
            *c.last_mut().unwrap() = 47;
            let x = embed(model.as_ref(), &[s, &c], Pooling::Cls);
            assert!(rows_differ(&x[0], &x[1]), "{arch}: {} tokens", s.len());
        }
    }
}

/// `attend_full` is softmax attention of every row over all of its sequence's cells
/// (K and V rounded to f16), below 64 rows and in 64-row tiles.
#[test]
fn attend_full_sees_the_whole_sequence() {
    use gguf_models::blocks::{attend_full, Heads, Scores, SeqView};
    use gguf_models::kv_cache::CacheMatrix;
    let heads = Heads { n_head: 2, n_head_kv: 1, head_k: 32, head_v: 32 };
    let mut seed = 5u32;
    let mut r = || {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        (seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
    };
    let pool = gguf_models::Pool::new(2);
    for n in [1usize, 9, 64, 100] {
        let k: Vec<f32> = (0..n * 32).map(|_| r() * 2.0).collect();
        let v: Vec<f32> = (0..n * 32).map(|_| r()).collect();
        let q: Vec<f32> = (0..n * 64).map(|_| r()).collect();
        let mut kc = CacheMatrix::new(CacheType::F16, n, 32).unwrap();
        let mut vc = CacheMatrix::new(CacheType::F16, n, 32).unwrap();
        for t in 0..n {
            kc.write(t, &k[t * 32..(t + 1) * 32]);
            vc.write(t, &v[t * 32..(t + 1) * 32]);
        }
        let mut o = vec![0f32; n * 64];
        let sc = Scores { scale: 0.25, softcap: None, window: None, sinks: None };
        attend_full(&pool, heads, &[SeqView { row0: 0, n, pos0: 0, k: &kc, v: &vc }], &q, &sc, &mut o);
        let h16 = |x: f32| half::f16::from_f32(x).to_f32() as f64;
        for t in 0..n {
            for h in 0..2 {
                let qr = &q[(t * 2 + h) * 32..(t * 2 + h + 1) * 32];
                let s: Vec<f64> =
                    (0..n).map(|j| 0.25 * (0..32).map(|d| h16(qr[d]) * h16(k[j * 32 + d])).sum::<f64>()).collect();
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for d in 0..32 {
                    let want: f64 = (0..n).map(|j| (s[j] - m).exp() / z * h16(v[j * 32 + d])).sum();
                    let got = o[(t * 2 + h) * 32 + d] as f64;
                    assert!((got - want).abs() < 2e-3, "n={n} row {t} head {h} dim {d}: {got} vs {want}");
                }
            }
        }
    }
}

#[test]
fn layer_norm_is_mean_and_variance_normalization() {
    let x: Vec<f32> = (0..100).map(|i| ((i * 37 % 23) as f32 - 9.0) * 0.7).collect();
    let mut y = x.clone();
    gguf_models::blocks::layer_norm_row(&mut y, 1e-5);
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / 100.0;
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / 100.0;
    for (a, b) in x.iter().zip(&y) {
        let want = (*a as f64 - mean) / (var + 1e-5).sqrt();
        assert!((*b as f64 - want).abs() < 1e-5, "{b} vs {want}");
    }
}

#[test]
fn encoder_bad_input_is_named() {
    let bert = encoder("bert");
    let e = load_error(&bert, Some("position_embd.weight"), &[]);
    assert!(e.contains("position_embd.weight"), "{e}");
    let e = load_error(&bert, Some("blk.1.attn_output_norm.bias"), &[]);
    assert!(e.contains("blk.1.attn_output_norm.bias"), "{e}");
    let e = load_error(&encoder("nomic-bert"), Some("blk.0.ffn_gate.weight"), &[]);
    assert!(e.contains("blk.0.ffn_gate.weight"), "{e}");
    let e = load_error(&bert, None, &[("tokenizer.ggml.token_type_count", Value::U32(0))]);
    assert!(e.contains("tokenizer.ggml.token_type_count"), "{e}");
    let e = load_error(&bert, None, &[("bert.attention.head_count", Value::U32(5))]);
    assert!(e.contains("bert.attention.head_count"), "{e}");
    let e = load_error(&bert, None, &[("bert.pooling_type", Value::U32(9))]);
    assert!(e.contains("bert.pooling_type"), "{e}");
    // token_types is optional (llama.cpp: TENSOR_NOT_REQUIRED), and it is used
    let seq: &[u32] = &[2, 5, 3];
    let (_d, with) = load_encoder(&bert, None, &[]);
    let (_d2, without) = load_encoder(&bert, Some("token_types.weight"), &[]);
    assert!(rows_differ(
        &embed(with.as_ref(), &[seq], Pooling::Cls)[0],
        &embed(without.as_ref(), &[seq], Pooling::Cls)[0]
    ));
    // no classifier head: rank refused by name; too long, empty and out-of-range refused
    let (_d3, plain) = load_encoder(&bert, Some("cls.weight"), &[]);
    let pool = gguf_models::Pool::new(1);
    let enc = plain.encoder().unwrap();
    assert!(enc.embed(&pool, &[seq], Pooling::Rank).is_ok(), "cls.output alone is a head");
    let long = vec![5u32; 129];
    for (bad, want) in [(&long[..], "129"), (&[][..], "empty"), (&[2, 999][..], "999")] {
        let e = with.encoder().unwrap().embed(&pool, &[seq, bad], Pooling::Mean).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
}

// ---- granitehybrid ----

/// A 3-layer granitehybrid file (64 wide; Mamba-2 4 heads of 32 (d_inner 128), d_state
/// 64, 2 groups, conv 4, on layers 0 and 2; attention 4 heads / 2 KV heads of 16 on layer
/// 1; FFN 96 — or, with `moe`, 4 experts (2 used) of 96 and a shared expert of 48; 50
/// tokens): `skip` leaves a tensor out, `extra` adds (or replaces) keys, `dims` overrides
/// shapes.
fn granite_hybrid_file(
    path: &std::path::Path,
    moe: bool,
    skip: Option<&str>,
    extra: &[(&str, Value)],
    dims: &[(&str, Vec<u64>)],
) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let (e, nh, nkv, hd, ff, nv) = (64u64, 4u64, 2u64, 16u64, 96u64, 50u64);
    let (d_conv, di, ds, ng, nsh) = (4u64, 128u64, 64u64, 2u64, 4u64);
    let ch = di + 2 * ng * ds;
    let arch = "granitehybrid";
    let mut w = gguf_format::GgufWriter::new();
    w.add_kv("general.architecture", arch);
    for (k, v) in [
        ("block_count", 3),
        ("embedding_length", e),
        ("feed_forward_length", ff),
        ("attention.head_count", nh),
        ("context_length", 256),
        ("ssm.conv_kernel", d_conv),
        ("ssm.state_size", ds),
        ("ssm.group_count", ng),
        ("ssm.time_step_rank", nsh),
        ("ssm.inner_size", di),
    ] {
        w.add_kv(&format!("{arch}.{k}"), v as u32);
    }
    w.add_kv(&format!("{arch}.attention.layer_norm_rms_epsilon"), 1e-6f32);
    w.add_kv(&format!("{arch}.attention.head_count_kv"), gguf_format::Array::I32(vec![0, nkv as i32, 0]));
    w.add_kv(&format!("{arch}.rope.scaling.finetuned"), false);
    if moe {
        w.add_kv(&format!("{arch}.expert_count"), 4u32);
        w.add_kv(&format!("{arch}.expert_used_count"), 2u32);
        w.add_kv(&format!("{arch}.expert_shared_feed_forward_length"), 48u32);
    }
    for (k, v) in extra {
        w.add_kv(k, v.clone());
    }
    let mut rand_vec =
        |n: u64, mean: f32| -> Vec<f32> { (0..n).map(|_| mean + (rng.gen::<f32>() * 2.0 - 1.0) * 0.4).collect() };
    let mut put = |name: &str, shape: &[u64], mean: f32| {
        let shape = dims.iter().find(|(n, _)| *n == name).map_or(shape.to_vec(), |(_, d)| d.clone());
        let v = rand_vec(shape.iter().product(), mean);
        if skip != Some(name) {
            w.add_tensor_owned(name, &shape, 0, v.iter().flat_map(|x| x.to_le_bytes()).collect()).unwrap();
        }
    };
    put("token_embd.weight", &[e, nv], 0.0);
    for il in 0..3 {
        let p = |s: &str| format!("blk.{il}.{s}");
        put(&p("attn_norm.weight"), &[e], 1.0);
        if il != 1 {
            put(&p("ssm_in.weight"), &[e, di + ch + nsh], 0.0);
            put(&p("ssm_conv1d.weight"), &[d_conv, ch], 0.0);
            put(&p("ssm_conv1d.bias"), &[ch], 0.0);
            put(&p("ssm_dt.bias"), &[nsh], 0.0);
            put(&p("ssm_a"), &[1, nsh], -2.0);
            put(&p("ssm_d"), &[1, nsh], 1.0);
            put(&p("ssm_norm.weight"), &[di / ng, ng], 1.0);
            put(&p("ssm_out.weight"), &[di, e], 0.0);
        } else {
            put(&p("attn_q.weight"), &[e, nh * hd], 0.0);
            put(&p("attn_k.weight"), &[e, nkv * hd], 0.0);
            put(&p("attn_v.weight"), &[e, nkv * hd], 0.0);
            put(&p("attn_output.weight"), &[nh * hd, e], 0.0);
        }
        put(&p("ffn_norm.weight"), &[e], 1.0);
        if moe {
            put(&p("ffn_gate_inp.weight"), &[e, 4], 0.0);
            put(&p("ffn_gate_exps.weight"), &[e, ff, 4], 0.0);
            put(&p("ffn_up_exps.weight"), &[e, ff, 4], 0.0);
            put(&p("ffn_down_exps.weight"), &[ff, e, 4], 0.0);
            put(&p("ffn_gate_shexp.weight"), &[e, 48], 0.0);
            put(&p("ffn_up_shexp.weight"), &[e, 48], 0.0);
            put(&p("ffn_down_shexp.weight"), &[48, e], 0.0);
        } else {
            put(&p("ffn_gate.weight"), &[e, ff], 0.0);
            put(&p("ffn_up.weight"), &[e, ff], 0.0);
            put(&p("ffn_down.weight"), &[ff, e], 0.0);
        }
    }
    put("output_norm.weight", &[e], 1.0);
    w.write_to_path(path).unwrap();
}

fn granite_hybrid_model(moe: bool, extra: &[(&str, Value)]) -> (tempfile::TempDir, Box<dyn gguf_models::Model>) {
    let (d, p) = tmp("granitehybrid.gguf");
    granite_hybrid_file(&p, moe, None, extra, &[]);
    let (_f, model) = gguf_models::load(&p).unwrap();
    (d, model)
}

#[test]
fn granitehybrid_carries_its_recurrent_state_across_calls() {
    for moe in [false, true] {
        let (_d, model) = granite_hybrid_model(moe, &[]);
        assert_eq!(model.arch(), "granitehybrid");
        let desc = model.describe();
        assert!(desc.contains("3 layers (2 Mamba-2, 1 attention)") && desc.contains("no rope"), "{desc}");
        assert!(desc.contains("4 heads of 32, d_state 64, 2 group(s), conv 4"), "{desc}");
        if moe {
            assert!(desc.contains("4 experts (2 used) of 96 and a shared expert of 48"), "{desc}");
        }
        let v = model.n_vocab();
        let tokens = [3u32, 14, 15, 9, 26, 5, 35, 8];
        let mut st = qwen35_state(model.as_ref(), 512);
        let all = model.forward(st.as_mut(), &tokens, Logits::All).unwrap();
        assert!(all.iter().all(|x| x.is_finite()));
        assert_eq!(st.n_past(), tokens.len());
        // conv state (3 inputs of 384 channels: x 128, B and C 2 × 2 × 64) and SSM state
        // (128 × 64) per Mamba-2 layer, plus the F16 KV cache of the attention layer
        assert_eq!(st.cache_bytes(), 2 * 4 * (3 * 384 + 128 * 64) + 2 * 64 * 32 * 2);
        // the same tokens in ubatches of 3 and 1, and one call per token: the states carry
        // the sequence (one-row products take other kernels than a batch's: last bits only)
        let max_diff = |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        for ub in [3, 1] {
            let mut st = qwen35_state(model.as_ref(), ub);
            let got = model.forward(st.as_mut(), &tokens, Logits::All).unwrap();
            assert!(max_diff(&all, &got) <= 1e-3, "moe {moe} ubatch {ub}");
        }
        let mut st1 = qwen35_state(model.as_ref(), 512);
        let mut last = Vec::new();
        for &t in &tokens {
            last = model.forward(st1.as_mut(), &[t], Logits::Last).unwrap();
        }
        assert!(max_diff(&all[(tokens.len() - 1) * v..], &last) <= 1e-3, "moe {moe}");
        // the recurrent layers remember: changing token 0 changes the last position
        let mut other = tokens;
        other[0] = 4;
        let mut st2 = qwen35_state(model.as_ref(), 512);
        let changed = model.forward(st2.as_mut(), &other, Logits::All).unwrap();
        assert!(rows_differ(&all[7 * v..], &changed[7 * v..]));
        // causal: a later token does not change earlier logits
        let mut later = tokens;
        later[7] = 1;
        let mut st3 = qwen35_state(model.as_ref(), 512);
        let c = model.forward(st3.as_mut(), &later, Logits::All).unwrap();
        assert_eq!(all[..7 * v], c[..7 * v]);
        // no roll-back: truncating forgets the sequence, the next forward starts it again
        st.truncate(5);
        assert_eq!(st.n_past(), 0);
        let again = model.forward(st.as_mut(), &tokens, Logits::All).unwrap();
        assert_eq!(again, all);
    }
}

#[test]
fn granitehybrid_multipliers_act_where_llama_cpp_applies_them() {
    let tokens = [7u32, 1, 30, 22, 4];
    let run = |extra: &[(&str, Value)]| {
        let (_d, model) = granite_hybrid_model(false, extra);
        let mut st = qwen35_state(model.as_ref(), 512);
        model.forward(st.as_mut(), &tokens, Logits::All).unwrap()
    };
    let plain = run(&[]);
    // logit_scale 8: every logit divided by 8 (a power of two: exact)
    let scaled = run(&[("granitehybrid.logit_scale", Value::F32(8.0))]);
    assert_eq!(scaled, plain.iter().map(|x| x * 0.125).collect::<Vec<_>>());
    // 0 means "not set", as in llama.cpp
    assert_eq!(run(&[("granitehybrid.residual_scale", Value::F32(0.0))]), plain);
    for (key, value) in [
        ("granitehybrid.residual_scale", Value::F32(0.22)),
        ("granitehybrid.embedding_scale", Value::F32(12.0)),
        ("granitehybrid.attention.scale", Value::F32(0.015625)),
        ("granitehybrid.rope.scaling.finetuned", Value::Bool(true)),
    ] {
        assert!(rows_differ(&run(&[(key, value)]), &plain), "{key} had no effect");
    }
}

#[test]
fn granitehybrid_bad_input_is_named() {
    let (_d, p) = tmp("granitehybrid.gguf");
    let load_err = |p: &std::path::Path| gguf_models::load(p).err().expect("must not load").to_string();
    for name in [
        "blk.0.ssm_a",
        "blk.0.ssm_d",
        "blk.2.ssm_conv1d.weight",
        "blk.0.ssm_dt.bias",
        "blk.2.ssm_norm.weight",
        "blk.0.ssm_in.weight",
        "blk.2.ssm_out.weight",
        "blk.1.attn_k.weight",
        "blk.1.ffn_norm.weight",
    ] {
        granite_hybrid_file(&p, false, Some(name), &[], &[]);
        let err = load_err(&p);
        assert!(err.contains(name), "{name}: {err}");
    }
    granite_hybrid_file(&p, true, Some("blk.1.ffn_up_shexp.weight"), &[], &[]);
    let err = load_err(&p);
    assert!(err.contains("blk.1.ffn_up_shexp.weight"), "{err}");
    // the conv bias is optional (llama.cpp: TENSOR_NOT_REQUIRED)
    granite_hybrid_file(&p, false, Some("blk.0.ssm_conv1d.bias"), &[], &[]);
    assert!(gguf_models::load(&p).is_ok());
    // inconsistent shapes: the conv kernel over the wrong channels, ssm_in without dt rows,
    // the norm's groups
    for (name, shape) in [
        ("blk.0.ssm_conv1d.weight", vec![4, 128]),
        ("blk.2.ssm_in.weight", vec![64, 512]),
        ("blk.0.ssm_norm.weight", vec![128]),
    ] {
        granite_hybrid_file(&p, false, None, &[], &[(name, shape)]);
        let err = load_err(&p);
        assert!(err.contains(name), "{name}: {err}");
    }
    // widths that do not fit: d_inner not a multiple of the heads, groups that do not divide
    // the heads, an expansion other than 2, a conv of one tap
    for (key, value) in [
        ("ssm.time_step_rank", 3u32),
        ("ssm.group_count", 3),
        ("ssm.inner_size", 192),
        ("ssm.conv_kernel", 1),
        ("ssm.state_size", 0),
    ] {
        let k = format!("granitehybrid.{key}");
        granite_hybrid_file(&p, false, None, &[(k.as_str(), Value::U32(value))], &[]);
        let err = load_err(&p);
        let want = if key == "ssm.time_step_rank" { "granitehybrid.ssm.inner_size" } else { k.as_str() };
        assert!(err.contains(want), "{key}: {err}");
    }
    // a required key missing
    for key in ["ssm.state_size", "ssm.group_count", "attention.head_count_kv"] {
        granite_hybrid_file(&p, false, None, &[], &[]);
        let f = gguf_format::GgufFile::open(&p).unwrap();
        let mut w = gguf_format::GgufWriter::from_file(&f).unwrap();
        w.metadata_mut().remove(&format!("granitehybrid.{key}"));
        let (_d2, p2) = tmp("k.gguf");
        w.write_to_path(&p2).unwrap();
        let err = load_err(&p2);
        assert!(err.contains(&format!("granitehybrid.{key}")), "{key}: {err}");
    }
    // a multiplier that is not a number
    granite_hybrid_file(&p, false, None, &[("granitehybrid.residual_scale", Value::F32(f32::NAN))], &[]);
    let err = load_err(&p);
    assert!(err.contains("granitehybrid.residual_scale"), "{err}");
}

/// The error loading `t` written without metadata key `key`.
fn load_error_without_key(t: &Tiny, key: &str) -> String {
    let (_d, p) = tmp("k.gguf");
    write(t, &p, None, &[]).unwrap();
    let f = gguf_format::GgufFile::open(&p).unwrap();
    let mut w = gguf_format::GgufWriter::from_file(&f).unwrap();
    assert!(w.metadata_mut().remove(key).is_some(), "{}: the file has no {key}", t.arch);
    let p2 = p.with_extension("2.gguf");
    w.write_to_path(&p2).unwrap();
    match gguf_models::load(&p2) {
        Ok(_) => panic!("{} loaded without {key}", t.arch),
        Err(e) => e.to_string(),
    }
}

/// Every family the tiny writer makes (those with files of their own have tests above):
/// a missing tensor, a missing key, a head count that does not fit the tensors and, for
/// the MoE ones, expert count 0 are each refused with an error naming the tensor or key.
#[test]
fn tiny_families_bad_input_is_named() {
    for arch in ["llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "lfm2", "lfm2moe", "mistral3", "glm4moe", "deepseek2"]
    {
        let t = Tiny::new(arch);
        let (_, _, ok) = logits_of(&t, &[], &[1, 2, 3]);
        assert!(!ok.is_empty(), "{arch} loads as written");
        let norm = if arch.starts_with("lfm2") { "token_embd_norm.weight" } else { "output_norm.weight" };
        for missing in ["token_embd.weight", norm, "blk.1.ffn_down.weight"] {
            if arch == "deepseek2" && missing == "blk.1.ffn_down.weight"
                || arch.ends_with("moe") && missing.starts_with("blk.1")
            {
                continue; // MoE layers have expert tensors instead
            }
            let err = load_error(&t, Some(missing), &[]);
            assert!(err.contains(missing), "{arch} without {missing}: {err}");
        }
        for key in ["block_count", "embedding_length", "attention.head_count"] {
            let key = format!("{arch}.{key}");
            let err = load_error_without_key(&t, &key);
            assert!(err.contains(&key), "{arch} without {key}: {err}");
        }
        let key = format!("{arch}.attention.head_count");
        let err = load_error(&t, None, &[(key.as_str(), Value::U32(3))]);
        assert!(err.contains("attention.head_count") || err.contains(".weight"), "{arch} with 3 heads: {err}");
        if t.n_expert > 0 || arch.ends_with("moe") {
            let key = format!("{arch}.expert_count");
            let err = load_error(&t, None, &[(key.as_str(), Value::U32(0))]);
            assert!(err.contains("expert_count"), "{arch} with 0 experts: {err}");
        }
    }
}

// ---- qwen35moe ----

#[test]
fn qwen35moe_routes_its_experts_and_decodes_incrementally() {
    let (_d, p) = tmp("qwen35moe.gguf");
    qwen35_write(&p, "qwen35moe", None, &[], &[]);
    let (_f, model) = gguf_models::load(&p).unwrap();
    assert_eq!(model.arch(), "qwen35moe");
    let desc = model.describe();
    assert!(desc.contains("4 experts (2 used) and a shared expert"), "{desc}");
    let tokens = [3u32, 14, 15, 9, 26, 5, 31, 2];
    let v = model.n_vocab();
    let mut st = qwen35_state(model.as_ref(), 64);
    let all = model.forward(st.as_mut(), &tokens, Logits::All).unwrap();
    assert!(all.iter().all(|x| x.is_finite()));
    let mut st = qwen35_state(model.as_ref(), 64);
    for (i, &t) in tokens.iter().enumerate() {
        let one = model.forward(st.as_mut(), &[t], Logits::Last).unwrap();
        // one-token and batch kernels round differently (1.05e-3 seen under forced AVX2,
        // the experts' gate amplifying it); a lost state would be O(1)
        let worst = one.iter().zip(&all[i * v..(i + 1) * v]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-2, "position {i}: {worst}");
    }
}

#[test]
fn qwen35moe_bad_input_is_named() {
    let err_of = |skip: Option<&str>, extra: &[(&str, Value)]| {
        let (_d, p) = tmp("bad.gguf");
        qwen35_write(&p, "qwen35moe", skip, extra, &[]);
        match gguf_models::load(&p) {
            Ok(_) => panic!("qwen35moe loaded without {skip:?} / with {extra:?}"),
            Err(e) => e.to_string(),
        }
    };
    for missing in [
        "blk.0.ffn_gate_inp.weight",
        "blk.1.ffn_up_exps.weight",
        "blk.2.ffn_down_exps.weight",
        "blk.0.ffn_gate_inp_shexp.weight",
        "blk.1.ffn_down_shexp.weight",
        "blk.0.ssm_a",
    ] {
        let err = err_of(Some(missing), &[]);
        assert!(err.contains(missing), "{missing}: {err}");
    }
    let err = err_of(None, &[("qwen35moe.expert_count", Value::U32(0))]);
    assert!(err.contains("qwen35moe.expert_count"), "{err}");
    let err = err_of(None, &[("qwen35moe.expert_used_count", Value::U32(5))]);
    assert!(err.contains("qwen35moe.expert_used_count"), "{err}");
}
