//! `gguf quantize`, `imatrix` and `perplexity` end to end on the tiny byte-tokenizer
//! model, and their refusals (a clear error, exit ≠ 0, no output file).

use std::path::{Path, PathBuf};

use gguf_format::GgufFile;
use gguf_models::synthetic::{write, Tiny};

use super::{assert_clean_error, gguf};

fn tiny(dir: &Path) -> PathBuf {
    let p = dir.join("tiny.gguf");
    write(&Tiny::new("llama").with_tokenizer(), &p, None, &[]).unwrap();
    p
}

fn text(dir: &Path) -> PathBuf {
    let p = dir.join("text.txt");
    let s: String = (0..60).map(|i| format!("line {i}: the quick brown fox jumps over the lazy dog. ")).collect();
    std::fs::write(&p, s).unwrap();
    p
}

/// Exit ≠ 0 and a last stderr line `error: …needle…` (progress lines may come first).
fn assert_fails(o: &super::Out, needle: &str) {
    assert_ne!(o.code, 0, "{}", o.stderr);
    let last = o.stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && last.contains(needle), "{}", o.stderr);
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    v.sort();
    v
}

#[test]
fn quantize_imatrix_then_run() {
    let d = tempfile::tempdir().unwrap();
    let (m, t) = (tiny(d.path()), text(d.path()));
    let im = d.path().join("im.gguf");
    let o = gguf(&[
        "imatrix",
        "-m",
        m.to_str().unwrap(),
        "-f",
        t.to_str().unwrap(),
        "-c",
        "64",
        "--chunks",
        "3",
        "-o",
        im.to_str().unwrap(),
        "-t",
        "2",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("Final estimate: PPL"), "{}", o.stdout);
    let f = GgufFile::open(&im).unwrap();
    assert_eq!(f.metadata().get_u64("imatrix.chunk_count"), Some(3));
    assert!(f.tensor("blk.0.ffn_down.weight.in_sum2").is_some());
    assert!(f.tensor("output.weight.in_sum2").is_none(), "output.weight only with --process-output");

    let q = d.path().join("q.gguf");
    let o = gguf(&[
        "quantize",
        "--allow-requantize",
        "--imatrix",
        im.to_str().unwrap(),
        m.to_str().unwrap(),
        q.to_str().unwrap(),
        "Q8_0",
        "2",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let f = GgufFile::open(&q).unwrap();
    assert_eq!(f.metadata().get_u64("general.file_type"), Some(7));
    assert!(f.metadata().get_u64("quantize.imatrix.entries_count").unwrap() > 0);
    let o = gguf(&["run", "-m", q.to_str().unwrap(), "-p", "the", "-n", "4", "--temp", "0"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

/// The f32 values of tensor `name` of an imatrix file.
fn f32s(f: &GgufFile, name: &str) -> Vec<f32> {
    let b = f.tensor_data_by_name(name).unwrap();
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Three chunks of 64 in one batch (`-b 256`) with `-u 64`: llama-imatrix's ubatches take
/// 21 tokens of each chunk three times, then the last token of each — a ubatch of 3 rows,
/// which the dense weights skip (< 16 rows) but `MUL_MAT_ID` counts; the experts are
/// routed over each whole ubatch (2 of 4 per token).
#[test]
fn imatrix_ubatches_of_several_chunks() {
    let d = tempfile::tempdir().unwrap();
    let m = d.path().join("moe.gguf");
    write(&Tiny::new("qwen3moe").with_tokenizer(), &m, None, &[]).unwrap();
    let t = text(d.path());
    let im = d.path().join("im.gguf");
    let (m, t, im_) = (m.to_str().unwrap(), t.to_str().unwrap(), im.to_str().unwrap());
    let o = gguf(&["imatrix", "-m", m, "-f", t, "-c", "64", "--chunks", "3", "-b", "256", "-u", "64", "-o", im_]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("n_seq=4"), "{}", o.stderr);
    let f = GgufFile::open(&im).unwrap();
    for il in 0..2 {
        assert_eq!(f32s(&f, &format!("blk.{il}.attn_q.weight.counts")), [3.0 * 63.0]);
        assert_eq!(f32s(&f, &format!("blk.{il}.ffn_gate_inp.weight.counts")), [3.0 * 63.0]);
        for w in ["gate", "up", "down"] {
            let c = f32s(&f, &format!("blk.{il}.ffn_{w}_exps.weight.counts"));
            assert_eq!(c.len(), 4);
            assert_eq!(c.iter().sum::<f32>(), 3.0 * 64.0 * 2.0, "blk.{il} {w}: every (token, slot) counted");
            let sums = f32s(&f, &format!("blk.{il}.ffn_{w}_exps.weight.in_sum2"));
            let cols = sums.len() / 4;
            for (e, &n) in c.iter().enumerate() {
                let used = sums[e * cols..(e + 1) * cols].iter().any(|&v| v > 0.0);
                assert_eq!(used, n > 0.0, "blk.{il} {w} expert {e}: sums present exactly when counted");
            }
        }
    }
}

#[test]
fn quantize_refusals_leave_no_file() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path());
    let out = d.path().join("out.gguf");
    let (m, o_) = (m.to_str().unwrap(), out.to_str().unwrap());
    assert_clean_error(&gguf(&["quantize", m, o_, "Q4_K_X"]), "unknown recipe \"Q4_K_X\"");
    assert!(gguf(&["quantize", m, o_, "Q4_K_X"]).stderr.contains("Q4_K_M"), "lists the known recipes");
    assert_clean_error(&gguf(&["quantize", m, m, "Q8_0"]), "input and output files are the same");
    assert_clean_error(&gguf(&["quantize", "--prune-layers", "1,x", m, o_, "Q8_0"]), "invalid layer id");
    assert_clean_error(&gguf(&["quantize", "--override-kv", "a=num:1", m, o_, "Q8_0"]), "invalid type");
    assert_clean_error(&gguf(&["quantize", "--tensor-type", "attn=q9_9", m, o_, "Q8_0"]), "unknown ggml type");
    assert_clean_error(&gguf(&["quantize", "--imatrix", "/nonexistent.gguf", m, o_, "Q8_0"]), "nonexistent.gguf");
    assert_fails(&gguf(&["quantize", m, "/nonexistent-dir/out.gguf", "Q8_0"]), "nonexistent-dir");
    assert_eq!(names(d.path()), ["tiny.gguf"]);
    // --dry-run writes nothing either.
    let o = gguf(&["quantize", "--dry-run", m, o_, "Q8_0"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(names(d.path()), ["tiny.gguf"]);
}

#[test]
fn perplexity_and_kl_divergence_against_itself() {
    let d = tempfile::tempdir().unwrap();
    let (m, t) = (tiny(d.path()), text(d.path()));
    let base = d.path().join("base.bin");
    let (m, t, b) = (m.to_str().unwrap(), t.to_str().unwrap(), base.to_str().unwrap());
    let o = gguf(&["perplexity", "-m", m, "-f", t, "-c", "32", "--kl-divergence-base", b, "-t", "2"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let final_line =
        o.stdout.lines().find(|l| l.starts_with("Final estimate: PPL = ")).expect("final estimate").to_string();
    assert!(std::fs::metadata(&base).unwrap().len() > 0);
    let o = gguf(&["perplexity", "-m", m, "--kl-divergence-base", b, "--kl-divergence", "-t", "1"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("Same top p: 100.000"), "{}", o.stdout);
    let kld = o.stdout.lines().find(|l| l.starts_with("Mean    KLD:")).unwrap();
    let kld: f64 = kld.split(':').nth(1).unwrap().split('±').next().unwrap().trim().parse().unwrap();
    assert!(kld.abs() < 1e-4, "{kld}");
    // The PPL of the KL run (Q) equals the first run's.
    let ppl: f64 = final_line.split_whitespace().nth(4).unwrap().parse().unwrap();
    let q = o.stdout.lines().find(|l| l.starts_with("Mean PPL(Q)")).unwrap();
    let q: f64 = q.split(':').nth(1).unwrap().split('±').next().unwrap().trim().parse().unwrap();
    assert!((q - ppl).abs() < 1e-3 * ppl, "{q} vs {ppl}");
    // Not a base file: a clear error.
    assert_clean_error(
        &gguf(&["perplexity", "-m", m, "--kl-divergence-base", t, "--kl-divergence"]),
        "log-probabilities",
    );
    // Too short a text for the context.
    assert_fails(&gguf(&["perplexity", "-m", m, "-f", t, "-c", "4096"]), "you need at least");
}

#[test]
fn mem_counts_weights_and_kv_cache() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path());
    let m = m.to_str().unwrap();
    let j = |args: &[&str]| -> serde_json::Value {
        let o = gguf(args);
        assert_eq!(o.code, 0, "{}", o.stderr);
        serde_json::from_str(o.stdout.trim()).unwrap()
    };
    // 2 layers × 512 positions × (2 KV heads × 16) × (K + V) × 2 bytes.
    let v = j(&["mem", "-m", m, "-c", "512", "--json"]);
    assert_eq!(v["kv_bytes"], 2 * 512 * 32 * 2 * 2);
    let q8 = j(&["mem", "-m", m, "-c", "512", "-k", "q8_0", "--cache-type-v", "q8_0", "--json"]);
    assert_eq!(q8["kv_bytes"], 2 * 512 * 34 * 2);
    let weights: u64 = GgufFile::open(m).unwrap().tensors().iter().map(|t| t.size.unwrap()).sum();
    assert_eq!(v["weights_bytes"], weights);
    assert_clean_error(&gguf(&["mem", "-m", m, "-k", "q4_0"]), "unsupported cache type");
}

#[test]
fn advise_ranks_fitting_recipes_and_refuses_a_budget_nothing_fits() {
    let d = tempfile::tempdir().unwrap();
    let (m, t) = (tiny(d.path()), text(d.path()));
    let (m, t) = (m.to_str().unwrap(), t.to_str().unwrap());
    let args =
        ["advise", "-m", m, "-f", t, "--eval-ctx", "32", "--chunks", "2", "-c", "64", "-t", "2", "--allow-requantize"];
    let run = |extra: &[&str]| gguf(&[&args[..], extra].concat());
    let o = run(&["--budget", "1GiB", "--recipes", "Q8_0,Q4_0", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap();
    let recipes = v["recipes"].as_array().unwrap();
    assert_eq!(recipes.len(), 2);
    assert!(recipes.iter().all(|r| r["fits"] == true && r["mean_kld"].as_f64().unwrap() >= -1e-6));
    assert_eq!(recipes.iter().filter(|r| r["best"] == true).count(), 1);
    // Run to run, the table is the same.
    let again: serde_json::Value =
        serde_json::from_str(run(&["--budget", "1GiB", "--recipes", "Q8_0,Q4_0", "--json"]).stdout.trim()).unwrap();
    assert_eq!(v, again);
    assert_fails(&run(&["--budget", "1KiB", "--recipes", "Q8_0"]), "nothing fits");
    assert_clean_error(&run(&["--budget", "1XB"]), "unknown unit");
    assert_eq!(names(d.path()), ["text.txt", "tiny.gguf"], "no quantized files left behind");
}

#[test]
fn task_check_counts_passing_answers() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path());
    let p = d.path().join("prompts.txt");
    std::fs::write(&p, "say something\n\nanything at all\n").unwrap();
    let (m, p) = (m.to_str().unwrap(), p.to_str().unwrap());
    let o = gguf(&["task-check", "-m", m, "-m", m, "--task", "regex:^", "--prompts", p, "-n", "4", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap();
    for r in v["results"].as_array().unwrap() {
        assert_eq!((r["passed"].as_u64(), r["total"].as_u64()), (Some(2), Some(2)), "{v}");
    }
    let o =
        gguf(&["task-check", "-m", m, "--task", "regex:\\A\\z\\Qnever", "--prompts", p, "-n", "4", "--raw", "--json"]);
    assert_ne!(o.code, 0, "a bad regex is refused");
    assert_clean_error(&gguf(&["task-check", "-m", m, "--task", "xml", "--prompts", p]), "unknown task");
}
