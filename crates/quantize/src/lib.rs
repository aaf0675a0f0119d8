//! llama-quantize's workflow as a library: pick a [`Recipe`] (a llama.cpp file type such
//! as `Q4_K_M`), [`plan`] the type of every tensor with llama.cpp's rules and the user's
//! overrides, then [`write()`] the quantized GGUF — streamed tensor by tensor into a
//! temporary file that is renamed into place only when everything succeeded.
//!
//! The reference is `src/llama-quant.cpp` and `tools/quantize/quantize.cpp` of the pinned
//! llama.cpp (`0c1e57098`): same tensor order, same per-tensor types, same metadata keys
//! in the same order, same bytes (`cargo xtask verify quantize` compares the files).
//!
//! # Extending: a recipe from another crate
//!
//! ```
//! use gguf_quantize::{recipe, Category, Recipe, TensorCtx};
//!
//! /// Attention in Q8_0 (ggml id 8), everything else the default Q4_0.
//! fn attn_q8(_: &Recipe, t: &TensorCtx<'_>, chosen: u32) -> Result<u32, String> {
//!     let attn = matches!(t.category, Category::AttentionQ | Category::AttentionK | Category::AttentionV);
//!     Ok(if attn { 8 } else { chosen })
//! }
//! gguf_quantize::gguf_registry::submit!(Recipe::new("MY_ATTN_Q8", 1001, "q4_0", attn_q8).with_aliases(&["mine"]));
//!
//! assert_eq!(recipe::lookup("MINE").unwrap().name, "MY_ATTN_Q8");
//! assert!(recipe::registry_problems().problems.is_empty());
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod error;
pub mod imatrix;
pub mod recipe;
mod recipes;
pub mod rules;

use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};

use ggml_quants::TypeTraits;
use gguf_format::{GgufWriter, Metadata, SplitGguf, TensorSource, Value};

pub use error::Error;
pub use imatrix::Imatrix;
pub use recipe::{Recipe, RuleFn};
pub use rules::{Category, ModelInfo, TensorCtx};

/// The registry crate, for `gguf_quantize::gguf_registry::submit!` in plug-in crates.
pub use gguf_registry;
/// `inventory` re-exported for plug-in recipes.
pub use inventory;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `GGML_QNT_VERSION`, written as `general.quantization_version`.
pub const QNT_VERSION: u32 = 2;

/// One `--override-kv KEY=TYPE:VALUE`.
#[derive(Debug, Clone, PartialEq)]
pub enum KvOverride {
    /// `int:` — written as u32 of the absolute value, as llama.cpp does.
    Int(String, i64),
    /// `float:` — written as f32.
    Float(String, f64),
    /// `bool:`.
    Bool(String, bool),
    /// `str:` (at most 127 bytes).
    Str(String, String),
}

impl KvOverride {
    /// Parses llama.cpp's `KEY=TYPE:VALUE` (`string_parse_kv_override`).
    pub fn parse(s: &str) -> Result<KvOverride> {
        let bad =
            |reason: &str| Error::BadOption { option: "--override-kv".into(), reason: format!("{reason}: {s:?}") };
        let (k, v) = s.split_once('=').ok_or_else(|| bad("malformed KV override (KEY=TYPE:VALUE)"))?;
        if k.len() >= 128 {
            return Err(bad("key longer than 127 bytes"));
        }
        let k = k.to_string();
        if let Some(v) = v.strip_prefix("int:") {
            Ok(KvOverride::Int(k, atol(v)))
        } else if let Some(v) = v.strip_prefix("float:") {
            Ok(KvOverride::Float(k, v.trim().parse().or_else(|_| leading_f64(v)).unwrap_or(0.0)))
        } else if let Some(v) = v.strip_prefix("bool:") {
            match v {
                "true" => Ok(KvOverride::Bool(k, true)),
                "false" => Ok(KvOverride::Bool(k, false)),
                _ => Err(bad("invalid boolean value (true or false)")),
            }
        } else if let Some(v) = v.strip_prefix("str:") {
            if v.len() > 127 {
                return Err(bad("value cannot exceed 127 chars"));
            }
            Ok(KvOverride::Str(k, v.to_string()))
        } else {
            Err(bad("invalid type (int, float, bool or str)"))
        }
    }

    fn apply(&self, md: &mut Metadata) {
        let (k, v) = match self {
            KvOverride::Int(k, v) => (k, Value::U32(v.unsigned_abs() as u32)),
            KvOverride::Float(k, v) => (k, Value::F32(*v as f32)),
            KvOverride::Bool(k, v) => (k, Value::Bool(*v)),
            KvOverride::Str(k, v) => (k, Value::String(v.clone().into_bytes())),
        };
        set_last(md, k, v);
    }
}

fn atol(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, d) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let end = d.bytes().take_while(u8::is_ascii_digit).count();
    let v: i64 = d[..end].parse().unwrap_or(0);
    if neg {
        -v
    } else {
        v
    }
}

fn leading_f64(s: &str) -> std::result::Result<f64, ()> {
    let s = s.trim_start();
    (1..=s.len()).rev().find_map(|n| s.get(..n).and_then(|p| p.parse().ok())).ok_or(())
}

/// `gguf_set_val_*`: removes the key and appends it at the end.
fn set_last(md: &mut Metadata, key: &str, v: Value) {
    md.remove(key);
    md.insert_new(key.to_string(), v);
}

