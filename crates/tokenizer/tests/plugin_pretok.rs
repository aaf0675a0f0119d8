//! The pre-tokenizer extension contract: a plug-in registers a new `tokenizer.ggml.pre`
//! name with one `submit!` and a vocabulary naming it tokenizes through it; a second
//! registration of a built-in name is reported, and ordered by module name, never by
//! link order.
//!
//! A test binary of its own: these registrations change the whole registry.

use gguf_format::{Array, Metadata, Value};
use std::sync::atomic::{AtomicUsize, Ordering};

use gguf_tokenizer::pretok::{self, CompiledPre, FastSplitter, PreTokenizer, Words};
use gguf_tokenizer::{gguf_registry, Tokenizer};

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

mod dashes {
    use super::*;
    pub const DASHES: &str = "[^-]+|-";
    pub static CALLS: AtomicUsize = AtomicUsize::new(0);
    /// `[^-]+|-` by hand: runs of non-dashes, each dash alone.
    fn split(cpts: &[u32], base: usize, lens: &[usize], out: &mut Words<'_>) {
        CALLS.fetch_add(1, Ordering::Relaxed);
        let mut at = base;
        for &len in lens {
            let piece = &cpts[at..at + len];
            let mut run = 0;
            for &c in piece {
                if c == '-' as u32 {
                    if run > 0 {
                        out.push(run);
                    }
                    out.push(1);
                    run = 0;
                } else {
                    run += 1;
                }
            }
            if run > 0 {
                out.push(run);
            }
            at += len;
        }
    }
    gguf_registry::submit!(FastSplitter::new(DASHES, "dashes", split));
    gguf_registry::submit!(PreTokenizer::new("DASHES", &["dashes"], &[DASHES]));
}

fn vocab(pre: &str) -> Metadata {
    let table = gguf_tokenizer::unicode::byte_to_cpt_table();
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
    assert!(p.contains("plugin_pretok::a_duplicate") && p.contains("gguf_tokenizer::pretok"), "{p}");
    // Same priority: the provider name that sorts first wins (`gguf_tokenizer::pretok` <
    // `plugin_pretok::…`); a plug-in that means to replace a built-in gives itself a higher
    // priority.
    assert_eq!(pretok::lookup("gpt-2").unwrap().origin, "gguf_tokenizer::pretok");
}

#[test]
fn a_plugin_fast_splitter_replaces_the_engine_for_its_pattern() {
    assert_eq!(pretok::fast_splitter(dashes::DASHES).unwrap().name, "dashes");
    let r = pretok::splitter_problems();
    assert!(r.problems.is_empty(), "{r:?}");
    let text = "a-bc--d-".as_bytes();
    let before = dashes::CALLS.load(Ordering::Relaxed);
    let fast = CompiledPre::new(&[dashes::DASHES], false).unwrap().split(text).unwrap();
    assert!(dashes::CALLS.load(Ordering::Relaxed) > before, "the fast splitter did not run");
    // The same words as the regex engine on the same pattern (a different spelling of
    // it, so the fast splitter does not take over).
    let engine = CompiledPre::new(&["(?:[^-]+|-)"], false).unwrap().split(text).unwrap();
    assert_eq!(fast, engine);
    let words: Vec<&[u8]> = fast.iter().map(|w| w.as_slice()).collect();
    assert_eq!(words, [&b"a"[..], b"-", b"bc", b"-", b"-", b"d", b"-"]);
    // And a vocabulary naming the plug-in pre-tokenizer goes through it.
    let t = Tokenizer::from_gguf(&vocab("dashes")).unwrap();
    let before = dashes::CALLS.load(Ordering::Relaxed);
    t.encode("ab-123", false, false).unwrap();
    assert!(dashes::CALLS.load(Ordering::Relaxed) > before);
}
