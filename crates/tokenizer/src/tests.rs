//! Hermetic tests on small synthetic vocabularies.

use super::*;
use crate::decode::clean_spaces;
use gguf_format::{Array, Metadata, Value};

fn strs(v: &[&str]) -> Array {
    Array::String(v.iter().map(|s| s.as_bytes().to_vec()).collect())
}

/// A byte-level BPE vocabulary: the 256 byte symbols, some merges, special tokens.
pub(crate) fn bpe_md(pre: &str) -> Metadata {
    let table = unicode::byte_to_cpt_table();
    let mut toks: Vec<String> = (0..256).map(|b| char::from_u32(table[b]).unwrap().to_string()).collect();
    let merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "Ġ Ġ"];
    for m in merges {
        toks.push(m.replace(' ', ""));
    }
    toks.push("<|endoftext|>".into());
    toks.push("<|im_start|>".into());
    toks.push("<|im_end|>".into());
    let n = toks.len();
    let mut types = vec![1i32; n];
    types[n - 3] = 3;
    types[n - 2] = 3;
    types[n - 1] = 3;
    let mut md = Metadata::new();
    md.set("tokenizer.ggml.model", Value::from("gpt2"));
    md.set("tokenizer.ggml.pre", Value::from(pre));
    md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks.iter().map(|s| s.as_bytes().to_vec()).collect())));
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    md.set("tokenizer.ggml.merges", Value::Array(strs(&merges)));
    md.set("tokenizer.ggml.bos_token_id", Value::U32((n - 3) as u32));
    md.set("tokenizer.ggml.eos_token_id", Value::U32((n - 1) as u32));
    md
}

/// A SentencePiece vocabulary with scores and byte fallback.
pub(crate) fn spm_md() -> Metadata {
    let mut toks = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2i32, 3, 3];
    let mut scores = vec![0f32, 0.0, 0.0];
    for b in 0..256 {
        toks.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (t, s) in [
        ("▁", -1.0),
        ("h", -2.0),
        ("e", -2.0),
        ("l", -2.0),
        ("o", -2.0),
        ("he", -3.0),
        ("ll", -3.0),
        ("hell", -4.0),
        ("hello", -5.0),
        ("▁hello", -6.0),
        ("w", -2.0),
        ("▁w", -3.0),
    ] {
        toks.push(t.into());
        types.push(1);
        scores.push(s);
    }
    let mut md = Metadata::new();
    md.set("tokenizer.ggml.model", Value::from("llama"));
    md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks.iter().map(|s| s.as_bytes().to_vec()).collect())));
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    md.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    md
}

#[test]
fn bpe_merges_by_rank() {
    let t = Tokenizer::from_gguf(&bpe_md("gpt-2")).unwrap();
    let ids = t.encode("hello world", false, false).unwrap();
    let hello = t.token_id(b"hello").unwrap();
    let world = t.token_id("Ġworld".as_bytes()).unwrap();
    assert_eq!(ids, vec![hello, world]);
    assert_eq!(t.decode(&ids, false, false).unwrap(), b"hello world");
}

#[test]
fn bpe_special_parsing() {
    let t = Tokenizer::from_gguf(&bpe_md("qwen2")).unwrap();
    let s = t.token_id(b"<|im_start|>").unwrap();
    let with = t.encode("<|im_start|>hello", false, true).unwrap();
    assert_eq!(with[0], s);
    let without = t.encode("<|im_start|>hello", false, false).unwrap();
    assert!(!without.contains(&s));
    assert_eq!(t.decode(&with, false, true).unwrap(), b"<|im_start|>hello");
    assert_eq!(t.decode(&with, false, false).unwrap(), b"hello");
    assert!(t.is_eog(t.token_id(b"<|im_end|>").unwrap()));
    assert!(t.is_eog(t.token_id(b"<|endoftext|>").unwrap()));
    assert!(!t.is_eog(s));
}

#[test]
fn spm_scores_and_byte_fallback() {
    let t = Tokenizer::from_gguf(&spm_md()).unwrap();
    let ids = t.encode("hello w", true, false).unwrap();
    assert_eq!(ids[0], 1);
    assert_eq!(ids[1], t.token_id("▁hello".as_bytes()).unwrap());
    assert_eq!(ids[2], t.token_id("▁w".as_bytes()).unwrap());
    // "é" has no token: byte fallback <0xC3><0xA9>
    let ids = t.encode("é", false, false).unwrap();
    assert_eq!(ids[1..], [3 + 0xC3, 3 + 0xA9]);
    assert_eq!(t.decode(&ids, false, false).unwrap(), "é".as_bytes());
}

