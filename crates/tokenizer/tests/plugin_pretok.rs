//! The pre-tokenizer extension contract: a plug-in registers a new `tokenizer.ggml.pre`
//! name with one `submit!` and a vocabulary naming it tokenizes through it; a second
//! registration of a built-in name is reported, and ordered by module name, never by
//! link order.
//!
//! A test binary of its own: these registrations change the whole registry.

use gguf_format::{Array, Metadata, Value};
use tokenizer::pretok::{self, PreTokenizer};
use tokenizer::{gguf_registry, Tokenizer};

const GPT2: &str = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

mod digits {
    use super::*;
    // Every digit a word of its own, then GPT-2's rules.
    gguf_registry::submit!(PreTokenizer::new("DIGITS_APART", &["digits-apart"], &["\\p{N}", GPT2]));
}

mod a_duplicate {
    use super::*;
    gguf_registry::submit!(PreTokenizer::new("GPT2", &["gpt-2"], &[GPT2]));
}

fn vocab(pre: &str) -> Metadata {
    let table = tokenizer::unicode::byte_to_cpt_table();
    let mut toks: Vec<Vec<u8>> = (0..256).map(|b| char::from_u32(table[b]).unwrap().to_string().into_bytes()).collect();
    let merges = ["1 2", "12 3", "a b"];
    for m in merges {
        toks.push(m.replace(' ', "").into_bytes());
    }
    toks.push(b"<|endoftext|>".to_vec());
    let n = toks.len();
    let mut types = vec![1i32; n];
    types[n - 1] = 3;
    let mut md = Metadata::new();
    md.set("tokenizer.ggml.model", Value::from("gpt2"));
    md.set("tokenizer.ggml.pre", Value::from(pre));
    md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks.into())));
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    md.set(
        "tokenizer.ggml.merges",
        Value::Array(Array::String(merges.iter().map(|m| m.as_bytes().to_vec()).collect::<Vec<_>>().into())),
    );
    md.set("tokenizer.ggml.eos_token_id", Value::U32((n - 1) as u32));
    md
}

#[test]
fn a_plugin_pretokenizer_is_looked_up_by_the_vocabulary() {
    assert!(pretok::known_names().contains(&"digits-apart"));
    let plug = Tokenizer::from_gguf(&vocab("digits-apart")).unwrap();
    let base = Tokenizer::from_gguf(&vocab("gpt-2")).unwrap();
    let ids = |t: &Tokenizer| t.encode("ab123", false, false).unwrap();
    // gpt-2 keeps "123" one word, merged into one token; digits-apart splits it.
    assert_eq!(ids(&base), vec![258, 257]);
    assert_eq!(ids(&plug), vec![258, b'1' as u32, b'2' as u32, b'3' as u32]);
}

#[test]
fn a_duplicate_builtin_pretokenizer_is_reported() {
    let r = pretok::registry_problems();
    assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
    let p = &r.problems[0];
    assert!(p.contains("pre-tokenizer `gpt-2` is registered 2 times at priority 0"), "{p}");
    assert!(p.contains("plugin_pretok::a_duplicate") && p.contains("tokenizer::pretok"), "{p}");
    assert_eq!(pretok::lookup("gpt-2").unwrap().origin, "plugin_pretok::a_duplicate");
}
