//! `llama_sampler_penalties`: repetition, frequency and presence penalties over the last
//! `penalty_last_n` accepted tokens.
//!
//! A seen token's logit is divided by the repetition penalty (multiplied when it is ≤ 0),
//! then `count × freq + present` is subtracted. Marks the candidates unsorted.

use std::collections::{HashMap, VecDeque};

use super::{Candidates, Stage};

pub(crate) struct Penalties {
    last_n: usize,
    repeat: f32,
    freq: f32,
    present: f32,
    prev: VecDeque<u32>,
    counts: HashMap<u32, i32>,
}

impl Penalties {
    /// `None` where llama.cpp makes an empty sampler (no history or nothing to apply).
    pub(crate) fn new(last_n: usize, repeat: f32, freq: f32, present: f32) -> Option<Penalties> {
        if last_n == 0 || (repeat == 1.0 && freq == 0.0 && present == 0.0) {
            return None;
        }
        Some(Penalties { last_n, repeat, freq, present, prev: VecDeque::new(), counts: HashMap::new() })
    }
}

impl Stage for Penalties {
    fn accept(&mut self, token: u32) {
        *self.counts.entry(token).or_insert(0) += 1;
        if self.prev.len() >= self.last_n {
            if let Some(old) = self.prev.pop_front() {
                if let Some(c) = self.counts.get_mut(&old) {
                    *c -= 1;
                    if *c == 0 {
                        self.counts.remove(&old);
                    }
                }
            }
        }
        self.prev.push_back(token);
    }

    fn apply(&mut self, cur: &mut Candidates) {
        for t in &mut cur.data {
            let Some(&count) = self.counts.get(&t.id) else { continue };
            if t.logit <= 0.0 {
                t.logit *= self.repeat;
            } else {
                t.logit /= self.repeat;
            }
            t.logit -= count as f32 * self.freq + f32::from(u8::from(count > 0)) * self.present;
        }
        cur.sorted = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_settings_make_no_sampler() {
        assert!(Penalties::new(0, 2.0, 0.0, 0.0).is_none());
        assert!(Penalties::new(64, 1.0, 0.0, 0.0).is_none());
        assert!(Penalties::new(64, 1.0, 0.1, 0.0).is_some());
    }

    #[test]
    fn penalties_count_only_the_window() {
        let mut s = Penalties::new(2, 2.0, 0.5, 0.25).unwrap();
        for t in [0, 1, 1] {
            s.accept(t);
        }
        // window = [1, 1]: token 0 fell out
        let mut cur = Candidates::from_logits(&[4.0, 4.0, -4.0]);
        s.apply(&mut cur);
        assert_eq!(cur.data[0].logit, 4.0);
        assert_eq!(cur.data[1].logit, 4.0 / 2.0 - (2.0 * 0.5 + 0.25));
        assert_eq!(cur.data[2].logit, -4.0);
        s.accept(2);
        let mut cur = Candidates::from_logits(&[4.0, 4.0, -4.0]);
        s.apply(&mut cur);
        assert_eq!(cur.data[2].logit, -4.0 * 2.0 - (0.5 + 0.25), "negative logits are multiplied");
        assert!(!cur.sorted);
    }
}
