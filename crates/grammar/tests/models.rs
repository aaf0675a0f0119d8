//! Constraints over real vocabularies (the cached models; each test is skipped with a
//! note when its file is absent) and llama.cpp's GBNF grammars.

mod common;

use std::sync::Arc;
use std::time::Duration;

use gguf_grammar::{Constraint, Error, Spec, Vocab};

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn report(label: &str, times: &mut [Duration]) {
    times.sort();
    let mean = times.iter().sum::<Duration>().as_secs_f64() * 1e6 / times.len().max(1) as f64;
    eprintln!(
        "{label}: {} masks, mean {mean:.0} us, p50 {:.0} us, p99 {:.0} us",
        times.len(),
        common::percentile_us(times, 50.0),
        common::percentile_us(times, 99.0)
    );
}

#[test]
fn smollm2_random_json_always_matches_the_schema() {
    let Some(v) = common::model_vocab(SMOLLM2) else { return };
    assert_eq!(v.n_vocab(), 49152);
    let mut times = Vec::new();
    for (name, schema) in common::schemas() {
        let validator = jsonschema::validator_for(&schema).unwrap();
        for seed in 0..10 {
            let run = common::drive(&v, &Spec::JsonSchema(schema.clone()), seed, 3000);
            assert!(run.finished, "{name}/{seed}: unfinished after {} tokens: {}", run.tokens.len(), run.text);
            let value: serde_json::Value =
                serde_json::from_str(&run.text).unwrap_or_else(|e| panic!("{name}/{seed}: {e}: {}", run.text));
            let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{name}/{seed}: {errors:?}: {}", run.text);
            times.extend(run.mask_times);
        }
    }
    report("SmolLM2 JSON schemas", &mut times);
}

#[test]
fn smollm2_json_object() {
    let Some(v) = common::model_vocab(SMOLLM2) else { return };
    let mut done = 0;
    for seed in 0..10 {
        let run = common::drive(&v, &Spec::JsonObject, seed, 1500);
        assert!(run.text.starts_with('{'), "{}", run.text);
        if run.finished {
            done += 1;
            let value: serde_json::Value =
                serde_json::from_str(&run.text).unwrap_or_else(|e| panic!("{e}: {}", run.text));
            assert!(value.is_object());
        }
    }
    assert!(done > 0, "no json_object run finished");
}

#[test]
fn smollm2_arithmetic_gbnf() {
    let Some(v) = common::model_vocab(SMOLLM2) else { return };
    let g = "root  ::= (expr \"=\" ws term \"\\n\")+\nexpr  ::= term ([-+*/] term)*\n\
             term  ::= ident | num | \"(\" ws expr \")\" ws\nident ::= [a-z] [a-z0-9_]* ws\n\
             num   ::= [0-9]+ ws\nws    ::= [ \\t\\n]*\n";
    let ws = r"[ \t\n]*";
    let atom = format!(r"(?:[a-z][a-z0-9_]*{ws}|[0-9]+{ws}|\({ws}.*\){ws})");
    let expr = format!(r"{atom}(?:[-+*/]{atom})*");
    let line = regex::Regex::new(&format!(r"^(?s:(?:{expr}={ws}{atom}\n)+)$")).unwrap();
    let mut ended = 0;
    for seed in 0..10 {
        let run = common::drive_with(&v, &Spec::Gbnf(g.into()), seed, 400, 0.9);
        // a prefix of a valid text until it ends; a valid text when it does
        assert!(run.text.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '('));
        if run.eos {
            ended += 1;
            assert!(line.is_match(&run.text), "seed {seed}: {:?}", run.text);
        }
    }
    assert!(ended > 0, "no arithmetic run reached EOS");
}

#[test]
fn smollm2_eos_and_forbidden_tokens() {
    let Some(v) = common::model_vocab(SMOLLM2) else { return };
    let eos = v.eos()[0];
    let schema = serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]});
    let mut c = Constraint::new(&v, &Spec::JsonSchema(schema)).unwrap();
    assert!(!c.can_end().unwrap());
    let mut logits = vec![0.0; v.n_vocab()];
    c.apply(&mut logits).unwrap();
    for &e in v.eos() {
        assert_eq!(logits[e as usize], f32::NEG_INFINITY, "EOS {e} before the object");
    }
    let id = |s: &str| (0..v.n_vocab() as u32).find(|&t| v.token_bytes(t) == s.as_bytes()).unwrap();
    assert!(matches!(c.accept(id("hello")), Err(Error::TokenNotAllowed { .. })));
    assert!(matches!(c.accept(eos), Err(Error::TokenNotAllowed { .. })));
    for t in ["{\"", "a", "\":", "1", "2", "}"] {
        c.accept(id(t)).unwrap_or_else(|e| panic!("{t:?}: {e}"));
    }
    assert!(c.can_end().unwrap());
    c.accept(eos).unwrap();
    assert!(c.is_finished());
}