#[test]
fn out_of_range_id_is_an_error() {
    let t = Tokenizer::from_gguf(&spm_md()).unwrap();
    let e = t.decode(&[1, 999_999], false, false).unwrap_err();
    assert!(matches!(e, Error::TokenOutOfRange { id: 999_999, .. }), "{e}");
    assert!(t.token_to_piece(u32::MAX, true).is_err());
}

#[test]
fn unknown_model_and_pre_are_clear_errors() {
    let mut md = bpe_md("gpt-2");
    md.set("tokenizer.ggml.model", Value::from("wat"));
    let e = Tokenizer::from_gguf(&md).unwrap_err().to_string();
    assert!(e.contains("wat") && e.contains("gpt2") && e.contains("llama"), "{e}");
    let e = Tokenizer::from_gguf(&bpe_md("nonesuch")).unwrap_err().to_string();
    assert!(e.contains("nonesuch") && e.contains("smollm"), "{e}");
}

#[test]
fn merges_that_disagree_with_the_vocab_are_rejected() {
    let mut md = bpe_md("gpt-2");
    md.set("tokenizer.ggml.merges", Value::Array(strs(&["x y", "q z", "zz zz"])));
    let e = Tokenizer::from_gguf(&md).unwrap_err().to_string();
    assert!(e.contains("merges") && e.contains("disagree"), "{e}");
}

#[test]
fn stream_decoder_never_splits_utf8() {
    let t = Tokenizer::from_gguf(&spm_md()).unwrap();
    let ids = t.encode("é€😀", false, false).unwrap();
    let mut d = t.stream_decoder(false);
    let mut out = String::new();
    for &id in &ids {
        let s = d.push(id).unwrap();
        assert!(!s.contains('\u{FFFD}'));
        out.push_str(&s);
    }
    out.push_str(&d.finish());
    assert_eq!(out, " é€😀");
}

#[test]
fn clean_spaces_matches_llama() {
    let mut v = b"a , b ' c 's d".to_vec();
    clean_spaces(&mut v);
    assert_eq!(v, b"a, b'c's d");
}

#[test]
fn wordpiece_lowercases_and_splits_punctuation() {
    let toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "▁hello", "▁world", "▁,", "▁!", "ll", "▁he"];
    let mut md = Metadata::new();
    md.set("tokenizer.ggml.model", Value::from("bert"));
    md.set("tokenizer.ggml.tokens", Value::Array(strs(&toks)));
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![3, 2, 3, 3, 1, 1, 1, 1, 1, 1])));
    md.set("tokenizer.ggml.unknown_token_id", Value::U32(1));
    md.set("tokenizer.ggml.cls_token_id", Value::U32(2));
    md.set("tokenizer.ggml.bos_token_id", Value::U32(2));
    md.set("tokenizer.ggml.seperator_token_id", Value::U32(3));
    md.set("tokenizer.ggml.padding_token_id", Value::U32(0));
    let t = Tokenizer::from_gguf(&md).unwrap();
    assert_eq!(t.encode("Hello, WORLD! xyz", true, false).unwrap(), vec![2, 4, 6, 5, 7, 1, 3]);
}

/// Every `tokenizer.ggml.pre` name in llama-vocab.cpp at the pinned commit (91).
/// `cargo xtask verify tokenizer` re-reads the source and also checks regexes and flags.
const LLAMA_CPP_PRE_NAMES: &[&str] = &[
    "a.x-4.0",
    "afmoe",
    "bailingmoe",
    "bailingmoe2",
    "bloom",
    "chameleon",
    "chatglm-bpe",
    "codeshell",
    "cohere2moe",
    "command-r",
    "dbrx",
    "deepseek-coder",
    "deepseek-llm",
    "deepseek-r1-qwen",
    "deepseek-v3",
    "default",
    "exaone",
    "exaone-moe",
    "exaone4",
    "f2llmv2",
    "falcon",
    "falcon-h1",
    "falcon3",
    "gemma4",
    "gigachat",
    "glm4",
    "glm5",
    "gpt-2",
    "gpt-4o",
    "gpt3-finnish",
    "granite-docling",
    "granite-embed-multi-311m",
    "granite-embed-multi-97m",
    "grok-2",
    "hunyuan",
    "hunyuan-dense",
    "hy_v4",
    "jais",
    "jais-2",
    "jina-de",
    "jina-es",
    "jina-v1-en",
    "jina-v2-code",
    "jina-v2-de",
    "jina-v2-es",
    "jina-v5-nano",
    "joyai-llm",
    "kanana2",
    "kimi-k2",
    "kormo",
    "laguna",
    "lfm2",
    "llada-moe",
    "llama-bpe",
    "llama-v3",
    "llama3",
    "llama4",
    "megrez",
    "mellum",
    "mellum2",
    "midm-2.0",
    "minerva-7b",
    "minicpm5",
    "minimax-m2",
    "modern-bert",
    "mpt",
    "olmo",
    "phi-2",
    "pixtral",
    "poro-chat",
    "qwen2",
    "qwen35",
    "refact",
    "roberta-bpe",
    "sarvam-moe",
    "seed-coder",
    "smaug-bpe",
    "smollm",
    "solar-open",
    "spark2_5",
    "stablelm2",
    "starcoder",
    "superbpe",
    "talkie",
    "tekken",
    "tiny_aya",
    "trillion",
    "ufakzeka",
    "viking",
    "whitespace",
    "youtu",
];

