//! Importance matrices as llama-quantize reads them (`common/imatrix-loader.cpp`): the
//! GGUF format llama-imatrix writes (`<tensor>.in_sum2` / `<tensor>.counts` pairs and the
//! `imatrix.*` keys) and the legacy `.dat` format, normalized to per-column means.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gguf_format::{Array, GgufFile, Value};

use crate::{Error, Result};

/// A loaded importance matrix: per tensor, `ne[0] · n_experts` weights.
#[derive(Debug, Clone, Default)]
pub struct Imatrix {
    /// The file it came from (its name is written as `quantize.imatrix.file`).
    pub path: PathBuf,
    /// Tensor name → normalized weights.
    pub entries: BTreeMap<String, Vec<f32>>,
    /// `imatrix.datasets` (or the legacy trailer's dataset name).
    pub datasets: Vec<String>,
    /// `imatrix.chunk_count` (0 when unknown).
    pub chunk_count: u32,
    /// Whether the file was the legacy `.dat` format.
    pub legacy: bool,
}

/// One entry as stored: raw sums of squares and per-expert counts (GGUF), or the legacy
/// format's `sums` (already `mean · ncall`) with `counts = [ncall]`.
#[derive(Debug, Clone, Default)]
pub struct Raw {
    /// The stored values.
    pub sums: Vec<f32>,
    /// The stored counts.
    pub counts: Vec<i64>,
}

/// An imatrix file as stored, before llama-quantize's normalization (what llama-imatrix's
/// `--in-file` adds up).
#[derive(Debug, Clone, Default)]
pub struct RawImatrix {
    /// Tensor name → stored entry.
    pub entries: BTreeMap<String, Raw>,
    /// Dataset names.
    pub datasets: Vec<String>,
    /// Chunk count.
    pub chunk_count: u32,
    /// Legacy `.dat` format.
    pub legacy: bool,
}

/// Reads `path` (GGUF or legacy) without normalizing.
pub fn load_raw(path: impl AsRef<Path>) -> Result<RawImatrix> {
    let path = path.as_ref();
    let bad = |reason: String| Error::BadImatrix { path: path.to_path_buf(), reason };
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let legacy = !bytes.starts_with(b"GGUF");
    let (raw, datasets, chunk_count) =
        if legacy { load_legacy(&bytes).map_err(bad)? } else { load_gguf(path, bytes).map_err(bad)? };
    Ok(RawImatrix { entries: raw.into_iter().collect(), datasets, chunk_count, legacy })
}

impl Imatrix {
    /// Loads `path` (GGUF or legacy), normalizing as llama-quantize does: GGUF sums are
    /// divided by their per-expert counts (a zero count gives 1s), legacy sums by `ncall`.
    pub fn load(path: impl AsRef<Path>) -> Result<Imatrix> {
        let path = path.as_ref();
        let bad = |reason: String| Error::BadImatrix { path: path.to_path_buf(), reason };
        let RawImatrix { entries: raw, datasets, chunk_count, legacy } = load_raw(path)?;
        let mut entries = BTreeMap::new();
        for (name, r) in raw {
            let mut e = vec![0f32; r.sums.len()];
            if !legacy {
                let nc = r.counts.len().max(1);
                let ne0 = r.sums.len() / nc;
                for (j, &c) in r.counts.iter().enumerate() {
                    let count = c as f32;
                    for i in 0..ne0 {
                        e[j * ne0 + i] = if count > 0.0 { r.sums[j * ne0 + i] / count } else { 1.0 };
                    }
                }
            } else {
                let ncall = r.counts.first().copied().unwrap_or(0);
                for (o, &s) in e.iter_mut().zip(&r.sums) {
                    *o = if ncall > 0 { s / ncall as f32 } else { s };
                }
            }
            if let Some(v) = e.iter().find(|v| !v.is_finite()) {
                return Err(bad(format!("imatrix contains non-finite value {v} (entry {name})")));
            }
            entries.insert(name, e);
        }
        Ok(Imatrix { path: path.to_path_buf(), entries, datasets, chunk_count, legacy })
    }

    /// llama-quantize's `--exclude-weights` (drop entries whose name contains any) and
    /// `--include-weights` (keep only entries whose name contains one).
    pub fn filter(&mut self, include: &[String], exclude: &[String]) {
        if !exclude.is_empty() {
            self.entries.retain(|k, _| !exclude.iter().any(|x| k.contains(x.as_str())));
        }
        if !include.is_empty() {
            self.entries.retain(|k, _| include.iter().any(|x| k.contains(x.as_str())));
        }
    }
}

