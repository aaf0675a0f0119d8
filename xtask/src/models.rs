//! Where reference files come from: the model table and cache are shared with the
//! `gguf` CLI (`gguf_cli::fetch`, re-exported here); this module adds what only xtask
//! needs: the llama-cpp-python sdist (llama.cpp's source and its vocab fixtures).

use std::fs::{self, File};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};

pub use gguf_cli::fetch::{cache_dir, Model, MODELS};

/// Makes sure `model` is in the cache with the right sha256 and returns its path.
pub fn ensure_model(model: &Model) -> Result<PathBuf> {
    gguf_cli::fetch::ensure(model, &mut |line| eprintln!("{line}"))
}

/// Where a model is cached: `<cache>/models/<file name>`.
pub fn model_path(cache: &Path, model: &Model) -> PathBuf {
    cache.join("models").join(model.file)
}

/// Finds a model by name or file name.
pub fn find_model(name: &str) -> Option<&'static Model> {
    gguf_cli::fetch::model(name).ok()
}

/// The llama-cpp-python sdist that carries llama.cpp's source and its vocab fixtures.
pub const LLAMA_CPP_PYTHON: &str = "llama-cpp-python==0.3.36";
/// The top folder inside that sdist.
pub const SDIST_ROOT: &str = "llama_cpp_python-0.3.36";
/// The sdist's file name as pip saves it.
pub const SDIST_FILE: &str = "llama_cpp_python-0.3.36.tar.gz";

/// The python interpreter used for pip: `$XTASK_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("XTASK_PYTHON").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "python3".to_string())
}

/// Downloads the llama-cpp-python sdist into `<cache>/dl` unless it is there.
pub fn ensure_sdist(cache: &Path) -> Result<PathBuf> {
    let dir = cache.join("dl");
    let path = dir.join(SDIST_FILE);
    if path.is_file() {
        return Ok(path);
    }
    fs::create_dir_all(&dir)?;
    pip_download(&dir, LLAMA_CPP_PYTHON, &["--no-binary", "llama-cpp-python"])?;
    ensure!(path.is_file(), "pip download of {LLAMA_CPP_PYTHON} left no {} in {}", SDIST_FILE, dir.display());
    Ok(path)
}

fn pip_download(dir: &Path, requirement: &str, extra: &[&str]) -> Result<()> {
    eprintln!("pip download --no-deps {requirement}");
    let status = Command::new(python())
        .args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d"])
        .arg(dir)
        .args(extra)
        .arg(requirement)
        .status()
        .context("running pip (set XTASK_PYTHON to a python with pip)")?;
    ensure!(status.success(), "pip download {requirement} failed: {status}");
    Ok(())
}

/// Extracts every entry of the sdist whose path starts with `<root>/<inner>` into `dest`,
/// the prefix stripped; `filter` sees the stripped path and decides. Returns the files
/// written.
pub fn extract_sdist(sdist: &Path, inner: &str, dest: &Path, filter: &dyn Fn(&str) -> bool) -> Result<Vec<PathBuf>> {
    let prefix = format!("{SDIST_ROOT}/{inner}");
    let gz = flate2::read::GzDecoder::new(BufReader::new(File::open(sdist)?));
    let mut archive = tar::Archive::new(gz);
    let mut written = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.to_string_lossy().into_owned();
        let rel = match path.strip_prefix(&prefix) {
            Some(r) => r.trim_start_matches('/'),
            None => continue,
        };
        if rel.is_empty() || !filter(rel) {
            continue;
        }
        ensure!(!rel.split('/').any(|c| c == ".."), "unsafe path in sdist: {path}");
        let target = dest.join(rel);
        match entry.header().entry_type() {
            tar::EntryType::Directory => fs::create_dir_all(&target)?,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if let Some(parent) = target.parent() {
                    fs::create_dir_all(parent)?;
                }
                entry.unpack(&target).with_context(|| format!("unpacking {path}"))?;
                written.push(target);
            }
            tar::EntryType::Symlink => {
                if let Some(parent) = target.parent() {
                    fs::create_dir_all(parent)?;
                }
                let _ = fs::remove_file(&target);
                entry.unpack(&target).with_context(|| format!("unpacking {path}"))?;
            }
            _ => {}
        }
    }
    Ok(written)
}

/// Extracts the llama.cpp vocab fixtures (`models/ggml-vocab-*`) into `<cache>/vocab/`
/// and returns the `.gguf` files, sorted. Skips the work when a stamp says it is done.
pub fn ensure_vocab(cache: &Path) -> Result<Vec<PathBuf>> {
    let dir = cache.join("vocab");
    let stamp = dir.join(".extracted");
    let done = fs::read_to_string(&stamp).map(|s| s.trim() == LLAMA_CPP_PYTHON).unwrap_or(false);
    if !done {
        let sdist = ensure_sdist(cache)?;
        fs::create_dir_all(&dir)?;
        let written = extract_sdist(&sdist, "vendor/llama.cpp/models", &dir, &|rel| {
            !rel.contains('/') && rel.starts_with("ggml-vocab-")
        })?;
        ensure!(!written.is_empty(), "no ggml-vocab-* files in {}", sdist.display());
        fs::write(&stamp, format!("{LLAMA_CPP_PYTHON}\n"))?;
        eprintln!("vocab: extracted {} files into {}", written.len(), dir.display());
    }
    vocab_files(cache)
}

/// The vocab `.gguf` fixtures already in `<cache>/vocab/`, sorted.
pub fn vocab_files(cache: &Path) -> Result<Vec<PathBuf>> {
    let dir = cache.join("vocab");
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = entry?.path();
        if p.extension().is_some_and(|e| e == "gguf") {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}
