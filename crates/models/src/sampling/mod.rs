//! Token sampling: llama.cpp's sampler chain (`common/sampling.cpp` `common_sampler_init`
//! over `src/llama-sampler.cpp`), bit for bit.
//!
//! The chain is logit bias, then the samplers of [`SamplerParams::samplers`] in order
//! (default: penalties, DRY, top-n-sigma, top-k, typical, top-p, min-p, XTC, temperature),
//! then the draw (`dist`, or `adaptive_p` when it is in the list). Mirostat 1 or 2 replaces
//! the list with temperature + mirostat. A sampler whose settings disable it is left out,
//! as llama.cpp leaves an empty placeholder. Temperature ≤ 0 is not a separate path:
//! the temperature sampler keeps only the (first) largest logit and `dist` draws it.
//!
//! Each sampler is one module with llama.cpp's float arithmetic (float sums, `expf`,
//! double where llama.cpp uses double), its sorting (libstdc++'s `std::sort` /
//! `std::partial_sort` and llama.cpp's bucket sort, `sort`) and its randomness
//! (`std::mt19937` with libstdc++'s distributions, [`rng`]), so a seed draws the same
//! tokens as llama.cpp's. `cargo xtask verify sampling` compares with libllama.

mod adaptive_p;
mod dist;
mod dry;
mod logit_bias;
mod min_p;
mod mirostat;
mod penalties;
pub mod rng;
mod sort;
mod temperature;
mod top_k;
mod top_n_sigma;
mod top_p;
mod typical;
mod xtc;

pub use rng::DEFAULT_SEED;

/// One candidate token (`llama_token_data`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenData {
    /// Token id.
    pub id: u32,
    /// Its (modified) logit.
    pub logit: f32,
    /// Its probability, where a sampler computed one.
    pub p: f32,
}

/// The candidates a chain works on (`llama_token_data_array`): samplers reorder, truncate
/// and mask them; the last one selects.
#[derive(Debug, Clone, Default)]
pub struct Candidates {
    /// The candidates still in play.
    pub data: Vec<TokenData>,
    /// Index into `data` of the chosen token, once a selecting sampler ran.
    pub selected: Option<usize>,
    /// Whether `data` is sorted by descending logit (samplers skip sorting then).
    pub sorted: bool,
}

impl Candidates {
    /// Every token, in id order, with its logit.
    pub fn from_logits(logits: &[f32]) -> Candidates {
        let mut c = Candidates::default();
        c.fill(logits);
        c
    }

    fn fill(&mut self, logits: &[f32]) {
        self.data.clear();
        self.data.extend(logits.iter().enumerate().map(|(i, &logit)| TokenData { id: i as u32, logit, p: 0.0 }));
        self.selected = None;
        self.sorted = false;
    }
}

/// What DRY needs of the vocabulary to turn its sequence breakers into tokens.
pub trait SamplerVocab {
    /// Number of tokens.
    fn n_tokens(&self) -> usize;
    /// The text of one token as llama.cpp's `detokenize({id}, special = true)` gives it.
    fn piece(&self, id: u32) -> Vec<u8>;
    /// `tokenize(text, add_special = false, parse_special = false)`.
    fn tokenize(&self, text: &[u8]) -> Vec<u32>;
}

/// One configurable sampler of the chain (`common_sampler_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SamplerType {
    /// `penalties` (`e`).
    Penalties,
    /// `dry` (`d`).
    Dry,
    /// `top_n_sigma` (`s`).
    TopNSigma,
    /// `top_k` (`k`).
    TopK,
    /// `typ_p` (`y`).
    TypicalP,
    /// `top_p` (`p`).
    TopP,
    /// `min_p` (`m`).
    MinP,
    /// `xtc` (`x`).
    Xtc,
    /// `temperature` (`t`).
    Temperature,
    /// `adaptive_p` (`a`): replaces the final draw.
    AdaptiveP,
}

