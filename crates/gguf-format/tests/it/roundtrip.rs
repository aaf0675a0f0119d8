//! Write → parse → write: every metadata value type, every registered tensor type,
//! several alignments; the writer's checks; atomic `write_to_path`.

use std::io::{self, Write};
use std::path::Path;

use gguf_format::{
    Array, Error, Gguf, GgufFile, GgufWriter, TensorSource, Value, ValueType, DEFAULT_ALIGNMENT, KEY_ALIGNMENT,
    MAX_ARRAY_DEPTH,
};

use crate::raw::{encode_value, noise};

const F32: u32 = 0;
const F16: u32 = 1;
const Q8_0: u32 = 8;

/// All 13 value types as GGUF value-type ids.
fn all_value_types() -> Vec<ValueType> {
    (0..=12).map(|i| ValueType::from_u32(i).expect("valid id")).collect()
}

/// An array nested `depth` levels deep (depth 1 is a flat array).
fn nested(depth: usize) -> Array {
    let mut a = Array::U16(vec![1, 2, 3]);
    for _ in 1..depth {
        a = Array::Array(vec![a, Array::empty(ValueType::I8)]);
    }
    a
}

/// Key/value pairs covering every value type, edge values, empty and nested arrays.
fn all_values() -> Vec<(String, Value)> {
    let mut kv: Vec<(String, Value)> = vec![
        ("general.architecture".into(), "llama".into()),
        ("u8.min".into(), Value::U8(0)),
        ("u8.max".into(), Value::U8(u8::MAX)),
        ("i8.min".into(), Value::I8(i8::MIN)),
        ("i8.max".into(), Value::I8(i8::MAX)),
        ("u16".into(), Value::U16(0xBEEF)),
        ("i16".into(), Value::I16(-12345)),
        ("u32".into(), Value::U32(u32::MAX)),
        ("i32".into(), Value::I32(i32::MIN)),
        ("f32".into(), Value::F32(1.5)),
        ("f32.neg_zero".into(), Value::F32(-0.0)),
        ("f32.inf".into(), Value::F32(f32::NEG_INFINITY)),
        ("f32.nan".into(), Value::F32(f32::from_bits(0x7fc0_1234))),
        ("f32.subnormal".into(), Value::F32(f32::from_bits(1))),
        ("bool.true".into(), Value::Bool(true)),
        ("bool.false".into(), Value::Bool(false)),
        ("u64".into(), Value::U64(u64::MAX)),
        ("i64".into(), Value::I64(i64::MIN)),
        ("f64".into(), Value::F64(std::f64::consts::PI)),
        ("f64.nan".into(), Value::F64(f64::from_bits(0xfff8_0000_dead_beef))),
        ("string.empty".into(), "".into()),
        ("string.unicode".into(), "héllo ✓ 🦙".into()),
        ("string.not_utf8".into(), Value::String(b"\xff\xfe\x00ab\xc3(".to_vec())),
        ("".into(), "an empty key is legal".into()),
    ];
    for t in all_value_types() {
        kv.push((format!("array.empty.{}", t.name()), Value::Array(Array::empty(t))));
    }
    let arrays = [
        Array::U8(vec![0, 1, 255]),
        Array::I8(vec![-128, 0, 127]),
        Array::U16(vec![0, 65535]),
        Array::I16(vec![-32768, 1, 32767]),
        Array::U32(vec![0, 7, u32::MAX]),
        Array::I32(vec![i32::MIN, -1, i32::MAX]),
        Array::F32(vec![1.0, -0.0, f32::INFINITY, f32::from_bits(0xffc0_0001)]),
        Array::Bool(vec![true, false, true]),
        Array::String(vec![b"a".to_vec(), Vec::new(), b"\x80\x81 not utf8".to_vec(), "ü".as_bytes().to_vec()].into()),
        Array::Array(vec![
            Array::U32(vec![1, 2]),
            Array::String(vec![b"x".to_vec()].into()),
            Array::Array(vec![Array::Bool(vec![false]), Array::empty(ValueType::Array)]),
            Array::empty(ValueType::F64),
        ]),
        Array::U64(vec![0, u64::MAX]),
        Array::I64(vec![i64::MIN, 0, i64::MAX]),
        Array::F64(vec![0.1, f64::MIN_POSITIVE, f64::NAN]),
    ];
    for a in arrays {
        kv.push((format!("array.{}", a.elem_type().name()), Value::Array(a)));
    }
    kv.push(("array.nested.max_depth".into(), Value::Array(nested(MAX_ARRAY_DEPTH))));
    let vocab: Vec<Vec<u8>> = (0..300).map(|i| format!("tok{i}").into_bytes()).collect();
    kv.push(("tokenizer.ggml.tokens".into(), Value::Array(Array::String(vocab.into()))));
    kv
}

