//! llama.cpp's sampling flags on `gguf run`, end to end on a tiny random model: each is
//! accepted, does what it says where that is observable, and a value out of range is
//! refused naming the flag.

use std::path::PathBuf;

use gguf_models::synthetic::{write, Tiny};

use super::gguf;

fn tiny(dir: &std::path::Path) -> PathBuf {
    let p = dir.join("llama.gguf");
    write(&Tiny::new("llama").with_tokenizer(), &p, None, &[]).unwrap();
    p
}

/// The generated token ids of `gguf run -m M -p abc -n N --ignore-eos --json EXTRA...`.
fn tokens(m: &std::path::Path, n: usize, extra: &[&str]) -> Vec<u64> {
    let n = n.to_string();
    let mut args = vec!["run", "-m", m.to_str().unwrap(), "-p", "abc", "-n", &n, "--ignore-eos", "--json"];
    args.extend_from_slice(extra);
    let o = gguf(&args);
    assert_eq!(o.code, 0, "{extra:?}: {}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(o.stdout.lines().last().unwrap()).unwrap();
    v["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect()
}

#[test]
fn only_top_k_one_in_the_chain_is_greedy_at_any_temperature() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path());
    let greedy = tokens(&m, 8, &["--temp", "0"]);
    for seed in ["1", "2", "3"] {
        let t = tokens(&m, 8, &["--samplers", "top_k", "--top-k", "1", "--temp", "3", "--seed", seed]);
        assert_eq!(t, greedy, "seed {seed}");
        let t = tokens(&m, 8, &["--sampling-seq", "k", "--top-k", "1", "--temp", "3", "--seed", seed]);
        assert_eq!(t, greedy, "--sampling-seq, seed {seed}");
    }
    // top-n-sigma with a tiny n keeps only the largest logit
    let t = tokens(&m, 8, &["--top-nsigma", "0.0001", "--temp", "3", "--top-k", "0", "--seed", "1"]);
    assert_eq!(t, greedy, "--top-nsigma");
    // the same temperature with the full default chain and top-k 1 not in it: sampled
    let hot: Vec<Vec<u64>> = ["1", "2", "3"]
        .iter()
        .map(|s| tokens(&m, 8, &["--samplers", "temperature", "--temp", "3", "--seed", s]))
        .collect();
    assert!(hot.iter().any(|t| *t != greedy), "a temperature of 3 over 257 tokens is not greedy");
}

#[test]
fn a_banned_token_is_never_drawn_and_a_boosted_one_always() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path());
    let first = tokens(&m, 1, &["--temp", "0"])[0];
    let ban = format!("{first}-inf");
    let t = tokens(&m, 6, &["-l", &ban, "--temp", "0"]);
    assert!(!t.contains(&first), "{t:?} contains the banned {first}");
    let t = tokens(&m, 6, &["--logit-bias", &ban, "--temp", "5", "--top-k", "0", "--seed", "9"]);
    assert!(!t.contains(&first), "{t:?}");
    let boost = format!("{}+1000", (first + 1) % 256);
    let t = tokens(&m, 6, &["-l", &boost, "--temp", "2", "--seed", "4"]);
    assert!(t.iter().all(|&x| x == (first + 1) % 256), "{t:?}");
}

#[test]
fn the_new_samplers_change_the_draws() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path());
    let base = ["--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--seed", "11"];
    let plain = tokens(&m, 16, &base);
    assert_eq!(plain, tokens(&m, 16, &base), "a seed fixes the draws");
    for extra in [
        &["--mirostat", "2", "--mirostat-ent", "3", "--mirostat-lr", "0.2"][..],
        &["--mirostat", "1"],
        &["--typical", "0.3"],
        &["--xtc-probability", "1", "--xtc-threshold", "0.001"],
        &["--dynatemp-range", "1.4", "--dynatemp-exp", "2"],
        &["--samplers", "adaptive_p", "--adaptive-target", "0.1", "--adaptive-decay", "0.5"],
        &["--dry-multiplier", "50", "--dry-base", "2", "--dry-allowed-length", "0", "--dry-penalty-last-n", "32"],
        &["--repeat-penalty", "50", "--repeat-last-n", "32"],
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        assert_ne!(tokens(&m, 16, &args), plain, "{extra:?} changed nothing");
    }
}

