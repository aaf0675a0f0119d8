//! Sampling flags (llama.cpp's names, defaults and ranges, `common/arg.cpp`) and the
//! sampler settings they make.

use clap::Args;
use gguf_models::sampling::{SamplerType, DEFAULT_SEED};
use gguf_models::SamplerParams;

/// The engine's sampler, for tools that drive it directly (`cargo xtask verify sampling`).
pub use gguf_models::sampling as engine;

/// A float flag's value: finite (`nan` and `inf` parse as floats but mean nothing here).
pub(crate) fn finite(s: &str) -> std::result::Result<f32, String> {
    let v: f32 = s.trim().parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("{s} is not a finite number"))
    }
}

/// `--repeat-penalty`: finite, above 0, with a finite inverse (llama.cpp's check).
fn repeat_penalty(s: &str) -> std::result::Result<f32, String> {
    let v = finite(s)?;
    if v > 0.0 && (1.0 / v).is_finite() {
        Ok(v)
    } else {
        Err("repeat-penalty must be finite and greater than 0".into())
    }
}

/// `std::stof`: leading white space, then the longest prefix that is a number.
fn stof(s: &str) -> Option<f32> {
    let t = s.trim_start();
    (1..=t.len()).rev().filter(|&n| t.is_char_boundary(n)).find_map(|n| t[..n].parse::<f32>().ok())
}

/// `-l TOKEN_ID(+/-)BIAS` as llama.cpp reads it (`ss >> key >> sign`, `std::stof` of
/// the rest): `15043+1`, `15043-0.5`, `15043-inf` (bans the token).
pub(crate) fn logit_bias(s: &str) -> std::result::Result<(i64, f32), String> {
    let bad = || format!("invalid input format {s:?}: expected TOKEN_ID(+/-)BIAS, e.g. 15043+1 or 15043-inf");
    let t = s.trim_start();
    let digits_from = usize::from(t.starts_with(['+', '-']));
    let end = digits_from + t[digits_from..].bytes().take_while(u8::is_ascii_digit).count();
    if end == digits_from {
        return Err(bad());
    }
    let key: i32 = t[..end].parse().map_err(|_| bad())?;
    let rest = t[end..].trim_start();
    let (sign, value) = match rest.as_bytes().first() {
        Some(b'+') => (1.0, &rest[1..]),
        Some(b'-') => (-1.0, &rest[1..]),
        _ => return Err(bad()),
    };
    let v = stof(value).ok_or_else(bad)?;
    Ok((i64::from(key), v * sign))
}