/// One tensor to write: name, dims, type id, data.
struct T {
    name: String,
    dims: Vec<u64>,
    type_id: u32,
    data: Vec<u8>,
}

fn tensor(name: &str, dims: &[u64], type_id: u32, seed: u64) -> T {
    let t = ggml_quants::by_id(type_id).expect("registered type");
    let n: u64 = dims.iter().product();
    let size = t.bytes_for(n).expect("whole blocks") as usize;
    T { name: name.into(), dims: dims.to_vec(), type_id, data: noise(size, seed) }
}

/// A tensor of every registered type, plus odd shapes.
fn all_tensors() -> Vec<T> {
    let mut v = Vec::new();
    for (i, t) in ggml_quants::all().iter().enumerate() {
        let bs = t.block_size as u64;
        v.push(tensor(&format!("blk.{i}.{}", t.name), &[bs * 2, 3], t.id, i as u64 + 1));
    }
    v.push(tensor("scalar", &[], F32, 100));
    v.push(tensor("odd.f16", &[7], F16, 101));
    v.push(tensor("four.dims", &[2, 3, 1, 2], F32, 102));
    v.push(tensor("empty.rows", &[4, 0], F32, 103));
    v.push(tensor("q8.matrix", &[64, 5], Q8_0, 104));
    v.push(tensor("after.empty", &[1], F32, 105));
    v
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// Builds a file with every value and tensor, then checks it thoroughly.
fn roundtrip(alignment: Option<u32>, version: u32) {
    let kv = all_values();
    let tensors = all_tensors();
    let mut w = GgufWriter::new().with_version(version);
    for (i, (k, v)) in kv.iter().enumerate() {
        // Put general.alignment in the middle of the metadata.
        if i == 3 {
            if let Some(a) = alignment {
                w = w.with_alignment(a);
            }
        }
        w.add_kv(k, v.clone());
    }
    for t in &tensors {
        w.add_tensor(&t.name, &t.dims, t.type_id, &t.data).expect("valid tensor");
    }
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).expect("write");

    let align = alignment.map_or(DEFAULT_ALIGNMENT, u64::from);
    let g = Gguf::parse(&bytes).expect("parse");
    assert_eq!(g.version(), version);
    assert_eq!(g.alignment(), align);
    assert_eq!(g.data_offset() % align, 0);
    assert_eq!(g.data_offset(), align_up(g.header_end(), align));
    assert_eq!(g.file_size(), bytes.len() as u64);

    // Metadata: same keys, same order, bit-identical values.
    let mut expected: Vec<(String, Value)> = kv.clone();
    if let Some(a) = alignment {
        expected.insert(3, (KEY_ALIGNMENT.into(), Value::U32(a)));
    }
    let md = g.metadata();
    assert_eq!(md.len(), expected.len());
    for ((k, v), (ek, ev)) in md.iter().zip(&expected) {
        assert_eq!(k, ek);
        assert_eq!(v.value_type(), ev.value_type(), "{k}");
        assert_eq!(encode_value(v), encode_value(ev), "{k}");
        assert_eq!(encode_value(md.get(k).expect("indexed")), encode_value(ev), "{k}");
    }
    assert_eq!(md.get_str("general.architecture"), Some("llama"));
    assert_eq!(md.get("string.not_utf8").and_then(Value::as_str), None);
    assert_eq!(md.get_array("tokenizer.ggml.tokens").map(Array::len), Some(300));

    // Tensors: name, shape, type, offset, data.
    assert_eq!(g.tensors().len(), tensors.len());
    let mut offset = 0u64;
    for (info, t) in g.tensors().iter().zip(&tensors) {
        assert_eq!(info.name, t.name);
        assert_eq!(info.dims, t.dims);
        assert_eq!(info.type_id, t.type_id);
        assert_eq!(info.type_name(), ggml_quants::by_id(t.type_id).expect("registered").name);
        assert_eq!(info.n_elements, t.dims.iter().product::<u64>());
        assert_eq!(info.size, Some(t.data.len() as u64));
        assert_eq!(info.offset, offset, "{}", t.name);
        assert_eq!(info.offset % align, 0);
        assert_eq!(g.tensor_data(&bytes, info).expect("data"), &t.data[..], "{}", t.name);
        offset = align_up(offset + t.data.len() as u64, align);
    }
    assert_eq!(bytes.len() as u64, g.data_offset() + offset);

    // Read → write is byte-identical, in memory and through a file.
    let file = GgufFile::from_vec(bytes.clone()).expect("from_vec");
    let mut again = Vec::new();
    GgufWriter::from_file(&file).expect("from_file").write_to(&mut again).expect("rewrite");
    assert!(again == bytes, "rewrite differs (alignment {alignment:?}, version {version})");

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("model.gguf");
    GgufWriter::from_file(&file).expect("from_file").write_to_path(&path).expect("write_to_path");
    let mapped = GgufFile::open(&path).expect("open");
    assert!(mapped.bytes() == &bytes[..]);
    assert_eq!(mapped.path(), path);
    for t in &tensors {
        assert_eq!(mapped.tensor_data_by_name(&t.name).expect("by name"), &t.data[..]);
    }
    assert_only(dir.path(), &["model.gguf"]);
}

