//! The 1–3 B-parameter files of issue 9's speed matrix: random weights (speed does not
//! depend on the values) in a real model's layout, written all-F16 by this project's
//! writer ([`synth::write_family_types`]) and requantized by llama.cpp's own
//! `llama-quantize --allow-requantize` into Q4_K_M, Q8_0 and Q4_0, so the type mix is
//! exactly what a user's file of that type has.
//!
//! Cached as `<cache>/bench/<name>-<FTYPE>.gguf` (the F16 source as `<name>-F16.gguf`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};
use gguf_format::GgufFile;

use crate::synth::{self, Family, Feature, VocabSource};
use crate::{llama_cpp, models, requant_imatrix};

/// The layouts: Llama-3.2-1B and Qwen3-1.7B (tied output, as the real ones).
pub const BENCH_FAMILIES: &[Family] = &[
    Family {
        name: "llama-1b",
        arch: "llama",
        layout: "Llama-3.2-1B (16 layers, 2048 wide, 32 heads / 8 KV heads of 64, FFN 8192, tied output), Llama 3 BPE vocab",
        moe: false,
        vocab: VocabSource::Fixture("llama-bpe"),
        n_layer: 16,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 64,
        n_ff: 8192,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 500_000.0,
        rms_eps: 1e-5,
        ctx: 131072,
        features: &[Feature::RopeDimKey],
        kv: &[],
    },
    Family {
        name: "qwen3-1.7b",
        arch: "qwen3",
        layout: "Qwen3-1.7B (28 layers, 2048 wide, 16 heads / 8 KV heads of 128, FFN 6144, QK-norm, tied output), qwen2 vocab",
        moe: false,
        vocab: VocabSource::Fixture("qwen2"),
        n_layer: 28,
        n_embd: 2048,
        n_head: 16,
        n_head_kv: 8,
        head_dim: 128,
        n_ff: 6144,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        ctx: 40960,
        features: &[Feature::QkNorm, Feature::HeadDimKeys],
        kv: &[],
    },
];

/// The file types each layout is benchmarked in.
pub const BENCH_FTYPES: &[&str] = &["Q4_K_M", "Q8_0", "Q4_0"];

/// Seed of the random weights (any: the values do not matter for speed).
const SEED: u64 = 0x5eed_0009;

/// `(label, family, ftype)` of every bench file: `llama-1b-q4_k_m`, ...
pub fn labels() -> Vec<(String, &'static Family, &'static str)> {
    BENCH_FAMILIES
        .iter()
        .flat_map(|f| BENCH_FTYPES.iter().map(move |&t| (format!("{}-{}", f.name, t.to_ascii_lowercase()), f, t)))
        .collect()
}

/// The file of `fam` in `ftype`, made on first use.
pub fn ensure(cache: &Path, fam: &Family, ftype: &str) -> Result<PathBuf> {
    let dir = cache.join("bench");
    let out = dir.join(format!("{}-{ftype}.gguf", fam.name));
    if out.is_file() {
        return Ok(out);
    }
    fs::create_dir_all(&dir)?;
    let src = dir.join(format!("{}-F16.gguf", fam.name));
    if !src.is_file() {
        let VocabSource::Fixture(vocab) = fam.vocab else {
            anyhow::bail!("{}: bench files take a vocab fixture", fam.name)
        };
        let want = format!("ggml-vocab-{vocab}.gguf");
        let tok_path = models::ensure_vocab(cache)?
            .into_iter()
            .find(|p| p.file_name().is_some_and(|f| f.to_string_lossy() == want))
            .with_context(|| format!("no vocab fixture {want}"))?;
        let tok = GgufFile::open(&tok_path).with_context(|| format!("reading {}", tok_path.display()))?;
        let partial = src.with_extension("gguf.partial");
        eprintln!("bench files: writing {} (all F16, random weights)", src.display());
        synth::write_family_types(&partial, fam, SEED, &tok, &["f16"])?;
        fs::rename(&partial, &src)?;
    }
    let bin = llama_cpp::build_dir(cache).join("bin");
    let quantize = bin.join("llama-quantize");
    ensure!(quantize.is_file(), "no {}: run `cargo xtask llama-cpp` first", quantize.display());
    let partial = out.with_extension("gguf.partial");
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).to_string();
    eprintln!("bench files: llama-quantize {} -> {ftype}", src.display());
    let r = requant_imatrix::run(
        Command::new(&quantize)
            .env("LD_LIBRARY_PATH", &bin)
            .arg("--allow-requantize")
            .arg(&src)
            .arg(&partial)
            .arg(ftype)
            .arg(&threads),
        &format!("llama-quantize {ftype}"),
    );
    if r.is_err() {
        let _ = fs::remove_file(&partial);
    }
    r?;
    fs::rename(&partial, &out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_consistent() {
        for f in BENCH_FAMILIES {
            assert_eq!(f.n_head % f.n_head_kv, 0, "{}", f.name);
            if !f.features.contains(&Feature::HeadDimKeys) {
                assert_eq!(f.n_embd, f.n_head * f.head_dim, "{}", f.name);
            }
        }
        let l = labels();
        assert_eq!(l.len(), BENCH_FAMILIES.len() * BENCH_FTYPES.len());
        assert!(l.iter().any(|(n, _, _)| n == "qwen3-1.7b-q4_k_m"));
    }
}
