//! The model oracle: llama.cpp's `libllama.so`, loaded at run time with `libloading`
//! (the same pattern as [`crate::ggml`] for libggml-base).
//!
//! What `verify logits` needs and no more: load a model, tokenize the way
//! `llama-completion` does, decode a batch with logits at every position, and greedy
//! generation (argmax, stop at end-of-generation tokens).
//!
//! The by-value structs `llama_model_params`, `llama_context_params` and `llama_batch` are
//! declared below field for field from `include/llama.h`; [`Llama::load`] checks that the
//! header of the source tree declares exactly these fields in this order, and the sizes
//! are asserted at compile time (x86-64 / aarch64 layout). Every value is taken from
//! llama.cpp's own `llama_*_default_params()`; only named fields are changed.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context as _, Result};
use libloading::Library;

use crate::llama_cpp;

/// `llama_token`.
pub type Token = i32;

/// `struct llama_model_params` (`include/llama.h`), also passed by the tokenizer oracle
/// ([`crate::llama_vocab`]).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ModelParams {
    devices: *mut c_void,
    tensor_buft_overrides: *const c_void,
    n_gpu_layers: i32,
    split_mode: c_int,
    load_mode: c_int,
    lazy_mode: c_int,
    main_gpu: i32,
    tensor_split: *const f32,
    progress_callback: *const c_void,
    progress_callback_user_data: *mut c_void,
    kv_overrides: *const c_void,
    pub(crate) vocab_only: bool,
    check_tensors: bool,
    use_extra_bufts: bool,
    no_host: bool,
    no_alloc: bool,
    load_mtp: bool,
}

const MODEL_PARAMS_FIELDS: &[&str] = &[
    "devices",
    "tensor_buft_overrides",
    "n_gpu_layers",
    "split_mode",
    "load_mode",
    "lazy_mode",
    "main_gpu",
    "tensor_split",
    "progress_callback",
    "progress_callback_user_data",
    "kv_overrides",
    "vocab_only",
    "check_tensors",
    "use_extra_bufts",
    "no_host",
    "no_alloc",
    "load_mtp",
];

/// `struct llama_context_params` (`include/llama.h`).
#[repr(C)]
#[derive(Clone, Copy)]
struct ContextParams {
    n_ctx: u32,
    n_batch: u32,
    n_ubatch: u32,
    n_seq_max: u32,
    n_rs_seq: u32,
    n_outputs_max: u32,
    n_outputs_max_per_seq: u32,
    n_threads: i32,
    n_threads_batch: i32,
    ctx_type: c_int,
    rope_scaling_type: c_int,
    pooling_type: c_int,
    attention_type: c_int,
    flash_attn_type: c_int,
    rope_freq_base: f32,
    rope_freq_scale: f32,
    yarn_ext_factor: f32,
    yarn_attn_factor: f32,
    yarn_beta_fast: f32,
    yarn_beta_slow: f32,
    yarn_orig_ctx: u32,
    defrag_thold: f32,
    cb_eval: *const c_void,
    cb_eval_user_data: *mut c_void,
    type_k: c_int,
    type_v: c_int,
    abort_callback: *const c_void,
    abort_callback_data: *mut c_void,
    embeddings: bool,
    offload_kqv: bool,
    no_perf: bool,
    op_offload: bool,
    swa_full: bool,
    kv_unified: bool,
    samplers: *mut c_void,
    n_samplers: usize,
    ctx_other: *mut c_void,
}

const CONTEXT_PARAMS_FIELDS: &[&str] = &[
    "n_ctx",
    "n_batch",
    "n_ubatch",
    "n_seq_max",
    "n_rs_seq",
    "n_outputs_max",
    "n_outputs_max_per_seq",
    "n_threads",
    "n_threads_batch",
    "ctx_type",
    "rope_scaling_type",
    "pooling_type",
    "attention_type",
    "flash_attn_type",
    "rope_freq_base",
    "rope_freq_scale",
    "yarn_ext_factor",
    "yarn_attn_factor",
    "yarn_beta_fast",
    "yarn_beta_slow",
    "yarn_orig_ctx",
    "defrag_thold",
    "cb_eval",
    "cb_eval_user_data",
    "type_k",
    "type_v",
    "abort_callback",
    "abort_callback_data",
    "embeddings",
    "offload_kqv",
    "no_perf",
    "op_offload",
    "swa_full",
    "kv_unified",
    "samplers",
    "n_samplers",
    "ctx_other",
];

/// `struct llama_batch` (`include/llama.h`).
#[repr(C)]
#[derive(Clone, Copy)]
struct Batch {
    n_tokens: i32,
    token: *mut Token,
    embd: *mut f32,
    pos: *mut i32,
    n_seq_id: *mut i32,
    seq_id: *mut *mut i32,
    logits: *mut i8,
}

const BATCH_FIELDS: &[&str] = &["n_tokens", "token", "embd", "pos", "n_seq_id", "seq_id", "logits"];

// Sizes measured with the C compiler against this llama.h (LP64).
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::size_of::<ModelParams>() == 80);
    assert!(std::mem::size_of::<ContextParams>() == 160);
    assert!(std::mem::size_of::<Batch>() == 56);
};

type LogCallback = unsafe extern "C" fn(level: c_int, text: *const c_char, user: *mut c_void);

macro_rules! llama_fns {
    ($($name:ident : $ty:ty;)*) => {
        /// The `llama_*` entry points used here (`include/llama.h`).
        #[allow(non_snake_case)]
        struct Fns { $($name: $ty,)* }

        impl Fns {
            /// # Safety
            /// `lib` must be libllama of the llama.cpp whose `llama.h` declares these
            /// functions with these signatures.
            unsafe fn load(lib: &Library) -> Result<Self> {
                Ok(Self { $($name: {
                    // SAFETY: the signature matches llama.h (see the caller's contract).
                    let sym: libloading::Symbol<$ty> = unsafe { lib.get(concat!(stringify!($name), "\0").as_bytes()) }
                        .with_context(|| concat!("libllama.so lacks ", stringify!($name)))?;
                    *sym
                },)* })
            }
        }
    };
}

