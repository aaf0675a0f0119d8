//! Sampling flags (llama.cpp's names and ranges) and the sampler settings they make.

use clap::Args;
use models::SamplerParams;

/// A float flag's value: finite (`nan` and `inf` parse as floats but mean nothing here).
pub(crate) fn finite(s: &str) -> std::result::Result<f32, String> {
    let v: f32 = s.trim().parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("{s} is not a finite number"))
    }
}

/// Sampling options.
#[derive(Args, Debug, Clone)]
pub struct SampleArgs {
    /// Temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8, value_parser = finite, allow_negative_numbers = true)]
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
    /// Repetition penalty (1 = off).
    #[arg(long = "repeat-penalty", default_value_t = 1.0, value_parser = finite)]
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
    /// RNG seed (default, or -1: random).
    #[arg(short = 's', long, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..=u32::MAX as i64))]
    pub seed: Option<i64>,
}

impl SampleArgs {
    pub(crate) fn params(&self) -> SamplerParams {
        let seed = match self.seed {
            Some(s) if s >= 0 => s as u64,
            _ => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
        };
        SamplerParams {
            temp: self.temp,
            top_k: self.top_k.max(0) as usize,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: if self.repeat_last_n < 0 { usize::MAX } else { self.repeat_last_n as usize },
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed,
            ..Default::default()
        }
    }
}