/// What to do: llama.cpp's `llama_model_quantize_params` plus the imatrix.
#[derive(Debug, Clone)]
pub struct Params {
    /// The recipe.
    pub recipe: &'static Recipe,
    /// Worker threads (0 = all cores).
    pub nthread: usize,
    /// `--allow-requantize`.
    pub allow_requantize: bool,
    /// `false` with `--leave-output-tensor`.
    pub quantize_output_tensor: bool,
    /// `--pure`.
    pub pure: bool,
    /// `--output-tensor-type`.
    pub output_tensor_type: Option<u32>,
    /// `--token-embedding-type`.
    pub token_embedding_type: Option<u32>,
    /// `--tensor-type PATTERN=TYPE` in order (the pattern lowercased, a regex searched in
    /// the tensor name; the first match wins).
    pub tensor_types: Vec<(String, u32)>,
    /// `--prune-layers` (sorted, deduplicated).
    pub prune_layers: Vec<i64>,
    /// `--override-kv`, in order.
    pub kv_overrides: Vec<KvOverride>,
    /// The importance matrix (already filtered by include/exclude).
    pub imatrix: Option<Imatrix>,
    /// `--dry-run`.
    pub dry_run: bool,
    /// `--keep-split`: one output shard per input shard, tensors in shard order.
    pub keep_split: bool,
}

impl Params {
    /// The defaults of `llama_model_quantize_default_params` for `recipe`.
    pub fn new(recipe: &'static Recipe) -> Params {
        Params {
            recipe,
            nthread: 0,
            allow_requantize: false,
            quantize_output_tensor: true,
            pure: false,
            output_tensor_type: None,
            token_embedding_type: None,
            tensor_types: Vec::new(),
            prune_layers: Vec::new(),
            kv_overrides: Vec::new(),
            imatrix: None,
            dry_run: false,
            keep_split: false,
        }
    }
}

/// The decision for one tensor.
#[derive(Debug, Clone)]
pub struct TensorPlan {
    /// Index into the input's tensor table.
    pub src: usize,
    /// Name in the output (renamed by `--prune-layers`).
    pub name: String,
    /// Name looked up in the imatrix.
    pub imatrix_name: String,
    /// `ne`, trailing 1s dropped as ggml does (`ggml_n_dims`).
    pub dims: Vec<u64>,
    /// Input type id.
    pub from: u32,
    /// Output type id.
    pub to: u32,
    /// The recipe may touch this tensor at all.
    pub allows_quantization: bool,
    /// Its type came from `--tensor-type`.
    pub manual: bool,
    /// The block-size fallback changed its type.
    pub fell_back: bool,
    /// Bytes in the input.
    pub size_in: u64,
    /// Bytes in the output.
    pub size_out: u64,
    /// Output shard (`--keep-split`; else 0).
    pub shard: usize,
    /// The imatrix entry `imatrix_name` is used when converting (present, right size).
    pub use_imatrix: bool,
}

/// The whole plan: output metadata and every tensor in output order.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Output metadata, in llama-quantize's order.
    pub metadata: Metadata,
    /// Tensors in output order.
    pub tensors: Vec<TensorPlan>,
    /// The model facts the rules used.
    pub model: ModelInfo,
    /// Tensors that needed the block-size fallback.
    pub n_fallback: usize,
    /// Elements in the input (for bits per weight).
    pub n_elements: u64,
    /// A tensor would need an imatrix that was not given (only reported, by `--dry-run`).
    pub needs_imatrix: bool,
    /// Output shards (1 unless `--keep-split` on a split input).
    pub n_split: usize,
}

impl Plan {
    /// Input bytes of all tensors.
    pub fn size_in(&self) -> u64 {
        self.tensors.iter().map(|t| t.size_in).sum()
    }
    /// Output bytes of all tensors.
    pub fn size_out(&self) -> u64 {
        self.tensors.iter().map(|t| t.size_out).sum()
    }
}

fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

fn model_info(md: &Metadata, path: &Path) -> Result<ModelInfo> {
    let bad = |reason: String| Error::BadModel { path: path.to_path_buf(), reason };
    let arch = md.get_str("general.architecture").ok_or_else(|| bad("no general.architecture key".into()))?.to_string();
    let key = |k: &str| format!("{arch}.{k}");
    let first = |k: &str| -> Option<u64> {
        match md.get(&key(k))? {
            Value::Array(a) => a.get(0).and_then(|v| v.as_u64()),
            v => v.as_u64(),
        }
    };
    let n_layer = md.get_u64(&key("block_count")).ok_or_else(|| bad(format!("no {} key", key("block_count"))))?;
    let n_layer =
        u32::try_from(n_layer).map_err(|_| bad(format!("{} = {n_layer} is too large", key("block_count"))))?;
    let n_expert = md.get_u64(&key("expert_count")).unwrap_or(0).min(u32::MAX as u64) as u32;
    let n_head = first("attention.head_count").unwrap_or(0);
    let n_head_kv = first("attention.head_count_kv").unwrap_or(n_head);
    let n_gqa = n_head.checked_div(n_head_kv).unwrap_or(0) as u32;
    let is_70b = match arch.as_str() {
        "llama" => n_layer == 80 && n_head != n_head_kv,
        "qwen2" | "deci" | "olmo" => n_layer == 80,
        "jais2" => n_layer == 68,
        _ => false,
    };
    Ok(ModelInfo { arch, n_layer, n_expert, n_gqa, is_70b })
}

