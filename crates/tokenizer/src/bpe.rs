//! Byte-level BPE with merge ranks (llama.cpp's `llm_tokenizer_bpe_session`).

use std::collections::BinaryHeap;

use gguf_format::StringArray;

use crate::hash::FxHashMap;
use crate::pretok::CompiledPre;
use crate::{unicode, Error, Vocab};

const NONE: u32 = u32::MAX;

/// The merge table over piece ids: a piece (a string that occurs in merges) that is a
/// token has its token id, any other one an id from `n_vocab` up (`extra`); a pair of
/// piece ids maps to its rank and the id of the merged piece.
#[derive(Debug)]
pub(crate) struct Bpe {
    extra: FxHashMap<Vec<u8>, u32>,
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    pub(crate) pre: CompiledPre,
    /// A word of newlines only is one token if the vocabulary has it
    /// ([`crate::pretok::PreFlags::newline_words_whole`]).
    pub(crate) newline_words_whole: bool,
}

impl Bpe {
    pub(crate) fn new(
        vocab: &Vocab,
        merges_list: &StringArray,
        pre: CompiledPre,
        newline_words_whole: bool,
    ) -> Result<Bpe, Error> {
        let mut extra: FxHashMap<Vec<u8>, u32> = FxHashMap::default();
        let mut merges: FxHashMap<(u32, u32), (u32, u32)> = FxHashMap::default();
        merges.reserve(merges_list.len());
        let n_vocab = vocab.n_tokens() as u32;
        let mut intern = |s: &[u8]| -> u32 {
            if let Some(id) = vocab.text_to_token(s) {
                return id;
            }
            if let Some(&id) = extra.get(s) {
                return id;
            }
            let id = n_vocab + extra.len() as u32;
            extra.insert(s.to_vec(), id);
            id
        };
        let mut joined = Vec::new();
        // merges without a space or whose result is not a vocabulary token
        let (mut bad, mut first_bad) = (0usize, None);
        for (rank, m) in merges_list.iter().enumerate() {
            // llama.cpp: split at the first space after the first byte; none → ("", "")
            let (first, second): (&[u8], &[u8]) = match m.iter().skip(1).position(|&b| b == b' ') {
                Some(p) => (&m[..p + 1], &m[p + 2..]),
                None => {
                    bad += 1;
                    first_bad.get_or_insert(rank);
                    (b"", b"")
                }
            };
            let l = intern(first);
            let r = intern(second);
            joined.clear();
            joined.extend_from_slice(first);
            joined.extend_from_slice(second);
            let j = intern(&joined);
            if j >= n_vocab && !(first.is_empty() && second.is_empty()) {
                bad += 1;
                first_bad.get_or_insert(rank);
            }
            merges.entry((l, r)).or_insert((rank as u32, j));
        }
        // Real files carry a few stray merges; disagreement is a majority of them.
        if !merges_list.is_empty() && bad * 2 > merges_list.len() {
            let i = first_bad.unwrap_or(0);
            return Err(Error::BadMetadata {
                key: "tokenizer.ggml.merges".into(),
                message: format!(
                    "{bad} of {} merges do not produce a vocabulary token (first: #{i} {:?}); vocabulary and merges disagree",
                    merges_list.len(),
                    String::from_utf8_lossy(&merges_list[i])
                ),
            });
        }
        extra.shrink_to_fit();
        merges.shrink_to_fit();
        Ok(Bpe { extra, merges, pre, newline_words_whole })
    }

    #[inline]
    fn piece(&self, vocab: &Vocab, s: &[u8]) -> u32 {
        match vocab.text_to_token(s) {
            Some(id) => id,
            None if self.extra.is_empty() => NONE,
            None => self.extra.get(s).copied().unwrap_or(NONE),
        }
    }

