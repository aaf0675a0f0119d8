//! SmolLM2 requantized into other types by llama.cpp's own `llama-quantize
//! --allow-requantize`, cached as `<cache>/requant/SmolLM2-135M-Instruct.<FTYPE>.gguf`.
//!
//! These files give every quant type a real model to run on (issue 5's per-type
//! acceptance line): the Q4_1 source is dequantized and requantized, so the weights are
//! not what a conversion from F16 would give, but the file is exactly what llama.cpp
//! writes for that type.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{ensure, Context, Result};

use crate::{llama_cpp, models};

/// The llama-quantize file types of the per-type acceptance line (no imatrix needed).
pub const FTYPES: &[&str] =
    &["Q4_0", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"];

/// Where the requantized file for `ftype` is cached (whether or not it exists yet).
pub fn requant_path(ftype: &str) -> Result<PathBuf> {
    let cache = models::cache_dir()?;
    Ok(cache.join("requant").join(format!("SmolLM2-135M-Instruct.{ftype}.gguf")))
}

/// SmolLM2 requantized to `ftype` (a `llama-quantize` type name such as `Q4_K_M`),
/// made on first use with `llama-quantize --allow-requantize` and cached.
pub fn ensure_requant(ftype: &str) -> Result<PathBuf> {
    ensure!(
        !ftype.is_empty() && ftype.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "bad llama-quantize type name {ftype:?}"
    );
    let out = requant_path(ftype)?;
    if out.is_file() {
        return Ok(out);
    }
    let cache = models::cache_dir()?;
    let src = models::ensure_model(models::find_model("smollm2").context("smollm2 is not in the model table")?)?;
    let bin = llama_cpp::build_dir(&cache).join("bin");
    let quantize = bin.join("llama-quantize");
    ensure!(quantize.is_file(), "no {}: run `cargo xtask llama-cpp` first", quantize.display());
    let dir = out.parent().context("requant path has no parent")?;
    fs::create_dir_all(dir)?;
    let partial = out.with_extension("gguf.partial");
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).to_string();
    eprintln!("llama-quantize --allow-requantize {} -> {ftype}", src.display());
    let result = Command::new(&quantize)
        .env("LD_LIBRARY_PATH", &bin)
        .arg("--allow-requantize")
        .arg(&src)
        .arg(&partial)
        .arg(ftype)
        .arg(&threads)
        .output()
        .with_context(|| format!("running {}", quantize.display()))?;
    if !result.status.success() {
        let _ = fs::remove_file(&partial);
        let err = String::from_utf8_lossy(&result.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        anyhow::bail!(
            "llama-quantize {ftype} failed ({}): {}",
            result.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        );
    }
    fs::rename(&partial, &out)?;
    Ok(out)
}
