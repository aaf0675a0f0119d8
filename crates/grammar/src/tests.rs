//! Tests on a hand-made vocabulary (no model file needed).

use std::sync::Arc;

use serde_json::json;

use super::*;

#[path = "../tests/common/mod.rs"]
mod common;

const EOS: u32 = 300;
const IM_START: u32 = 301;

/// Bytes 0x00..=0xFE, some multi-byte pieces, `<|eos|>` (EOS) and `<|im_start|>` (special).
fn tiny_vocab() -> Arc<Vocab> {
    let mut bytes: Vec<Vec<u8>> = (0..=0xFEu8).map(|b| vec![b]).collect();
    for p in [
        "{\"", "\":", "\",", "\"}", "true", "false", "null", "  ", "\n", "ab", "abc", "12", "34", "=", "x+", "é",
        "\"a", ", \"", "name", "age", "-1",
    ] {
        bytes.push(p.as_bytes().to_vec());
    }
    while bytes.len() < EOS as usize {
        bytes.push(format!("pad{}", bytes.len()).into_bytes());
    }
    bytes.push(b"<|eos|>".to_vec());
    bytes.push(b"<|im_start|>".to_vec());
    let mut special = vec![false; bytes.len()];
    special[IM_START as usize] = true;
    Arc::new(Vocab::new(bytes, special, vec![EOS]).unwrap())
}

fn tok(v: &Vocab, s: &str) -> u32 {
    (0..v.n_vocab() as u32).find(|&t| v.token_bytes(t) == s.as_bytes()).unwrap()
}

#[test]
fn types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Vocab>();
    send_sync::<Arc<Vocab>>();
    send::<Constraint>();
}

#[test]
fn vocab_checks_its_input() {
    let e = |r: Result<Vocab>| r.unwrap_err().to_string();
    assert!(e(Vocab::new(vec![], vec![], vec![0])).contains("no tokens"));
    assert!(e(Vocab::new(vec![b"a".to_vec()], vec![], vec![0])).contains("special flags"));
    assert!(e(Vocab::new(vec![b"a".to_vec()], vec![false], vec![])).contains("end-of-generation"));
    assert!(e(Vocab::new(vec![b"a".to_vec()], vec![false], vec![3])).contains("out of range"));
    // byte-level BPE has a token for the raw byte 0xFF
    assert!(Vocab::new(vec![vec![0xFF], b"e".to_vec()], vec![false, true], vec![1]).is_ok());
}

#[test]
fn random_json_is_valid_for_every_schema() {
    let v = tiny_vocab();
    for (name, schema) in common::schemas() {
        let validator = jsonschema::validator_for(&schema).unwrap();
        for seed in 0..4 {
            let run = common::drive(&v, &Spec::JsonSchema(schema.clone()), seed, 4000);
            assert!(run.finished, "{name}/{seed}: not finished after {} tokens: {}", run.tokens.len(), run.text);
            let value: serde_json::Value =
                serde_json::from_str(&run.text).unwrap_or_else(|e| panic!("{name}/{seed}: {e}: {}", run.text));
            assert!(validator.is_valid(&value), "{name}/{seed}: {}", run.text);
        }
    }
}

#[test]
fn json_object_gives_an_object() {
    let v = tiny_vocab();
    for seed in 0..3 {
        let run = common::drive(&v, &Spec::JsonObject, seed, 3000);
        if run.finished {
            let value: serde_json::Value = serde_json::from_str(&run.text).unwrap();
            assert!(value.is_object(), "{}", run.text);
        } else {
            assert!(run.text.starts_with('{'), "{}", run.text);
        }
    }
}

#[test]
fn eos_only_when_the_grammar_can_end() {
    let v = tiny_vocab();
    let mut c = Constraint::new(&v, &Spec::Gbnf("root ::= \"ab\" \"c\"?\n".into())).unwrap();
    assert!(!c.can_end().unwrap());
    assert!(!c.is_finished());
    let mut logits = vec![0.0; v.n_vocab()];
    c.apply(&mut logits).unwrap();
    assert_eq!(logits[EOS as usize], f32::NEG_INFINITY);
    assert!(logits[tok(&v, "a") as usize] == 0.0 && logits[tok(&v, "ab") as usize] == 0.0);
    assert!(logits[tok(&v, "abc") as usize] == 0.0);
    assert_eq!(logits[tok(&v, "b") as usize], f32::NEG_INFINITY);
    c.accept(tok(&v, "ab")).unwrap();
    assert!(c.can_end().unwrap(), "\"ab\" is complete");
    assert!(!c.is_finished(), "\"c\" may still follow");
    let mut logits = vec![0.0; v.n_vocab()];
    c.apply(&mut logits).unwrap();
    assert_eq!(logits[EOS as usize], 0.0);
    c.accept(tok(&v, "c")).unwrap();
    assert!(c.is_finished(), "nothing can follow \"abc\"");
    let mut logits = vec![0.0; v.n_vocab() + 7];
    c.apply(&mut logits).unwrap();
    let allowed: Vec<usize> = (0..logits.len()).filter(|&i| logits[i] == 0.0).collect();
    assert_eq!(allowed, vec![EOS as usize], "only EOS after the end");
    c.accept(EOS).unwrap();
    assert!(c.is_finished());
}

