//! SmolLM2 requantized into the low-bit IQ types, which `llama-quantize` only makes well
//! (IQ1_S, IQ2_XXS, IQ2_XS: only) with an importance matrix: `llama-imatrix` is run once on
//! a fixed text (llama.cpp's own README.md and docs/build.md from the cached source) and the
//! result cached as `<cache>/requant/SmolLM2-135M-Instruct.imatrix.gguf`; the requantized
//! files land beside [`crate::requant::ensure_requant`]'s, under the same naming.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

use crate::{llama_cpp, models, requant};

/// The llama-quantize file types of issue 3's real-file acceptance line, and whether each
/// is made with the importance matrix.
pub const FTYPES: &[(&str, bool)] = &[
    ("IQ1_S", true),
    ("IQ1_M", true),
    ("IQ2_XXS", true),
    ("IQ2_XS", true),
    ("IQ2_S", true),
    ("IQ2_M", true),
    ("IQ3_XXS", true),
    ("IQ3_XS", true),
    ("IQ3_S", true),
    ("IQ3_M", true),
    ("IQ4_NL", false),
    ("IQ4_XS", false),
    ("TQ1_0", false),
    ("TQ2_0", false),
    ("MXFP4_MOE", false),
];

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        bail!("{what} failed ({}): {}", out.status, tail.into_iter().rev().collect::<Vec<_>>().join(" / "));
    }
    Ok(())
}

fn bin_dir() -> Result<PathBuf> {
    let bin = llama_cpp::build_dir(&models::cache_dir()?).join("bin");
    ensure!(
        bin.join("llama-imatrix").is_file(),
        "no {}/llama-imatrix: run `cargo xtask llama-cpp` first",
        bin.display()
    );
    Ok(bin)
}

/// The importance matrix of SmolLM2 (Q4_1) over llama.cpp's README.md + docs/build.md,
/// made on first use with `llama-imatrix -c 256` and cached.
pub fn ensure_imatrix() -> Result<PathBuf> {
    let cache = models::cache_dir()?;
    let dir = cache.join("requant");
    let out = dir.join("SmolLM2-135M-Instruct.imatrix.gguf");
    if out.is_file() {
        return Ok(out);
    }
    fs::create_dir_all(&dir)?;
    let src = models::ensure_model(models::find_model("smollm2").context("smollm2 is not in the model table")?)?;
    let llama_src = llama_cpp::src_dir(&cache);
    let mut text = String::new();
    for f in ["README.md", "docs/build.md"] {
        text.push_str(&fs::read_to_string(llama_src.join(f)).with_context(|| format!("reading {f} of llama.cpp"))?);
        text.push('\n');
    }
    let text_path = dir.join("imatrix-text.txt");
    fs::write(&text_path, text)?;
    let bin = bin_dir()?;
    let partial = dir.join("SmolLM2-135M-Instruct.imatrix.partial.gguf");
    eprintln!("llama-imatrix {} -> {}", src.display(), out.display());
    run(
        Command::new(bin.join("llama-imatrix"))
            .env("LD_LIBRARY_PATH", &bin)
            .arg("-m")
            .arg(&src)
            .arg("-f")
            .arg(&text_path)
            .arg("-o")
            .arg(&partial)
            .args(["-c", "256", "-t", &threads()]),
        "llama-imatrix",
    )?;
    fs::rename(&partial, &out)?;
    Ok(out)
}

fn threads() -> String {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).to_string()
}

/// SmolLM2 requantized to `ftype` with the importance matrix of [`ensure_imatrix`]
/// (`llama-quantize --allow-requantize --imatrix`), cached at
/// [`requant::requant_path`]`(ftype)`.
pub fn ensure_requant_imatrix(ftype: &str) -> Result<PathBuf> {
    ensure!(
        !ftype.is_empty() && ftype.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "bad llama-quantize type name {ftype:?}"
    );
    let out = requant::requant_path(ftype)?;
    if out.is_file() {
        return Ok(out);
    }
    let imatrix = ensure_imatrix()?;
    let src = models::ensure_model(models::find_model("smollm2").context("smollm2 is not in the model table")?)?;
    let bin = bin_dir()?;
    let partial = out.with_extension("gguf.partial");
    eprintln!("llama-quantize --allow-requantize --imatrix {} -> {ftype}", imatrix.display());
    let r = run(
        Command::new(bin.join("llama-quantize"))
            .env("LD_LIBRARY_PATH", &bin)
            .arg("--allow-requantize")
            .arg("--imatrix")
            .arg(&imatrix)
            .arg(&src)
            .arg(&partial)
            .arg(ftype)
            .arg(threads()),
        &format!("llama-quantize {ftype}"),
    );
    if let Err(e) = r {
        let _ = fs::remove_file(&partial);
        return Err(e);
    }
    fs::rename(&partial, &out)?;
    Ok(out)
}

/// The requantized file for one entry of [`FTYPES`].
pub fn ensure(ftype: &str, with_imatrix: bool) -> Result<PathBuf> {
    if with_imatrix {
        ensure_requant_imatrix(ftype)
    } else {
        requant::ensure_requant(ftype)
    }
}
