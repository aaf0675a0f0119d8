//! `gguf bench` against llama-bench's command line and output: parameter lists and ranges,
//! one row per combination in llama-bench's order, the md columns it shows, the
//! json/jsonl/csv/sql field names, and bad values named. Nothing here reads a timing value.

use std::path::{Path, PathBuf};

use gguf_format::Value;
use gguf_models::synthetic::{write, Tiny};

use super::{assert_clean_error, gguf, Out};

fn tiny(dir: &Path, name: &str, t: &Tiny, extra: &[(&str, Value)]) -> PathBuf {
    let p = dir.join(format!("{name}.gguf"));
    write(t, &p, None, extra).unwrap();
    p
}

fn model(dir: &Path) -> PathBuf {
    // head 32: the q8_0 cache cases need whole blocks per head, as llama.cpp
    tiny(dir, "llama", &Tiny { head: 32, ..Tiny::new("llama") }.with_tokenizer(), &[])
}

fn ok(args: &[&str]) -> Out {
    let o = gguf(args);
    assert_eq!(o.code, 0, "gguf {args:?}: {}", o.stderr);
    o
}

fn jsonl(o: &Out) -> Vec<serde_json::Value> {
    o.stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// The cells of a markdown line, trimmed.
fn cells(line: &str) -> Vec<String> {
    let t = line.trim();
    assert!(t.starts_with('|') && t.ends_with('|'), "{line}");
    t[1..t.len() - 1].split('|').map(|c| c.trim().to_string()).collect()
}

/// The md table: column titles, then each row's cells by title.
fn md(o: &Out) -> (Vec<String>, Vec<Vec<String>>) {
    let lines: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with('|')).collect();
    assert!(lines.len() >= 2, "{}", o.stdout);
    let head = cells(lines[0]);
    assert!(cells(lines[1]).iter().all(|c| c.chars().all(|ch| ch == '-' || ch == ':')), "{}", lines[1]);
    (head, lines[2..].iter().map(|l| cells(l)).collect())
}

fn col(head: &[String], rows: &[Vec<String>], name: &str) -> Vec<String> {
    let i = head.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name} in {head:?}"));
    rows.iter().map(|r| r[i].clone()).collect()
}

/// llama-bench's `test::get_fields`, then the two sample arrays.
const FIELDS: [&str; 44] = [
    "build_commit",
    "build_number",
    "cpu_info",
    "gpu_info",
    "backends",
    "model_filename",
    "model_type",
    "model_size",
    "model_n_params",
    "n_batch",
    "n_ubatch",
    "n_threads",
    "cpu_mask",
    "cpu_strict",
    "poll",
    "type_k",
    "type_v",
    "n_gpu_layers",
    "n_cpu_moe",
    "split_mode",
    "main_gpu",
    "no_kv_offload",
    "flash_attn",
    "devices",
    "tensor_split",
    "tensor_buft_overrides",
    "load_mode",
    "lazy_mode",
    "embeddings",
    "no_op_offload",
    "no_host",
    "repack",
    "fit_target",
    "fit_min_ctx",
    "n_prompt",
    "n_gen",
    "n_depth",
    "test_time",
    "avg_ns",
    "stddev_ns",
    "avg_ts",
    "stddev_ts",
    "samples_ns",
    "samples_ts",
];