#[test]
fn roundtrip_default_alignment() {
    roundtrip(None, 3);
}

#[test]
fn roundtrip_alignment_1() {
    roundtrip(Some(1), 3);
}

#[test]
fn roundtrip_alignment_32() {
    roundtrip(Some(32), 3);
}

#[test]
fn roundtrip_alignment_64() {
    roundtrip(Some(64), 3);
}

#[test]
fn roundtrip_alignment_4096() {
    roundtrip(Some(4096), 3);
}

#[test]
fn roundtrip_version_2() {
    roundtrip(Some(64), 2);
}

#[test]
fn every_registered_type_is_covered() {
    let ids: Vec<u32> = ggml_quants::all().iter().map(|t| t.id).collect();
    for id in [F32, F16, Q8_0] {
        assert!(ids.contains(&id), "type {id} not registered; is `use ggml_quants as _;` missing?");
    }
}

#[test]
fn empty_files_with_and_without_padding() {
    for (pad, len) in [(true, 32), (false, 24)] {
        let mut bytes = Vec::new();
        GgufWriter::new().with_empty_padding(pad).write_to(&mut bytes).expect("write");
        assert_eq!(bytes.len(), len);
        let file = GgufFile::from_vec(bytes.clone()).expect("parse");
        assert!(file.metadata().is_empty());
        assert!(file.tensors().is_empty());
        let mut again = Vec::new();
        GgufWriter::from_file(&file).expect("from_file").write_to(&mut again).expect("rewrite");
        assert_eq!(again, bytes);
    }
}

#[test]
fn header_len_is_the_data_offset() {
    for alignment in [None, Some(64)] {
        let mut w = GgufWriter::new();
        if let Some(a) = alignment {
            w = w.with_alignment(a);
        }
        w.add_kv("general.name", "x");
        for t in all_tensors() {
            w.add_tensor_owned(&t.name, &t.dims, t.type_id, t.data).expect("add");
        }
        let len = w.header_len().expect("header_len");
        let mut bytes = Vec::new();
        w.write_to(&mut bytes).expect("write");
        assert_eq!(len, Gguf::parse(&bytes).expect("parse").data_offset());
    }
    for (pad, len) in [(true, 32), (false, 24)] {
        assert_eq!(GgufWriter::new().with_empty_padding(pad).header_len().expect("header_len"), len);
    }
}

