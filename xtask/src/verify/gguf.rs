//! `cargo xtask verify gguf`: this project's GGUF reading and writing against gguf-py and
//! libggml, and the real models' tensors against ggml's `to_float`.
//!
//! Three readers produce the same JSON schema (that of `gguf inspect --json --full`):
//! our `gguf` binary, `xtask/py/gguf_dump.py` (gguf-py's `GGUFReader`) and
//! [`Ggml::read_gguf`] (libggml's `gguf_init_from_file`). [`compare_dumps`] diffs two of
//! them key by key and tensor by tensor.
//!
//! Checks: (1) inspect vs gguf-py and vs libggml on the three models and every vocab
//! fixture; (2) read → write round trip is byte-identical; (3) a file with every
//! metadata type and a tensor of every registered type, written by `gguf-format`, reads
//! back the same in gguf-py and libggml; (4) every tensor of the three models
//! dequantizes bit-exactly.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value as Json;

use super::{load_ggml, workspace_root, Check, Opts, Report};
use crate::ggml::Ggml;
use crate::{llama_cpp, models};

/// How two dumps are compared.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompareOpts {
    /// Compare shapes with trailing 1s removed (libggml pads to 4 dims).
    pub trim_shape: bool,
    /// Do not compare `data_offset` when there are no tensors (gguf-py pads it to the
    /// alignment, libggml does not); a difference becomes a note.
    pub lax_empty_data_offset: bool,
    /// Compare `file_size`.
    pub file_size: bool,
}

/// The result of comparing two dumps.
#[derive(Debug, Default)]
pub struct Diff {
    /// Things compared: header fields, keys, tensors.
    pub cases: u64,
    /// Things that differed.
    pub mismatches: u64,
    /// Largest numeric difference among differing floats.
    pub max_err: Option<f64>,
    /// The first few differences.
    pub first: Vec<String>,
    /// Remarks that are not mismatches.
    pub notes: Vec<String>,
}

impl Diff {
    fn record(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.cases += 1;
        if !ok {
            self.mismatches += 1;
            if self.first.len() < 3 {
                self.first.push(what());
            }
        }
    }

    /// As a report row.
    pub fn check(self, group: &str, what: &str, extra: &str) -> Check {
        let mut note = self.first.iter().chain(&self.notes).cloned().collect::<Vec<_>>().join("; ");
        if !extra.is_empty() {
            note = if note.is_empty() { extra.to_string() } else { format!("{note}; {extra}") };
        }
        Check::counted(group, what, self.cases, self.mismatches, self.max_err, note)
    }
}

fn short(v: &Json) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}…", &s[..s.char_indices().take_while(|(i, _)| *i < 80).last().map_or(0, |(i, c)| i + c.len_utf8())])
    } else {
        s
    }
}

