//! Fuzz target: a small vocabulary described by the input, then a text encoded and
//! decoded with it. `Tokenizer::from_gguf` must never panic (a malformed vocabulary is
//! an error), and neither may `encode_bytes`, `decode`, `token_to_piece` or the stream
//! decoder on whatever it accepts; every id `encode_bytes` returns is in the vocabulary.
//!
//! Input layout: byte 0 picks the model (`gpt2`, `llama`, `bert`, `t5`, `gemma4`) and
//! the pre-tokenizer, byte 1 the flags; the rest is split at the first `00 00` into a
//! vocabulary part and the text. The vocabulary part is `\n`-separated lines: a line
//! starting with `0xFE` is a merge, `0xFD` appends to the precompiled charsmap, `0xFC`
//! sets a special id (next byte: which, then 2 bytes little-endian); any other line is
//! a token whose first byte gives its type (mod 8, so 7 is out of range) and score.
#![no_main]

use gguf_format::{Array, Metadata, Value};
use libfuzzer_sys::fuzz_target;
use gguf_tokenizer::Tokenizer;

const MODELS: [&str; 5] = ["gpt2", "llama", "bert", "t5", "gemma4"];
const PRES: [&str; 12] = [
    "default",
    "gpt-2",
    "llama-bpe",
    "qwen2",
    "qwen35",
    "deepseek-llm",
    "tekken",
    "gpt-4o",
    "kimi-k2",
    "afmoe",
    "superbpe",
    "chameleon",
];
const SPECIAL_KEYS: [&str; 6] = [
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.eot_token_id",
];

fn vocabulary(sel: u8, flags: u8, desc: &[u8]) -> Metadata {
    let model = MODELS[sel as usize % MODELS.len()];
    let mut md = Metadata::new();
    md.set("tokenizer.ggml.model", Value::from(model));
    md.set("tokenizer.ggml.pre", Value::from(PRES[(sel as usize / MODELS.len()) % PRES.len()]));
    let (mut toks, mut types, mut scores) = (Vec::new(), Vec::new(), Vec::new());
    if flags & 1 != 0 {
        // a usable base: the GPT-2 byte symbols (byte-level models) or <0xXX> tokens
        let table = gguf_tokenizer::unicode::byte_to_cpt_table();
        for b in 0..256usize {
            toks.push(match model {
                "gpt2" | "bert" => char::from_u32(table[b]).unwrap_or('?').to_string().into_bytes(),
                _ => format!("<0x{b:02X}>").into_bytes(),
            });
            types.push(if model == "llama" || model == "t5" { 6 } else { 1 });
            scores.push(0.0);
        }
    }
    let (mut merges, mut charsmap) = (Vec::new(), Vec::new());
    for line in desc.split(|&b| b == b'\n') {
        match line.first() {
            None => {}
            Some(0xFE) => merges.push(line[1..].to_vec()),
            Some(0xFD) => charsmap.extend_from_slice(&line[1..]),
            Some(0xFC) if line.len() >= 4 => {
                let key = SPECIAL_KEYS[line[1] as usize % SPECIAL_KEYS.len()];
                md.set(key, Value::U32(u16::from_le_bytes([line[2], line[3]]) as u32));
            }
            Some(&t) => {
                toks.push(line[1..].to_vec());
                types.push((t % 8) as i32);
                scores.push(-((t >> 3) as f32));
            }
        }
    }
    if flags & 2 != 0 {
        // merges for every token of two or more characters, split at its first one
        for t in &toks {
            let s = String::from_utf8_lossy(t);
            let mut cs = s.char_indices();
            if let (Some(_), Some((i, _))) = (cs.next(), cs.next()) {
                merges.push(format!("{} {}", &s[..i], &s[i..]).into_bytes());
            }
        }
    }
    md.set("tokenizer.ggml.tokens", Value::Array(Array::String(toks.into())));
    if flags & 4 == 0 {
        md.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    }
    if flags & 8 == 0 {
        md.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    }
    md.set("tokenizer.ggml.merges", Value::Array(Array::String(merges.into())));
    if !charsmap.is_empty() {
        md.set("tokenizer.ggml.precompiled_charsmap", Value::Array(Array::U8(charsmap)));
    }
    for (bit, key) in [(16, "tokenizer.ggml.add_bos_token"), (32, "tokenizer.ggml.add_space_prefix")] {
        if flags & bit != 0 {
            md.set(key, Value::Bool(flags & 64 != 0));
        }
    }
    if flags & 128 != 0 {
        md.set("tokenizer.ggml.remove_extra_whitespaces", Value::Bool(true));
    }
    md
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (sel, flags, rest) = (data[0], data[1], &data[2..]);
    let split = rest.windows(2).position(|w| w == [0, 0]).unwrap_or(rest.len());
    let desc = &rest[..split];
    let text = rest.get(split + 2..).unwrap_or(&[]);
    let md = vocabulary(sel, flags, desc);
    let Ok(tok) = Tokenizer::from_gguf(&md) else { return };
    let n = tok.n_vocab();
    for (add, parse) in [(false, false), (true, true), (true, false)] {
        let Ok(ids) = tok.encode_bytes(text, add, parse) else { continue };
        assert!(ids.iter().all(|&id| (id as usize) < n), "id out of range");
        for remove in [false, true] {
            tok.decode(&ids, remove, parse).expect("decode of encoded ids");
        }
        let mut sd = tok.stream_decoder(parse);
        for &id in &ids {
            sd.push(id).expect("stream decode of encoded ids");
            tok.token_to_piece(id, parse).expect("piece of an encoded id");
        }
        let _ = sd.finish();
    }
    // ids from the input itself, in range or not
    let ids: Vec<u32> = text.chunks(2).map(|c| c.iter().fold(0u32, |a, &b| (a << 8) | b as u32)).collect();
    let _ = tok.decode(&ids, true, true);
});
