//! A tiny model whose BPE vocabulary names the plug-in pre-tokenizer, end to end through
//! the rebuilt binary (`gguf-custom-pretok`) and the stock one (`gguf-without-custom-pretok`,
//! `gguf_cli::main()` with nothing of this crate linked).
//!
//! The vocabulary is GPT-2's 256 byte tokens plus merges that build `hello`, `world`,
//! `123`, and the words with a space glued on either side (`helloĠ`, `Ġworld`, `Ġ123`),
//! so which side of a word its space lands on — the one thing the two pre-tokenizers
//! disagree on — shows in the tokens.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gguf_format::{Array, Value};
use gguf_models::synthetic::{write, Tiny};

const PLUGIN: &str = env!("CARGO_BIN_EXE_gguf-custom-pretok");
const STOCK: &str = env!("CARGO_BIN_EXE_gguf-without-custom-pretok");
/// The plug-in's name (spelled out: this test names nothing of the crate, only its binaries run).
const NAME: &str = "demo-trailing-space";

fn gguf(bin: &str, args: &[&str]) -> Output {
    Command::new(bin).args(args).env("GGUF_CACHE", "/nonexistent-cache").output().unwrap()
}

fn ok(o: &Output, what: &str) -> String {
    assert!(o.status.success(), "{what}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// GPT-2's byte → printable character map (`bytes_to_unicode`).
fn byte_char(b: u8) -> char {
    let printable = |c: u32| (0x21..=0x7e).contains(&c) || (0xa1..=0xac).contains(&c) || (0xae..=0xff).contains(&c);
    if printable(b as u32) {
        return char::from_u32(b as u32).unwrap();
    }
    let n = (0..b as u32).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// Merges, in rank order, that build `words` left to right (`h e`, `he l`, ...), then
/// `extra` ones; every merge result is a token.
fn vocab() -> (Vec<String>, Vec<String>) {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let mut merges = Vec::new();
    let mut merge = |a: &str, b: &str, tokens: &mut Vec<String>| {
        merges.push(format!("{a} {b}"));
        tokens.push(format!("{a}{b}"));
    };
    for word in ["hello", "world", "123"] {
        let c: Vec<String> = word.chars().map(String::from).collect();
        let mut acc = c[0].clone();
        for ch in &c[1..] {
            merge(&acc, ch, &mut tokens);
            acc.push_str(ch);
        }
    }
    let sp = byte_char(b' ').to_string();
    merge("hello", &sp, &mut tokens);
    merge(&sp, "world", &mut tokens);
    merge(&sp, "123", &mut tokens);
    tokens.push("<|endoftext|>".into());
    (tokens, merges)
}

/// A runnable tiny llama (`gguf_models::synthetic`) with that vocabulary and `pre`.
fn model(dir: &Path, pre: &str) -> PathBuf {
    let (tokens, merges) = vocab();
    let n = tokens.len();
    let mut types = vec![1i32; n - 1];
    types.push(3);
    let strings = |v: &[String]| Value::Array(Array::String(v.iter().map(|s| s.clone().into_bytes()).collect()));
    let extra = [
        ("tokenizer.ggml.model", Value::from("gpt2")),
        ("tokenizer.ggml.pre", Value::from(pre)),
        ("tokenizer.ggml.tokens", strings(&tokens)),
        ("tokenizer.ggml.token_type", Value::Array(Array::I32(types))),
        ("tokenizer.ggml.merges", strings(&merges)),
        ("tokenizer.ggml.eos_token_id", Value::U32(n as u32 - 1)),
        ("tokenizer.ggml.bos_token_id", Value::U32(n as u32 - 1)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
    ];
    let t = Tiny { n_vocab: n as u64, ..Tiny::new("llama") };
    let p = dir.join(format!("{pre}.gguf"));
    write(&t, &p, None, &extra).unwrap();
    p
}

/// `tokenize`'s lines `  id -> 'piece'` as (id, piece).
fn pieces(out: &str) -> Vec<(u32, String)> {
    out.lines()
        .map(|l| {
            let (id, piece) = l.split_once(" -> ").unwrap_or_else(|| panic!("{l:?}"));
            (id.trim().parse().unwrap(), piece.trim_matches('\'').to_string())
        })
        .collect()
}

fn ids_of(vocab: &[String], pieces: &[&str]) -> Vec<u32> {
    pieces
        .iter()
        .map(|p| {
            let t: String = p.bytes().map(byte_char).collect();
            vocab.iter().position(|v| *v == t).unwrap_or_else(|| panic!("{p:?} is not a token")) as u32
        })
        .collect()
}

const TEXT: &str = "hello world 123";

#[test]
fn the_plugin_splits_the_text_of_a_vocabulary_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (vocab, _) = vocab();
    let mine = model(dir.path(), NAME);
    let gpt2 = model(dir.path(), "gpt-2");

    // GPT-2's words keep the space in front: `hello`, ` world`, ` 123` — each one token.
    let o = ok(&gguf(PLUGIN, &["tokenize", "-m", gpt2.to_str().unwrap(), "-p", TEXT]), "tokenize gpt-2");
    let want_gpt2 = ["hello", " world", " 123"];
    let got: Vec<(u32, String)> = pieces(&o);
    assert_eq!(got.iter().map(|p| p.1.as_str()).collect::<Vec<_>>(), want_gpt2, "{o}");
    assert_eq!(got.iter().map(|p| p.0).collect::<Vec<_>>(), ids_of(&vocab, &want_gpt2));

    // The plug-in's words keep it behind (`hello `, `world `) and digits apart: `hello `
    // is a token, `world ` is `world` + ` ` (no merge glues a space after it), and the
    // digits stay single although `123` is a token.
    let o = ok(&gguf(PLUGIN, &["tokenize", "-m", mine.to_str().unwrap(), "-p", TEXT]), "tokenize plug-in");
    let want = ["hello ", "world", " ", "1", "2", "3"];
    let got = pieces(&o);
    assert_eq!(got.iter().map(|p| p.1.as_str()).collect::<Vec<_>>(), want, "{o}");
    let want_ids = ids_of(&vocab, &want);
    assert_eq!(got.iter().map(|p| p.0).collect::<Vec<_>>(), want_ids);

    // The same split feeds the model: `run` through the rebuilt binary.
    let o = gguf(PLUGIN, &["run", "-m", mine.to_str().unwrap(), "-p", TEXT, "-n", "3", "--temp", "0", "--json"]);
    let out = ok(&o, "run");
    let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let prompt: Vec<u32> = v["prompt_tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    assert_eq!(prompt, want_ids, "{v}");
}

#[test]
fn the_stock_binary_refuses_the_file_naming_the_pre_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let mine = model(dir.path(), NAME);
    for args in [
        vec!["tokenize", "-m", mine.to_str().unwrap(), "-p", TEXT],
        vec!["run", "-m", mine.to_str().unwrap(), "-p", TEXT, "-n", "1"],
    ] {
        let o = gguf(STOCK, &args);
        assert!(!o.status.success(), "the stock binary accepted {NAME}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("unknown pre-tokenizer type '{NAME}'")), "{}: {err}", args[0]);
        assert!(err.contains("gpt-2"), "the known names are listed: {err}");
        assert!(o.stdout.is_empty());
    }
    // ... while the same vocabulary naming gpt-2 works there.
    let gpt2 = model(dir.path(), "gpt-2");
    ok(&gguf(STOCK, &["tokenize", "-m", gpt2.to_str().unwrap(), "-p", TEXT]), "stock tokenize gpt-2");
}

#[test]
fn types_check_lists_the_plugin_and_is_sound() {
    let plug = ok(&gguf(PLUGIN, &["types", "--check"]), "types --check");
    let stock = ok(&gguf(STOCK, &["types", "--check"]), "stock types --check");
    let count = |s: &str| -> usize {
        let l = s.lines().find(|l| l.starts_with("pre-tokenizers: ")).unwrap_or_else(|| panic!("{s}"));
        assert!(l.contains("0 problem(s)") && l.ends_with(": ok"), "{l}");
        l["pre-tokenizers: ".len()..].split_whitespace().next().unwrap().parse().unwrap()
    };
    assert_eq!(count(&plug), count(&stock) + 1, "one name more with the plug-in:\n{plug}\n{stock}");
    assert!(!plug.contains("PROBLEMS"), "{plug}");
}
