//! `llama_sampler_logit_bias`: adds a bias to chosen tokens' logits (`-inf` bans one).
//!
//! Candidates still at their vocabulary index (`data[id].id == id`) are updated in place;
//! the rest are searched for, the first matching bias applying once per candidate.

use super::{Candidates, Stage};

pub(crate) struct LogitBias {
    biases: Vec<(u32, f32)>,
    to_search: Vec<(u32, f32)>,
}

impl LogitBias {
    pub(crate) fn new(biases: Vec<(u32, f32)>) -> LogitBias {
        LogitBias { biases, to_search: Vec::new() }
    }
}

impl Stage for LogitBias {
    fn apply(&mut self, cur: &mut Candidates) {
        if self.biases.is_empty() {
            return;
        }
        self.to_search.clear();
        for &(tok, bias) in &self.biases {
            match cur.data.get_mut(tok as usize) {
                Some(t) if t.id == tok => t.logit += bias,
                _ => self.to_search.push((tok, bias)),
            }
        }
        if self.to_search.is_empty() {
            return;
        }
        for t in &mut cur.data {
            if let Some(&(_, bias)) = self.to_search.iter().find(|lb| lb.0 == t.id) {
                t.logit += bias;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn biases_reach_moved_and_unmoved_candidates() {
        let mut cur = Candidates::from_logits(&[1.0, 2.0, 3.0, 4.0]);
        let mut s = LogitBias::new(vec![(1, 10.0), (3, f32::NEG_INFINITY), (1, 1.0)]);
        s.apply(&mut cur);
        assert_eq!(cur.data[1].logit, 13.0, "both biases of token 1 apply in place");
        assert_eq!(cur.data[3].logit, f32::NEG_INFINITY);
        // once the candidates are reordered, tokens are found by id
        let mut cur = Candidates::from_logits(&[1.0, 2.0, 3.0, 4.0]);
        cur.data.reverse();
        LogitBias::new(vec![(0, 5.0), (9, 1.0)]).apply(&mut cur);
        assert_eq!(cur.data[3].id, 0);
        assert_eq!(cur.data[3].logit, 6.0);
        assert_eq!(cur.data.iter().map(|t| t.logit).sum::<f32>(), 15.0);
    }
}
