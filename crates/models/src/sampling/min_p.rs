//! `llama_sampler_min_p`: drops candidates whose probability is below `p` times the
//! largest (as a logit threshold, `max + ln p`), keeping at least `min_keep`.
//!
//! Unsorted candidates are filtered in place, in order; only when that leaves fewer than
//! `min_keep` are they sorted and cut.

use super::{sort, Candidates, Stage};

pub(crate) struct MinP {
    p: f32,
    min_keep: usize,
}

impl MinP {
    /// `None` for `p ≤ 0`.
    pub(crate) fn new(p: f32, min_keep: usize) -> Option<MinP> {
        (p > 0.0).then_some(MinP { p, min_keep })
    }
}

impl Stage for MinP {
    fn apply(&mut self, cur: &mut Candidates) {
        if self.p <= 0.0 || cur.data.is_empty() {
            return;
        }
        let mut applied = false;
        if !cur.sorted {
            let max_logit = cur.data.iter().fold(-f32::MAX, |m, t| sort::cpp_max(m, t.logit));
            let min_logit = max_logit + self.p.ln();
            let kept = cur.data.iter().filter(|t| t.logit >= min_logit).count();
            if kept > 0 && kept >= self.min_keep {
                cur.data.retain(|t| t.logit >= min_logit);
                applied = true;
            }
        }
        if !applied {
            if !cur.sorted {
                let n = cur.data.len();
                sort::partial_sort_inplace(cur, n);
            }
            let min_logit = cur.data[0].logit + self.p.ln();
            let mut i = 1;
            while i < cur.data.len() {
                if cur.data[i].logit < min_logit && i >= self.min_keep {
                    break;
                }
                i += 1;
            }
            cur.data.truncate(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_the_tail_relative_to_the_top() {
        let l = [0.0, 2.0f32.ln(), 4.0f32.ln(), 10.0f32.ln()];
        let mut cur = Candidates::from_logits(&l);
        MinP::new(0.3, 0).unwrap().apply(&mut cur);
        // p_i / p_max: 0.1, 0.2, 0.4, 1 → the last two stay, in their order
        assert_eq!(cur.data.iter().map(|t| t.id).collect::<Vec<_>>(), [2, 3]);
        assert!(!cur.sorted);
        let mut cur = Candidates::from_logits(&l);
        MinP::new(0.3, 3).unwrap().apply(&mut cur);
        assert_eq!(cur.data.iter().map(|t| t.id).collect::<Vec<_>>(), [3, 2, 1], "min_keep sorts and keeps 3");
    }
}