#[test]
fn metadata_set_keeps_position() {
    let mut w = GgufWriter::new();
    w.add_kv("a", 1u32).add_kv("b", 2u32).add_kv("a", "replaced");
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).expect("write");
    let g = Gguf::parse(&bytes).expect("parse");
    let keys: Vec<&str> = g.metadata().iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(g.metadata().get_str("a"), Some("replaced"));
}

fn variant(e: &Error) -> String {
    let d = format!("{e:?}");
    d.split([' ', '{', '(']).next().unwrap_or_default().to_string()
}

#[test]
fn writer_rejects_bad_tensors() {
    let data = vec![0u8; 64];
    let mut w = GgufWriter::new();
    w.add_tensor("ok", &[16], F32, &data).expect("valid");

    let cases: Vec<(&str, &[u64], u32, usize, &str)> = vec![
        ("short", &[16], F32, 60, "TensorSize"),
        ("long", &[8], F32, 64, "TensorSize"),
        ("empty.data", &[1], F32, 0, "TensorSize"),
        ("ok", &[16], F32, 64, "DuplicateTensor"),
        ("five.dims", &[1, 1, 1, 1, 1], F32, 4, "BadShape"),
        ("overflow", &[1 << 32, 1 << 32], F32, 0, "BadShape"),
        ("over.i64", &[1 << 62, 2], F32, 0, "BadShape"),
        ("bytes.overflow", &[1 << 62], F32, 0, "BadShape"),
        ("q8.partial", &[31], Q8_0, 34, "NotWholeBlocks"),
        ("q8.scalar", &[], Q8_0, 34, "NotWholeBlocks"),
        ("unknown", &[4], 9999, 16, "UnknownType"),
        ("unknown.max", &[4], u32::MAX, 16, "UnknownType"),
    ];
    for (name, dims, type_id, len, want) in cases {
        let err = w.add_tensor(name, dims, type_id, &data[..len]).expect_err(name);
        assert_eq!(variant(&err), want, "{name}: {err}");
        assert!(err.to_string().contains(&format!("{name:?}")), "{name}: {err}");
    }
    // Rejected tensors were not added.
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).expect("write");
    let g = Gguf::parse(&bytes).expect("parse");
    assert_eq!(g.tensors().len(), 1);
}

#[test]
fn writer_rejects_bad_alignment() {
    for a in [0u32, 3, 48, u32::MAX] {
        let err = GgufWriter::new().with_alignment(a).write_to(&mut Vec::new()).expect_err("bad alignment");
        assert_eq!(variant(&err), "BadAlignment", "{a}: {err}");
    }
    let mut w = GgufWriter::new();
    w.add_kv(KEY_ALIGNMENT, 32u64);
    let err = w.write_to(&mut Vec::new()).expect_err("u64 alignment");
    assert_eq!(variant(&err), "BadAlignment");
}

#[test]
fn stream_source_writes_like_owned() {
    let data = noise(34 * 4, 7);
    let mut a = GgufWriter::new();
    a.add_tensor_owned("t", &[128], Q8_0, data.clone()).expect("owned");
    let mut b = GgufWriter::new();
    let d = data.clone();
    let src = TensorSource::Stream(Box::new(move |w: &mut dyn Write| {
        // In odd-sized pieces, as a converter would.
        for c in d.chunks(5) {
            w.write_all(c)?;
        }
        Ok(())
    }));
    b.add_tensor_source("t", &[128], Q8_0, data.len() as u64, src).expect("stream");
    let (mut x, mut y) = (Vec::new(), Vec::new());
    a.write_to(&mut x).expect("write owned");
    b.write_to(&mut y).expect("write stream");
    assert_eq!(x, y);
}

/// Asserts that `dir` holds exactly `names` (so no temporary was left behind).
fn assert_only(dir: &Path, names: &[&str]) {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(found, want, "unexpected files in {}", dir.display());
}

