//! Fuzz target: `Gguf::parse` on arbitrary bytes must never panic, and whatever it
//! accepts must be consistent: every tensor's data view is in bounds and of the declared
//! size (or an `UnknownType` error for unregistered types), and writing the file back
//! with `GgufWriter` gives a file that parses to the same tensors and metadata keys and
//! re-writes to the same bytes.
#![no_main]

use std::io::{self, Write};

use gguf_format::{Error, Gguf, GgufFile, GgufWriter};
// Registrations are linked only if the binary names the crate.
use ggml_quants as _;
use libfuzzer_sys::fuzz_target;

/// Output cap: a legal `general.alignment` of 2^31 makes the writer emit gigabytes of
/// padding, which is correct but not worth the fuzzer's memory.
const MAX_OUT: usize = 16 << 20;

/// A `Vec` sink that fails once it would exceed [`MAX_OUT`] bytes.
struct Capped(Vec<u8>);

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.0.len() + buf.len() > MAX_OUT {
            return Err(io::Error::other("output cap"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes `file` back; `None` if it has an unregistered tensor type or hits the cap.
fn rewrite(file: &GgufFile) -> Option<Vec<u8>> {
    let w = match GgufWriter::from_file(file) {
        Ok(w) => w,
        Err(Error::UnknownType { .. }) => {
            assert!(file.tensors().iter().any(|t| t.size.is_none()), "UnknownType with every type known");
            return None;
        }
        Err(e) => panic!("from_file failed on a parsed file: {e}"),
    };
    let mut out = Capped(Vec::new());
    match w.write_to(&mut out) {
        Ok(()) => Some(out.0),
        Err(Error::Io { .. }) => None,
        Err(e) => panic!("writing a parsed file failed: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data) else { return };
    for t in g.tensors() {
        match g.tensor_data(data, t) {
            Ok(d) => {
                assert_eq!(Some(d.len() as u64), t.size, "{}", t.name);
                std::hint::black_box(d.iter().fold(0u8, |a, &b| a ^ b));
            }
            Err(Error::UnknownType { .. }) => assert!(t.size.is_none(), "{}", t.name),
            Err(e) => panic!("parse accepted tensor {:?} but its data fails: {e}", t.name),
        }
    }

    let file = GgufFile::from_vec(data.to_vec()).expect("from_vec accepts what parse accepts");
    let Some(out) = rewrite(&file) else { return };
    let again = GgufFile::from_vec(out.clone()).unwrap_or_else(|e| panic!("written file does not parse: {e}"));
    assert_eq!(again.version(), g.version());
    assert_eq!(again.alignment(), g.alignment());
    let keys = |f: &GgufFile| f.metadata().iter().map(|(k, v)| (k.to_string(), v.value_type())).collect::<Vec<_>>();
    assert_eq!(keys(&again), keys(&file));
    assert_eq!(again.tensors().len(), g.tensors().len());
    for (a, b) in again.tensors().iter().zip(g.tensors()) {
        assert_eq!((&a.name, &a.dims, a.type_id, a.size), (&b.name, &b.dims, b.type_id, b.size));
        assert_eq!(again.tensor_data(a).expect("rewritten data"), g.tensor_data(data, b).expect("original data"));
    }
    // Writing is a fixed point after one round.
    let out2 = rewrite(&again).expect("second rewrite");
    assert!(out2 == out, "second rewrite differs");
});
