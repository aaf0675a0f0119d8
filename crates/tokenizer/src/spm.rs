//! SentencePiece BPE: score-driven merges over UTF-8 characters, byte fallback
//! (llama.cpp's `llm_tokenizer_spm_session`).

use std::collections::BinaryHeap;

use crate::{unicode, Error, Vocab};

/// One symbol: a UTF-8 character of the text, or a merge of adjacent ones. 16 bytes, as
/// the symbol array is as long as the text.
#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    n: u32,
    prev: i32,
    next: i32,
}

struct Bigram {
    left: i32,
    right: i32,
    score: f32,
    size: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for Bigram {}
impl Ord for Bigram {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // std::priority_queue with `l.score < r.score || (equal && l.left > r.left)`
        let less = |a: &Bigram, b: &Bigram| a.score < b.score || (a.score == b.score && a.left > b.left);
        if less(self, o) {
            std::cmp::Ordering::Less
        } else if less(o, self) {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    }
}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// Texts up to this many bytes are tokenized in one piece; longer ones are cut at
/// symbol boundaries no merge can cross (see [`tokenize`]) into pieces of about this
/// size, which bounds the symbol array and the queue.
const PIECE: usize = 1 << 16;

/// Tokenizes one (already `▁`-escaped) text, appending ids.
///
/// A merge joins two adjacent symbols only when their concatenation is a token, so a
/// boundary between two characters `a` and `b` can never be crossed when no token has
/// `a` directly followed by `b` (as symbols of its own text, split the same way). The
/// merges on either side of such a boundary are then independent — each side pops its
/// valid bigrams in the same (score, position) order as the whole text would, and valid
/// bigrams never tie (one per left symbol; sizes only grow) — so tokenizing the pieces
/// one after the other gives the very same ids. A long text is cut at such boundaries
/// when it has them (the pair set is built on first need); without NaN scores only, as
/// NaN makes the queue order depend on its layout.
pub(crate) fn tokenize(vocab: &Vocab, text: &[u8], out: &mut Vec<u32>) -> Result<(), Error> {
    if text.len() <= PIECE {
        return tokenize_piece(vocab, text, out);
    }
    let Some(pairs) = vocab.spm_pairs() else {
        return tokenize_piece(vocab, text, out);
    };
    let mut start = 0;
    let mut prev: Option<(usize, usize)> = None;
    let mut off = 0;
    while off < text.len() {
        let n = unicode::len_utf8(text[off]).min(text.len() - off);
        if off - start >= PIECE {
            if let Some((ps, pn)) = prev {
                if pairs.binary_search(&pair_key(&text[ps..ps + pn], &text[off..off + n])).is_err() {
                    tokenize_piece(vocab, &text[start..off], out)?;
                    start = off;
                }
            }
        }
        prev = Some((off, n));
        off += n;
    }
    tokenize_piece(vocab, &text[start..], out)
}

/// A pair of adjacent symbols (each 1–4 bytes) as one key; distinct pairs may collide,
/// which only ever forbids a cut.
#[inline]
fn pair_key(a: &[u8], b: &[u8]) -> u64 {
    let pack = |s: &[u8]| s.iter().take(4).fold(0u32, |k, &c| (k << 8) | c as u32) << (8 * (4 - s.len().min(4)));
    ((pack(a) as u64) << 32) | pack(b) as u64
}

/// Every pair of adjacent symbols in a token's text, sorted; `None` when some score is
/// NaN (no cuts then).
pub(crate) fn adjacent_pairs(vocab: &Vocab) -> Option<Vec<u64>> {
    if vocab.scores.iter().any(|s| s.is_nan()) {
        return None;
    }
    let mut keys = Vec::new();
    for id in 0..vocab.n_tokens() as u32 {
        let s = vocab.text(id);
        let mut prev: Option<&[u8]> = None;
        let mut off = 0;
        while off < s.len() {
            let n = unicode::len_utf8(s[off]).min(s.len() - off);
            let cur = &s[off..off + n];
            if let Some(p) = prev {
                keys.push(pair_key(p, cur));
            }
            prev = Some(cur);
            off += n;
        }
    }
    keys.sort_unstable();
    keys.dedup();
    keys.shrink_to_fit();
    Some(keys)
}

fn tokenize_piece(vocab: &Vocab, text: &[u8], out: &mut Vec<u32>) -> Result<(), Error> {
    if text.len() > i32::MAX as usize {
        return Err(Error::InputTooLong { len: text.len(), max: i32::MAX as usize });
    }
    let mut sym: Vec<Sym> = Vec::new();
    let mut off = 0;
    let mut index = 0i32;
    while off < text.len() {
        let n = unicode::len_utf8(text[off]).min(text.len() - off);
        off += n;
        sym.push(Sym {
            start: (off - n) as u32,
            n: n as u32,
            prev: index - 1,
            next: if off == text.len() { -1 } else { index + 1 },
        });
        index += 1;
    }
    let mut heap = BinaryHeap::new();
    fn try_add(vocab: &Vocab, text: &[u8], sym: &[Sym], heap: &mut BinaryHeap<Bigram>, l: i32, r: i32) {
        if l == -1 || r == -1 {
            return;
        }
        let (ls, rs) = (sym[l as usize], sym[r as usize]);
        let size = ls.n + rs.n;
        let t = &text[ls.start as usize..(ls.start + size) as usize];
        let Some(id) = vocab.text_to_token(t) else { return };
        heap.push(Bigram { left: l, right: r, score: vocab.scores[id as usize], size });
    }
    for i in 1..sym.len() as i32 {
        try_add(vocab, text, &sym, &mut heap, i - 1, i);
    }
    while let Some(bg) = heap.pop() {
        let (l, r) = (bg.left as usize, bg.right as usize);
        if sym[l].n == 0 || sym[r].n == 0 || sym[l].n + sym[r].n != bg.size {
            continue;
        }
        sym[l].n += sym[r].n;
        sym[r].n = 0;
        sym[l].next = sym[r].next;
        let rn = sym[r].next;
        if rn >= 0 {
            sym[rn as usize].prev = bg.left;
        }
        let (p, nx) = (sym[l].prev, sym[l].next);
        try_add(vocab, text, &sym, &mut heap, p, bg.left);
        try_add(vocab, text, &sym, &mut heap, bg.left, nx);
    }
    drop(heap);
    if sym.is_empty() {
        return Ok(());
    }
    // llama.cpp's `resegment`: a final symbol is a token, or else falls back to bytes.
    // (Its `rev_merge` lookup never succeeds there: it only holds texts that are
    // tokens, and a symbol reaching it is not one.)
    let mut i = 0i32;
    while i != -1 {
        let s = sym[i as usize];
        let t = &text[s.start as usize..(s.start + s.n) as usize];
        match vocab.text_to_token(t) {
            Some(id) => out.push(id),
            None => {
                for &b in t {
                    out.push(vocab.byte_to_token(b)?);
                }
            }
        }
        i = s.next;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tokenizer;

    #[test]
    fn cutting_long_texts_changes_nothing() {
        let t = Tokenizer::from_gguf(&crate::tests::spm_md()).unwrap();
        let v = &t.vocab;
        assert!(v.spm_pairs().is_some_and(|p| !p.is_empty()));
        let mut text = Vec::new();
        let words = ["hello", "world", "hell", "oh", "\u{2581}", "wow", "l", "éé", "\u{ff}"];
        let mut x = 12345u32;
        while text.len() < 3 * PIECE + 77 {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            text.extend_from_slice(words[(x >> 16) as usize % words.len()].as_bytes());
            text.extend_from_slice("\u{2581}".as_bytes());
        }
        let (mut whole, mut cut) = (Vec::new(), Vec::new());
        tokenize_piece(v, &text, &mut whole).unwrap();
        tokenize(v, &text, &mut cut).unwrap();
        assert_eq!(whole, cut);
    }
}
