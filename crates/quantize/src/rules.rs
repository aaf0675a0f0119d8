//! What a per-tensor rule sees ([`TensorCtx`]), and llama.cpp's own rule: a port of
//! `llama_tensor_get_type_impl` (`src/llama-quant.cpp`), shared by every built-in recipe
//! and keyed on the recipe's `llama_ftype` exactly as the original is.

use crate::recipe::Recipe;

/// ggml type ids the rules name (`enum ggml_type`).
#[allow(missing_docs)]
pub mod ty {
    pub const F32: u32 = 0;
    pub const F16: u32 = 1;
    pub const Q4_0: u32 = 2;
    pub const Q4_1: u32 = 3;
    pub const Q5_0: u32 = 6;
    pub const Q5_1: u32 = 7;
    pub const Q8_0: u32 = 8;
    pub const Q2_K: u32 = 10;
    pub const Q3_K: u32 = 11;
    pub const Q4_K: u32 = 12;
    pub const Q5_K: u32 = 13;
    pub const Q6_K: u32 = 14;
    pub const IQ2_XXS: u32 = 16;
    pub const IQ2_XS: u32 = 17;
    pub const IQ3_XXS: u32 = 18;
    pub const IQ1_S: u32 = 19;
    pub const IQ4_NL: u32 = 20;
    pub const IQ3_S: u32 = 21;
    pub const IQ2_S: u32 = 22;
    pub const IQ4_XS: u32 = 23;
    pub const IQ1_M: u32 = 29;
    pub const BF16: u32 = 30;
    pub const TQ1_0: u32 = 34;
    pub const TQ2_0: u32 = 35;
    pub const MXFP4: u32 = 39;
    pub const Q2_0: u32 = 42;
}

/// `llama_ftype` numbers (`include/llama.h`).
#[allow(missing_docs)]
pub mod ftype {
    pub const ALL_F32: u32 = 0;
    pub const F16: u32 = 1;
    pub const Q4_0: u32 = 2;
    pub const Q4_1: u32 = 3;
    pub const Q8_0: u32 = 7;
    pub const Q5_0: u32 = 8;
    pub const Q5_1: u32 = 9;
    pub const Q2_K: u32 = 10;
    pub const Q3_K_S: u32 = 11;
    pub const Q3_K_M: u32 = 12;
    pub const Q3_K_L: u32 = 13;
    pub const Q4_K_S: u32 = 14;
    pub const Q4_K_M: u32 = 15;
    pub const Q5_K_S: u32 = 16;
    pub const Q5_K_M: u32 = 17;
    pub const Q6_K: u32 = 18;
    pub const IQ2_XXS: u32 = 19;
    pub const IQ2_XS: u32 = 20;
    pub const Q2_K_S: u32 = 21;
    pub const IQ3_XS: u32 = 22;
    pub const IQ3_XXS: u32 = 23;
    pub const IQ1_S: u32 = 24;
    pub const IQ4_NL: u32 = 25;
    pub const IQ3_S: u32 = 26;
    pub const IQ3_M: u32 = 27;
    pub const IQ2_S: u32 = 28;
    pub const IQ2_M: u32 = 29;
    pub const IQ4_XS: u32 = 30;
    pub const IQ1_M: u32 = 31;
    pub const BF16: u32 = 32;
    pub const TQ1_0: u32 = 36;
    pub const TQ2_0: u32 = 37;
    pub const MXFP4_MOE: u32 = 38;
    pub const NVFP4: u32 = 39;
    pub const Q1_0: u32 = 40;
    pub const Q2_0: u32 = 41;
}

/// llama.cpp's broad tensor categories (`tensor_get_category`), from the name alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Category {
    TokenEmbd,
    AttentionQ,
    AttentionV,
    AttentionK,
    AttentionQkv,
    AttentionKvB,
    AttentionOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

