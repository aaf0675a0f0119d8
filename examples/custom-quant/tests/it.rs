//! A GGUF file using the plug-in type is written, read back through the registry,
//! dequantized and inspected, with no change to any core crate; a tiny llama whose weight
//! matrices are `q8_demo` runs through the rebuilt binary on the plug-in's kernels.

use custom_quant::Q8_DEMO_ID;
use gguf_format::{GgufFile, GgufWriter};

// Link the plug-in and the built-in types.
use custom_quant as _;
use ggml_quants as _;

fn data(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect()
}

#[test]
fn plugin_type_is_registered_once() {
    let t = ggml_quants::by_id(Q8_DEMO_ID).expect("q8_demo registered");
    assert_eq!(t.name, "q8_demo");
    assert_eq!(ggml_quants::by_name("q8_demo").map(|t| t.id), Some(Q8_DEMO_ID));
    let report = ggml_quants::registry_problems();
    assert!(report.problems.is_empty() && report.overrides.is_empty(), "{report:?}");
    // The built-ins are still there alongside it.
    assert_eq!(ggml_quants::by_name("q4_K").map(|t| t.id), Some(12));
}

#[test]
fn gguf_roundtrip_through_the_registry() {
    let t = ggml_quants::by_id(Q8_DEMO_ID).unwrap();
    let (ne0, ne1) = (64usize, 3usize);
    let x = data(ne0 * ne1);
    let q = t.quantize_to_vec(&x, ne0, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "demo");
    w.add_tensor("demo.weight", &[ne0 as u64, ne1 as u64], Q8_DEMO_ID, &q).unwrap();
    w.write_to_path(&path).unwrap();

    let f = GgufFile::open(&path).unwrap();
    let info = f.tensor("demo.weight").unwrap();
    assert_eq!(info.type_name(), "q8_demo");
    assert_eq!(info.size, Some(q.len() as u64));
    let bytes = f.tensor_data(info).unwrap();
    assert_eq!(bytes, &q[..]);
    let y = info.require_type().unwrap().dequantize_to_vec(bytes).unwrap();
    for (a, b) in x.iter().zip(&y) {
        assert!((a - b).abs() <= 7.2 / 127.0 + 1e-6, "{a} vs {b}");
    }

    let json = gguf_cli::inspect::to_json(&f, false);
    assert_eq!(json["tensors"][0]["type"], "q8_demo");
    assert_eq!(json["type_mix"]["q8_demo"]["tensors"], 1);
}

/// The rebuilt `gguf` (this crate's `gguf-custom-quant`, `fn main` = `gguf_cli::main()`)
/// lists the plug-in type and reads a file that uses it, end to end through the binary.
#[test]
fn a_rebuilt_gguf_binary_knows_the_plugin() {
    let bin = env!("CARGO_BIN_EXE_gguf-custom-quant");
    let out = std::process::Command::new(bin).arg("types").output().unwrap();
    assert!(out.status.success());
    let types = String::from_utf8_lossy(&out.stdout);
    let row = types.lines().find(|l| l.contains("q8_demo")).unwrap_or_else(|| panic!("{types}"));
    assert!(row.trim_start().starts_with(&Q8_DEMO_ID.to_string()), "{row}");
    assert!(types.lines().any(|l| l.contains(" q4_K ")), "the built-ins too: {types}");

    let t = ggml_quants::by_id(Q8_DEMO_ID).unwrap();
    let x = data(64 * 2);
    let q = t.quantize_to_vec(&x, 64, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "demo");
    w.add_tensor("demo.weight", &[64, 2], Q8_DEMO_ID, &q).unwrap();
    w.write_to_path(&path).unwrap();
    let out = std::process::Command::new(bin).arg("inspect").arg(&path).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tensors"][0]["type"], "q8_demo");
    let f32_out = dir.path().join("w.f32");
    let out = std::process::Command::new(bin)
        .args(["dequant", path.to_str().unwrap(), "demo.weight", "-o", f32_out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&f32_out).unwrap().len(), 64 * 2 * 4);
}