/// Sampling options.
#[derive(Args, Debug, Clone)]
pub struct SampleArgs {
    /// Temperature (0 = greedy).
    #[arg(long, visible_alias = "temperature", default_value_t = 0.8, value_parser = finite, allow_negative_numbers = true)]
    pub temp: f32,
    /// Top-k (0 or less = off).
    #[arg(long = "top-k", default_value_t = 40, allow_negative_numbers = true)]
    pub top_k: i64,
    /// Top-p (1 = off).
    #[arg(long = "top-p", default_value_t = 0.95, value_parser = finite)]
    pub top_p: f32,
    /// Min-p (0 = off).
    #[arg(long = "min-p", default_value_t = 0.05, value_parser = finite)]
    pub min_p: f32,
    /// Top-n-sigma (-1 = off).
    #[arg(long = "top-nsigma", visible_alias = "top-n-sigma", default_value_t = -1.0, value_parser = finite, allow_negative_numbers = true)]
    pub top_n_sigma: f32,
    /// XTC probability (0 = off).
    #[arg(long = "xtc-probability", default_value_t = 0.0, value_parser = finite, allow_negative_numbers = true)]
    pub xtc_probability: f32,
    /// XTC threshold (above 0.5 = off).
    #[arg(long = "xtc-threshold", default_value_t = 0.1, value_parser = finite, allow_negative_numbers = true)]
    pub xtc_threshold: f32,
    /// Locally typical sampling, parameter p (1 = off).
    #[arg(long = "typical", visible_alias = "typical-p", default_value_t = 1.0, value_parser = finite, allow_negative_numbers = true)]
    pub typical_p: f32,
    /// Repetition penalty (1 = off).
    #[arg(long = "repeat-penalty", default_value_t = 1.0, value_parser = repeat_penalty, allow_negative_numbers = true)]
    pub repeat_penalty: f32,
    /// Tokens of history for the penalties (0 = off, -1 = the whole context).
    #[arg(long = "repeat-last-n", default_value_t = 64, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..))]
    pub repeat_last_n: i64,
    /// Frequency penalty: count × this is subtracted from a seen token's logit (0 = off).
    #[arg(long = "frequency-penalty", default_value_t = 0.0, value_parser = finite, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Presence penalty: subtracted once from a seen token's logit (0 = off).
    #[arg(long = "presence-penalty", default_value_t = 0.0, value_parser = finite, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// DRY multiplier (0 = off).
    #[arg(long = "dry-multiplier", default_value_t = 0.0, value_parser = finite, allow_negative_numbers = true)]
    pub dry_multiplier: f32,
    /// DRY base (a value below 1 is ignored, as llama.cpp does).
    #[arg(long = "dry-base", default_value_t = 1.75, value_parser = finite, allow_negative_numbers = true)]
    pub dry_base: f32,
    /// DRY: repeats longer than this are penalised.
    #[arg(long = "dry-allowed-length", default_value_t = 2, allow_negative_numbers = true)]
    pub dry_allowed_length: i32,
    /// DRY: tokens of history scanned (0 = off).
    #[arg(long = "dry-penalty-last-n", default_value_t = 64, allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(0..))]
    pub dry_penalty_last_n: i32,
    /// A DRY sequence breaker (repeatable; the first replaces the defaults '\n', ':', '"',
    /// '*'; "none" clears the list). Escapes are processed.
    #[arg(long = "dry-sequence-breaker", value_name = "STRING")]
    pub dry_sequence_breaker: Vec<String>,
    /// Dynamic temperature range (0 = off).
    #[arg(long = "dynatemp-range", default_value_t = 0.0, value_parser = finite, allow_negative_numbers = true)]
    pub dynatemp_range: f32,
    /// Dynamic temperature exponent.
    #[arg(long = "dynatemp-exp", default_value_t = 1.0, value_parser = finite, allow_negative_numbers = true)]
    pub dynatemp_exp: f32,
    /// Mirostat (0 = off, 1 = Mirostat, 2 = Mirostat 2.0); replaces top-k, top-p, typical...
    #[arg(long = "mirostat", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2), allow_negative_numbers = true)]
    pub mirostat: u8,
    /// Mirostat learning rate (eta).
    #[arg(long = "mirostat-lr", default_value_t = 0.1, value_parser = finite, allow_negative_numbers = true)]
    pub mirostat_lr: f32,
    /// Mirostat target entropy (tau).
    #[arg(long = "mirostat-ent", default_value_t = 5.0, value_parser = finite, allow_negative_numbers = true)]
    pub mirostat_ent: f32,
    /// Adaptive-p: select tokens near this probability (0 to 1; negative = off).
    #[arg(long = "adaptive-target", default_value_t = -1.0, value_parser = finite, allow_negative_numbers = true)]
    pub adaptive_target: f32,
    /// Adaptive-p: decay of the moving average (0 to 0.99).
    #[arg(long = "adaptive-decay", default_value_t = 0.9, value_parser = finite, allow_negative_numbers = true)]
    pub adaptive_decay: f32,
    /// Least candidates top-p, min-p, typical and XTC keep (0 = no minimum).
    #[arg(long = "min-keep", default_value_t = 0, allow_negative_numbers = true)]
    pub min_keep: usize,
    /// Modify a token's likelihood: TOKEN_ID(+/-)BIAS, e.g. 15043+1, 15043-1, 15043-inf
    /// (repeatable).
    #[arg(short = 'l', long = "logit-bias", value_name = "TOKEN_ID(+/-)BIAS", value_parser = logit_bias, allow_hyphen_values = true)]
    pub logit_bias: Vec<(i64, f32)>,
    /// Samplers in order, separated by ';' (default:
    /// penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature).
    #[arg(long = "samplers", value_name = "SAMPLERS")]
    pub samplers: Option<String>,
    /// The sampler order as letters (default: edskypmxt).
    #[arg(long = "sampler-seq", visible_alias = "sampling-seq", value_name = "SEQUENCE")]
    pub sampler_seq: Option<String>,
    /// RNG seed (default, or -1: random).
    #[arg(short = 's', long, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..=u32::MAX as i64))]
    pub seed: Option<i64>,
}