#[test]
fn smollm2_special_tokens_are_never_text() {
    let Some(v) = common::model_vocab(SMOLLM2) else { return };
    let mut c = Constraint::new(&v, &Spec::Gbnf("root ::= .*\n".into())).unwrap();
    let im_start = (0..v.n_vocab() as u32).find(|&t| v.token_bytes(t).ends_with(b"<|im_start|>")).unwrap();
    assert!(!c.is_allowed(im_start).unwrap());
    let mut c = Constraint::new(&v, &Spec::Gbnf("root ::= \"hi\" <|im_end|>\n".into())).unwrap();
    let im_end = (0..v.n_vocab() as u32).find(|&t| v.token_bytes(t).ends_with(b"<|im_end|>")).unwrap();
    let hi = (0..v.n_vocab() as u32).find(|&t| v.token_bytes(t) == b"hi").unwrap();
    c.accept(hi).unwrap();
    assert!(c.is_allowed(im_end).unwrap());
}

/// A byte-level vocabulary, for grammars when no model is cached.
fn byte_vocab() -> Arc<Vocab> {
    let mut bytes: Vec<Vec<u8>> = (0..=0xFEu8).map(|b| vec![b]).collect();
    bytes.push(b"<eos>".to_vec());
    let special = vec![false; bytes.len()];
    Arc::new(Vocab::new(bytes, special, vec![255]).unwrap())
}

#[test]
fn llama_cpp_grammars_compile_and_generate() {
    let Some(dir) = common::llama_cpp_grammars() else { return };
    let vocabs: Vec<(&str, Arc<Vocab>)> = match common::model_vocab(SMOLLM2) {
        Some(v) => vec![("bytes", byte_vocab()), ("SmolLM2", v)],
        None => vec![("bytes", byte_vocab())],
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "gbnf"));
    files.sort();
    assert!(files.len() >= 8, "{files:?}");
    for path in &files {
        let src = std::fs::read_to_string(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        let lark = gguf_grammar::gbnf_to_lark(&src).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (vname, v) in &vocabs {
            for seed in 0..3 {
                let run = common::drive_with(v, &Spec::Gbnf(src.clone()), seed, 80, 0.5);
                assert!(run.eos || !run.tokens.is_empty(), "{name}/{vname}: nothing generated\n{lark}");
                if name.starts_with("json") && run.eos {
                    serde_json::from_str::<serde_json::Value>(&run.text)
                        .unwrap_or_else(|e| panic!("{name}/{vname}/{seed}: {e}: {}", run.text));
                }
            }
        }
        eprintln!("{name}: ok");
    }
}

#[test]
fn json_gbnf_outputs_are_json() {
    let Some(dir) = common::llama_cpp_grammars() else { return };
    let Some(v) = common::model_vocab(SMOLLM2) else { return };
    let src = std::fs::read_to_string(dir.join("json.gbnf")).unwrap();
    let mut ended = 0;
    for seed in 0..10 {
        let run = common::drive_with(&v, &Spec::Gbnf(src.clone()), seed, 400, 0.9);
        if run.eos {
            ended += 1;
            let value: serde_json::Value =
                serde_json::from_str(&run.text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {}", run.text));
            assert!(value.is_object());
        }
    }
    assert!(ended > 0, "no json.gbnf run reached EOS");
}

#[test]
fn large_vocabularies_mask_quickly() {
    for (file, n) in [("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 151936), ("gemma-3-270m-q4_k_m.gguf", 262144)] {
        let Some(v) = common::model_vocab(file) else { continue };
        assert_eq!(v.n_vocab(), n);
        let mut times = Vec::new();
        for (name, schema) in common::schemas() {
            let validator = jsonschema::validator_for(&schema).unwrap();
            for seed in 0..2 {
                let run = common::drive(&v, &Spec::JsonSchema(schema.clone()), seed, 3000);
                assert!(run.finished, "{file} {name}/{seed}: {}", run.text);
                let value: serde_json::Value = serde_json::from_str(&run.text).unwrap();
                assert!(validator.is_valid(&value), "{file} {name}/{seed}: {}", run.text);
                times.extend(run.mask_times);
            }
        }
        report(file, &mut times);
    }
}