#[test]
fn every_llama_cpp_pre_name_is_registered() {
    assert_eq!(pretok::known_names(), LLAMA_CPP_PRE_NAMES);
    let r = pretok::registry_problems();
    assert!(r.problems.is_empty() && r.overrides.is_empty(), "{r:?}");
    let r = pretok::splitter_problems();
    assert!(r.problems.is_empty() && r.overrides.is_empty(), "{r:?}");
    // and each builds a working BPE tokenizer over the synthetic vocabulary
    for name in LLAMA_CPP_PRE_NAMES {
        let t = Tokenizer::from_gguf(&bpe_md(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ids = t.encode("hello world 123 ünï 漢字\n\n", false, false).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!ids.is_empty(), "{name}");
    }
}

#[test]
fn missing_pre_uses_the_default() {
    let mut md = bpe_md("gpt-2");
    md.remove("tokenizer.ggml.pre");
    let t = Tokenizer::from_gguf(&md).unwrap();
    assert_eq!(t.pre_name(), None);
    assert_eq!(t.decode(&t.encode("hello world", false, false).unwrap(), false, false).unwrap(), b"hello world");
}

/// A tiny deterministic generator for the no-panic sweep.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn malformed_metadata_and_inputs_never_panic() {
    let mut r = Lcg(7);
    let bases = [bpe_md("qwen2"), bpe_md("llama-bpe"), spm_md()];
    let mut errors = 0;
    for i in 0..300 {
        let mut md = bases[i % bases.len()].clone();
        match r.next() % 9 {
            0 => md.set("tokenizer.ggml.tokens", Value::Array(Array::String(Default::default()))),
            1 => md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![3; 2]))),
            2 => md.set("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.5; 3]))),
            3 => md.set("tokenizer.ggml.bos_token_id", Value::U32(u32::MAX)),
            4 => md.set("tokenizer.ggml.merges", Value::Array(Array::I32(vec![1, 2]))),
            5 => md.set("tokenizer.ggml.add_bos_token", Value::U32(1)),
            6 => md.set("tokenizer.ggml.tokens", Value::Array(strs(&["a", "a"]))),
            7 => {
                md.remove("tokenizer.ggml.bos_token_id");
                md.set("tokenizer.ggml.add_bos_token", Value::Bool(true));
                md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![9; 600])));
            }
            _ => md.set("tokenizer.ggml.model", Value::U8(3)),
        }
        let t = match Tokenizer::from_gguf(&md) {
            Ok(t) => t,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                errors += 1;
                continue;
            }
        };
        let text: Vec<u8> = (0..r.next() % 64).map(|_| (r.next() % 256) as u8).collect();
        if let Ok(ids) = t.encode_bytes(&text, true, true) {
            let _ = t.decode(&ids, true, true);
        }
        let _ = t.decode(&[r.next() as u32, 0], false, false);
    }
    assert!(errors > 0);
}

#[test]
fn stream_decoder_holds_byte_level_pieces() {
    // in the synthetic BPE vocab every byte of "😀" is its own token
    let t = Tokenizer::from_gguf(&bpe_md("gpt-2")).unwrap();
    let ids = t.encode("a😀b€", false, false).unwrap();
    assert!(ids.len() >= 9, "{ids:?}");
    let mut d = t.stream_decoder(false);
    let mut parts = Vec::new();
    for &id in &ids {
        parts.push(d.push(id).unwrap());
    }
    parts.push(d.finish());
    assert!(parts.iter().all(|p| !p.contains('\u{FFFD}')), "{parts:?}");
    assert_eq!(parts.concat(), "a😀b€");
    // a sequence cut off at the end is flushed as U+FFFD by finish()
    let mut d = t.stream_decoder(false);
    assert_eq!(d.push(ids[1]).unwrap(), "");
    assert_eq!(d.finish(), "\u{FFFD}");
}

#[test]
fn tokenizer_and_template_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
    assert_send_sync::<chat::ChatTemplate>();
    let t = std::sync::Arc::new(Tokenizer::from_gguf(&bpe_md("llama3")).unwrap());
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let t = t.clone();
            std::thread::spawn(move || t.encode(&format!("hello world {i}"), true, false).unwrap())
        })
        .collect();
    let outs: Vec<Vec<u32>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(outs[0].len(), outs[1].len());
}