#[test]
fn lists_make_one_test_per_combination_in_llama_bench_order() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let mp = m.to_str().unwrap();
    // llama-bench's loops: n_ubatch, type_k, n_threads (outer to inner), then pp, tg
    let o = ok(&[
        "bench", "-m", mp, "-ub", "8,16", "-ctk", "f16,q8_0", "-t", "1-2", "-p", "8", "-n", "2", "-r", "1", "-o",
        "jsonl",
    ]);
    let got: Vec<(u64, String, u64, u64, u64)> = jsonl(&o)
        .iter()
        .map(|r| {
            let u = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}"));
            (u("n_ubatch"), r["type_k"].as_str().unwrap().to_string(), u("n_threads"), u("n_prompt"), u("n_gen"))
        })
        .collect();
    let mut want = Vec::new();
    for ub in [8, 16] {
        for tk in ["f16", "q8_0"] {
            for t in [1, 2] {
                want.push((ub, tk.to_string(), t, 8, 0));
                want.push((ub, tk.to_string(), t, 0, 2));
            }
        }
    }
    assert_eq!(got, want);

    // ranges, repeated flags, 0 skipped, pp+tg last, the model loop outermost
    let m2 = tiny(d.path(), "qwen2", &Tiny::new("qwen2").with_tokenizer(), &[]);
    let both = format!("{mp},{}", m2.display());
    let o = ok(&[
        "bench", "-m", &both, "-p", "4-16*2", "-p", "0", "-n", "0", "-pg", "4,2", "-r", "1", "-t", "1", "-o", "jsonl",
    ]);
    let got: Vec<(String, u64, u64)> = jsonl(&o)
        .iter()
        .map(|r| {
            (
                r["model_filename"].as_str().unwrap().to_string(),
                r["n_prompt"].as_u64().unwrap(),
                r["n_gen"].as_u64().unwrap(),
            )
        })
        .collect();
    let m2s = m2.to_str().unwrap();
    let want: Vec<(String, u64, u64)> =
        [mp, m2s].iter().flat_map(|f| [(4, 0), (8, 0), (16, 0), (4, 2)].map(|(p, g)| (f.to_string(), p, g))).collect();
    assert_eq!(got, want);

    // the product of several lists: 2 depths x 3 batch sizes x 2 tests
    let o =
        ok(&["bench", "-m", mp, "-d", "0,4", "-b", "2-8*2", "-p", "4", "-n", "1", "-r", "1", "-t", "1", "-o", "jsonl"]);
    let got: Vec<(u64, u64, u64)> = jsonl(&o)
        .iter()
        .map(|r| (r["n_batch"].as_u64().unwrap(), r["n_depth"].as_u64().unwrap(), r["n_prompt"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            (2, 0, 4),
            (2, 0, 0),
            (2, 4, 4),
            (2, 4, 0),
            (4, 0, 4),
            (4, 0, 0),
            (4, 4, 4),
            (4, 4, 0),
            (8, 0, 4),
            (8, 0, 0),
            (8, 4, 4),
            (8, 4, 0)
        ]
    );
}

#[test]
fn md_has_llama_bench_columns_and_shows_a_parameter_that_varies() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let mp = m.to_str().unwrap();
    let base = ["bench", "-m", mp, "-p", "8", "-n", "2", "-r", "2", "-t", "1"];
    let o = ok(&base);
    let (head, rows) = md(&o);
    assert_eq!(head, ["model", "size", "params", "backend", "threads", "test", "t/s"]);
    assert_eq!(col(&head, &rows, "model"), ["llama ?B (guessed) all F32"; 2]);
    assert_eq!(col(&head, &rows, "backend"), ["CPU"; 2]);
    assert_eq!(col(&head, &rows, "threads"), ["1"; 2]);
    assert_eq!(col(&head, &rows, "test"), ["pp8", "tg2"]);
    assert!(col(&head, &rows, "size").iter().all(|s| s.ends_with(" MiB")), "{}", o.stdout);
    assert!(col(&head, &rows, "params").iter().all(|s| s.ends_with(" M")), "{}", o.stdout);
    assert!(col(&head, &rows, "t/s").iter().all(|s| s.contains(" ± ")), "{}", o.stdout);
    // llama-bench's widths: the model column 30 wide, left-aligned; t/s 20 wide
    let first = o.stdout.lines().next().unwrap();
    assert!(
        first.starts_with("| model                          |       size |     params | backend    | threads |"),
        "{first}"
    );
    assert!(first.ends_with("|            test |                  t/s |"), "{first}");
    assert!(o.stdout.contains("\nbuild: "), "llama-bench's footer: {}", o.stdout);

    // a parameter given at its default adds no column; a list or another value does
    let args = |extra: &[&str]| ok(&[&base[..], extra].concat());
    let (head, _) = md(&args(&["-ub", "512", "-b", "2048", "-ctk", "f16"]));
    assert_eq!(head.len(), 7, "{head:?}");
    let (head, rows) =
        md(&args(&["-ub", "4", "-b", "8", "-ctk", "q8_0", "-ctv", "f16,f32", "-d", "3", "--split-mode", "row"]));
    assert_eq!(
        head,
        [
            "model", "size", "params", "backend", "threads", "n_batch", "n_ubatch", "type_k", "type_v", "sm", "test",
            "t/s"
        ]
    );
    assert_eq!(col(&head, &rows, "n_batch"), ["8"; 4]);
    assert_eq!(col(&head, &rows, "n_ubatch"), ["4"; 4]);
    assert_eq!(col(&head, &rows, "type_k"), ["q8_0"; 4]);
    assert_eq!(col(&head, &rows, "type_v"), ["f16", "f16", "f32", "f32"]);
    assert_eq!(col(&head, &rows, "sm"), ["row"; 4]);
    assert_eq!(col(&head, &rows, "test"), ["pp8 @ d3", "tg2 @ d3", "pp8 @ d3", "tg2 @ d3"]);
    let (head, rows) = md(&ok(&[
        "bench",
        "-m",
        mp,
        "-p",
        "8",
        "-n",
        "2",
        "-r",
        "1",
        "-t",
        "1,2",
        "--no-kv-offload",
        "0,1",
        "--poll",
        "0",
    ]));
    assert_eq!(head, ["model", "size", "params", "backend", "threads", "poll", "nkvo", "test", "t/s"]);
    assert_eq!(col(&head, &rows, "nkvo"), ["0", "0", "0", "0", "1", "1", "1", "1"]);
    assert_eq!(col(&head, &rows, "threads"), ["1", "1", "2", "2", "1", "1", "2", "2"]);
}

