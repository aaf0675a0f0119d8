//! `gguf inspect`: a file's metadata, tensor table and summary, as text or JSON.
//!
//! A shard of a split model (`PREFIX-00001-of-0000N.gguf` …) is shown as the whole model:
//! the first shard's metadata and every shard's tensors, each with its shard number. If the
//! other shards do not open, the report says why and shows the file alone.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use gguf_format::split::split_position;
use gguf_format::{Array, GgufFile, Metadata, SplitGguf, TensorInfo, Value};
use serde_json::{json, Map, Value as Json};

/// Arrays longer than this are summarized unless `--full`.
pub const ARRAY_PREVIEW: usize = 8;

/// Totals over the tensor table.
#[derive(Debug, Default)]
pub struct Summary {
    /// Sum of element counts.
    pub parameters: u64,
    /// Sum of tensor data sizes (known types only).
    pub tensor_bytes: u64,
    /// Per type name: (tensor count, elements, bytes).
    pub type_mix: BTreeMap<String, (usize, u64, u64)>,
    /// Tensors whose type is not registered.
    pub unknown_types: usize,
}

impl Summary {
    /// Computes the totals of `file`.
    pub fn of(file: &GgufFile) -> Summary {
        Summary::of_tensors(file.tensors())
    }

    /// Computes the totals of `tensors`.
    pub fn of_tensors<'a>(tensors: impl IntoIterator<Item = &'a TensorInfo>) -> Summary {
        let mut s = Summary::default();
        for t in tensors {
            // saturating: a hostile table's totals must not wrap
            s.parameters = s.parameters.saturating_add(t.n_elements);
            let bytes = t.size.unwrap_or(0);
            s.tensor_bytes = s.tensor_bytes.saturating_add(bytes);
            if t.size.is_none() {
                s.unknown_types += 1;
            }
            let e = s.type_mix.entry(t.type_name()).or_default();
            e.0 += 1;
            e.1 = e.1.saturating_add(t.n_elements);
            e.2 = e.2.saturating_add(bytes);
        }
        s
    }

    /// Bits per weight over all tensors of known type.
    pub fn bits_per_weight(&self) -> f64 {
        if self.parameters == 0 {
            0.0
        } else {
            self.tensor_bytes as f64 * 8.0 / self.parameters as f64
        }
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn f32_json(v: f32) -> Json {
    serde_json::Number::from_f64(v as f64).map(Json::Number).unwrap_or(Json::Null)
}

fn f64_json(v: f64) -> Json {
    serde_json::Number::from_f64(v).map(Json::Number).unwrap_or(Json::Null)
}

/// `a` as JSON with at most `*budget` elements shown in all (nested arrays count their
/// own elements against the same budget, so a deep nest shows `limit` values, not
/// `limit` per level).
fn array_json(a: &Array, budget: &mut usize) -> Json {
    let limit = a.len().min(*budget);
    *budget -= limit;
    fn take<T: Clone>(v: &[T], limit: usize) -> &[T] {
        &v[..limit]
    }
    match a {
        Array::U8(v) => json!(take(v, limit)),
        Array::I8(v) => json!(take(v, limit)),
        Array::U16(v) => json!(take(v, limit)),
        Array::I16(v) => json!(take(v, limit)),
        Array::U32(v) => json!(take(v, limit)),
        Array::I32(v) => json!(take(v, limit)),
        Array::U64(v) => json!(take(v, limit)),
        Array::I64(v) => json!(take(v, limit)),
        Array::F32(v) => Json::Array(take(v, limit).iter().map(|&x| f32_json(x)).collect()),
        Array::F64(v) => Json::Array(take(v, limit).iter().map(|&x| f64_json(x)).collect()),
        Array::Bool(v) => json!(take(v, limit)),
        Array::String(v) => Json::Array(v.iter().take(limit).map(|s| Json::String(lossy(s))).collect()),
        Array::Array(v) => Json::Array(take(v, limit).iter().map(|x| array_json(x, budget)).collect()),
    }
}

/// A metadata value as JSON; arrays cut to `limit` elements.
pub fn value_json(v: &Value, limit: usize) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => f32_json(*x),
        Value::F64(x) => f64_json(*x),
        Value::Bool(x) => json!(x),
        Value::String(s) => Json::String(lossy(s)),
        Value::Array(a) => array_json(a, &mut { limit }),
    }
}

