//! A small random-weight model for the tests: llama-shaped, F32, written with the
//! project's own writer (llama-quantize loads it too, which is how the snapshots of
//! `tests/plan.rs` were checked).

use std::path::Path;

use gguf_format::{GgufWriter, Value};

pub struct Shape {
    pub arch: &'static str,
    pub n_layer: u32,
    pub n_embd: u64,
    pub n_ff: u64,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub n_expert: u32,
    pub tied: bool,
}

pub const DENSE: Shape =
    Shape { arch: "llama", n_layer: 8, n_embd: 256, n_ff: 512, n_head: 8, n_head_kv: 2, n_expert: 0, tied: false };

fn lcg(seed: &mut u64, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * 4);
    for _ in 0..n {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let v = ((*seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Writes the model to `path`.
pub fn write_model(path: &Path, s: &Shape) {
    let mut w = GgufWriter::new();
    let a = s.arch;
    w.add_kv("general.architecture", a);
    w.add_kv("general.name", "quantize-test");
    w.add_kv(&format!("{a}.block_count"), Value::U32(s.n_layer));
    w.add_kv(&format!("{a}.context_length"), Value::U32(512));
    w.add_kv(&format!("{a}.embedding_length"), Value::U32(s.n_embd as u32));
    w.add_kv(&format!("{a}.feed_forward_length"), Value::U32(s.n_ff as u32));
    w.add_kv(&format!("{a}.attention.head_count"), Value::U32(s.n_head));
    w.add_kv(&format!("{a}.attention.head_count_kv"), Value::U32(s.n_head_kv));
    w.add_kv(&format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(1e-5));
    if s.n_expert > 0 {
        w.add_kv(&format!("{a}.expert_count"), Value::U32(s.n_expert));
        w.add_kv(&format!("{a}.expert_used_count"), Value::U32(2));
    }
    let mut seed = 7u64;
    let e = s.n_embd;
    let hd = e / s.n_head as u64;
    let kv = hd * s.n_head_kv as u64;
    let vocab = 512u64;
    let mut add = |w: &mut GgufWriter, name: &str, dims: &[u64]| {
        let n: u64 = dims.iter().product();
        w.add_tensor_owned(name, dims, 0, lcg(&mut seed, n as usize)).unwrap();
    };
    add(&mut w, "token_embd.weight", &[e, vocab]);
    add(&mut w, "output_norm.weight", &[e]);
    if !s.tied {
        add(&mut w, "output.weight", &[e, vocab]);
    }
    for l in 0..s.n_layer {
        let b = format!("blk.{l}");
        add(&mut w, &format!("{b}.attn_norm.weight"), &[e]);
        add(&mut w, &format!("{b}.attn_q.weight"), &[e, e]);
        add(&mut w, &format!("{b}.attn_k.weight"), &[e, kv]);
        add(&mut w, &format!("{b}.attn_v.weight"), &[e, kv]);
        add(&mut w, &format!("{b}.attn_output.weight"), &[e, e]);
        add(&mut w, &format!("{b}.ffn_norm.weight"), &[e]);
        if s.n_expert > 0 {
            let x = s.n_expert as u64;
            add(&mut w, &format!("{b}.ffn_gate_inp.weight"), &[e, x]);
            add(&mut w, &format!("{b}.ffn_gate_exps.weight"), &[e, s.n_ff, x]);
            add(&mut w, &format!("{b}.ffn_up_exps.weight"), &[e, s.n_ff, x]);
            add(&mut w, &format!("{b}.ffn_down_exps.weight"), &[s.n_ff, e, x]);
        } else {
            add(&mut w, &format!("{b}.ffn_gate.weight"), &[e, s.n_ff]);
            add(&mut w, &format!("{b}.ffn_up.weight"), &[e, s.n_ff]);
            add(&mut w, &format!("{b}.ffn_down.weight"), &[s.n_ff, e]);
        }
    }
    w.write_to_path(path).unwrap();
}