/// ggml's layer-first tensor order (`weight_name_comparer`): tensors outside `blk.N.`
/// first, then by layer, each group by name.
fn tensor_order(names: &[&str]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..names.len()).collect();
    idx.sort_by(|&a, &b| {
        let la = rules::parse_blk(names[a]).unwrap_or(-1);
        let lb = rules::parse_blk(names[b]).unwrap_or(-1);
        la.cmp(&lb).then_with(|| names[a].as_bytes().cmp(names[b].as_bytes()))
    });
    idx
}

/// `remap_layer`: the name after `--prune-layers`, `None` when its layer is pruned.
struct Pruner {
    prune: Vec<i64>,
    mapped: std::collections::BTreeMap<i64, Option<i64>>,
    next: i64,
    re: regex::Regex,
}

impl Pruner {
    fn remap(&mut self, name: &str) -> Option<String> {
        if self.prune.is_empty() {
            return Some(name.to_string());
        }
        let Some(c) = self.re.captures(name) else { return Some(name.to_string()) };
        let m = c.get(1).expect("group 1");
        let Ok(blk) = m.as_str().parse::<i64>() else { return Some(name.to_string()) };
        let to = *self.mapped.entry(blk).or_insert_with(|| {
            if self.prune.contains(&blk) {
                None
            } else if blk < self.prune[0] {
                self.next = blk + 1;
                Some(blk)
            } else {
                self.next += 1;
                Some(self.next - 1)
            }
        });
        to.map(|to| format!("{}{to}{}", &name[..m.start()], &name[m.end()..]))
    }
}