#[test]
fn forbidden_tokens_are_errors_and_leave_the_state() {
    let v = tiny_vocab();
    let mut c = Constraint::new(&v, &Spec::Gbnf("root ::= [0-9]+ \";\"\n".into())).unwrap();
    let e = c.accept(tok(&v, "a")).unwrap_err();
    assert!(matches!(e, Error::TokenNotAllowed { .. }), "{e}");
    assert!(e.to_string().contains("\"a\""), "{e}");
    assert!(matches!(c.accept(EOS).unwrap_err(), Error::TokenNotAllowed { .. }), "EOS before the end");
    assert!(matches!(c.accept(IM_START).unwrap_err(), Error::TokenNotAllowed { .. }));
    assert!(matches!(c.accept(99_999).unwrap_err(), Error::TokenOutOfRange { .. }));
    c.accept(tok(&v, "12")).unwrap();
    c.accept(tok(&v, "3")).unwrap();
    c.accept(tok(&v, ";")).unwrap();
    assert!(c.is_finished());
    let mut short = vec![0.0; 10];
    assert!(matches!(c.apply(&mut short).unwrap_err(), Error::LogitsLen { .. }));
}

#[test]
fn special_tokens_only_where_referenced() {
    let v = tiny_vocab();
    let mut c = Constraint::new(&v, &Spec::Gbnf("root ::= .*\n".into())).unwrap();
    assert!(!c.is_allowed(IM_START).unwrap());
    assert!(c.is_allowed(tok(&v, "é")).unwrap());
    let mut c = Constraint::new(&v, &Spec::Gbnf("root ::= \"x\" <|im_start|> \"y\"\n".into())).unwrap();
    c.accept(tok(&v, "x")).unwrap();
    assert!(c.is_allowed(IM_START).unwrap());
    c.accept(IM_START).unwrap();
    c.accept(tok(&v, "y")).unwrap();
    assert!(c.is_finished());
    let mut c = Constraint::new(&v, &Spec::Gbnf("root ::= <[301]> !<[5]>\n".into())).unwrap();
    c.accept(IM_START).unwrap();
    assert!(!c.is_allowed(5).unwrap());
    assert!(c.is_allowed(6).unwrap());
    let e = Constraint::new(&v, &Spec::Gbnf("root ::= <|nope|>\n".into())).unwrap_err();
    assert!(e.to_string().contains("<|nope|> is not a single token"), "{e}");
}

#[test]
fn arithmetic_outputs_match_the_grammar() {
    // llama.cpp's grammars/arithmetic.gbnf
    let g = r#"root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
"#;
    let v = tiny_vocab();
    let term = r"(?:[a-z][a-z0-9_]*[ \t\n]*|[0-9]+[ \t\n]*|\([ \t\n]*.*\)[ \t\n]*)";
    let line = regex::Regex::new(&format!(r"^(?s:(?:{term}(?:[-+*/]{term})*=[ \t\n]*{term}\n)+)$")).unwrap();
    let mut finished = 0;
    for seed in 0..20 {
        let run = common::drive(&v, &Spec::Gbnf(g.into()), seed, 300);
        if run.eos {
            finished += 1;
            assert!(line.is_match(&run.text), "seed {seed}: {:?}", run.text);
        }
    }
    assert!(finished > 0, "no run reached EOS");
}