impl SamplerType {
    /// Every type, with llama.cpp's canonical name and letter.
    pub const ALL: [(SamplerType, &'static str, char); 10] = [
        (SamplerType::Dry, "dry", 'd'),
        (SamplerType::TopK, "top_k", 'k'),
        (SamplerType::TypicalP, "typ_p", 'y'),
        (SamplerType::TopP, "top_p", 'p'),
        (SamplerType::TopNSigma, "top_n_sigma", 's'),
        (SamplerType::MinP, "min_p", 'm'),
        (SamplerType::Temperature, "temperature", 't'),
        (SamplerType::Xtc, "xtc", 'x'),
        (SamplerType::Penalties, "penalties", 'e'),
        (SamplerType::AdaptiveP, "adaptive_p", 'a'),
    ];

    /// llama.cpp's canonical name (`common_sampler_type_to_str`).
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|e| e.0 == self).map_or("", |e| e.1)
    }

    /// llama.cpp's letter (`common_sampler_type_to_chr`).
    pub fn letter(self) -> char {
        Self::ALL.iter().find(|e| e.0 == self).map_or('?', |e| e.2)
    }

    /// One name as `common_sampler_types_from_names` reads it: case-insensitive, the
    /// canonical names, their kebab-case and no-underscore forms, and `nucleus`, `temp`,
    /// `typ`.
    pub fn from_name(name: &str) -> Option<SamplerType> {
        let n = name.to_ascii_lowercase();
        match n.as_str() {
            "nucleus" => return Some(SamplerType::TopP),
            "temp" => return Some(SamplerType::Temperature),
            "typ" => return Some(SamplerType::TypicalP),
            _ => {}
        }
        Self::ALL.iter().find_map(|&(t, canon, _)| {
            let aliases = canon.contains('_') && (n == canon.replace('_', "-") || n == canon.replace('_', ""));
            (n == canon || aliases).then_some(t)
        })
    }

    /// `--samplers` / a JSON string list: names separated by `;`. Returns the types and
    /// the names that matched none (llama.cpp warns about those and skips them).
    pub fn parse_names<'a>(names: impl IntoIterator<Item = &'a str>) -> (Vec<SamplerType>, Vec<String>) {
        let mut out = Vec::new();
        let mut unknown = Vec::new();
        for n in names {
            match SamplerType::from_name(n) {
                Some(t) => out.push(t),
                None => unknown.push(n.to_ascii_lowercase()),
            }
        }
        (out, unknown)
    }

    /// `--samplers "penalties;top_k;..."` (`string_split(value, ';')`).
    pub fn parse_list(s: &str) -> (Vec<SamplerType>, Vec<String>) {
        SamplerType::parse_names(s.split(';'))
    }

    /// `--sampling-seq "edskypmxt"` (`common_sampler_types_from_chars`): unknown letters
    /// are returned for a warning and skipped.
    pub fn parse_letters(s: &str) -> (Vec<SamplerType>, Vec<char>) {
        let mut out = Vec::new();
        let mut unknown = Vec::new();
        for c in s.chars() {
            match Self::ALL.iter().find(|e| e.2 == c) {
                Some(e) => out.push(e.0),
                None => unknown.push(c),
            }
        }
        (out, unknown)
    }
}

