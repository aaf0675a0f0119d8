//! `Model::shift_cache` (llama-server's `--cache-reuse`): a cached chunk moved down with
//! its K rotated gives nearly the logits of computing it at the new positions. On one layer
//! the chunk's K and V do not depend on the tokens before it, so the shifted cache holds
//! what a fresh run computes, up to the rounding of the rotation; deeper, its cells keep
//! what the dropped tokens contributed (why llama-server's reuse is opt-in).

use std::path::PathBuf;

use gguf_models::synthetic::{write, Tiny};
use gguf_models::{CacheType, Logits, StateOptions};

fn tmp(name: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join(name);
    (d, p)
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = a.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

#[test]
fn a_shifted_chunk_attends_as_if_computed_at_its_new_positions() {
    for arch in ["llama", "qwen2", "gemma3"] {
        for ct in [CacheType::F32, CacheType::F16, CacheType::Q8_0] {
            let mut t = Tiny::new(arch);
            t.n_layer = 1;
            if ct == CacheType::Q8_0 {
                t.head = 32; // a q8_0 cache needs whole blocks per head, as llama.cpp
            }
            let (_d, p) = tmp("m.gguf");
            write(&t, &p, None, &[]).unwrap();
            let (_f, model) = gguf_models::load(&p).unwrap();
            let o = StateOptions { n_ctx: 64, n_threads: 1, cache_type_k: ct, cache_type_v: ct, ..Default::default() };
            let v = model.n_vocab() as u32;
            let tok = |i: u32| (i * 7 + 3) % v;
            let head: Vec<u32> = (0..4).map(tok).collect();
            let dropped: Vec<u32> = (20..25).map(tok).collect();
            let chunk: Vec<u32> = (30..36).map(tok).collect();
            let tail: Vec<u32> = (40..43).map(tok).collect();
            let cat = |parts: &[&[u32]]| parts.concat();

            // the cached prompt: head, dropped, chunk; the new one drops the middle
            let mut st = model.new_state(&o).unwrap();
            model.forward(st.as_mut(), &cat(&[&head, &dropped, &chunk]), Logits::None).unwrap();
            model.shift_cache(st.as_mut(), head.len(), &[(head.len() + dropped.len(), chunk.len())]).unwrap();
            assert_eq!(st.n_past(), head.len() + chunk.len());
            let shifted = model.forward(st.as_mut(), &tail, Logits::Last).unwrap();

            let mut fresh = model.new_state(&o).unwrap();
            let want = model.forward(fresh.as_mut(), &cat(&[&head, &chunk, &tail]), Logits::Last).unwrap();
            // the same cells at the old positions (no shift) are far off
            let mut stale = model.new_state(&o).unwrap();
            model.forward(stale.as_mut(), &cat(&[&head, &dropped, &chunk]), Logits::None).unwrap();
            stale.truncate(head.len() + dropped.len() + chunk.len());
            let unshifted = model.forward(stale.as_mut(), &tail, Logits::Last).unwrap();

            let d = max_rel_diff(&want, &shifted);
            let far = max_rel_diff(&want, &unshifted);
            let tol = if ct == CacheType::F32 { 1e-4 } else { 2e-2 };
            assert!(d < tol, "{arch} {ct:?}: shifted {d}, unshifted {far}");
            // gemma3's one layer is a sliding-window one: the dropped tokens fall outside
            // the window and rope is relative, so the stale cache attends the same
            if arch != "gemma3" {
                assert!(d * 4.0 < far, "{arch} {ct:?}: shifted {d}, unshifted {far}");
            }
        }
    }
}

#[test]
fn bad_shift_chunks_are_errors() {
    let t = Tiny::new("llama");
    let (_d, p) = tmp("m.gguf");
    write(&t, &p, None, &[]).unwrap();
    let (_f, model) = gguf_models::load(&p).unwrap();
    let mut st = model.new_state(&StateOptions { n_ctx: 32, n_threads: 1, ..Default::default() }).unwrap();
    model.forward(st.as_mut(), &[1, 2, 3, 4, 5, 6], Logits::None).unwrap();
    assert!(model.shift_cache(st.as_mut(), 2, &[(4, 3)]).is_err(), "past the cached positions");
    assert!(model.shift_cache(st.as_mut(), 3, &[(2, 2)]).is_err(), "before the kept prefix");
    assert!(model.shift_cache(st.as_mut(), 1, &[(4, 1), (3, 1)]).is_err(), "out of order");
    assert_eq!(st.n_past(), 6, "a refused shift leaves the state alone");
    model.shift_cache(st.as_mut(), 1, &[(3, 1), (5, 1)]).unwrap();
    assert_eq!(st.n_past(), 3);
}

#[test]
fn a_q8_0_cache_needs_whole_blocks_per_head() {
    let (_d, p) = tmp("m.gguf");
    write(&Tiny::new("llama"), &p, None, &[]).unwrap(); // heads of 16
    let (_f, model) = gguf_models::load(&p).unwrap();
    let opts = |k, v| StateOptions { n_ctx: 16, n_threads: 1, cache_type_k: k, cache_type_v: v, ..Default::default() };
    let err = |k, v| model.new_state(&opts(k, v)).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err(CacheType::Q8_0, CacheType::F16)
        .contains("K cache type q8_0 with block size 32 does not divide n_embd_head_k=16"));
    assert!(err(CacheType::F16, CacheType::Q8_0)
        .contains("V cache type q8_0 with block size 32 does not divide n_embd_head_v=16"));
    assert!(model.new_state(&opts(CacheType::F16, CacheType::F32)).is_ok());
}