#[test]
fn json_jsonl_csv_and_sql_carry_llama_bench_fields() {
    let d = tempfile::tempdir().unwrap();
    let t = Tiny { n_layer: 30, ..Tiny::new("llama").with_tokenizer() };
    let m = tiny(d.path(), "smol", &t, &[("general.file_type", Value::U32(7))]);
    let mp = m.to_str().unwrap();
    let base = ["bench", "-m", mp, "-p", "8", "-n", "2", "-r", "3", "-t", "1", "-ub", "4"];
    let o = ok(&[&base[..], &["-o", "json"]].concat());
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let f = gguf_format::GgufFile::open(&m).unwrap();
    let size: u64 = f.tensors().iter().map(|t| t.size.unwrap()).sum();
    let n_params: u64 = f.tensors().iter().map(|t| t.n_elements).sum();
    for r in rows {
        let keys: Vec<&str> = r.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, FIELDS, "llama-bench's fields in its order");
        assert_eq!(r["model_type"], "llama 256M Q8_0", "llama.cpp's name of a 30-layer llama, the file type");
        assert_eq!(r["model_size"], size);
        assert_eq!(r["model_n_params"], n_params);
        assert_eq!(r["model_filename"], mp);
        assert_eq!(r["backends"], "CPU");
        assert_eq!(r["n_ubatch"], 4);
        assert_eq!(r["n_batch"], 2048);
        assert_eq!(r["type_k"], "f16");
        assert_eq!(r["n_gpu_layers"], -1);
        assert_eq!(r["flash_attn"], -1);
        assert_eq!(r["repack"], true);
        assert_eq!(r["no_kv_offload"], false);
        assert_eq!(r["tensor_split"], "0.00");
        assert_eq!(r["tensor_buft_overrides"], "none");
        assert_eq!(r["devices"], "auto");
        assert_eq!(r["n_depth"], 0);
        assert_eq!(r["samples_ns"].as_array().unwrap().len(), 3, "-r 3");
        assert_eq!(r["samples_ts"].as_array().unwrap().len(), 3);
        assert!(r["avg_ns"].is_u64() && r["avg_ts"].is_f64() && r["stddev_ts"].is_f64(), "{r}");
        let tt = r["test_time"].as_str().unwrap();
        assert!(tt.len() == 20 && tt.ends_with('Z') && &tt[10..11] == "T", "RFC 3339: {tt}");
    }
    assert_eq!((rows[0]["n_prompt"].as_u64(), rows[0]["n_gen"].as_u64()), (Some(8), Some(0)));
    assert_eq!((rows[1]["n_prompt"].as_u64(), rows[1]["n_gen"].as_u64()), (Some(0), Some(2)));
    let q8 = tiny(d.path(), "q8", &Tiny { q8: true, ..Tiny::new("llama").with_tokenizer() }, &[]);
    let g = ok(&["bench", "-m", q8.to_str().unwrap(), "-p", "4", "-n", "0", "-r", "1", "-o", "jsonl"]);
    assert_eq!(
        jsonl(&g)[0]["model_type"],
        "llama ?B (guessed) Q8_0",
        "the most common tensor type, as llama.cpp guesses"
    );
    // llama-bench's json layout: one field a line
    assert!(o.stdout.starts_with("[\n  {\n    \"build_commit\": "), "{}", o.stdout);
    assert!(o.stdout.ends_with("  }\n]\n"), "{}", o.stdout);

    let o = ok(&[&base[..], &["-o", "jsonl"]].concat());
    let l = jsonl(&o);
    assert_eq!(l.len(), 2);
    assert_eq!(l[0].as_object().unwrap().keys().map(|k| k.as_str()).collect::<Vec<_>>(), FIELDS);

    let o = ok(&[&base[..], &["-o", "csv"]].concat());
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", o.stdout);
    assert_eq!(lines[0].split(',').collect::<Vec<_>>(), FIELDS[..42]);
    assert!(lines[1].starts_with("\"gguf-") && lines[1].contains(",\"llama 256M Q8_0\","), "{}", lines[1]);
    assert_eq!(lines[1].matches("\",\"").count(), 41, "42 quoted cells: {}", lines[1]);

    let o = ok(&[&base[..], &["-o", "sql"]].concat());
    assert!(o.stdout.starts_with("CREATE TABLE IF NOT EXISTS llama_bench (\n  build_commit TEXT,\n"), "{}", o.stdout);
    assert!(o.stdout.contains("  avg_ts REAL,\n  stddev_ts REAL\n);\n"), "{}", o.stdout);
    assert_eq!(o.stdout.matches("INSERT INTO llama_bench (build_commit, build_number,").count(), 2, "{}", o.stdout);

    // -oe: a second printer on stderr; -o none: nothing on stdout
    let o = ok(&[&base[..], &["-o", "none", "--output-err", "jsonl"]].concat());
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    let err: Vec<serde_json::Value> = o.stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(err.len(), 2, "{}", o.stderr);
    let o = ok(&[&base[..], &["--output-err", "md", "-o", "csv", "-o", "md"]].concat());
    assert_eq!(md(&o).1.len(), 2);
    assert_eq!(o.stderr.lines().filter(|l| l.starts_with("| llama 256M Q8_0")).count(), 2, "{}", o.stderr);

    // this tool's own summary
    let o = ok(&[&base[..], &["--json"]].concat());
    let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap();
    let r = v["results"].as_array().unwrap();
    assert_eq!((r[0]["test"].as_str(), r[1]["test"].as_str()), (Some("pp8"), Some("tg2")));
    assert!(r.iter().all(|x| x["samples_ts"].as_array().unwrap().len() == 3 && x["n_ubatch"] == 4), "{v}");
}