#[test]
fn invalid_specs_name_the_problem() {
    let v = tiny_vocab();
    let err = |s: Spec| Constraint::new(&v, &s).unwrap_err();
    let e = err(Spec::Gbnf("root ::= item\n".into()));
    assert!(matches!(e, Error::Gbnf(_)) && e.to_string().contains("undefined rule 'item'"), "{e}");
    let e = err(Spec::Gbnf("root ::= [a-\n".into()));
    assert!(e.to_string().contains("line 1"), "{e}");
    let e = err(Spec::JsonSchema(json!({"type": "strnig"})));
    assert!(matches!(e, Error::Schema(_)) && e.to_string().contains("strnig"), "{e}");
    let e = err(Spec::JsonSchema(json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})));
    assert!(e.to_string().contains("missing"), "{e}");
    let e = err(Spec::Lark("start: foo\n".into()));
    assert!(matches!(e, Error::Grammar(_)) && e.to_string().contains("foo"), "{e}");
    let e = err(Spec::Regex("(ab".into()));
    assert!(matches!(e, Error::Grammar(_)), "{e}");
}

#[test]
fn lark_and_regex_specs() {
    let v = tiny_vocab();
    let (rx1, rx2) = (regex::Regex::new("^[a-c]{2,5}-[0-9]{1,3}$").unwrap(), regex::Regex::new("^x[0-9]{2}$").unwrap());
    for seed in 0..5 {
        let run = common::drive(&v, &Spec::Regex("[a-c]{2,5}-[0-9]{1,3}".into()), seed, 100);
        assert!(run.finished || run.eos);
        assert!(rx1.is_match(&run.text), "{}", run.text);
        let run = common::drive(&v, &Spec::Lark("start: \"x\" NUM\nNUM: /[0-9]{2}/\n".into()), seed, 100);
        assert!(run.finished && rx2.is_match(&run.text), "{}", run.text);
    }
    // GBNF input that is really Lark, as llama.cpp accepts it
    let run = common::drive(&v, &Spec::Gbnf("%llguidance {}\nstart: \"ok\"\n".into()), 1, 10);
    assert_eq!(run.text, "ok");
}

#[test]
fn whitespace_before_a_newline_is_not_one_greedy_lexeme() {
    // llama.cpp's arithmetic.gbnf, shortened: `num` ends with `ws`, then "\n" follows.
    // Made a lexeme (as llguidance's gbnf_to_lark.py does), `num ws` swallows the newline
    // and the grammar can never end; the translation keeps `ws` a rule.
    let g = "root ::= (num \"=\" ws num \"\\n\")+\nnum ::= [0-9]+ ws\nws ::= [ \\t\\n]*\n";
    let naive = "start: (NUM \"=\" WS NUM \"\\n\")+\nNUM: /[0-9]/+ WS\nWS: /[ \\t\\n]/*\n";
    let v = tiny_vocab();
    let feed = |spec: Spec| {
        let mut c = Constraint::new(&v, &spec).unwrap();
        for b in "1 = 2 \n".bytes() {
            c.accept(tok(&v, &(b as char).to_string())).unwrap();
        }
        c.can_end().unwrap()
    };
    assert!(feed(Spec::Gbnf(g.into())), "the translation can end after a line");
    assert!(!feed(Spec::Lark(naive.into())), "a greedy `NUM WS` lexeme ate the newline");
}

#[test]
fn x_guidance_options_pass_through() {
    let v = tiny_vocab();
    let strict = json!({"type": "array", "items": {"type": "integer"}, "uniqueItems": true, "maxItems": 3});
    assert!(Constraint::new(&v, &Spec::JsonSchema(strict.clone())).is_err());
    let mut lenient = strict;
    lenient["x-guidance"] = json!({"lenient": true});
    assert!(Constraint::new(&v, &Spec::JsonSchema(lenient)).is_ok());
    let compact = json!({
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 0, "maximum": 999},
            "b": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}
        },
        "required": ["a", "b"],
        "additionalProperties": false,
        "x-guidance": {"whitespace_flexible": false}
    });
    for seed in 0..5 {
        let run = common::drive(&v, &Spec::JsonSchema(compact.clone()), seed, 500);
        assert!(run.finished, "{}", run.text);
        assert!(!run.text.contains([' ', '\n', '\t']), "compact JSON: {}", run.text);
        let value: serde_json::Value = serde_json::from_str(&run.text).unwrap();
        assert!(value["a"].is_i64() && value["b"].is_array(), "{}", run.text);
    }
}

#[test]
fn token_ids_out_of_range_are_errors() {
    let v = tiny_vocab();
    let e = Constraint::new(&v, &Spec::Gbnf("root ::= <[99999]>\n".into())).unwrap_err();
    assert!(e.to_string().contains("99999"), "{e}");
}
