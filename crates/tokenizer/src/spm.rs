//! SentencePiece BPE: score-driven merges over UTF-8 characters, byte fallback
//! (llama.cpp's `llm_tokenizer_spm_session`).

use std::collections::BinaryHeap;

use crate::hash::FxHashMap;
use crate::{unicode, Error, Vocab};

#[derive(Clone, Copy)]
struct Sym {
    start: usize,
    n: usize,
    prev: i32,
    next: i32,
}

struct Bigram {
    left: i32,
    right: i32,
    score: f32,
    size: usize,
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

/// Tokenizes one (already `▁`-escaped) text, appending ids.
pub(crate) fn tokenize(vocab: &Vocab, text: &[u8], out: &mut Vec<u32>) -> Result<(), Error> {
    let mut sym: Vec<Sym> = Vec::new();
    let mut off = 0;
    let mut index = 0i32;
    while off < text.len() {
        let n = unicode::len_utf8(text[off]).min(text.len() - off);
        off += n;
        sym.push(Sym { start: off - n, n, prev: index - 1, next: if off == text.len() { -1 } else { index + 1 } });
        index += 1;
    }
    let mut heap = BinaryHeap::new();
    // llama.cpp's `rev_merge` (text → last bigram with that text), kept as a log and
    // searched from the end only when a final symbol is not a token (rare)
    let mut rev_merge: Vec<(usize, usize, i32, i32)> = Vec::new();
    fn try_add(
        vocab: &Vocab,
        text: &[u8],
        sym: &[Sym],
        heap: &mut BinaryHeap<Bigram>,
        rev: &mut Vec<(usize, usize, i32, i32)>,
        l: i32,
        r: i32,
    ) {
        if l == -1 || r == -1 {
            return;
        }
        let (ls, rs) = (sym[l as usize], sym[r as usize]);
        let t = &text[ls.start..ls.start + ls.n + rs.n];
        let Some(id) = vocab.text_to_token(t) else { return };
        heap.push(Bigram { left: l, right: r, score: vocab.tokens[id as usize].score, size: t.len() });
        rev.push((ls.start, t.len(), l, r));
    }
    for i in 1..sym.len() as i32 {
        try_add(vocab, text, &sym, &mut heap, &mut rev_merge, i - 1, i);
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
        try_add(vocab, text, &sym, &mut heap, &mut rev_merge, p, bg.left);
        try_add(vocab, text, &sym, &mut heap, &mut rev_merge, bg.left, nx);
    }
    if sym.is_empty() {
        return Ok(());
    }
    let mut rev: Option<FxHashMap<&[u8], (i32, i32)>> = None;
    let mut i = 0i32;
    while i != -1 {
        let s = sym[i as usize];
        resegment(vocab, text, &sym, &rev_merge, &mut rev, s.start, s.n, out)?;
        i = s.next;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn resegment<'t>(
    vocab: &Vocab,
    text: &'t [u8],
    sym: &[Sym],
    log: &[(usize, usize, i32, i32)],
    rev: &mut Option<FxHashMap<&'t [u8], (i32, i32)>>,
    start: usize,
    n: usize,
    out: &mut Vec<u32>,
) -> Result<(), Error> {
    let t = &text[start..start + n];
    if let Some(id) = vocab.text_to_token(t) {
        out.push(id);
        return Ok(());
    }
    let map = rev.get_or_insert_with(|| log.iter().map(|&(s, n, l, r)| (&text[s..s + n], (l, r))).collect());
    match map.get(t).copied() {
        None => {
            for &b in t {
                out.push(vocab.byte_to_token(b)?);
            }
            Ok(())
        }
        Some((l, r)) => {
            let (ls, rs) = (sym[l as usize], sym[r as usize]);
            resegment(vocab, text, sym, log, rev, ls.start, ls.n, out)?;
            resegment(vocab, text, sym, log, rev, rs.start, rs.n, out)
        }
    }
}
