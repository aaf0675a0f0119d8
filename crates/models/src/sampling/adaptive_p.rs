//! `llama_sampler_adaptive_p`: selects tokens near a target probability. Each step maps
//! every candidate's probability distance from an adapted target (the target corrected by
//! an exponential moving average of the *original* probabilities of the tokens chosen so
//! far) to a logit `5 − 10·d²/(1 + d)` (`d = |p − target| / 0.3`) and draws from that.
//! A negative target draws from the distribution as it is.

use super::rng::{discrete, resolve_seed, Mt19937};
use super::{sort, Candidates, Stage};

const PEAK_LOGIT_VALUE: f32 = 5.0;
const SHARPNESS: f32 = 10.0;
const INV_WIDTH: f32 = 1.0 / 0.3;

pub(crate) struct AdaptiveP {
    target: f32,
    decay: f32,
    rng: Mt19937,
    weighted_sum: f32,
    total_weight: f32,
    original_probs: Vec<f32>,
    pending: Option<(u32, usize)>,
}

/// `std::clamp(v, lo, hi)`.
fn clamp(v: f32, lo: f32, hi: f32) -> f32 {
    if v < lo {
        lo
    } else if hi < v {
        hi
    } else {
        v
    }
}

impl AdaptiveP {
    pub(crate) fn new(target: f32, decay: f32, seed: u32) -> AdaptiveP {
        let decay = clamp(decay, 0.0, 0.99);
        AdaptiveP {
            target,
            decay,
            rng: Mt19937::new(resolve_seed(seed)),
            weighted_sum: target / (1.0 - decay),
            total_weight: 1.0 / (1.0 - decay),
            original_probs: Vec::new(),
            pending: None,
        }
    }
}

impl Stage for AdaptiveP {
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.data.is_empty() {
            cur.selected = None;
            return;
        }
        sort::softmax(cur, false);
        if self.target < 0.0 {
            cur.selected = Some(discrete(cur.data.iter().map(|t| t.p), &mut self.rng));
            return;
        }
        self.original_probs.clear();
        self.original_probs.extend(cur.data.iter().map(|t| t.p));
        let target = clamp(self.target, 0.0, 1.0);
        let adapted = clamp(
            if self.total_weight == 0.0 { target } else { 2.0 * target - self.weighted_sum / self.total_weight },
            0.0,
            1.0,
        );
        for t in &mut cur.data {
            if t.logit == f32::NEG_INFINITY {
                continue;
            }
            let dist = ((t.p - adapted) * INV_WIDTH).abs();
            t.logit = PEAK_LOGIT_VALUE - SHARPNESS * dist * dist / (1.0 + dist);
        }
        sort::softmax(cur, false);
        let idx = discrete(cur.data.iter().map(|t| t.p), &mut self.rng);
        cur.selected = Some(idx);
        self.pending = Some((cur.data[idx].id, idx));
    }

    fn accept(&mut self, token: u32) {
        if let Some((id, idx)) = self.pending {
            if id == token {
                self.weighted_sum = self.original_probs[idx] + self.decay * self.weighted_sum;
                self.total_weight = 1.0 + self.decay * self.total_weight;
            }
        }
        self.pending = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_tokens_near_the_target_probability() {
        // probabilities ≈ 0.6, 0.3, 0.1 (and a masked token)
        let l = [0.6f32.ln(), 0.3f32.ln(), 0.1f32.ln(), f32::NEG_INFINITY];
        let mut s = AdaptiveP::new(0.3, 0.0, 4);
        let mut counts = [0usize; 4];
        for _ in 0..3000 {
            let mut cur = Candidates::from_logits(&l);
            s.apply(&mut cur);
            let id = cur.data[cur.selected.unwrap()].id;
            s.accept(id);
            counts[id as usize] += 1;
        }
        assert_eq!(counts[3], 0);
        assert!(counts[1] > counts[0] && counts[1] > counts[2], "{counts:?}");
    }
}
