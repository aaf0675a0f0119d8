//! Regression tests: fuzz crashers (files under `crashers/`, named after what went wrong)
//! and bugs found while writing the other tests.

use gguf_format::{Error, Gguf, GgufFile, GgufWriter, ValueType, MAX_ARRAY_DEPTH};

use crate::alloc::measure;
use crate::raw::Raw;

/// What the `parse` fuzz target checks: a file that parses has a data view for every
/// tensor of a registered type, and writes back to a file that parses the same way and
/// re-writes to the same bytes.
fn assert_consistent(bytes: &[u8]) {
    let Ok(g) = Gguf::parse(bytes) else { return };
    for t in g.tensors() {
        match g.tensor_data(bytes, t) {
            Ok(d) => assert_eq!(Some(d.len() as u64), t.size, "{}", t.name),
            Err(Error::UnknownType { .. }) => assert!(t.size.is_none()),
            Err(e) => panic!("parse accepted tensor {:?} but its data fails: {e}", t.name),
        }
    }
    let file = GgufFile::from_vec(bytes.to_vec()).expect("from_vec");
    let Ok(w) = GgufWriter::from_file(&file) else { return };
    let mut out = Vec::new();
    w.write_to(&mut out).expect("write");
    let again = GgufFile::from_vec(out.clone()).expect("re-parse");
    assert_eq!(again.tensors().len(), g.tensors().len());
    let mut out2 = Vec::new();
    GgufWriter::from_file(&again).expect("from_file").write_to(&mut out2).expect("write");
    assert_eq!(out2, out);
}

/// Fuzz crash: a zero-size tensor (a dimension of 0) in a file that ends before the
/// aligned start of the data section. `parse` accepted it (its end, 0, fits the 0 bytes
/// of data) but `tensor_data` failed with `TensorOutOfBounds` because the view's start
/// lay past the end of the file.
#[test]
fn fuzz_zero_size_tensor_past_eof() {
    assert_consistent(include_bytes!("crashers/zero_size_tensor_past_eof.gguf"));
}

#[test]
fn zero_size_tensor_with_data_section_past_eof() {
    // Header and one tensor [0] of f32: 57 bytes; the data section would start at 64.
    let mut r = Raw::new(3, 1, 0);
    r.tensor("a", &[0], 0, 0);
    let bytes = r.finish();
    assert_eq!(bytes.len(), 57);
    let g = Gguf::parse(&bytes).expect("parses");
    assert_eq!(g.data_offset(), 64);
    assert_eq!(g.tensor_data(&bytes, &g.tensors()[0]).expect("empty view"), &[] as &[u8]);
    assert_consistent(&bytes);
}

/// Arrays of arrays reserved their full count at every nesting level, and each level's
/// count was checked against the same remaining bytes: a file claiming all it could at
/// each of 8 levels made the parser reserve ~21x its own size before failing (a 1 GiB file
/// would ask for ~21 GiB, and a failed allocation aborts the process).
#[test]
fn nested_array_counts_do_not_multiply_reservations() {
    let len = 1 << 20;
    let mut b = Raw::new(3, 0, 1).finish();
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(b'k');
    b.extend_from_slice(&(ValueType::Array as u32).to_le_bytes());
    for _ in 0..MAX_ARRAY_DEPTH {
        b.extend_from_slice(&(ValueType::Array as u32).to_le_bytes());
        let n = (len - b.len() - 8) as u64 / 12;
        b.extend_from_slice(&n.to_le_bytes());
    }
    b.resize(len, 0xff);
    let (result, peak) = measure(|| Gguf::parse(&b).map(|_| ()));
    assert!(result.is_err());
    assert!(peak < len, "peak {peak} bytes for a {len}-byte file");
}

/// The tensor table reserved its full count (~150 bytes in memory per entry, against at
/// least 24 in the file) before reading one entry: ~5.6x the file size.
#[test]
fn tensor_count_reservation_is_capped() {
    let len = 1 << 20;
    let mut b = Raw::new(3, 0, 0).finish();
    let n = (len - b.len()) as u64 / 24;
    b[8..16].copy_from_slice(&n.to_le_bytes());
    b.resize(len, 0xff);
    let (result, peak) = measure(|| Gguf::parse(&b).map(|_| ()));
    assert!(result.is_err());
    assert!(peak < len, "peak {peak} bytes for a {len}-byte file");
}
