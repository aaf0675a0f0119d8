//! Tiny random-weight models of every built-in architecture, written with this project's
//! writer: for tests (here and in the CLI) and for trying the engine without a download.
//! Optionally with a byte-level `gpt2` tokenizer (256 byte tokens, no merges, an
//! `<|endoftext|>` end-of-generation token), so the whole `gguf run` path works.

use std::path::Path;

use gguf_format::{Array, GgufWriter, Value};
use rand::{Rng, SeedableRng};

use crate::Result;

/// Shape and options of a tiny model.
#[derive(Debug, Clone)]
pub struct Tiny {
    /// `general.architecture`: llama, qwen2, qwen3, qwen3moe, gemma3, gpt-oss (or any name
    /// using their tensor layout).
    pub arch: String,
    /// Embedding width.
    pub n_embd: u64,
    /// Blocks.
    pub n_layer: u64,
    /// Query heads.
    pub n_head: u64,
    /// KV heads.
    pub n_head_kv: u64,
    /// Head width.
    pub head: u64,
    /// FFN (or per-expert FFN) width.
    pub n_ff: u64,
    /// Vocabulary size (257 with [`Tiny::tokenizer`]).
    pub n_vocab: u64,
    /// Store matrices as Q8_0 instead of F32.
    pub q8: bool,
    /// Experts (qwen3moe).
    pub n_expert: u64,
    /// Add the byte-level tokenizer.
    pub tokenizer: bool,
    /// deepseek2: the query compression rank (0: a direct `attn_q`). Its MLA is
    /// `kv_lora_rank` 32, heads of 16 + 8 roped, values `head` wide.
    pub q_lora: u64,
    /// RNG seed.
    pub seed: u64,
}

impl Tiny {
    /// A 2-layer model of `arch` (64 wide, 4 heads / 2 KV heads of 16, 50 tokens).
    pub fn new(arch: &str) -> Tiny {
        Tiny {
            arch: arch.to_string(),
            n_embd: 64,
            n_layer: 2,
            n_head: 4,
            n_head_kv: 2,
            head: 16,
            n_ff: 96,
            n_vocab: 50,
            q8: false,
            n_expert: if matches!(arch, "qwen3moe" | "gpt-oss" | "glm4moe" | "lfm2moe" | "deepseek2") { 4 } else { 0 },
            tokenizer: false,
            q_lora: 0,
            seed: 42,
        }
    }

    /// The same with the byte-level tokenizer (and 257 tokens).
    pub fn with_tokenizer(mut self) -> Tiny {
        self.tokenizer = true;
        self.n_vocab = 257;
        self
    }
}

/// GPT-2's byte → printable character map.
fn byte_char(b: u8) -> char {
    let printable = |c: u32| (0x21..=0x7e).contains(&c) || (0xa1..=0xac).contains(&c) || (0xae..=0xff).contains(&c);
    if printable(b as u32) {
        return char::from_u32(b as u32).unwrap_or('?');
    }
    let n = (0..b as u32).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + n).unwrap_or('?')
}

/// deepseek2's tiny MLA widths: latent, roped and unroped key parts.
const DS_KV_LORA: u64 = 32;
const DS_ROT: u64 = 8;
const DS_NOPE: u64 = 16;

fn rand_f32(rng: &mut rand::rngs::StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| (rng.gen::<f32>() * 2.0 - 1.0) * scale).collect()
}

/// Adds tensor `name` of `dims`, random values of `scale` (plus 1 with `ones`, for norm
/// weights), as Q8_0 when `q8` and the rows allow it (matrices of rows of 32), else F32.
fn add_random(
    w: &mut GgufWriter,
    rng: &mut rand::rngs::StdRng,
    name: &str,
    dims: &[u64],
    scale: f32,
    ones: bool,
    q8: bool,
) -> Result<()> {
    let n: u64 = dims.iter().product();
    let mut v = rand_f32(rng, n as usize, scale);
    if ones {
        v.iter_mut().for_each(|x| *x += 1.0);
    }
    if q8 && dims.len() >= 2 && dims[0].is_multiple_of(32) {
        let t = ggml_quants::lookup_name("q8_0")?;
        let bytes = t.quantize_to_vec(&v, dims[0] as usize, None)?;
        w.add_tensor_owned(name, dims, t.id, bytes)?;
    } else {
        w.add_tensor_owned(name, dims, 0, v.iter().flat_map(|x| x.to_le_bytes()).collect())?;
    }
    Ok(())
}

