//! A signal in the middle of `gguf quantize`: Ctrl-C (SIGINT) or SIGTERM ends it with a
//! plain error and a failing exit code (not death by the signal), and leaves neither the
//! output nor its temporary behind.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gguf_format::{GgufWriter, Value};

const TENSORS: u32 = 16;

/// A llama-named F32 model of 256×2048 tensors (2 MiB each). `--pure IQ3_S` on one
/// thread quantizes it at about 15 MB/s (BENCHMARKS.md), so the run takes seconds and is
/// still going when it is signalled.
fn model(dir: &Path) -> PathBuf {
    let p = dir.join("big.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "llama");
    w.add_kv("llama.block_count", Value::U32(TENSORS));
    let mut seed = 7u64;
    for i in 0..TENSORS {
        let data: Vec<u8> = (0..256 * 2048)
            .flat_map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1).to_le_bytes()
            })
            .collect();
        w.add_tensor_owned(&format!("blk.{i}.ffn_up.weight"), &[256, 2048], 0, data).unwrap();
    }
    w.write_to_path(&p).unwrap();
    p
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    v.sort();
    v
}

fn interrupted_by(signal: &str) {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let out = d.path().join("out.gguf");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gguf"))
        .args(["quantize", "--pure", "--no-progress", m.to_str().unwrap(), out.to_str().unwrap(), "IQ3_S", "1"])
        .env("GGUF_CACHE", "/nonexistent-cache")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    // Wait for the second tensor to start: by then the output's temporary exists.
    let second = format!("[   2/{TENSORS:4}]");
    while !log.contains(&second) {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "{signal}: exited before the second tensor:\n{log}");
        log.push_str(&line);
    }
    let t0 = Instant::now();
    while !names(d.path()).iter().any(|n| n.starts_with(".out.gguf.") && n.ends_with(".tmp")) {
        assert!(t0.elapsed() < Duration::from_secs(30), "{signal}: no temporary appeared: {:?}", names(d.path()));
        std::thread::sleep(Duration::from_millis(10));
    }
    let kill = Command::new("kill").args(["-s", signal, &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    log.push_str(&rest);
    let status = child.wait().unwrap();
    // handled: an ordinary failure, not the default action of the signal (no exit code)
    assert_eq!(status.code(), Some(1), "{signal}: {status:?}\n{log}");
    assert_eq!(log.lines().last(), Some("error: interrupted; no output file written"), "{signal}:\n{log}");
    let last = format!("[{TENSORS:4}/{TENSORS:4}]");
    assert!(!log.contains(&last), "{signal}: the run was not cut short:\n{log}");
    assert_eq!(names(d.path()), ["big.gguf"], "{signal}: neither the output nor a temporary is left");
}

#[test]
fn quantize_stopped_by_ctrl_c_leaves_no_file() {
    interrupted_by("INT");
}

#[test]
fn quantize_stopped_by_sigterm_leaves_no_file() {
    interrupted_by("TERM");
}