/// Decides every tensor's type and the output metadata, checking everything that can be
/// checked before a byte is written (unknown types, missing or mismatched imatrix
/// entries, requantizing without `--allow-requantize`).
pub fn plan(file: &SplitGguf, params: &Params) -> Result<Plan> {
    let recipe = params.recipe;
    let path = file.first().path();
    let default = recipe.default_traits()?;
    let patterns: Vec<(regex::Regex, u32)> = params
        .tensor_types
        .iter()
        .map(|(p, t)| {
            regex::Regex::new(p)
                .map(|r| (r, *t))
                .map_err(|e| Error::BadOption { option: "--tensor-type".into(), reason: format!("{p:?}: {e}") })
        })
        .collect::<Result<_>>()?;

    // Metadata as llama-quantize builds it: the input's keys, then the set/removed ones.
    let mut md = file.metadata().clone();
    let mut hp_md = md.clone();
    for o in &params.kv_overrides {
        o.apply(&mut hp_md);
    }
    let model = model_info(&hp_md, path)?;
    let ftype = if recipe.copy_only { input_ftype(file) } else { recipe.ftype };
    set_last(&mut md, "general.quantization_version", Value::U32(QNT_VERSION));
    set_last(&mut md, "general.file_type", Value::U32(ftype));
    for k in ["split.no", "split.count", "split.tensors.count"] {
        md.remove(k);
    }
    let mut overrides = params.kv_overrides.clone();
    if let Some(im) = params.imatrix.as_ref().filter(|im| !im.entries.is_empty()) {
        overrides.push(KvOverride::Str("quantize.imatrix.file".into(), truncate(&im.path.to_string_lossy(), 127)));
        if let Some(d) = im.datasets.first() {
            overrides.push(KvOverride::Str("quantize.imatrix.dataset".into(), truncate(d, 127)));
        }
        overrides.push(KvOverride::Int("quantize.imatrix.entries_count".into(), im.entries.len() as i64));
        if im.chunk_count > 0 {
            overrides.push(KvOverride::Int("quantize.imatrix.chunks_count".into(), im.chunk_count as i64));
        }
    }
    for o in &overrides {
        o.apply(&mut md);
    }
    let imatrix = params.imatrix.as_ref().filter(|im| !im.entries.is_empty());

    // Tensor list in ggml's order, renamed / pruned.
    let infos = file.tensors();
    let names: Vec<&str> = infos.iter().map(|t| t.name.as_str()).collect();
    let mut pruner = Pruner {
        prune: params.prune_layers.clone(),
        mapped: Default::default(),
        next: 0,
        re: regex::Regex::new(r"blk\.(\d+)\.").expect("static regex"),
    };
    let mut list: Vec<(usize, String)> = Vec::new();
    for i in tensor_order(&names) {
        if let Some(n) = pruner.remap(&infos[i].name) {
            list.push((i, n));
        }
    }
    // --keep-split: llama-quantize sorts by (shard, offset in the shard).
    let shard_of = |i: usize| if params.keep_split { file.shard_of(&infos[i]).unwrap_or(0) } else { 0 };
    if params.keep_split {
        list.sort_by_key(|&(i, _)| (shard_of(i), infos[i].offset));
    }
    let n_split = if params.keep_split { file.shards().len() } else { 1 };
    if !params.prune_layers.is_empty() {
        set_last(&mut md, &format!("{}.block_count", model.arch), Value::U32(pruner.next as u32));
    }

    let cats: Vec<Category> = list.iter().map(|(_, n)| Category::of(n)).collect();
    let n_attention_wv = cats.iter().filter(|c| c.is_attn_v()).count() as u32;
    let tied = !cats.contains(&Category::Output);
    let mut seq = [0u32; 4];
    let group = |c: Category| match c {
        c if c.is_attn_v() => Some(0),
        Category::FfnDown => Some(1),
        Category::FfnGate => Some(2),
        Category::FfnUp => Some(3),
        _ => None,
    };

    let mut out = Vec::with_capacity(list.len());
    let mut n_fallback = 0;
    let mut needs_imatrix = false;
    let mut n_elements = 0u64;
    for ((src, name), cat) in list.into_iter().zip(cats) {
        let info = &infos[src];
        let from_t = info.require_type()?;
        let mut ne = [1u64; 4];
        for (d, &v) in ne.iter_mut().zip(&info.dims) {
            *d = v;
        }
        let mut dims = info.dims[..n_dims(&info.dims).min(info.dims.len())].to_vec();
        if dims.is_empty() {
            dims.push(1);
        }
        n_elements += info.n_elements;
        let allows = rules::allows_quantization(
            &name,
            n_dims(&info.dims),
            &model.arch,
            params.quantize_output_tensor,
            recipe.copy_only,
        );
        let (mut to, mut manual, mut fell_back) = (info.type_id, false, false);
        if allows {
            let named_per_layer =
                name == "per_layer_token_embd.weight" && patterns.iter().any(|(r, _)| r.is_match(&name));
            if let (Some(e), Category::TokenEmbd, false) = (params.token_embedding_type, cat, named_per_layer) {
                to = e;
            } else if let (Some(o), Category::Output) = (params.output_tensor_type, cat) {
                to = o;
            } else {
                to = default.id;
                if default.is_quantized {
                    if let Some((_, t)) = patterns.iter().find(|(r, _)| r.is_match(&name)) {
                        to = *t;
                        manual = true;
                    }
                    if !manual && !params.pure {
                        let ctx = TensorCtx {
                            name: &name,
                            category: cat,
                            ne,
                            model: &model,
                            has_imatrix: imatrix.is_some(),
                            has_tied_embeddings: tied,
                            output_tensor_type: params.output_tensor_type,
                            token_embedding_type: params.token_embedding_type,
                            seq: group(cat).map_or(0, |g| seq[g]),
                            n_attention_wv,
                        };
                        to = (recipe.rule)(recipe, &ctx, to)
                            .map_err(|reason| Error::Rule { recipe: recipe.name, reason })?;
                        if let Some(g) = group(cat) {
                            seq[g] += 1;
                        }
                    }
                    let (t, fb) =
                        rules::fallback(ne[0], to).map_err(|reason| Error::Convert { tensor: name.clone(), reason })?;
                    to = t;
                    fell_back = fb;
                    n_fallback += fb as usize;
                }
            }
        }
        let to_t = ggml_quants::by_id(to).ok_or_else(|| Error::Convert {
            tensor: name.clone(),
            reason: format!("type id {to} is not registered"),
        })?;
        let size_in = info.size.unwrap_or(0);
        let size_out = if to == info.type_id {
            size_in
        } else {
            let row = to_t.row_size(ne[0] as usize).map_err(|source| Error::Quant { tensor: name.clone(), source })?;
            row as u64 * (info.n_elements / ne[0].max(1))
        };
        let requires = rules::requires_imatrix(&name, to, ftype);
        if allows && requires && imatrix.is_none() {
            if params.dry_run {
                needs_imatrix = true;
            } else {
                return Err(Error::ImatrixRequired { tensor: name, type_name: to_t.name });
            }
        }
        let mut use_imatrix = false;
        if to != info.type_id && !params.dry_run {
            check_convertible(&name, from_t, to_t, params.allow_requantize)?;
            let entry = imatrix.and_then(|im| im.entries.get(&info.name));
            let usable = match entry {
                Some(e) if e.len() as u64 == ne[0] * ne[2] => true,
                Some(e) if !rules::is_token_embd(&name) => {
                    return Err(Error::ImatrixSize { tensor: name, expected: ne[0] * ne[2], found: e.len() as u64 })
                }
                _ => false,
            };
            if !usable && requires {
                return Err(Error::ImatrixRequired { tensor: name, type_name: to_t.name });
            }
            use_imatrix = usable;
        }
        out.push(TensorPlan {
            src,
            imatrix_name: info.name.clone(),
            name,
            dims,
            from: info.type_id,
            to,
            allows_quantization: allows,
            manual,
            fell_back,
            size_in,
            size_out,
            shard: shard_of(src),
            use_imatrix,
        });
    }
    Ok(Plan { metadata: md, tensors: out, model, n_fallback, n_elements, needs_imatrix, n_split })
}

fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The `llama_ftype` a tensor type stands for when a file's type is guessed from its most
/// common tensor type (llama.cpp's `llama_model_loader`; 0, all F32, for a type with none).
pub fn ftype_of_type(type_id: u32) -> u32 {
    match type_id {
        0 => 0,
        1 => 1,
        30 => 32,
        2 => 2,
        3 => 3,
        6 => 8,
        7 => 9,
        8 => 7,
        10 => 10,
        11 => 12,
        12 => 15,
        13 => 17,
        14 => 18,
        16 => 19,
        17 => 20,
        18 => 23,
        19 => 24,
        20 => 25,
        21 => 26,
        22 => 28,
        23 => 30,
        29 => 31,
        34 => 36,
        35 => 37,
        39 => 38,
        _ => 0,
    }
}

