//! `cargo xtask verify tokenizer`: our `tokenizer` crate against llama.cpp.
//!
//! 1. registry: every `tokenizer.ggml.pre` name `llama-vocab.cpp` accepts is registered;
//! 2. fixtures: llama.cpp's `ggml-vocab-*.gguf.inp/.out` (read as `test-tokenizer-0`
//!    reads them), `add_special = false`, `parse_special = false`;
//! 3. corpus: a generated ≥ 1 MB corpus (see [`corpus`]) tokenized by us and by
//!    libllama (`llama_tokenize`, vocab-only load) on every vocab fixture and the three
//!    models, with and without `parse_special`; `decode(ids)` vs `llama_detokenize`;
//!    every token's piece vs `llama_token_to_piece`; the EOG set vs `llama_vocab_is_eog`;
//! 4. chat templates: see [`chat_check`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use gguf_tokenizer::Tokenizer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Check, Report};
use crate::llama_vocab::LlamaLib;
use crate::{llama_cpp, models};

const GROUP_REG: &str = "tokenizer: pre-tokenizer registry vs llama-vocab.cpp";
const GROUP_FIX: &str = "tokenizer: llama.cpp vocab fixtures (.inp/.out)";
const GROUP_CORPUS: &str = "tokenizer: corpus vs libllama (encode, decode, pieces, eog)";

/// Options.
pub struct TokOpts {
    /// Smaller corpus.
    pub quick: bool,
}

/// Reads a fixture pair as test-tokenizer-0 does: inputs split on
/// `"\n__ggml_vocab_test__\n"`, one line of ids per input; duplicates collapse (a map).
pub fn read_fixture(inp: &Path, out: &Path) -> Result<Vec<(Vec<u8>, Vec<u32>)>> {
    let raw = std::fs::read(inp)?;
    let outs = std::fs::read_to_string(out)?;
    let sep = b"\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut pos = 0;
    while pos < raw.len() {
        match raw[pos..].windows(sep.len()).position(|w| w == sep) {
            Some(p) => {
                inputs.push(raw[pos..pos + p].to_vec());
                pos += p + sep.len();
            }
            None => {
                inputs.push(raw[pos..].to_vec());
                break;
            }
        }
    }
    let lines: Vec<&str> = outs.split('\n').collect();
    let lines = if lines.last() == Some(&"") { &lines[..lines.len() - 1] } else { &lines[..] };
    anyhow::ensure!(inputs.len() == lines.len(), "{} inputs vs {} outputs", inputs.len(), lines.len());
    let mut map = std::collections::BTreeMap::new();
    for (i, l) in inputs.into_iter().zip(lines) {
        let ids = l.split_whitespace().map(|t| t.parse::<u32>()).collect::<Result<Vec<_>, _>>()?;
        map.insert(i, ids);
    }
    Ok(map.into_iter().collect())
}

fn load_ours(path: &Path) -> Result<Tokenizer> {
    let f = gguf_format::GgufFile::open(path)?;
    Ok(Tokenizer::from_gguf(f.metadata())?)
}

/// Names `tokenizer_pre == "..."` in llama-vocab.cpp.
fn source_pre_names(src: &Path) -> Result<Vec<String>> {
    let s = std::fs::read_to_string(src.join("src/llama-vocab.cpp"))?;
    let mut names = Vec::new();
    for part in s.split("tokenizer_pre == \"").skip(1) {
        if let Some(end) = part.find('"') {
            names.push(part[..end].to_string());
        }
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// C++ string literal body → bytes (the escapes llama-vocab.cpp uses).
fn cpp_unescape(lit: &str) -> String {
    let mut out = String::new();
    let mut it = lit.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some(o) => out.push(o),
            None => out.push('\\'),
        }
    }
    out
}

