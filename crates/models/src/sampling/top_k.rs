//! `llama_sampler_top_k`: keeps the `k` largest logits, sorted (libstdc++'s partial sort,
//! or llama.cpp's bucket sort above 128).

use super::{sort, Candidates, Stage};

pub(crate) struct TopK {
    k: i32,
}

impl TopK {
    /// `None` for `k ≤ 0` (llama.cpp's empty sampler).
    pub(crate) fn new(k: i32) -> Option<TopK> {
        (k > 0).then_some(TopK { k })
    }
}

impl Stage for TopK {
    fn apply(&mut self, cur: &mut Candidates) {
        sort::top_k(cur, self.k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_k_largest_in_order() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 1000) as f32 / 10.0 - 50.0).collect();
        for k in [1, 5, 128, 129, 700, 5000] {
            let mut cur = Candidates::from_logits(&logits);
            TopK::new(k).unwrap().apply(&mut cur);
            let mut want = logits.clone();
            want.sort_by(|a, b| b.total_cmp(a));
            want.truncate(k as usize);
            assert_eq!(cur.data.iter().map(|t| t.logit).collect::<Vec<_>>(), want, "k = {k}");
            assert!(cur.sorted);
        }
        assert!(TopK::new(0).is_none());
    }
}
