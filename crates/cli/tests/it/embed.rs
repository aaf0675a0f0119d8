//! `gguf embed` end to end on tiny random encoders (`gguf_models::synthetic`: bert and
//! nomic-bert with a small WordPiece vocabulary).

use std::path::PathBuf;

use gguf_models::synthetic::{write, Tiny};

use super::{assert_clean_error, gguf};

fn encoder(dir: &std::path::Path, arch: &str) -> PathBuf {
    let p = dir.join(format!("{arch}.gguf"));
    let mut t = Tiny::new(arch).with_tokenizer();
    t.n_head_kv = t.n_head;
    write(&t, &p, None, &[]).unwrap();
    p
}

fn vectors(stdout: &str) -> Vec<Vec<f64>> {
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
        .collect()
}

#[test]
fn embed_prints_one_normalized_vector_per_line() {
    let d = tempfile::tempdir().unwrap();
    for arch in ["bert", "nomic-bert"] {
        let m = encoder(d.path(), arch);
        let m = m.to_str().unwrap();
        let o = gguf(&[
            "embed",
            "-m",
            m,
            "-p",
            "hello world\nabc 12\nhello world",
            "--embd-output-format",
            "json",
            "-t",
            "2",
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let v = vectors(&o.stdout);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].len(), 64);
        assert_eq!(v[0], v[2], "{arch}: one input, one vector, whatever else is embedded");
        assert_ne!(v[0], v[1]);
        let norm: f64 = v[1].iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{arch}: euclidean by default ({norm})");
        // per token: [CLS] h e l l o ▁w o r l d [SEP] = 12 rows; taxicab norm
        let o = gguf(&[
            "embed",
            "-m",
            m,
            "-p",
            "hello world",
            "--pooling",
            "none",
            "--embd-normalize",
            "1",
            "--embd-output-format",
            "json",
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let rows = vectors(&o.stdout);
        assert_eq!(rows.len(), 12, "{arch}");
        for r in &rows {
            assert!((r.iter().map(|x| x.abs()).sum::<f64>() - 1.0).abs() < 1e-5);
        }
        // rank: two labels, unnormalized scores; the summary format
        let o = gguf(&["embed", "-m", m, "-p", "abc", "--pooling", "rank", "--embd-normalize", "-1"]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert_eq!(o.stdout.matches("rerank score 0:").count(), 2, "{}", o.stdout);
        let o = gguf(&["embed", "-m", m, "-p", "a\nb", "--pooling", "cls"]);
        assert!(o.stdout.contains("cosine similarity matrix"), "{}", o.stdout);
        let o = gguf(&["embed", "-m", m, "-p", "a|b|c", "--embd-separator", "|", "--embd-output-format", "array"]);
        let a: Vec<Vec<f64>> = serde_json::from_str(o.stdout.trim()).unwrap();
        assert_eq!(a.len(), 3);
    }
}

#[test]
fn embed_joins_rank_pairs_as_llama_embedding() {
    // "query<TAB>document" with pooling rank: the pieces joined by the added SEP's text
    // (WordPiece adds SEP, not EOS), so the same tokens as writing [SEP] out
    let d = tempfile::tempdir().unwrap();
    let m = encoder(d.path(), "bert");
    let m = m.to_str().unwrap();
    let scores = |p: &str, extra: &[&str]| {
        let mut a = vec!["embed", "-m", m, "-p", p, "--pooling", "rank", "--embd-normalize", "-1"];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--embd-output-format", "json"]);
        let o = gguf(&a);
        assert_eq!(o.code, 0, "{}", o.stderr);
        vectors(&o.stdout)
    };
    let pair = scores("hello\tworld 1", &[]);
    assert_eq!(pair, scores("hello[SEP]world 1", &[]));
    assert_ne!(pair, scores("hello world 1", &[]));
    assert_eq!(pair, scores("hello|world 1", &["--cls-separator", "|"]));
}

#[test]
fn embed_errors_are_named() {
    let d = tempfile::tempdir().unwrap();
    let m = encoder(d.path(), "bert");
    let m = m.to_str().unwrap();
    let long = "a ".repeat(200);
    let o = gguf(&["embed", "-m", m, "-p", &format!("ok\n{long}")]);
    assert_clean_error(&o, "input 1 has 202 tokens");
    let o = gguf(&["embed", "-m", m, "-p", "x", "--pooling", "max"]);
    assert_clean_error(&o, "unknown pooling `max`");
    let o = gguf(&["embed", "-m", m, "-p", "x", "--embd-output-format", "xml"]);
    assert_clean_error(&o, "--embd-output-format `xml`");
    let llama = d.path().join("llama.gguf");
    write(&Tiny::new("llama").with_tokenizer(), &llama, None, &[]).unwrap();
    let o = gguf(&["embed", "-m", llama.to_str().unwrap(), "-p", "x"]);
    assert_clean_error(&o, "not an embedding model");
}