/// String literals of a line (`"..."`, with escapes).
fn literals(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push(cpp_unescape(&line[i + 1..j.min(b.len())]));
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// llama-vocab.cpp's `llm_tokenizer_bpe` switch: kind → (regexes, byte_encode).
fn source_regexes(s: &str) -> Result<std::collections::BTreeMap<String, (Vec<String>, bool)>> {
    let a = s.find("struct llm_tokenizer_bpe : llm_tokenizer").context("llm_tokenizer_bpe")?;
    let b = a + s[a..].find("struct llm_tokenizer_bpe_session").context("bpe session")?;
    let mut map = std::collections::BTreeMap::new();
    let mut pending: Vec<String> = Vec::new();
    let mut in_list = false;
    let mut list: Vec<String> = Vec::new();
    for line in s[a..b].lines() {
        let t = line.trim();
        if let Some(k) = t.strip_prefix("case LLAMA_VOCAB_PRE_TYPE_").and_then(|r| r.strip_suffix(':')) {
            pending.push(k.to_string());
        } else if t == "default:" {
            pending.push("DEFAULT".into());
        } else if t.starts_with("regex_exprs = {") {
            in_list = true;
            list.clear();
        } else if in_list && t.starts_with("};") {
            in_list = false;
            for k in &pending {
                map.insert(k.clone(), (list.clone(), true));
            }
        } else if in_list {
            if !t.starts_with("//") {
                list.extend(literals(t));
            }
        } else if t.starts_with("byte_encode = false") {
            for k in &pending {
                if let Some(e) = map.get_mut(k) {
                    e.1 = false;
                }
            }
        } else if t == "break;" {
            pending.clear();
        }
    }
    Ok(map)
}

/// One branch of the `tokenizer_pre == "..."` chain: names, kind, flag statements.
type Branch = (Vec<String>, String, Vec<String>);

/// The `tokenizer_pre == "..."` chain.
fn source_branches(s: &str) -> Result<Vec<Branch>> {
    let a = s.find("} else if (tokenizer_pre == \"default\")").context("pre chain")?;
    let b = a + s[a..].find("} else if (type == LLAMA_VOCAB_TYPE_SPM)").context("pre chain end")?;
    let mut out = Vec::new();
    for branch in s[a..b].split("} else ").skip(1) {
        let Some(cond_end) = branch.find(") {") else { continue };
        let names: Vec<String> = branch[..cond_end]
            .split("tokenizer_pre == \"")
            .skip(1)
            .filter_map(|p| p.find('"').map(|e| p[..e].to_string()))
            .collect();
        let mut kind = String::new();
        let mut flags = Vec::new();
        for st in branch[cond_end + 3..].lines().map(str::trim).filter(|l| l.ends_with(';')) {
            if let Some(k) = st.strip_prefix("pre_type = LLAMA_VOCAB_PRE_TYPE_") {
                kind = k.trim_end_matches(';').to_string();
            } else if !st.starts_with("throw") {
                flags.push(st.to_string());
            }
        }
        if !names.is_empty() {
            out.push((names, kind, flags));
        }
    }
    Ok(out)
}

fn registry(src: &Path, report: &mut Report) {
    match source_pre_names(src) {
        Err(e) => report.push(Check::error(GROUP_REG, "names", e)),
        Ok(names) => {
            let ours = gguf_tokenizer::pretok::known_names();
            let missing: Vec<&String> = names.iter().filter(|n| !ours.contains(&n.as_str())).collect();
            let extra: Vec<&&str> = ours.iter().filter(|n| !names.iter().any(|m| m == *n)).collect();
            let mut note = format!("{} names in llama-vocab.cpp, {} registered", names.len(), ours.len());
            if !missing.is_empty() {
                note += &format!("; missing: {missing:?}");
            }
            if !extra.is_empty() {
                note += &format!("; not in source: {extra:?}");
            }
            report.push(Check::counted(
                GROUP_REG,
                "tokenizer.ggml.pre names",
                names.len() as u64,
                (missing.len() + extra.len()) as u64,
                None,
                note,
            ));
        }
    }
    // regex lists, byte encoding and flags of every name, against the source
    let r = (|| -> Result<Check> {
        let s = std::fs::read_to_string(src.join("src/llama-vocab.cpp"))?;
        let regexes = source_regexes(&s)?;
        let branches = source_branches(&s)?;
        let (mut n, mut bad, mut note) = (0u64, 0u64, String::new());
        let fail = |what: String, note: &mut String, bad: &mut u64| {
            *bad += 1;
            if note.is_empty() {
                *note = what;
            }
        };
        for (names, kind, flags) in &branches {
            for name in names {
                n += 1;
                let Ok(p) = gguf_tokenizer::pretok::lookup(name) else {
                    fail(format!("{name}: not registered"), &mut note, &mut bad);
                    continue;
                };
                if p.kind != kind {
                    fail(format!("{name}: kind {} vs source {kind}", p.kind), &mut note, &mut bad);
                    continue;
                }
                let Some((re, byte_encode)) = regexes.get(kind) else {
                    fail(format!("{name}: no regex list for {kind} in source"), &mut note, &mut bad);
                    continue;
                };
                let ours: Vec<String> = p.regexes.iter().map(|r| r.to_string()).collect();
                if &ours != re || p.byte_encode != *byte_encode {
                    fail(format!("{name}: regexes differ: ours {ours:?} source {re:?}"), &mut note, &mut bad);
                    continue;
                }
                let f = p.flags;
                let expect = |st: &str| flags.iter().any(|x| x == st);
                let want = (
                    !expect("clean_spaces = false;"),
                    expect("ignore_merges = true;"),
                    expect("add_bos = true;"),
                    expect("add_sep = true;"),
                    expect("escape_whitespaces = true;"),
                    expect("special_bos_id = LLAMA_TOKEN_NULL;"),
                    expect("normalizer_opts.lowercase = false;"),
                );
                let have = (
                    f.clean_spaces,
                    f.ignore_merges,
                    f.add_bos,
                    f.add_sep,
                    f.escape_whitespaces,
                    f.no_bos,
                    f.no_lowercase,
                );
                let known = [
                    "clean_spaces = false;",
                    "ignore_merges = true;",
                    "add_bos = true;",
                    "add_sep = true;",
                    "escape_whitespaces = true;",
                    "special_bos_id = LLAMA_TOKEN_NULL;",
                    "normalizer_opts.lowercase = false;",
                ];
                let unknown: Vec<&String> = flags.iter().filter(|x| !known.contains(&x.as_str())).collect();
                if want != have || !unknown.is_empty() {
                    fail(format!("{name}: flags ours {have:?} source {flags:?}"), &mut note, &mut bad);
                }
            }
        }
        // the default (missing pre) entry
        n += 1;
        let d = gguf_tokenizer::pretok::lookup("default")?;
        if regexes.get("DEFAULT").map(|(r, _)| r.clone()) != Some(d.regexes.iter().map(|r| r.to_string()).collect()) {
            fail("default: regexes differ".into(), &mut note, &mut bad);
        }
        let note = if note.is_empty() { format!("{} names in {} branches", n, branches.len()) } else { note };
        Ok(Check::counted(GROUP_REG, "regex lists, byte encoding and flags per name", n, bad, None, note))
    })();
    match r {
        Ok(c) => report.push(c),
        Err(e) => report.push(Check::error(GROUP_REG, "regex lists", e)),
    }
}

fn fixtures(cache: &Path, report: &mut Report) -> Result<()> {
    let mut total = 0u64;
    let mut bad_total = 0u64;
    for v in models::ensure_vocab(cache)? {
        let name = v.file_name().unwrap().to_string_lossy().trim_end_matches(".gguf").to_string();
        let inp = PathBuf::from(format!("{}.inp", v.display()));
        let out = PathBuf::from(format!("{}.out", v.display()));
        if !inp.exists() || !out.exists() {
            continue;
        }
        let tok = match load_ours(&v) {
            Ok(t) => t,
            Err(e) => {
                report.push(Check::error(GROUP_FIX, &name, e));
                continue;
            }
        };
        let cases = read_fixture(&inp, &out)?;
        let mut bad = 0u64;
        let mut note = String::new();
        for (text, want) in &cases {
            let got = tok.encode_bytes(text, false, false);
            let ok = matches!(&got, Ok(g) if g == want);
            if !ok {
                bad += 1;
                if note.is_empty() {
                    note = format!("first: {:?} want {:?} got {:?}", String::from_utf8_lossy(text), want, got);
                    note.truncate(400);
                }
            }
        }
        total += cases.len() as u64;
        bad_total += bad;
        report.push(Check::counted(GROUP_FIX, &name, cases.len() as u64, bad, None, note));
    }
    report.note(format!("tokenizer fixtures: {total} cases, {bad_total} mismatches"));
    Ok(())
}

/// The corpus: `n` cases, deterministic, mixing real text from the llama.cpp tree (code,
/// docs, templates) with generated multilingual prose, CJK, emoji/ZWJ, whitespace runs,
/// tabs/CRLF, digit runs, special-token text and invalid UTF-8.
pub fn corpus(src: &Path, target_bytes: usize, seed: u64) -> Result<Vec<Vec<u8>>> {
    let mut rng = StdRng::seed_from_u64(seed);
    // real files
    let mut real: Vec<Vec<u8>> = Vec::new();
    for rel in [
        "README.md",
        "src/llama-vocab.cpp",
        "src/llama-sampler.cpp",
        "convert_hf_to_gguf.py",
        "common/chat.cpp",
        "docs/build.md",
        "tools/server/README.md",
        "models/templates/Qwen-Qwen2.5-7B-Instruct.jinja",
        "grammars/json.gbnf",
        "ggml/src/ggml.c",
    ] {
        if let Ok(b) = std::fs::read(src.join(rel)) {
            real.push(b);
        }
    }
    for f in std::fs::read_dir(src.join("models"))? {
        let p = f?.path();
        if p.extension().is_some_and(|e| e == "inp") {
            real.push(std::fs::read(&p)?);
        }
    }
    const PROSE: &[&str] = &[
        "The quick brown fox jumps over the lazy dog. It's 3:45 p.m. and we've got 1,234,567 reasons—don't we?",
        "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Maß, Straße; „Anführungszeichen“.",
        "Le cœur a ses raisons que la raison ne connaît point. L'été, où êtes-vous ? « Ça va ! »",
        "El niño pequeño comió ñoquis; ¿dónde está la biblioteca? ¡Olé!",
        "Съешь же ещё этих мягких французских булок, да выпей чаю. Москва — столица России.",
        "Γαζέες καὶ μυρτιὲς δὲν θὰ βρῶ πιὰ στὸ χρυσαφὶ ξέφωτο.",
        "我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧！《红楼梦》是中国古典小说。",
        "私はガラスを食べられます。それは私を傷つけません。東京タワーは高いです。カタカナ、ひらがな。",
        "나는 유리를 먹을 수 있어요. 그래도 아프지 않아요. 한국어 텍스트입니다.",
        "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती। हिन्दी भाषा।",
        "أنا قادر على أكل الزجاج و هذا لا يؤلمني. اللغة العربية جميلة.",
        "אני יכול לאכול זכוכית וזה לא מזיק לי.",
        "ฉันกินกระจกได้ แต่มันไม่ทำให้ฉันเจ็บ ภาษาไทย",
        "Tôi có thể ăn thủy tinh mà không hại gì. Tiếng Việt có dấu: ă â ê ô ơ ư đ.",
        "Mogę jeść szkło i mi nie szkodzi. Zażółć gęślą jaźń.",
        "Bir cam yiyebilirim, bana zararı dokunmaz. İstanbul'da ılık hava; Türkçe'nin ğüşiöç harfleri.",
        "Μπορῶ νὰ φάω σπασμένα γυαλιὰ χωρὶς νὰ πάθω τίποτα. Ελληνικά ΆΈΉ.",
        "Կրնամ ապակի ուտել և ինծի անհանգիստ չըներ։ ქართული ენა",
        "நான் கண்ணாடி சாப்பிடுவேன், அதனால் எனக்கு ஒரு கேடும் வராது. తెలుగు ಕನ್ನಡ বাংলা",
        "ខ្ញុំអាចញុំកញ្ចក់បាន ដោយគ្មានបញ្ហារ ລາວ မြန်မာ",
    ];
    const EMOJI: &[&str] = &[
        "😀",
        "🦙",
        "👍🏽",
        "👨‍👩‍👧‍👦",
        "🏳️‍🌈",
        "🧑🏿‍💻",
        "❤️",
        "🇯🇵",
        "🇺🇸",
        "✅",
        "🔥",
        "1️⃣",
        "👩‍❤️‍💋‍👨",
        "🫠",
        "©",
        "™",
        "∑∫√",
        "½ ⅓ ¼",
        "é",
        "e\u{301}",
        "ﬁ",
        "Å",
        "Ω",
        "\u{200B}",
        "\u{FEFF}",
        "\u{00A0}",
        "\u{3000}",
        "\u{2028}",
        "\u{0085}",
    ];
    const SPECIAL: &[&str] = &[
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<s>",
        "</s>",
        "<unk>",
        "<start_of_turn>",
        "<end_of_turn>",
        "<|begin_of_text|>",
        "<|eot_id|>",
        "<|start_header_id|>",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "<mask>",
        "<pad>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
        "<bos>",
        "<eos>",
        "<|user|>",
        "<|assistant|>",
        "<|end|>",
        "<|system|>",
        "<tool_call>",
        "</tool_call>",
        "<think>",
        "</think>",
        "<|file_sep|>",
        "<|repo_name|>",
    ];
    const CODE: &[&str] = &[
        "fn main() {\n    let x: Vec<u32> = (0..10).map(|i| i * 2).collect();\n    println!(\"{x:?}\");\n}\n",
        "def f(a, b=2, *args, **kw):\n\treturn [i**2 for i in range(a) if i % b == 0]\n",
        "if (x != nullptr && y->z[3] >= 0x1F) { return -1; } // comment\r\n",
        "SELECT id, name FROM users WHERE age > 21 ORDER BY name DESC;\n",
        "<div class=\"a\"><span id='b'>&amp; &lt;tag&gt;</span></div>\n",
        "{\"key\": [1, 2.5e-3, true, null, \"s\\\"q\"], \"nested\": {\"k\": \"v\"}}\n",
        "$ ls -la | grep '^d' && echo \"done\" >> /tmp/log.txt 2>&1\n",
    ];
    let pick = |rng: &mut StdRng, v: &[&'static str]| v[rng.gen_range(0..v.len())];
    let mut cases = Vec::new();
    let mut total = 0;
    while total < target_bytes {
        let kind = rng.gen_range(0..10);
        let mut c: Vec<u8> = Vec::new();
        match kind {
            0 | 1 => {
                // a slice of a real file
                let f = &real[rng.gen_range(0..real.len())];
                let len = rng.gen_range(1..3000).min(f.len());
                let start = rng.gen_range(0..=f.len() - len);
                c.extend_from_slice(&f[start..start + len]);
            }
            _ => {
                let parts = rng.gen_range(1..40);
                for _ in 0..parts {
                    match rng.gen_range(0..20) {
                        0..=6 => c.extend_from_slice(pick(&mut rng, PROSE).as_bytes()),
                        7 | 8 => c.extend_from_slice(pick(&mut rng, EMOJI).as_bytes()),
                        9 => c.extend_from_slice(pick(&mut rng, CODE).as_bytes()),
                        10 => c.extend_from_slice(pick(&mut rng, SPECIAL).as_bytes()),
                        11 => {
                            let n = rng.gen_range(1..40);
                            let ws = [b" ".as_slice(), b"\t", b"\n", b"\r\n", b"  ", b"\n\n"];
                            for _ in 0..n {
                                c.extend_from_slice(ws[rng.gen_range(0..ws.len())]);
                            }
                        }
                        12 => {
                            let n = rng.gen_range(1..30);
                            for _ in 0..n {
                                c.push(b'0' + rng.gen_range(0..10));
                            }
                        }
                        13 => {
                            // invalid UTF-8: lone continuation / truncated lead / FE FF / surrogate
                            let bad: [&[u8]; 7] =
                                [b"\x80", b"\xbf\xbf", b"\xc3", b"\xe2\x82", b"\xff", b"\xfe\xf8", b"\xed\xa0\x80"];
                            c.extend_from_slice(bad[rng.gen_range(0..bad.len())]);
                        }
                        14 => {
                            // random codepoints from assorted blocks
                            let n = rng.gen_range(1..20);
                            for _ in 0..n {
                                let ranges = [
                                    (0x20u32, 0x7e),
                                    (0xa0, 0x24f),
                                    (0x370, 0x52f),
                                    (0x590, 0x6ff),
                                    (0x900, 0xdff),
                                    (0x1100, 0x11ff),
                                    (0x2000, 0x2bff),
                                    (0x3000, 0x30ff),
                                    (0x4e00, 0x9fff),
                                    (0xac00, 0xd7a3),
                                    (0xff00, 0xffef),
                                    (0x1f300, 0x1faff),
                                    (0x20000, 0x2a6df),
                                ];
                                let (a, b) = ranges[rng.gen_range(0..ranges.len())];
                                if let Some(ch) = char::from_u32(rng.gen_range(a..=b)) {
                                    let mut buf = [0u8; 4];
                                    c.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                                }
                            }
                        }
                        15 => c.extend_from_slice(b" "),
                        16 => c.extend_from_slice(
                            ["'s", "'ll", "'VE", "n't", "'Re", "'d "][rng.gen_range(0..6)].as_bytes(),
                        ),
                        _ => {
                            let words = [
                                "hello",
                                "world",
                                "Hello",
                                "WORLD",
                                "the",
                                "llama",
                                "tokenizer",
                                "GGUF",
                                "ÜBER",
                                "naïve",
                                "x",
                                "a1b2",
                                "CamelCase",
                                "snake_case",
                                "URL:",
                                "https://example.com/a?b=c&d=e",
                            ];
                            c.extend_from_slice(words[rng.gen_range(0..words.len())].as_bytes());
                        }
                    }
                    if rng.gen_bool(0.6) {
                        c.push(b' ');
                    }
                }
            }
        }
        total += c.len();
        cases.push(c);
    }
    Ok(cases)
}

fn corpus_check(cache: &Path, name: &str, path: &Path, lib: &LlamaLib, cases: &[Vec<u8>], report: &mut Report) {
    let r = (|| -> Result<Vec<Check>> {
        let ours = load_ours(path)?;
        let theirs = lib.open(path)?;
        let mut out = Vec::new();
        anyhow::ensure!(ours.n_vocab() == theirs.n_vocab(), "n_vocab {} vs {}", ours.n_vocab(), theirs.n_vocab());
        // pieces and eog over the whole vocabulary
        let (mut pbad, mut ebad, mut pnote) = (0u64, 0u64, String::new());
        for id in 0..ours.n_vocab() as u32 {
            for special in [false, true] {
                let a = ours.token_to_piece(id, special)?;
                let b = theirs.token_to_piece(id, special)?;
                if a != b {
                    pbad += 1;
                    if pnote.is_empty() {
                        pnote = format!(
                            "id {id} special={special}: ours {:?} llama {:?}",
                            String::from_utf8_lossy(&a),
                            String::from_utf8_lossy(&b)
                        );
                    }
                }
            }
            if ours.is_eog(id) != theirs.is_eog(id) {
                ebad += 1;
                if pnote.is_empty() {
                    pnote = format!("eog differs at id {id}");
                }
            }
        }
        out.push(Check::counted(
            GROUP_CORPUS,
            &format!("{name}: token_to_piece + is_eog"),
            2 * ours.n_vocab() as u64,
            pbad + ebad,
            None,
            pnote,
        ));
        // encode / decode
        let (mut n, mut bad, mut dn, mut dbad, mut bytes) = (0u64, 0u64, 0u64, 0u64, 0usize);
        let (mut note, mut dnote) = (String::new(), String::new());
        let (mut t_ours, mut t_theirs) = (0f64, 0f64);
        for (i, text) in cases.iter().enumerate() {
            let parse_special = i % 2 == 1;
            let add_special = i % 3 != 0;
            let t0 = Instant::now();
            let a = ours.encode_bytes(text, add_special, parse_special);
            t_ours += t0.elapsed().as_secs_f64();
            let t0 = Instant::now();
            let b = theirs.tokenize(text, add_special, parse_special)?;
            t_theirs += t0.elapsed().as_secs_f64();
            bytes += text.len();
            n += 1;
            let a = match a {
                Ok(a) => a,
                Err(e) => {
                    bad += 1;
                    if note.is_empty() {
                        note = format!("case {i}: error {e}");
                    }
                    continue;
                }
            };
            if a != b {
                bad += 1;
                if note.is_empty() {
                    let k = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
                    note = format!(
                        "case {i} (parse_special={parse_special}) len {}: first diff at token {k}: ours {:?} llama {:?}",
                        text.len(),
                        &a[k.saturating_sub(2)..(k + 3).min(a.len())],
                        &b[k.saturating_sub(2)..(k + 3).min(b.len())]
                    );
                }
            }
            for (rm, unparse) in [(false, false), (true, true), (false, true)] {
                dn += 1;
                let x = ours.decode(&b, rm, unparse)?;
                let y = theirs.detokenize(&b, rm, unparse)?;
                if x != y {
                    dbad += 1;
                    if dnote.is_empty() {
                        dnote = format!(
                            "case {i} rm={rm} unparse={unparse}: ours {:?} llama {:?}",
                            String::from_utf8_lossy(&x).chars().take(80).collect::<String>(),
                            String::from_utf8_lossy(&y).chars().take(80).collect::<String>()
                        );
                    }
                }
            }
        }
        let mbs = |t: f64| bytes as f64 / t.max(1e-9) / 1e6;
        let speed = format!(
            "ours {:.2} MB/s, llama.cpp {:.2} MB/s ({:.2}x)",
            mbs(t_ours),
            mbs(t_theirs),
            t_theirs / t_ours.max(1e-9)
        );
        let note = if note.is_empty() { format!("{bytes} bytes; {speed}") } else { format!("{note}; {speed}") };
        out.push(Check::counted(GROUP_CORPUS, &format!("{name}: encode"), n, bad, None, note));
        out.push(Check::counted(GROUP_CORPUS, &format!("{name}: decode"), dn, dbad, None, dnote));
        let _ = cache;
        Ok(out)
    })();
    match r {
        Ok(cs) => cs.into_iter().for_each(|c| report.push(c)),
        Err(e) => report.push(Check::error(GROUP_CORPUS, name, e)),
    }
}

const GROUP_PRE: &str = "tokenizer: every pre-tokenizer vs libllama (gpt-2 vocabulary, pre swapped)";

/// Every registered `tokenizer.ggml.pre` name, exercised through libllama: the gpt-2
/// fixture is rewritten with that name (its vocabulary and merges work with any split),
/// and a slice of the corpus is encoded and decoded by both sides.
fn pre_sweep(cache: &Path, lib: &LlamaLib, cases: &[Vec<u8>], step: usize, report: &mut Report) -> Result<()> {
    let base = cache.join("vocab").join("ggml-vocab-gpt-2.gguf");
    let f = gguf_format::GgufFile::open(&base)?;
    let dir = super::gguf::scratch()?.join("pre-sweep");
    std::fs::create_dir_all(&dir)?;
    let sub: Vec<&Vec<u8>> = cases.iter().step_by(step).collect();
    for name in gguf_tokenizer::pretok::known_names() {
        if name == "whitespace" {
            // its words keep spaces (raw `\S+` split), and llama.cpp's find_bpe_rank asserts
            // on a space: it only works with the `whitespace` tokenizer model
            report.push(Check::skip(
                GROUP_PRE,
                name,
                "libllama aborts (GGML_ASSERT in find_bpe_rank) with a gpt2 vocabulary",
            ));
            continue;
        }
        let path = dir.join(format!("gpt-2-pre-{name}.gguf"));
        let mut w = gguf_format::GgufWriter::from_file(&f)?;
        w.add_kv("tokenizer.ggml.pre", name);
        w.write_to_path(&path)?;
        let r = (|| -> Result<Check> {
            let ours = load_ours(&path)?;
            let theirs = lib.open(&path)?;
            let (mut n, mut bad, mut note) = (0u64, 0u64, String::new());
            for (i, text) in sub.iter().enumerate() {
                let ps = i % 2 == 1;
                n += 1;
                let a = ours.encode_bytes(text, true, ps);
                let b = theirs.tokenize(text, true, ps)?;
                let same = matches!(&a, Ok(a) if *a == b)
                    && ours.decode(&b, false, false)? == theirs.detokenize(&b, false, false)?;
                if !same {
                    bad += 1;
                    if note.is_empty() {
                        note = match a {
                            Err(e) => format!("case {i}: error {e}"),
                            Ok(a) => {
                                let k = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
                                format!(
                                    "case {i}: first diff at token {k}: ours {:?} llama {:?}",
                                    &a[k.saturating_sub(1)..(k + 3).min(a.len())],
                                    &b[k.saturating_sub(1)..(k + 3).min(b.len())]
                                )
                            }
                        };
                    }
                }
            }
            Ok(Check::counted(GROUP_PRE, name, n, bad, None, note))
        })();
        let _ = std::fs::remove_file(&path);
        match r {
            Ok(c) => report.push(c),
            Err(e) => report.push(Check::error(GROUP_PRE, name, e)),
        }
    }
    Ok(())
}

/// `cargo xtask verify tokenizer`.
pub fn run(cache: &Path, opts: &TokOpts, report: &mut Report) -> Result<()> {
    let src = llama_cpp::ensure_src(cache)?;
    registry(&src, report);
    fixtures(cache, report)?;
    let bin = llama_cpp::build_dir(cache).join("bin");
    if !bin.join("libllama.so").is_file() {
        // `cargo xtask llama-cpp --lib-only` builds libggml only
        let why = "libllama.so not built (run `cargo xtask llama-cpp` without --lib-only)";
        report.push(Check::skip(GROUP_CHAT, "chat templates", why));
        report.push(Check::skip(GROUP_CORPUS, "corpus", why));
        return Ok(());
    }
    let lib = LlamaLib::load(&bin, &src).context("loading libllama")?;
    if let Err(e) = chat_check(cache, &lib, report) {
        report.push(Check::error(GROUP_CHAT, "chat templates", e));
    }
    let target = if opts.quick { 256 * 1024 } else { 1 << 20 };
    let cases = corpus(&src, target, 0x70c0)?;
    let total: usize = cases.iter().map(Vec::len).sum();
    report.note(format!("tokenizer corpus: {} cases, {total} bytes", cases.len()));
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for m in models::MODELS {
        files.push((m.name.to_string(), models::ensure_model(m)?));
    }
    for v in models::ensure_vocab(cache)? {
        let name = v.file_name().unwrap().to_string_lossy().trim_end_matches(".gguf").to_string();
        files.push((name, v));
    }
    for (name, path) in &files {
        corpus_check(cache, name, path, &lib, &cases, report);
    }
    // std::regex (inside libllama) and our engine both recurse per character on some
    // patterns: give this thread room
    let step = if opts.quick { 16 } else { 8 };
    std::thread::scope(|sc| -> Result<()> {
        std::thread::Builder::new()
            .stack_size(1 << 30)
            .spawn_scoped(sc, || pre_sweep(cache, &lib, &cases, step, report))?
            .join()
            .map_err(|_| anyhow::anyhow!("pre-tokenizer sweep panicked"))?
    })?;
    Ok(())
}

const GROUP_CHAT: &str = "tokenizer: chat templates";

/// The conversations rendered by the chat-template check.
fn conversations() -> Vec<(serde_json::Value, bool)> {
    use serde_json::json;
    let tool_call = json!([{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "°C"}}}]);
    let convs = vec![
        json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"}]),
        json!([{"role": "user", "content": "What is 2+2?"}]),
        json!([{"role": "system", "content": "S"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]),
        json!([{"role": "system", "content": "Réponds en français 🇫🇷"}, {"role": "user", "content": "Bonjour\n\n  ça va ?\t"}, {"role": "assistant", "content": "Oui ! 你好"}]),
        json!([{"role": "system", "content": ""}, {"role": "user", "content": ""}]),
        json!([{"role": "system", "content": "Code helper"}, {"role": "user", "content": "```rust\nfn main() {}\n```"}, {"role": "assistant", "content": "Looks fine.\n"}, {"role": "user", "content": "<|im_start|> literal"}]),
        json!([{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"}, {"role": "user", "content": "third"}, {"role": "assistant", "content": "fourth"}]),
        json!([{"role": "system", "content": "  padded  "}, {"role": "user", "content": " x "}]),
        json!([{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": tool_call}, {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "assistant", "content": "21 °C."}]),
        json!([{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Let me check.", "tool_calls": tool_call}, {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "windy"}]),
        json!([{"role": "system", "content": "multi\nline\nsystem"}, {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}, {"role": "user", "content": "q3"}]),
        json!([{"role": "system", "content": "S"}, {"role": "user", "content": "quotes \" ' \\ and tags </s> <s>"}]),
    ];
    let mut out = Vec::new();
    for c in convs {
        out.push((c.clone(), true));
        out.push((c, false));
    }
    out
}

fn has_tools(c: &serde_json::Value) -> bool {
    c.as_array().is_some_and(|a| a.iter().any(|m| m.get("tool_calls").is_some() || m["role"] == "tool"))
}

/// Renders with Python's jinja2 the way llama.cpp/transformers set it up (`trim_blocks`,
/// `lstrip_blocks`, `tojson` = `json.dumps(ensure_ascii=False)`); `None` if jinja2 is missing.
fn jinja2_render(
    src: &str,
    msgs: &serde_json::Value,
    add_gen: bool,
    tools: Option<&serde_json::Value>,
    bos: &str,
    eos: &str,
) -> Result<Option<String>> {
    const PY: &str = r#"
import json, sys
try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(3)
a = json.load(sys.stdin)
def raise_exception(m): raise jinja2.exceptions.TemplateError(m)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(x, ensure_ascii=ensure_ascii, indent=indent)
env.globals["raise_exception"] = raise_exception
ctx = {"messages": a["messages"], "bos_token": a["bos"], "eos_token": a["eos"], "enable_thinking": True}
if a["tools"] is not None: ctx["tools"] = a["tools"]
if a["add_gen"]: ctx["add_generation_prompt"] = True
sys.stdout.write(env.from_string(a["src"]).render(**ctx))
"#;
    let input =
        serde_json::json!({"src": src, "messages": msgs, "add_gen": add_gen, "tools": tools, "bos": bos, "eos": eos});
    let mut child = std::process::Command::new("python3")
        .args(["-c", PY])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running python3")?;
    use std::io::Write as _;
    child.stdin.take().context("stdin")?.write_all(input.to_string().as_bytes())?;
    let o = child.wait_with_output()?;
    if o.status.code() == Some(3) {
        return Ok(None);
    }
    anyhow::ensure!(o.status.success(), "jinja2: {}", String::from_utf8_lossy(&o.stderr));
    Ok(Some(String::from_utf8(o.stdout)?))
}

/// A small C++ program that renders a conversation with llama.cpp's own chat code
/// (`common_chat_templates_apply` in libllama-common: its Jinja engine, its message
/// normalization) — what llama-server sends to the model.
const CHAT_ORACLE_CPP: &str = r####"// Renders a conversation with llama.cpp's own chat code (common/chat.cpp, its Jinja engine):
// stdin = {"template","bos","eos","add_bos","add_eos","messages","tools","add_generation_prompt"}.
#include "chat.h"
#include "json.h"
#include <iostream>
#include <iterator>
int main() {
    std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const common_json j = common_json::parse(in);
    try {
        auto tmpls = common_chat_templates_init(nullptr, j["template"].get<std::string>(), j["bos"].get<std::string>(), j["eos"].get<std::string>());
        common_chat_templates_inputs inputs;
        inputs.messages = common_chat_msgs_parse_oaicompat(j["messages"]);
        if (!j["tools"].is_null()) inputs.tools = common_chat_tools_parse_oaicompat(j["tools"]);
        inputs.add_generation_prompt = j["add_generation_prompt"].get<bool>();
        inputs.use_jinja = true;
        inputs.add_bos = j["add_bos"].get<bool>();
        inputs.add_eos = j["add_eos"].get<bool>();
        auto p = common_chat_templates_apply(tmpls.get(), inputs);
        std::cout << p.prompt;
    } catch (const std::exception & e) {
        std::cerr << "error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
"####;

/// Builds the chat oracle next to the other scratch files; `None` if no C++ compiler or
/// libllama-common.
fn chat_oracle(cache: &Path) -> Result<Option<PathBuf>> {
    let src = llama_cpp::src_dir(cache);
    let bin = llama_cpp::build_dir(cache).join("bin");
    if !bin.join("libllama-common.so").exists() {
        return Ok(None);
    }
    let dir = super::gguf::scratch()?;
    let exe = dir.join("chat_oracle");
    let cpp = dir.join("chat_oracle.cpp");
    if exe.exists() && std::fs::read_to_string(&cpp).ok().as_deref() == Some(CHAT_ORACLE_CPP) {
        return Ok(Some(exe));
    }
    std::fs::write(&cpp, CHAT_ORACLE_CPP)?;
    let inc = |d: &str| format!("-I{}", src.join(d).display());
    let st = std::process::Command::new("c++")
        .args(["-std=c++17", "-O1", &inc("common"), &inc("vendor"), &inc("include"), &inc("ggml/include")])
        .arg(&cpp)
        .arg(format!("-L{}", bin.display()))
        .args(["-lllama-common", "-lllama", "-lggml", "-lggml-base"])
        .arg(format!("-Wl,-rpath,{}", bin.display()))
        .arg("-o")
        .arg(&exe)
        .status();
    match st {
        Ok(s) if s.success() => Ok(Some(exe)),
        _ => Ok(None),
    }
}

fn oracle_render(
    exe: &Path,
    src: &str,
    msgs: &serde_json::Value,
    add_gen: bool,
    tools: Option<&serde_json::Value>,
    bos: &str,
    eos: &str,
) -> Result<String> {
    let input = serde_json::json!({"template": src, "bos": bos, "eos": eos, "add_bos": false, "add_eos": false,
        "messages": msgs, "tools": tools, "add_generation_prompt": add_gen});
    let mut child = std::process::Command::new(exe)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running the chat oracle")?;
    use std::io::Write as _;
    child.stdin.take().context("stdin")?.write_all(input.to_string().as_bytes())?;
    let o = child.wait_with_output()?;
    anyhow::ensure!(o.status.success(), "chat oracle: {}", String::from_utf8_lossy(&o.stderr));
    Ok(String::from_utf8(o.stdout)?)
}

/// Chat templates: the SmolLM2 and Qwen2.5-Coder templates (and every built-in one)
/// vs `llama_chat_apply_template` where it applies (plain turns, system first), and the
/// two model templates vs Python jinja2 on every conversation (tool calls included).
pub fn chat_check(cache: &Path, lib: &LlamaLib, report: &mut Report) -> Result<()> {
    let oracle = chat_oracle(cache)?;
    use gguf_tokenizer::chat::{ChatTemplate, Message};
    let convs = conversations();
    let to_msgs = |c: &serde_json::Value| -> Result<Vec<Message>> {
        c.as_array().context("array")?.iter().map(|m| Message::from_json(m).map_err(Into::into)).collect()
    };
    let pairs = |c: &serde_json::Value| -> Vec<(String, String)> {
        c.as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].as_str().unwrap().to_string(), m["content"].as_str().unwrap_or("").to_string()))
            .collect()
    };
    let tools = serde_json::json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["°C", "°F"]}}, "required": ["city"]}}}]);
    for m in models::MODELS.iter().filter(|m| m.name != "gemma3-270m") {
        let path = models::ensure_model(m)?;
        let f = gguf_format::GgufFile::open(&path)?;
        let Some(t) = ChatTemplate::from_gguf(f.metadata())? else {
            report.push(Check::skip(GROUP_CHAT, m.name, "no chat template"));
            continue;
        };
        let tok = Tokenizer::from_gguf(f.metadata())?;
        let piece = |id: Option<u32>| {
            id.map(|i| String::from_utf8_lossy(&tok.token_to_piece(i, true).unwrap_or_default()).into_owned())
                .unwrap_or_default()
        };
        let (bos, eos) = (piece(tok.bos()), piece(tok.eos()));
        // vs llama_chat_apply_template (chatml detection), system-first plain conversations
        let (mut n, mut bad, mut note) = (0u64, 0u64, String::new());
        for (c, add) in &convs {
            let first_sys = c[0]["role"] == "system";
            if has_tools(c) || !first_sys {
                continue;
            }
            let ours = t.render(&to_msgs(c)?, *add, None)?;
            let Some(theirs) = lib.chat_apply(t.source(), &pairs(c), *add)? else { continue };
            n += 1;
            if ours.as_bytes() != theirs.as_slice() {
                bad += 1;
                if note.is_empty() {
                    note = format!("ours {ours:?} llama {:?}", String::from_utf8_lossy(&theirs));
                }
            }
        }
        report.push(Check::counted(
            GROUP_CHAT,
            &format!("{}: vs llama_chat_apply_template", m.name),
            n,
            bad,
            None,
            note,
        ));
        // vs llama.cpp's own Jinja rendering (common/chat), every conversation
        match &oracle {
            None => report.push(Check::skip(
                GROUP_CHAT,
                &format!("{}: vs llama.cpp common/chat", m.name),
                "no C++ compiler or libllama-common",
            )),
            Some(exe) => {
                let (mut n, mut bad, mut note) = (0u64, 0u64, String::new());
                for (c, add) in &convs {
                    let tl = if has_tools(c) { Some(&tools) } else { None };
                    let ours = t.render(&to_msgs(c)?, *add, tl)?;
                    let theirs = oracle_render(exe, t.source(), c, *add, tl, &bos, &eos)?;
                    n += 1;
                    if ours != theirs {
                        bad += 1;
                        if note.is_empty() {
                            note = format!("ours {ours:?} llama.cpp {theirs:?}");
                        }
                    }
                }
                report.push(Check::counted(
                    GROUP_CHAT,
                    &format!("{}: vs llama.cpp common/chat Jinja (tools included)", m.name),
                    n,
                    bad,
                    None,
                    note,
                ));
            }
        }
        // vs jinja2, every conversation, with tools for the tool ones
        let (mut n, mut bad, mut note, mut missing) = (0u64, 0u64, String::new(), false);
        for (c, add) in &convs {
            let tl = if has_tools(c) { Some(&tools) } else { None };
            let ours = t.render(&to_msgs(c)?, *add, tl)?;
            match jinja2_render(t.source(), c, *add, tl, &bos, &eos)? {
                None => {
                    missing = true;
                    break;
                }
                Some(theirs) => {
                    n += 1;
                    if ours != theirs {
                        bad += 1;
                        if note.is_empty() {
                            note = format!("ours {ours:?} jinja2 {theirs:?}");
                        }
                    }
                }
            }
        }
        if missing {
            report.push(Check::skip(GROUP_CHAT, &format!("{}: vs jinja2", m.name), "python3 jinja2 not installed"));
        } else {
            report.push(Check::counted(
                GROUP_CHAT,
                &format!("{}: vs Python jinja2 (tools included)", m.name),
                n,
                bad,
                None,
                note,
            ));
        }
    }
    // built-in templates vs llama.cpp's by name
    for name in gguf_tokenizer::chat::builtin_names() {
        let t = ChatTemplate::builtin(name)?;
        let (mut n, mut bad, mut note) = (0u64, 0u64, String::new());
        for (c, add) in convs.iter().filter(|(c, _)| !has_tools(c)) {
            let ours = t.render(&to_msgs(c)?, *add, None)?;
            let Some(theirs) = lib.chat_apply(name, &pairs(c), *add)? else { continue };
            n += 1;
            if ours.as_bytes() != theirs.as_slice() {
                bad += 1;
                if note.is_empty() {
                    note = format!("ours {ours:?} llama {:?}", String::from_utf8_lossy(&theirs));
                }
            }
        }
        report.push(Check::counted(
            GROUP_CHAT,
            &format!("built-in {name} vs llama_chat_apply_template"),
            n,
            bad,
            None,
            note,
        ));
    }
    Ok(())
}
