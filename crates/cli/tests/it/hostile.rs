//! The hostile-input suite: files and flags a stranger can hand the `gguf` binary, each run
//! in a child process under an address-space limit (`ulimit -v`) and a wall-clock limit.
//! Every case must end in a clear error (or a bounded result): an exit code below 128 (no
//! signal, no abort), no "panicked", inside its time, and no temporary left behind.
//!
//! `GGUF_HOSTILE_REPORT=1 cargo test -p gguf-cli --test it hostile -- --nocapture` prints each
//! case's exit code, time and peak RSS (from `/usr/bin/time` where present);
//! `GGUF_HOSTILE_BIN=<older gguf>` runs the cases against another build (for a
//! before/after table).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gguf_format::{Array, GgufFile, GgufWriter, Value};
use gguf_models::synthetic::{write, Tiny};

/// Address space each case may use. Generous for a debug build, far below what the
/// unbounded paths asked for (terabytes).
const MEM_KIB: u64 = 4 << 20;
/// Wall time each case may use (a debug build under a loaded CI machine).
const TIME: Duration = Duration::from_secs(30);

struct Probe {
    code: i32,
    secs: f64,
    rss_kib: Option<u64>,
    stdout_len: usize,
    stderr: String,
}

/// Runs `gguf args` with `stdin`, under the limits.
fn probe(name: &str, args: &[&str], stdin: &str) -> Probe {
    let dir = tempfile::tempdir().unwrap();
    let rss = dir.path().join("rss");
    let time = Path::new("/usr/bin/time").exists();
    let script = if time {
        format!("ulimit -v {MEM_KIB}; exec /usr/bin/time -q -f %M -o '{}' \"$0\" \"$@\"", rss.display())
    } else {
        format!("ulimit -v {MEM_KIB}; exec \"$0\" \"$@\"")
    };
    let t0 = Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(std::env::var("GGUF_HOSTILE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_gguf").into()))
        .args(args)
        .env("GGUF_CACHE", "/nonexistent-cache")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).ok();
    // read the pipes on threads so a chatty child cannot block
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut n = 0usize;
        let mut buf = [0u8; 1 << 16];
        while let Ok(k) = std::io::Read::read(&mut out, &mut buf) {
            if k == 0 {
                break;
            }
            n += k;
        }
        n
    });
    let err_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > TIME {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let secs = t0.elapsed().as_secs_f64();
    let stdout_len = out_t.join().unwrap();
    let stderr = err_t.join().unwrap();
    let code = match status {
        None => {
            if std::env::var_os("GGUF_HOSTILE_REPORT").is_some() {
                println!("hostile | {name:<44} | killed after {TIME:?}");
            }
            panic!("{name}: still running after {TIME:?}; stderr: {stderr}")
        }
        Some(s) => s.code().unwrap_or_else(|| {
            use std::os::unix::process::ExitStatusExt;
            128 + s.signal().unwrap_or(0)
        }),
    };
    let rss_kib = std::fs::read_to_string(&rss).ok().and_then(|s| s.lines().last()?.trim().parse().ok());
    let p = Probe { code, secs, rss_kib, stdout_len, stderr };
    if std::env::var_os("GGUF_HOSTILE_REPORT").is_some() {
        println!(
            "hostile | {name:<44} | exit {:>3} | {:>6.2} s | {:>8} KiB | {}",
            p.code,
            p.secs,
            p.rss_kib.map_or("?".into(), |k| k.to_string()),
            p.stderr.lines().last().unwrap_or("").chars().take(110).collect::<String>()
        );
    }
    p
}

