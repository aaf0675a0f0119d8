//! Hostile tokenizer metadata: every malformed vocabulary is a clear error naming the
//! key (never a panic, never an unbounded allocation), and load time stays linear in
//! the vocabulary's bytes.

use std::time::{Duration, Instant};

use gguf_format::{Array, Metadata, Value};
use gguf_tokenizer::Tokenizer;

fn strings<S: AsRef<[u8]>>(v: &[S]) -> Value {
    Value::Array(Array::String(v.iter().map(|s| s.as_ref().to_vec()).collect()))
}

/// The 256 GPT-2 byte symbols.
fn byte_symbols() -> Vec<Vec<u8>> {
    let table = gguf_tokenizer::unicode::byte_to_cpt_table();
    (0..256).map(|b| char::from_u32(table[b]).unwrap().to_string().into_bytes()).collect()
}

/// A small byte-level BPE vocabulary (gpt2): bytes, a few merges, two control tokens.
fn bpe() -> Metadata {
    let mut toks = byte_symbols();
    let merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or"];
    for m in merges {
        toks.push(m.replace(' ', "").into_bytes());
    }
    toks.push(b"<|endoftext|>".to_vec());
    toks.push(b"<|im_start|>".to_vec());
    let n = toks.len();
    let mut types = vec![1i32; n];
    types[n - 2] = 3;
    types[n - 1] = 3;
    let mut md = Metadata::new();
    md.set("tokenizer.ggml.model", Value::from("gpt2"));
    md.set("tokenizer.ggml.pre", Value::from("gpt-2"));
    md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks.into())));
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    md.set("tokenizer.ggml.merges", strings(&merges));
    md.set("tokenizer.ggml.bos_token_id", Value::U32((n - 2) as u32));
    md.set("tokenizer.ggml.eos_token_id", Value::U32((n - 2) as u32));
    md
}

/// A SentencePiece vocabulary with scores and byte tokens (`model` = llama or t5).
fn spm(model: &str) -> Metadata {
    let mut toks: Vec<Vec<u8>> = vec![b"<unk>".to_vec(), b"<s>".to_vec(), b"</s>".to_vec()];
    let mut types = vec![2i32, 3, 3];
    let mut scores = vec![0f32, 0.0, 0.0];
    for b in 0..256 {
        toks.push(format!("<0x{b:02X}>").into_bytes());
        types.push(6);
        scores.push(0.0);
    }
    for (t, s) in [("▁", -1.0), ("h", -2.0), ("e", -2.0), ("l", -2.0), ("o", -2.0), ("he", -3.0), ("ll", -3.0)] {
        toks.push(t.as_bytes().to_vec());
        types.push(1);
        scores.push(s);
    }
    let mut md = Metadata::new();
    md.set("tokenizer.ggml.model", Value::from(model));
    md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks.into())));
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    md.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    if model == "t5" {
        md.set("tokenizer.ggml.unknown_token_id", Value::U32(0));
    }
    md
}

fn n_tokens(md: &Metadata) -> usize {
    match md.get_array("tokenizer.ggml.tokens") {
        Some(Array::String(v)) => v.len(),
        _ => 0,
    }
}

/// Loading `md` fails with a message that names `key`.
#[track_caller]
fn err_names(md: &Metadata, key: &str) -> String {
    match Tokenizer::from_gguf(md) {
        Ok(_) => panic!("expected an error naming {key}"),
        Err(e) => {
            let m = e.to_string();
            assert!(m.contains(key), "error {m:?} does not name {key:?}");
            m
        }
    }
}

/// Encodes and decodes a few texts; only checks nothing panics.
fn exercise(t: &Tokenizer) {
    for text in [&b"hello world <|endoftext|> <s> \xff\xfe\xc3"[..], b"", "▁▁ 漢字 é\u{301}\n\n".as_bytes()] {
        for (add, parse) in [(false, false), (true, true)] {
            if let Ok(ids) = t.encode_bytes(text, add, parse) {
                let _ = t.decode(&ids, false, true);
                let _ = t.decode(&ids, true, false);
            }
        }
    }
    let _ = t.decode(&[u32::MAX], false, false);
}

