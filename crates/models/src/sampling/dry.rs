//! `llama_sampler_dry` ("don't repeat yourself", ported by llama.cpp from koboldcpp):
//! penalises a token that would extend a sequence already repeated in the last
//! `penalty_last_n` tokens by `multiplier × base^(length − allowed_length)`.
//!
//! Sequence breakers (strings) stop the repeat scan; they are turned into token sequences
//! once, from the vocabulary, as llama.cpp's `get_overlapping_token_sequences` does: every
//! token whose text contains a breaker is a one-token breaker, and every token whose text
//! ends with a prefix of a breaker heads a sequence whose tail is the tokenisation of the
//! breaker's rest (at most 20 tokens). Breakers are cut to 40 bytes.

use std::collections::{HashMap, VecDeque};

use super::{Candidates, SamplerVocab, Stage};

const MAX_CHAR_LEN: usize = 40;
const MAX_SEQ_LEN: usize = 20;

pub(crate) struct Dry {
    multiplier: f32,
    base: f32,
    allowed_length: i32,
    penalty_last_n: i32,
    breakers: HashMap<u32, Vec<Vec<u32>>>,
    repeat_count: Vec<i32>,
    max_token_repeat: HashMap<u32, i32>,
    last_tokens: VecDeque<u32>,
}

/// `get_overlapping_token_sequences` for one breaker.
fn overlapping_sequences(vocab: &dyn SamplerVocab, s: &[u8], out: &mut HashMap<u32, Vec<Vec<u32>>>) {
    for id in 0..vocab.n_tokens() as u32 {
        let word = vocab.piece(id);
        if word.windows(s.len()).any(|w| w == s) {
            out.entry(id).or_default().push(Vec::new());
            continue;
        }
        for pos in 0..word.len() {
            if word[pos] != s[0] {
                continue;
            }
            let mut i = 1;
            let mut matched = true;
            while i < s.len() && i + pos < word.len() {
                if word[pos + i] != s[i] {
                    matched = false;
                    break;
                }
                i += 1;
            }
            if matched {
                let mut tail = vocab.tokenize(&s[i..]);
                tail.truncate(MAX_SEQ_LEN);
                let seqs = out.entry(id).or_default();
                if !seqs.contains(&tail) {
                    seqs.push(tail);
                }
            }
        }
    }
}

impl Dry {
    /// `None` where llama.cpp makes an empty sampler (`multiplier == 0`, `base < 1` or no
    /// history). Breakers need the vocabulary; without one there are none.
    pub(crate) fn new(
        multiplier: f32,
        base: f32,
        allowed_length: i32,
        penalty_last_n: usize,
        breakers: &[String],
        vocab: Option<&dyn SamplerVocab>,
    ) -> Option<Dry> {
        let penalty_last_n = penalty_last_n.min(i32::MAX as usize) as i32;
        if multiplier == 0.0 || base < 1.0 || penalty_last_n == 0 {
            return None;
        }
        let mut processed = HashMap::new();
        if let Some(vocab) = vocab {
            for b in breakers {
                let b = b.as_bytes();
                if b.is_empty() {
                    continue;
                }
                overlapping_sequences(vocab, &b[..b.len().min(MAX_CHAR_LEN)], &mut processed);
            }
        }
        Some(Dry::with_breakers(multiplier, base, allowed_length, penalty_last_n, processed))
    }

    fn with_breakers(
        multiplier: f32,
        base: f32,
        allowed_length: i32,
        penalty_last_n: i32,
        breakers: HashMap<u32, Vec<Vec<u32>>>,
    ) -> Dry {
        Dry {
            multiplier,
            base,
            allowed_length,
            penalty_last_n,
            breakers,
            repeat_count: Vec::new(),
            max_token_repeat: HashMap::new(),
            last_tokens: VecDeque::new(),
        }
    }

    /// `ring_buffer::rat`: the `i`-th most recent token.
    fn rat(&self, i: usize) -> u32 {
        self.last_tokens[self.last_tokens.len() - 1 - i]
    }
}

impl Stage for Dry {
    fn accept(&mut self, token: u32) {
        if self.last_tokens.len() >= self.penalty_last_n as usize {
            self.last_tokens.pop_front();
        }
        self.last_tokens.push_back(token);
    }

