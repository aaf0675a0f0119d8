//! The `verify gguf` checks that call the `gguf-format` API directly: (2) the read →
//! write round trip and (3) a file written with every metadata value type and a tensor of
//! every registered type. Everything else in `verify gguf` only runs programs or libggml,
//! so this is the one module to adapt when that API changes.

use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use gguf_format::{Array, GgufFile, GgufWriter, Value};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use serde_json::{json, Value as Json};

use super::gguf::{compare_dumps, inspect, CompareOpts, PyReader};
use super::quants::gaussian;
use super::{Check, Opts};
use crate::ggml::{f64_json, Ggml};

/// (2) `GgufFile::open` then `GgufWriter::from_file(..).write_to_path(..)` must give the
/// same bytes.
pub fn round_trip(name: &str, path: &Path, tmp: &Path) -> Check {
    const GROUP: &str = "round trip";
    let out = tmp.join(format!("{name}.roundtrip.gguf"));
    let r = (|| -> Result<Option<String>> {
        let file = GgufFile::open(path).with_context(|| format!("GgufFile::open({})", path.display()))?;
        GgufWriter::from_file(&file)?.write_to_path(&out)?;
        drop(file);
        first_difference(path, &out)
    })();
    let _ = std::fs::remove_file(&out);
    match r {
        Ok(None) => Check::counted(GROUP, name, 1, 0, None, format!("{} bytes identical", file_len(path))),
        Ok(Some(d)) => Check::counted(GROUP, name, 1, 1, None, d),
        Err(e) => Check::error(GROUP, name, e),
    }
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// `None` when the files are identical, else where they first differ.
pub fn first_difference(a: &Path, b: &Path) -> Result<Option<String>> {
    let (la, lb) = (file_len(a), file_len(b));
    let mut ra = BufReader::with_capacity(1 << 20, File::open(a)?);
    let mut rb = BufReader::with_capacity(1 << 20, File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut pos = 0u64;
    loop {
        let na = read_full(&mut ra, &mut ba)?;
        let nb = read_full(&mut rb, &mut bb)?;
        let n = na.min(nb);
        if let Some(i) = (0..n).find(|&i| ba[i] != bb[i]) {
            return Ok(Some(format!("first difference at byte {} (sizes {la} vs {lb})", pos + i as u64)));
        }
        if na != nb {
            return Ok(Some(format!("sizes {la} vs {lb}, equal up to byte {}", pos + n as u64)));
        }
        if na == 0 {
            return Ok(None);
        }
        pos += n as u64;
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let k = r.read(&mut buf[n..])?;
        if k == 0 {
            break;
        }
        n += k;
    }
    Ok(n)
}

/// A metadata value as the test writes it, convertible both to `gguf_format::Value` and
/// to the expected JSON.
#[derive(Debug, Clone)]
enum Meta {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(&'static str),
    /// Element type name and items.
    Arr(&'static str, Vec<Meta>),
}

impl Meta {
    fn type_name(&self) -> &'static str {
        match self {
            Meta::U8(_) => "u8",
            Meta::I8(_) => "i8",
            Meta::U16(_) => "u16",
            Meta::I16(_) => "i16",
            Meta::U32(_) => "u32",
            Meta::I32(_) => "i32",
            Meta::U64(_) => "u64",
            Meta::I64(_) => "i64",
            Meta::F32(_) => "f32",
            Meta::F64(_) => "f64",
            Meta::Bool(_) => "bool",
            Meta::Str(_) => "string",
            Meta::Arr(..) => "array",
        }
    }

    fn json(&self) -> Json {
        match self {
            Meta::U8(x) => json!(x),
            Meta::I8(x) => json!(x),
            Meta::U16(x) => json!(x),
            Meta::I16(x) => json!(x),
            Meta::U32(x) => json!(x),
            Meta::I32(x) => json!(x),
            Meta::U64(x) => json!(x),
            Meta::I64(x) => json!(x),
            Meta::F32(x) => f64_json(*x as f64),
            Meta::F64(x) => f64_json(*x),
            Meta::Bool(x) => json!(x),
            Meta::Str(s) => json!(s),
            Meta::Arr(_, items) => Json::Array(items.iter().map(Meta::json).collect()),
        }
    }

    /// Encoded size in a GGUF file (after the key and the type tag).
    fn encoded_len(&self) -> u64 {
        match self {
            Meta::U8(_) | Meta::I8(_) | Meta::Bool(_) => 1,
            Meta::U16(_) | Meta::I16(_) => 2,
            Meta::U32(_) | Meta::I32(_) | Meta::F32(_) => 4,
            Meta::U64(_) | Meta::I64(_) | Meta::F64(_) => 8,
            Meta::Str(s) => 8 + s.len() as u64,
            // element type + count + elements (an inner array repeats its own header)
            Meta::Arr(_, items) => 12 + items.iter().map(Meta::encoded_len).sum::<u64>(),
        }
    }

    fn value(&self) -> Value {
        match self {
            Meta::U8(x) => Value::U8(*x),
            Meta::I8(x) => Value::I8(*x),
            Meta::U16(x) => Value::U16(*x),
            Meta::I16(x) => Value::I16(*x),
            Meta::U32(x) => Value::U32(*x),
            Meta::I32(x) => Value::I32(*x),
            Meta::U64(x) => Value::U64(*x),
            Meta::I64(x) => Value::I64(*x),
            Meta::F32(x) => Value::F32(*x),
            Meta::F64(x) => Value::F64(*x),
            Meta::Bool(x) => Value::Bool(*x),
            Meta::Str(s) => Value::String(s.as_bytes().to_vec()),
            Meta::Arr(et, items) => Value::Array(array(et, items)),
        }
    }
}

fn array(et: &str, items: &[Meta]) -> Array {
    macro_rules! typed {
        ($variant:ident) => {
            Array::$variant(
                items.iter().map(|m| if let Meta::$variant(x) = m { *x } else { unreachable!("{m:?}") }).collect(),
            )
        };
    }
    match et {
        "u8" => typed!(U8),
        "i8" => typed!(I8),
        "u16" => typed!(U16),
        "i16" => typed!(I16),
        "u32" => typed!(U32),
        "i32" => typed!(I32),
        "u64" => typed!(U64),
        "i64" => typed!(I64),
        "f32" => typed!(F32),
        "f64" => typed!(F64),
        "bool" => typed!(Bool),
        "string" => Array::String(
            items.iter().map(|m| if let Meta::Str(s) = m { s.as_bytes().to_vec() } else { unreachable!() }).collect(),
        ),
        "array" => Array::Array(
            items.iter().map(|m| if let Meta::Arr(e, i) = m { array(e, i) } else { unreachable!() }).collect(),
        ),
        other => unreachable!("element type {other}"),
    }
}

/// Every scalar type, edge values, and an array of every element type.
fn metadata(nested: bool) -> Vec<(&'static str, Meta)> {
    use Meta::*;
    let mut v = vec![
        ("general.architecture", Str("xtask-test")),
        ("test.u8", U8(u8::MAX)),
        ("test.i8", I8(i8::MIN)),
        ("test.u16", U16(u16::MAX)),
        ("test.i16", I16(i16::MIN)),
        ("test.u32", U32(u32::MAX)),
        ("test.i32", I32(i32::MIN)),
        ("test.u64", U64(u64::MAX)),
        ("test.i64", I64(i64::MIN)),
        ("test.f32", F32(std::f32::consts::PI)),
        ("test.f32.subnormal", F32(f32::from_bits(1))),
        ("test.f32.neg_zero", F32(-0.0)),
        ("test.f32.max", F32(f32::MAX)),
        ("test.f64", F64(std::f64::consts::E)),
        ("test.f64.big", F64(1e300)),
        ("test.bool.true", Bool(true)),
        ("test.bool.false", Bool(false)),
        ("test.string", Str("hello, gguf")),
        ("test.string.empty", Str("")),
        ("test.string.utf8", Str("héllo ✓ 🦙 日本語")),
        ("test.arr.u8", Arr("u8", vec![U8(0), U8(1), U8(255)])),
        ("test.arr.i8", Arr("i8", vec![I8(-128), I8(0), I8(127)])),
        ("test.arr.u16", Arr("u16", vec![U16(0), U16(65535)])),
        ("test.arr.i16", Arr("i16", vec![I16(-32768), I16(32767)])),
        ("test.arr.u32", Arr("u32", vec![U32(0), U32(1), U32(u32::MAX)])),
        ("test.arr.i32", Arr("i32", vec![I32(i32::MIN), I32(-1), I32(i32::MAX)])),
        ("test.arr.u64", Arr("u64", vec![U64(0), U64(u64::MAX)])),
        ("test.arr.i64", Arr("i64", vec![I64(i64::MIN), I64(i64::MAX)])),
        ("test.arr.f32", Arr("f32", vec![F32(0.1), F32(-2.5e-8), F32(1e30)])),
        ("test.arr.f64", Arr("f64", vec![F64(0.1), F64(-1e-300)])),
        ("test.arr.bool", Arr("bool", vec![Bool(true), Bool(false), Bool(true)])),
        ("test.arr.string", Arr("string", vec![Str("a"), Str(""), Str("ü🦙")])),
        ("test.arr.empty", Arr("u32", vec![])),
    ];
    if nested {
        v.push((
            "test.arr.nested",
            Arr(
                "array",
                vec![
                    Arr("u32", vec![U32(1), U32(2)]),
                    Arr("string", vec![Str("x"), Str("yz")]),
                    Arr("array", vec![Arr("f32", vec![F32(0.5)]), Arr("i8", vec![])]),
                ],
            ),
        ));
    }
    v
}

struct TestTensor {
    name: String,
    dims: Vec<u64>,
    type_id: u32,
    type_name: &'static str,
    data: Vec<u8>,
    how: &'static str,
}

/// One small tensor of every registered type: gaussian data through `quantize_rows` (or
/// `quantize_ref`) where one exists, random bytes otherwise; plus 3-d and 4-d f32 shapes.
fn tensors(seed: u64) -> Vec<TestTensor> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6767_7566);
    let mut out = Vec::new();
    for t in ggml_quants::all() {
        let ne0 = if 256 % t.block_size == 0 { 256 } else { t.block_size };
        let rows = 2usize;
        let bytes = t.row_size(ne0).unwrap_or(0) * rows;
        let mut how = "random bytes (no quantizer)";
        let mut data = None;
        if t.quantize_rows_fn.is_some() {
            let src: Vec<f32> = (0..ne0 * rows).map(|_| gaussian(&mut rng)).collect();
            let im: Option<Vec<f32>> = t.requires_imatrix.then(|| vec![1.0; ne0]);
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.quantize_to_vec(&src, ne0, im.as_deref())));
            if let Ok(Ok(d)) = r {
                data = Some(d);
                how = "quantize_rows";
            } else {
                how = "random bytes (quantize_rows failed)";
            }
        } else if t.quantize_ref_fn.is_some() {
            let src: Vec<f32> = (0..ne0 * rows).map(|_| gaussian(&mut rng)).collect();
            let mut d = vec![0u8; bytes];
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.quantize_ref(&src, &mut d)));
            if let Ok(Ok(())) = r {
                data = Some(d);
                how = "quantize_ref";
            } else {
                how = "random bytes (quantize_ref failed)";
            }
        }
        let data = data.unwrap_or_else(|| {
            let mut d = vec![0u8; bytes];
            rng.fill_bytes(&mut d);
            d
        });
        out.push(TestTensor {
            name: format!("tensor.{}", t.name),
            dims: vec![ne0 as u64, rows as u64],
            type_id: t.id,
            type_name: t.name,
            data,
            how,
        });
    }
    if let Some(f32t) = ggml_quants::by_id(0) {
        for dims in [vec![8u64, 3, 2], vec![4, 1, 1, 2]] {
            let n: u64 = dims.iter().product();
            let data: Vec<u8> = (0..n).flat_map(|i| (i as f32 * 0.25).to_le_bytes()).collect();
            let name = format!("shape.{}d", dims.len());
            out.push(TestTensor { name, dims, type_id: 0, type_name: f32t.name, data, how: "f32" });
        }
    }
    out
}

