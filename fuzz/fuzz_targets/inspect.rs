//! Fuzz target: what `gguf inspect` and `gguf dequant` do with a file — the text and JSON
//! reports, and every tensor dequantized to a file — must never panic, and must stay
//! bounded: the report is at most a fixed multiple of the input, and a failed dequant
//! leaves no temporary behind.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use gguf_format::GgufFile;
// Registrations are linked only if the binary names the crate.
use ggml_quants as _;
use libfuzzer_sys::fuzz_target;

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("gguf-fuzz-inspect-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let input = dir().join("in.gguf");
    std::fs::write(&input, data).unwrap();
    let Ok(file) = GgufFile::open(&input) else { return };
    let text = gguf_cli::inspect::to_text(&file, false);
    let json = gguf_cli::inspect::to_json(&file, false).to_string();
    // 64 tensors/keys of fixed-width columns per input byte would be unbounded; allow a
    // generous constant factor plus a fixed header
    for (what, n) in [("text", text.len()), ("json", json.len())] {
        assert!(n <= 64 * data.len() + (64 << 10), "{what} report of {n} bytes for {} input bytes", data.len());
    }
    let out = dir().join("t.f32");
    for t in file.tensors().iter().take(8) {
        // rows of f32 bounded by the input: a tensor's data is in the file
        if t.n_elements.saturating_mul(4) > 64 << 20 {
            continue;
        }
        let _ = gguf_cli::dequant(&input, &t.name, &out);
    }
    let left: Vec<_> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporaries left: {left:?}");
});