impl Category {
    /// `tensor_get_category`.
    pub fn of(name: &str) -> Category {
        if name == "output.weight" {
            Category::Output
        } else if is_token_embd(name) {
            Category::TokenEmbd
        } else if name.contains("attn_qkv.weight") {
            Category::AttentionQkv
        } else if name.contains("attn_kv_b.weight") {
            Category::AttentionKvB
        } else if name.contains("attn_v.weight") {
            Category::AttentionV
        } else if name.contains("attn_k.weight") {
            Category::AttentionK
        } else if name.contains("attn_q.weight") {
            Category::AttentionQ
        } else if name.contains("attn_output.weight") {
            Category::AttentionOutput
        } else if name.contains("ffn_up") {
            Category::FfnUp
        } else if name.contains("ffn_gate") {
            Category::FfnGate
        } else if name.contains("ffn_down") {
            Category::FfnDown
        } else {
            Category::Other
        }
    }

    /// `category_is_attn_v`: the tensors as sensitive as `attn_v`.
    pub fn is_attn_v(self) -> bool {
        matches!(self, Category::AttentionV | Category::AttentionQkv | Category::AttentionKvB)
    }
}

/// `tensor_name_match_token_embd`.
pub fn is_token_embd(name: &str) -> bool {
    name == "token_embd.weight" || name == "per_layer_token_embd.weight"
}

/// The model facts the rules read (llama.cpp's `hparams` and `model.type`).
#[derive(Debug, Clone, Default)]
pub struct ModelInfo {
    /// `general.architecture`.
    pub arch: String,
    /// `<arch>.block_count` as the input has it (before `--prune-layers`).
    pub n_layer: u32,
    /// `<arch>.expert_count` (0 for a dense model).
    pub n_expert: u32,
    /// Query heads per KV head in layer 0 (0 when there are no KV heads).
    pub n_gqa: u32,
    /// llama.cpp would call this model `LLM_TYPE_70B`.
    pub is_70b: bool,
}

/// Everything a [`crate::recipe::RuleFn`] may look at for one tensor.
#[derive(Debug, Clone)]
pub struct TensorCtx<'a> {
    /// The tensor's (possibly renamed by `--prune-layers`) name.
    pub name: &'a str,
    /// Its category.
    pub category: Category,
    /// `ne[0..4]`.
    pub ne: [u64; 4],
    /// The model.
    pub model: &'a ModelInfo,
    /// An importance matrix was given.
    pub has_imatrix: bool,
    /// The model has no `output.weight`, so `token_embd` is also the output.
    pub has_tied_embeddings: bool,
    /// `--output-tensor-type`.
    pub output_tensor_type: Option<u32>,
    /// `--token-embedding-type`.
    pub token_embedding_type: Option<u32>,
    /// How many tensors of this tensor's counter group (attn_v-like, ffn_down, ffn_gate,
    /// ffn_up) went through the rule before it (llama.cpp's `i_attention_wv`, `i_ffn_*`).
    pub seq: u32,
    /// How many attn_v-like tensors the model has (`n_attention_wv`).
    pub n_attention_wv: u32,
}

impl TensorCtx<'_> {
    /// llama.cpp's `layer_info`: the layer index and count for an FFN tensor — its place
    /// in the sequence for a dense model, parsed from `blk.N.` when there are experts.
    pub fn layer_info(&self) -> Result<(i64, i64), String> {
        let n_layer = self.model.n_layer as i64;
        if self.model.n_expert > 1 {
            let i =
                parse_blk(self.name).ok_or_else(|| format!("Failed to determine layer for tensor {}", self.name))?;
            if i < 0 || i >= n_layer {
                return Err(format!("Bad layer {i} for tensor {}. Must be in [0, {n_layer})", self.name));
            }
            return Ok((i, n_layer));
        }
        Ok((self.seq as i64, n_layer))
    }
}

/// `sscanf(name, "blk.%d.", &i)`: the layer number after `blk.`, if any.
pub fn parse_blk(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let rest = rest.trim_start_matches([' ', '\t', '\n']);
    let (sign, digits) = match rest.as_bytes().first() {
        Some(b'-') => (-1, &rest[1..]),
        Some(b'+') => (1, &rest[1..]),
        _ => (1, rest),
    };
    let end = digits.bytes().take_while(u8::is_ascii_digit).count();
    if end == 0 {
        return None;
    }
    digits[..end].parse::<i64>().ok().map(|v| sign * v)
}