fn gguf(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_gguf-custom-quant"));
    c.args(args).env("GGUF_CACHE", "/nonexistent-cache").env_remove("GGUF_CPU_FEATURES");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// What `quant_kernels::x86_64::has_avx2` finds without a cap (the children run uncapped
/// unless a test sets `GGUF_CPU_FEATURES`).
fn cpu_has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

fn ok(o: &std::process::Output, what: &str) -> String {
    assert!(o.status.success(), "{what}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A tiny llama (`gguf_models::synthetic`, byte-level tokenizer) with every matrix whose rows
/// are whole blocks stored as `q8_demo` (token_embd too: its rows are read through the
/// plug-in's `dequantize`, and as the tied output it is a 257-row product, not whole
/// 4-row groups, so it runs unrepacked), norms in F32.
fn tiny_q8_demo(dir: &std::path::Path) -> std::path::PathBuf {
    let src_path = dir.join("f32.gguf");
    gguf_models::synthetic::write(&gguf_models::synthetic::Tiny::new("llama").with_tokenizer(), &src_path, None, &[])
        .unwrap();
    let src = GgufFile::open(&src_path).unwrap();
    let demo = ggml_quants::by_id(Q8_DEMO_ID).unwrap();
    let mut w = GgufWriter::new();
    *w.metadata_mut() = src.metadata().clone();
    let mut converted = 0;
    for t in src.tensors() {
        let data = src.tensor_data(t).unwrap();
        assert_eq!(t.type_id, 0, "{} is F32 in the synthetic model", t.name);
        if t.dims.len() == 2 && t.dims[0] % 32 == 0 {
            let x: Vec<f32> = data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
            let q = demo.quantize_to_vec(&x, t.dims[0] as usize, None).unwrap();
            w.add_tensor_owned(&t.name, &t.dims, Q8_DEMO_ID, q).unwrap();
            converted += 1;
        } else {
            w.add_tensor(&t.name, &t.dims, t.type_id, data).unwrap();
        }
    }
    assert_eq!(converted, 1 + 7 * 2, "token_embd and the 7 matrices of each of the 2 layers");
    let path = dir.join("tiny-q8_demo.gguf");
    w.write_to_path(&path).unwrap();
    path
}

/// The q8_demo row of `gguf-custom-quant types` under `env`: its last column is the kernel.
fn kernel_shown(env: &[(&str, &str)]) -> String {
    let types = ok(&gguf(&["types"], env), "types");
    let row = types.lines().find(|l| l.contains(" q8_demo ")).unwrap_or_else(|| panic!("{types}"));
    row.split_whitespace().last().unwrap().to_string()
}

/// The paths the plug-in reports under `CUSTOM_QUANT_TRACE` (see `kernels::TRACE_ENV`).
fn traced(stderr: &[u8]) -> Vec<String> {
    let mut v: Vec<String> =
        String::from_utf8_lossy(stderr).lines().filter_map(|l| l.strip_prefix("q8_demo: ")).map(String::from).collect();
    v.sort();
    v
}

/// `run` and `logits` of a `q8_demo` model through the rebuilt binary: on an AVX2 CPU the
/// plug-in's AVX2 kernel and its `q8_demo_x4` layout run (the trace says so), and the
/// result is the one of the scalar kernel on GGUF's rows (`GGUF_CPU_FEATURES=scalar`):
/// the same tokens, and logits equal byte for byte.
#[test]
fn a_q8_demo_model_runs_on_the_plugin_kernels_through_the_rebuilt_binary() {
    let dir = tempfile::tempdir().unwrap();
    let m = tiny_q8_demo(dir.path());
    let ms = m.to_str().unwrap();
    let trace = (custom_quant::kernels::TRACE_ENV, "1");
    let scalar = ("GGUF_CPU_FEATURES", "scalar");
    let avx2 = cpu_has_avx2();
    assert_eq!(kernel_shown(&[scalar]), custom_quant::kernels::SCALAR_BACKEND);
    let native_kernel = kernel_shown(&[]);
    if avx2 {
        assert_eq!(native_kernel, custom_quant::kernels::AVX2_BACKEND);
    } else {
        eprintln!("no AVX2 on this CPU: only the scalar kernel runs");
        assert_eq!(native_kernel, custom_quant::kernels::SCALAR_BACKEND);
    }
    // On an AVX-512 CPU the core's own f32/f16 operations pick 16-lane reductions unless
    // capped; capping at avx2 keeps every core op in the arithmetic the scalar cap uses,
    // so the only difference left between the two runs is the q8_demo kernel and layout.
    let simd = ("GGUF_CPU_FEATURES", "avx2");

    let run = |env: &[(&str, &str)]| {
        let o = gguf(&["run", "-m", ms, "-p", "hello", "-n", "8", "--temp", "0", "-t", "2", "--json"], env);
        let out = ok(&o, "run");
        let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        (v, traced(&o.stderr))
    };
    let (v_simd, t_simd) = run(&[simd, trace]);
    let (v_scalar, t_scalar) = run(&[scalar, trace]);
    let (v_native, _) = run(&[]);
    let toks = v_simd["tokens"].as_array().unwrap();
    assert!(toks.len() == 8 || v_simd["stop"] == "eog", "{v_simd}");
    assert_eq!(v_simd["tokens"], v_scalar["tokens"], "AVX2 + repack vs scalar");
    assert_eq!(v_native["tokens"], v_scalar["tokens"], "native vs scalar");
    assert_eq!(t_scalar, ["demo-scalar vec_dot"], "the scalar cap: the scalar kernel on GGUF's rows only");
    if avx2 {
        assert_eq!(t_simd, ["demo-avx2 q8_demo_x4 tile", "demo-avx2 vec_dot"], "repacked layers, unrepacked output");
    }

    let logits = |env: &[(&str, &str)], name: &str| {
        let out = dir.path().join(name);
        let o = gguf(&["logits", "-m", ms, "-p", "hello world", "-t", "3", "-o", out.to_str().unwrap()], env);
        ok(&o, "logits");
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(bytes.len(), "hello world".len() * 257 * 4, "[n_tokens][n_vocab] f32");
        (bytes, traced(&o.stderr))
    };
    let (l_simd, t_simd) = logits(&[simd, trace], "simd.f32");
    let (l_scalar, t_scalar) = logits(&[scalar, trace], "scalar.f32");
    let (l_native, _) = logits(&[], "native.f32");
    assert!(l_scalar.chunks_exact(4).any(|b| b != [0; 4]), "logits are not all zero");
    assert!(l_simd == l_scalar, "logits: AVX2 kernel + q8_demo_x4 vs scalar kernel differ");
    // Uncapped, the core's ops of this model's shapes give the same bits as well.
    assert!(l_native == l_scalar, "logits: native vs GGUF_CPU_FEATURES=scalar differ");
    assert_eq!(t_scalar, ["demo-scalar vec_dot"]);
    if avx2 {
        assert_eq!(t_simd, ["demo-avx2 q8_demo_x4 tile", "demo-avx2 vec_dot"]);
    }
}

/// The rebuilt binary's registry check: sound, with the plug-in's type and kernels in it.
#[test]
fn types_check_is_sound_with_the_plugin() {
    let o = gguf(&["types", "--check"], &[]);
    let out = ok(&o, "types --check");
    assert!(!out.contains("PROBLEMS"), "{out}");
    // This test links the plug-in too: the binary's counts are ours, plug-in included.
    assert!(quant_kernels::registry::kernel_for(Q8_DEMO_ID).is_some());
    let n_types = ggml_quants::all().len();
    assert!(out.contains(&format!("ggml types: {n_types} registered, 0 problem(s)")), "{out}");
    let with_kernel = ggml_quants::all().iter().filter(|t| quant_kernels::registry::kernel_for(t.id).is_some()).count();
    assert!(out.contains(&format!("kernels: {with_kernel} types with a kernel here, 0 problem(s)")), "{out}");
    assert_eq!(kernel_shown(&[]), quant_kernels::kernel_info(Q8_DEMO_ID));
}
