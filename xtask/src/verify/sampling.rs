//! `cargo xtask verify sampling`: our sampler chain (`models::sampling`) against
//! libllama's, sampler by sampler and in random chains.
//!
//! Each case builds the same chain on both sides from one `SamplerParams` (libllama's the
//! way `common_sampler_init` builds it: logit bias, the listed samplers, dist or
//! adaptive-p, or temperature + Mirostat), feeds the same accepted history, then runs a
//! few steps: random logits (2 to ~50k of them; normal, flat, tied, peaked, with `-inf`
//! entries) through `llama_sampler_apply`, both sides accepting the token libllama chose.
//! A step matches when the chosen token, and the whole candidate array the chain leaves
//! (ids, logit and probability bits, order, size, selected index, sorted flag), are equal.
//! DRY with sequence breakers runs over a real vocabulary (a vocab-only GGUF from the
//! cache), its pieces and tokenizer taken from libllama so only the sampler is compared.

use std::path::Path;

use anyhow::{Context as _, Result};
use gguf_cli::sampling::engine::{Candidates, Sampler, SamplerParams, SamplerType, SamplerVocab};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Check, Report};
use crate::llama::{Applied, Llama, Model, SamplerSpec};
use crate::llama_cpp;

const GROUP: &str = "sampling vs libllama";

/// Options of `verify sampling`.
pub struct SampOpts {
    /// Fewer cases (a few seconds).
    pub quick: bool,
    /// Seed of the case generator.
    pub seed: u64,
}

/// The chain `common_sampler_init` builds for `p` (without grammar, reasoning budget or
/// the vocabulary's suppress tokens).
fn llama_specs(p: &SamplerParams, n_vocab: i32) -> Vec<SamplerSpec> {
    let mut v = Vec::new();
    if !p.logit_bias.is_empty() {
        v.push(SamplerSpec::LogitBias(n_vocab, p.logit_bias.iter().map(|&(t, b)| (t as i32, b)).collect()));
    }
    match p.mirostat {
        1 => {
            v.push(SamplerSpec::Temp(p.temp));
            v.push(SamplerSpec::Mirostat(n_vocab, p.seed, p.mirostat_tau, p.mirostat_eta, 100));
        }
        2 => {
            v.push(SamplerSpec::Temp(p.temp));
            v.push(SamplerSpec::MirostatV2(p.seed, p.mirostat_tau, p.mirostat_eta));
        }
        _ => {
            let mut adaptive = false;
            for t in &p.samplers {
                v.push(match t {
                    SamplerType::Dry => SamplerSpec::Dry(
                        p.dry_multiplier,
                        p.dry_base,
                        p.dry_allowed_length,
                        p.dry_penalty_last_n as i32,
                        p.dry_sequence_breakers.clone(),
                    ),
                    SamplerType::TopK => SamplerSpec::TopK(p.top_k as i32),
                    SamplerType::TopP => SamplerSpec::TopP(p.top_p, p.min_keep),
                    SamplerType::TopNSigma => SamplerSpec::TopNSigma(p.top_n_sigma),
                    SamplerType::MinP => SamplerSpec::MinP(p.min_p, p.min_keep),
                    SamplerType::Xtc => SamplerSpec::Xtc(p.xtc_probability, p.xtc_threshold, p.min_keep, p.seed),
                    SamplerType::TypicalP => SamplerSpec::Typical(p.typical_p, p.min_keep),
                    SamplerType::Temperature => SamplerSpec::TempExt(p.temp, p.dynatemp_range, p.dynatemp_exponent),
                    SamplerType::Penalties => SamplerSpec::Penalties(
                        n_vocab,
                        p.repeat_last_n as i32,
                        p.repeat_penalty,
                        p.frequency_penalty,
                        p.presence_penalty,
                    ),
                    SamplerType::AdaptiveP => {
                        adaptive = true;
                        continue;
                    }
                });
            }
            v.push(if adaptive {
                SamplerSpec::AdaptiveP(p.adaptive_target, p.adaptive_decay, p.seed)
            } else {
                SamplerSpec::Dist(p.seed)
            });
        }
    }
    v
}

/// libllama's pieces and tokenizer, for DRY's breakers.
struct LlamaPieces {
    pieces: Vec<Vec<u8>>,
    tokens: std::cell::RefCell<std::collections::HashMap<Vec<u8>, Vec<u32>>>,
}

struct VocabRef<'a, 'b> {
    lp: &'a LlamaPieces,
    model: &'a Model<'b>,
}