#[test]
fn dry_stops_greedy_loops() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path());
    // a tiny random model repeats itself under greedy decoding; DRY with a large
    // multiplier penalises extending any repeat
    let greedy = tokens(&m, 48, &["--temp", "0"]);
    let dry = tokens(
        &m,
        48,
        &["--temp", "0", "--dry-multiplier", "100", "--dry-allowed-length", "1", "--dry-sequence-breaker", "none"],
    );
    let longest_repeat = |t: &[u64]| {
        // the longest n such that some n-gram occurs twice
        (1..t.len())
            .rev()
            .find(|&n| (0..=t.len() - n).any(|i| (i + 1..=t.len() - n).any(|j| t[i..i + n] == t[j..j + n])))
    };
    let (g, dr) = (longest_repeat(&greedy).unwrap_or(0), longest_repeat(&dry).unwrap_or(0));
    assert!(dr <= 2 && dr < g.max(3), "greedy repeats {g} tokens, with DRY {dr}: {dry:?}");
}

#[test]
fn every_sampling_flag_is_accepted() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path());
    for extra in [
        &["--samplers", "penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature"][..],
        &["--samplers", "top-k;minp;nucleus;TEMP"],
        &["--sampler-seq", "edskypmxt"],
        &["--top-n-sigma", "1"],
        &["--typical-p", "0.9"],
        &["--temperature", "0.5"],
        &["--dry-sequence-breaker", "\\n", "--dry-sequence-breaker", "x", "--dry-multiplier", "0.8"],
        &["--dry-sequence-breaker", "none"],
        &["--min-keep", "3", "--top-p", "0.1"],
        &["--adaptive-target", "-1"],
        &["-l", "5+1", "-l", "6-2.5", "-l", "7-inf"],
        &["--dry-base", "0.5"],
    ] {
        tokens(&m, 2, extra);
    }
}

#[test]
fn unknown_sampler_names_are_skipped_with_a_warning() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path());
    let o = gguf(&["run", "-m", m.to_str().unwrap(), "-p", "a", "-n", "1", "--samplers", "top_k;bogus"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("bogus"), "{}", o.stderr);
    let o = gguf(&["run", "-m", m.to_str().unwrap(), "-p", "a", "-n", "1", "--sampling-seq", "kZ"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("'Z'"), "{}", o.stderr);
}

#[test]
fn out_of_range_values_are_refused_naming_the_flag() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path());
    for (flag, v) in [
        ("--mirostat", "3"),
        ("--dry-penalty-last-n", "-1"),
        ("--repeat-penalty", "0"),
        ("--repeat-penalty", "-1"),
        ("--logit-bias", "abc"),
        ("--logit-bias", "5*2"),
        ("--xtc-probability", "nan"),
        ("--dynatemp-range", "inf"),
        ("--min-keep", "-1"),
    ] {
        let o = gguf(&["run", "-m", m.to_str().unwrap(), "-p", "a", "-n", "1", flag, v]);
        assert_eq!(o.code, 2, "{flag} {v}: {}", o.stderr);
        assert!(o.stderr.contains(flag), "{flag} {v}: {}", o.stderr);
    }
}

/// No `-s` (or `-s -1`): a random seed, printed as llama.cpp's "sampler seed: N"; `-s N`
/// then repeats the run token for token, and prints nothing.
#[test]
fn a_random_seed_is_printed_and_repeats_the_run() {
    let d = tempfile::tempdir().unwrap();
    let m = tiny(d.path());
    let ms = m.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "-m", ms, "-p", "ab", "-n", "24", "--temp", "1.5", "--top-k", "0", "--json"];
        a.extend_from_slice(extra);
        let o = gguf(&a);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let seed = o.stderr.lines().find_map(|l| l.strip_prefix("sampler seed: ")).map(str::to_string);
        let v: serde_json::Value = serde_json::from_str(o.stdout.lines().last().unwrap()).unwrap();
        (v["tokens"].clone(), seed)
    };
    let (t1, s1) = run(&["-s", "-1"]);
    let s1 = s1.expect("the random seed is printed");
    let (t2, s2) = run(&["-s", &s1]);
    assert_eq!(t1, t2, "-s {s1} repeats the run");
    assert_eq!(s2, None, "a given seed is not printed");
    let (_, s3) = run(&[]);
    assert!(s3.is_some(), "no -s is random too");
}