llama_fns! {
    llama_backend_init: unsafe extern "C" fn();
    llama_log_set: unsafe extern "C" fn(Option<LogCallback>, *mut c_void);
    llama_model_default_params: unsafe extern "C" fn() -> ModelParams;
    llama_context_default_params: unsafe extern "C" fn() -> ContextParams;
    llama_model_load_from_file: unsafe extern "C" fn(*const c_char, ModelParams) -> *mut c_void;
    llama_model_free: unsafe extern "C" fn(*mut c_void);
    llama_init_from_model: unsafe extern "C" fn(*mut c_void, ContextParams) -> *mut c_void;
    llama_free: unsafe extern "C" fn(*mut c_void);
    llama_n_ctx: unsafe extern "C" fn(*const c_void) -> u32;
    llama_model_get_vocab: unsafe extern "C" fn(*const c_void) -> *const c_void;
    llama_vocab_n_tokens: unsafe extern "C" fn(*const c_void) -> i32;
    llama_vocab_is_eog: unsafe extern "C" fn(*const c_void, Token) -> bool;
    llama_vocab_bos: unsafe extern "C" fn(*const c_void) -> Token;
    llama_tokenize: unsafe extern "C" fn(*const c_void, *const c_char, i32, *mut Token, i32, bool, bool) -> i32;
    llama_get_memory: unsafe extern "C" fn(*const c_void) -> *mut c_void;
    llama_memory_clear: unsafe extern "C" fn(*mut c_void, bool);
    llama_batch_init: unsafe extern "C" fn(i32, i32, i32) -> Batch;
    llama_batch_free: unsafe extern "C" fn(Batch);
    llama_decode: unsafe extern "C" fn(*mut c_void, Batch) -> i32;
    llama_get_logits_ith: unsafe extern "C" fn(*mut c_void, i32) -> *mut f32;
    llama_get_embeddings_ith: unsafe extern "C" fn(*mut c_void, i32) -> *mut f32;
    llama_get_embeddings_seq: unsafe extern "C" fn(*mut c_void, i32) -> *mut f32;
    llama_pooling_type: unsafe extern "C" fn(*const c_void) -> c_int;
    llama_detokenize: unsafe extern "C" fn(*const c_void, *const Token, i32, *mut c_char, i32, bool, bool) -> i32;
    llama_sampler_chain_default_params: unsafe extern "C" fn() -> SamplerChainParams;
    llama_sampler_chain_init: unsafe extern "C" fn(SamplerChainParams) -> *mut c_void;
    llama_sampler_chain_add: unsafe extern "C" fn(*mut c_void, *mut c_void);
    llama_sampler_apply: unsafe extern "C" fn(*mut c_void, *mut TokenDataArray);
    llama_sampler_accept: unsafe extern "C" fn(*mut c_void, Token);
    llama_sampler_free: unsafe extern "C" fn(*mut c_void);
    llama_sampler_init_logit_bias: unsafe extern "C" fn(i32, i32, *const LogitBias) -> *mut c_void;
    llama_sampler_init_penalties: unsafe extern "C" fn(i32, i32, f32, f32, f32) -> *mut c_void;
    llama_sampler_init_dry: unsafe extern "C" fn(*const c_void, f32, f32, i32, i32, *const *const c_char, usize) -> *mut c_void;
    llama_sampler_init_top_n_sigma: unsafe extern "C" fn(f32) -> *mut c_void;
    llama_sampler_init_top_k: unsafe extern "C" fn(i32) -> *mut c_void;
    llama_sampler_init_typical: unsafe extern "C" fn(f32, usize) -> *mut c_void;
    llama_sampler_init_top_p: unsafe extern "C" fn(f32, usize) -> *mut c_void;
    llama_sampler_init_min_p: unsafe extern "C" fn(f32, usize) -> *mut c_void;
    llama_sampler_init_xtc: unsafe extern "C" fn(f32, f32, usize, u32) -> *mut c_void;
    llama_sampler_init_temp: unsafe extern "C" fn(f32) -> *mut c_void;
    llama_sampler_init_temp_ext: unsafe extern "C" fn(f32, f32, f32) -> *mut c_void;
    llama_sampler_init_mirostat: unsafe extern "C" fn(i32, u32, f32, f32, i32) -> *mut c_void;
    llama_sampler_init_mirostat_v2: unsafe extern "C" fn(u32, f32, f32) -> *mut c_void;
    llama_sampler_init_adaptive_p: unsafe extern "C" fn(f32, f32, u32) -> *mut c_void;
    llama_sampler_init_dist: unsafe extern "C" fn(u32) -> *mut c_void;
}

/// `llama_token_data` (`include/llama.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenData {
    /// Token id.
    pub id: Token,
    /// Logit.
    pub logit: f32,
    /// Probability.
    pub p: f32,
}

const TOKEN_DATA_FIELDS: &[&str] = &["id", "logit", "p"];

/// `llama_token_data_array`.
#[repr(C)]
pub struct TokenDataArray {
    data: *mut TokenData,
    size: usize,
    selected: i64,
    sorted: bool,
}

const TOKEN_DATA_ARRAY_FIELDS: &[&str] = &["data", "size", "selected", "sorted"];

/// `llama_sampler_chain_params`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SamplerChainParams {
    no_perf: bool,
}

const SAMPLER_CHAIN_PARAMS_FIELDS: &[&str] = &["no_perf"];

/// `llama_logit_bias`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LogitBias {
    token: Token,
    bias: f32,
}

const LOGIT_BIAS_FIELDS: &[&str] = &["token", "bias"];

#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::size_of::<TokenData>() == 12);
    assert!(std::mem::size_of::<TokenDataArray>() == 32);
    assert!(std::mem::size_of::<LogitBias>() == 8);
};

/// `ggml_backend_sched_eval_callback`.
type EvalCallback = unsafe extern "C" fn(t: *mut c_void, ask: bool, user: *mut c_void) -> bool;

