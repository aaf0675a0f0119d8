//! The encoder families ([`ENCODERS`]: `bert`, `nomic-bert`), which `verify families`
//! compares by their embeddings instead of logits. Tensors and keys as
//! `llama_model_bert::load_arch_tensors` / `llama_model_nomic_bert::…` read them:
//! `token_embd`, `token_types` (2 rows, F32; `tokenizer.ggml.token_type_count` = 2),
//! `position_embd` (bert, F16), `token_embd_norm` weight + bias; per layer Q/K/V with
//! biases (bert) or one `attn_qkv` (nomic-bert), `attn_output` + bias, the LayerNorms
//! `attn_output_norm` / `layer_output_norm`, `ffn_up` / `ffn_down` with biases (bert) or
//! `ffn_gate` / `ffn_up` / `ffn_down` (nomic-bert); bert has a reranker head `cls` + bias
//! and `cls.output` + bias (one label; nomic-bert's loader takes none). `attention.layer_norm_epsilon` 1e-12, `pooling_type`
//! as the real model (bge: CLS, nomic: MEAN), `attention.causal` false. Matrices cycle
//! through the family types like the decoder families (K-quants on 384/768-wide rows
//! fall back to Q8_0; the FFN down matrices take them).

use std::path::Path;

use anyhow::{Context, Result};
use gguf_format::GgufFile;

use super::{Family, TypeCycle, VocabSource};

/// The encoder families, in the order `verify families` runs them (after [`super::FAMILIES`]).
pub const ENCODERS: &[Family] = &[
    Family {
        name: "bert",
        arch: "bert",
        layout: "bge-small-en-v1.5 (384 wide, 12 heads of 32, FFN 1536 GELU, absolute positions to 512, CLS \
                 pooling), bert-bge WordPiece vocab; 4 of 12 layers",
        moe: false,
        vocab: VocabSource::Fixture("bert-bge"),
        n_layer: 4,
        n_embd: 384,
        n_head: 12,
        n_head_kv: 12,
        head_dim: 32,
        n_ff: 1536,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 10000.0,
        rms_eps: 1e-12,
        ctx: 512,
        features: &[],
        kv: &[],
    },
    Family {
        name: "nomic-bert",
        arch: "nomic-bert",
        layout: "nomic-embed-text-v1.5 (768 wide, 12 heads of 64, fused attn_qkv, NeoX rope base 1000, SwiGLU FFN \
                 3072, context 2048, mean pooling), bert-bge WordPiece vocab (nomic's is bert-base-uncased's); 3 of \
                 12 layers",
        moe: false,
        vocab: VocabSource::Fixture("bert-bge"),
        n_layer: 3,
        n_embd: 768,
        n_head: 12,
        n_head_kv: 12,
        head_dim: 64,
        n_ff: 3072,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        rope_base: 1000.0,
        rms_eps: 1e-12,
        ctx: 2048,
        features: &[],
        kv: &[],
    },
];

/// Whether `fam` is one of [`ENCODERS`].
pub fn is_encoder(fam: &Family) -> bool {
    matches!(fam.arch, "bert" | "nomic-bert")
}

/// The file of an encoder family (see the module docs).
pub fn write(path: &Path, fam: &Family, seed: u64, tok: &GgufFile, types: &'static [&'static str]) -> Result<()> {
    let nomic = fam.arch == "nomic-bert";
    let (mut b, n_vocab) = super::family_builder(fam, seed, tok)?;
    let arch = fam.arch;
    let k = |s: &str| format!("{arch}.{s}");
    let w = &mut b.w;
    w.add_kv(&k("block_count"), fam.n_layer as u32);
    w.add_kv(&k("context_length"), fam.ctx);
    w.add_kv(&k("embedding_length"), fam.n_embd as u32);
    w.add_kv(&k("feed_forward_length"), fam.n_ff as u32);
    w.add_kv(&k("attention.head_count"), fam.n_head as u32);
    w.add_kv(&k("attention.layer_norm_epsilon"), fam.rms_eps);
    w.add_kv(&k("attention.causal"), false);
    w.add_kv(&k("pooling_type"), if nomic { 1u32 } else { 2u32 });
    if nomic {
        w.add_kv(&k("rope.freq_base"), fam.rope_base);
    }
    for (key, value) in tok.metadata().iter() {
        if key.starts_with("tokenizer.") {
            w.metadata_mut().set(key, value.clone());
        }
    }
    w.add_kv("tokenizer.ggml.token_type_count", 2u32);
    w.add_kv("general.quantization_version", 2u32);

    let (e, f) = (fam.n_embd, fam.n_ff);
    let s = |fan_in: u64| 1.0 / (fan_in as f64).sqrt();
    let mut types = TypeCycle(0, types);
    b.tensor("token_embd.weight", &[e, n_vocab], "q8_0", 0.0, 0.5)?;
    b.tensor("token_types.weight", &[e, 2], "f32", 0.0, 0.5)?;
    if !nomic {
        b.tensor("position_embd.weight", &[e, fam.ctx as u64], "f16", 0.0, 0.5)?;
    }
    b.tensor("token_embd_norm.weight", &[e], "f32", 1.0, 0.1)?;
    b.tensor("token_embd_norm.bias", &[e], "f32", 0.0, 0.1)?;
    for il in 0..fam.n_layer {
        let p = |x: &str| format!("blk.{il}.{x}");
        if nomic {
            b.tensor(&p("attn_qkv.weight"), &[e, 3 * e], types.next(e), 0.0, 2.0 * s(e))?;
        } else {
            for x in ["attn_q", "attn_k", "attn_v"] {
                // queries and keys at twice the unit scale, so the attention is not flat
                b.tensor(&p(&format!("{x}.weight")), &[e, e], types.next(e), 0.0, 2.0 * s(e))?;
                b.tensor(&p(&format!("{x}.bias")), &[e], "f32", 0.0, 0.1)?;
            }
        }
        b.tensor(&p("attn_output.weight"), &[e, e], types.next(e), 0.0, s(e))?;
        b.tensor(&p("attn_output.bias"), &[e], "f32", 0.0, 0.1)?;
        b.tensor(&p("attn_output_norm.weight"), &[e], "f32", 1.0, 0.1)?;
        b.tensor(&p("attn_output_norm.bias"), &[e], "f32", 0.0, 0.1)?;
        if nomic {
            b.tensor(&p("ffn_gate.weight"), &[e, f], types.next(e), 0.0, s(e))?;
        }
        b.tensor(&p("ffn_up.weight"), &[e, f], types.next(e), 0.0, s(e))?;
        b.tensor(&p("ffn_down.weight"), &[f, e], types.next(f), 0.0, s(f))?;
        if !nomic {
            b.tensor(&p("ffn_up.bias"), &[f], "f32", 0.0, 0.1)?;
            b.tensor(&p("ffn_down.bias"), &[e], "f32", 0.0, 0.1)?;
        }
        b.tensor(&p("layer_output_norm.weight"), &[e], "f32", 1.0, 0.1)?;
        b.tensor(&p("layer_output_norm.bias"), &[e], "f32", 0.0, 0.1)?;
    }
    if !nomic {
        // llama_model_nomic_bert does not load a classifier head
        b.tensor("cls.weight", &[e, e], types.next(e), 0.0, s(e))?;
        b.tensor("cls.bias", &[e], "f32", 0.0, 0.1)?;
        b.tensor("cls.output.weight", &[e, 1], "f32", 0.0, s(e))?;
        b.tensor("cls.output.bias", &[1], "f32", 0.0, 0.1)?;
    }
    b.w.write_to_path(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
