//! `llama_sampler_top_n_sigma`: masks (to -inf) every logit more than `n` standard
//! deviations below the largest, statistics taken over the logits that are not `-inf`.
//!
//! The squares are summed as llama.cpp's `acc += pow(x - mean, 2)` does: in double, the
//! float accumulator rounded after each step.

use super::{Candidates, Stage};

pub(crate) struct TopNSigma {
    n: f32,
}

impl TopNSigma {
    /// `None` for `n ≤ 0`.
    pub(crate) fn new(n: f32) -> Option<TopNSigma> {
        (n > 0.0).then_some(TopNSigma { n })
    }
}

impl Stage for TopNSigma {
    fn apply(&mut self, cur: &mut Candidates) {
        if self.n <= 0.0 || cur.data.len() <= 1 {
            return;
        }
        let mut max = cur.data[0].logit;
        let mut sum = 0.0f32;
        let mut valid = 0usize;
        for t in &cur.data {
            if t.logit != f32::NEG_INFINITY {
                max = super::sort::cpp_max(max, t.logit);
                sum += t.logit;
                valid += 1;
            }
        }
        let mean = if valid > 0 { sum / valid as f32 } else { 0.0 };
        let mut acc = 0.0f32;
        for t in &cur.data {
            if t.logit != f32::NEG_INFINITY {
                let d = f64::from(t.logit - mean);
                acc = (f64::from(acc) + d * d) as f32;
            }
        }
        let std = if valid > 0 { (acc / valid as f32).sqrt() } else { 0.0 };
        let cut = max - self.n * std;
        for t in &mut cur.data {
            if t.logit < cut {
                t.logit = f32::NEG_INFINITY;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_below_n_sigma_and_ignores_masked_logits() {
        // mean 2, std 2 over the three finite values (0, 2, 4... with -inf ignored)
        let mut cur = Candidates::from_logits(&[0.0, 2.0, 4.0, f32::NEG_INFINITY]);
        let std = (8.0f32 / 3.0).sqrt();
        TopNSigma::new(1.0).unwrap().apply(&mut cur);
        let cut = 4.0 - std;
        for (t, l) in cur.data.iter().zip([0.0f32, 2.0, 4.0]) {
            assert_eq!(t.logit, if l < cut { f32::NEG_INFINITY } else { l });
        }
        assert_eq!(cur.data.len(), 4, "masks, never removes");
    }
}
