//! `llama_sampler_dist`: the final draw. Softmax in float with the sum in double, one
//! `uniform_real_distribution<double>` draw from its mt19937, the first candidate whose
//! running sum reaches `sum × r` is selected; the probabilities are normalised on the way.
//! A single candidate still consumes a draw (llama.cpp keeps the RNG aligned that way).

use super::rng::{canonical_f64, Mt19937};
use super::{sort, Candidates, Stage};

pub(crate) struct Dist {
    rng: Mt19937,
}

impl Dist {
    pub(crate) fn new(seed: u32) -> Dist {
        Dist { rng: Mt19937::new(super::rng::resolve_seed(seed)) }
    }
}

impl Stage for Dist {
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.data.is_empty() {
            cur.selected = None;
            return;
        }
        cur.selected = Some(0);
        if cur.data.len() == 1 {
            canonical_f64(&mut self.rng);
            cur.data[0].p = 1.0;
            return;
        }
        let mut max_l = cur.data[0].logit;
        if !cur.sorted {
            for t in &cur.data[1..] {
                max_l = sort::cpp_max(max_l, t.logit);
            }
        }
        let mut sum_cum = 0.0f64;
        for t in &mut cur.data {
            let p = (t.logit - max_l).exp();
            t.p = p;
            sum_cum += f64::from(p);
        }
        let rnd = canonical_f64(&mut self.rng);
        let mut sum_run = 0.0f64;
        let sum_tgt = sum_cum * rnd;
        let mut found = false;
        for (i, t) in cur.data.iter_mut().enumerate() {
            if !found {
                sum_run += f64::from(t.p);
                if sum_run >= sum_tgt {
                    cur.selected = Some(i);
                    found = true;
                }
            }
            t.p = (f64::from(t.p) / sum_cum) as f32;
        }
        if !found {
            cur.selected = Some(cur.data.len() - 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_follow_the_softmax_and_the_seed() {
        let l = [0.0f32, 1.0f32.ln(), 2.0f32.ln(), f32::NEG_INFINITY];
        let mut counts = [0usize; 4];
        let mut s = Dist::new(3);
        for _ in 0..40_000 {
            let mut cur = Candidates::from_logits(&l);
            s.apply(&mut cur);
            counts[cur.data[cur.selected.unwrap()].id as usize] += 1;
            assert!((cur.data.iter().map(|t| t.p).sum::<f32>() - 1.0).abs() < 1e-6);
        }
        assert_eq!(counts[3], 0, "-inf is never drawn");
        let r = counts[2] as f64 / counts[1] as f64;
        assert!((1.85..2.15).contains(&r), "{counts:?}");
        let draw = |seed| {
            let mut s = Dist::new(seed);
            (0..32)
                .map(|_| {
                    let mut cur = Candidates::from_logits(&l);
                    s.apply(&mut cur);
                    cur.selected.unwrap()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }
}