/// One intermediate tensor captured during a decode (see [`Model::dump_context`]).
#[derive(Debug, Clone)]
pub struct Dumped {
    /// ggml name, e.g. `Qcur-0`, `kqv_out-3`, `l_out-11`, `result_norm`.
    pub name: String,
    /// ggml shape (`ne[0]` fastest).
    pub ne: [i64; 4],
    /// The values, converted to f32, in `ne` order.
    pub data: Vec<f32>,
}

struct DumpState {
    filter: Box<dyn Fn(&str) -> bool>,
    get_name: unsafe extern "C" fn(*const c_void) -> *const c_char,
    get_data: unsafe extern "C" fn(*const c_void) -> *mut c_void,
    out: Vec<Dumped>,
}

/// Reads `ne` and `nb` of a `struct ggml_tensor`: `type` (enum, 4 bytes + 4 padding),
/// `buffer` (pointer), then `int64_t ne[4]` at offset 16 and `size_t nb[4]` at 48 (ggml.h;
/// checked against the header in [`Llama::load`]).
///
/// # Safety
/// `t` must point to a live `ggml_tensor`.
unsafe fn tensor_layout(t: *const c_void) -> (i32, [i64; 4], [usize; 4]) {
    // SAFETY: offsets of the leading fields of struct ggml_tensor (see above).
    unsafe {
        let ty = *(t as *const i32);
        let ne = *((t as *const u8).add(16) as *const [i64; 4]);
        let nb = *((t as *const u8).add(48) as *const [usize; 4]);
        (ty, ne, nb)
    }
}