impl SampleArgs {
    /// The sampler settings of these flags (a warning on stderr for each unknown sampler
    /// name or letter, which llama.cpp skips too).
    pub(crate) fn params(&self) -> SamplerParams {
        let d = SamplerParams::default();
        let seed = match self.seed {
            Some(s) if s >= 0 => s as u32,
            _ => DEFAULT_SEED,
        };
        let mut samplers = d.samplers.clone();
        if let Some(s) = &self.samplers {
            let (list, unknown) = SamplerType::parse_list(s);
            for u in unknown {
                eprintln!("warning: --samplers: unable to match sampler by name '{u}'");
            }
            samplers = list;
        }
        if let Some(s) = &self.sampler_seq {
            let (list, unknown) = SamplerType::parse_letters(s);
            for u in unknown {
                eprintln!("warning: --sampling-seq: unable to match sampler by char '{u}'");
            }
            samplers = list;
        }
        let mut breakers = d.dry_sequence_breakers.clone();
        if !self.dry_sequence_breaker.is_empty() {
            breakers.clear();
            for b in &self.dry_sequence_breaker {
                if b == "none" {
                    breakers.clear();
                } else {
                    breakers.push(crate::engine::process_escapes(b));
                }
            }
        }
        SamplerParams {
            seed,
            min_keep: self.min_keep,
            temp: self.temp.max(0.0),
            dynatemp_range: self.dynatemp_range,
            dynatemp_exponent: self.dynatemp_exp,
            top_k: self.top_k.max(0) as usize,
            top_p: self.top_p,
            min_p: self.min_p,
            typical_p: self.typical_p,
            top_n_sigma: self.top_n_sigma,
            xtc_probability: self.xtc_probability,
            xtc_threshold: self.xtc_threshold,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: if self.repeat_last_n < 0 { usize::MAX } else { self.repeat_last_n as usize },
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            dry_multiplier: self.dry_multiplier,
            dry_base: if self.dry_base >= 1.0 { self.dry_base } else { d.dry_base },
            dry_allowed_length: self.dry_allowed_length,
            dry_penalty_last_n: self.dry_penalty_last_n as usize,
            dry_sequence_breakers: breakers,
            mirostat: self.mirostat,
            mirostat_tau: self.mirostat_ent,
            mirostat_eta: self.mirostat_lr,
            adaptive_target: self.adaptive_target,
            adaptive_decay: self.adaptive_decay,
            // a negative id can match no token (llama.cpp keeps it and it never applies)
            logit_bias: self.logit_bias.iter().filter(|b| b.0 >= 0).map(|&(t, b)| (t as u32, b)).collect(),
            samplers,
        }
    }
}

/// The sampler chain of `args` for the model of `tok`.
/// A random seed (no `-s`, or `-s -1`) is drawn here and returned, for the caller to print
/// as llama.cpp's "sampler seed: N" once generation starts, so the run can be repeated
/// with `-s N`.
pub fn sampler(args: &SampleArgs, tok: &gguf_tokenizer::Tokenizer) -> (gguf_models::Sampler, Option<u32>) {
    let mut p = args.params();
    let mut drawn = None;
    if p.seed == DEFAULT_SEED {
        while p.seed == DEFAULT_SEED {
            p.seed = gguf_models::sampling::rng::resolve_seed(DEFAULT_SEED);
        }
        drawn = Some(p.seed);
    }
    (gguf_models::Sampler::with_vocab(p, &gguf_server::engine::Pieces(tok)), drawn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logit_bias_reads_like_llama_cpp() {
        assert_eq!(logit_bias("15043+1"), Ok((15043, 1.0)));
        assert_eq!(logit_bias("15043-0.5"), Ok((15043, -0.5)));
        assert_eq!(logit_bias(" 7 -inf"), Ok((7, f32::NEG_INFINITY)));
        assert_eq!(logit_bias("7+2.5junk"), Ok((7, 2.5)), "std::stof stops at the number's end");
        for bad in ["", "x+1", "15043", "15043*2", "15043+", "15043+abc", "99999999999+1"] {
            assert!(logit_bias(bad).is_err(), "{bad:?}");
        }
    }
}
