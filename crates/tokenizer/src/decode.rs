//! [`Tokenizer::decode`] (`llama_detokenize`), [`Tokenizer::token_to_piece`] and the
//! UTF-8-safe [`StreamDecoder`].

use crate::*;

impl Tokenizer {
    /// A streaming decoder over this tokenizer.
    pub fn stream_decoder(&self, special: bool) -> StreamDecoder<'_> {
        StreamDecoder { tok: self, special, pending: Vec::new() }
    }

    /// `llama_token_to_piece` with `lstrip = 0`: the bytes of one token. Control and
    /// unknown tokens give nothing unless `special`.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<Vec<u8>> {
        let t = self.token(id)?;
        if !special && t.attr & (ATTR_UNKNOWN | ATTR_CONTROL) != 0 {
            return Ok(Vec::new());
        }
        Ok(self.vocab.pieces.get(id as usize).to_vec())
    }

    pub(crate) fn token(&self, id: u32) -> Result<TokenData<'_>> {
        let v = &self.vocab;
        if id as usize >= v.n_tokens() {
            return Err(Error::TokenOutOfRange { id, n_vocab: v.n_tokens() });
        }
        Ok(TokenData { text: v.text(id), score: v.scores[id as usize], attr: v.attrs[id as usize] })
    }

    /// `llama_detokenize`: ids to bytes. `remove_special` drops a leading BOS / trailing
    /// EOS the vocabulary adds; `unparse_special` renders control tokens' text.
    pub fn decode(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> Result<Vec<u8>> {
        let v = &self.vocab;
        for &id in ids {
            self.token(id)?;
        }
        let mut ids = ids;
        let mut remove_space = v.add_space_prefix;
        if remove_special && v.add_bos && !ids.is_empty() && Some(ids[0]) == v.special.bos {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && v.add_eos && !ids.is_empty() && Some(ids[ids.len() - 1]) == v.special.eos {
            ids = &ids[..ids.len() - 1];
        }
        let mut text = Vec::new();
        for &id in ids {
            if !unparse_special && v.attrs[id as usize] & (ATTR_UNKNOWN | ATTR_CONTROL) != 0 {
                remove_space = false;
                continue;
            }
            let p = v.pieces.get(id as usize);
            if remove_space && p.first() == Some(&b' ') {
                text.extend_from_slice(&p[1..]);
            } else {
                text.extend_from_slice(p);
            }
            remove_space = false;
        }
        if v.clean_spaces {
            clean_spaces(&mut text);
        }
        Ok(text)
    }
}

/// llama.cpp's `clean_up_tokenization_spaces` passes, in place and byte for byte.
#[allow(clippy::nonminimal_bool)]
pub(crate) fn clean_spaces(text: &mut Vec<u8>) {
    let total1 = text.len();
    if total1 == 0 {
        return;
    }
    // pass 1: " ?", " !", " .", " ,"
    let mut total = 1;
    for i in 1..total1 {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    // pass 2: " ' " → "'"
    let total2 = total;
    total = if total2 > 0 { 1 } else { 0 };
    let mut i = 1;
    while i < total2 {
        let x = text[i];
        if x == b'\'' && i + 1 < total2 && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    // pass 3: " 's", " 'm", " 're", " 've" lose the space
    let total3 = total;
    total = if total3 > 0 { 1 } else { 0 };
    for i in 1..total3 {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < total3 {
            let x1 = text[i + 1];
            if x1 == b't' || x1 == b'd' {
            } else if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if i + 2 < total3 {
                let x2 = text[i + 2];
                if (x1 == b'r' && x2 == b'e') || (x1 == b'v' && x2 == b'e') {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// Detokenizes a stream of ids, emitting only complete UTF-8: bytes of a sequence
/// split across tokens are held until it completes (or proves invalid, in which case
/// they come out as U+FFFD).
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    special: bool,
    pending: Vec<u8>,
}

impl StreamDecoder<'_> {
    /// Adds one token; returns the text that is now complete (maybe empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        let piece = self.tok.token_to_piece(id, self.special)?;
        self.pending.extend_from_slice(&piece);
        Ok(self.drain(false))
    }

    /// Flushes what is left (an incomplete sequence becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        self.drain(true)
    }

    fn drain(&mut self, all: bool) -> String {
        drain_utf8(&mut self.pending, all)
    }
}

/// Moves the complete UTF-8 prefix of `pending` out as a string (invalid bytes become
/// U+FFFD); an incomplete sequence at the end stays for the next bytes unless `flush`.
pub fn drain_utf8(pending: &mut Vec<u8>, flush: bool) -> String {
    let mut out = String::new();
    let mut i = 0;
    let p = &*pending;
    while i < p.len() {
        match std::str::from_utf8(&p[i..]) {
            Ok(s) => {
                out.push_str(s);
                i = p.len();
            }
            Err(e) => {
                let good = e.valid_up_to();
                out.push_str(std::str::from_utf8(&p[i..i + good]).unwrap_or_default());
                i += good;
                match e.error_len() {
                    Some(bad) => {
                        out.push('\u{FFFD}');
                        i += bad;
                    }
                    None => {
                        // incomplete at the end: wait for more, unless flushing
                        if flush {
                            out.push('\u{FFFD}');
                            i = p.len();
                        }
                        break;
                    }
                }
            }
        }
    }
    pending.drain(..i);
    out
}
