//! `llama_sampler_xtc` (exclude top choices): with chance `probability` (one float draw from
//! its own mt19937 per step), removes every candidate at or above `threshold` probability
//! except the least likely of them, if at least `min_keep` remain.

use super::rng::{canonical_f32, Mt19937};
use super::{sort, Candidates, Stage};

pub(crate) struct Xtc {
    probability: f32,
    threshold: f32,
    min_keep: usize,
    rng: Mt19937,
}

impl Xtc {
    /// `None` for `probability ≤ 0` or `threshold > 0.5` (no draws either).
    pub(crate) fn new(probability: f32, threshold: f32, min_keep: usize, seed: u32) -> Option<Xtc> {
        (probability > 0.0 && threshold <= 0.5).then(|| Xtc {
            probability,
            threshold,
            min_keep,
            rng: Mt19937::new(super::rng::resolve_seed(seed)),
        })
    }
}

impl Stage for Xtc {
    fn apply(&mut self, cur: &mut Candidates) {
        if self.probability <= 0.0 || self.threshold > 0.5 || cur.data.len() < 2 {
            return;
        }
        let chance = canonical_f32(&mut self.rng);
        if chance > self.probability {
            return;
        }
        sort::softmax(cur, true);
        let mut pos_last = 0;
        for (i, t) in cur.data.iter().enumerate() {
            if t.p >= self.threshold {
                pos_last = i;
            } else {
                break;
            }
        }
        if cur.data.len() - pos_last >= self.min_keep && pos_last > 0 {
            cur.data.drain(..pos_last);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_all_top_choices_but_the_last() {
        let l = [3.0f32, 2.9, 2.8, -5.0, -5.0];
        let mut s = Xtc::new(1.0, 0.1, 1, 1).unwrap();
        let mut cur = Candidates::from_logits(&l);
        s.apply(&mut cur);
        assert_eq!(cur.data.iter().map(|t| t.id).collect::<Vec<_>>(), [2, 3, 4]);
        // min_keep larger than what would remain: nothing removed
        let mut s = Xtc::new(1.0, 0.1, 4, 1).unwrap();
        let mut cur = Candidates::from_logits(&l);
        s.apply(&mut cur);
        assert_eq!(cur.data.len(), 5);
        assert!(Xtc::new(0.5, 0.6, 1, 1).is_none());
    }
}