fn with_control_token(mut md: Metadata, token: Vec<u8>) -> Metadata {
    let Some(Array::String(mut toks)) = md.get_array("tokenizer.ggml.tokens").cloned() else { unreachable!() };
    let Some(Array::I32(mut types)) = md.get_array("tokenizer.ggml.token_type").cloned() else { unreachable!() };
    toks.push(token);
    types.push(3);
    md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks)));
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    md
}

// ---------------------------------------------------------------------------------------
// load time

/// A 100 KB `AAAA…` control token: the special-token automaton used to be a DFA whose
/// build is quadratic in such a token (minutes); now it loads in milliseconds.
#[test]
fn long_repetitive_control_token_loads_in_linear_time() {
    for len in [100_000usize, 1_000_000] {
        let md = with_control_token(bpe(), vec![b'A'; len]);
        let t0 = Instant::now();
        let t = Tokenizer::from_gguf(&md).unwrap();
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(2), "{len}-byte control token took {took:?} to load");
        // and the token still parses out of a text, once, with its neighbours intact
        let id = (n_tokens(&md) - 1) as u32;
        let mut text = b"xA".to_vec();
        text.extend(std::iter::repeat_n(b'A', len));
        text.extend_from_slice(b"AAy");
        let ids = t.encode_bytes(&text, false, true).unwrap();
        assert_eq!(ids.iter().filter(|&&i| i == id).count(), 1);
        assert_eq!(t.decode(&ids, false, true).unwrap(), text);
        assert!(t0.elapsed() < Duration::from_secs(4), "{len}: load + encode took {:?}", t0.elapsed());
    }
}

/// Many nested repetitive control tokens (`A`, `AA`, … — about 1 MB in all).
#[test]
fn many_nested_control_tokens_load_quickly() {
    let mut md = bpe();
    let Some(Array::String(mut toks)) = md.get_array("tokenizer.ggml.tokens").cloned() else { unreachable!() };
    let Some(Array::I32(mut types)) = md.get_array("tokenizer.ggml.token_type").cloned() else { unreachable!() };
    for k in 2..=1400 {
        toks.push(vec![b'B'; k]);
        types.push(3);
    }
    md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks)));
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    let t0 = Instant::now();
    let t = Tokenizer::from_gguf(&md).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "took {:?}", t0.elapsed());
    let ids = t.encode_bytes(&[b'B'; 3000], false, true).unwrap();
    assert_eq!(t.decode(&ids, false, true).unwrap(), vec![b'B'; 3000]);
}

/// A long normal token of codepoints outside the GPT-2 byte table: llama.cpp's
/// `llama_decode_text` repeats the whole text per such codepoint (quadratic); that is
/// refused instead of allocated.
#[test]
fn quadratic_piece_is_refused() {
    let mut md = bpe();
    let Some(Array::String(toks)) = md.get_array("tokenizer.ggml.tokens") else { unreachable!() };
    let mut toks = toks.to_vecs();
    let Some(Array::I32(mut types)) = md.get_array("tokenizer.ggml.token_type").cloned() else { unreachable!() };
    toks.push("€".repeat(100_000).into_bytes());
    types.push(1);
    md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks.clone().into())));
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types.clone())));
    let t0 = Instant::now();
    let m = err_names(&md, "tokenizer.ggml.tokens");
    assert!(m.contains("piece"), "{m}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    // a few such codepoints in a short token are fine (and decode as llama.cpp does)
    toks.pop();
    toks.push("a€b".as_bytes().to_vec());
    md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks.clone().into())));
    let t = Tokenizer::from_gguf(&md).unwrap();
    let id = (toks.len() - 1) as u32;
    assert_eq!(t.token_to_piece(id, true).unwrap(), b"a[UNK_BYTE_0xe282aca\xe2\x82\xacb]b");
}

// ---------------------------------------------------------------------------------------
// malformed metadata: errors naming the key

#[test]
fn array_length_mismatches_are_errors() {
    for model in ["llama", "t5"] {
        let base = spm(model);
        let n = n_tokens(&base);
        for len in [0, n - 1, n + 1, 3 * n] {
            let mut md = base.clone();
            md.set("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0; len])));
            let m = err_names(&md, "tokenizer.ggml.scores");
            assert!(m.contains(&format!("{len} scores")), "{m}");
            let mut md = base.clone();
            md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1; len])));
            err_names(&md, "tokenizer.ggml.token_type");
        }
    }
    let mut md = bpe();
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1; 3])));
    err_names(&md, "tokenizer.ggml.token_type");
}

