//! Token sampling, in llama.cpp's default chain order: logit bias → penalties
//! (repetition, frequency, presence) → top-k → top-p → min-p → temperature → draw.
//! Temperature ≤ 0 is greedy (argmax after bias and penalties).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Sampler settings (llama.cpp defaults).
#[derive(Debug, Clone)]
pub struct SamplerParams {
    /// Temperature; ≤ 0 means greedy.
    pub temp: f32,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p (1 = all).
    pub top_p: f32,
    /// Drop tokens below `min_p × p_max` (0 = none).
    pub min_p: f32,
    /// Repetition penalty (1 = none).
    pub repeat_penalty: f32,
    /// Tokens of history the penalties look at.
    pub repeat_last_n: usize,
    /// Frequency penalty: `count × f` subtracted from each seen token's logit (0 = none).
    pub frequency_penalty: f32,
    /// Presence penalty: subtracted once from each seen token's logit (0 = none).
    pub presence_penalty: f32,
    /// Added to the logits of these tokens first (`-inf` bans one).
    pub logit_bias: Vec<(u32, f32)>,
    /// RNG seed.
    pub seed: u64,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temp: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0,
        }
    }
}

/// A stateful sampler.
pub struct Sampler {
    params: SamplerParams,
    rng: StdRng,
    history: Vec<u32>,
    cand: Vec<(u32, f32)>,
}

/// Index of the largest logit (lowest index on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    /// A sampler with `params`.
    pub fn new(params: SamplerParams) -> Sampler {
        let rng = StdRng::seed_from_u64(params.seed);
        Sampler { params, rng, history: Vec::new(), cand: Vec::new() }
    }

    /// Records a token (prompt or generated) for the repetition penalty.
    pub fn accept(&mut self, token: u32) {
        self.history.push(token);
    }

    /// Picks the next token from `logits` (0 for an empty slice).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let p = &self.params;
        let mut owned;
        let mut logits = logits;
        let penalize =
            (p.repeat_penalty != 1.0 || p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) && p.repeat_last_n > 0;
        if penalize || !p.logit_bias.is_empty() {
            owned = logits.to_vec();
            for &(t, b) in &p.logit_bias {
                if let Some(l) = owned.get_mut(t as usize) {
                    *l += b;
                }
            }
            if penalize {
                // llama_sampler_penalties: counts over the last `repeat_last_n` tokens
                let start = self.history.len().saturating_sub(p.repeat_last_n);
                let mut counts: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
                for &t in &self.history[start..] {
                    *counts.entry(t).or_default() += 1;
                }
                for (&t, &c) in &counts {
                    let Some(l) = owned.get_mut(t as usize) else { continue };
                    *l = if *l <= 0.0 { *l * p.repeat_penalty } else { *l / p.repeat_penalty };
                    *l -= c as f32 * p.frequency_penalty + p.presence_penalty;
                }
            }
            logits = &owned;
        }
        if p.temp <= 0.0 || logits.is_empty() {
            // an empty row (no token evaluated) gives 0 as `argmax` does, not a panic
            return argmax(logits);
        }
        let cand = &mut self.cand;
        cand.clear();
        cand.extend(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)));
        let k = if p.top_k == 0 { cand.len() } else { p.top_k.min(cand.len()) };
        if k < cand.len() {
            cand.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
            cand.truncate(k);
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        // Probabilities at temperature 1 for the truncations.
        let max = cand[0].1;
        let mut probs: Vec<f32> = cand.iter().map(|c| (c.1 - max).exp()).collect();
        let sum: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= sum);
        let mut keep = cand.len();
        if p.top_p < 1.0 {
            let mut cum = 0.0;
            for (i, &pr) in probs.iter().enumerate() {
                cum += pr;
                if cum >= p.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        if p.min_p > 0.0 {
            let thr = p.min_p * probs[0];
            keep = keep.min(probs.iter().take_while(|&&pr| pr >= thr).count().max(1));
        }
        cand.truncate(keep);
        // Temperature, then draw.
        let w: Vec<f32> = cand.iter().map(|c| ((c.1 - max) / p.temp).exp()).collect();
        let total: f32 = w.iter().sum();
        let mut r = self.rng.gen::<f32>() * total;
        for (c, wi) in cand.iter().zip(&w) {
            if r < *wi {
                return c.0;
            }
            r -= wi;
        }
        cand[cand.len() - 1].0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_is_argmax() {
        let mut s = Sampler::new(SamplerParams { temp: 0.0, ..Default::default() });
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9]), 1);
    }

    #[test]
    fn top_k_one_is_greedy_at_any_temperature() {
        let mut s = Sampler::new(SamplerParams { temp: 5.0, top_k: 1, seed: 7, ..Default::default() });
        for _ in 0..50 {
            assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9]), 1);
        }
    }

    #[test]
    fn min_p_cuts_the_tail() {
        let mut s =
            Sampler::new(SamplerParams { temp: 1.0, top_k: 0, top_p: 1.0, min_p: 0.5, seed: 1, ..Default::default() });
        let logits = [5.0, 4.9, -10.0, -10.0, -10.0];
        for _ in 0..200 {
            assert!(s.sample(&logits) < 2);
        }
    }

    #[test]
    fn repetition_penalty_changes_the_choice() {
        let mut s = Sampler::new(SamplerParams { temp: 0.0, repeat_penalty: 2.0, ..Default::default() });
        s.accept(1);
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9]), 3);
    }

    #[test]
    fn frequency_and_presence_penalties_and_logit_bias() {
        let mut s = Sampler::new(SamplerParams { temp: 0.0, frequency_penalty: 0.1, ..Default::default() });
        s.accept(1);
        s.accept(1);
        // 3.0 - 2 × 0.1 = 2.8 < 2.9
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9]), 3);
        let mut s = Sampler::new(SamplerParams { temp: 0.0, presence_penalty: 0.05, ..Default::default() });
        s.accept(1);
        s.accept(1);
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9]), 1);
        let mut s =
            Sampler::new(SamplerParams { temp: 0.0, logit_bias: vec![(1, f32::NEG_INFINITY)], ..Default::default() });
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9]), 3);
    }

    #[test]
    fn same_seed_same_draws() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 17) as f32 / 5.0).collect();
        let draws = |seed| {
            let mut s = Sampler::new(SamplerParams { seed, top_k: 0, top_p: 1.0, min_p: 0.0, ..Default::default() });
            (0..20).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draws(3), draws(3));
        assert_ne!(draws(3), draws(4));
    }
}