/// What a report shows: the file, or the split model it is a shard of.
struct View<'a> {
    file: &'a GgufFile,
    /// `(split.no, split.count)` when `file` is a shard of a split model.
    position: Option<(u16, u16)>,
    /// The whole model, or why it could not be opened.
    model: Option<Result<SplitGguf, String>>,
}

impl<'a> View<'a> {
    fn new(file: &'a GgufFile) -> View<'a> {
        match split_position(file) {
            Ok(None) => View { file, position: None, model: None },
            Ok(Some(pos)) => {
                let model = SplitGguf::open(file.path()).map_err(|e| e.to_string());
                View { file, position: Some(pos), model: Some(model) }
            }
            Err(e) => View { file, position: None, model: Some(Err(e.to_string())) },
        }
    }

    fn split(&self) -> Option<&SplitGguf> {
        self.model.as_ref().and_then(|m| m.as_ref().ok())
    }

    fn error(&self) -> Option<&str> {
        self.model.as_ref().and_then(|m| m.as_ref().err()).map(String::as_str)
    }

    fn metadata(&self) -> &Metadata {
        self.split().map_or(self.file.metadata(), SplitGguf::metadata)
    }

    /// Each tensor with its 1-based shard number when the model is split.
    fn tensors(&self) -> Vec<(&TensorInfo, Option<usize>)> {
        match self.split() {
            Some(m) => m.tensors().iter().map(|t| (t, m.shard_of(t).map(|i| i + 1))).collect(),
            None => self.file.tensors().iter().map(|t| (t, None)).collect(),
        }
    }
}

/// The whole file as one JSON document (schema in ARCHITECTURE.md).
pub fn to_json(file: &GgufFile, full: bool) -> Json {
    let limit = if full { usize::MAX } else { ARRAY_PREVIEW };
    let view = View::new(file);
    let metadata: Vec<Json> = view
        .metadata()
        .iter()
        .map(|(k, v)| {
            let mut m = Map::new();
            m.insert("key".into(), json!(k));
            m.insert("type".into(), json!(v.value_type().name()));
            if let Value::Array(a) = v {
                m.insert("element_type".into(), json!(a.elem_type().name()));
                m.insert("len".into(), json!(a.len()));
                if a.len() > limit {
                    m.insert("truncated".into(), json!(true));
                }
            }
            m.insert("value".into(), value_json(v, limit));
            Json::Object(m)
        })
        .collect();
    let tensors: Vec<Json> = view
        .tensors()
        .iter()
        .map(|(t, shard)| {
            let mut j = json!({
                "name": t.name,
                "type": t.type_name(),
                "type_id": t.type_id,
                "shape": t.dims,
                "offset": t.offset,
                "bytes": t.size,
                "elements": t.n_elements,
            });
            if let Some(n) = shard {
                j["shard"] = json!(n);
            }
            j
        })
        .collect();
    let s = Summary::of_tensors(view.tensors().iter().map(|(t, _)| *t));
    let mix: Map<String, Json> = s
        .type_mix
        .iter()
        .map(|(k, (n, el, b))| (k.clone(), json!({"tensors": n, "elements": el, "bytes": b})))
        .collect();
    let mut doc = json!({
        "path": file.path().display().to_string(),
        "version": file.version(),
        "alignment": file.alignment(),
        "file_size": file.file_size(),
        "data_offset": file.data_offset(),
        "data_size": file.file_size().saturating_sub(file.data_offset()),
        "metadata": metadata,
        "tensors": tensors,
        "parameters": s.parameters,
        "tensor_bytes": s.tensor_bytes,
        "bits_per_weight": f64_json(s.bits_per_weight()),
        "type_mix": mix,
        "engine": engine_json(file, view.metadata()),
    });
    if let Some(m) = view.split() {
        let shards: Vec<Json> = m
            .shards()
            .iter()
            .map(|f| {
                json!({
                    "path": f.path().display().to_string(),
                    "file_size": f.file_size(),
                    "tensors": f.tensors().len(),
                })
            })
            .collect();
        let (no, count) = view.position.unwrap_or_default();
        doc["split"] = json!({"shard": no + 1, "count": count, "total_size": m.total_size(), "shards": shards});
    } else if let Some(e) = view.error() {
        doc["split"] = json!({"error": e});
    }
    doc
}

fn value_text(v: &Value, limit: usize) -> String {
    match v {
        Value::String(s) => format!("{:?}", lossy(s)),
        Value::Array(a) => {
            let shown = value_json(v, limit);
            let mut s = format!("[{} × {}] ", a.elem_type().name(), a.len());
            let body = shown.to_string();
            s.push_str(&body);
            if a.len() > limit {
                let _ = write!(s, " … ({} more)", a.len() - limit);
            }
            s
        }
        other => value_json(other, limit).to_string(),
    }
}

/// Columns are padded to the longest name up to this many characters; longer names
/// overflow their column instead of widening every line.
const MAX_COLUMN: usize = 64;

/// Names longer than this are shown cut, with their length.
const MAX_NAME: usize = 256;

/// A key or tensor name as shown in text: control characters escaped (a file's names
/// must not drive the terminal), cut to [`MAX_NAME`] characters.
fn shown_name(name: &str) -> String {
    shown(name, MAX_NAME)
}

/// `text` with control characters escaped, cut to `max` characters.
fn shown(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            let _ = write!(out, "…({} bytes)", text.len());
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn human_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", U[i])
    }
}