    /// Tokenizes one raw-text fragment, appending ids. Words are merged as the
    /// pre-tokenizer produces them, with buffers reused from word to word.
    pub(crate) fn tokenize(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<u32>) -> Result<(), Error> {
        let mut sym: Vec<Sym> = Vec::new();
        let mut prev: Vec<i32> = Vec::new();
        let mut heap: BinaryHeap<Bigram> = BinaryHeap::new();
        self.pre.split_each(text, &mut |word| {
            self.word(vocab, word, &mut sym, &mut prev, &mut heap, out);
            Ok(())
        })
    }

    fn word(
        &self,
        vocab: &Vocab,
        word: &[u8],
        sym: &mut Vec<Sym>,
        prev: &mut Vec<i32>,
        heap: &mut BinaryHeap<Bigram>,
        out: &mut Vec<u32>,
    ) {
        if word.is_empty() {
            return;
        }
        sym.clear();
        heap.clear();
        let whole = vocab.ignore_merges || (self.newline_words_whole && word.iter().all(|&b| b == b'\n'));
        if whole {
            if let Some(id) = vocab.text_to_token(word) {
                out.push(id);
                return;
            }
        }
        let mut off = 0;
        while off < word.len() {
            let n = unicode::len_utf8(word[off]).min(word.len() - off);
            sym.push(Sym { start: off as u32, n: n as u32, piece: self.piece(vocab, &word[off..off + n]), next: 0 });
            off += n;
        }
        let ns = sym.len();
        for (i, s) in sym.iter_mut().enumerate() {
            s.next = if i + 1 < ns { (i + 1) as i32 } else { -1 };
        }
        prev.clear();
        prev.extend((0..ns as i32).map(|i| i - 1));
        for i in 1..ns {
            self.push_bigram(sym, heap, (i - 1) as i32, i as i32);
        }
        while let Some(bg) = heap.pop() {
            let (l, r) = (bg.left as usize, bg.right as usize);
            if sym[l].n == 0 || sym[r].n == 0 || sym[l].piece != bg.lp || sym[r].piece != bg.rp {
                continue;
            }
            sym[l].n += sym[r].n;
            sym[l].piece = bg.merged;
            sym[r].n = 0;
            sym[l].next = sym[r].next;
            if sym[r].next >= 0 {
                prev[sym[r].next as usize] = l as i32;
            }
            self.push_bigram(sym, heap, prev[l], l as i32);
            self.push_bigram(sym, heap, l as i32, sym[l].next);
        }
        for s in sym.iter().filter(|s| s.n > 0) {
            let piece = &word[s.start as usize..(s.start + s.n) as usize];
            match vocab.text_to_token(piece) {
                Some(id) => out.push(id),
                None => {
                    for &b in piece {
                        let t = if self.pre.byte_encode {
                            vocab.text_to_token(&[b])
                        } else {
                            vocab.text_to_token(format!("<0x{b:02X}>").as_bytes())
                        };
                        if let Some(t) = t {
                            out.push(t);
                        }
                    }
                }
            }
        }
    }

    #[inline]
    fn push_bigram(&self, sym: &[Sym], heap: &mut BinaryHeap<Bigram>, left: i32, right: i32) {
        if left < 0 || right < 0 {
            return;
        }
        let (lp, rp) = (sym[left as usize].piece, sym[right as usize].piece);
        if lp == NONE || rp == NONE {
            return;
        }
        if let Some(&(rank, merged)) = self.merges.get(&(lp, rp)) {
            heap.push(Bigram { rank, left, right, lp, rp, merged });
        }
    }
}

#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    n: u32,
    piece: u32,
    next: i32,
}

#[derive(PartialEq, Eq)]
struct Bigram {
    rank: u32,
    left: i32,
    right: i32,
    lp: u32,
    rp: u32,
    merged: u32,
}

impl Ord for Bigram {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // the top is the lowest rank, then the leftmost
        o.rank.cmp(&self.rank).then(o.left.cmp(&self.left))
    }
}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