/// The input's own file type (for `COPY`): `general.file_type`, else guessed from the
/// most common tensor type as llama.cpp's loader does (`| LLAMA_FTYPE_GUESSED`).
fn input_ftype(file: &SplitGguf) -> u32 {
    if let Some(v) = file.metadata().get_u64("general.file_type") {
        return v as u32;
    }
    let mut counts = std::collections::BTreeMap::<u32, usize>::new();
    for t in file.tensors() {
        *counts.entry(t.type_id).or_default() += 1;
    }
    let top = counts.iter().max_by_key(|(id, n)| (**n, std::cmp::Reverse(**id))).map(|(id, _)| *id).unwrap_or(0);
    ftype_of_type(top) | 1024
}

fn check_convertible(
    name: &str,
    from: &'static TypeTraits,
    to: &'static TypeTraits,
    allow_requantize: bool,
) -> Result<()> {
    let convertible = from.is_quantized || matches!(from.id, 0 | 1 | 30);
    if !convertible {
        return Err(Error::Convert {
            tensor: name.into(),
            reason: format!("cannot dequantize/convert tensor type {}", from.name),
        });
    }
    if to.quantize_rows_fn.is_none() {
        return Err(Error::Convert {
            tensor: name.into(),
            reason: format!("ggml cannot quantize to type {}", to.name),
        });
    }
    if from.is_quantized && !allow_requantize {
        return Err(Error::Requantize { tensor: name.into(), type_name: from.name });
    }
    Ok(())
}

/// A progress event from [`write()`].
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// Tensor `index` of `count` starts.
    Start {
        /// 0-based position.
        index: usize,
        /// Tensors in all.
        count: usize,
        /// Its plan.
        tensor: &'a TensorPlan,
    },
    /// Rows done so far in the current tensor.
    Rows {
        /// Rows converted.
        done: u64,
        /// Rows in the tensor.
        total: u64,
    },
    /// The current tensor is written.
    Done {
        /// Its plan.
        tensor: &'a TensorPlan,
    },
}

/// Bytes of f32 kept per slab while converting one tensor (bounds peak memory).
const SLAB_F32_BYTES: usize = 64 << 20;
/// Bytes copied at a time for tensors kept as they are.
const COPY_CHUNK: u64 = 16 << 20;
/// Source bytes one worker reads (and turns into f32) at a time.
const READ_PIECE: usize = 1 << 20;
/// Output slabs the converting thread may finish ahead of the one being written.
const PIPELINE_DEPTH: usize = 2;

/// The shards' files, opened once, read with positioned reads, not through the map, so
/// the input never becomes resident (llama-quantize unmaps each weight after use to the
/// same end): peak memory is a few slabs, whatever the model size.
struct Inputs {
    files: Vec<(std::fs::File, std::path::PathBuf)>,
}

impl Inputs {
    fn open(file: &SplitGguf) -> Result<Inputs> {
        let files = file
            .shards()
            .iter()
            .map(|s| {
                let path = s.path().to_path_buf();
                std::fs::File::open(&path).map(|f| (f, path.clone())).map_err(|e| Error::io(&path, e))
            })
            .collect::<Result<_>>()?;
        Ok(Inputs { files })
    }

    /// Where `info`'s bytes lie.
    fn tensor<'a>(&'a self, file: &SplitGguf, info: &gguf_format::TensorInfo) -> Result<TensorReader<'a>> {
        let missing = || Error::Convert { tensor: info.name.clone(), reason: "not in any shard".into() };
        let (shard, local) = file.tensor_location(info).ok_or_else(missing)?;
        let (f, path) = &self.files[file.shard_of(info).ok_or_else(missing)?];
        // Validates the range against the shard (and the mmap) once.
        let len = shard.tensor_data(local)?.len() as u64;
        Ok(TensorReader { file: f, path, start: shard.data_offset() + local.offset, len })
    }
}

/// One tensor's bytes in its shard.
struct TensorReader<'a> {
    file: &'a std::fs::File,
    path: &'a Path,
    start: u64,
    len: u64,
}

impl TensorReader<'_> {
    /// Fills `buf` from `off` bytes into the tensor.
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let at = self.start + off;
        self.file.read_exact_at(buf, at).map_err(|e| {
            Error::io(self.path, io::Error::new(e.kind(), format!("reading {} bytes at {at}: {e}", buf.len())))
        })
    }
}

/// The files [`write()`] produces for `out`: `out` itself, or with `--keep-split` on a
/// split input `PREFIX-0000i-of-0000n.gguf` (`PREFIX` = `out` without `.gguf`).
pub fn output_paths(plan: &Plan, params: &Params, out: &Path) -> Vec<std::path::PathBuf> {
    if !params.keep_split {
        return vec![out.to_path_buf()];
    }
    let s = out.to_string_lossy();
    let prefix = s.strip_suffix(".gguf").unwrap_or(&s);
    (0..plan.n_split).map(|i| split_path(prefix, i as u32, plan.n_split as u32).into()).collect()
}