#[test]
fn parameters_without_effect_here_are_accepted_reported_and_noted() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let mp = m.to_str().unwrap();
    let o = ok(&[
        "bench",
        "-m",
        mp,
        "-p",
        "4",
        "-n",
        "0",
        "-r",
        "1",
        "-t",
        "1",
        "--split-mode",
        "row,layer",
        "--tensor-split",
        "3/1",
        "--override-tensor",
        "blk\\.0\\.=CPU",
        "--repack",
        "0",
        "-C",
        "0xff",
        "--load-mode",
        "mmap",
        "-o",
        "jsonl",
    ]);
    let rows = jsonl(&o);
    let sm: Vec<&str> = rows.iter().map(|r| r["split_mode"].as_str().unwrap()).collect();
    assert_eq!(sm, ["row", "layer"], "one test per value, as asked");
    assert!(rows.iter().all(|r| r["tensor_split"] == "3.00/1.00" && r["tensor_buft_overrides"] == "blk\\.0\\.=CPU"));
    assert!(rows.iter().all(|r| r["repack"] == false && r["cpu_mask"] == "0xff" && r["load_mode"] == "mmap"));
    for flag in ["--split-mode", "--tensor-split", "--override-tensor", "--repack", "--cpu-mask", "--load-mode"] {
        assert!(o.stderr.lines().any(|l| l.starts_with(&format!("note: {flag} "))), "{flag}: {}", o.stderr);
    }
    // the default values say nothing
    let o =
        ok(&["bench", "-m", mp, "-p", "4", "-n", "0", "-r", "1", "-t", "1", "--split-mode", "layer", "--repack", "1"]);
    assert!(!o.stderr.contains("note:"), "{}", o.stderr);
    let o = ok(&["bench", "--list-devices"]);
    assert_eq!(o.stdout, "Available devices:\n  (none)\n");
}