/// The case ended cleanly: an exit code below 128 (no signal), no panic message, and, if
/// it failed, an `error:` line containing `needle`.
fn clean(name: &str, p: &Probe, needle: Option<&str>) {
    if other_build() {
        return;
    }
    assert!(p.code < 128, "{name}: killed (exit {}); stderr: {}", p.code, p.stderr);
    assert!(!p.stderr.contains("panicked"), "{name}: panicked: {}", p.stderr);
    assert!(!p.stderr.contains("memory allocation of"), "{name}: allocation abort: {}", p.stderr);
    if let Some(n) = needle {
        assert_ne!(p.code, 0, "{name}: expected an error naming {n:?}; stderr: {}", p.stderr);
        assert!(
            p.stderr.contains("error: ") && p.stderr.contains(n),
            "{name}: the error must name {n:?}: {}",
            p.stderr
        );
    }
}

/// Runs against another build (`GGUF_HOSTILE_BIN`) only report; they assert nothing.
fn other_build() -> bool {
    std::env::var_os("GGUF_HOSTILE_BIN").is_some()
}

/// The case succeeded (exit 0).
fn ok(name: &str, p: &Probe) {
    assert!(other_build() || p.code == 0, "{name}: exit {}: {}", p.code, p.stderr);
}

fn temps(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") || n.ends_with(".partial"))
        .collect()
}

fn tiny(dir: &Path, name: &str, extra: &[(&str, Value)]) -> PathBuf {
    tiny_of(dir, name, "llama", extra)
}