/// Writes the planned file(s) to `out` (see [`output_paths`]), each atomically (a
/// temporary file renamed at the end); on any error, or when `cancel` is set, nothing is
/// left behind — shards already written are removed.
///
/// One thread (with `nthread - 1` helpers) reads, converts and quantizes slab after slab
/// while this one writes the finished slabs, so reading, computing and writing overlap.
pub fn write(
    file: &SplitGguf,
    plan: &Plan,
    params: &Params,
    out: &Path,
    cancel: &AtomicBool,
    progress: &(dyn Fn(Progress<'_>) + Sync),
) -> Result<()> {
    let paths = output_paths(plan, params, out);
    let inputs = Inputs::open(file)?;
    for (i, p) in paths.iter().enumerate() {
        if let Err(e) = write_shard(file, &inputs, plan, params, i, p, cancel, progress) {
            for done in &paths[..i] {
                let _ = std::fs::remove_file(done);
            }
            return Err(e);
        }
    }
    Ok(())
}

/// What the converting thread hands the writer: the next bytes of the current tensor
/// (never spanning two tensors), or why it stopped.
type Slab = Result<Vec<u8>>;

#[allow(clippy::too_many_arguments)]
fn write_shard(
    file: &SplitGguf,
    inputs: &Inputs,
    plan: &Plan,
    params: &Params,
    shard: usize,
    out: &Path,
    cancel: &AtomicBool,
    progress: &(dyn Fn(Progress<'_>) + Sync),
) -> Result<()> {
    let nthread = match params.nthread {
        0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        n => n,
    }
    .clamp(1, 512);
    let count = plan.tensors.len();
    let mine: Vec<(usize, &TensorPlan)> = plan.tensors.iter().enumerate().filter(|(_, t)| t.shard == shard).collect();
    // Every range checked before a thread starts.
    let readers =
        mine.iter().map(|(_, tp)| inputs.tensor(file, &file.tensors()[tp.src])).collect::<Result<Vec<_>>>()?;
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let (tx, rx) = mpsc::sync_channel::<Slab>(PIPELINE_DEPTH);
    let (spare_tx, spare_rx) = mpsc::channel::<Vec<u8>>();

    std::thread::scope(|s| {
        let mut producer = Producer {
            params,
            nthread,
            cancel,
            progress,
            tx,
            spare: spare_rx,
            f32_buf: Vec::new(),
            scratch: (0..nthread).map(|_| Mutex::new(Vec::new())).collect(),
        };
        let mine = &mine;
        s.spawn(move || producer.run(file, mine, &readers, count));
        // The writer owns the receiving end: when it returns, early or not, the
        // converting thread's next send fails and it stops.
        let r = write_file(plan, shard, mine, out, cancel, rx, spare_tx, &failure);
        let recorded = failure.lock().unwrap_or_else(|p| p.into_inner()).take();
        match recorded {
            Some(e) => Err(e),
            None => r,
        }
    })
}

/// The writing side of [`write_shard`]: the shard's header, then each tensor's bytes as
/// they arrive on `rx` (a failure sent instead is recorded in `failure`).
#[allow(clippy::too_many_arguments)]
fn write_file(
    plan: &Plan,
    shard: usize,
    mine: &[(usize, &TensorPlan)],
    out: &Path,
    cancel: &AtomicBool,
    rx: mpsc::Receiver<Slab>,
    spare: mpsc::Sender<Vec<u8>>,
    failure: &Mutex<Option<Error>>,
) -> Result<()> {
    let fail = |e: Error| {
        let msg = e.to_string();
        *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
        io::Error::other(msg)
    };
    let mut w = GgufWriter::new();
    // llama-quantize gives only the first shard the model's keys; the others start empty.
    if shard == 0 {
        *w.metadata_mut() = plan.metadata.clone();
    }
    if plan.n_split > 1 {
        let md = w.metadata_mut();
        set_last(md, "split.no", Value::U16(shard as u16));
        set_last(md, "split.count", Value::U16(plan.n_split as u16));
        set_last(md, "split.tensors.count", Value::I32(plan.tensors.len() as i32));
    }
    for &(_, tp) in mine {
        let (rx, spare, fail) = (&rx, &spare, &fail);
        let stream = move |sink: &mut dyn Write| -> io::Result<()> {
            let mut got = 0u64;
            while got < tp.size_out {
                if cancel.load(Ordering::Relaxed) {
                    return Err(fail(Error::Interrupted));
                }
                match rx.recv() {
                    Ok(Ok(buf)) => {
                        sink.write_all(&buf)?;
                        got += buf.len() as u64;
                        let _ = spare.send(buf);
                    }
                    Ok(Err(e)) => return Err(fail(e)),
                    Err(_) => return Err(io::Error::other("the converting thread stopped")),
                }
            }
            Ok(())
        };
        w.add_tensor_source(&tp.name, &tp.dims, tp.to, tp.size_out, TensorSource::Stream(Box::new(stream)))?;
    }
    w.write_to_path(out)?;
    Ok(())
}

/// Why the converting thread stopped early.
enum Stop {
    /// The writer is gone (it failed or returned); nothing to report.
    Hangup,
    /// A failure to hand to the writer.
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

/// The converting side of [`write_shard`]: reads, converts and quantizes the shard's
/// tensors in order and sends their bytes to the writer.
struct Producer<'a> {
    params: &'a Params,
    nthread: usize,
    cancel: &'a AtomicBool,
    progress: &'a (dyn Fn(Progress<'_>) + Sync),
    tx: mpsc::SyncSender<Slab>,
    /// Buffers the writer is done with, reused so each page is faulted in once.
    spare: mpsc::Receiver<Vec<u8>>,
    /// The f32 slab, kept across tensors.
    f32_buf: Vec<f32>,
    /// One read buffer per worker.
    scratch: Vec<Mutex<Vec<u8>>>,
}

/// A buffer of `n` bytes whose contents will all be overwritten: a returned one when
/// there is one (not zeroed again where it is long enough).
fn buffer(spare: &mpsc::Receiver<Vec<u8>>, n: usize) -> Vec<u8> {
    let mut b = spare.try_recv().unwrap_or_default();
    if b.len() >= n {
        b.truncate(n);
    } else {
        b.resize(n, 0);
    }
    b
}

fn send(tx: &mpsc::SyncSender<Slab>, buf: Vec<u8>) -> std::result::Result<(), Stop> {
    tx.send(Ok(buf)).map_err(|_| Stop::Hangup)
}

impl Producer<'_> {
    fn run(&mut self, file: &SplitGguf, mine: &[(usize, &TensorPlan)], readers: &[TensorReader<'_>], count: usize) {
        for (&(index, tp), data) in mine.iter().zip(readers) {
            match self.tensor(file, index, count, tp, data) {
                Ok(()) => {}
                Err(Stop::Hangup) => return,
                Err(Stop::Failed(e)) => {
                    let _ = self.tx.send(Err(e));
                    return;
                }
            }
        }
    }

    fn tensor(
        &mut self,
        file: &SplitGguf,
        index: usize,
        count: usize,
        tp: &TensorPlan,
        data: &TensorReader<'_>,
    ) -> std::result::Result<(), Stop> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(Error::Interrupted.into());
        }
        (self.progress)(Progress::Start { index, count, tensor: tp });
        if tp.from == tp.to {
            let mut off = 0u64;
            while off < data.len {
                let n = (data.len - off).min(COPY_CHUNK);
                let mut buf = buffer(&self.spare, n as usize);
                data.read(off, &mut buf)?;
                send(&self.tx, buf)?;
                off += n;
            }
        } else {
            let info = &file.tensors()[tp.src];
            let imatrix = self
                .params
                .imatrix
                .as_ref()
                .filter(|_| tp.use_imatrix)
                .and_then(|im| im.entries.get(&tp.imatrix_name))
                .map(|v| v.as_slice());
            self.convert(tp, info, data, imatrix)?;
        }
        (self.progress)(Progress::Done { tensor: tp });
        Ok(())
    }

    /// Reads and converts `data` to f32 slab by slab and quantizes each slab in
    /// llama.cpp's row chunks (chunks never cross an expert; each expert has its own
    /// imatrix slice), on `nthread` workers.
    fn convert(
        &mut self,
        tp: &TensorPlan,
        info: &gguf_format::TensorInfo,
        data: &TensorReader<'_>,
        imatrix: Option<&[f32]>,
    ) -> std::result::Result<(), Stop> {
        let qerr = |source| Error::Quant { tensor: tp.name.clone(), source };
        let from = ggml_quants::by_id(tp.from).expect("planned type");
        let to = ggml_quants::by_id(tp.to).expect("planned type");
        let n_per_row = (info.dims.first().copied().unwrap_or(1) as usize).max(1);
        let rows_per_expert = info.dims.get(1).copied().unwrap_or(1) as usize;
        let rows_total = (info.n_elements as usize) / n_per_row;
        let row_in = from.row_size(n_per_row).map_err(qerr)?;
        let row_out = to.row_size(n_per_row).map_err(qerr)?;
        let slab_rows = (SLAB_F32_BYTES / (n_per_row * 4 + row_out).max(1)).clamp(1, rows_total.max(1));
        const MIN_CHUNK: usize = 32 * 512;
        let chunk_rows = if n_per_row >= MIN_CHUNK { 1 } else { MIN_CHUNK.div_ceil(n_per_row) };
        let piece_rows = (READ_PIECE / row_in.max(1)).max(1);
        let need = slab_rows * n_per_row;
        if self.f32_buf.len() < need {
            self.f32_buf.resize(need, 0.0);
        }
        let cancel = self.cancel;
        let mut r0 = 0;
        while r0 < rows_total {
            if cancel.load(Ordering::Relaxed) {
                return Err(Error::Interrupted.into());
            }
            let nrows = slab_rows.min(rows_total - r0);
            let f = &mut self.f32_buf[..nrows * n_per_row];

            // Read and decode in pieces of whole rows, each worker with its own buffer.
            let scratch = &self.scratch;
            let pieces: Vec<(usize, &mut [f32])> =
                f.chunks_mut(piece_rows * n_per_row).enumerate().map(|(i, c)| (i * piece_rows, c)).collect();
            run_queue(self.nthread, pieces, |w, (r, dst): (usize, &mut [f32])| -> Result<()> {
                let mut raw = scratch[w].lock().unwrap_or_else(|p| p.into_inner());
                let n = dst.len() / n_per_row * row_in;
                if raw.len() < n {
                    raw.resize(n, 0);
                }
                let raw = &mut raw[..n];
                data.read(((r0 + r) * row_in) as u64, raw)?;
                if from.id == 0 {
                    for (o, c) in dst.iter_mut().zip(raw.chunks_exact(4)) {
                        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    }
                } else {
                    from.dequantize(raw, dst).map_err(qerr)?;
                }
                if !all_finite(dst) {
                    let i = dst.iter().position(|v| !v.is_finite()).expect("a non-finite value");
                    return Err(Error::Convert {
                        tensor: tp.name.clone(),
                        reason: format!("non-finite value {} at element {}", dst[i], (r0 + r) * n_per_row + i),
                    });
                }
                Ok(())
            })?;

            // Work items: (first row within the slab, rows), split at chunks and experts.
            let mut out = buffer(&self.spare, nrows * row_out);
            let f: &[f32] = &self.f32_buf[..nrows * n_per_row];
            let mut items: Vec<(usize, usize, &mut [u8])> = Vec::new();
            let mut rest = &mut out[..];
            let mut r = 0;
            while r < nrows {
                let g = r0 + r;
                let n = (nrows - r).min(chunk_rows).min(rows_per_expert - g % rows_per_expert);
                let (a, b) = rest.split_at_mut(n * row_out);
                items.push((r, n, a));
                rest = b;
                r += n;
            }
            run_queue(self.nthread, items, |_, (r, n, d): (usize, usize, &mut [u8])| -> Result<()> {
                if cancel.load(Ordering::Relaxed) {
                    return Err(Error::Interrupted);
                }
                let im = imatrix.map(|im| {
                    let e = (r0 + r) / rows_per_expert;
                    &im[e * n_per_row..(e + 1) * n_per_row]
                });
                to.quantize_rows(&f[r * n_per_row..(r + n) * n_per_row], d, n_per_row, im).map(|_| ()).map_err(qerr)
            })?;
            send(&self.tx, out)?;
            r0 += nrows;
            (self.progress)(Progress::Rows { done: r0 as u64, total: rows_total as u64 });
        }
        Ok(())
    }
}