unsafe extern "C" fn dump_callback(t: *mut c_void, ask: bool, user: *mut c_void) -> bool {
    // SAFETY: `user` is the DumpState boxed in the Context that registered this callback,
    // `t` a live tensor of the graph being computed (ggml's contract for cb_eval).
    let st = unsafe { &mut *(user as *mut DumpState) };
    let name = unsafe {
        let p = (st.get_name)(t);
        if p.is_null() {
            return !ask;
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    if ask {
        return (st.filter)(&name);
    }
    // SAFETY: as above; CPU tensors live in host memory, read with their own strides.
    unsafe {
        let (ty, ne, nb) = tensor_layout(t);
        let data = (st.get_data)(t) as *const u8;
        if data.is_null() || !(ty == 0 || ty == 1) || ne.iter().any(|&n| n <= 0) {
            return true;
        }
        let mut v = Vec::with_capacity(ne.iter().product::<i64>() as usize);
        for i3 in 0..ne[3] as usize {
            for i2 in 0..ne[2] as usize {
                for i1 in 0..ne[1] as usize {
                    for i0 in 0..ne[0] as usize {
                        let p = data.add(i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3]);
                        v.push(if ty == 0 {
                            (p as *const f32).read_unaligned()
                        } else {
                            half_to_f32((p as *const u16).read_unaligned())
                        });
                    }
                }
            }
        }
        st.out.push(Dumped { name, ne, data: v });
    }
    true
}

/// IEEE half → f32 (exact).
fn half_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // subnormal: m * 2^-24
            let v = m as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// Swallows llama.cpp's log output (set `XTASK_LLAMA_LOG=1` to keep it).
unsafe extern "C" fn quiet_log(_level: c_int, _text: *const c_char, _user: *mut c_void) {}

/// `<cache>/llama.cpp-build/bin/libllama.so`, or `libllama.so` in the folder
/// [`llama_cpp::BUILD_DIR_ENV`] names (a build of the same source with other flags, such as
/// an AVX2-only one to compare the engine's AVX2 kernels against).
pub fn libllama(cache: &Path) -> PathBuf {
    llama_cpp::loaded_build_dir(cache).join("bin").join("libllama.so")
}

/// The field names of `struct <name> { ... };` in a C header, in order.
fn header_struct_fields(header: &str, open: &str) -> Option<Vec<String>> {
    let start = header.find(open)? + open.len();
    let body = &header[start..];
    // The bodies have no nested braces: the first `}` closes them (`};` or `} name;`).
    let body = &body[..body.find('}')?];
    let mut fields = Vec::new();
    for line in body.lines() {
        let code = line.split("//").next().unwrap_or("").trim();
        let Some(decl) = code.strip_suffix(';') else { continue };
        let decl = decl.split('[').next().unwrap_or(decl).trim_end();
        let name: String =
            decl.rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or("").to_string();
        if !name.is_empty() {
            fields.push(name);
        }
    }
    Some(fields)
}

fn check_ggml_tensor_header(src: &Path) -> Result<()> {
    let path = src.join("ggml").join("include").join("ggml.h");
    let header = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let fields = header_struct_fields(&header, "struct ggml_tensor {")
        .with_context(|| format!("{} declares no struct ggml_tensor", path.display()))?;
    ensure!(
        fields.len() > 3 && fields[..4] == ["type", "buffer", "ne", "nb"],
        "{}: struct ggml_tensor starts with {:?}, the dump code expects type, buffer, ne, nb",
        path.display(),
        &fields[..fields.len().min(4)]
    );
    Ok(())
}

/// Checks [`ModelParams`] against `include/llama.h` of the source tree `src`.
pub(crate) fn check_model_params_layout(src: &Path) -> Result<()> {
    let path = src.join("include").join("llama.h");
    let header = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let open = "struct llama_model_params {";
    let theirs =
        header_struct_fields(&header, open).with_context(|| format!("{} declares no `{open}`", path.display()))?;
    ensure!(
        theirs.iter().map(String::as_str).eq(MODEL_PARAMS_FIELDS.iter().copied()),
        "{}: `{open}` has fields {theirs:?}, xtask's FFI declares {MODEL_PARAMS_FIELDS:?}: update xtask/src/llama.rs",
        path.display()
    );
    Ok(())
}

fn check_header(src: &Path) -> Result<()> {
    check_ggml_tensor_header(src)?;
    let path = src.join("include").join("llama.h");
    let header = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    for (open, ours) in [
        ("struct llama_model_params {", MODEL_PARAMS_FIELDS),
        ("struct llama_context_params {", CONTEXT_PARAMS_FIELDS),
        ("typedef struct llama_batch {", BATCH_FIELDS),
        ("typedef struct llama_token_data {", TOKEN_DATA_FIELDS),
        ("typedef struct llama_token_data_array {", TOKEN_DATA_ARRAY_FIELDS),
        ("typedef struct llama_sampler_chain_params {", SAMPLER_CHAIN_PARAMS_FIELDS),
        ("typedef struct llama_logit_bias {", LOGIT_BIAS_FIELDS),
    ] {
        let theirs =
            header_struct_fields(&header, open).with_context(|| format!("{} declares no `{open}`", path.display()))?;
        ensure!(
            theirs.iter().map(String::as_str).eq(ours.iter().copied()),
            "{}: `{open}` has fields {theirs:?}, xtask's FFI declares {ours:?}: update xtask/src/llama.rs",
            path.display()
        );
    }
    Ok(())
}

/// Context settings that differ from llama.cpp's defaults (for diagnosis).
#[derive(Debug, Clone, Default)]
pub struct CtxOpts {
    /// `flash_attn_type`: -1 auto, 0 off, 1 on.
    pub flash_attn: Option<i32>,
    /// KV cache type (ggml type id) for both K and V.
    pub cache_type: Option<i32>,
    /// `n_ubatch` (the physical batch a `llama_decode` is cut into; default 512).
    pub n_ubatch: Option<u32>,
}

impl CtxOpts {
    /// From `<prefix>FLASH_ATTN` (`on`/`off`/`auto`) and `<prefix>CACHE_TYPE`
    /// (`f32`/`f16`/`q8_0`).
    pub fn from_env(prefix: &str) -> Result<CtxOpts> {
        let get = |k: &str| std::env::var(format!("{prefix}{k}")).ok().filter(|v| !v.is_empty());
        let flash_attn = match get("FLASH_ATTN").as_deref() {
            None => None,
            Some("on" | "1") => Some(1),
            Some("off" | "0") => Some(0),
            Some("auto") => Some(-1),
            Some(v) => bail!("{prefix}FLASH_ATTN={v}: on, off or auto"),
        };
        let cache_type = match get("CACHE_TYPE").as_deref() {
            None => None,
            Some("f32") => Some(0),
            Some("f16") => Some(1),
            Some("q8_0") => Some(8),
            Some(v) => bail!("{prefix}CACHE_TYPE={v}: f32, f16 or q8_0"),
        };
        Ok(CtxOpts { flash_attn, cache_type, n_ubatch: None })
    }
}

/// libllama, loaded.
pub struct Llama {
    fns: Fns,
    _lib: Library,
    base: Library,
}

impl Llama {
    /// Loads `libllama.so` from the cached llama.cpp build, after checking the struct
    /// layouts against the header of its source tree.
    pub fn load(cache: &Path) -> Result<Llama> {
        let path = libllama(cache);
        ensure!(path.is_file(), "no {}: run `cargo xtask llama-cpp` first", path.display());
        check_header(&llama_cpp::src_dir(cache))?;
        // SAFETY: loading the library runs its constructors (ggml backend registration),
        // which have no preconditions.
        let lib = unsafe { Library::new(&path) }.with_context(|| format!("loading {}", path.display()))?;
        // SAFETY: the library is libllama of the source tree whose header was checked above.
        let fns = unsafe { Fns::load(&lib)? };
        // SAFETY: plain initialisation calls; the callback has the ggml_log_callback signature.
        unsafe {
            (fns.llama_backend_init)();
            if std::env::var_os("XTASK_LLAMA_LOG").is_none() {
                (fns.llama_log_set)(Some(quiet_log), std::ptr::null_mut());
            }
        }
        let base_path = path.with_file_name("libggml-base.so");
        // SAFETY: libggml-base is already loaded as libllama's dependency; this adds a reference.
        let base = unsafe { Library::new(&base_path) }.with_context(|| format!("loading {}", base_path.display()))?;
        Ok(Llama { fns, _lib: lib, base })
    }

    /// Loads a model on the CPU (llama.cpp's default parameters, mmap, no GPU layers).
    pub fn model(&self, path: &Path) -> Result<Model<'_>> {
        self.model_with(path, false)
    }

    /// Loads only a model's vocabulary (`vocab_only`): tokenizing, pieces, samplers.
    pub fn vocab(&self, path: &Path) -> Result<Model<'_>> {
        self.model_with(path, true)
    }

    fn model_with(&self, path: &Path, vocab_only: bool) -> Result<Model<'_>> {
        let cpath = CString::new(path.as_os_str().as_encoded_bytes()).context("model path has a NUL byte")?;
        // SAFETY: by-value struct with the checked layout.
        let mut params = unsafe { (self.fns.llama_model_default_params)() };
        params.n_gpu_layers = 0;
        params.vocab_only = vocab_only;
        if std::env::var_os("XTASK_LLAMA_NO_REPACK").is_some() {
            params.use_extra_bufts = false;
        }
        // SAFETY: a valid C string and parameters from llama.cpp's defaults.
        let ptr = unsafe { (self.fns.llama_model_load_from_file)(cpath.as_ptr(), params) };
        ensure!(!ptr.is_null(), "llama.cpp could not load {} (XTASK_LLAMA_LOG=1 shows why)", path.display());
        // SAFETY: a live model.
        let vocab = unsafe { (self.fns.llama_model_get_vocab)(ptr) };
        // SAFETY: a live vocab.
        let n_vocab = unsafe { (self.fns.llama_vocab_n_tokens)(vocab) };
        ensure!(n_vocab > 0, "{}: vocabulary of {n_vocab} tokens", path.display());
        Ok(Model { ll: self, ptr, vocab, n_vocab: n_vocab as usize })
    }
}

/// A loaded model.
pub struct Model<'a> {
    ll: &'a Llama,
    ptr: *mut c_void,
    vocab: *const c_void,
    n_vocab: usize,
}

impl Drop for Model<'_> {
    fn drop(&mut self) {
        // SAFETY: the model is live and every context borrowing it has been dropped.
        unsafe { (self.ll.fns.llama_model_free)(self.ptr) }
    }
}