fn use_more_bits(i_layer: i64, n_layers: i64) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

/// llama.cpp's rule (`llama_tensor_get_type_impl`), for the recipe's `llama_ftype`.
/// The branches keep llama.cpp's shape (some give the same type) so the two can be read
/// side by side when upstream changes.
#[allow(clippy::if_same_then_else)]
pub fn llama_cpp_rule(recipe: &Recipe, t: &TensorCtx<'_>, chosen: u32) -> Result<u32, String> {
    use Category as C;
    let f = recipe.ftype;
    let m = t.model;
    let arch = m.arch.as_str();
    let cat = t.category;
    let mut new_type = chosen;
    let is_falcon = arch == "falcon";
    let block = |id: u32| ggml_quants::by_id(id).map(|t| t.block_size as u64).unwrap_or(1);

    if arch == "glm5-next"
        && (t.name.contains("attn_q_a") || t.name.contains("attn_q_b") || t.name.contains("nextn.eh_proj"))
        && !matches!(new_type, ty::F32 | ty::BF16 | ty::F16)
    {
        return Ok(ty::Q8_0);
    }

    let iq_low =
        matches!(f, ftype::IQ2_XXS | ftype::IQ2_XS | ftype::IQ1_S | ftype::IQ2_S | ftype::IQ2_M | ftype::IQ1_M);
    let iq2s_or_m = matches!(f, ftype::IQ2_S | ftype::IQ2_M);

    if cat == C::Output || (t.has_tied_embeddings && cat == C::TokenEmbd) {
        if let Some(o) = t.output_tensor_type {
            new_type = o;
        } else {
            let nx = t.ne[0];
            if f == ftype::MXFP4_MOE || is_falcon || !nx.is_multiple_of(block(new_type)) {
                new_type = ty::Q8_0;
            } else if matches!(
                f,
                ftype::IQ2_XXS
                    | ftype::IQ2_XS
                    | ftype::IQ3_XXS
                    | ftype::IQ1_S
                    | ftype::IQ2_S
                    | ftype::IQ2_M
                    | ftype::IQ1_M
            ) {
                new_type = ty::Q5_K;
            } else if new_type != ty::Q8_0 {
                new_type = ty::Q6_K;
            }
        }
    } else if f == ftype::MXFP4_MOE {
        let bailing_expert = arch == "bailingmoe3" && matches!(cat, C::FfnUp | C::FfnGate | C::FfnDown);
        new_type = if t.ne[2] > 1 && (arch != "bailingmoe3" || bailing_expert) { ty::MXFP4 } else { ty::Q8_0 };
    } else if cat == C::TokenEmbd {
        if let Some(e) = t.token_embedding_type {
            new_type = e;
        } else if matches!(f, ftype::IQ2_XXS | ftype::IQ2_XS | ftype::IQ1_S | ftype::IQ1_M) {
            new_type = ty::Q2_K;
        } else if iq2s_or_m || f == ftype::IQ3_XXS {
            new_type = ty::IQ3_S;
        } else if matches!(f, ftype::TQ1_0 | ftype::TQ2_0 | ftype::Q2_0) {
            new_type = ty::Q4_K;
        }
    } else if iq_low {
        if cat.is_attn_v() {
            new_type = if m.n_gqa >= 4 || m.n_expert >= 4 {
                ty::Q4_K
            } else if iq2s_or_m {
                ty::IQ3_S
            } else {
                ty::Q2_K
            };
        } else if m.n_expert == 8 && cat == C::AttentionK {
            new_type = ty::Q4_K;
        } else if cat == C::FfnDown {
            if t.seq < m.n_layer / 8 {
                new_type = if iq2s_or_m { ty::IQ3_S } else { ty::Q2_K };
            }
        } else if cat == C::AttentionOutput {
            if m.n_expert == 8 {
                new_type = ty::Q5_K;
            } else if matches!(f, ftype::IQ1_S | ftype::IQ1_M) {
                new_type = ty::IQ2_XXS;
            } else if iq2s_or_m {
                new_type = ty::IQ3_S;
            }
        }
    } else if cat.is_attn_v() {
        let gqa4 = m.n_gqa >= 4;
        if f == ftype::Q2_K {
            new_type = if gqa4 { ty::Q4_K } else { ty::Q3_K };
        } else if f == ftype::Q2_K_S && gqa4 {
            new_type = ty::Q4_K;
        } else if f == ftype::IQ3_XXS {
            new_type = if gqa4 {
                ty::Q4_K
            } else if !t.has_imatrix {
                ty::IQ3_S
            } else {
                ty::IQ3_XXS
            };
        } else if matches!(f, ftype::IQ3_XS | ftype::IQ3_S) && gqa4 {
            new_type = ty::Q4_K;
        } else if f == ftype::IQ3_M {
            new_type = ty::Q4_K;
        } else if f == ftype::Q3_K_M {
            new_type = if t.seq < 2 { ty::Q5_K } else { ty::Q4_K };
        } else if f == ftype::Q3_K_L {
            new_type = ty::Q5_K;
        } else if matches!(f, ftype::IQ4_NL | ftype::IQ4_XS) && gqa4 {
            new_type = ty::Q5_K;
        } else if matches!(f, ftype::Q4_K_M | ftype::Q5_K_M) && use_more_bits(t.seq as i64, t.n_attention_wv as i64) {
            new_type = ty::Q6_K;
        } else if f == ftype::Q4_K_S && t.seq < 4 {
            new_type = ty::Q5_K;
        }
        if m.is_70b && matches!(new_type, ty::Q3_K | ty::Q4_K) {
            new_type = ty::Q5_K;
        }
        if m.n_expert == 8 {
            new_type = ty::Q8_0;
        }
    } else if cat == C::AttentionK {
        if m.n_expert == 8 {
            new_type = ty::Q8_0;
        } else if f == ftype::IQ3_XS {
            new_type = ty::IQ3_XXS;
        } else if f == ftype::IQ3_XXS {
            new_type = ty::IQ2_S;
        }
    } else if cat == C::AttentionQ {
        if f == ftype::IQ3_XS {
            new_type = ty::IQ3_XXS;
        } else if f == ftype::IQ3_XXS {
            new_type = ty::IQ2_S;
        }
    } else if cat == C::FfnDown {
        let (i_layer, n_layer) = t.layer_info()?;
        if f == ftype::Q2_K {
            new_type = ty::Q3_K;
        } else if f == ftype::Q2_K_S {
            if i_layer < n_layer / 8 {
                new_type = ty::Q4_K;
            }
        } else if f == ftype::IQ3_XXS && !t.has_imatrix {
            new_type = if i_layer < n_layer / 8 { ty::Q4_K } else { ty::Q3_K };
        } else if f == ftype::Q3_K_M {
            new_type = if i_layer < n_layer / 16 {
                ty::Q5_K
            } else if !is_falcon || use_more_bits(i_layer, n_layer) {
                ty::Q4_K
            } else {
                ty::Q3_K
            };
        } else if f == ftype::IQ3_M && (i_layer < n_layer / 8 || (m.n_expert == 8 && use_more_bits(i_layer, n_layer))) {
            new_type = ty::Q4_K;
        } else if f == ftype::Q3_K_L {
            new_type = if is_falcon { ty::Q4_K } else { ty::Q5_K };
        } else if f == ftype::Q4_K_M {
            if is_falcon {
                new_type = if i_layer < n_layer / 16 {
                    ty::Q6_K
                } else if use_more_bits(i_layer, n_layer) {
                    ty::Q5_K
                } else {
                    ty::Q4_K
                };
            } else if use_more_bits(i_layer, n_layer) {
                new_type = ty::Q6_K;
            }
        } else if i_layer < n_layer / 8 && matches!(f, ftype::IQ4_NL | ftype::IQ4_XS) && !t.has_imatrix {
            new_type = ty::Q5_K;
        } else if f == ftype::Q5_K_M && use_more_bits(i_layer, n_layer) {
            new_type = ty::Q6_K;
        } else if f == ftype::Q4_K_S && !is_falcon && i_layer < n_layer / 8 {
            new_type = ty::Q5_K;
        } else if matches!(f, ftype::Q4_0 | ftype::Q5_0) && t.has_imatrix && i_layer < n_layer / 8 {
            new_type = if f == ftype::Q4_0 { ty::Q4_1 } else { ty::Q5_1 };
        }
    } else if cat == C::AttentionOutput {
        if !is_falcon {
            if m.n_expert == 8 {
                if matches!(
                    f,
                    ftype::Q2_K
                        | ftype::IQ3_XS
                        | ftype::IQ3_XXS
                        | ftype::Q3_K_S
                        | ftype::Q3_K_M
                        | ftype::IQ4_NL
                        | ftype::Q4_K_S
                        | ftype::Q4_K_M
                        | ftype::IQ3_S
                        | ftype::IQ3_M
                        | ftype::IQ4_XS
                ) {
                    new_type = ty::Q5_K;
                }
            } else {
                match f {
                    ftype::Q2_K => new_type = ty::Q3_K,
                    ftype::IQ3_XXS => new_type = ty::IQ3_S,
                    ftype::Q3_K_M => new_type = ty::Q4_K,
                    ftype::Q3_K_L => new_type = ty::Q5_K,
                    ftype::IQ3_M => new_type = ty::Q4_K,
                    _ => {}
                }
            }
        } else if f == ftype::Q3_K_L {
            new_type = ty::Q4_K;
        }
    } else if cat == C::AttentionQkv {
        if matches!(f, ftype::Q3_K_M | ftype::Q3_K_L | ftype::IQ3_M) {
            new_type = ty::Q4_K;
        } else if f == ftype::Q4_K_M {
            new_type = ty::Q5_K;
        } else if f == ftype::Q5_K_M {
            new_type = ty::Q6_K;
        }
    } else if matches!(cat, C::FfnGate | C::FfnUp) {
        let (i_layer, n_layer) = t.layer_info()?;
        if f == ftype::IQ3_XS && i_layer >= n_layer / 8 && i_layer < 7 * n_layer / 8 {
            new_type = ty::IQ3_XXS;
        }
    }
    Ok(new_type)
}

