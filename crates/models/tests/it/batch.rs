//! `Model::forward_batch`: several sequences in one pass give, bit for bit, the logits
//! each gets alone — whatever else shares the batch.

use std::path::PathBuf;

use gguf_models::synthetic::{write, Tiny};
use gguf_models::{Logits, Model, Segment, State, StateOptions};

fn opts(ub: usize, n_ctx: usize) -> StateOptions {
    StateOptions { n_ctx, n_threads: 2, n_ubatch: ub, ..Default::default() }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A sequence: a prompt, then tokens decoded one at a time.
struct Seq {
    prompt: Vec<u32>,
    decode: Vec<u32>,
    logits: Logits,
}

fn seqs(n_vocab: u32, lens: &[(usize, usize)]) -> Vec<Seq> {
    lens.iter()
        .enumerate()
        .map(|(s, &(np, nd))| Seq {
            prompt: (0..np as u32).map(|i| (i * 7 + 3 + s as u32 * 11) % n_vocab).collect(),
            decode: (0..nd as u32).map(|i| (i * 5 + 1 + s as u32 * 3) % n_vocab).collect(),
            logits: if s == 1 { Logits::All } else { Logits::Last },
        })
        .collect()
}

/// Each sequence alone: the prompt in one `forward`, then one token per `forward`.
fn alone(model: &dyn Model, s: &Seq, ub: usize, n_ctx: usize) -> Vec<Vec<u32>> {
    let mut st = model.new_state(&opts(ub, n_ctx)).unwrap();
    let mut out = vec![bits(&model.forward(st.as_mut(), &s.prompt, s.logits).unwrap())];
    for &t in &s.decode {
        out.push(bits(&model.forward(st.as_mut(), &[t], s.logits).unwrap()));
    }
    out
}

/// All sequences together, as a server's scheduler would run them: sequence `i` joins at
/// step `i` (its prompt shares the pass with the others' decode tokens), then each step
/// carries one token of every sequence still decoding.
fn together(model: &dyn Model, ss: &[Seq], ub: usize, n_ctx: usize) -> Vec<Vec<Vec<u32>>> {
    let pool = std::sync::Arc::new(gguf_models::Pool::new(2));
    let mut states: Vec<Box<dyn State>> = ss
        .iter()
        .map(|_| model.new_state(&StateOptions { pool: Some(pool.clone()), ..opts(ub, n_ctx) }).unwrap())
        .collect();
    let mut out: Vec<Vec<Vec<u32>>> = vec![Vec::new(); ss.len()];
    let mut next = vec![0usize; ss.len()]; // 0 = prompt pending, k = k-1 decode tokens done
    for step in 0.. {
        let mut segs = Vec::new();
        let mut who = Vec::new();
        for (i, (st, s)) in states.iter_mut().zip(ss).enumerate() {
            if i > step {
                continue;
            }
            let tokens: &[u32] = match next[i] {
                0 => &s.prompt,
                k if k <= s.decode.len() => std::slice::from_ref(&s.decode[k - 1]),
                _ => continue,
            };
            segs.push(Segment { state: st.as_mut(), tokens, logits: s.logits });
            who.push(i);
        }
        if segs.is_empty() && step >= ss.len() {
            break;
        }
        // Vary the order the segments are given in.
        if step % 2 == 1 {
            segs.reverse();
            who.reverse();
        }
        let res = model.forward_batch(&mut segs).unwrap();
        for (i, l) in who.into_iter().zip(res) {
            out[i].push(bits(&l));
            next[i] += 1;
        }
    }
    out
}

fn check(model: &dyn Model, ub: usize, n_ctx: usize, lens: &[(usize, usize)], what: &str) {
    let ss = seqs(model.n_vocab() as u32, lens);
    let got = together(model, &ss, ub, n_ctx);
    for (i, s) in ss.iter().enumerate() {
        let want = alone(model, s, ub, n_ctx);
        assert_eq!(got[i].len(), want.len(), "{what}: sequence {i}: steps");
        for (step, (g, w)) in got[i].iter().zip(&want).enumerate() {
            assert!(g == w, "{what}: sequence {i} step {step}: batched logits differ from the sequence alone");
        }
    }
}

#[test]
fn a_batch_gives_every_sequence_its_logits_alone_on_every_architecture() {
    for arch in ["llama", "qwen2", "qwen3", "gemma3", "qwen3moe"] {
        for q8 in [false, true] {
            let mut t = Tiny::new(arch);
            t.q8 = q8;
            let d = tempfile::tempdir().unwrap();
            let p = d.path().join("m.gguf");
            write(&t, &p, None, &[]).unwrap();
            let (_f, model) = gguf_models::load(&p).unwrap();
            // a 70-token prompt (tiled attention, 3 ubatches of 32), short ones, a 1-token one
            check(model.as_ref(), 32, 160, &[(70, 6), (5, 4), (1, 7), (9, 3), (2, 5)], &format!("{arch} q8={q8}"));
        }
    }
}

fn real_model(name: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let p = PathBuf::from(home).join(".cache/gguf-engine/models").join(name);
    if p.is_file() {
        Some(p)
    } else {
        eprintln!("note: {} not in the cache (`cargo xtask fetch-models`): skipped", p.display());
        None
    }
}

#[test]
fn a_batch_gives_every_sequence_its_logits_alone_on_real_models() {
    for name in
        ["SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "gemma-3-270m-q4_k_m.gguf"]
    {
        let Some(p) = real_model(name) else { continue };
        let (_f, model) = gguf_models::load(&p).unwrap();
        check(model.as_ref(), 64, 256, &[(80, 3), (7, 4), (1, 3), (20, 2)], name);
    }
}

/// `forward_ubatch` of k one-token sequences, each at position 0, puts their rows through
/// each weight as one k-row product (llama.cpp's ubatch): sequence i's logits are then
/// those of row 0 of a k-token sequence starting with its token (row 0 attends to itself
/// alone and every product's arithmetic is picked by the k rows), not the one-token
/// arithmetic `forward_batch` keeps for it; sequences of several tokens (whose products
/// already take the multi-token arithmetic) give their logits alone.
#[test]
fn a_ubatch_is_one_product_over_its_rows() {
    for arch in ["llama", "qwen3moe"] {
        let t = Tiny::new(arch);
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.gguf");
        write(&t, &p, None, &[]).unwrap();
        let (_f, model) = gguf_models::load(&p).unwrap();
        let nv = model.n_vocab();
        let toks: Vec<u32> = (0..6u32).map(|i| (i * 7 + 3) % nv as u32).collect();
        let k = toks.len();
        let row0 = |first: usize| {
            let mut st = model.new_state(&opts(64, 64)).unwrap();
            let seq: Vec<u32> = (0..k).map(|j| toks[(first + j) % k]).collect();
            bits(&model.forward(st.as_mut(), &seq, Logits::All).unwrap()[..nv])
        };
        let mut states: Vec<Box<dyn State>> = (0..k).map(|_| model.new_state(&opts(64, 64)).unwrap()).collect();
        let mut segs: Vec<Segment<'_>> = states
            .iter_mut()
            .zip(&toks)
            .map(|(st, tok)| Segment { state: st.as_mut(), tokens: std::slice::from_ref(tok), logits: Logits::All })
            .collect();
        let got = model.forward_ubatch(&mut segs).unwrap();
        let mut one_token_differs = false;
        for (i, g) in got.iter().enumerate() {
            assert!(bits(g) == row0(i), "{arch}: one-token sequence {i} of the ubatch");
            let mut st = model.new_state(&opts(64, 64)).unwrap();
            one_token_differs |= bits(&model.forward(st.as_mut(), &toks[i..i + 1], Logits::All).unwrap()) != bits(g);
        }
        // With AVX-512 the k-row f32 product is another kernel than the one-token one, so
        // the test tells the two arithmetics apart; under an AVX2 or scalar cap (CI reruns
        // this file so) both are the same loop and agree.
        if quant_kernels::ops::native_dot_layout() == quant_kernels::ops::DotLayout::Avx512 {
            assert!(
                one_token_differs,
                "{arch}: one-token and k-row products agree bit for bit; the test proves nothing"
            );
        }
        // Several tokens each: every sequence's logits alone.
        let ss = seqs(nv as u32, &[(5, 0), (9, 0), (3, 0)]);
        let mut states: Vec<Box<dyn State>> = ss.iter().map(|_| model.new_state(&opts(64, 64)).unwrap()).collect();
        let mut segs: Vec<Segment<'_>> = states
            .iter_mut()
            .zip(&ss)
            .map(|(st, s)| Segment { state: st.as_mut(), tokens: &s.prompt, logits: s.logits })
            .collect();
        let got = model.forward_ubatch(&mut segs).unwrap();
        for (i, (g, s)) in got.iter().zip(&ss).enumerate() {
            assert!(bits(g) == alone(model.as_ref(), s, 64, 64)[0], "{arch}: sequence {i} of several tokens");
        }
    }
}
