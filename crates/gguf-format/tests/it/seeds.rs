//! Small valid GGUF files for the fuzzer's starting corpus. Not run by default:
//! `GGUF_FUZZ_SEEDS=$PWD/fuzz/corpus/parse cargo test -p gguf-format --test it -- --ignored write_fuzz_seeds`.

use gguf_format::{Array, GgufWriter, Value, ValueType, MAX_ARRAY_DEPTH};

use crate::raw::{noise, Kind};

/// The seeds, by name: every value type, every registered tensor type (one each, smallest
/// shape), several alignments, an unknown tensor type, and the hostile tests' sample.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let write = |w: GgufWriter<'_>| {
        let mut b = Vec::new();
        w.write_to(&mut b).expect("seed writes");
        b
    };
    out.push(("empty".to_string(), write(GgufWriter::new())));
    out.push(("empty-v2-unpadded".to_string(), write(GgufWriter::new().with_version(2).with_empty_padding(false))));

    let scalars = [
        Value::U8(1),
        Value::I8(-1),
        Value::U16(2),
        Value::I16(-2),
        Value::U32(3),
        Value::I32(-3),
        Value::F32(0.5),
        Value::Bool(true),
        Value::from("text"),
        Value::U64(4),
        Value::I64(-4),
        Value::F64(0.25),
    ];
    let mut w = GgufWriter::new();
    for v in &scalars {
        w.add_kv(&format!("s.{}", v.value_type().name()), v.clone());
        w.add_kv(&format!("a.{}", v.value_type().name()), Array::empty(v.value_type()));
    }
    w.add_kv("a.strings", Array::String(vec![b"a".to_vec(), b"\xff".to_vec()].into()));
    w.add_kv("a.f32", Array::F32(vec![1.0, 2.0]));
    w.add_kv("a.nested", Array::Array(vec![Array::U8(vec![1]), Array::empty(ValueType::Array)]));
    out.push(("values".to_string(), write(w)));

    for t in ggml_quants::all() {
        for align in [None, Some(1), Some(64)] {
            let mut w = GgufWriter::new();
            if let Some(a) = align {
                w = w.with_alignment(a);
            }
            w.add_kv("general.architecture", "seed");
            let size = t.bytes_for(t.block_size as u64).expect("one block") as usize;
            w.add_tensor_owned("a", &[t.block_size as u64], t.id, noise(size, t.id as u64)).expect("a");
            w.add_tensor_owned("b", &[1], 0, vec![0, 0, 128, 63]).expect("b");
            out.push((format!("{}-align{}", t.name, align.unwrap_or(32)), write(w)));
        }
    }

    let sample = crate::hostile::sample();
    out.push(("sample".to_string(), sample.finish()));
    let type_at = sample.fields_of(Kind::TensorType).nth(1).expect("type").at;
    out.push(("unknown-type".to_string(), sample.with_u32(type_at, 9999)));
    out.push(("deep".to_string(), crate::hostile::deep_file(MAX_ARRAY_DEPTH, 1)));
    out
}

#[test]
fn seeds_are_valid_and_small() {
    for (name, bytes) in seeds() {
        gguf_format::Gguf::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(bytes.len() <= 4096, "{name}: {} bytes", bytes.len());
    }
}

#[test]
#[ignore = "writes the fuzz corpus; set GGUF_FUZZ_SEEDS"]
fn write_fuzz_seeds() {
    let dir = std::env::var_os("GGUF_FUZZ_SEEDS")
        .expect("set GGUF_FUZZ_SEEDS to the corpus directory (an absolute path: tests run in the crate directory)");
    std::fs::create_dir_all(&dir).expect("create corpus dir");
    let seeds = seeds();
    for (name, bytes) in &seeds {
        std::fs::write(std::path::Path::new(&dir).join(format!("seed-{name}.gguf")), bytes).expect("write seed");
    }
    eprintln!("wrote {} seeds", seeds.len());
}