    fn apply(&mut self, cur: &mut Candidates) {
        let last_n_repeat = (self.last_tokens.len().min(i32::MAX as usize) as i32).min(self.penalty_last_n);
        if last_n_repeat <= self.allowed_length {
            return;
        }
        let n = last_n_repeat as usize;
        self.repeat_count.clear();
        self.repeat_count.resize(n, 0);
        self.max_token_repeat.clear();

        // Step 1: the nearest restart sequence limits the repetition length.
        let mut rep_limit = last_n_repeat;
        for i in 0..n {
            let Some(seqs) = self.breakers.get(&self.rat(i)) else { continue };
            let mut longest: i32 = -1;
            for seq in seqs {
                let seq_len = seq.len() as i32;
                if seq_len > longest
                    && seq.len() <= i
                    && seq.iter().enumerate().all(|(off, &t)| t == self.rat(i - off - 1))
                {
                    longest = seq_len;
                }
            }
            if longest >= 0 {
                rep_limit = i as i32 - longest;
                break;
            }
        }
        if rep_limit < self.allowed_length {
            return;
        }

        // Step 2: reverse Z-algorithm over the last tokens.
        {
            let last = n - 1;
            let (mut rt, mut lt) = (0usize, 0usize);
            for k in 1..n {
                if k > rt {
                    let mut m = 0;
                    while m + k < n && self.rat(m) == self.rat(m + k) {
                        m += 1;
                    }
                    self.repeat_count[last - k] = (m as i32).min(rep_limit);
                    if m > 0 {
                        lt = k;
                        rt = k + m - 1;
                    }
                } else {
                    let p = k - lt;
                    let right_part_len = (rt - k + 1) as i32;
                    if self.repeat_count[last - p] < right_part_len {
                        self.repeat_count[last - k] = self.repeat_count[last - p].min(rep_limit);
                    } else {
                        let mut i = rt + 1;
                        while i < n && self.rat(i) == self.rat(i - k) {
                            i += 1;
                        }
                        self.repeat_count[last - k] = ((i - k) as i32).min(rep_limit);
                        lt = k;
                        rt = i - 1;
                    }
                }
            }
        }

        // Step 3: the longest repeat each next token would extend.
        for i in 0..n - 1 {
            let repeat_len = self.repeat_count[i];
            if repeat_len >= self.allowed_length {
                let token = self.rat(n - 2 - i);
                let e = self.max_token_repeat.entry(token).or_insert(repeat_len);
                if *e < repeat_len {
                    *e = repeat_len;
                }
            }
        }

        // Step 4: penalties, the exponent clamped so the power stays finite in float.
        const FLOAT_MAX_LOG: f32 = 88.722_84;
        let max_exponent = if self.base > 1.000_001 { super::sort::c_int(FLOAT_MAX_LOG / self.base.ln()) } else { 0 };
        for t in &mut cur.data {
            let Some(&max_repeat) = self.max_token_repeat.get(&t.id) else { continue };
            if self.breakers.get(&t.id).is_some_and(|seqs| seqs.iter().any(Vec::is_empty)) {
                continue;
            }
            let mut repeat_exp = max_repeat - self.allowed_length;
            if max_exponent > 0 && repeat_exp > max_exponent {
                repeat_exp = max_exponent;
            }
            let penalty = (f64::from(self.multiplier) * f64::from(self.base).powf(f64::from(repeat_exp))) as f32;
            t.logit -= penalty;
        }
        cur.sorted = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Letters;
    /// Token i is the letter `b'a' + i`; token 26 is "\n", 27 is "x\ny".
    impl SamplerVocab for Letters {
        fn n_tokens(&self) -> usize {
            28
        }
        fn piece(&self, id: u32) -> Vec<u8> {
            match id {
                26 => b"\n".to_vec(),
                27 => b"x\ny".to_vec(),
                i => vec![b'a' + i as u8],
            }
        }
        fn tokenize(&self, text: &[u8]) -> Vec<u32> {
            text.iter().map(|&c| if c == b'\n' { 26 } else { (c - b'a') as u32 }).collect()
        }
    }

    fn run(dry: &mut Dry, history: &[u32]) -> Vec<f32> {
        for &t in history {
            dry.accept(t);
        }
        let mut cur = Candidates::from_logits(&[0.0; 28]);
        dry.apply(&mut cur);
        cur.data.iter().map(|t| t.logit).collect()
    }

    #[test]
    fn penalises_the_token_that_extends_a_repeat() {
        // a b c d ... a b c: "d" would extend the repeat "a b c" (length 3)
        let mut dry = Dry::new(0.8, 1.75, 2, 64, &[], None).unwrap();
        let l = run(&mut dry, &[0, 1, 2, 3, 9, 0, 1, 2]);
        assert_eq!(l[3], -(0.8 * 1.75f64.powi(1)) as f32);
        assert!(l.iter().enumerate().all(|(i, &x)| i == 3 || x == 0.0));
    }

    #[test]
    fn a_breaker_in_the_repeat_limits_it() {
        let breakers = vec!["\n".to_string()];
        let mut dry = Dry::new(0.8, 1.75, 2, 64, &breakers, Some(&Letters)).unwrap();
        assert!(dry.breakers[&26].contains(&Vec::new()), "\"\\n\" is a one-token breaker");
        assert!(dry.breakers[&27].contains(&Vec::new()), "a token containing it is one too");
        // a \n b c d ... a \n b c: the repeat is cut at the newline (2 tokens: b c)
        let l = run(&mut dry, &[0, 26, 1, 2, 3, 9, 0, 26, 1, 2]);
        assert_eq!(l[3], -0.8, "repeat length 2 = allowed length: base^0");
        assert!(Dry::new(0.0, 1.75, 2, 64, &[], None).is_none());
        assert!(Dry::new(0.8, 0.5, 2, 64, &[], None).is_none());
    }

    #[test]
    fn breaker_prefixes_at_a_token_end_become_sequences() {
        // "ab" as a breaker: token "a" ends with its prefix "a", the tail is "b"
        let mut out = HashMap::new();
        overlapping_sequences(&Letters, b"ab", &mut out);
        assert_eq!(out[&0], vec![vec![1u32]]);
        assert!(!out.contains_key(&1));
    }
}