/// Writes the model to `path`, leaving out tensor `skip` and adding `extra` keys.
pub fn write(t: &Tiny, path: &Path, skip: Option<&str>, extra: &[(&str, Value)]) -> Result<()> {
    if matches!(t.arch.as_str(), "bert" | "nomic-bert") {
        return write_encoder(t, path, skip, extra);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(t.seed);
    let mut w = GgufWriter::new();
    let a = t.arch.as_str();
    w.add_kv("general.architecture", a);
    w.add_kv(&format!("{a}.block_count"), t.n_layer as u32);
    w.add_kv(&format!("{a}.embedding_length"), t.n_embd as u32);
    w.add_kv(&format!("{a}.feed_forward_length"), t.n_ff as u32);
    w.add_kv(&format!("{a}.attention.head_count"), t.n_head as u32);
    if a == "lfm2moe" {
        // layer 0 dense, layer 1 (attention) with routed experts
        w.add_kv(&format!("{a}.leading_dense_block_count"), 1u32);
        w.add_kv(&format!("{a}.expert_gating_func"), 2u32);
    }
    if a == "lfm2" || a == "lfm2moe" {
        // even layers short convolutions (0 KV heads), odd ones attention
        let kv: Vec<i32> = (0..t.n_layer).map(|il| if il % 2 == 0 { 0 } else { t.n_head_kv as i32 }).collect();
        w.add_kv(&format!("{a}.attention.head_count_kv"), Value::Array(Array::I32(kv)));
        w.add_kv(&format!("{a}.shortconv.l_cache"), 3u32);
    } else if a == "deepseek2" {
        w.add_kv(&format!("{a}.attention.head_count_kv"), 1u32);
    } else {
        w.add_kv(&format!("{a}.attention.head_count_kv"), t.n_head_kv as u32);
    }
    let ds = a == "deepseek2";
    if ds {
        // MLA: one cache row of kv_lora + rope dims; query/key heads of nope + rope dims
        w.add_kv(&format!("{a}.attention.key_length"), (DS_KV_LORA + DS_ROT) as u32);
        w.add_kv(&format!("{a}.attention.value_length"), DS_KV_LORA as u32);
        w.add_kv(&format!("{a}.attention.key_length_mla"), (DS_NOPE + DS_ROT) as u32);
        w.add_kv(&format!("{a}.attention.value_length_mla"), t.head as u32);
        w.add_kv(&format!("{a}.attention.q_lora_rank"), t.q_lora as u32);
        w.add_kv(&format!("{a}.attention.kv_lora_rank"), DS_KV_LORA as u32);
        w.add_kv(&format!("{a}.rope.dimension_count"), DS_ROT as u32);
        w.add_kv(&format!("{a}.leading_dense_block_count"), 1u32);
        w.add_kv(&format!("{a}.expert_shared_count"), 1u32);
    } else {
        w.add_kv(&format!("{a}.attention.key_length"), t.head as u32);
        w.add_kv(&format!("{a}.attention.value_length"), t.head as u32);
    }
    w.add_kv(&format!("{a}.context_length"), 256u32);
    w.add_kv(&format!("{a}.attention.layer_norm_rms_epsilon"), 1e-5f32);
    if t.n_expert > 0 {
        w.add_kv(&format!("{a}.expert_count"), t.n_expert as u32);
        w.add_kv(&format!("{a}.expert_used_count"), 2u32);
        w.add_kv(&format!("{a}.expert_feed_forward_length"), t.n_ff as u32);
    }
    if a == "glm4moe" {
        // layer 0 dense, the others MoE with one shared expert
        w.add_kv(&format!("{a}.expert_shared_count"), 1u32);
        w.add_kv(&format!("{a}.leading_dense_block_count"), 1u32);
        w.add_kv(&format!("{a}.expert_weights_norm"), true);
    }
    if a == "gemma3" || a == "gpt-oss" {
        w.add_kv(&format!("{a}.attention.sliding_window"), 4u32);
    }
    if t.tokenizer {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| byte_char(b).to_string().into_bytes()).collect();
        tokens.push(b"<|endoftext|>".to_vec());
        let mut types = vec![1i32; 256];
        types.push(3);
        w.add_kv("tokenizer.ggml.model", "gpt2");
        w.add_kv("tokenizer.ggml.pre", "gpt-2");
        w.add_kv("tokenizer.ggml.tokens", Value::Array(Array::String(tokens.into())));
        w.add_kv("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
        w.add_kv("tokenizer.ggml.merges", Value::Array(Array::String(Default::default())));
        w.add_kv("tokenizer.ggml.eos_token_id", 256u32);
        w.add_kv("tokenizer.ggml.bos_token_id", 256u32);
        w.add_kv("tokenizer.ggml.add_bos_token", false);
    }
    for (k, v) in extra {
        w.add_kv(k, v.clone());
    }
    let mut add = |name: String, dims: Vec<u64>, scale: f32, ones: bool| -> Result<()> {
        if skip == Some(name.as_str()) {
            return Ok(());
        }
        add_random(&mut w, &mut rng, &name, &dims, scale, ones, t.q8)
    };
    let (e, hd) = (t.n_embd, t.head);
    add("token_embd.weight".into(), vec![e, t.n_vocab], 1.0, false)?;
    let lfm2 = a == "lfm2" || a == "lfm2moe";
    add(if lfm2 { "token_embd_norm.weight" } else { "output_norm.weight" }.into(), vec![e], 0.1, true)?;
    for il in 0..t.n_layer {
        let n = |s: &str| format!("blk.{il}.{s}");
        add(n("attn_norm.weight"), vec![e], 0.1, true)?;
        if lfm2 && il % 2 == 0 {
            add(n("shortconv.conv.weight"), vec![3, e], 0.5, false)?;
            add(n("shortconv.in_proj.weight"), vec![e, 3 * e], 0.2, false)?;
            add(n("shortconv.out_proj.weight"), vec![e, e], 0.2, false)?;
            add(n("ffn_norm.weight"), vec![e], 0.1, true)?;
            add(n("ffn_gate.weight"), vec![e, t.n_ff], 0.2, false)?;
            add(n("ffn_up.weight"), vec![e, t.n_ff], 0.2, false)?;
            add(n("ffn_down.weight"), vec![t.n_ff, e], 0.2, false)?;
            continue;
        }
        if ds {
            let qd = t.n_head * (DS_NOPE + DS_ROT);
            if t.q_lora == 0 {
                add(n("attn_q.weight"), vec![e, qd], 0.2, false)?;
            } else {
                add(n("attn_q_a.weight"), vec![e, t.q_lora], 0.2, false)?;
                add(n("attn_q_a_norm.weight"), vec![t.q_lora], 0.1, true)?;
                add(n("attn_q_b.weight"), vec![t.q_lora, qd], 0.2, false)?;
            }
            add(n("attn_kv_a_mqa.weight"), vec![e, DS_KV_LORA + DS_ROT], 0.2, false)?;
            add(n("attn_kv_a_norm.weight"), vec![DS_KV_LORA], 0.1, true)?;
            add(n("attn_k_b.weight"), vec![DS_NOPE, DS_KV_LORA, t.n_head], 0.2, false)?;
            add(n("attn_v_b.weight"), vec![DS_KV_LORA, hd, t.n_head], 0.2, false)?;
        } else {
            add(n("attn_q.weight"), vec![e, hd * t.n_head], 0.2, false)?;
            add(n("attn_k.weight"), vec![e, hd * t.n_head_kv], 0.2, false)?;
            add(n("attn_v.weight"), vec![e, hd * t.n_head_kv], 0.2, false)?;
        }
        add(n("attn_output.weight"), vec![hd * t.n_head, e], 0.2, false)?;
        let oss = a == "gpt-oss";
        let glm = a == "glm4moe";
        let pre_ffn = if oss || glm { "post_attention_norm.weight" } else { "ffn_norm.weight" };
        add(n(pre_ffn), vec![e], 0.1, true)?;
        if oss {
            add(n("attn_q.bias"), vec![hd * t.n_head], 0.1, false)?;
            add(n("attn_k.bias"), vec![hd * t.n_head_kv], 0.1, false)?;
            add(n("attn_v.bias"), vec![hd * t.n_head_kv], 0.1, false)?;
            add(n("attn_output.bias"), vec![e], 0.1, false)?;
            add(n("attn_sinks.weight"), vec![t.n_head], 2.0, false)?;
            add(n("ffn_gate_inp.bias"), vec![t.n_expert], 0.5, false)?;
            add(n("ffn_gate_exps.bias"), vec![t.n_ff, t.n_expert], 0.1, false)?;
            add(n("ffn_up_exps.bias"), vec![t.n_ff, t.n_expert], 0.1, false)?;
            add(n("ffn_down_exps.bias"), vec![e, t.n_expert], 0.1, false)?;
        }
        if matches!(a, "qwen3" | "qwen3moe" | "gemma3" | "lfm2" | "lfm2moe") {
            add(n("attn_q_norm.weight"), vec![hd], 0.1, true)?;
            add(n("attn_k_norm.weight"), vec![hd], 0.1, true)?;
        }
        if a == "qwen2" {
            add(n("attn_q.bias"), vec![hd * t.n_head], 0.1, false)?;
            add(n("attn_k.bias"), vec![hd * t.n_head_kv], 0.1, false)?;
            add(n("attn_v.bias"), vec![hd * t.n_head_kv], 0.1, false)?;
        }
        if a == "gemma3" {
            add(n("post_attention_norm.weight"), vec![e], 0.1, true)?;
            add(n("post_ffw_norm.weight"), vec![e], 0.1, true)?;
        }
        if t.n_expert > 0 && !((glm || ds) && il == 0) {
            if a == "lfm2moe" {
                add(n("exp_probs_b.bias"), vec![t.n_expert], 0.1, false)?;
            }
            if glm || ds {
                if glm {
                    add(n("exp_probs_b.bias"), vec![t.n_expert], 0.1, false)?;
                }
                add(n("ffn_gate_shexp.weight"), vec![e, t.n_ff], 0.2, false)?;
                add(n("ffn_up_shexp.weight"), vec![e, t.n_ff], 0.2, false)?;
                add(n("ffn_down_shexp.weight"), vec![t.n_ff, e], 0.2, false)?;
            }
            add(n("ffn_gate_inp.weight"), vec![e, t.n_expert], 0.5, false)?;
            add(n("ffn_gate_exps.weight"), vec![e, t.n_ff, t.n_expert], 0.2, false)?;
            add(n("ffn_up_exps.weight"), vec![e, t.n_ff, t.n_expert], 0.2, false)?;
            add(n("ffn_down_exps.weight"), vec![t.n_ff, e, t.n_expert], 0.2, false)?;
        } else {
            add(n("ffn_gate.weight"), vec![e, t.n_ff], 0.2, false)?;
            add(n("ffn_up.weight"), vec![e, t.n_ff], 0.2, false)?;
            add(n("ffn_down.weight"), vec![t.n_ff, e], 0.2, false)?;
        }
    }
    if a == "gpt-oss" {
        add("output.weight".into(), vec![e, t.n_vocab], 1.0, false)?;
    }
    w.write_to_path(path)?;
    Ok(())
}

/// The encoders (`bert`, `nomic-bert`): `token_embd` (+ `token_types` of 2 rows,
/// `position_embd` for bert), `token_embd_norm`, per layer separate Q/K/V with biases
/// (bert) or one `attn_qkv` (nomic-bert), `attn_output`, the LayerNorms `attn_output_norm` /
/// `layer_output_norm`, a GELU FFN with biases (bert) or SwiGLU (nomic-bert); a
/// `cls` / `cls.output` reranker head of 2 labels. `pooling_type` mean. With the tokenizer:
/// a WordPiece (`bert`) vocabulary of `[PAD] [UNK] [CLS] [SEP]`, the 26 letters as word
/// starts (`▁a`) and as continuations (`a`), and the space-led digits — 66 tokens.
fn write_encoder(t: &Tiny, path: &Path, skip: Option<&str>, extra: &[(&str, Value)]) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(t.seed);
    let mut w = GgufWriter::new();
    let a = t.arch.as_str();
    let nomic = a == "nomic-bert";
    let k = |s: &str| format!("{a}.{s}");
    w.add_kv("general.architecture", a);
    w.add_kv(&k("block_count"), t.n_layer as u32);
    w.add_kv(&k("embedding_length"), t.n_embd as u32);
    w.add_kv(&k("feed_forward_length"), t.n_ff as u32);
    w.add_kv(&k("attention.head_count"), t.n_head as u32);
    w.add_kv(&k("context_length"), 128u32);
    w.add_kv(&k("attention.layer_norm_epsilon"), 1e-12f32);
    w.add_kv(&k("attention.causal"), false);
    w.add_kv(&k("pooling_type"), 1u32);
    w.add_kv(&k("classifier.output_labels"), Value::Array(Array::String(vec!["no", "yes"].into())));
    if nomic {
        w.add_kv(&k("rope.freq_base"), 1000f32);
    }
    let n_vocab = if t.tokenizer {
        let mut tokens: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"].map(String::from).to_vec();
        tokens.extend((b'a'..=b'z').map(|c| format!("\u{2581}{}", c as char)));
        tokens.extend((b'a'..=b'z').map(|c| (c as char).to_string()));
        tokens.extend((b'0'..=b'9').map(|c| format!("\u{2581}{}", c as char)));
        let mut types = vec![1i32; tokens.len()];
        types[..4].fill(3);
        let n = tokens.len() as u64;
        let bytes: Vec<Vec<u8>> = tokens.into_iter().map(String::into_bytes).collect();
        w.add_kv("tokenizer.ggml.model", "bert");
        w.add_kv("tokenizer.ggml.tokens", Value::Array(Array::String(bytes.into())));
        w.add_kv("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
        w.add_kv("tokenizer.ggml.padding_token_id", 0u32);
        w.add_kv("tokenizer.ggml.unknown_token_id", 1u32);
        w.add_kv("tokenizer.ggml.cls_token_id", 2u32);
        w.add_kv("tokenizer.ggml.bos_token_id", 2u32);
        w.add_kv("tokenizer.ggml.seperator_token_id", 3u32);
        n
    } else {
        t.n_vocab
    };
    w.add_kv("tokenizer.ggml.token_type_count", 2u32);
    for (key, v) in extra {
        w.add_kv(key, v.clone());
    }
    let mut add = |name: String, dims: Vec<u64>, scale: f32, ones: bool| -> Result<()> {
        if skip == Some(name.as_str()) {
            return Ok(());
        }
        let q8 = t.q8 && !name.starts_with("token_types");
        add_random(&mut w, &mut rng, &name, &dims, scale, ones, q8)
    };
    let (e, f) = (t.n_embd, t.n_ff);
    add("token_embd.weight".into(), vec![e, n_vocab], 1.0, false)?;
    add("token_types.weight".into(), vec![e, 2], 0.5, false)?;
    if !nomic {
        add("position_embd.weight".into(), vec![e, 128], 0.5, false)?;
    }
    add("token_embd_norm.weight".into(), vec![e], 0.1, true)?;
    add("token_embd_norm.bias".into(), vec![e], 0.1, false)?;
    for il in 0..t.n_layer {
        let n = |s: &str| format!("blk.{il}.{s}");
        if nomic {
            add(n("attn_qkv.weight"), vec![e, 3 * e], 0.3, false)?;
        } else {
            for x in ["attn_q", "attn_k", "attn_v"] {
                add(n(&format!("{x}.weight")), vec![e, e], 0.3, false)?;
                add(n(&format!("{x}.bias")), vec![e], 0.1, false)?;
            }
        }
        add(n("attn_output.weight"), vec![e, e], 0.2, false)?;
        add(n("attn_output.bias"), vec![e], 0.1, false)?;
        add(n("attn_output_norm.weight"), vec![e], 0.1, true)?;
        add(n("attn_output_norm.bias"), vec![e], 0.1, false)?;
        if nomic {
            add(n("ffn_gate.weight"), vec![e, f], 0.2, false)?;
        }
        add(n("ffn_up.weight"), vec![e, f], 0.2, false)?;
        add(n("ffn_down.weight"), vec![f, e], 0.2, false)?;
        if !nomic {
            add(n("ffn_up.bias"), vec![f], 0.1, false)?;
            add(n("ffn_down.bias"), vec![e], 0.1, false)?;
        }
        add(n("layer_output_norm.weight"), vec![e], 0.1, true)?;
        add(n("layer_output_norm.bias"), vec![e], 0.1, false)?;
    }
    add("cls.weight".into(), vec![e, e], 0.2, false)?;
    add("cls.bias".into(), vec![e], 0.1, false)?;
    add("cls.output.weight".into(), vec![e, 2], 0.5, false)?;
    add("cls.output.bias".into(), vec![2], 0.1, false)?;
    w.write_to_path(path)?;
    Ok(())
}
