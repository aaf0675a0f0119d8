//! Mirostat: `llama_sampler_mirostat` (v1: estimates the Zipf exponent `s` from the top
//! `m` probabilities and derives a top-k that targets surprise `mu`) and
//! `llama_sampler_mirostat_v2` (drops candidates more surprising than `mu`). Both draw with
//! `std::discrete_distribution` and move `mu` by `eta × (observed surprise − tau)`.

use super::rng::{discrete, resolve_seed, Mt19937};
use super::{sort, Candidates, Stage};

pub(crate) struct Mirostat {
    n_vocab: Option<usize>,
    tau: f32,
    eta: f32,
    m: i32,
    mu: f32,
    rng: Mt19937,
}

impl Mirostat {
    /// `n_vocab`: the vocabulary size (`None`: the first candidate count seen).
    pub(crate) fn new(n_vocab: Option<usize>, seed: u32, tau: f32, eta: f32, m: i32) -> Mirostat {
        Mirostat { n_vocab, tau, eta, m, mu: 2.0 * tau, rng: Mt19937::new(resolve_seed(seed)) }
    }
}

/// `powf` with a constant base that LLVM may not rewrite (`pow(2, x)` → `exp2(x)` can
/// differ from glibc's `powf` in the last bit).
fn powf_opaque(base: f32, e: f32) -> f32 {
    std::hint::black_box(base).powf(e)
}

fn draw(cur: &mut Candidates, rng: &mut Mt19937) -> usize {
    let idx = discrete(cur.data.iter().map(|t| t.p), rng);
    cur.selected = Some(idx);
    idx
}

impl Stage for Mirostat {
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.data.is_empty() {
            cur.selected = None;
            return;
        }
        let n_vocab = *self.n_vocab.get_or_insert(cur.data.len());
        sort::softmax(cur, true);
        let mut sum_ti_bi = 0.0f32;
        let mut sum_ti_sq = 0.0f32;
        let lim = (self.m - 1).max(0) as usize;
        let mut i = 0;
        while i < lim && i < cur.data.len() - 1 {
            let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
            let b_i = (cur.data[i].p / cur.data[i + 1].p).ln();
            sum_ti_bi += t_i * b_i;
            sum_ti_sq += t_i * t_i;
            i += 1;
        }
        let s_hat = sum_ti_bi / sum_ti_sq;
        let epsilon_hat = s_hat - 1.0;
        let k = ((epsilon_hat * powf_opaque(2.0, self.mu)) / (1.0 - (n_vocab as i32 as f32).powf(-epsilon_hat)))
            .powf(1.0 / s_hat);
        sort::top_k(cur, sort::c_int(k).max(1));
        sort::softmax(cur, true);
        let idx = draw(cur, &mut self.rng);
        let observed = -cur.data[idx].p.log2();
        self.mu -= self.eta * (observed - self.tau);
    }
}

pub(crate) struct MirostatV2 {
    tau: f32,
    eta: f32,
    mu: f32,
    rng: Mt19937,
}

impl MirostatV2 {
    pub(crate) fn new(seed: u32, tau: f32, eta: f32) -> MirostatV2 {
        MirostatV2 { tau, eta, mu: 2.0 * tau, rng: Mt19937::new(resolve_seed(seed)) }
    }
}

impl Stage for MirostatV2 {
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.data.is_empty() {
            cur.selected = None;
            return;
        }
        sort::softmax(cur, true);
        let keep = cur.data.iter().position(|t| -t.p.log2() > self.mu).unwrap_or(cur.data.len());
        cur.data.truncate(keep.max(1));
        sort::softmax(cur, true);
        let idx = draw(cur, &mut self.rng);
        let observed = -cur.data[idx].p.log2();
        self.mu -= self.eta * (observed - self.tau);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zipf(n: usize) -> Vec<f32> {
        (1..=n).map(|r| -(r as f32).ln()).collect()
    }

    #[test]
    fn mirostat_v2_never_keeps_tokens_above_the_surprise_limit() {
        let l = zipf(500);
        let mut s = MirostatV2::new(9, 3.0, 0.1);
        for _ in 0..50 {
            let mu = s.mu;
            let mut cur = Candidates::from_logits(&l);
            s.apply(&mut cur);
            let sel = cur.selected.unwrap();
            assert!(sel < cur.data.len());
            // everything kept (but a forced single token) had surprise ≤ mu before renormalising
            let total: f32 = l.iter().map(|x| x.exp()).sum();
            if cur.data.len() > 1 {
                let last = cur.data.last().unwrap();
                assert!(-(last.logit.exp() / total).log2() <= mu + 1e-3);
            }
        }
    }

    #[test]
    fn mirostat_moves_mu_towards_the_target() {
        let l = zipf(2000);
        let mut s = Mirostat::new(None, 9, 5.0, 0.1, 100);
        let mut surprises = Vec::new();
        for _ in 0..400 {
            let mut cur = Candidates::from_logits(&l);
            s.apply(&mut cur);
            let id = cur.data[cur.selected.unwrap()].id as usize;
            let total: f32 = l.iter().map(|x| x.exp()).sum();
            surprises.push(-(l[id].exp() / total).log2());
        }
        let mean = surprises[100..].iter().sum::<f32>() / 300.0;
        assert!((mean - 5.0).abs() < 1.0, "mean surprise {mean}");
    }
}