/// llama-bench's multi-letter short flags reach `gguf bench` as lists (`-fa 0,1` once left
/// "0,1" as a stray argument; `-nkvo 1` was read as `-n kvo`).
#[test]
fn llama_bench_short_flags_take_lists() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let mp = m.to_str().unwrap();
    let o = ok(&[
        "bench", "-m", mp, "-p", "4", "-n", "0", "-r", "1", "-t", "1", "-fa", "0,1", "-ngl", "0", "-nkvo", "0,1", "-o",
        "jsonl",
    ]);
    let rows = jsonl(&o);
    let got: Vec<(i64, bool, i64)> = rows
        .iter()
        .map(|r| {
            (
                r["flash_attn"].as_i64().unwrap(),
                r["no_kv_offload"].as_bool().unwrap(),
                r["n_gpu_layers"].as_i64().unwrap(),
            )
        })
        .collect();
    // llama-bench's loop order: nkvo outside fa (flash_attn is llama-bench's int: -1 auto, 0, 1)
    assert_eq!(got, [(0, false, 0), (1, false, 0), (0, true, 0), (1, true, 0)], "{}", o.stdout);
    assert!(rows.iter().all(|r| r["n_prompt"] == 4));
}

#[test]
fn progress_reps_warmup_and_verbose() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let mp = m.to_str().unwrap();
    let base = ["bench", "-m", mp, "-p", "4", "-n", "2", "-d", "0,3", "-r", "3", "-t", "1", "-o", "none", "--progress"];
    let o = ok(&base);
    let lines: Vec<&str> = o.stderr.lines().collect();
    let count = |s: &str| lines.iter().filter(|l| l.contains(s)).count();
    assert_eq!(count(": starting"), 4, "{}", o.stderr);
    assert!(
        lines[0].ends_with("benchmark 1/4: starting") && o.stderr.contains("benchmark 4/4: starting"),
        "{}",
        o.stderr
    );
    assert_eq!(count("warmup prompt run"), 2);
    assert_eq!(count("warmup generation run"), 2);
    assert_eq!(count("prompt run 3/3"), 2);
    assert_eq!(count("generation run 3/3"), 2);
    assert_eq!(count("depth run 1/3"), 2, "depth tests only");
    assert_eq!(count("depth run 3/3 (cached)"), 2, "the depth is computed once per test");
    let o = ok(&[&base[..], &["--no-warmup"]].concat());
    assert!(!o.stderr.contains("warmup"), "{}", o.stderr);
    // -b below -ub: the engine evaluates min(b, ub) tokens at once
    let o = ok(&[
        "bench", "-m", mp, "-p", "8", "-n", "0", "-r", "1", "-t", "1", "-b", "4", "-ub", "16", "-v", "-o", "none",
    ]);
    assert!(o.stderr.contains("n_batch 4, n_ubatch 4"), "{}", o.stderr);
    assert!(o.stderr.contains("model: ") && o.stderr.contains("peak RSS"), "{}", o.stderr);
    // -r 0: no samples, llama-bench's zero averages
    let o = ok(&["bench", "-m", mp, "-p", "4", "-n", "0", "-r", "0", "-t", "1", "-o", "jsonl"]);
    let r = &jsonl(&o)[0];
    assert_eq!((r["avg_ns"].as_u64(), r["samples_ns"].as_array().map(|a| a.len())), (Some(0), Some(0)), "{r}");
    // --delay waits before each test
    let t0 = std::time::Instant::now();
    ok(&["bench", "-m", mp, "-p", "4", "-n", "0", "-r", "1", "-t", "1", "--delay", "1", "-o", "none"]);
    assert!(t0.elapsed() >= std::time::Duration::from_secs(1));
}