fn human_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2}B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.2}M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.2}K", n as f64 / 1e3),
        n => n.to_string(),
    }
}

/// The architectures this build runs, sorted.
fn known_architectures() -> Vec<&'static str> {
    let mut known: Vec<&str> = gguf_models::architectures().iter().map(|a| a.name).collect();
    known.sort_unstable();
    known
}

/// Whether this build runs the file's `general.architecture`, naming the ones it runs
/// when it does not.
fn engine_line(md: &Metadata) -> String {
    let known = known_architectures();
    match md.get("general.architecture").and_then(|v| v.as_str()) {
        Some(a) if known.contains(&a) => format!("architecture `{a}` runs in this build"),
        Some(a) => format!("architecture `{a}` is not one this build runs (it runs: {})", known.join(", ")),
        None => format!("no general.architecture (this build runs: {})", known.join(", ")),
    }
}

/// The model line's length cap (a description is one line of a few hundred characters; an
/// error may quote names from the file).
const MAX_MODEL_LINE: usize = 1024;

/// The settings of the model the file holds ([`gguf_models::describe`]: a load that reads
/// no weight matrix) or why it does not load; `None` when this build does not run the
/// file's architecture.
fn described(file: &GgufFile, md: &Metadata) -> Option<Result<String, String>> {
    let arch = md.get("general.architecture").and_then(|v| v.as_str())?;
    gguf_models::architectures().iter().any(|a| a.name == arch).then_some(())?;
    let described = SplitGguf::open(file.path())
        .map_err(gguf_models::Error::from)
        .and_then(|m| gguf_models::describe(&std::sync::Arc::new(m)));
    Some(described.map_err(|e| e.to_string()))
}

/// The model line of the text report: [`described`]'s settings, or "does not load: …";
/// `None` when this build does not run the file's architecture (the engine line lists
/// the ones it runs).
fn model_line(file: &GgufFile, md: &Metadata) -> Option<String> {
    Some(match described(file, md)? {
        Ok(text) => shown(&text, MAX_MODEL_LINE),
        Err(e) => shown(&format!("does not load: {e}"), MAX_MODEL_LINE),
    })
}

/// `inspect --json`'s `engine` object: the file's architecture, whether this build runs
/// it, the architectures it runs, and the model's settings (`model`) or why it does not
/// load (`error`).
fn engine_json(file: &GgufFile, md: &Metadata) -> Json {
    let arch = md.get("general.architecture").and_then(|v| v.as_str());
    let known = known_architectures();
    let mut j = json!({
        "architecture": arch,
        "runs": arch.is_some_and(|a| known.contains(&a)),
        "known": known,
    });
    match described(file, md) {
        Some(Ok(text)) => j["model"] = json!(shown(&text, MAX_MODEL_LINE)),
        Some(Err(e)) => j["error"] = json!(shown(&e, MAX_MODEL_LINE)),
        None => {}
    }
    j
}

