//! `-ngl` / `--device` on the engine commands: CUDA asked for where there is no driver (or
//! no device) stops with a one-line error naming what is missing, exit 1 and no panic;
//! `-ngl 0` and `--device cpu` run on the CPU.

use gguf_models::synthetic::{write, Tiny};

use super::gguf;

fn model(dir: &std::path::Path) -> String {
    let p = dir.join("llama.gguf");
    write(&Tiny::new("llama").with_tokenizer(), &p, None, &[]).unwrap();
    p.to_str().unwrap().to_string()
}

/// What the error must say after "CUDA requested (...) but " on this machine.
fn missing() -> String {
    match gguf_cuda::probe::driver_library() {
        Err(e) => e.to_string(),
        Ok(_) => match gguf_cuda::Device::count() {
            Err(e) => e.to_string(),
            Ok(_) => String::new(), // a device: the message says the forward pass is missing
        },
    }
}

#[test]
fn cuda_without_a_driver_or_device_is_a_clear_error_on_every_engine_command() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let text = d.path().join("t.txt");
    std::fs::write(&text, "hello world ".repeat(50)).unwrap();
    let t = text.to_str().unwrap();
    let why = missing();
    for (cmd, extra) in [
        ("run", &["-p", "x", "-n", "1"][..]),
        ("chat", &["-n", "1"]),
        ("logits", &["-p", "x", "-o", "/nonexistent/l.bin"]),
        ("perplexity", &["-f", t]),
        ("serve", &["--port", "0"]),
        ("bench", &["-p", "4", "-n", "0", "-r", "1"]),
    ] {
        for flags in
            [&["-ngl", "99"][..], &["--n-gpu-layers=all"], &["-dev", "cuda:1"], &["--device", "CUDA0", "-ngl", "5"]]
        {
            if cmd == "bench" && flags[0].ends_with("=all") {
                continue; // llama-bench's -ngl is an integer list
            }
            let mut args = vec![cmd, "-m", &m];
            args.extend_from_slice(flags);
            args.extend_from_slice(extra);
            let o = gguf(&args);
            assert_eq!(o.code, 1, "{args:?}: {}", o.stderr);
            assert!(!o.stderr.contains("panicked"), "{args:?}: {}", o.stderr);
            assert!(o.stderr.starts_with("error: CUDA requested ("), "{args:?}: {}", o.stderr);
            assert!(o.stderr.contains("use -ngl 0 or --device cpu"), "{args:?}: {}", o.stderr);
            if why.is_empty() {
                assert!(
                    o.stderr.contains("forward pass is not implemented yet") || o.stderr.contains("CUDA device 1"),
                    "{args:?}: {}",
                    o.stderr
                );
            } else {
                assert!(o.stderr.contains(&why), "{args:?}: {} (want {why})", o.stderr);
            }
        }
    }
    let o = gguf(&["run", "-m", &m, "-ngl", "99", "-p", "x", "-n", "1"]);
    if why.starts_with("no CUDA driver") {
        assert!(
            o.stderr.starts_with("error: CUDA requested (-ngl 99) but no CUDA driver: libcuda.so.1 not found (tried libcuda.so.1, libcuda.so)"),
            "{}",
            o.stderr
        );
    }
    let o = gguf(&["run", "-m", &m, "-dev", "cuda:1", "-p", "x", "-n", "1"]);
    assert!(o.stderr.starts_with("error: CUDA requested (--device cuda:1) but "), "{}", o.stderr);
}

#[test]
fn ngl_0_and_device_cpu_run_on_the_cpu() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let plain = gguf(&["run", "-m", &m, "-p", "ab", "-n", "3", "--temp", "0", "--json"]);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    for flags in [
        &["-ngl", "0"][..],
        &["--device", "cpu"],
        &["-dev", "none", "-ngl", "99"],
        &["-ngl", "auto"],
        &["--gpu-layers", "-1"],
        &["-ngl", "0", "-dev", "cuda"],
    ] {
        let mut args = vec!["run", "-m", &m, "-p", "ab", "-n", "3", "--temp", "0", "--json"];
        args.extend_from_slice(flags);
        let o = gguf(&args);
        assert_eq!(o.code, 0, "{flags:?}: {}", o.stderr);
        let toks = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap()["tokens"].clone();
        assert_eq!(toks(&o.stdout), toks(&plain.stdout), "{flags:?}");
    }
    let o = gguf(&["logits", "-m", &m, "-p", "ab", "-ngl", "0", "-o", d.path().join("l.bin").to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for bad in [&["--device", "vulkan0"][..], &["-ngl", "x"], &["--device", "cuda:0,cuda:1"]] {
        let mut args = vec!["run", "-m", &m, "-p", "ab"];
        args.extend_from_slice(bad);
        let o = gguf(&args);
        assert_eq!(o.code, 2, "{bad:?}: {}", o.stderr);
    }
}