fn tiny_of(dir: &Path, name: &str, arch: &str, extra: &[(&str, Value)]) -> PathBuf {
    let p = dir.join(format!("{name}.gguf"));
    write(&Tiny::new(arch).with_tokenizer(), &p, None, extra).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn hostile_inspect_names_and_arrays_are_bounded() {
    let d = tempfile::tempdir().unwrap();
    // a 70,000-byte key and tensor name: once "Formatting argument out of range"
    let long = d.path().join("long.gguf");
    let mut w = GgufWriter::new();
    w.add_kv(&"k".repeat(70_000), 1u32);
    w.add_kv("general.architecture", "llama");
    for i in 0..2000 {
        w.add_kv(&format!("key.{i}"), i as u32);
    }
    w.add_tensor_owned(&"t".repeat(70_000), &[4], 0, vec![0; 16]).unwrap();
    w.write_to_path(&long).unwrap();
    let size = std::fs::metadata(&long).unwrap().len() as usize;
    for args in [&["inspect", s(&long)][..], &["inspect", "--json", s(&long)]] {
        let p = probe("inspect: 70,000-byte key and tensor name", args, "");
        clean("inspect long names", &p, None);
        ok("", &p);
        // every line is not padded to the longest name: output stays near the file's size
        assert!(other_build() || p.stdout_len < 4 * size, "{} bytes of output from a {size}-byte file", p.stdout_len);
    }
    // a key that would drive the terminal is shown escaped
    let esc = d.path().join("esc.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("a\x1b]0;owned\x07\x1b[2J", 1u32);
    w.write_to_path(&esc).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_gguf")).args(["inspect", s(&esc)]).output().unwrap();
    assert!(
        other_build() || (o.status.success() && !o.stdout.contains(&0x1b)),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // nested arrays: 8 levels of 8 show 8 values in all, not 8 per level (8^8)
    fn nest(depth: usize) -> Array {
        if depth == 1 {
            Array::U8(vec![7; 8])
        } else {
            Array::Array((0..8).map(|_| nest(depth - 1)).collect())
        }
    }
    let nested = d.path().join("nested.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("nest", Value::Array(nest(8)));
    w.write_to_path(&nested).unwrap();
    for args in [&["inspect", s(&nested)][..], &["inspect", "--json", s(&nested)]] {
        let p = probe("inspect: 8 levels of 8 nested arrays", args, "");
        clean("inspect nested", &p, None);
        ok("", &p);
        assert!(other_build() || p.stdout_len < 16 << 10, "{} bytes of output", p.stdout_len);
    }
    // totals that overflow u64 (tensors of an unknown type carry no data)
    let big = d.path().join("big.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "llama");
    for i in 0..8 {
        w.add_tensor_source(
            &format!("t{i}"),
            &[1 << 31, 1 << 31, 1 << 1],
            9999,
            0,
            gguf_format::TensorSource::Owned(Vec::new()),
        )
        .ok();
    }
    if w.write_to_path(&big).is_ok() {
        let p = probe("inspect: element totals past u64", &["inspect", s(&big)], "");
        clean("inspect totals", &p, None);
    }
}

#[test]
fn hostile_dequant_allocates_nothing_for_an_empty_tensor_and_leaves_no_temporary() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("empty.gguf");
    let mut w = GgufWriter::new();
    w.add_tensor_owned("wide", &[1 << 40, 0], 0, Vec::new()).unwrap();
    w.add_tensor_owned("x", &[4], 0, vec![0; 16]).unwrap();
    w.write_to_path(&f).unwrap();
    let out = d.path().join("wide.f32");
    let p = probe("dequant: zero-element tensor with ne0 = 2^40", &["dequant", s(&f), "wide", "-o", s(&out)], "");
    clean("dequant empty", &p, None);
    ok("", &p);
    assert!(other_build() || std::fs::metadata(&out).map_or(0, |m| m.len()) == 0);
    // -o an existing directory: refused up front, nothing left
    let sub = d.path().join("adir");
    std::fs::create_dir(&sub).unwrap();
    let p = probe("dequant: -o an existing directory", &["dequant", s(&f), "x", "-o", s(&sub)], "");
    clean("dequant -o dir", &p, Some("directory"));
    assert!(other_build() || temps(d.path()).is_empty(), "{:?}", temps(d.path()));
    // an unknown tensor: nothing created
    let none = d.path().join("none.f32");
    let p = probe("dequant: unknown tensor", &["dequant", s(&f), "nope", "-o", s(&none)], "");
    clean("dequant unknown", &p, Some("nope"));
    assert!(other_build() || (!none.exists() && temps(d.path()).is_empty()));
}

#[test]
fn hostile_context_and_thread_sizes_are_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "ok", &[]);
    let p = probe("run: -c 10000000", &["run", "-m", s(&m), "-p", "hi", "-n", "1", "-c", "10000000"], "");
    // the tiny model's cache at 10 M positions is 5 GiB: over the limit of this case
    clean("run -c 10000000", &p, None);
    let huge = tiny(d.path(), "huge_ctx", &[("llama.context_length", Value::U32(u32::MAX))]);
    let p =
        probe("run: context_length 2^32-1 with -c 0", &["run", "-m", s(&huge), "-p", "hi", "-n", "1", "-c", "0"], "");
    clean("run -c 0 huge context_length", &p, Some("-c"));
    let p = probe("run: -c 2^40", &["run", "-m", s(&m), "-p", "hi", "-n", "1", "-c", "1099511627776"], "");
    clean("run -c 2^40", &p, Some("-c"));
    let p = probe("run: -t 100000", &["run", "-m", s(&m), "-p", "hi", "-n", "2", "-t", "100000", "--temp", "0"], "");
    clean("run -t 100000", &p, None);
    ok("", &p);
    assert!(other_build() || p.stderr.contains("warning: --threads"), "{}", p.stderr);
    let q = d.path().join("q.gguf");
    let p = probe("quantize: 100000 threads", &["quantize", s(&m), s(&q), "Q8_0", "100000"], "");
    clean("quantize 100000 threads", &p, None);
    ok("", &p);
}

#[test]
fn hostile_hyperparameters_and_norms_are_refused_by_name() {
    let d = tempfile::tempdir().unwrap();
    let cases: [(&str, Value); 8] = [
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(f32::NAN)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(-1.0)),
        ("llama.rope.freq_base", Value::F32(f32::INFINITY)),
        ("llama.rope.freq_base", Value::F32(0.0)),
        ("llama.attention.scale", Value::F32(f32::NAN)),
        ("llama.rope.scaling.factor", Value::F32(f32::NEG_INFINITY)),
        // read only where llama.cpp reads it (mistral3; deepseek2 its own way)
        ("mistral3.rope.scaling.yarn_log_multiplier", Value::F64(f64::NAN)),
        ("llama.rope.scaling.attn_factor", Value::F64(1e300)),
    ];
    for (i, (key, v)) in cases.iter().enumerate() {
        let arch = key.split('.').next().unwrap();
        let scaling = format!("{arch}.rope.scaling.type");
        let mut extra = vec![(*key, v.clone())];
        if key.contains("scaling") {
            extra.push((scaling.as_str(), Value::String(b"yarn".to_vec())));
        }
        let m = tiny_of(d.path(), &format!("hp{i}"), arch, &extra);
        let p = probe(&format!("run: {key} = {v:?}"), &["run", "-m", s(&m), "-p", "hi", "-n", "1"], "");
        clean(key, &p, Some(key));
    }
    // a NaN in a norm weight
    let m = tiny(d.path(), "nan_norm", &[]);
    let (at, len) = {
        let f = GgufFile::open(&m).unwrap();
        let t = f.tensors().iter().find(|t| t.name == "blk.1.attn_norm.weight").unwrap();
        ((f.data_offset() + t.offset) as usize, t.size.unwrap() as usize)
    };
    let mut bytes = std::fs::read(&m).unwrap();
    bytes[at + len - 4..at + len].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&m, bytes).unwrap();
    let p = probe("run: NaN in blk.1.attn_norm.weight", &["run", "-m", s(&m), "-p", "hi", "-n", "1"], "");
    clean("NaN norm", &p, Some("blk.1.attn_norm.weight"));
    // a string that is not UTF-8
    let m = tiny(d.path(), "bad_utf8", &[("general.architecture", Value::String(vec![0xff, 0xfe]))]);
    let p = probe("run: general.architecture not UTF-8", &["run", "-m", s(&m), "-p", "hi", "-n", "1"], "");
    clean("non-UTF-8 architecture", &p, Some("not valid UTF-8"));
}