impl<'a> Model<'a> {
    /// The vocabulary size (the row length of the logits).
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Whether `token` ends generation (`llama_vocab_is_eog`).
    pub fn is_eog(&self, token: Token) -> bool {
        // SAFETY: a live vocab; any id is accepted (out-of-range ids are not EOG).
        token >= 0 && (token as usize) < self.n_vocab && unsafe { (self.ll.fns.llama_vocab_is_eog)(self.vocab, token) }
    }

    /// Tokenizes `text` as `llama-completion` does its prompt: `add_special` (BOS where the
    /// vocab asks for it) and `parse_special` (control tokens written in the text) both on;
    /// an empty result gets the BOS token, as there.
    pub fn tokenize_prompt(&self, text: &str) -> Result<Vec<Token>> {
        let mut toks = self.tokenize(text, true, true)?;
        if toks.is_empty() {
            // SAFETY: a live vocab.
            toks.push(unsafe { (self.ll.fns.llama_vocab_bos)(self.vocab) });
        }
        Ok(toks)
    }

    /// `llama_detokenize` of one token (`remove_special` off): the piece DRY matches
    /// its sequence breakers against (`special` on there).
    pub fn detokenize_one(&self, token: Token, special: bool) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 64];
        for _ in 0..2 {
            // SAFETY: one valid token id; `buf` holds `buf.len()` bytes.
            let n = unsafe {
                (self.ll.fns.llama_detokenize)(
                    self.vocab,
                    &token,
                    1,
                    buf.as_mut_ptr().cast(),
                    buf.len() as i32,
                    false,
                    special,
                )
            };
            if n >= 0 {
                buf.truncate(n as usize);
                return Ok(buf);
            }
            buf.resize((-n) as usize, 0);
        }
        bail!("llama_detokenize kept asking for a larger buffer")
    }

    /// `llama_tokenize`.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<Token>> {
        self.tokenize_bytes(text.as_bytes(), add_special, parse_special)
    }

    /// `llama_tokenize` of any bytes.
    pub fn tokenize_bytes(&self, text: &[u8], add_special: bool, parse_special: bool) -> Result<Vec<Token>> {
        let len = i32::try_from(text.len()).context("text longer than 2 GiB")?;
        let mut out = vec![0 as Token; text.len() + 8];
        for _ in 0..2 {
            // SAFETY: `text` is valid for `len` bytes, `out` for `out.len()` tokens.
            let n = unsafe {
                (self.ll.fns.llama_tokenize)(
                    self.vocab,
                    text.as_ptr().cast(),
                    len,
                    out.as_mut_ptr(),
                    out.len() as i32,
                    add_special,
                    parse_special,
                )
            };
            if n >= 0 {
                out.truncate(n as usize);
                return Ok(out);
            }
            ensure!(n != i32::MIN, "tokenizing {} bytes overflowed", text.len());
            out.resize((-n) as usize, 0);
        }
        bail!("llama_tokenize kept asking for a larger buffer")
    }

    /// A context for `n_ctx` positions on `n_threads` threads (prompt and generation),
    /// with llama.cpp's defaults (F16 KV cache, flash attention "auto").
    pub fn context(&self, n_ctx: u32, n_threads: i32) -> Result<Context<'_, 'a>> {
        self.context_with(n_ctx, n_threads, &CtxOpts::default())
    }

    /// [`Model::context`] with some defaults changed.
    pub fn context_with(&self, n_ctx: u32, n_threads: i32, o: &CtxOpts) -> Result<Context<'_, 'a>> {
        // SAFETY: by-value struct with the checked layout.
        let mut p = unsafe { (self.ll.fns.llama_context_default_params)() };
        if let Some(fa) = o.flash_attn {
            p.flash_attn_type = fa;
        }
        if let Some(t) = o.cache_type {
            p.type_k = t;
            p.type_v = t;
        }
        p.n_ctx = n_ctx;
        p.n_batch = n_ctx;
        if let Some(ub) = o.n_ubatch {
            p.n_ubatch = ub;
        }
        p.n_threads = n_threads;
        p.n_threads_batch = n_threads;
        p.no_perf = true;
        // SAFETY: a live model and parameters from llama.cpp's defaults.
        let ptr = unsafe { (self.ll.fns.llama_init_from_model)(self.ptr, p) };
        ensure!(!ptr.is_null(), "llama_init_from_model failed (n_ctx {n_ctx})");
        // SAFETY: a live context.
        let got = unsafe { (self.ll.fns.llama_n_ctx)(ptr) };
        Ok(Context { model: self, ptr, n_ctx: got, dump: None })
    }

    /// An embedding context (`embeddings = true`) with llama.cpp's pooling `pooling`
    /// (`LLAMA_POOLING_TYPE_*`: 0 none … 4 rank) for sequences of up to `n_ctx` tokens,
    /// `n_batch = n_ubatch = n_ctx` (an encoder takes a batch in one ubatch); other settings
    /// llama.cpp's defaults (flash attention auto).
    pub fn embed_context(&self, n_ctx: u32, n_threads: i32, pooling: i32) -> Result<Context<'_, 'a>> {
        // SAFETY: by-value struct with the checked layout.
        let mut p = unsafe { (self.ll.fns.llama_context_default_params)() };
        p.n_ctx = n_ctx;
        p.n_batch = n_ctx;
        p.n_ubatch = n_ctx;
        p.n_threads = n_threads;
        p.n_threads_batch = n_threads;
        p.embeddings = true;
        p.pooling_type = pooling;
        p.no_perf = true;
        // SAFETY: a live model and parameters from llama.cpp's defaults.
        let ptr = unsafe { (self.ll.fns.llama_init_from_model)(self.ptr, p) };
        ensure!(!ptr.is_null(), "llama_init_from_model failed (embeddings, n_ctx {n_ctx}, pooling {pooling})");
        // SAFETY: a live context.
        let (got, pt) = unsafe { ((self.ll.fns.llama_n_ctx)(ptr), (self.ll.fns.llama_pooling_type)(ptr)) };
        let ctx = Context { model: self, ptr, n_ctx: got, dump: None };
        ensure!(pt == pooling, "libllama's context pools with {pt}, not {pooling}");
        Ok(ctx)
    }

    /// A context that captures every intermediate tensor whose name passes `filter`
    /// (llama.cpp's `cb_eval`, as `llama-eval-callback` uses it); read them with
    /// [`Context::take_dumps`]. F32 and F16 tensors only.
    pub fn dump_context(
        &self,
        n_ctx: u32,
        n_threads: i32,
        o: &CtxOpts,
        filter: Box<dyn Fn(&str) -> bool>,
    ) -> Result<Context<'_, 'a>> {
        // SAFETY: symbols of libggml-base with these signatures (ggml.h).
        let (get_name, get_data) = unsafe {
            let n: libloading::Symbol<unsafe extern "C" fn(*const c_void) -> *const c_char> =
                self.ll.base.get(b"ggml_get_name\0")?;
            let d: libloading::Symbol<unsafe extern "C" fn(*const c_void) -> *mut c_void> =
                self.ll.base.get(b"ggml_get_data\0")?;
            (*n, *d)
        };
        let mut state = Box::new(DumpState { filter, get_name, get_data, out: Vec::new() });
        // SAFETY: by-value struct with the checked layout.
        let mut p = unsafe { (self.ll.fns.llama_context_default_params)() };
        if let Some(fa) = o.flash_attn {
            p.flash_attn_type = fa;
        }
        if let Some(t) = o.cache_type {
            p.type_k = t;
            p.type_v = t;
        }
        p.n_ctx = n_ctx;
        p.n_batch = n_ctx;
        p.n_threads = n_threads;
        p.n_threads_batch = n_threads;
        p.no_perf = true;
        p.cb_eval = dump_callback as EvalCallback as *const c_void;
        p.cb_eval_user_data = &mut *state as *mut DumpState as *mut c_void;
        // SAFETY: a live model; the callback state outlives the context (both in Context).
        let ptr = unsafe { (self.ll.fns.llama_init_from_model)(self.ptr, p) };
        ensure!(!ptr.is_null(), "llama_init_from_model failed (n_ctx {n_ctx})");
        // SAFETY: a live context.
        let got = unsafe { (self.ll.fns.llama_n_ctx)(ptr) };
        Ok(Context { model: self, ptr, n_ctx: got, dump: Some(state) })
    }
}