#[test]
fn wrong_value_types_are_errors() {
    let cases: [(&str, Value); 8] = [
        ("tokenizer.ggml.tokens", Value::Array(Array::I32(vec![1, 2]))),
        ("tokenizer.ggml.scores", Value::Array(Array::String(vec![b"x".to_vec()].into()))),
        ("tokenizer.ggml.token_type", Value::Array(Array::F32(vec![1.0]))),
        ("tokenizer.ggml.merges", Value::Array(Array::U8(vec![1]))),
        ("tokenizer.ggml.add_bos_token", Value::U32(1)),
        ("tokenizer.ggml.add_space_prefix", Value::from("yes")),
        ("tokenizer.ggml.bos_token_id", Value::from("1")),
        ("tokenizer.ggml.eos_token_id", Value::F32(1.0)),
    ];
    for (key, v) in cases {
        let mut md = if key.contains("scores") { spm("llama") } else { bpe() };
        md.set(key, v);
        err_names(&md, key);
    }
    let mut md = spm("t5");
    md.set("tokenizer.ggml.precompiled_charsmap", Value::Array(Array::F32(vec![1.0])));
    err_names(&md, "tokenizer.ggml.precompiled_charsmap");
}

#[test]
fn token_type_out_of_range_is_an_error() {
    for bad in [7, -1, i32::MAX, i32::MIN] {
        let mut md = spm("llama");
        let n = n_tokens(&md);
        let mut types = vec![1i32; n];
        types[n / 2] = bad;
        md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
        let m = err_names(&md, "tokenizer.ggml.token_type");
        assert!(m.contains(&bad.to_string()), "{m}");
    }
    // 0 (undefined) is a valid type
    let mut md = spm("llama");
    let mut types = vec![1i32; n_tokens(&md)];
    types[260] = 0;
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    exercise(&Tokenizer::from_gguf(&md).unwrap());
}

#[test]
fn empty_or_missing_vocabulary_is_an_error() {
    for model in ["gpt2", "llama", "bert", "t5", "gemma4"] {
        let mut md = if model == "gpt2" || model == "gemma4" { bpe() } else { spm("llama") };
        md.set("tokenizer.ggml.model", Value::from(model));
        md.set("tokenizer.ggml.tokens", Value::Array(Array::String(Default::default())));
        md.remove("tokenizer.ggml.scores");
        md.remove("tokenizer.ggml.token_type");
        err_names(&md, "tokenizer.ggml.tokens");
        md.remove("tokenizer.ggml.tokens");
        err_names(&md, "tokenizer.ggml.tokens");
    }
    let mut md = bpe();
    md.remove("tokenizer.ggml.model");
    err_names(&md, "tokenizer.ggml.model");
    let mut md = bpe();
    md.remove("tokenizer.ggml.merges");
    err_names(&md, "tokenizer.ggml.merges");
}

#[test]
fn unknown_model_and_pre_names_are_named() {
    let mut md = bpe();
    md.set("tokenizer.ggml.model", Value::from("no-such-model"));
    let m = err_names(&md, "no-such-model");
    assert!(m.contains("gpt2"), "lists the known ones: {m}");
    let mut md = bpe();
    md.set("tokenizer.ggml.pre", Value::from("no-such-pre"));
    let m = err_names(&md, "no-such-pre");
    assert!(m.contains("qwen2"), "lists the known ones: {m}");
    // a non-string model is a missing model
    let mut md = bpe();
    md.set("tokenizer.ggml.model", Value::U8(1));
    err_names(&md, "tokenizer.ggml.model");
}

#[test]
fn duplicate_token_text_is_an_error() {
    let mut md = bpe();
    let Some(Array::String(toks)) = md.get_array("tokenizer.ggml.tokens") else { unreachable!() };
    let mut toks = toks.to_vecs();
    toks[260] = toks[5].clone();
    md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks.into())));
    err_names(&md, "tokenizer.ggml.tokens");
}

