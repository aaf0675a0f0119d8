//! Unigram (T5 / SentencePiece UGM): precompiled-charsmap normalization and Viterbi
//! over the token trie (llama.cpp's `llm_tokenizer_ugm_session`).

use crate::{unicode, Error, Vocab, ATTR_NORMAL, ATTR_UNUSED, ATTR_USER_DEFINED};

/// A byte trie (llama.cpp's `naive_trie`), children sorted by byte.
#[derive(Default, Debug)]
struct Trie {
    children: Vec<(u8, Trie)>,
    value: Option<u32>,
}

impl Trie {
    fn insert(&mut self, key: &[u8], value: u32) {
        let mut node = self;
        for &b in key {
            let i = match node.children.binary_search_by_key(&b, |c| c.0) {
                Ok(i) => i,
                Err(i) => {
                    node.children.insert(i, (b, Trie::default()));
                    i
                }
            };
            node = &mut node.children[i].1;
        }
        node.value = Some(value);
    }
    fn child(&self, b: u8) -> Option<&Trie> {
        self.children.binary_search_by_key(&b, |c| c.0).ok().map(|i| &self.children[i].1)
    }
    /// Length of the longest path from the root along `key` (llama.cpp's
    /// `get_longest_prefix`, which does not require a value at the end).
    fn longest_prefix(&self, key: &[u8]) -> usize {
        let mut node = self;
        let mut n = 0;
        for &b in key {
            match node.child(b) {
                Some(c) => {
                    node = c;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }
}

/// Viterbi table entries kept before the emitted path is cut off (see
/// [`Ugm::tokenize`]).
const WINDOW: usize = 1 << 16;

/// The best path to a position: its last token, that token's length in bytes and the
/// path's score (16 bytes: one per normalized byte in the window).
#[derive(Clone, Copy)]
struct Best {
    id: u32,
    len: u32,
    score: f64,
}

#[derive(Debug)]
pub(crate) struct Ugm {
    xcda: Vec<u32>,
    replacements: Vec<u8>,
    user_defined: Trie,
    tokens: Trie,
    unknown_score: f32,
    /// Every score (and the unknown score) finite: all positions are reached.
    finite: bool,
}

impl Ugm {
    pub(crate) fn new(vocab: &Vocab, charsmap: Option<&[u8]>) -> Result<Ugm, Error> {
        let (mut xcda, mut replacements) = (Vec::new(), Vec::new());
        if let Some(cm) = charsmap.filter(|c| !c.is_empty()) {
            let bad =
                |m: &str| Error::BadMetadata { key: "tokenizer.ggml.precompiled_charsmap".into(), message: m.into() };
            if cm.len() < 4 {
                return Err(bad("too small for the XCDA size header"));
            }
            let size = u32::from_le_bytes([cm[0], cm[1], cm[2], cm[3]]) as usize;
            if size.checked_add(4).is_none_or(|e| e >= cm.len()) {
                return Err(bad("XCDA size past the end"));
            }
            xcda = cm[4..4 + size].chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            replacements = cm[4 + size..].to_vec();
        }
        let mut min_score = f32::MAX;
        let mut max_score = -f32::MAX;
        let mut tokens = Trie::default();
        let mut user_defined = Trie::default();
        for (id, (&attr, &score)) in vocab.attrs.iter().zip(&vocab.scores).enumerate() {
            if attr & ATTR_NORMAL != 0 {
                min_score = min_score.min(score);
                max_score = max_score.max(score);
            }
            if attr & (ATTR_NORMAL | ATTR_USER_DEFINED | ATTR_UNUSED) != 0 {
                tokens.insert(vocab.text(id as u32), id as u32);
            }
            if attr & ATTR_USER_DEFINED != 0 {
                user_defined.insert(vocab.text(id as u32), 0);
            }
        }
        let _ = max_score;
        let unknown_score = min_score - 10.0;
        let finite = unknown_score.is_finite() && vocab.scores.iter().all(|s| s.is_finite());
        Ok(Ugm { xcda, replacements, user_defined, tokens, unknown_score, finite })
    }

    fn xcda(&self, i: usize) -> Result<u32, Error> {
        self.xcda.get(i).copied().ok_or_else(|| Error::BadMetadata {
            key: "tokenizer.ggml.precompiled_charsmap".into(),
            message: "index out of array bounds in XCDA array".into(),
        })
    }

    /// One normalization step at `off`: (replacement bytes, consumed input bytes).
    fn normalize_prefix<'a>(&'a self, input: &'a [u8], off: usize) -> Result<(&'a [u8], usize), Error> {
        let n = self.user_defined.longest_prefix(&input[off..]);
        if n > 0 {
            return Ok((&input[off..off + n], n));
        }
        let mut longest_len = 0;
        let mut longest_off = 0;
        if !self.xcda.is_empty() {
            let base = |p: u32| (p >> 10) << ((p & (1 << 9)) >> 6);
            let mut node = base(self.xcda(0)?) as usize;
            for (k, &c) in input[off..].iter().enumerate() {
                if c == 0 {
                    break;
                }
                node ^= c as usize;
                let p = self.xcda(node)?;
                if p & ((1 << 31) | 0xff) != c as u32 {
                    break;
                }
                let leaf = (p >> 8) & 1 != 0;
                node ^= base(p) as usize;
                if leaf {
                    longest_len = k + 1;
                    longest_off = (self.xcda(node)? & ((1 << 31) - 1)) as usize;
                }
            }
        }
        if longest_len > 0 {
            let bad =
                |m: &str| Error::BadMetadata { key: "tokenizer.ggml.precompiled_charsmap".into(), message: m.into() };
            if longest_off >= self.replacements.len() {
                return Err(bad("index out of array bounds in precompiled charsmap"));
            }
            let rest = &self.replacements[longest_off..];
            let Some(len) = rest.iter().position(|&b| b == 0) else {
                return Err(bad("unterminated string in precompiled charsmap"));
            };
            return Ok((&rest[..len], longest_len));
        }
        let mut o = off;
        match unicode::cpt_from_utf8(input, &mut o) {
            Some(_) => Ok((&input[off..o], o - off)),
            None => Ok(("\u{FFFD}".as_bytes(), 1)),
        }
    }

    fn normalize(&self, vocab: &Vocab, input: &[u8]) -> Result<Vec<u8>, Error> {
        let space: &[u8] = if vocab.escape_whitespaces { "\u{2581}".as_bytes() } else { b" " };
        let prepend = !vocab.treat_whitespace_as_suffix && vocab.add_space_prefix;
        let append = vocab.treat_whitespace_as_suffix && vocab.add_space_prefix;
        let merge = vocab.remove_extra_whitespaces;
        let mut out = Vec::with_capacity(input.len() + input.len() / 4 + 8);
        let mut prepended = false;
        let mut non_ws = false;
        let mut off = 0;
        while off < input.len() {
            let (norm, consumed) = self.normalize_prefix(input, off)?;
            for &c in norm {
                if c != b' ' {
                    if !non_ws {
                        non_ws = true;
                        if (prepend && !prepended) || merge {
                            out.extend_from_slice(space);
                            prepended = true;
                        }
                    }
                    out.push(c);
                } else {
                    non_ws = false;
                    if !merge {
                        out.extend_from_slice(space);
                    }
                }
            }
            off += consumed;
        }
        if append {
            out.extend_from_slice(space);
        }
        Ok(out)
    }

    /// Tokenizes one raw-text fragment, appending ids.
    ///
    /// Viterbi over the normalized text, as llama.cpp. Where no token match reaches
    /// past a position, every path goes through it and nothing before it can change:
    /// the best path up to there is emitted and its table entries dropped, so the
    /// table stays a window (about [`WINDOW`] entries) however long the text — with the
    /// same additions in the same order, so the same scores. (Only with finite scores,
    /// where every position is reached; otherwise one window, as llama.cpp.)
    pub(crate) fn tokenize(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<u32>) -> Result<(), Error> {
        let norm = self.normalize(vocab, text)?;
        let n = norm.len();
        if n == 0 {
            return Ok(());
        }
        let unk = vocab.special.unk.unwrap_or(u32::MAX);
        let unreached = Best { id: unk, len: 0, score: -f64::MAX };
        // best[p - base] for positions from `base`
        let mut best: Vec<Best> = vec![Best { id: unk, len: 0, score: 0.0 }];
        let mut base = 0;
        let frag_start = out.len();
        let mut reach = 0;
        let mut off = 0;
        while off < n {
            if self.finite && reach <= off && off - base >= WINDOW {
                self.backtrack(&best, base, off, unk, frag_start, out);
                best.drain(..off - base);
                base = off;
            }
            let nunits = unicode::len_utf8(norm[off]).min(n - off);
            let cur = best[off - base];
            let mut single = false;
            let mut node = self.tokens.child(norm[off]);
            let mut p = off + 1;
            while let Some(nd) = node {
                if let Some(id) = nd.value {
                    if p - off == nunits {
                        single = true;
                    }
                    let s = if vocab.attrs[id as usize] & ATTR_USER_DEFINED != 0 {
                        0.0
                    } else {
                        vocab.scores[id as usize] as f64
                    };
                    let ch = cur.score + s;
                    if best.len() <= p - base {
                        best.resize(p - base + 1, unreached);
                    }
                    reach = reach.max(p);
                    if ch > best[p - base].score {
                        best[p - base] = Best { id, len: (p - off) as u32, score: ch };
                    }
                }
                if p >= n {
                    break;
                }
                node = nd.child(norm[p]);
                p += 1;
            }
            if !single {
                let ch = cur.score + self.unknown_score as f64;
                let p = off + nunits;
                if best.len() <= p - base {
                    best.resize(p - base + 1, unreached);
                }
                reach = reach.max(p);
                if ch > best[p - base].score {
                    best[p - base] = Best { id: unk, len: nunits as u32, score: ch };
                }
            }
            off += nunits;
        }
        self.backtrack(&best, base, n, unk, frag_start, out);
        Ok(())
    }

    /// Appends the best path from `base` to `end` (llama.cpp's backtrack: consecutive
    /// unknowns become one, also across windows of the same fragment).
    fn backtrack(&self, best: &[Best], base: usize, end: usize, unk: u32, frag_start: usize, out: &mut Vec<u32>) {
        let start = out.len();
        let mut prev_unk = false;
        let mut p = end;
        let mut t = best[end - base];
        loop {
            let is_unk = t.id == unk;
            if !(prev_unk && is_unk) {
                out.push(t.id);
            }
            // the token's start (`off` in llama.cpp; 0 for a position never reached,
            // which a vocabulary with -inf or NaN scores leaves)
            p = if t.len == 0 { 0 } else { p - t.len as usize };
            if p <= base {
                break;
            }
            prev_unk = is_unk;
            t = best[p - base];
        }
        out[start..].reverse();
        if start > frag_start && out[start - 1] == unk && out[start] == unk {
            out.remove(start);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tokenizer;
    use gguf_format::Value;

    #[test]
    fn windows_change_nothing() {
        let mut md = crate::tests::spm_md();
        md.set("tokenizer.ggml.model", Value::from("t5"));
        md.set("tokenizer.ggml.unknown_token_id", Value::U32(0));
        let t = Tokenizer::from_gguf(&md).unwrap();
        let v = &t.vocab;
        let windowed = Ugm::new(v, None).unwrap();
        assert!(windowed.finite);
        let mut whole = Ugm::new(v, None).unwrap();
        whole.finite = false;
        let words = ["hello", "world", "hell", "oh", " ", "wow", "l", "éé", "漢字", "\u{ff}"];
        let mut text = String::new();
        let mut x = 777u32;
        while text.len() < 3 * WINDOW + 77 {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            text.push_str(words[(x >> 16) as usize % words.len()]);
        }
        let (mut a, mut b) = (vec![7], vec![7]);
        windowed.tokenize(v, text.as_bytes(), &mut a).unwrap();
        whole.tokenize(v, text.as_bytes(), &mut b).unwrap();
        assert_eq!(a, b);
    }
}
