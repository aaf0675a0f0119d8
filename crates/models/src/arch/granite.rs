//! `granite`: IBM Granite 3.x dense — the llama block (normal-mode rope, SwiGLU, optional
//! biases) with four multipliers from the file (`src/models/granite.cpp`): token
//! embeddings × `embedding_scale`, each block's output × `residual_scale` before its
//! residual add, attention scores × `attention.scale` (instead of 1/√head), logits ×
//! 1/`logit_scale` (required). `rope.scaling.finetuned = false` turns rope off in every
//! layer.

use crate::registry::Architecture;
use crate::rope::RopeMode;
use crate::Error;

gguf_registry::submit! {
    Architecture {
        name: "granite",
        load: |file| super::load_with(file, "granite", RopeMode::Normal, |ld, hp, spec| {
            if hp.head_k != hp.head_v || hp.n_rot != hp.head_k {
                return Err(Error::Invalid(format!(
                    "granite needs equal key/value head widths and full rope: k={} v={} n_rot={}",
                    hp.head_k, hp.head_v, hp.n_rot
                )));
            }
            if hp.n_expert > 0 {
                return Err(Error::Unsupported("granite with experts is `granitemoe`, not supported yet".into()));
            }
            let logit_scale = ld.f32("logit_scale")?;
            if logit_scale == 0.0 || !logit_scale.is_finite() {
                return Err(Error::BadKey { key: ld.key("logit_scale"), msg: format!("{logit_scale}") });
            }
            // ggml_scale(cur, 1.0f / f_logit_scale): the reciprocal in f32, then a product.
            spec.logit_scale = Some(1.0 / logit_scale);
            spec.residual_scale = ld.opt_f32("residual_scale")?.filter(|&s| s != 0.0);
            spec.embed_scale = ld.opt_f32("embedding_scale")?.filter(|&s| s != 0.0);
            let key = ld.key("rope.scaling.finetuned");
            let rope = match ld.file().metadata().get(&key) {
                None => true,
                Some(v) => v.as_bool().ok_or_else(|| Error::BadKey { key, msg: "not a bool".into() })?,
            };
            if !rope {
                spec.nope_layers = vec![true; hp.n_layer];
            }
            Ok(())
        }),
        ..Architecture::BASE
    }
}
