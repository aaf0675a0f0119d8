//! Generated malformed files. Every one must be an `Err` of the expected variant whose
//! message names the key or tensor involved, never a panic; parsing inputs that claim huge
//! counts must not allocate much more than the input's own size.

use std::panic::{catch_unwind, AssertUnwindSafe};

use gguf_format::{Array, Error, Gguf, GgufFile, GgufWriter, Value, ValueType, KEY_ALIGNMENT, MAX_ARRAY_DEPTH};

use crate::alloc::measure;
use crate::raw::{noise, Kind, Owner, Raw};

const F32: u32 = 0;
const F16: u32 = 1;
const Q8_0: u32 = 8;

/// One malformed file and what its error must look like.
struct Case {
    name: String,
    bytes: Vec<u8>,
    /// Acceptable variants; empty means any `Err`.
    variants: Vec<&'static str>,
    /// The message must contain all of these.
    all: Vec<String>,
    /// The message must contain at least one of these (if any are given).
    any: Vec<String>,
}

impl Case {
    fn new(name: impl Into<String>, bytes: Vec<u8>, variants: &[&'static str]) -> Case {
        Case { name: name.into(), bytes, variants: variants.to_vec(), all: Vec::new(), any: Vec::new() }
    }

    fn all(mut self, s: impl Into<String>) -> Case {
        self.all.push(s.into());
        self
    }

    fn any(mut self, v: Vec<String>) -> Case {
        self.any.extend(v);
        self
    }
}

fn variant(e: &Error) -> String {
    let d = format!("{e:?}");
    d.split([' ', '{', '(']).next().unwrap_or_default().to_string()
}

/// Checks every case, collecting all failures before failing.
fn check(cases: &[Case]) {
    let mut failures = Vec::new();
    for c in cases {
        let result = catch_unwind(AssertUnwindSafe(|| Gguf::parse(&c.bytes).map(|_| ())));
        let e = match result {
            Err(_) => {
                failures.push(format!("{}: PANICKED", c.name));
                continue;
            }
            Ok(Ok(())) => {
                failures.push(format!("{}: parsed without error", c.name));
                continue;
            }
            Ok(Err(e)) => e,
        };
        let msg = e.to_string();
        let v = variant(&e);
        if !c.variants.is_empty() && !c.variants.contains(&v.as_str()) {
            failures.push(format!("{}: got {v} ({msg}), want one of {:?}", c.name, c.variants));
        }
        for s in &c.all {
            if !msg.contains(s.as_str()) {
                failures.push(format!("{}: message {msg:?} lacks {s:?}", c.name));
            }
        }
        if !c.any.is_empty() && !c.any.iter().any(|s| msg.contains(s.as_str())) {
            failures.push(format!("{}: message {msg:?} names none of {:?}", c.name, c.any));
        }
        // The in-memory file type goes through the same checks.
        if GgufFile::from_vec(c.bytes.clone()).is_ok() {
            failures.push(format!("{}: GgufFile::from_vec accepted it", c.name));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// Tensors of [`sample`]: name, offset, size.
const SAMPLE_TENSORS: [(&str, u64, u64); 3] = [("t.f32", 0, 32), ("t.q8", 32, 34), ("t.f16", 96, 6)];

/// A small valid file with one of most kinds of field. Its last byte is tensor data (no
/// trailing padding), so every proper prefix is invalid.
pub(crate) fn sample() -> Raw {
    let mut r = Raw::new(3, 3, 8);
    r.kv("general.architecture", "llama")
        .kv("a.u32", 7u32)
        .kv("a.bool", true)
        .kv("a.f32", 1.5f32)
        .kv("a.strs", Array::String(vec![b"x".to_vec(), b"yz".to_vec(), Vec::new()].into()))
        .kv("a.bools", Array::Bool(vec![true, false, true]))
        .kv(
            "a.nested",
            Array::Array(vec![
                Array::U8(vec![1, 2]),
                Array::String(vec![b"s".to_vec()].into()),
                Array::empty(ValueType::I32),
            ]),
        )
        .kv("a.i64s", Array::I64(vec![-1, 2]));
    r.tensor("t.f32", &[4, 2], F32, 0).tensor("t.q8", &[32], Q8_0, 32).tensor("t.f16", &[3], F16, 96);
    let mut data = noise(102, 1);
    data[66..96].fill(0);
    r.align(32).bytes(&data);
    r
}

/// The data-section offset of [`sample`].
fn sample_data_offset(r: &Raw) -> usize {
    r.buf.len() - 102
}

#[test]
fn sample_is_valid() {
    let r = sample();
    let g = Gguf::parse(&r.buf).expect("sample parses");
    assert_eq!(g.metadata().len(), 8);
    assert_eq!(g.data_offset() as usize, sample_data_offset(&r));
    for (info, (name, offset, size)) in g.tensors().iter().zip(SAMPLE_TENSORS) {
        assert_eq!((info.name.as_str(), info.offset, info.size), (name, offset, Some(size)));
    }
    // And it is what GgufWriter writes, but for the trailing padding.
    let file = GgufFile::from_vec(r.buf.clone()).expect("from_vec");
    let mut again = Vec::new();
    GgufWriter::from_file(&file).expect("from_file").write_to(&mut again).expect("write");
    assert_eq!(&again[..r.buf.len()], &r.buf[..]);
    assert!(again[r.buf.len()..].iter().all(|&b| b == 0));
}

/// A prefix of every length.
fn truncations() -> Vec<Case> {
    let r = sample();
    let data_offset = sample_data_offset(&r);
    let count_labels = ["tensor count".to_string(), "metadata key/value count".to_string()];
    (0..r.buf.len())
        .map(|cut| {
            let bytes = r.buf[..cut].to_vec();
            let name = format!("truncated at {cut}");
            if cut < 4 {
                return Case::new(name, bytes, &["BadMagic"]);
            }
            match r.owner_at(cut) {
                Owner::Data => {
                    let have = cut.saturating_sub(data_offset) as u64;
                    let (first_short, _, _) =
                        SAMPLE_TENSORS.into_iter().find(|&(_, o, s)| o + s > have).expect("some tensor is cut");
                    Case::new(name, bytes, &["TensorOutOfBounds"]).all(format!("{first_short:?}"))
                }
                owner => {
                    let mut labels = owner.labels();
                    labels.extend(count_labels.iter().cloned());
                    Case::new(name, bytes, &["Truncated", "CountTooLarge"]).any(labels)
                }
            }
        })
        .collect()
}

/// Counts and lengths set past the end of the file, and one past the right value.
fn huge_counts() -> Vec<Case> {
    let r = sample();
    let mut cases = Vec::new();
    let kinds =
        [Kind::NTensors, Kind::NKv, Kind::KeyLen, Kind::StrLen, Kind::ArrStrLen, Kind::ArrayCount, Kind::NameLen];
    for kind in kinds {
        for f in r.fields_of(kind) {
            let orig = u64::from_le_bytes(r.buf[f.at..f.at + 8].try_into().expect("8 bytes"));
            for v in [u64::MAX, 1 << 63, 1 << 40, u64::MAX / 13, r.buf.len() as u64] {
                cases.push(
                    Case::new(format!("{kind:?} at {} = {v}", f.at), r.with_u64(f.at, v), &["CountTooLarge"])
                        .all(format!("count {v}"))
                        .any(f.owner.labels()),
                );
            }
            // Off by one: the rest of the file is misread; any error will do.
            cases.push(Case::new(format!("{kind:?} at {} = {orig}+1", f.at), r.with_u64(f.at, orig + 1), &[]));
        }
    }
    cases
}

fn key_of(owner: &Owner) -> String {
    match owner {
        Owner::Kv { key, .. } => format!("{key:?}"),
        o => panic!("not a key: {o:?}"),
    }
}

fn tensor_of(owner: &Owner) -> String {
    match owner {
        Owner::Tensor { name, .. } => format!("{name:?}"),
        o => panic!("not a tensor: {o:?}"),
    }
}

/// Value and array element types outside 0..=12; bool bytes other than 0 and 1.
fn bad_types_and_bools() -> Vec<Case> {
    let r = sample();
    let mut cases = Vec::new();
    for kind in [Kind::ValueType, Kind::ElemType] {
        for f in r.fields_of(kind) {
            for v in [13, 14, 99, 1 << 31, u32::MAX] {
                cases.push(
                    Case::new(format!("{kind:?} at {} = {v}", f.at), r.with_u32(f.at, v), &["InvalidValueType"])
                        .all(key_of(&f.owner))
                        .all(format!("invalid value type {v}")),
                );
            }
        }
    }
    for f in r.fields_of(Kind::Bool) {
        for v in [2, 3, 0x7f, 0x80, 0xff] {
            cases.push(
                Case::new(format!("bool at {} = {v}", f.at), r.with_u8(f.at, v), &["InvalidBool"])
                    .all(key_of(&f.owner))
                    .all(format!("invalid bool byte {v}")),
            );
        }
    }
    cases
}

fn bad_magic_and_version() -> Vec<Case> {
    let r = sample();
    let mut cases = Vec::new();
    for m in [b"GGUG", b"gguf", b"\0\0\0\0", b"GGML", b"GGJT", b"FUGG", b"\xffGUF", b"GGU\0"] {
        let mut b = r.buf.clone();
        b[..4].copy_from_slice(m);
        cases.push(Case::new(format!("magic {m:?}"), b, &["BadMagic"]).all("not a GGUF file"));
    }
    for (i, len) in [5usize, 24, 100, 4096].into_iter().enumerate() {
        cases.push(Case::new(format!("noise of {len} bytes"), noise(len, 40 + i as u64), &["BadMagic"]));
    }
    let version_at = r.fields_of(Kind::Version).next().expect("version").at;
    for v in [0u32, 1, 4, 99, 0x100, 0xffff, u32::MAX] {
        cases.push(
            Case::new(format!("version {v}"), r.with_u32(version_at, v), &["UnsupportedVersion"])
                .all(format!("unsupported GGUF version {v} ")),
        );
    }
    for v in [1u32, 2, 3] {
        cases.push(
            Case::new(format!("big-endian version {v}"), r.with_u32(version_at, v.swap_bytes()), &["BigEndian"])
                .all(format!("version {v} when byte-swapped")),
        );
    }
    cases
}

/// A file holding one array nested `depth` levels (the innermost one of `u8`), after
/// `before` ordinary keys.
pub(crate) fn deep_file(depth: usize, before: usize) -> Vec<u8> {
    let mut payload = Vec::new();
    for level in 0..depth {
        let elem = if level + 1 == depth { ValueType::U8 } else { ValueType::Array };
        payload.extend_from_slice(&(elem as u32).to_le_bytes());
        payload.extend_from_slice(&1u64.to_le_bytes());
    }
    payload.push(42);
    let mut r = Raw::new(3, 0, before as u64 + 1);
    for i in 0..before {
        r.kv(&format!("k{i}"), i as u32);
    }
    r.kv_raw("deep", ValueType::Array as u32, &payload);
    r.finish()
}

#[test]
fn deepest_allowed_nesting_parses() {
    let g = Gguf::parse(&deep_file(MAX_ARRAY_DEPTH, 0)).expect("depth at the limit");
    let mut a = g.metadata().get_array("deep").expect("array");
    for _ in 1..MAX_ARRAY_DEPTH {
        match a {
            Array::Array(v) => a = &v[0],
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(a, &Array::U8(vec![42]));
}

fn too_deep() -> Vec<Case> {
    let mut cases = Vec::new();
    for depth in [MAX_ARRAY_DEPTH + 1, MAX_ARRAY_DEPTH + 2, 16, 100, 1000] {
        for before in [0, 3] {
            cases.push(
                Case::new(
                    format!("arrays nested {depth} deep after {before} keys"),
                    deep_file(depth, before),
                    &["TooDeep"],
                )
                .all("\"deep\"")
                .all(format!("nested deeper than {MAX_ARRAY_DEPTH}")),
            );
        }
    }
    cases
}

/// A file with a `general.alignment` value and one tensor.
fn with_alignment_value(v: Value) -> Vec<u8> {
    let mut r = Raw::new(3, 1, 2);
    r.kv("general.name", "x").kv(KEY_ALIGNMENT, v).tensor("t", &[1], F32, 0).align(32).bytes(&[0; 4]);
    r.finish()
}

fn bad_alignments() -> Vec<Case> {
    let mut cases = Vec::new();
    for a in [0u32, 3, 5, 6, 7, 12, 33, 48, 1000, 0x8000_0001, u32::MAX] {
        cases.push(
            Case::new(format!("alignment {a}"), with_alignment_value(Value::U32(a)), &["BadAlignment"])
                .all("general.alignment")
                .all(format!("{a} is not a power of two")),
        );
    }
    let wrong_types = [
        Value::U8(32),
        Value::I8(32),
        Value::U16(32),
        Value::I16(32),
        Value::I32(32),
        Value::U64(32),
        Value::I64(32),
        Value::F32(32.0),
        Value::F64(32.0),
        Value::Bool(true),
        Value::from("32"),
        Value::Array(Array::U32(vec![32])),
    ];
    for v in wrong_types {
        let t = v.value_type().name();
        cases.push(
            Case::new(format!("alignment of type {t}"), with_alignment_value(v), &["BadAlignment"])
                .all(format!("must be of type u32, found {t}")),
        );
    }
    cases
}

/// Tensor shapes, types and offsets that cannot be right.
fn bad_tensors() -> Vec<Case> {
    let r = sample();
    let mut cases = Vec::new();
    for f in r.fields_of(Kind::NDims) {
        for n in [5u32, 6, 64, u32::MAX] {
            cases.push(
                Case::new(format!("n_dims at {} = {n}", f.at), r.with_u32(f.at, n), &["BadShape"])
                    .all(tensor_of(&f.owner))
                    .all(format!("{n} dimensions")),
            );
        }
    }
    for f in r.fields_of(Kind::Dim) {
        for d in [-1i64, i64::MIN, -32, i64::MIN + 1] {
            cases.push(
                Case::new(format!("dim at {} = {d}", f.at), r.with_u64(f.at, d as u64), &["BadShape"])
                    .all(tensor_of(&f.owner))
                    .all(format!("negative ({d})")),
            );
        }
    }
    // t.f32 has dims [4, 2]: make their product overflow.
    let dims: Vec<usize> = r.fields_of(Kind::Dim).take(2).map(|f| f.at).collect();
    let overflowing = [
        (1u64 << 32, 1u64 << 32, "element count overflows int64"),
        (1 << 62, 2, "element count overflows int64"),
        (i64::MAX as u64, 2, "element count overflows int64"),
        (3, 1 << 62, "element count overflows int64"),
        (1 << 31, 1 << 33, "element count overflows int64"),
        (1 << 62, 1, "byte size overflows"),
        (1 << 61, 3, "byte size overflows"),
    ];
    for (d0, d1, why) in overflowing {
        let mut b = r.with_u64(dims[0], d0);
        b[dims[1]..dims[1] + 8].copy_from_slice(&d1.to_le_bytes());
        cases.push(Case::new(format!("dims [{d0}, {d1}]"), b, &["BadShape"]).all("\"t.f32\"").all(why));
    }
    // Large but representable: the data is simply not there.
    let mut b = r.with_u64(dims[0], 1 << 40);
    b[dims[1]..dims[1] + 8].copy_from_slice(&(1u64 << 20).to_le_bytes());
    cases.push(Case::new("dims [2^40, 2^20]", b, &["TensorOutOfBounds"]).all("\"t.f32\""));

    let offsets: Vec<_> = r.fields_of(Kind::TensorOffset).cloned().collect();
    for f in &offsets {
        let name = tensor_of(&f.owner);
        for off in [1u64, 2, 4, 8, 16, 31, 33, 95, u64::MAX] {
            cases.push(
                Case::new(format!("offset of {name} = {off}"), r.with_u64(f.at, off), &["MisalignedTensor"])
                    .all(&name)
                    .all(format!("data offset {off} is not a multiple of the alignment 32")),
            );
        }
        for off in [128u64, 4096, 1 << 40, !31u64] {
            cases.push(
                Case::new(format!("offset of {name} = {off}"), r.with_u64(f.at, off), &["TensorOutOfBounds"])
                    .all(&name)
                    .all(format!("data [{off}, ")),
            );
        }
    }
    // Overlaps: (tensor index, new offset, first, second).
    for (i, off, first, second) in
        [(1, 0, "t.f32", "t.q8"), (0, 32, "t.f32", "t.q8"), (2, 64, "t.q8", "t.f16"), (2, 0, "t.f16", "t.f32")]
    {
        cases.push(
            Case::new(format!("tensor {i} moved to {off}"), r.with_u64(offsets[i].at, off), &["OverlappingTensors"])
                .all(format!("tensors {first:?} and {second:?} overlap")),
        );
    }
    // Not whole blocks: q8_0 (32 per block) and q4_K (256 per block) with ragged rows.
    for (type_id, ne0) in [(Q8_0, 1u64), (Q8_0, 16), (Q8_0, 31), (Q8_0, 33), (12, 128), (12, 32)] {
        let Some(t) = ggml_quants::by_id(type_id) else { continue };
        let mut r = Raw::new(3, 1, 0);
        r.tensor("ragged", &[ne0, 2], type_id, 0).align(32).bytes(&[0; 1024]);
        cases.push(
            Case::new(format!("{} with ne0 = {ne0}", t.name), r.finish(), &["NotWholeBlocks"])
                .all("\"ragged\"")
                .all(format!("ne[0] = {ne0} is not a multiple of the {} block size", t.name)),
        );
    }
    let mut r = Raw::new(3, 1, 0);
    r.tensor("scalar.q8", &[], Q8_0, 0).align(32).bytes(&[0; 64]);
    cases.push(Case::new("q8_0 with no dims", r.finish(), &["NotWholeBlocks"]).all("\"scalar.q8\""));
    cases
}

fn duplicates_and_utf8() -> Vec<Case> {
    let mut cases = Vec::new();
    let dup_keys: [&[&str]; 6] = [
        &["a", "a"],
        &["a", "b", "a"],
        &["x", "y", "z", "y"],
        &["", ""],
        &[KEY_ALIGNMENT, KEY_ALIGNMENT],
        &["general.architecture", "general.name", "general.architecture"],
    ];
    for (n, keys) in dup_keys.iter().enumerate() {
        for value in [Value::U32(32), Value::from("v"), Value::Array(Array::I32(vec![1, 2]))] {
            let mut r = Raw::new(3, 0, keys.len() as u64);
            for k in keys.iter() {
                r.kv(k, value.clone());
            }
            let dup = keys.last().expect("non-empty");
            cases.push(
                Case::new(
                    format!("duplicate keys #{n} ({})", value.value_type().name()),
                    r.finish(),
                    &["DuplicateKey"],
                )
                .all(format!("duplicate metadata key {dup:?}")),
            );
        }
    }
    let dup_tensors: [&[&str]; 4] = [&["t", "t"], &["a", "b", "a"], &["", ""], &["w", "x", "y", "x"]];
    for (n, names) in dup_tensors.iter().enumerate() {
        let mut r = Raw::new(3, names.len() as u64, 0);
        for (i, name) in names.iter().enumerate() {
            r.tensor(name, &[8], F32, 32 * i as u64);
        }
        r.align(32).bytes(&[0; 32 * 4]);
        let dup = names.last().expect("non-empty");
        cases.push(
            Case::new(format!("duplicate tensors #{n}"), r.finish(), &["DuplicateTensor"])
                .all(format!("duplicate tensor name {dup:?}")),
        );
    }
    let bad_utf8: [&[u8]; 7] =
        [b"\xff", b"\xc3", b"ab\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80", b"key\x80", b"general.\xe2\x82"];
    for (n, bad) in bad_utf8.iter().enumerate() {
        for at in [0usize, 2] {
            let mut r = Raw::new(3, 0, 3);
            for i in 0..3 {
                if i == at {
                    r.kv_bytes(bad, &Value::U8(1));
                } else {
                    r.kv(&format!("k{i}"), 1u8);
                }
            }
            cases.push(
                Case::new(format!("non-UTF-8 key #{n} at {at}"), r.finish(), &["InvalidUtf8"])
                    .all(format!("key of metadata entry {at} at offset")),
            );
            let mut r = Raw::new(3, 3, 0);
            for i in 0..3 {
                if i == at {
                    r.tensor_bytes(bad, &[8], F32, 32 * i as u64);
                } else {
                    r.tensor(&format!("t{i}"), &[8], F32, 32 * i as u64);
                }
            }
            r.align(32).bytes(&[0; 96]);
            cases.push(
                Case::new(format!("non-UTF-8 tensor name #{n} at {at}"), r.finish(), &["InvalidUtf8"])
                    .all(format!("name of tensor {at} at offset")),
            );
        }
    }
    cases
}

/// Every generator, by name.
/// A function generating one family of cases.
type Generator = fn() -> Vec<Case>;

fn generators() -> Vec<(&'static str, Generator)> {
    vec![
        ("truncations", truncations),
        ("huge_counts", huge_counts),
        ("bad_types_and_bools", bad_types_and_bools),
        ("bad_magic_and_version", bad_magic_and_version),
        ("too_deep", too_deep),
        ("bad_alignments", bad_alignments),
        ("bad_tensors", bad_tensors),
        ("duplicates_and_utf8", duplicates_and_utf8),
    ]
}

#[test]
fn generated_case_count() {
    let counts: Vec<(&str, usize)> = generators().into_iter().map(|(name, g)| (name, g().len())).collect();
    let total: usize = counts.iter().map(|c| c.1).sum();
    eprintln!("hostile cases: {total} {counts:?}");
    assert!(total >= 300, "only {total} generated cases");
}

#[test]
fn hostile_truncations() {
    check(&truncations());
}

#[test]
fn hostile_huge_counts() {
    check(&huge_counts());
}

#[test]
fn hostile_bad_types_and_bools() {
    check(&bad_types_and_bools());
}

#[test]
fn hostile_bad_magic_and_version() {
    check(&bad_magic_and_version());
}

#[test]
fn hostile_too_deep() {
    check(&too_deep());
}

#[test]
fn hostile_bad_alignments() {
    check(&bad_alignments());
}

#[test]
fn hostile_bad_tensors() {
    check(&bad_tensors());
}

#[test]
fn hostile_duplicates_and_utf8() {
    check(&duplicates_and_utf8());
}

/// Unknown tensor types are not an error: the file stays inspectable and only that
/// tensor's data view fails, naming the tensor and the id.
#[test]
fn unknown_tensor_type_parses() {
    let r = sample();
    let type_at = r.fields_of(Kind::TensorType).nth(1).expect("t.q8's type").at;
    let data_offset = sample_data_offset(&r);
    let mut tried = 0;
    for id in [4u32, 5, 40, 1000, 9999, 0x7fff_ffff, u32::MAX] {
        if ggml_quants::by_id(id).is_some() {
            continue;
        }
        tried += 1;
        let bytes = r.with_u32(type_at, id);
        let g = Gguf::parse(&bytes).unwrap_or_else(|e| panic!("type {id}: {e}"));
        assert_eq!(g.metadata().len(), 8);
        assert_eq!(g.metadata().get_str("general.architecture"), Some("llama"));
        assert_eq!(g.tensors().len(), 3);
        let unknown = g.tensor("t.q8").expect("listed");
        assert_eq!((unknown.type_id, unknown.size, unknown.dims.as_slice()), (id, None, &[32u64][..]));
        assert_eq!(unknown.type_name(), format!("type{id}"));
        assert!(unknown.type_traits().is_none());
        for (name, offset, size) in [SAMPLE_TENSORS[0], SAMPLE_TENSORS[2]] {
            let info = g.tensor(name).expect("known");
            let start = data_offset + offset as usize;
            assert_eq!(g.tensor_data(&bytes, info).expect("known data"), &bytes[start..start + size as usize]);
        }
        let err = g.tensor_data(&bytes, unknown).expect_err("unknown data");
        assert!(matches!(&err, Error::UnknownType { name, type_id } if name == "t.q8" && *type_id == id), "{err:?}");
        assert_eq!(err.to_string(), format!("tensor \"t.q8\": unknown ggml type id {id}"));
        let err = unknown.require_type().expect_err("require_type");
        assert_eq!(variant(&err), "UnknownType");

        let file = GgufFile::from_vec(bytes.clone()).expect("from_vec");
        assert!(file.tensor_data_by_name("t.f32").is_ok());
        let err = file.tensor_data_by_name("t.q8").expect_err("unknown");
        assert_eq!(variant(&err), "UnknownType");
        let err = file.tensor_data_by_name("nope").expect_err("missing");
        assert_eq!(variant(&err), "NoSuchTensor");
        // Re-writing needs the data size, so it reports the same error.
        let err = GgufWriter::from_file(&file).expect_err("cannot rewrite");
        assert_eq!(variant(&err), "UnknownType");
        assert!(err.to_string().contains("\"t.q8\""));
    }
    assert!(tried >= 4);
}

/// Inputs of `len` bytes that claim as many items as their length could possibly hold,
/// followed by `0xff` bytes that never complete one.
fn huge_claims(len: usize) -> Vec<(String, Vec<u8>)> {
    const FILL: u8 = 0xff;
    let mut out = Vec::new();
    let finish = |mut b: Vec<u8>| {
        b.resize(len, FILL);
        b
    };
    let left = |b: &Vec<u8>, extra: usize| (len - b.len() - extra) as u64;

    // Tensor table: at least 24 bytes per entry.
    let mut b = Raw::new(3, 0, 0).finish();
    let n = left(&b, 0) / 24;
    b[8..16].copy_from_slice(&n.to_le_bytes());
    let mut zeros = b.clone();
    out.push(("tensor count".to_string(), finish(b)));
    // Zeros make one valid tensor named "", then a duplicate.
    zeros.resize(len, 0);
    out.push(("tensor count, zero fill".to_string(), zeros));

    // Metadata: at least 13 bytes per entry.
    let mut b = Raw::new(3, 0, 0).finish();
    let n = left(&b, 0) / 13;
    b[16..24].copy_from_slice(&n.to_le_bytes());
    out.push(("metadata count".to_string(), finish(b)));

    // String array: at least 8 bytes per string; arrays of arrays: 12 per array.
    for (what, elem, min) in [("string array", ValueType::String, 8), ("array of arrays", ValueType::Array, 12)] {
        let mut b = Raw::new(3, 0, 1).finish();
        b.extend_from_slice(&1u64.to_le_bytes());
        b.push(b'k');
        b.extend_from_slice(&(ValueType::Array as u32).to_le_bytes());
        b.extend_from_slice(&(elem as u32).to_le_bytes());
        let n = left(&b, 8) / min;
        b.extend_from_slice(&n.to_le_bytes());
        out.push((what.to_string(), finish(b)));
    }

    // Arrays of arrays nested to the limit, each level claiming all that is left, the
    // innermost one a string array.
    let mut b = Raw::new(3, 0, 1).finish();
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(b'k');
    b.extend_from_slice(&(ValueType::Array as u32).to_le_bytes());
    for level in 0..MAX_ARRAY_DEPTH {
        let (elem, min) = if level + 1 == MAX_ARRAY_DEPTH { (ValueType::String, 8) } else { (ValueType::Array, 12) };
        b.extend_from_slice(&(elem as u32).to_le_bytes());
        let n = left(&b, 8) / min;
        b.extend_from_slice(&n.to_le_bytes());
    }
    out.push(("nested claims".to_string(), finish(b)));

    // Fixed-size arrays read their elements at once, so a claim must be backed by bytes.
    for (what, elem) in [("u64 array", ValueType::U64), ("bool array", ValueType::Bool)] {
        let mut b = Raw::new(3, 0, 1).finish();
        b.extend_from_slice(&1u64.to_le_bytes());
        b.push(b'k');
        b.extend_from_slice(&(ValueType::Array as u32).to_le_bytes());
        b.extend_from_slice(&(elem as u32).to_le_bytes());
        let n = left(&b, 8) / elem.fixed_size().expect("fixed") as u64 + 1;
        b.extend_from_slice(&n.to_le_bytes());
        out.push((what.to_string(), finish(b)));
    }

    // Counts far beyond the input.
    for v in [u64::MAX, 1 << 40] {
        let r = sample();
        for f in r.fields.iter().filter(|f| matches!(f.kind, Kind::NTensors | Kind::NKv | Kind::ArrayCount)) {
            let mut b = r.with_u64(f.at, v);
            b.resize(len.max(b.len()), FILL);
            out.push((format!("{:?} at {} = {v}", f.kind, f.at), b));
        }
    }
    out
}

#[test]
fn huge_claims_allocate_little() {
    let mut failures = Vec::new();
    for len in [4 << 10, 64 << 10, 1 << 20] {
        for (what, input) in huge_claims(len) {
            let (result, peak) = measure(|| Gguf::parse(&input).map(|_| ()));
            let limit = 4 * input.len() + (64 << 10);
            if result.is_ok() {
                failures.push(format!("{what} ({len} bytes): parsed"));
            }
            if peak > limit {
                failures.push(format!(
                    "{what} ({len} bytes): peak {peak} bytes > limit {limit} ({:.1}x input)",
                    peak as f64 / input.len() as f64
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