/// `tensor_type_fallback`: a type whose block does not divide the row falls back to one
/// that does (F16 when even that fails). Returns the type and whether it fell back.
pub fn fallback(ne0: u64, target: u32) -> Result<(u32, bool), String> {
    let block = |id: u32| ggml_quants::by_id(id).map(|t| t.block_size as u64);
    let qk = block(target).ok_or_else(|| format!("type id {target} is not registered"))?;
    if ne0.is_multiple_of(qk) {
        return Ok((target, false));
    }
    let mut ret = match target {
        ty::IQ1_S | ty::IQ1_M | ty::IQ2_XXS | ty::IQ2_XS | ty::IQ2_S | ty::IQ3_XXS | ty::IQ3_S | ty::IQ4_XS => {
            ty::IQ4_NL
        }
        ty::Q2_0 | ty::Q2_K | ty::Q3_K | ty::TQ1_0 | ty::TQ2_0 => ty::Q4_0,
        ty::Q4_K => ty::Q5_0,
        ty::Q5_K => ty::Q5_1,
        ty::Q6_K => ty::Q8_0,
        _ if qk <= 32 => target,
        _ => {
            let name = ggml_quants::by_id(target).map(|t| t.name).unwrap_or("?");
            return Err(format!("no tensor type fallback is defined for type {name}"));
        }
    };
    if !ne0.is_multiple_of(block(ret).unwrap_or(1)) {
        ret = ty::F16;
    }
    Ok((ret, true))
}

