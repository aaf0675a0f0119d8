//! `llama_sampler_typical` (locally typical sampling): orders the candidates by how far
//! their surprise `-ln p` is from the entropy and keeps the first whose probabilities sum
//! past `p` (at least `min_keep`). Leaves the candidates unsorted.

use super::{sort, Candidates, Stage};

pub(crate) struct Typical {
    p: f32,
    min_keep: usize,
}

impl Typical {
    /// `None` for `p ≥ 1`.
    pub(crate) fn new(p: f32, min_keep: usize) -> Option<Typical> {
        (p < 1.0).then_some(Typical { p, min_keep })
    }
}

impl Stage for Typical {
    fn apply(&mut self, cur: &mut Candidates) {
        if self.p >= 1.0 || cur.data.is_empty() {
            return;
        }
        sort::softmax(cur, true);
        let mut entropy = 0.0f32;
        for t in &cur.data {
            entropy += -t.p * t.p.ln();
        }
        let scores: Vec<f32> = cur.data.iter().map(|t| (-t.p.ln() - entropy).abs()).collect();
        let mut indices: Vec<usize> = (0..cur.data.len()).collect();
        sort::sort_by(&mut indices, &mut |&a, &b| scores[a] < scores[b]);
        let mut cum_sum = 0.0f32;
        let mut last_idx = indices.len();
        for (i, &idx) in indices.iter().enumerate() {
            cum_sum += cur.data[idx].p;
            if cum_sum > self.p && (self.min_keep == 0 || i + 1 >= self.min_keep) {
                last_idx = i + 1;
                break;
            }
        }
        let kept: Vec<_> = indices[..last_idx].iter().map(|&i| cur.data[i]).collect();
        cur.data.clear();
        cur.data.extend(kept);
        cur.sorted = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_tokens_closest_to_the_entropy() {
        // four equal tokens and one unlikely one: the unlikely token's surprise is far from
        // the entropy, so it is the one dropped
        let mut cur = Candidates::from_logits(&[0.0, 0.0, 0.0, 0.0, -3.0]);
        Typical::new(0.9, 0).unwrap().apply(&mut cur);
        let mut ids: Vec<u32> = cur.data.iter().map(|t| t.id).collect();
        ids.sort();
        assert_eq!(ids, [0, 1, 2, 3]);
        assert!(!cur.sorted);
        // a dominant token is the typical one: alone it passes p = 0.5
        let mut l = vec![5.0f32];
        l.extend(std::iter::repeat_n(0.0, 20));
        let mut cur = Candidates::from_logits(&l);
        Typical::new(0.5, 0).unwrap().apply(&mut cur);
        assert_eq!(cur.data.iter().map(|t| t.id).collect::<Vec<_>>(), [0]);
        let mut cur = Candidates::from_logits(&l);
        Typical::new(0.5, 3).unwrap().apply(&mut cur);
        assert_eq!(cur.data.len(), 3, "min_keep");
    }
}