/// The human-readable report.
pub fn to_text(file: &GgufFile, full: bool) -> String {
    let limit = if full { usize::MAX } else { ARRAY_PREVIEW };
    let view = View::new(file);
    let tensors = view.tensors();
    let mut o = String::new();
    let data = file.file_size().saturating_sub(file.data_offset());
    let _ = writeln!(o, "file:      {}", file.path().display());
    let _ = writeln!(
        o,
        "format:    GGUF v{}, alignment {}, {} metadata keys, {} tensors",
        file.version(),
        file.alignment(),
        view.metadata().len(),
        tensors.len()
    );
    let _ = writeln!(
        o,
        "size:      file {} ({} bytes), header {} bytes, data {} ({} bytes)",
        human_bytes(file.file_size()),
        file.file_size(),
        file.data_offset(),
        human_bytes(data),
        data
    );
    if let Some(m) = view.split() {
        let (no, count) = view.position.unwrap_or_default();
        let total = m.total_size();
        let _ = writeln!(
            o,
            "split:     shard {} of {count}; showing the whole model: {} tensors, {} ({total} bytes) in {count} files",
            no + 1,
            tensors.len(),
            human_bytes(total)
        );
        for (i, f) in m.shards().iter().enumerate() {
            let _ = writeln!(
                o,
                "  {:05}  {:>10}  {:>5} tensors  {}",
                i + 1,
                human_bytes(f.file_size()),
                f.tensors().len(),
                f.path().display()
            );
        }
    } else if let Some(e) = view.error() {
        let _ = writeln!(o, "split:     cannot open the whole model ({e}); showing this file only");
    }
    let _ = writeln!(o, "engine:    {}", engine_line(view.metadata()));
    if let Some(line) = model_line(file, view.metadata()) {
        let _ = writeln!(o, "model:     {line}");
    }
    let _ = writeln!(o, "\nmetadata:");
    let keys: Vec<String> = view.metadata().iter().map(|(k, _)| shown_name(k)).collect();
    let kw = keys.iter().map(|k| k.chars().count()).max().unwrap_or(0).min(MAX_COLUMN);
    for (k, (_, v)) in keys.iter().zip(view.metadata().iter()) {
        let _ = writeln!(o, "  {k:<kw$}  {:<6} {}", v.value_type().name(), value_text(v, limit));
    }
    let _ = writeln!(o, "\ntensors:");
    let names: Vec<String> = tensors.iter().map(|(t, _)| shown_name(&t.name)).collect();
    let nw = names.iter().map(|n| n.chars().count()).max().unwrap_or(4).clamp(4, MAX_COLUMN);
    let split = view.split().is_some();
    let _ = write!(o, "  {:<nw$}  {:<8} {:<24} {:>12} {:>12}", "name", "type", "shape", "offset", "bytes");
    let _ = writeln!(o, "{}", if split { "  shard" } else { "" });
    for (name, (t, shard)) in names.iter().zip(&tensors) {
        let shape = format!("{:?}", t.dims);
        let bytes = t.size.map(|b| b.to_string()).unwrap_or_else(|| "?".into());
        let _ = write!(o, "  {name:<nw$}  {:<8} {:<24} {:>12} {:>12}", t.type_name(), shape, t.offset, bytes);
        let _ = writeln!(o, "{}", shard.map(|n| format!("  {n:>5}")).unwrap_or_default());
    }
    let s = Summary::of_tensors(tensors.iter().map(|(t, _)| *t));
    let _ = writeln!(o, "\ntype mix:");
    for (name, (n, el, b)) in &s.type_mix {
        let share = if s.tensor_bytes > 0 { *b as f64 * 100.0 / s.tensor_bytes as f64 } else { 0.0 };
        let _ = writeln!(
            o,
            "  {name:<8} {n:>5} tensors {:>10} elements {:>12} ({share:5.1}%)",
            human_count(*el),
            human_bytes(*b)
        );
    }
    let _ = writeln!(o, "\nparameters:      {} ({})", human_count(s.parameters), s.parameters);
    let _ = writeln!(o, "bits per weight: {:.3}", s.bits_per_weight());
    if s.unknown_types > 0 {
        let _ = writeln!(o, "warning: {} tensor(s) of a type this build does not know", s.unknown_types);
    }
    o
}