/// Sampler settings; [`Default`] is llama.cpp's `common_params_sampling`.
#[derive(Debug, Clone)]
pub struct SamplerParams {
    /// RNG seed; [`DEFAULT_SEED`] (`LLAMA_DEFAULT_SEED`) draws a random one per sampler.
    pub seed: u32,
    /// Least candidates top-p, min-p, typical and XTC leave (0 = no minimum).
    pub min_keep: usize,
    /// Temperature; ≤ 0 keeps only the most likely token.
    pub temp: f32,
    /// Dynamic temperature range (0 = off).
    pub dynatemp_range: f32,
    /// Dynamic temperature exponent.
    pub dynatemp_exponent: f32,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p (1 = all).
    pub top_p: f32,
    /// Drop tokens below `min_p × p_max` (0 = none).
    pub min_p: f32,
    /// Locally typical sampling p (1 = off).
    pub typical_p: f32,
    /// Top-n-sigma (≤ 0 = off).
    pub top_n_sigma: f32,
    /// XTC: chance of removing the top choices (0 = off).
    pub xtc_probability: f32,
    /// XTC: probability a top choice must have (> 0.5 = off).
    pub xtc_threshold: f32,
    /// Repetition penalty (1 = none).
    pub repeat_penalty: f32,
    /// Tokens of history the penalties look at (0 = off, `usize::MAX` = all).
    pub repeat_last_n: usize,
    /// Frequency penalty: `count × f` subtracted from each seen token's logit (0 = none).
    pub frequency_penalty: f32,
    /// Presence penalty: subtracted once from each seen token's logit (0 = none).
    pub presence_penalty: f32,
    /// DRY multiplier (0 = off).
    pub dry_multiplier: f32,
    /// DRY base (< 1 = off).
    pub dry_base: f32,
    /// DRY: repeats up to this long are not penalised.
    pub dry_allowed_length: i32,
    /// DRY: tokens of history scanned (0 = off).
    pub dry_penalty_last_n: usize,
    /// DRY sequence breakers.
    pub dry_sequence_breakers: Vec<String>,
    /// 0 = off, 1 = Mirostat, 2 = Mirostat 2.0.
    pub mirostat: u8,
    /// Mirostat target surprise (tau).
    pub mirostat_tau: f32,
    /// Mirostat learning rate (eta).
    pub mirostat_eta: f32,
    /// Adaptive-p target probability (negative = plain draw).
    pub adaptive_target: f32,
    /// Adaptive-p EMA decay (0 – 0.99).
    pub adaptive_decay: f32,
    /// Added to the logits of these tokens first (`-inf` bans one).
    pub logit_bias: Vec<(u32, f32)>,
    /// The samplers between logit bias and the draw, in order.
    pub samplers: Vec<SamplerType>,
}

impl SamplerParams {
    /// llama.cpp's default sampler order.
    pub const DEFAULT_SAMPLERS: [SamplerType; 9] = [
        SamplerType::Penalties,
        SamplerType::Dry,
        SamplerType::TopNSigma,
        SamplerType::TopK,
        SamplerType::TypicalP,
        SamplerType::TopP,
        SamplerType::MinP,
        SamplerType::Xtc,
        SamplerType::Temperature,
    ];

    /// llama.cpp's default DRY sequence breakers.
    pub fn default_dry_breakers() -> Vec<String> {
        ["\n", ":", "\"", "*"].iter().map(|s| s.to_string()).collect()
    }

    /// What `common_sampler_init` refuses: a repetition penalty that is not finite and
    /// positive (with a finite inverse), non-finite frequency or presence penalties, a
    /// Mirostat version other than 0, 1, 2.
    pub fn check(&self) -> Result<(), String> {
        let r = self.repeat_penalty;
        if !r.is_finite() || r <= 0.0 || !(1.0 / r).is_finite() {
            return Err("repeat penalty must be finite and greater than 0".into());
        }
        if !self.frequency_penalty.is_finite() {
            return Err("frequency penalty must be finite".into());
        }
        if !self.presence_penalty.is_finite() {
            return Err("presence penalty must be finite".into());
        }
        if self.mirostat > 2 {
            return Err(format!("unknown mirostat version {}", self.mirostat));
        }
        Ok(())
    }
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            seed: DEFAULT_SEED,
            min_keep: 0,
            temp: 0.8,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            top_n_sigma: -1.0,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: 64,
            dry_sequence_breakers: Self::default_dry_breakers(),
            mirostat: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
            adaptive_target: -1.0,
            adaptive_decay: 0.9,
            logit_bias: Vec::new(),
            samplers: Self::DEFAULT_SAMPLERS.to_vec(),
        }
    }
}

/// One sampler of the chain (`llama_sampler_i`: `apply` and `accept`).
pub(crate) trait Stage: Send {
    fn apply(&mut self, cur: &mut Candidates);
    fn accept(&mut self, _token: u32) {}
}