#[test]
fn bad_values_are_rejected_naming_the_flag() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let mp = m.to_str().unwrap();
    for (args, flag) in [
        (&["-t", "0"][..], "--threads"),
        (&["-t", "1-"], "--threads"),
        (&["-p", "1,x"], "--n-prompt"),
        (&["-n", "4-8*1"], "--n-gen"),
        (&["-d", "-2"], "--n-depth"),
        (&["-b", "0"], "--batch-size"),
        (&["-ub", "0"], "--ubatch-size"),
        (&["-ctk", "q4_0"], "--cache-type-k"),
        (&["-ctv", "f16,q9"], "--cache-type-v"),
        (&["-pg", "8"], "--pg"),
        (&["-o", "xml"], "--output"),
        (&["--split-mode", "diag"], "--split-mode"),
        (&["--tensor-split", "a/b"], "--tensor-split"),
        (&["--override-tensor", "blk=CUDA0"], "--override-tensor"),
        (&["--no-kv-offload", "2"], "--no-kv-offload"),
        (&["-C", "0xzz"], "--cpu-mask"),
        (&["--load-mode", "fast"], "--load-mode"),
        (&["--prio", "7"], "--prio"),
    ] {
        let o = gguf(&[&["bench", "-m", mp][..], args].concat());
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{args:?}: {}", o.stdout);
        assert!(o.stderr.contains(flag), "{args:?} names {flag}: {}", o.stderr);
    }
    let o = gguf(&["bench", "-m", mp, "-ctk", "q4_0"]);
    assert!(o.stderr.contains("f16, f32 or q8_0"), "{}", o.stderr);
    assert_clean_error(&gguf(&["bench", "-m", "/nonexistent.gguf", "-r", "1"]), "/nonexistent.gguf");
    assert_clean_error(&gguf(&["bench", "-m", mp, "-p", "1-50000", "-n", "0", "-t", "1-8"]), "more than 100000 tests");
}

#[test]
fn weights_report_names_each_types_kernel_and_the_decode_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let m = tiny(dir.path(), "q8", &Tiny { q8: true, ..Tiny::new("llama") }.with_tokenizer(), &[]);
    let m = m.to_str().unwrap();
    let o = ok(&["bench", "-m", m, "-p", "0", "-n", "4", "-r", "1", "--json", "--dram-bound"]);
    let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap();
    let types = v["weights"]["types"].as_array().expect("weights.types");
    let names: Vec<&str> = types.iter().map(|t| t["type"].as_str().unwrap()).collect();
    assert!(names.contains(&"q8_0"), "{names:?}");
    for t in types {
        let kernel = t["kernel"].as_str().unwrap();
        let id = ggml_quants::lookup_name(t["type"].as_str().unwrap()).unwrap().id;
        assert_eq!(kernel.split([',', '+']).next().unwrap(), quant_kernels::kernel_info(id), "{t}");
        assert!(t["tensors"].as_u64().unwrap() > 0 && t["bytes"].as_u64().unwrap() > 0, "{t}");
    }
    // every matrix is read per decode token; the tokenizer's embeddings double as the
    // output (no output.weight), so they count too
    let file = gguf_format::GgufFile::open(std::path::Path::new(m)).unwrap();
    let all: u64 = file.tensors().iter().map(|t| t.size.unwrap()).sum();
    let decode = v["weights"]["decode_bytes"].as_u64().unwrap();
    let has_output = file.tensors().iter().any(|t| t.name == "output.weight");
    let embd = file.tensors().iter().find(|t| t.name == "token_embd.weight").unwrap().size.unwrap();
    assert_eq!(decode, if has_output { all - embd } else { all });
    let r = &v["results"][0];
    assert_eq!(r["decode_weight_bytes"].as_u64(), Some(decode));
    let bound = r["dram_read_bytes_per_s"].as_f64().unwrap();
    let frac = r["dram_bound_fraction"].as_f64().unwrap();
    assert!(bound > 1e8 && frac > 0.0, "{r}");
    assert!((frac - r["avg_ts"].as_f64().unwrap() * decode as f64 / bound).abs() <= 1e-9 * frac.max(1.0), "{r}");
    assert!(o.stderr.contains("of the DRAM read bound"), "{}", o.stderr);

    let o = ok(&["bench", "-m", m, "-p", "0", "-n", "1", "-r", "1", "--weights"]);
    assert!(o.stderr.contains("weights:     q8_0"), "{}", o.stderr);
    assert!(o.stderr.contains("one decode token reads"), "{}", o.stderr);
    assert!(!o.stderr.contains("generic dequantize path"), "q8_0 and f32 have kernels: {}", o.stderr);
}
