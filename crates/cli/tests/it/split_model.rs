//! Every reader path opens a split model (`gguf split`'s shards) as one model, as
//! llama.cpp does: `logits`, `run`, `tokenize` and `dequant` through a shard give what the
//! unsplit file gives; a missing shard is one clear error naming it.

use std::path::{Path, PathBuf};

use gguf_format::split::split_path;
use gguf_models::synthetic::{write, Tiny};

use super::{assert_clean_error, gguf};

/// A tiny model with the byte tokenizer, and its shard set of `per_shard` tensors each.
fn model_and_shards(dir: &Path, arch: &str, q8: bool, per_shard: &str) -> (PathBuf, Vec<PathBuf>) {
    let whole = dir.join("whole.gguf");
    let mut t = Tiny::new(arch).with_tokenizer();
    t.q8 = q8;
    write(&t, &whole, None, &[]).unwrap();
    let prefix = dir.join("m");
    let o = gguf(&["split", "--split-max-tensors", per_shard, whole.to_str().unwrap(), prefix.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let n: u32 = o.stdout.lines().next().and_then(|l| l.strip_prefix("n_split: ")).unwrap().parse().unwrap();
    assert!(n > 2, "{}", o.stdout);
    let shards: Vec<PathBuf> = (0..n).map(|i| split_path(&prefix, i, n)).collect();
    assert!(shards.iter().all(|p| p.exists()));
    (whole, shards)
}

fn logits(dir: &Path, model: &Path, out: &str) -> Vec<u8> {
    let out = dir.join(out);
    let m = model.to_str().unwrap();
    let o = gguf(&["logits", "-m", m, "-p", "hello, split", "-t", "2", "-o", out.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    std::fs::read(out).unwrap()
}

fn run_tokens(model: &Path) -> serde_json::Value {
    let m = model.to_str().unwrap();
    let o = gguf(&["run", "-m", m, "-p", "abc", "-n", "8", "--temp", "0", "--ignore-eos", "-t", "2", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(o.stdout.lines().last().unwrap()).unwrap();
    assert!(v["timings"]["peak_rss_bytes"].as_u64().unwrap() > 0);
    v["tokens"].clone()
}

#[test]
fn logits_and_greedy_run_through_a_shard_equal_the_unsplit_file() {
    for (arch, q8) in [("llama", true), ("qwen2", false), ("qwen3moe", true)] {
        let d = tempfile::tempdir().unwrap();
        let (whole, shards) = model_and_shards(d.path(), arch, q8, "5");
        let want = logits(d.path(), &whole, "whole.f32");
        assert_eq!(want.len() % (257 * 4), 0);
        assert!(want == logits(d.path(), &shards[0], "first.f32"), "{arch}: logits through the first shard differ");
        // llama.cpp wants the first shard; any one opens the set here.
        assert!(want == logits(d.path(), shards.last().unwrap(), "last.f32"), "{arch}: through the last shard");
        let toks = run_tokens(&whole);
        assert_eq!(toks.as_array().unwrap().len(), 8, "{toks}");
        assert_eq!(run_tokens(&shards[0]), toks, "{arch}: greedy tokens through the first shard");
    }
}

#[test]
fn tokenize_and_dequant_read_a_shard_as_the_whole_model() {
    let d = tempfile::tempdir().unwrap();
    let (whole, shards) = model_and_shards(d.path(), "llama", true, "4");
    let tokenize = |p: &Path| {
        let o = gguf(&["tokenize", "-m", p.to_str().unwrap(), "-p", "hi there", "--ids"]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        o.stdout
    };
    // The tokenizer is the first shard's metadata, whichever shard is given.
    assert_eq!(tokenize(&shards[1]), tokenize(&whole));
    // The last layer's tensors are in the last shard.
    let name = "blk.1.ffn_down.weight";
    let dequant = |p: &Path, out: &str| {
        let out = d.path().join(out);
        let o = gguf(&["dequant", p.to_str().unwrap(), name, "-o", out.to_str().unwrap()]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        std::fs::read(out).unwrap()
    };
    let want = dequant(&whole, "whole.f32");
    assert_eq!(want.len(), 96 * 64 * 4);
    assert!(want == dequant(&shards[0], "first.f32"));
}

#[test]
fn a_missing_shard_is_one_clear_error_naming_it() {
    let d = tempfile::tempdir().unwrap();
    let (_, shards) = model_and_shards(d.path(), "llama", false, "5");
    std::fs::remove_file(&shards[1]).unwrap();
    let missing = shards[1].file_name().unwrap().to_str().unwrap().to_string();
    let first = shards[0].to_str().unwrap();
    let out = d.path().join("never.f32");
    let out = out.to_str().unwrap();
    assert_clean_error(&gguf(&["run", "-m", first, "-p", "x", "-n", "1"]), &missing);
    assert_clean_error(&gguf(&["logits", "-m", first, "-p", "x", "-o", out]), &missing);
    assert_clean_error(&gguf(&["tokenize", "-m", first, "-p", "x"]), &missing);
    assert_clean_error(&gguf(&["dequant", first, "output_norm.weight", "-o", out]), &missing);
    assert!(!Path::new(out).exists());
}