/// A JSON float or one of the non-finite spellings; `None` for anything else. `null`
/// (how some writers spell a non-finite value) is `Some(NaN)`.
fn as_float(v: &Json) -> Option<f64> {
    match v {
        Json::Number(n) => n.as_f64(),
        Json::Null => Some(f64::NAN),
        Json::String(s) => match s.as_str() {
            "nan" | "NaN" => Some(f64::NAN),
            "inf" | "Infinity" => Some(f64::INFINITY),
            "-inf" | "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// Compares two values of GGUF type `ty` (`element_type` for arrays). Returns the float
/// difference when both are floats that differ.
fn value_eq(ty: &str, elem: Option<&str>, a: &Json, b: &Json) -> Result<(), Option<f64>> {
    match ty {
        "f32" | "f64" => {
            let (Some(x), Some(y)) = (as_float(a), as_float(b)) else { return Err(None) };
            let same = if !x.is_finite() || !y.is_finite() {
                // `null` stands for any non-finite value.
                (x.is_nan() && (a.is_null() || b.is_null())) || x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
            } else if ty == "f32" {
                (x as f32).to_bits() == (y as f32).to_bits()
            } else {
                x.to_bits() == y.to_bits()
            };
            if same {
                Ok(())
            } else {
                Err(Some((x - y).abs()))
            }
        }
        "array" => {
            let (Some(xs), Some(ys)) = (a.as_array(), b.as_array()) else { return Err(None) };
            if xs.len() != ys.len() {
                return Err(None);
            }
            let et = elem.unwrap_or("any");
            let mut worst: Option<f64> = None;
            let mut bad = false;
            for (x, y) in xs.iter().zip(ys) {
                let r = if et == "array" { value_eq("array", Some("any"), x, y) } else { value_eq(et, None, x, y) };
                if let Err(e) = r {
                    bad = true;
                    if let Some(e) = e {
                        worst = Some(worst.map_or(e, |w| w.max(e)));
                    }
                }
            }
            if bad {
                Err(worst)
            } else {
                Ok(())
            }
        }
        // Inside arrays of arrays the inner element type is not in the schema.
        "any" => {
            if a == b {
                return Ok(());
            }
            match (a, b) {
                (Json::Array(_), Json::Array(_)) => value_eq("array", Some("any"), a, b),
                _ if as_float(a).is_some() && as_float(b).is_some() && a.is_number() && b.is_number() => {
                    value_eq("f32", None, a, b)
                }
                _ => Err(None),
            }
        }
        _ => {
            if a == b {
                Ok(())
            } else {
                Err(None)
            }
        }
    }
}

fn trimmed(shape: &Json, trim: bool) -> Vec<u64> {
    let mut v: Vec<u64> = shape.as_array().map(|a| a.iter().filter_map(|x| x.as_u64()).collect()).unwrap_or_default();
    if trim {
        while v.len() > 1 && v.last() == Some(&1) {
            v.pop();
        }
    }
    v
}

/// Diffs two dumps: header fields, every key (in order) with its type and value, every
/// tensor (in order) with its name, type, shape and offset.
pub fn compare_dumps(a: &Json, b: &Json, o: CompareOpts) -> Diff {
    let mut d = Diff::default();
    let n_tensors = a["tensors"].as_array().map_or(0, |t| t.len());
    let mut fields = vec!["version", "alignment"];
    if o.lax_empty_data_offset && n_tensors == 0 {
        // No data section: gguf-py pads the offset to the alignment, libggml does not
        // (gguf.cpp seeks to the aligned offset only when n_tensors > 0). Not compared;
        // a difference is noted.
        if a["data_offset"] != b["data_offset"] {
            d.notes.push(format!("no tensors: data_offset {} vs {} not compared", a["data_offset"], b["data_offset"]));
        }
    } else {
        fields.push("data_offset");
    }
    if o.file_size {
        fields.push("file_size");
    }
    for f in fields {
        if a[f].is_null() || b[f].is_null() {
            continue;
        }
        d.record(a[f] == b[f], || format!("{f}: {} vs {}", a[f], b[f]));
    }
    let empty = Vec::new();
    let ma = a["metadata"].as_array().unwrap_or(&empty);
    let mb = b["metadata"].as_array().unwrap_or(&empty);
    d.record(ma.len() == mb.len(), || format!("{} keys vs {}", ma.len(), mb.len()));
    for (x, y) in ma.iter().zip(mb) {
        let key = x["key"].as_str().unwrap_or("?");
        if x["key"] != y["key"] {
            d.record(false, || format!("key {} vs {}", x["key"], y["key"]));
            continue;
        }
        if x["type"] != y["type"] || x.get("element_type") != y.get("element_type") {
            d.record(false, || {
                format!("{key}: type {}/{} vs {}/{}", x["type"], x["element_type"], y["type"], y["element_type"])
            });
            continue;
        }
        let ty = x["type"].as_str().unwrap_or("");
        match value_eq(ty, x["element_type"].as_str(), &x["value"], &y["value"]) {
            Ok(()) => d.record(true, String::new),
            Err(e) => {
                if let Some(e) = e {
                    d.max_err = Some(d.max_err.map_or(e, |m| m.max(e)));
                }
                d.record(false, || format!("{key}: {} vs {}", short(&x["value"]), short(&y["value"])))
            }
        }
    }
    let ta = a["tensors"].as_array().unwrap_or(&empty);
    let tb = b["tensors"].as_array().unwrap_or(&empty);
    d.record(ta.len() == tb.len(), || format!("{} tensors vs {}", ta.len(), tb.len()));
    for (x, y) in ta.iter().zip(tb) {
        let name = x["name"].as_str().unwrap_or("?");
        let type_name_ok = match (x["type"].as_str(), y["type"].as_str()) {
            (Some(p), Some(q)) if !p.is_empty() && !q.is_empty() => p.eq_ignore_ascii_case(q),
            _ => true,
        };
        let ok = x["name"] == y["name"]
            && x["type_id"] == y["type_id"]
            && type_name_ok
            && trimmed(&x["shape"], o.trim_shape) == trimmed(&y["shape"], o.trim_shape)
            && x["offset"] == y["offset"]
            && (x["bytes"].is_null() || y["bytes"].is_null() || x["bytes"] == y["bytes"]);
        d.record(ok, || {
            format!(
                "tensor {name}: {} {} {} @{} vs {} {} {} @{}",
                x["name"], x["type"], x["shape"], x["offset"], y["name"], y["type"], y["shape"], y["offset"]
            )
        });
    }
    d
}

/// gguf-py, set up: the python to run and the `PYTHONPATH` that selects llama.cpp's own
/// gguf-py (the version matching the built llama.cpp) when the source tree has it.
pub struct PyReader {
    python: String,
    pythonpath: Option<PathBuf>,
    script: PathBuf,
}

impl PyReader {
    /// Makes sure `import gguf` works (`pip install gguf` if not; it brings numpy).
    pub fn setup(cache: &Path) -> Result<Self> {
        let python = models::python();
        let works = |pp: Option<&Path>| {
            let mut c = Command::new(&python);
            c.args(["-c", "import gguf, numpy"]);
            if let Some(pp) = pp {
                c.env("PYTHONPATH", pp);
            }
            c.output().is_ok_and(|o| o.status.success())
        };
        if !works(None) {
            eprintln!("pip install gguf");
            let st = Command::new(&python)
                .args(["-m", "pip", "install", "--disable-pip-version-check", "gguf"])
                .status()
                .context("running pip")?;
            ensure!(st.success(), "pip install gguf failed");
        }
        let src_py = llama_cpp::src_dir(cache).join("gguf-py");
        let pythonpath = (src_py.join("gguf").is_dir() && works(Some(&src_py))).then_some(src_py);
        let script = workspace_root().join("xtask/py/gguf_dump.py");
        ensure!(script.is_file(), "{} is missing", script.display());
        Ok(PyReader { python, pythonpath, script })
    }

    /// Dumps `file` with gguf-py into `out` and parses it.
    pub fn dump(&self, file: &Path, out: &Path) -> Result<Json> {
        let mut c = Command::new(&self.python);
        c.arg(&self.script).arg(file).arg(out);
        if let Some(pp) = &self.pythonpath {
            c.env("PYTHONPATH", pp);
        }
        let o = c.output().context("running gguf_dump.py")?;
        if !o.status.success() {
            let err = String::from_utf8_lossy(&o.stderr);
            bail!("gguf-py failed on {}: {}", file.display(), err.lines().last().unwrap_or(""));
        }
        read_json(out)
    }
}

fn read_json(path: &Path) -> Result<Json> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The `target` directory (honours `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// `cargo build --release -p gguf-cli`; returns `target/release/gguf`.
pub fn build_cli() -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("cargo build --release -p gguf-cli");
    let st = Command::new(cargo)
        .args(["build", "--release", "-p", "gguf-cli"])
        .current_dir(workspace_root())
        .status()
        .context("running cargo")?;
    ensure!(st.success(), "cargo build --release -p gguf-cli failed");
    let bin = target_dir().join("release").join("gguf");
    ensure!(bin.is_file(), "{} not found after the build", bin.display());
    Ok(bin)
}

/// `gguf inspect --json --full FILE`, parsed.
pub fn inspect(bin: &Path, file: &Path) -> Result<Json> {
    let o = Command::new(bin).args(["inspect", "--json", "--full"]).arg(file).output().context("running gguf")?;
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        bail!("gguf inspect failed ({}): {}", o.status, err.lines().last().unwrap_or(""));
    }
    serde_json::from_slice(&o.stdout).context("parsing gguf inspect's JSON")
}

/// The files checked: the three models, then every vocab fixture.
fn files(cache: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for m in models::MODELS {
        out.push((m.name.to_string(), models::ensure_model(m)?));
    }
    for v in models::ensure_vocab(cache)? {
        let name = v.file_name().unwrap().to_string_lossy().trim_end_matches(".gguf").to_string();
        out.push((name, v));
    }
    Ok(out)
}

/// A scratch directory under `target/xtask-verify`.
pub fn scratch() -> Result<PathBuf> {
    let d = target_dir().join("xtask-verify");
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// `cargo xtask verify gguf`.
pub fn run(cache: &Path, opts: &Opts, report: &mut Report) -> Result<()> {
    let ggml = load_ggml(cache)?;
    let files = files(cache)?;
    let tmp = scratch()?;
    let py = PyReader::setup(cache);
    if let Ok(p) = &py {
        report.note(format!(
            "gguf-py: {}",
            p.pythonpath.as_ref().map_or("the pip-installed package".into(), |p| p.display().to_string())
        ));
    }
    let cli = build_cli();

    // (1) inspect vs gguf-py and vs libggml.
    for (name, path) in &files {
        let ours = match &cli {
            Ok(bin) => inspect(bin, path),
            Err(e) => Err(anyhow::anyhow!("{e:#}")),
        };
        let theirs_py = match &py {
            Ok(p) => p.dump(path, &tmp.join(format!("{name}.py.json"))),
            Err(e) => Err(anyhow::anyhow!("gguf-py unavailable: {e:#}")),
        };
        let theirs_ggml = ggml.read_gguf(path);
        match (&ours, &theirs_py) {
            (Ok(a), Ok(b)) => {
                let o = CompareOpts { lax_empty_data_offset: true, file_size: true, ..Default::default() };
                report.push(compare_dumps(a, b, o).check("inspect vs gguf-py", name, ""));
            }
            (Err(e), _) | (_, Err(e)) => report.push(Check::error("inspect vs gguf-py", name, e)),
        }
        match (&ours, &theirs_ggml) {
            (Ok(a), Ok(b)) => {
                let o = CompareOpts { trim_shape: true, file_size: true, lax_empty_data_offset: false };
                report.push(compare_dumps(a, b, o).check("inspect vs libggml", name, ""));
            }
            (Err(e), _) | (_, Err(e)) => report.push(Check::error("inspect vs libggml", name, e)),
        }
    }

    // (2) round trip, (3) writer.
    for (name, path) in &files {
        report.push(super::gguf_api::round_trip(name, path, &tmp));
    }
    for c in super::gguf_api::writer_checks(&ggml, py.as_ref().ok(), cli.as_ref().ok(), &tmp, opts) {
        report.push(c);
    }

    // (4) every model tensor dequantizes bit-exactly.
    for m in models::MODELS {
        let path = models::model_path(cache, m);
        match model_tensors(&ggml, &path) {
            Ok(checks) => checks.into_iter().for_each(|c| report.push(c.with_prefix(m.name))),
            Err(e) => report.push(Check::error("model tensors", m.name, e)),
        }
    }
    Ok(())
}

impl Check {
    fn with_prefix(mut self, p: &str) -> Self {
        self.what = format!("{p} {}", self.what);
        self
    }
}

/// (4) Decodes every tensor of a model with ggml-quants and with ggml's `to_float` (plain
/// conversion for f32), in chunks, and compares the bits. One check per tensor type.
pub fn model_tensors(ggml: &Ggml, path: &Path) -> Result<Vec<Check>> {
    const GROUP: &str = "model tensors";
    let dump = ggml.read_gguf(path)?;
    let data_offset = dump["data_offset"].as_u64().context("data_offset")?;
    let file = File::open(path)?;
    // type id -> (tensors, elements, mismatching tensors, max err, first note)
    let mut per_type: std::collections::BTreeMap<u32, (u64, u64, u64, Option<f64>, String)> = Default::default();
    for t in dump["tensors"].as_array().context("tensors")? {
        let id = t["type_id"].as_u64().context("type_id")? as u32;
        let name = t["name"].as_str().unwrap_or("?");
        let offset = t["offset"].as_u64().context("offset")?;
        let bytes = t["bytes"].as_u64().context("bytes")?;
        let entry = per_type.entry(id).or_insert((0, 0, 0, None, String::new()));
        entry.0 += 1;
        let Some(ours) = ggml_quants::by_id(id) else { continue };
        let Some(g) = ggml.type_info(id) else { continue };
        ensure!(ours.type_size == g.type_size && ours.block_size == g.block_size, "{}: layout differs", g.name);
        let blocks = bytes / g.type_size as u64;
        let chunk_blocks = ((1 << 22) / g.block_size).max(1) as u64;
        let mut bad = false;
        let mut done = 0u64;
        while done < blocks {
            let nb = chunk_blocks.min(blocks - done);
            let mut buf = vec![0u8; (nb as usize) * g.type_size];
            file.read_exact_at(&mut buf, data_offset + offset + done * g.type_size as u64)?;
            let n = nb as usize * g.block_size;
            let mut want = vec![0f32; n];
            if g.to_float_source.is_some() {
                ggml.to_float(id, &buf, &mut want)?;
            } else if g.name == "f32" {
                for (w, b) in want.iter_mut().zip(buf.chunks_exact(4)) {
                    *w = f32::from_le_bytes(b.try_into().unwrap());
                }
            } else {
                bail!("{}: no reference decoder", g.name);
            }
            let mut got = vec![0f32; n];
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ours.dequantize(&buf, &mut got)));
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => bail!("{name}: {e}"),
                Err(_) => bail!("{name}: dequantize panicked"),
            }
            for (i, (w, o)) in want.iter().zip(&got).enumerate() {
                if w.to_bits() != o.to_bits() {
                    let e = (*w as f64 - *o as f64).abs();
                    entry.3 = Some(entry.3.map_or(e, |m: f64| m.max(if e.is_nan() { f64::INFINITY } else { e })));
                    if !bad && entry.4.is_empty() {
                        entry.4 = format!(
                            "first: {name} element {}: ours {o:e} ggml {w:e}",
                            done as usize * g.block_size + i
                        );
                    }
                    bad = true;
                }
            }
            done += nb;
        }
        entry.1 += blocks * g.block_size as u64;
        if bad {
            entry.2 += 1;
        }
    }
    let mut out = Vec::new();
    for (id, (tensors, elements, bad, max_err, first)) in per_type {
        let name = ggml.type_info(id).map_or(format!("type {id}"), |g| g.name.clone());
        if ggml_quants::by_id(id).is_none() {
            out.push(Check::skip(GROUP, &name, format!("{tensors} tensors; type not registered")));
            continue;
        }
        let note =
            if first.is_empty() { format!("{elements} elements") } else { format!("{first}; {elements} elements") };
        out.push(Check::counted(GROUP, &name, tensors, bad, max_err, note));
    }
    Ok(out)
}