/// Whether a target type needs an importance matrix for this tensor
/// (`tensor_requires_imatrix`).
pub fn requires_imatrix(name: &str, target: u32, recipe_ftype: u32) -> bool {
    if is_token_embd(name) || name == "output.weight" {
        return false;
    }
    match target {
        ty::IQ3_XXS | ty::IQ2_XXS | ty::IQ2_XS | ty::IQ2_S | ty::IQ1_M | ty::IQ1_S => true,
        ty::Q2_K => recipe_ftype == ftype::Q2_K_S,
        _ => false,
    }
}

/// `tensor_allows_quantization`: which tensors a recipe may touch at all (2-D and 3-D
/// `*weight` tensors, minus norms, routers, position embeddings, conv1d kernels, …).
pub fn allows_quantization(name: &str, n_dims: usize, arch: &str, quantize_output: bool, only_copy: bool) -> bool {
    if only_copy || n_dims < 2 {
        return false;
    }
    let has = |s: &str| name.contains(s);
    let mut q = name.ends_with("weight");
    q &= !has("_norm.weight");
    q &= quantize_output || name != "output.weight";
    for s in [
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
    ] {
        q &= !has(s);
    }
    q &= name != "position_embd.weight" && name != "token_types.weight";
    if arch == "glm5-next" {
        for s in [
            "hc_",
            "indexer.attn_q_b",
            "indexer.attn_k",
            "indexer.proj",
            "indexer_compressor_gate",
            "indexer_compressor_ape",
            "ssm_f_a.weight",
            "ssm_f_b.weight",
            "ssm_g_a.weight",
            "ssm_g_b.weight",
            "ssm_beta.weight",
            "attn_kv_a_mqa.weight",
            "attn_k_b.weight",
            "attn_v_b.weight",
        ] {
            q &= !has(s);
        }
    }
    for s in [
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ] {
        q &= !has(s);
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_follow_llama_cpp_order() {
        assert_eq!(Category::of("output.weight"), Category::Output);
        assert_eq!(Category::of("token_embd.weight"), Category::TokenEmbd);
        assert_eq!(Category::of("blk.0.attn_qkv.weight"), Category::AttentionQkv);
        assert_eq!(Category::of("blk.3.attn_v.weight"), Category::AttentionV);
        assert_eq!(Category::of("blk.3.ffn_up_exps.weight"), Category::FfnUp);
        // "ffn_gate_inp" is a gate by name (it is excluded from quantization elsewhere).
        assert_eq!(Category::of("blk.3.ffn_gate_inp.weight"), Category::FfnGate);
        assert_eq!(Category::of("blk.3.attn_norm.weight"), Category::Other);
    }

    #[test]
    fn blk_parse_is_sscanf_like() {
        assert_eq!(parse_blk("blk.12.ffn_down.weight"), Some(12));
        assert_eq!(parse_blk("blk.7x"), Some(7));
        assert_eq!(parse_blk("output.weight"), None);
        assert_eq!(parse_blk("blk..x"), None);
    }

    #[test]
    fn fallbacks() {
        assert_eq!(fallback(640, ty::Q4_K).unwrap(), (ty::Q5_0, true));
        assert_eq!(fallback(640, ty::Q6_K).unwrap(), (ty::Q8_0, true));
        assert_eq!(fallback(512, ty::Q6_K).unwrap(), (ty::Q6_K, false));
        assert_eq!(fallback(80, ty::Q4_K).unwrap(), (ty::F16, true));
        assert_eq!(fallback(640, ty::IQ2_XS).unwrap(), (ty::IQ4_NL, true));
        assert_eq!(fallback(48, ty::Q8_0).unwrap(), (ty::F16, true));
    }

    #[test]
    fn quantizable_tensors() {
        assert!(allows_quantization("blk.0.attn_q.weight", 2, "llama", true, false));
        assert!(!allows_quantization("blk.0.attn_norm.weight", 1, "llama", true, false));
        assert!(!allows_quantization("blk.0.ffn_gate_inp.weight", 2, "qwen3moe", true, false));
        assert!(!allows_quantization("output.weight", 2, "llama", false, false));
        assert!(!allows_quantization("blk.0.attn_q.bias", 2, "llama", true, false));
        assert!(!allows_quantization("blk.0.attn_q.weight", 2, "llama", true, true));
    }
}