/// A stateful sampler chain.
pub struct Sampler {
    params: SamplerParams,
    chain: Vec<Box<dyn Stage>>,
    cur: Candidates,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").field("params", &self.params).field("stages", &self.chain.len()).finish()
    }
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

fn push<S: Stage + 'static>(chain: &mut Vec<Box<dyn Stage>>, s: Option<S>) {
    if let Some(s) = s {
        chain.push(Box::new(s));
    }
}

impl Sampler {
    /// A chain for `params` without a vocabulary: DRY then has no sequence breakers.
    pub fn new(params: SamplerParams) -> Sampler {
        Sampler::build(params, None)
    }

    /// A chain for `params`; DRY's sequence breakers are found in `vocab`, and Mirostat
    /// uses its size.
    pub fn with_vocab(params: SamplerParams, vocab: &dyn SamplerVocab) -> Sampler {
        Sampler::build(params, Some(vocab))
    }

    fn build(params: SamplerParams, vocab: Option<&dyn SamplerVocab>) -> Sampler {
        let p = &params;
        let mut chain: Vec<Box<dyn Stage>> = Vec::new();
        if !p.logit_bias.is_empty() {
            chain.push(Box::new(logit_bias::LogitBias::new(p.logit_bias.clone())));
        }
        let top_k = p.top_k.min(i32::MAX as usize) as i32;
        match p.mirostat {
            1 => {
                push(&mut chain, temperature::Temp::new(p.temp));
                let n_vocab = vocab.map(|v| v.n_tokens());
                push(&mut chain, Some(mirostat::Mirostat::new(n_vocab, p.seed, p.mirostat_tau, p.mirostat_eta, 100)));
            }
            2 => {
                push(&mut chain, temperature::Temp::new(p.temp));
                push(&mut chain, Some(mirostat::MirostatV2::new(p.seed, p.mirostat_tau, p.mirostat_eta)));
            }
            _ => {
                let mut adaptive = false;
                for &t in &p.samplers {
                    match t {
                        SamplerType::Dry => push(
                            &mut chain,
                            dry::Dry::new(
                                p.dry_multiplier,
                                p.dry_base,
                                p.dry_allowed_length,
                                p.dry_penalty_last_n,
                                &p.dry_sequence_breakers,
                                vocab,
                            ),
                        ),
                        SamplerType::TopK => push(&mut chain, top_k::TopK::new(top_k)),
                        SamplerType::TopP => push(&mut chain, top_p::TopP::new(p.top_p, p.min_keep)),
                        SamplerType::TopNSigma => push(&mut chain, top_n_sigma::TopNSigma::new(p.top_n_sigma)),
                        SamplerType::MinP => push(&mut chain, min_p::MinP::new(p.min_p, p.min_keep)),
                        SamplerType::Xtc => {
                            push(&mut chain, xtc::Xtc::new(p.xtc_probability, p.xtc_threshold, p.min_keep, p.seed))
                        }
                        SamplerType::TypicalP => push(&mut chain, typical::Typical::new(p.typical_p, p.min_keep)),
                        SamplerType::Temperature => {
                            push(&mut chain, temperature::TempExt::new(p.temp, p.dynatemp_range, p.dynatemp_exponent))
                        }
                        SamplerType::Penalties => push(
                            &mut chain,
                            penalties::Penalties::new(
                                p.repeat_last_n,
                                p.repeat_penalty,
                                p.frequency_penalty,
                                p.presence_penalty,
                            ),
                        ),
                        SamplerType::AdaptiveP => adaptive = true,
                    }
                }
                if adaptive {
                    chain.push(Box::new(adaptive_p::AdaptiveP::new(p.adaptive_target, p.adaptive_decay, p.seed)));
                } else {
                    chain.push(Box::new(dist::Dist::new(p.seed)));
                }
            }
        }
        Sampler { params, chain, cur: Candidates::default() }
    }