#[test]
fn hostile_chat_template_rendering_nothing_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "empty_tmpl", &[("tokenizer.chat_template", Value::String(b"{# nothing #}".to_vec()))]);
    let p = probe("chat: template renders \"\", no BOS", &["chat", "-m", s(&m), "-n", "2"], "hello\n");
    clean("chat empty render", &p, Some("rendered no tokens"));
}

#[test]
fn hostile_flag_values_are_refused_or_mean_what_llama_cpp_means() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "flags", &[]);
    for (flag, v) in [("--temp", "nan"), ("--top-p", "inf"), ("--repeat-penalty", "NaN"), ("--seed", "-5")] {
        let p = probe(&format!("run: {flag} {v}"), &["run", "-m", s(&m), "-p", "hi", "-n", "1", flag, v], "");
        assert!(other_build() || p.code == 2, "{flag} {v}: {}", p.stderr);
        assert!(other_build() || p.stderr.contains(flag), "{flag} {v}: {}", p.stderr);
    }
    // llama.cpp's -1s: a random seed, the whole context as penalty history, top-k off
    let args = ["run", "-m", s(&m), "-p", "hi", "-n", "2", "--seed", "-1", "--repeat-last-n", "-1", "--top-k", "-1"];
    let p = probe("run: --seed -1 --repeat-last-n -1 --top-k -1", &args, "");
    ok("", &p);
    // a context past the training context: a warning, as llama.cpp gives
    let p = probe(
        "run: -c 1024 on a model trained for 256",
        &["run", "-m", s(&m), "-p", "hi", "-n", "1", "-c", "1024"],
        "",
    );
    ok("", &p);
    assert!(other_build() || p.stderr.contains("the 256 positions the model was trained for"), "{}", p.stderr);
}