/// A llama.cpp context (KV cache) on one sequence.
pub struct Context<'m, 'a> {
    model: &'m Model<'a>,
    ptr: *mut c_void,
    n_ctx: u32,
    // Freed after the context (fields drop after `Drop::drop`), which calls into it.
    dump: Option<Box<DumpState>>,
}

impl Drop for Context<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: a live context, freed once.
        unsafe { (self.model.ll.fns.llama_free)(self.ptr) }
    }
}

impl Context<'_, '_> {
    fn fns(&self) -> &Fns {
        &self.model.ll.fns
    }

    /// The tensors captured since the last call (a [`Model::dump_context`] only).
    pub fn take_dumps(&mut self) -> Vec<Dumped> {
        self.dump.as_mut().map(|d| std::mem::take(&mut d.out)).unwrap_or_default()
    }

    /// Empties the KV cache.
    pub fn clear(&mut self) {
        // SAFETY: a live context; its memory pointer is owned by it.
        unsafe {
            let mem = (self.fns().llama_get_memory)(self.ptr);
            if !mem.is_null() {
                (self.fns().llama_memory_clear)(mem, true);
            }
        }
    }

    /// Decodes `tokens` as sequence 0 at positions `pos0..` in one batch, `output(i)`
    /// saying which positions give results; on success `read` collects them before the
    /// batch is freed. Returns `read`'s result, or the decode error.
    fn decode_seq<T>(
        &mut self,
        tokens: &[Token],
        pos0: usize,
        output: impl Fn(usize) -> bool,
        read: impl FnOnce(&Self) -> T,
    ) -> Result<T> {
        ensure!(!tokens.is_empty(), "decode of zero tokens");
        ensure!(
            pos0 + tokens.len() <= self.n_ctx as usize,
            "{} positions do not fit the context of {}",
            pos0 + tokens.len(),
            self.n_ctx
        );
        let n_vocab = self.model.n_vocab as i32;
        for &t in tokens {
            ensure!((0..n_vocab).contains(&t), "token {t} outside the vocabulary of {n_vocab}");
        }
        let n = tokens.len() as i32;
        // SAFETY: allocates n entries of each array (token, pos, n_seq_id, seq_id[i][1], logits).
        let batch = unsafe { (self.fns().llama_batch_init)(n, 0, 1) };
        // SAFETY: every array has n entries, seq_id[i] one each (llama_batch_init's contract).
        unsafe {
            for (i, &t) in tokens.iter().enumerate() {
                *batch.token.add(i) = t;
                *batch.pos.add(i) = (pos0 + i) as i32;
                *batch.n_seq_id.add(i) = 1;
                *(*batch.seq_id.add(i)) = 0;
                *batch.logits.add(i) = i8::from(output(i));
            }
        }
        let mut b = batch;
        b.n_tokens = n;
        // SAFETY: a live context and a filled batch.
        let rc = unsafe { (self.fns().llama_decode)(self.ptr, b) };
        let out = (rc == 0).then(|| read(self));
        // SAFETY: allocated by llama_batch_init above, freed once.
        unsafe { (self.fns().llama_batch_free)(batch) };
        out.with_context(|| format!("llama_decode returned {rc}"))
    }