    /// The settings this chain was built from.
    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    /// Records a token (prompt or generated): penalties, DRY and adaptive-p history.
    pub fn accept(&mut self, token: u32) {
        for s in &mut self.chain {
            s.accept(token);
        }
    }

    /// Runs the chain over `cur` (`llama_sampler_apply`); `cur.selected` is the choice.
    pub fn apply(&mut self, cur: &mut Candidates) {
        for s in &mut self.chain {
            s.apply(cur);
        }
    }

    /// Picks the next token from `logits` (0 for an empty slice). Does not accept it.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let mut cur = std::mem::take(&mut self.cur);
        cur.fill(logits);
        self.apply(&mut cur);
        let id = match cur.selected {
            Some(i) if i < cur.data.len() => cur.data[i].id,
            _ => 0,
        };
        self.cur = cur;
        id
    }

    /// The candidates of the last [`Sampler::sample`], as the chain left them.
    pub fn candidates(&self) -> &Candidates {
        &self.cur
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn greedy_params() -> SamplerParams {
        SamplerParams { temp: 0.0, seed: 1, ..Default::default() }
    }

    #[test]
    fn zero_temperature_is_argmax() {
        let mut s = Sampler::new(greedy_params());
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
    fn the_chain_follows_the_sampler_list() {
        // only top_k: min-p and top-p are not in the chain, so the tail is reachable
        let params = SamplerParams {
            temp: 1.0,
            top_k: 3,
            min_p: 0.9,
            samplers: vec![SamplerType::TopK],
            seed: 2,
            ..Default::default()
        };
        let mut s = Sampler::new(params);
        let mut seen = [false; 4];
        for _ in 0..400 {
            seen[s.sample(&[3.0, 2.0, 1.0, 0.0]) as usize] = true;
        }
        assert_eq!(seen, [true, true, true, false]);
    }

    #[test]
    fn repetition_penalty_and_logit_bias_change_the_choice() {
        let mut s = Sampler::new(SamplerParams { repeat_penalty: 2.0, ..greedy_params() });
        s.accept(1);
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9]), 3);
        let mut s = Sampler::new(SamplerParams { logit_bias: vec![(1, f32::NEG_INFINITY)], ..greedy_params() });
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

    #[test]
    fn sampler_names_and_letters() {
        for (t, name, c) in SamplerType::ALL {
            assert_eq!(SamplerType::from_name(name), Some(t));
            assert_eq!(SamplerType::from_name(&name.to_uppercase()), Some(t));
            assert_eq!(SamplerType::parse_letters(&c.to_string()).0, [t]);
        }
        assert_eq!(SamplerType::from_name("top-k"), Some(SamplerType::TopK));
        assert_eq!(SamplerType::from_name("minp"), Some(SamplerType::MinP));
        assert_eq!(SamplerType::from_name("nucleus"), Some(SamplerType::TopP));
        assert_eq!(SamplerType::from_name("d-r-y"), None);
        let (list, unknown) = SamplerType::parse_list("penalties;bogus;TEMP");
        assert_eq!(list, [SamplerType::Penalties, SamplerType::Temperature]);
        assert_eq!(unknown, ["bogus"]);
        let default: String = SamplerParams::DEFAULT_SAMPLERS.iter().map(|t| t.letter()).collect();
        assert_eq!(default, "edskypmxt", "llama.cpp's default --sampling-seq");
        assert_eq!(SamplerType::parse_letters("kz").1, ['z']);
    }

    #[test]
    fn mirostat_replaces_the_list() {
        // top_k = 1 would make the choice certain; Mirostat ignores it
        let params =
            SamplerParams { mirostat: 2, mirostat_tau: 10.0, top_k: 1, temp: 1.0, seed: 3, ..Default::default() };
        let mut s = Sampler::new(params);
        let logits = [1.0f32; 8];
        let distinct: std::collections::HashSet<u32> = (0..100).map(|_| s.sample(&logits)).collect();
        assert!(distinct.len() > 2);
    }
}