/// A writer with one good tensor followed by a streamed one that misbehaves.
fn failing_writer(mode: &'static str) -> GgufWriter<'static> {
    let mut w = GgufWriter::new();
    w.add_kv("general.name", "failing");
    w.add_tensor_owned("good", &[1024], F32, vec![1; 4096]).expect("good");
    let src = TensorSource::Stream(Box::new(move |w: &mut dyn Write| match mode {
        "error" => {
            w.write_all(&[7; 100])?;
            Err(io::Error::other("producer failed"))
        }
        "short" => w.write_all(&[7; 100]),
        "long" => w.write_all(&[7; 300]),
        "nothing" => Ok(()),
        _ => unreachable!(),
    }));
    w.add_tensor_source("streamed", &[64], F32, 256, src).expect("streamed");
    w
}

#[test]
fn write_to_path_is_atomic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("out.gguf");
    let original = b"previous contents, must survive".to_vec();
    for mode in ["error", "short", "long", "nothing"] {
        // A new target: nothing is created.
        let err = failing_writer(mode).write_to_path(&target).expect_err(mode);
        let want = if mode == "error" { "Io" } else { "TensorSize" };
        assert_eq!(variant(&err), want, "{mode}: {err}");
        if want == "TensorSize" {
            assert!(err.to_string().contains("\"streamed\""), "{err}");
        } else {
            assert!(err.to_string().contains("producer failed"), "{err}");
        }
        assert_only(dir.path(), &[]);

        // An existing target: left untouched.
        std::fs::write(&target, &original).expect("seed target");
        failing_writer(mode).write_to_path(&target).expect_err(mode);
        assert_eq!(std::fs::read(&target).expect("read"), original, "{mode}");
        assert_only(dir.path(), &["out.gguf"]);
        std::fs::remove_file(&target).expect("cleanup");
    }

    // A bad alignment fails before anything is written.
    std::fs::write(&target, &original).expect("seed target");
    GgufWriter::new().with_alignment(3).write_to_path(&target).expect_err("alignment");
    assert_eq!(std::fs::read(&target).expect("read"), original);
    assert_only(dir.path(), &["out.gguf"]);

    // A success replaces the target and leaves no temporary.
    let mut w = GgufWriter::new();
    w.add_tensor_owned("t", &[4], F32, vec![9; 16]).expect("t");
    w.write_to_path(&target).expect("write");
    assert_only(dir.path(), &["out.gguf"]);
    let f = GgufFile::open(&target).expect("open");
    assert_eq!(f.tensor_data_by_name("t").expect("t"), &[9; 16]);
}

#[test]
fn write_to_path_into_missing_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("no/such/dir/out.gguf");
    let err = GgufWriter::new().write_to_path(&target).expect_err("missing dir");
    assert_eq!(variant(&err), "Io");
    assert_only(dir.path(), &[]);
}

#[test]
fn open_errors_name_the_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.gguf");
    let err = GgufFile::open(&missing).expect_err("missing");
    assert_eq!(variant(&err), "Io");
    assert!(err.to_string().contains("missing.gguf"), "{err}");

    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, b"").expect("write");
    let err = GgufFile::open(&empty).expect_err("empty");
    assert_eq!(variant(&err), "BadMagic");
}

/// The writer refuses values the reader would reject, rather than writing a file that
/// cannot be read back: arrays nested deeper than `MAX_ARRAY_DEPTH`, versions other
/// than 2 and 3. Nothing is written.
#[test]
fn writer_refuses_what_the_reader_rejects() {
    let mut w = GgufWriter::new();
    w.add_kv("ok", nested(MAX_ARRAY_DEPTH));
    w.add_kv("too.deep", nested(MAX_ARRAY_DEPTH + 1));
    let mut out = Vec::new();
    let err = w.write_to(&mut out).expect_err("too deep");
    assert_eq!(variant(&err), "InvalidValue", "{err}");
    assert!(err.to_string().contains("\"too.deep\""), "{err}");
    assert!(out.is_empty(), "wrote {} bytes", out.len());

    for version in [0u32, 1, 4, 99] {
        let mut out = Vec::new();
        let err = GgufWriter::new().with_version(version).write_to(&mut out).expect_err("version");
        assert_eq!(variant(&err), "UnsupportedVersion", "{err}");
        assert!(out.is_empty());
    }
}