    /// Decodes `tokens` at positions `pos0..` in one batch: the logits of every position
    /// with `all_logits`, else of the last. Returns those rows, in order.
    fn decode(&mut self, tokens: &[Token], pos0: usize, all_logits: bool) -> Result<Vec<Vec<f32>>> {
        let n = tokens.len();
        let rows = self.decode_seq(
            tokens,
            pos0,
            |i| all_logits || i + 1 == n,
            |me| {
                let n_vocab = me.model.n_vocab;
                let mut rows = Vec::new();
                for i in if all_logits { 0 } else { n - 1 }..n {
                    // SAFETY: position i was marked for output; the row has n_vocab floats valid until the next decode.
                    let p = unsafe { (me.fns().llama_get_logits_ith)(me.ptr, i as i32) };
                    if p.is_null() {
                        break;
                    }
                    // SAFETY: see above.
                    rows.push(unsafe { std::slice::from_raw_parts(p, n_vocab) }.to_vec());
                }
                rows
            },
        )?;
        ensure!(rows.len() == if all_logits { n } else { 1 }, "llama_get_logits_ith returned null");
        Ok(rows)
    }

    /// One sequence (id 0, positions from 0) through an [`Model::embed_context`] in one
    /// `llama_decode` (an encoder's `llama_encode`): every token's `width` floats
    /// (`llama_get_embeddings_ith`) with `per_token`, else the sequence's `width` floats
    /// (`llama_get_embeddings_seq`: the pooled embedding, or a reranker's scores).
    pub fn embed(&mut self, tokens: &[Token], per_token: bool, width: usize) -> Result<Vec<f32>> {
        let n = tokens.len();
        let out = self.decode_seq(
            tokens,
            0,
            |_| true,
            |me| {
                let mut out = Vec::new();
                if per_token {
                    for i in 0..n {
                        // SAFETY: every position is an output; `width` floats, valid until the next decode.
                        let p = unsafe { (me.fns().llama_get_embeddings_ith)(me.ptr, i as i32) };
                        if p.is_null() {
                            break;
                        }
                        // SAFETY: see above.
                        out.extend_from_slice(unsafe { std::slice::from_raw_parts(p, width) });
                    }
                } else {
                    // SAFETY: a live context; sequence 0 was in the batch.
                    let p = unsafe { (me.fns().llama_get_embeddings_seq)(me.ptr, 0) };
                    if !p.is_null() {
                        // SAFETY: the sequence's vector has `width` floats (n_embd, or n_cls_out for rank).
                        out.extend_from_slice(unsafe { std::slice::from_raw_parts(p, width) });
                    }
                }
                out
            },
        )?;
        ensure!(out.len() == if per_token { n * width } else { width }, "libllama returned no embeddings");
        Ok(out)
    }

    /// Logits at every position of `tokens`, decoded from an empty cache in one batch
    /// (`[n_tokens][n_vocab]`, row-major).
    pub fn logits_all(&mut self, tokens: &[Token]) -> Result<Vec<f32>> {
        self.clear();
        let rows = self.decode(tokens, 0, true)?;
        Ok(rows.concat())
    }

    /// Greedy generation from an empty cache: the prompt in one batch, then one token at a
    /// time, each the first index of the largest logit; stops after `n` tokens or at an
    /// end-of-generation token (which is included, as `gguf run --json` reports it).
    pub fn greedy(&mut self, prompt: &[Token], n: usize) -> Result<Vec<Token>> {
        self.clear();
        let mut out = Vec::with_capacity(n);
        let mut last = self.decode(prompt, 0, false)?.pop().unwrap_or_default();
        let mut pos = prompt.len();
        while out.len() < n {
            let tok = argmax(&last) as Token;
            out.push(tok);
            if self.model.is_eog(tok) || out.len() == n {
                break;
            }
            last = self.decode(&[tok], pos, false)?.pop().unwrap_or_default();
            pos += 1;
        }
        Ok(out)
    }
}

/// The index of the first largest value (NaN never wins).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] || v[best].is_nan() {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_parser_reads_fields_in_order() {
        let h = "struct foo {\n  int a; // x\n  const char * b;\n\n  // c;\n  bool d;\n};\n";
        assert_eq!(header_struct_fields(h, "struct foo {").unwrap(), ["a", "b", "d"]);
        let t = "typedef struct bar {\n  int32_t n;\n  int8_t * logits; // y\n  int64_t ne[4]; // z\n} bar;\nstruct z { int q; };";
        assert_eq!(header_struct_fields(t, "typedef struct bar {").unwrap(), ["n", "logits", "ne"]);
    }

    #[test]
    fn half_conversion_is_exact() {
        assert_eq!(half_to_f32(0x3c00), 1.0);
        assert_eq!(half_to_f32(0xc000), -2.0);
        assert_eq!(half_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(half_to_f32(0x7bff), 65504.0);
        assert!(half_to_f32(0x7c00).is_infinite());
    }

    #[test]
    fn argmax_takes_first_max() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5]), 1);
    }
}

/// One sampler of a libllama chain, with the arguments of its `llama_sampler_init_*`.
#[derive(Debug, Clone)]
pub enum SamplerSpec {
    /// `llama_sampler_init_logit_bias(n_vocab, biases)`.
    LogitBias(i32, Vec<(Token, f32)>),
    /// `llama_sampler_init_penalties(n_vocab, last_n, repeat, freq, present)`.
    Penalties(i32, i32, f32, f32, f32),
    /// `llama_sampler_init_dry(vocab, multiplier, base, allowed_length, last_n, breakers)`;
    /// the vocabulary is the chain's.
    Dry(f32, f32, i32, i32, Vec<String>),
    /// `llama_sampler_init_top_n_sigma(n)`.
    TopNSigma(f32),
    /// `llama_sampler_init_top_k(k)`.
    TopK(i32),
    /// `llama_sampler_init_typical(p, min_keep)`.
    Typical(f32, usize),
    /// `llama_sampler_init_top_p(p, min_keep)`.
    TopP(f32, usize),
    /// `llama_sampler_init_min_p(p, min_keep)`.
    MinP(f32, usize),
    /// `llama_sampler_init_xtc(p, t, min_keep, seed)`.
    Xtc(f32, f32, usize, u32),
    /// `llama_sampler_init_temp(t)`.
    Temp(f32),
    /// `llama_sampler_init_temp_ext(t, delta, exponent)`.
    TempExt(f32, f32, f32),
    /// `llama_sampler_init_mirostat(n_vocab, seed, tau, eta, m)`.
    Mirostat(i32, u32, f32, f32, i32),
    /// `llama_sampler_init_mirostat_v2(seed, tau, eta)`.
    MirostatV2(u32, f32, f32),
    /// `llama_sampler_init_adaptive_p(target, decay, seed)`.
    AdaptiveP(f32, f32, u32),
    /// `llama_sampler_init_dist(seed)`.
    Dist(u32),
}