type Loaded = (Vec<(String, Raw)>, Vec<String>, u32);

fn load_gguf(path: &Path, bytes: Vec<u8>) -> std::result::Result<Loaded, String> {
    let file = GgufFile::from_vec(bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if file.tensors().is_empty() {
        return Err("no data in file".into());
    }
    let md = file.metadata();
    let datasets: Vec<String> = match md.get("imatrix.datasets") {
        Some(Value::Array(Array::String(v))) => v.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect(),
        _ => Vec::new(),
    };
    let has = |k: &str| md.get(k).is_some();
    if !(has("imatrix.datasets") && has("imatrix.chunk_count") && has("imatrix.chunk_size")) {
        return Err("missing imatrix metadata (imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size)".into());
    }
    let chunk_count = md.get_u64("imatrix.chunk_count").unwrap_or(0) as u32;
    let mut pairs: BTreeMap<String, (Option<&gguf_format::TensorInfo>, Option<&gguf_format::TensorInfo>)> =
        BTreeMap::new();
    for t in file.tensors() {
        if let Some(n) = t.name.strip_suffix(".in_sum2") {
            pairs.entry(n.to_string()).or_default().0 = Some(t);
        } else if let Some(n) = t.name.strip_suffix(".counts") {
            pairs.entry(n.to_string()).or_default().1 = Some(t);
        }
    }
    let f32s = |t: &gguf_format::TensorInfo| -> std::result::Result<Vec<f32>, String> {
        if t.type_id != 0 {
            return Err(format!("{} must be F32", t.name));
        }
        let d = file.tensor_data(t).map_err(|e| e.to_string())?;
        Ok(d.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    };
    let mut out = Vec::new();
    for (name, (s, c)) in pairs {
        let (Some(s), Some(c)) = (s, c) else {
            return Err(format!("mismatched sums and counts for {name}"));
        };
        let sums = f32s(s)?;
        let counts: Vec<i64> = f32s(c)?.iter().map(|&v| v.round() as i64).collect();
        if counts.is_empty() || !sums.len().is_multiple_of(counts.len()) {
            return Err(format!("{name}: {} sums do not split into {} experts", sums.len(), counts.len()));
        }
        out.push((name, Raw { sums, counts }));
    }
    Ok((out, datasets, chunk_count))
}

fn load_legacy(b: &[u8]) -> std::result::Result<Loaded, String> {
    let mut pos = 0usize;
    let i32_at = |pos: &mut usize| -> Option<i32> {
        let v = b.get(*pos..*pos + 4)?;
        *pos += 4;
        Some(i32::from_le_bytes([v[0], v[1], v[2], v[3]]))
    };
    let n = i32_at(&mut pos).filter(|&n| n >= 1).ok_or("not a GGUF file and no legacy imatrix data")?;
    let mut out = Vec::new();
    for i in 0..n {
        let len =
            i32_at(&mut pos).filter(|&l| l >= 0).ok_or(format!("failed reading name for entry {}", i + 1))? as usize;
        let name = b.get(pos..pos + len).ok_or(format!("failed reading name for entry {}", i + 1))?;
        let name = String::from_utf8_lossy(name.split(|&c| c == 0).next().unwrap_or(&[])).into_owned();
        pos += len;
        let ncall = i32_at(&mut pos).ok_or(format!("failed reading entry {}", i + 1))?;
        let nval = i32_at(&mut pos)
            .filter(|&v| v >= 1)
            .ok_or(format!("failed reading number of values for entry {i}"))? as usize;
        let data = b.get(pos..pos + nval * 4).ok_or(format!("failed reading data for entry {i}"))?;
        pos += nval * 4;
        let sums = data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        out.push((name, Raw { sums, counts: vec![ncall as i64] }));
    }
    let mut chunk_count = 0;
    let mut datasets = Vec::new();
    if pos < b.len() {
        if let Some(c) = i32_at(&mut pos) {
            chunk_count = c.max(0) as u32;
            if let Some(len) = i32_at(&mut pos).filter(|&l| l > 0) {
                if let Some(d) = b.get(pos..pos + len as usize) {
                    datasets.push(String::from_utf8_lossy(d.split(|&c| c == 0).next().unwrap_or(&[])).into_owned());
                }
            }
        }
    }
    // Later entries of one name replace earlier ones (a std::map insert-or-assign).
    let mut dedup: BTreeMap<String, Raw> = BTreeMap::new();
    for (k, v) in out {
        dedup.insert(k, v);
    }
    Ok((dedup.into_iter().collect(), datasets, chunk_count))
}