/// No NaN or infinity in `x` (a pass the compiler vectorizes).
fn all_finite(x: &[f32]) -> bool {
    x.chunks(64).all(|c| c.iter().fold(true, |ok, v| ok & v.is_finite()))
}

/// Runs `f(worker, item)` over `items` on up to `workers` threads (this one included),
/// items taken in order. After a failure no new item is started, and the failure of the
/// earliest failed item is returned — the one a sequential run would have reported,
/// since every earlier item was taken, and is finished, before it.
fn run_queue<T: Send, E: Send>(
    workers: usize,
    items: Vec<T>,
    f: impl Fn(usize, T) -> std::result::Result<(), E> + Sync,
) -> std::result::Result<(), E> {
    let workers = workers.min(items.len()).clamp(1, 512);
    let queue = Mutex::new(items.into_iter().enumerate());
    let failed = AtomicBool::new(false);
    let first: Mutex<Option<(usize, E)>> = Mutex::new(None);
    let work = |w: usize| loop {
        if failed.load(Ordering::Relaxed) {
            break;
        }
        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
        let Some((i, item)) = next else { break };
        if let Err(e) = f(w, item) {
            failed.store(true, Ordering::Relaxed);
            let mut g = first.lock().unwrap_or_else(|p| p.into_inner());
            if g.as_ref().is_none_or(|(j, _)| i < *j) {
                *g = Some((i, e));
            }
        }
    };
    let work = &work;
    // a thread the OS refuses leaves fewer workers, never a panic
    std::thread::scope(|s| {
        for w in 1..workers {
            if std::thread::Builder::new().spawn_scoped(s, move || work(w)).is_err() {
                break;
            }
        }
        work(0);
    });
    match first.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// `llama_split_path`: `PREFIX-00001-of-00003.gguf` (split numbers from 0).
pub fn split_path(prefix: &str, split_no: u32, split_count: u32) -> String {
    format!("{prefix}-{:05}-of-{split_count:05}.gguf", split_no + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn run_queue_reports_the_earliest_failure_and_runs_everything_before_it() {
        for workers in [1, 2, 3, 8] {
            let done: Vec<AtomicUsize> = (0..300).map(|_| AtomicUsize::new(0)).collect();
            let r = run_queue(workers, (0..300).collect(), |_, i: usize| {
                done[i].fetch_add(1, Ordering::Relaxed);
                if i >= 40 && i % 37 == 5 {
                    Err(i)
                } else {
                    Ok(())
                }
            });
            assert_eq!(r, Err(42), "{workers} workers");
            assert!(done[..=42].iter().all(|d| d.load(Ordering::Relaxed) == 1), "{workers} workers");
            assert!(done.iter().all(|d| d.load(Ordering::Relaxed) <= 1));
        }
        let sum = AtomicUsize::new(0);
        let r: std::result::Result<(), ()> = run_queue(4, (1..=100).collect(), |_, i: usize| {
            sum.fetch_add(i, Ordering::Relaxed);
            Ok(())
        });
        assert_eq!((r, sum.into_inner()), (Ok(()), 5050));
    }

    #[test]
    fn all_finite_finds_any_nan_or_infinity() {
        let mut x = vec![1.5f32; 1000];
        assert!(all_finite(&x));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for at in [0, 63, 64, 999] {
                x[at] = bad;
                assert!(!all_finite(&x), "{bad} at {at}");
                x[at] = 1.5;
            }
        }
    }
}
