//! Temperature: `llama_sampler_temp` (divide the logits; ≤ 0 keeps only the first largest)
//! and `llama_sampler_temp_ext` (dynamic temperature: with `delta > 0` the temperature
//! moves within `[temp - delta, temp + delta]` with the normalised entropy raised to
//! `exponent`, and the probabilities are recomputed in double).

use super::{sort, Candidates, Stage};

pub(crate) struct Temp {
    temp: f32,
}

impl Temp {
    /// `None` for `temp == 1`.
    pub(crate) fn new(temp: f32) -> Option<Temp> {
        (temp != 1.0).then_some(Temp { temp })
    }
}

impl Stage for Temp {
    fn apply(&mut self, cur: &mut Candidates) {
        sort::temp(cur, self.temp);
    }
}

pub(crate) struct TempExt {
    temp: f32,
    delta: f32,
    exponent: f32,
}

impl TempExt {
    /// `None` for `temp == 1` without a range.
    pub(crate) fn new(temp: f32, delta: f32, exponent: f32) -> Option<TempExt> {
        (!(temp == 1.0 && delta <= 0.0)).then_some(TempExt { temp, delta, exponent })
    }
}

impl Stage for TempExt {
    fn apply(&mut self, cur: &mut Candidates) {
        if self.delta <= 0.0 {
            sort::temp(cur, self.temp);
            return;
        }
        let min_temp = sort::cpp_max(0.0, self.temp - self.delta);
        let max_temp = self.temp + self.delta;
        if cur.data.len() <= 1 {
            return;
        }
        let max_entropy = -(1.0f32 / cur.data.len() as f32).ln();
        sort::softmax(cur, true);
        let mut entropy = 0.0f32;
        for t in &cur.data {
            if t.p > 0.0 {
                entropy -= t.p * t.p.ln();
            }
        }
        let normalized = entropy / max_entropy;
        let dyn_temp = min_temp + (max_temp - min_temp) * normalized.powf(self.exponent);
        sort::temp(cur, dyn_temp);
        let max_l = f64::from(cur.data[0].logit);
        let mut cum = 0.0f64;
        for t in &mut cur.data {
            let p = (f64::from(t.logit) - max_l).exp();
            t.p = p as f32;
            cum += p;
        }
        for t in &mut cur.data {
            t.p = (f64::from(t.p) / cum) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_temperature_keeps_the_first_maximum() {
        let mut cur = Candidates::from_logits(&[1.0, 3.0, 3.0, 2.0]);
        Temp::new(0.0).unwrap().apply(&mut cur);
        let l: Vec<f32> = cur.data.iter().map(|t| t.logit).collect();
        assert_eq!(l, [f32::NEG_INFINITY, 3.0, f32::NEG_INFINITY, f32::NEG_INFINITY]);
        assert!(Temp::new(1.0).is_none());
    }

    #[test]
    fn dynamic_temperature_spans_its_range_with_the_entropy() {
        // flat distribution: normalised entropy 1 → max temperature (temp + delta)
        let mut cur = Candidates::from_logits(&[1.0; 8]);
        TempExt::new(1.0, 0.5, 1.0).unwrap().apply(&mut cur);
        assert!(cur.data.iter().all(|t| (t.logit - 1.0 / 1.5).abs() < 1e-5));
        assert!(cur.data.iter().all(|t| (t.p - 0.125).abs() < 1e-7));
        // one certain token: entropy 0 → min temperature; the others stay far below
        let mut cur = Candidates::from_logits(&[100.0, 0.0, 0.0]);
        TempExt::new(1.0, 0.5, 1.0).unwrap().apply(&mut cur);
        assert_eq!(cur.data[0].logit, 200.0);
        assert!(TempExt::new(1.0, 0.0, 1.0).is_none());
        assert!(TempExt::new(0.7, 0.0, 1.0).is_some());
    }
}
