//! `llama_sampler_top_p` (nucleus): the smallest prefix of the candidates, by probability,
//! whose sum reaches `p` (and at least `min_keep` of them).
//!
//! Unsorted arrays over 1024 first try the top 256 through the bucket sort and sort all
//! only if the prefix is longer, as llama.cpp does (it decides which of tied tokens come
//! first).

use super::{sort, Candidates, Stage, TokenData};

pub(crate) struct TopP {
    p: f32,
    min_keep: usize,
    buf: Vec<TokenData>,
}

impl TopP {
    /// `None` for `p ≥ 1`.
    pub(crate) fn new(p: f32, min_keep: usize) -> Option<TopP> {
        (p < 1.0).then_some(TopP { p, min_keep, buf: Vec::new() })
    }
}

impl Stage for TopP {
    fn apply(&mut self, cur: &mut Candidates) {
        if self.p >= 1.0 || cur.data.is_empty() {
            return;
        }
        sort::softmax(cur, false);
        let size = cur.data.len();
        let mut k = size;
        let mut in_buf = false;
        if !cur.sorted && size > 1024 {
            k = 256.min(size);
            sort::bucket_partial_sort(&cur.data, k, &mut self.buf);
            in_buf = true;
        } else if !cur.sorted {
            sort::partial_sort_inplace(cur, k);
        }
        let mut cum_sum = 0.0f32;
        let mut last_idx = size;
        for i in 0..size {
            cum_sum += if in_buf { self.buf[i].p } else { cur.data[i].p };
            if cum_sum >= self.p && i + 1 >= self.min_keep {
                last_idx = i + 1;
                break;
            }
            if !cur.sorted && i == k - 1 {
                k = size;
                sort::bucket_partial_sort(&cur.data, k, &mut self.buf);
                in_buf = true;
            }
        }
        if !cur.sorted {
            cur.data[..last_idx].copy_from_slice(&self.buf[..last_idx]);
            cur.sorted = true;
        }
        cur.data.truncate(last_idx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probs(n: usize) -> Vec<f32> {
        // logits ln(w): probabilities proportional to w
        (0..n).map(|i| (((i * 37) % n) as f32 + 1.0).ln()).collect()
    }

    #[test]
    fn keeps_the_smallest_prefix_reaching_p() {
        for n in [10usize, 2000] {
            let logits = probs(n);
            let mut cur = Candidates::from_logits(&logits);
            TopP::new(0.5, 0).unwrap().apply(&mut cur);
            let total: f32 = (1..=n).map(|w| w as f32).sum();
            let kept: f32 = cur.data.iter().map(|t| t.logit.exp()).sum();
            let without_last = kept - cur.data.last().unwrap().logit.exp();
            assert!(kept / total >= 0.5 - 1e-4 && without_last / total < 0.5 + 1e-4, "n = {n}");
            assert!(cur.data.windows(2).all(|w| w[0].logit >= w[1].logit));
        }
    }

    #[test]
    fn min_keep_wins_over_p() {
        let mut cur = Candidates::from_logits(&[10.0, 0.0, 0.0, 0.0]);
        TopP::new(0.1, 3).unwrap().apply(&mut cur);
        assert_eq!(cur.data.len(), 3);
    }
}
