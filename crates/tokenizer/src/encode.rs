//! [`Tokenizer::encode`]: `llama_tokenize`, the special-token partition and the
//! per-model tokenizers.

use crate::*;

impl Tokenizer {
    /// `llama_tokenize`: text to ids. `add_special` adds BOS/EOS/SEP as the vocabulary
    /// says; `parse_special` lets control tokens' text in `text` become those tokens.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        self.encode_bytes(text.as_bytes(), add_special, parse_special)
    }

    /// [`Tokenizer::encode`] for arbitrary bytes (invalid UTF-8 is handled as llama.cpp does).
    pub fn encode_bytes(&self, text: &[u8], add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let v = &self.vocab;
        let frags = if text.is_empty() { Vec::new() } else { self.partition(text, parse_special) };
        let mut out = Vec::new();
        let need = |id: Option<u32>, what| id.ok_or(Error::MissingSpecial(what));
        match &self.model {
            Model::Spm => {
                if add_special && v.add_bos {
                    out.push(need(v.special.bos, "BOS")?);
                }
                let mut prev_special = true;
                for f in &frags {
                    match *f {
                        Frag::Text(s, e) => {
                            let mut t = Vec::new();
                            if v.add_space_prefix && prev_special {
                                t.extend_from_slice("\u{2581}".as_bytes());
                            }
                            escape_whitespace_into(&text[s..e], &mut t);
                            spm::tokenize(v, &t, &mut out)?;
                            prev_special = false;
                        }
                        Frag::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
                if add_special && v.add_eos {
                    out.push(need(v.special.eos, "EOS")?);
                }
            }
            Model::Bpe(bpe) => {
                if add_special && v.add_bos {
                    out.push(need(v.special.bos, "BOS")?);
                }
                for f in &frags {
                    match *f {
                        Frag::Text(s, e) => {
                            if v.escape_whitespaces {
                                bpe.tokenize(v, &escape_whitespace(&text[s..e]), &mut out)?;
                            } else {
                                bpe.tokenize(v, &text[s..e], &mut out)?;
                            }
                        }
                        Frag::Token(id) => out.push(id),
                    }
                }
                if add_special && v.add_eos {
                    out.push(need(v.special.eos, "EOS")?);
                }
            }
            Model::Wpm => {
                if add_special {
                    out.push(need(v.special.bos, "BOS")?);
                }
                for f in &frags {
                    match *f {
                        Frag::Text(s, e) => wpm::tokenize(v, &text[s..e], &mut out),
                        Frag::Token(id) => out.push(id),
                    }
                }
                if add_special {
                    out.push(need(v.special.sep, "SEP")?);
                }
            }
            Model::Ugm(ugm) => {
                if add_special && v.add_bos {
                    out.push(need(v.special.bos, "BOS")?);
                }
                for f in &frags {
                    match *f {
                        Frag::Text(s, e) => ugm.tokenize(v, &text[s..e], &mut out)?,
                        Frag::Token(id) => out.push(id),
                    }
                }
                if add_special && v.add_eos {
                    out.push(need(v.special.eos, "EOS")?);
                }
            }
        }
        Ok(out)
    }

    /// llama.cpp's `tokenizer_st_partition`: split the text at special-token texts.
    fn partition(&self, text: &[u8], parse_special: bool) -> Vec<Frag> {
        let v = &self.vocab;
        let mut frags = vec![Frag::Text(0, text.len())];
        let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r');
        // which special texts occur anywhere (a token absent from the whole text cannot
        // match in a fragment of it); the ordered partition below then only visits those
        let present: Option<Vec<bool>> = v.special_ac.as_ref().map(|ac| {
            let mut p = vec![false; v.cache_special.len()];
            for m in ac.find_overlapping_iter(text) {
                p[m.pattern().as_usize()] = true;
            }
            p
        });
        for (k, &id) in v.cache_special.iter().enumerate() {
            if present.as_ref().is_some_and(|p| !p[k]) {
                continue;
            }
            let attr = v.attrs[id as usize];
            if !parse_special && attr & (ATTR_CONTROL | ATTR_UNKNOWN) != 0 {
                continue;
            }
            let needle = v.text(id);
            if !frags.iter().any(|f| matches!(*f, Frag::Text(s, e) if e - s >= needle.len())) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Frag::Text(mut off, end) = f else {
                    next.push(f);
                    continue;
                };
                loop {
                    let Some(m) = find(&text[off..end], needle).map(|p| p + off) else {
                        if end > off {
                            next.push(Frag::Text(off, end));
                        }
                        break;
                    };
                    if m > off {
                        let mut l_end = m;
                        if attr & ATTR_LSTRIP != 0 {
                            while l_end > off && is_space(text[l_end - 1]) {
                                l_end -= 1;
                            }
                        }
                        if l_end > off {
                            next.push(Frag::Text(off, l_end));
                        }
                    }
                    next.push(Frag::Token(id));
                    let mut r = m + needle.len();
                    if r < end {
                        if attr & ATTR_RSTRIP != 0 {
                            while r < end && is_space(text[r]) {
                                r += 1;
                            }
                        }
                        off = r;
                    } else {
                        break;
                    }
                }
            }
            frags = next;
        }
        frags
    }
}

#[derive(Debug, Clone, Copy)]
enum Frag {
    Text(usize, usize),
    Token(u32),
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

fn escape_whitespace(t: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    escape_whitespace_into(t, &mut out);
    out
}

/// Appends `t` with each space as `▁`, sized exactly.
fn escape_whitespace_into(t: &[u8], out: &mut Vec<u8>) {
    let spaces = memchr::memchr_iter(b' ', t).count();
    out.reserve_exact(t.len() + 2 * spaces);
    let mut last = 0;
    for i in memchr::memchr_iter(b' ', t) {
        out.extend_from_slice(&t[last..i]);
        out.extend_from_slice("\u{2581}".as_bytes());
        last = i + 1;
    }
    out.extend_from_slice(&t[last..]);
}
