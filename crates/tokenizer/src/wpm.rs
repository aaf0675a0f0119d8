//! WordPiece (BERT): normalize, split on whitespace and punctuation, greedy longest
//! match with a `▁` phantom space (llama.cpp's `llm_tokenizer_wpm_session`).

use crate::{unicode, Vocab};

fn is_chinese_char(c: u32) -> bool {
    matches!(c,
        0x04E00..=0x09FFF | 0x03400..=0x04DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF | 0x0F900..=0x0FAFF | 0x2F800..=0x2FA1F)
}

/// llama.cpp's `preprocess`: normalizes and splits the text into words, handing each
/// non-empty word to `f` as it completes (in a reused buffer).
fn preprocess(text: &[u8], lowercase: bool, strip_accents: bool, f: &mut dyn FnMut(&[u8])) {
    let mut word: Vec<u8> = Vec::new();
    let mut s = Vec::with_capacity(4);
    let mut off = 0;
    while off < text.len() {
        // `unicode_cpts_from_utf8`, one codepoint at a time
        let mut c = unicode::cpt_from_utf8(text, &mut off).unwrap_or_else(|| {
            off += 1;
            0xFFFD
        });
        if strip_accents {
            c = unicode::nfd(c);
        }
        let fl = unicode::flags(c);
        if fl.is_whitespace() {
            if !word.is_empty() {
                f(&word);
                word.clear();
            }
            continue;
        }
        if c == 0 || c == 0xFFFD || fl.is_control() {
            continue;
        }
        if strip_accents && fl.is_accent_mark() {
            continue;
        }
        s.clear();
        unicode::push_utf8(&mut s, if lowercase { unicode::to_lower(c) } else { c });
        if fl.is_punctuation() || (c < 0x7F && fl.is_symbol()) || is_chinese_char(c) {
            if !word.is_empty() {
                f(&word);
                word.clear();
            }
            if !s.is_empty() {
                f(&s);
            }
        } else {
            word.extend_from_slice(&s);
        }
    }
    if !word.is_empty() {
        f(&word);
    }
}

/// Tokenizes one raw-text fragment, appending ids.
pub(crate) fn tokenize(vocab: &Vocab, text: &[u8], out: &mut Vec<u32>) {
    let mut w1: Vec<u8> = Vec::new();
    preprocess(text, vocab.lowercase, vocab.strip_accents, &mut |word| {
        w1.clear();
        w1.extend_from_slice("\u{2581}".as_bytes());
        w1.extend_from_slice(word);
        let n = w1.len();
        let current = out.len();
        let mut i = 0;
        while i < n {
            let mut matched = false;
            let mut j = n.min(i + vocab.max_token_len + 1);
            while j > i {
                if let Some(id) = vocab.text_to_token(&w1[i..j]) {
                    out.push(id);
                    matched = true;
                    i = j - 1;
                    break;
                }
                j -= 1;
            }
            if !matched {
                out.truncate(current);
                break;
            }
            i += 1;
        }
        if current == out.len() {
            if let Some(unk) = vocab.special.unk {
                out.push(unk);
            }
        }
    });
}