/// A libllama sampler chain.
pub struct SamplerChain<'a> {
    ll: &'a Llama,
    ptr: *mut c_void,
}

impl Drop for SamplerChain<'_> {
    fn drop(&mut self) {
        // SAFETY: a live chain, freed once (it frees its samplers).
        unsafe { (self.ll.fns.llama_sampler_free)(self.ptr) }
    }
}

/// What one `llama_sampler_apply` left: the candidates from the (possibly advanced) data
/// pointer, the selected index and the sorted flag.
#[derive(Debug, Clone)]
pub struct Applied {
    /// `data[0..size]`.
    pub data: Vec<TokenData>,
    /// `selected` (-1: none).
    pub selected: i64,
    /// `sorted`.
    pub sorted: bool,
}

impl Llama {
    /// A chain of `specs` in order (`llama_sampler_chain_init` + `_add`). `vocab` is the
    /// model DRY reads its sequence breakers' tokens from (`None`: a DRY with breakers is
    /// refused).
    pub fn sampler_chain(&self, specs: &[SamplerSpec], vocab: Option<&Model<'_>>) -> Result<SamplerChain<'_>> {
        let f = &self.fns;
        // SAFETY: by-value struct with the checked layout.
        let mut params = unsafe { (f.llama_sampler_chain_default_params)() };
        params.no_perf = true;
        // SAFETY: plain constructor.
        let chain = SamplerChain { ll: self, ptr: unsafe { (f.llama_sampler_chain_init)(params) } };
        ensure!(!chain.ptr.is_null(), "llama_sampler_chain_init failed");
        for spec in specs {
            // SAFETY: each constructor gets the arguments llama.h declares; pointers live for
            // the call (the samplers copy what they keep).
            let s = unsafe {
                match spec {
                    SamplerSpec::LogitBias(n, b) => {
                        let v: Vec<LogitBias> = b.iter().map(|&(token, bias)| LogitBias { token, bias }).collect();
                        (f.llama_sampler_init_logit_bias)(*n, v.len() as i32, v.as_ptr())
                    }
                    &SamplerSpec::Penalties(n, l, r, fr, pr) => (f.llama_sampler_init_penalties)(n, l, r, fr, pr),
                    SamplerSpec::Dry(m, b, a, n, breakers) => {
                        let vp = match vocab {
                            Some(v) => v.vocab,
                            None if breakers.is_empty() => std::ptr::null(),
                            None => bail!("a DRY sampler with sequence breakers needs a vocabulary"),
                        };
                        let cs: Vec<CString> =
                            breakers.iter().map(|b| CString::new(b.as_str())).collect::<Result<_, _>>()?;
                        let ps: Vec<*const c_char> = cs.iter().map(|c| c.as_ptr()).collect();
                        (f.llama_sampler_init_dry)(vp, *m, *b, *a, *n, ps.as_ptr(), ps.len())
                    }
                    &SamplerSpec::TopNSigma(n) => (f.llama_sampler_init_top_n_sigma)(n),
                    &SamplerSpec::TopK(k) => (f.llama_sampler_init_top_k)(k),
                    &SamplerSpec::Typical(p, m) => (f.llama_sampler_init_typical)(p, m),
                    &SamplerSpec::TopP(p, m) => (f.llama_sampler_init_top_p)(p, m),
                    &SamplerSpec::MinP(p, m) => (f.llama_sampler_init_min_p)(p, m),
                    &SamplerSpec::Xtc(p, t, m, seed) => (f.llama_sampler_init_xtc)(p, t, m, seed),
                    &SamplerSpec::Temp(t) => (f.llama_sampler_init_temp)(t),
                    &SamplerSpec::TempExt(t, d, e) => (f.llama_sampler_init_temp_ext)(t, d, e),
                    &SamplerSpec::Mirostat(n, seed, tau, eta, m) => {
                        (f.llama_sampler_init_mirostat)(n, seed, tau, eta, m)
                    }
                    &SamplerSpec::MirostatV2(seed, tau, eta) => (f.llama_sampler_init_mirostat_v2)(seed, tau, eta),
                    &SamplerSpec::AdaptiveP(t, d, seed) => (f.llama_sampler_init_adaptive_p)(t, d, seed),
                    &SamplerSpec::Dist(seed) => (f.llama_sampler_init_dist)(seed),
                }
            };
            ensure!(!s.is_null(), "libllama refused sampler {spec:?}");
            // SAFETY: a live chain takes ownership of a live sampler.
            unsafe { (f.llama_sampler_chain_add)(chain.ptr, s) };
        }
        Ok(chain)
    }
}

impl SamplerChain<'_> {
    /// `llama_sampler_apply` over every token of `logits`, in id order, unsorted.
    pub fn apply(&mut self, logits: &[f32]) -> Applied {
        let mut buf: Vec<TokenData> =
            logits.iter().enumerate().map(|(i, &logit)| TokenData { id: i as Token, logit, p: 0.0 }).collect();
        let mut arr = TokenDataArray { data: buf.as_mut_ptr(), size: buf.len(), selected: -1, sorted: false };
        // SAFETY: `arr` describes `buf`, which outlives the call; samplers only shrink the
        // window or move its start within the buffer.
        unsafe { (self.ll.fns.llama_sampler_apply)(self.ptr, &mut arr) };
        // SAFETY: the window the samplers left lies inside `buf`.
        let data = unsafe { std::slice::from_raw_parts(arr.data, arr.size) }.to_vec();
        Applied { data, selected: arr.selected, sorted: arr.sorted }
    }

    /// `llama_sampler_accept`.
    pub fn accept(&mut self, token: Token) {
        // SAFETY: a live chain.
        unsafe { (self.ll.fns.llama_sampler_accept)(self.ptr, token) }
    }
}