impl SamplerVocab for VocabRef<'_, '_> {
    fn n_tokens(&self) -> usize {
        self.lp.pieces.len()
    }
    fn piece(&self, id: u32) -> Vec<u8> {
        self.lp.pieces[id as usize].clone()
    }
    fn tokenize(&self, text: &[u8]) -> Vec<u32> {
        let mut cache = self.lp.tokens.borrow_mut();
        cache
            .entry(text.to_vec())
            .or_insert_with(|| {
                self.model
                    .tokenize_bytes(text, false, false)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|t| t as u32)
                    .collect()
            })
            .clone()
    }
}

/// Random logits of one of several shapes.
fn logits(rng: &mut StdRng, n: usize) -> Vec<f32> {
    let shape = rng.gen_range(0..6);
    let scale: f32 = rng.gen_range(0.3..12.0);
    let mut v: Vec<f32> = match shape {
        // normal-ish
        0 | 1 => (0..n).map(|_| (rng.gen::<f32>() + rng.gen::<f32>() + rng.gen::<f32>() - 1.5) * scale).collect(),
        // flat: every token tied
        2 => vec![rng.gen_range(-3.0..3.0); n],
        // few distinct values: many ties
        3 => {
            let levels = rng.gen_range(1..6);
            (0..n).map(|_| rng.gen_range(0..levels) as f32 * 0.75 - 1.0).collect()
        }
        // peaked: one or a few far above the rest
        4 => {
            let mut v: Vec<f32> = (0..n).map(|_| rng.gen::<f32>() * 2.0).collect();
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..n);
                v[i] = rng.gen_range(10.0..40.0);
            }
            v
        }
        // wide uniform, outside the bucket sort's [-10, 10] range too
        _ => (0..n).map(|_| rng.gen_range(-30.0..30.0)).collect(),
    };
    if rng.gen_bool(0.3) {
        let frac: f64 = rng.gen_range(0.0..0.5);
        let keep = rng.gen_range(0..n);
        for (i, x) in v.iter_mut().enumerate() {
            if i != keep && rng.gen_bool(frac) {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    v
}

fn vocab_size(rng: &mut StdRng, quick: bool) -> usize {
    const SIZES: [usize; 16] = [2, 3, 5, 16, 17, 100, 128, 129, 300, 1024, 1025, 2000, 4096, 10_000, 32_000, 50_257];
    let max = if quick { 12 } else { SIZES.len() };
    SIZES[rng.gen_range(0..max)]
}

/// Which sampler(s) a case exercises.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Alone(SamplerType),
    Default,
    Random,
    Greedy,
    Mirostat(u8),
    DryVocab,
}

impl Kind {
    fn label(self) -> String {
        match self {
            Kind::Alone(t) => format!("{} alone", t.name()),
            Kind::Default => "default chain".into(),
            Kind::Random => "random chains".into(),
            Kind::Greedy => "temp 0 (greedy)".into(),
            Kind::Mirostat(v) => format!("mirostat v{v}"),
            Kind::DryVocab => "dry + breakers (vocab)".into(),
        }
    }
}

fn random_params(rng: &mut StdRng, kind: Kind, n: usize) -> SamplerParams {
    let mut p = SamplerParams { seed: rng.gen_range(0..u32::MAX), ..Default::default() };
    let small = |rng: &mut StdRng, hi: usize| rng.gen_range(0..=hi);
    p.min_keep = if rng.gen_bool(0.5) { 0 } else { small(rng, 6) };
    p.temp = match rng.gen_range(0..5) {
        0 => 0.0,
        1 => 1.0,
        _ => rng.gen_range(0.05..2.5),
    };
    p.dynatemp_range = if rng.gen_bool(0.5) { 0.0 } else { rng.gen_range(0.0..1.5) };
    p.dynatemp_exponent = rng.gen_range(0.25..3.0);
    p.top_k = match rng.gen_range(0..4) {
        0 => 0,
        1 => small(rng, 8),
        2 => rng.gen_range(1..=n + 5),
        _ => rng.gen_range(100..=400),
    };
    p.top_p = if rng.gen_bool(0.2) { 1.0 } else { rng.gen_range(0.05..1.0) };
    p.min_p = if rng.gen_bool(0.2) { 0.0 } else { rng.gen_range(0.0..0.6) };
    p.typical_p = if rng.gen_bool(0.2) { 1.0 } else { rng.gen_range(0.1..1.0) };
    p.top_n_sigma = if rng.gen_bool(0.3) { -1.0 } else { rng.gen_range(0.0..4.0) };
    p.xtc_probability = if rng.gen_bool(0.3) { 0.0 } else { rng.gen_range(0.0..1.0) };
    p.xtc_threshold = rng.gen_range(0.0..0.6);
    p.repeat_last_n = small(rng, 64);
    p.repeat_penalty = if rng.gen_bool(0.2) { 1.0 } else { rng.gen_range(0.5..2.0) };
    p.frequency_penalty = if rng.gen_bool(0.3) { 0.0 } else { rng.gen_range(-1.0..1.0) };
    p.presence_penalty = if rng.gen_bool(0.3) { 0.0 } else { rng.gen_range(-1.0..1.0) };
    p.dry_multiplier = if rng.gen_bool(0.2) { 0.0 } else { rng.gen_range(0.0..3.0) };
    p.dry_base = rng.gen_range(0.9..3.0);
    p.dry_allowed_length = rng.gen_range(0..5);
    p.dry_penalty_last_n = small(rng, 64);
    p.dry_sequence_breakers = Vec::new();
    p.mirostat_tau = rng.gen_range(0.5..10.0);
    p.mirostat_eta = rng.gen_range(0.01..0.5);
    p.adaptive_target = if rng.gen_bool(0.25) { -1.0 } else { rng.gen_range(0.0..1.0) };
    p.adaptive_decay = rng.gen_range(0.0..1.0);
    if rng.gen_bool(0.4) {
        for _ in 0..rng.gen_range(1..6) {
            let t = rng.gen_range(0..n + 2) as u32;
            let b = if rng.gen_bool(0.3) { f32::NEG_INFINITY } else { rng.gen_range(-5.0..5.0) };
            p.logit_bias.push((t, b));
        }
    }
    match kind {
        Kind::Alone(t) => p.samplers = vec![t],
        Kind::Default => {}
        Kind::Greedy => p.temp = if rng.gen_bool(0.5) { 0.0 } else { -rng.gen_range(0.0..1.0) },
        Kind::Random => {
            let all = SamplerType::ALL;
            p.samplers = (0..rng.gen_range(0..8)).map(|_| all[rng.gen_range(0..all.len())].0).collect();
        }
        Kind::Mirostat(v) => p.mirostat = v,
        Kind::DryVocab => {
            p.dry_multiplier = rng.gen_range(0.2..3.0);
            p.dry_base = rng.gen_range(1.0..3.0);
            p.dry_penalty_last_n = rng.gen_range(1..64);
            p.dry_sequence_breakers = match rng.gen_range(0..3) {
                0 => SamplerParams::default_dry_breakers(),
                1 => vec![
                    "\n".into(),
                    "the".into(),
                    " and".into(),
                    "é".into(),
                    "a very long breaker of more than forty bytes!".into(),
                ],
                _ => vec![",".into(), "ing".into(), ".\n".into()],
            };
            if rng.gen_bool(0.5) {
                p.samplers = vec![SamplerType::Dry];
            }
        }
    }
    p
}

/// Compares one step; `None` when equal, else what differed.
fn compare(ours: &Candidates, theirs: &Applied) -> Option<String> {
    let their_sel = if theirs.selected < 0 { None } else { Some(theirs.selected as usize) };
    if ours.selected != their_sel {
        let id = |d: &[_], s: Option<usize>| s.and_then(|i: usize| d.get(i).copied());
        let a = id(&ours.data.iter().map(|t| t.id as i64).collect::<Vec<_>>(), ours.selected);
        let b = id(&theirs.data.iter().map(|t| t.id as i64).collect::<Vec<_>>(), their_sel);
        return Some(format!("selected {:?} (token {a:?}) vs libllama {:?} (token {b:?})", ours.selected, their_sel));
    }
    if ours.data.len() != theirs.data.len() {
        return Some(format!("{} candidates left vs libllama {}", ours.data.len(), theirs.data.len()));
    }
    if ours.sorted != theirs.sorted {
        return Some(format!("sorted {} vs libllama {}", ours.sorted, theirs.sorted));
    }
    for (i, (a, b)) in ours.data.iter().zip(&theirs.data).enumerate() {
        let same = a.id as i32 == b.id
            && a.logit.to_bits() == b.logit.to_bits()
            && (a.p.to_bits() == b.p.to_bits() || (a.p.is_nan() && b.p.is_nan()));
        let same = same || (a.id as i32 == b.id && a.logit.is_nan() && b.logit.is_nan());
        if !same {
            return Some(format!(
                "candidate {i}: ({}, {:e}, {:e}) vs libllama ({}, {:e}, {:e})",
                a.id, a.logit, a.p, b.id, b.logit, b.p
            ));
        }
    }
    None
}

struct Tally {
    label: String,
    cases: u64,
    mismatches: u64,
    note: String,
}

#[allow(clippy::too_many_arguments)]
fn run_case(
    ll: &Llama,
    rng: &mut StdRng,
    kind: Kind,
    quick: bool,
    vocab: Option<(&Model<'_>, &LlamaPieces)>,
    t: &mut Tally,
) -> Result<()> {
    let n = match vocab {
        Some((_, lp)) if rng.gen_bool(0.5) => lp.pieces.len(),
        Some(_) => rng.gen_range(2..3000),
        None => vocab_size(rng, quick),
    };
    let params = random_params(rng, kind, n);
    let (mut ours, n_vocab) = match vocab {
        Some((m, lp)) => (Sampler::with_vocab(params.clone(), &VocabRef { lp, model: m }), lp.pieces.len()),
        None => (Sampler::new(params.clone()), n),
    };
    let mut theirs = ll.sampler_chain(&llama_specs(&params, n_vocab as i32), vocab.map(|v| v.0))?;
    // an accepted history with repeats (tokens from a small pool)
    let pool: Vec<u32> = (0..rng.gen_range(1..12)).map(|_| rng.gen_range(0..n as u32)).collect();
    for _ in 0..rng.gen_range(0..80) {
        let tok = pool[rng.gen_range(0..pool.len())];
        ours.accept(tok);
        theirs.accept(tok as i32);
    }
    let steps = rng.gen_range(2..7);
    let mut l = logits(rng, n);
    for step in 0..steps {
        if step > 0 && rng.gen_bool(0.6) {
            l = logits(rng, n);
        }
        let mut cur = Candidates::from_logits(&l);
        ours.apply(&mut cur);
        let got = ll_apply(&mut theirs, &l);
        t.cases += 1;
        if let Some(why) = compare(&cur, &got) {
            t.mismatches += 1;
            if t.note.is_empty() {
                t.note = format!("n={n} step {step} {params:?}: {why}");
            }
            return Ok(());
        }
        let Some(sel) = cur.selected else { return Ok(()) };
        let tok = cur.data[sel].id;
        ours.accept(tok);
        theirs.accept(tok as i32);
        // sometimes a repeated token, to feed penalties and DRY
        if rng.gen_bool(0.3) {
            let tok = pool[rng.gen_range(0..pool.len())];
            ours.accept(tok);
            theirs.accept(tok as i32);
        }
    }
    Ok(())
}

fn ll_apply(chain: &mut crate::llama::SamplerChain<'_>, logits: &[f32]) -> Applied {
    chain.apply(logits)
}

/// Runs the sampling checks into `report`.
pub fn run(cache: &Path, opts: &SampOpts, report: &mut Report) -> Result<()> {
    let lib = crate::llama::libllama(cache);
    if !lib.is_file() {
        report.push(Check::skip(GROUP, "sampler chain", "libllama.so not built (run `cargo xtask llama-cpp`)"));
        return Ok(());
    }
    llama_cpp::ensure_src(cache)?;
    let ll = Llama::load(cache).context("loading libllama")?;
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let per = if opts.quick { 60 } else { 600 };
    let mut kinds: Vec<(Kind, usize)> = SamplerType::ALL.iter().map(|&(t, _, _)| (Kind::Alone(t), per)).collect();
    kinds.extend([
        (Kind::Default, per),
        (Kind::Greedy, per / 2),
        (Kind::Random, per * 4),
        (Kind::Mirostat(1), per),
        (Kind::Mirostat(2), per),
    ]);
    for (kind, count) in kinds {
        let mut t = Tally { label: kind.label(), cases: 0, mismatches: 0, note: String::new() };
        for _ in 0..count {
            run_case(&ll, &mut rng, kind, opts.quick, None, &mut t)?;
        }
        report.push(Check::counted(GROUP, &t.label, t.cases, t.mismatches, None, t.note));
    }
    // DRY's sequence breakers over a real vocabulary
    let vocab_path = cache.join("vocab").join("ggml-vocab-gpt-2.gguf");
    if !vocab_path.is_file() {
        report.push(Check::skip(
            GROUP,
            "dry + breakers (vocab)",
            "no vocab/ggml-vocab-gpt-2.gguf (cargo xtask fetch-models)",
        ));
        return Ok(());
    }
    let model = ll.vocab(&vocab_path)?;
    let pieces = (0..model.n_vocab() as i32).map(|id| model.detokenize_one(id, true)).collect::<Result<Vec<_>>>()?;
    let lp = LlamaPieces { pieces, tokens: Default::default() };
    let mut t = Tally { label: Kind::DryVocab.label(), cases: 0, mismatches: 0, note: String::new() };
    for _ in 0..if opts.quick { 6 } else { 40 } {
        run_case(&ll, &mut rng, Kind::DryVocab, opts.quick, Some((&model, &lp)), &mut t)?;
    }
    report.push(Check::counted(GROUP, &t.label, t.cases, t.mismatches, None, t.note));
    Ok(())
}