#[test]
fn merges_that_name_unknown_tokens_or_are_malformed_are_errors() {
    let bad: [&[&str]; 4] = [
        &["x y", "q z", "zz zz"],            // parts and results not in the vocabulary
        &["hello", "ab", "x"],               // no separating space
        &["", " ", "  "],                    // empty
        &["\u{1}\u{2}", "h  e", "\u{ff} x"], // odd bytes, double space
    ];
    for merges in bad {
        let mut md = bpe();
        md.set("tokenizer.ggml.merges", strings(merges));
        err_names(&md, "tokenizer.ggml.merges");
    }
    // invalid UTF-8 in merges: an error as well, not a panic
    let mut md = bpe();
    md.set("tokenizer.ggml.merges", strings(&[&b"\xff \xfe"[..], b"\xc3 \x28"]));
    err_names(&md, "tokenizer.ggml.merges");
    // a stray bad merge among good ones is tolerated, as llama.cpp does
    let mut md = bpe();
    md.set("tokenizer.ggml.merges", strings(&["h e", "l l", "he ll", "hell o", "nonsense"]));
    exercise(&Tokenizer::from_gguf(&md).unwrap());
}

/// Special ids past the vocabulary: llama.cpp warns and keeps its default, so do we —
/// an id never points outside the vocabulary, and an operation that needs the token
/// says so.
#[test]
fn special_ids_out_of_range_are_ignored_like_llama_cpp() {
    for id in [u64::from(u32::MAX), 1 << 40, 300_000] {
        let mut md = bpe();
        md.set("tokenizer.ggml.bos_token_id", Value::U64(id));
        md.set("tokenizer.ggml.eos_token_id", Value::U64(id));
        md.set("tokenizer.ggml.padding_token_id", Value::U64(id));
        md.set("tokenizer.ggml.add_bos_token", Value::Bool(true));
        let t = Tokenizer::from_gguf(&md).unwrap();
        let n = t.n_vocab() as u32;
        assert!(t.bos().is_none_or(|b| b < n) && t.eos().is_none_or(|e| e < n));
        assert!(t.special_ids().pad.is_none());
        exercise(&t);
    }
    // the llama (SPM) defaults 1/2 are dropped for a vocabulary too small for them
    let mut md = spm("llama");
    md.set("tokenizer.ggml.tokens", strings(&["<unk>"]));
    md.set("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0])));
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![2])));
    let t = Tokenizer::from_gguf(&md).unwrap();
    assert!(t.bos().is_none() && t.eos().is_none());
    let e = t.encode("hi", true, false).unwrap_err().to_string();
    assert!(e.contains("BOS"), "{e}");
    // a negative id is not an id
    let mut md = bpe();
    md.set("tokenizer.ggml.bos_token_id", Value::I32(-1));
    err_names(&md, "tokenizer.ggml.bos_token_id");
}

#[test]
fn unigram_without_an_unknown_token_is_an_error() {
    let mut md = spm("t5");
    md.set("tokenizer.ggml.unknown_token_id", Value::U32(1_000_000));
    md.set("tokenizer.ggml.tokens", strings(&["a", "b"]));
    md.set("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0; 2])));
    md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1; 2])));
    err_names(&md, "tokenizer.ggml.unknown_token_id");
}

#[test]
fn malformed_precompiled_charsmap_is_an_error() {
    let key = "tokenizer.ggml.precompiled_charsmap";
    let size_only = |size: u32, extra: &[u8]| {
        let mut v = size.to_le_bytes().to_vec();
        v.extend_from_slice(extra);
        v
    };
    // truncated header, XCDA size past the end, nothing after the XCDA
    for cm in [vec![1u8, 2], vec![1, 2, 3], size_only(u32::MAX, &[]), size_only(8, &[0; 4]), size_only(4, &[0; 4])] {
        let mut md = spm("t5");
        md.set(key, Value::Array(Array::U8(cm)));
        err_names(&md, key);
    }
    // an XCDA that points outside itself or the replacements: errors at encode time
    let xcda: Vec<u32> = vec![0xFFFF_FC00, 0xFFFF_FFFF, 0x0000_0161, 0x7FFF_FFFF];
    let mut cm = ((xcda.len() * 4) as u32).to_le_bytes().to_vec();
    for w in &xcda {
        cm.extend_from_slice(&w.to_le_bytes());
    }
    cm.extend_from_slice(b"x\0");
    for cm in [cm.clone(), {
        let mut c = cm.clone();
        c[8..12].copy_from_slice(&0x0000_0161u32.to_le_bytes());
        c
    }] {
        let mut md = spm("t5");
        md.set(key, Value::Array(Array::U8(cm)));
        let t = Tokenizer::from_gguf(&md).unwrap();
        for text in ["a", "hello", "\u{0}x", "ééé"] {
            if let Err(e) = t.encode(text, true, false) {
                assert!(e.to_string().contains(key), "{e}");
            }
        }
    }
    // random bytes never panic
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for round in 0..200 {
        let len = 4 + round % 64;
        let mut cm: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        cm[..4].copy_from_slice(&(((round % 16) * 4) as u32).to_le_bytes());
        let mut md = spm("t5");
        md.set(key, Value::Array(Array::U8(cm)));
        if let Ok(t) = Tokenizer::from_gguf(&md) {
            exercise(&t);
        }
    }
}