fn align(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// Writes a test file and returns the JSON every reader should produce.
fn write_test_file(path: &Path, nested: bool, alignment: Option<u32>, tensors: &[TestTensor]) -> Result<Json> {
    let mut meta: Vec<(&str, Meta)> = Vec::new();
    let mut w = GgufWriter::new();
    if let Some(a) = alignment {
        w = w.with_alignment(a);
        meta.push(("general.alignment", Meta::U32(a)));
    }
    meta.extend(metadata(nested));
    for (k, v) in &meta {
        if *k != "general.alignment" {
            w.add_kv(k, v.value());
        }
    }
    for t in tensors {
        w.add_tensor(&t.name, &t.dims, t.type_id, &t.data).with_context(|| format!("add_tensor {}", t.name))?;
    }
    w.write_to_path(path)?;

    let align_to = alignment.unwrap_or(32) as u64;
    let mut header = 4 + 4 + 8 + 8;
    for (k, v) in &meta {
        header += 8 + k.len() as u64 + 4 + v.encoded_len();
    }
    let mut offset = 0u64;
    let mut tjson = Vec::new();
    for t in tensors {
        header += 8 + t.name.len() as u64 + 4 + 8 * t.dims.len() as u64 + 4 + 8;
        tjson.push(json!({
            "name": t.name, "type": t.type_name, "type_id": t.type_id, "shape": t.dims,
            "offset": offset, "bytes": t.data.len(),
        }));
        offset = align(offset + t.data.len() as u64, align_to);
    }
    let metadata: Vec<Json> = meta
        .iter()
        .map(|(k, v)| {
            let mut m = serde_json::Map::new();
            m.insert("key".into(), json!(k));
            m.insert("type".into(), json!(v.type_name()));
            if let Meta::Arr(et, _) = v {
                m.insert("element_type".into(), json!(et));
            }
            m.insert("value".into(), v.json());
            Json::Object(m)
        })
        .collect();
    Ok(json!({
        "version": 3,
        "alignment": align_to,
        "data_offset": align(header, align_to),
        "metadata": metadata,
        "tensors": tjson,
    }))
}

/// Reads every tensor's bytes back at `data_offset + offset` and compares.
fn check_tensor_bytes(path: &Path, expected: &Json, tensors: &[TestTensor]) -> Result<(u64, u64, String)> {
    let f = File::open(path)?;
    let data_offset = expected["data_offset"].as_u64().context("data_offset")?;
    let (mut bad, mut first) = (0u64, String::new());
    for (t, j) in tensors.iter().zip(expected["tensors"].as_array().context("tensors")?) {
        let mut buf = vec![0u8; t.data.len()];
        let ok = f.read_exact_at(&mut buf, data_offset + j["offset"].as_u64().unwrap_or(0)).is_ok() && buf == t.data;
        if !ok {
            bad += 1;
            if first.is_empty() {
                first = format!("first: {}", t.name);
            }
        }
    }
    Ok((tensors.len() as u64, bad, first))
}

/// (3) Writes `all-types.gguf` (every scalar and array type, alignment 64, a tensor of
/// every registered type) and `nested-arrays.gguf` (adds an array of arrays), then reads
/// them back with gguf-py, libggml (which rejects nested arrays) and `gguf inspect`.
pub fn writer_checks(ggml: &Ggml, py: Option<&PyReader>, cli: Option<&PathBuf>, tmp: &Path, opts: &Opts) -> Vec<Check> {
    const GROUP: &str = "writer";
    let mut out = Vec::new();
    let tensors = tensors(opts.seed);
    let how: Vec<String> = {
        let mut h: Vec<&str> = tensors.iter().map(|t| t.how).collect();
        h.sort_unstable();
        h.dedup();
        h.iter().map(|k| format!("{} {k}", tensors.iter().filter(|t| t.how == *k).count())).collect()
    };
    for (label, nested, alignment) in [("all-types", false, Some(64u32)), ("nested-arrays", true, None)] {
        let path = tmp.join(format!("{label}.gguf"));
        let expected = match write_test_file(&path, nested, alignment, &tensors) {
            Ok(e) => e,
            Err(e) => {
                out.push(Check::error(GROUP, &format!("{label}: write"), e));
                continue;
            }
        };
        let cmp = CompareOpts::default();
        match py.map(|p| p.dump(&path, &tmp.join(format!("{label}.py.json")))) {
            Some(Ok(d)) => out.push(compare_dumps(&d, &expected, cmp).check(GROUP, &format!("{label}: gguf-py"), "")),
            Some(Err(e)) => out.push(Check::error(GROUP, &format!("{label}: gguf-py"), e)),
            None => out.push(Check::skip(GROUP, &format!("{label}: gguf-py"), "gguf-py unavailable")),
        }
        let ggml_read = ggml.read_gguf(&path);
        if nested {
            out.push(match ggml_read {
                Err(_) => Check::counted(
                    GROUP,
                    &format!("{label}: libggml"),
                    1,
                    0,
                    None,
                    "rejected, as llama.cpp's gguf does for arrays of arrays".into(),
                ),
                Ok(d) => compare_dumps(&d, &expected, CompareOpts { trim_shape: true, ..cmp }).check(
                    GROUP,
                    &format!("{label}: libggml"),
                    "accepted nested arrays",
                ),
            });
        } else {
            out.push(match ggml_read {
                Ok(d) => compare_dumps(&d, &expected, CompareOpts { trim_shape: true, ..cmp }).check(
                    GROUP,
                    &format!("{label}: libggml"),
                    "",
                ),
                Err(e) => Check::error(GROUP, &format!("{label}: libggml"), e),
            });
        }
        match cli.map(|bin| inspect(bin, &path)) {
            Some(Ok(d)) => {
                out.push(compare_dumps(&d, &expected, cmp).check(GROUP, &format!("{label}: gguf inspect"), ""))
            }
            Some(Err(e)) => out.push(Check::error(GROUP, &format!("{label}: gguf inspect"), e)),
            None => out.push(Check::skip(GROUP, &format!("{label}: gguf inspect"), "gguf binary unavailable")),
        }
        out.push(match check_tensor_bytes(&path, &expected, &tensors) {
            Ok((n, bad, first)) => {
                let note = if first.is_empty() { how.join(", ") } else { first };
                Check::counted(GROUP, &format!("{label}: tensor data"), n, bad, None, note)
            }
            Err(e) => Check::error(GROUP, &format!("{label}: tensor data"), e),
        });
    }
    out
}
