//! The vocabulary's lookups: text to id, bytes to tokens, and each token's piece as
//! llama.cpp caches it.

use crate::{spm, unicode, Error, ModelKind, Result, Vocab};
use crate::{ATTR_BYTE, ATTR_CONTROL, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_USER_DEFINED};

impl Vocab {
    #[inline]
    pub(crate) fn text_to_token(&self, t: &[u8]) -> Option<u32> {
        self.token_to_id.get(&self.texts, t)
    }

    /// Token `id`'s text as stored in the file.
    #[inline]
    pub(crate) fn text(&self, id: u32) -> &[u8] {
        self.texts.get(id as usize)
    }

    /// Number of tokens.
    #[inline]
    pub(crate) fn n_tokens(&self) -> usize {
        self.texts.len()
    }

    pub(crate) fn spm_pairs(&self) -> Option<&[u64]> {
        self.spm_pairs.get_or_init(|| spm::adjacent_pairs(self)).as_deref()
    }

    pub(crate) fn byte_to_token(&self, b: u8) -> Result<u32> {
        if let Some(t) = self.byte_tokens.get(b as usize) {
            return t.ok_or(Error::NoByteToken(b));
        }
        self.byte_to_token_slow(b)
    }

    pub(crate) fn byte_to_token_slow(&self, b: u8) -> Result<u32> {
        match self.kind {
            ModelKind::Spm | ModelKind::Ugm => self
                .text_to_token(format!("<0x{b:02X}>").as_bytes())
                .or_else(|| self.text_to_token(&[b]))
                .ok_or(Error::NoByteToken(b)),
            ModelKind::Bpe | ModelKind::Wpm => {
                let mut s = Vec::new();
                unicode::push_utf8(&mut s, unicode::byte_to_cpt_table()[b as usize]);
                self.text_to_token(&s).ok_or(Error::NoByteToken(b))
            }
        }
    }

    pub(crate) fn token_to_byte(&self, id: u32) -> u8 {
        let t = self.text(id);
        // strtol of text[3..5] in base 16
        let hex = t.get(3..5).unwrap_or(b"");
        let mut v: u32 = 0;
        for &c in hex {
            match (c as char).to_digit(16) {
                Some(d) => v = v * 16 + d,
                None => break,
            }
        }
        v as u8
    }

    /// The piece of a token as llama.cpp caches it (`special = true`).
    pub(crate) fn piece_uncached(&self, id: u32) -> Result<Vec<u8>> {
        let (text, attr) = (self.text(id), self.attrs[id as usize]);
        if attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED) != 0 {
            return Ok(text.to_vec());
        }
        let unescape = |s: &[u8]| -> Vec<u8> {
            let mut out = Vec::with_capacity(s.len());
            let mut i = 0;
            while i < s.len() {
                if s[i..].starts_with("\u{2581}".as_bytes()) {
                    out.push(b' ');
                    i += 3;
                } else {
                    out.push(s[i]);
                    i += 1;
                }
            }
            out
        };
        match self.kind {
            ModelKind::Spm | ModelKind::Wpm | ModelKind::Ugm | ModelKind::Bpe => {
                if attr & ATTR_NORMAL != 0 {
                    if self.kind != ModelKind::Bpe || self.escape_whitespaces {
                        return Ok(unescape(text));
                    }
                    // each codepoint outside the byte table repeats the whole text: a
                    // long token of them would take quadratic memory
                    let len = decoded_gpt2_len(text);
                    if len > MAX_PIECE.max(4 * text.len()) {
                        return Err(Error::BadMetadata {
                            key: "tokenizer.ggml.tokens".into(),
                            message: format!(
                                "token {id} ({} bytes) would decode to a {len}-byte piece (each codepoint outside \
                                 the GPT-2 byte table repeats the whole text)",
                                text.len()
                            ),
                        });
                    }
                    let piece = decode_gpt2_text(text);
                    debug_assert_eq!(piece.len(), len);
                    return Ok(piece);
                }
                if attr & ATTR_BYTE != 0 {
                    return Ok(vec![self.token_to_byte(id)]);
                }
                Ok(Vec::new())
            }
        }
    }
}

/// Longest piece (beyond 4 bytes per text byte) a token may decode to.
const MAX_PIECE: usize = 1 << 20;

/// The length of [`decode_gpt2_text`]'s result, without building it.
fn decoded_gpt2_len(text: &[u8]) -> usize {
    let mut len = 0usize;
    let mut off = 0;
    while off < text.len() {
        let c = unicode::cpt_from_utf8(text, &mut off).unwrap_or_else(|| {
            off += 1;
            0xFFFD
        });
        len = len.saturating_add(match unicode::cpt_to_byte(c) {
            Some(_) => 1,
            None => {
                let n = match c {
                    0..=0x7F => 1,
                    0x80..=0x7FF => 2,
                    0x800..=0xFFFF => 3,
                    0x10000..=0x10FFFF => 4,
                    _ => 0,
                };
                "[UNK_BYTE_0x".len() + 2 * n + text.len() + 1
            }
        });
    }
    len
}

/// llama.cpp's `llama_decode_text`: GPT-2 byte-level text back to bytes; a codepoint
/// outside the byte table becomes `[UNK_BYTE_0x..<text>]`.
fn decode_gpt2_text(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in unicode::cpts_from_utf8(text) {
        match unicode::cpt_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut u = Vec::new();
                unicode::push_utf8(&mut u, c);
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in &u {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text);
                out.push(b']');
            }
        }
    }
    out
}