/// Token texts need not be UTF-8 (llama.cpp keeps bytes); nothing panics on them.
#[test]
fn tokens_with_invalid_utf8_load_and_encode() {
    let odd: [&[u8]; 6] = [b"\xff", b"\xc3", b"\xe2\x96", b"a\xffb", b"\xf7\xbf\xbf\xbf", b"\xed\xa0\x80"];
    for base in [bpe(), spm("llama"), spm("t5"), {
        let mut md = spm("llama");
        md.set("tokenizer.ggml.model", Value::from("bert"));
        md
    }] {
        let mut md = base.clone();
        let Some(Array::String(mut toks)) = md.get_array("tokenizer.ggml.tokens").cloned() else { unreachable!() };
        let n0 = toks.len();
        toks.extend(odd.iter().map(|t| t.to_vec()));
        let n = toks.len();
        md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks)));
        if let Some(Array::I32(mut types)) = md.get_array("tokenizer.ggml.token_type").cloned() {
            types.extend((0..odd.len()).map(|i| [1, 3, 4, 1, 1, 1][i]));
            md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
        }
        if let Some(Array::F32(mut scores)) = md.get_array("tokenizer.ggml.scores").cloned() {
            scores.extend(vec![-1.0; odd.len()]);
            md.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
        }
        let t = Tokenizer::from_gguf(&md).unwrap();
        exercise(&t);
        for id in n0..n {
            let _ = t.token_to_piece(id as u32, true).unwrap();
        }
    }
}

/// NaN and infinite scores: no panic, no hang.
#[test]
fn non_finite_scores_do_not_panic() {
    for model in ["llama", "t5"] {
        for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -f32::MAX] {
            let mut md = spm(model);
            md.set("tokenizer.ggml.scores", Value::Array(Array::F32(vec![v; n_tokens(&md)])));
            let t = Tokenizer::from_gguf(&md).unwrap();
            exercise(&t);
            let long = "hello ".repeat(30_000);
            let _ = t.encode(&long, true, false);
        }
    }
}

/// A GGUF that claims a huge `tokenizer.ggml.tokens` count is refused by the reader
/// (the count is checked against the bytes left), before anything is allocated.
#[test]
fn huge_token_count_in_a_file_is_refused() {
    let key = "tokenizer.ggml.tokens";
    let mut buf = b"GGUF".to_vec();
    buf.extend_from_slice(&3u32.to_le_bytes()); // version
    buf.extend_from_slice(&0u64.to_le_bytes()); // tensors
    buf.extend_from_slice(&1u64.to_le_bytes()); // kv pairs
    buf.extend_from_slice(&(key.len() as u64).to_le_bytes());
    buf.extend_from_slice(key.as_bytes());
    buf.extend_from_slice(&9u32.to_le_bytes()); // array
    buf.extend_from_slice(&8u32.to_le_bytes()); // of strings
    buf.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
    buf.extend_from_slice(&[0u8; 64]);
    let e = match gguf_format::Gguf::parse(&buf) {
        Ok(_) => panic!("a huge count must not parse"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(key), "{e}");
}

/// Many special tokens and long texts full of them stay fast (the partition is
/// quadratic only in what the vocabulary and text multiply).
#[test]
fn long_text_of_special_tokens_encodes() {
    let md = bpe();
    let t = Tokenizer::from_gguf(&md).unwrap();
    let text = "<|endoftext|>hello<|im_start|>".repeat(20_000);
    let t0 = Instant::now();
    let ids = t.encode(&text, false, true).unwrap();
    assert_eq!(t.decode(&ids, false, true).unwrap(), text.as_bytes());
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}
