//! The oracle: llama.cpp's `libggml-base.so`, loaded at run time with `libloading`.
//!
//! Everything `unsafe` in xtask is here. Each entry point is wrapped in a safe method
//! that checks lengths and type ids first, because ggml itself aborts the process
//! (`GGML_ASSERT`) or reads out of bounds on bad arguments:
//!
//! - `ggml_get_type_traits` asserts `type < GGML_TYPE_COUNT`, so the count is read from
//!   the `ggml.h` of the same source tree and ids are checked against it;
//! - `ggml_quantize_chunk` aborts for a type it has no `case` for, so the set of types
//!   it handles is read from the `switch` in `ggml/src/ggml.c`;
//! - `gguf_get_val_*` abort on a type mismatch, so the reader below asks
//!   `gguf_get_kv_type` first.
//!
//! The layout of `struct ggml_type_traits` is checked against `ggml.h` on load.

use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use libloading::Library;
use serde_json::{json, Value as Json};

type ToFloat = unsafe extern "C" fn(x: *const c_void, y: *mut f32, k: i64);
type FromFloat = unsafe extern "C" fn(x: *const f32, y: *mut c_void, k: i64);

/// `struct ggml_type_traits` (`ggml/include/ggml.h`). [`Ggml::load`] checks that the
/// header declares exactly these fields in this order.
#[repr(C)]
struct RawTypeTraits {
    type_name: *const c_char,
    blck_size: i64,
    blck_size_interleave: i64,
    type_size: usize,
    is_quantized: bool,
    to_float: Option<ToFloat>,
    from_float_ref: Option<FromFloat>,
}

/// The fields of [`RawTypeTraits`] as `(C type, name)`, in declaration order.
const TRAITS_FIELDS: &[(&str, &str)] = &[
    ("const char *", "type_name"),
    ("int64_t", "blck_size"),
    ("int64_t", "blck_size_interleave"),
    ("size_t", "type_size"),
    ("bool", "is_quantized"),
    ("ggml_to_float_t", "to_float"),
    ("ggml_from_float_t", "from_float_ref"),
];

/// `struct gguf_init_params` (`ggml/include/gguf.h`).
#[repr(C)]
struct GgufInitParams {
    no_alloc: bool,
    ctx: *mut *mut c_void,
}

/// What libggml says about one type.
#[derive(Debug, Clone)]
pub struct TypeInfo {
    /// The ggml type id.
    pub id: u32,
    /// `type_name`.
    pub name: String,
    /// `blck_size`.
    pub block_size: usize,
    /// `type_size`.
    pub type_size: usize,
    /// `is_quantized`.
    pub is_quantized: bool,
    /// Whether `from_float_ref` is non-null.
    pub has_from_float_ref: bool,
    /// Whether `ggml_quantize_chunk` has a `case` for it.
    pub has_quantize_chunk: bool,
    /// `ggml_quantize_requires_imatrix`.
    pub requires_imatrix: bool,
    /// Where the decoder used by [`Ggml::to_float`] comes from: `"to_float"`, or the
    /// exported `dequantize_row_<name>` when the traits have none (q8_K); `None` if neither.
    pub to_float_source: Option<String>,
    /// Where [`Ggml::quantize_row_ref`]'s encoder comes from: `"from_float_ref"` or the
    /// exported `quantize_row_<name>_ref` (q8_K); `None` if neither.
    pub from_float_ref_source: Option<String>,
    to_float: Option<ToFloat>,
    from_float_ref: Option<FromFloat>,
}

macro_rules! gguf_fns {
    ($($name:ident : $ty:ty;)*) => {
        /// The `gguf_*` entry points of libggml-base (`ggml/include/gguf.h`).
        #[allow(non_snake_case)]
        struct GgufFns { $($name: $ty,)* }

        impl GgufFns {
            /// # Safety
            /// `lib` must be libggml-base of the checked-out llama.cpp, whose `gguf.h`
            /// declares these functions with these signatures.
            unsafe fn load(lib: &Library) -> Result<Self> {
                Ok(Self { $($name: {
                    // SAFETY: the signature matches gguf.h (see the caller's contract).
                    let sym: libloading::Symbol<$ty> = unsafe { lib.get(concat!(stringify!($name), "\0").as_bytes()) }
                        .with_context(|| concat!("libggml-base.so lacks ", stringify!($name)))?;
                    *sym
                },)* })
            }
        }
    };
}

gguf_fns! {
    gguf_init_from_file: unsafe extern "C" fn(*const c_char, GgufInitParams) -> *mut c_void;
    gguf_free: unsafe extern "C" fn(*mut c_void);
    gguf_get_version: unsafe extern "C" fn(*const c_void) -> u32;
    gguf_get_alignment: unsafe extern "C" fn(*const c_void) -> usize;
    gguf_get_data_offset: unsafe extern "C" fn(*const c_void) -> usize;
    gguf_get_n_kv: unsafe extern "C" fn(*const c_void) -> i64;
    gguf_find_key: unsafe extern "C" fn(*const c_void, *const c_char) -> i64;
    gguf_get_key: unsafe extern "C" fn(*const c_void, i64) -> *const c_char;
    gguf_get_kv_type: unsafe extern "C" fn(*const c_void, i64) -> c_int;
    gguf_get_arr_type: unsafe extern "C" fn(*const c_void, i64) -> c_int;
    gguf_get_val_u8: unsafe extern "C" fn(*const c_void, i64) -> u8;
    gguf_get_val_i8: unsafe extern "C" fn(*const c_void, i64) -> i8;
    gguf_get_val_u16: unsafe extern "C" fn(*const c_void, i64) -> u16;
    gguf_get_val_i16: unsafe extern "C" fn(*const c_void, i64) -> i16;
    gguf_get_val_u32: unsafe extern "C" fn(*const c_void, i64) -> u32;
    gguf_get_val_i32: unsafe extern "C" fn(*const c_void, i64) -> i32;
    gguf_get_val_f32: unsafe extern "C" fn(*const c_void, i64) -> f32;
    gguf_get_val_u64: unsafe extern "C" fn(*const c_void, i64) -> u64;
    gguf_get_val_i64: unsafe extern "C" fn(*const c_void, i64) -> i64;
    gguf_get_val_f64: unsafe extern "C" fn(*const c_void, i64) -> f64;
    gguf_get_val_bool: unsafe extern "C" fn(*const c_void, i64) -> bool;
    gguf_get_val_str: unsafe extern "C" fn(*const c_void, i64) -> *const c_char;
    gguf_get_arr_n: unsafe extern "C" fn(*const c_void, i64) -> usize;
    gguf_get_arr_data: unsafe extern "C" fn(*const c_void, i64) -> *const c_void;
    gguf_get_arr_str: unsafe extern "C" fn(*const c_void, i64, usize) -> *const c_char;
    gguf_get_n_tensors: unsafe extern "C" fn(*const c_void) -> i64;
    gguf_get_tensor_offset: unsafe extern "C" fn(*const c_void, i64) -> usize;
    gguf_get_tensor_name: unsafe extern "C" fn(*const c_void, i64) -> *const c_char;
    gguf_get_tensor_ne: unsafe extern "C" fn(*const c_void, i64) -> *const i64;
    gguf_get_tensor_type: unsafe extern "C" fn(*const c_void, i64) -> c_int;
    gguf_get_tensor_size: unsafe extern "C" fn(*const c_void, i64) -> usize;
}

/// libggml-base, loaded.
pub struct Ggml {
    types: Vec<Option<TypeInfo>>,
    quantize_chunk: unsafe extern "C" fn(c_int, *const f32, *mut c_void, i64, i64, i64, *const f32) -> usize,
    gguf: GgufFns,
    /// `GGML_TYPE_COUNT` from `ggml.h`.
    pub type_count: u32,
    /// Where the library was loaded from.
    pub path: PathBuf,
    // Declared last so that it is dropped after nothing can use the pointers above.
    _lib: Library,
}

/// Reads `GGML_TYPE_COUNT` out of `enum ggml_type` in `ggml.h`.
fn parse_type_count(header: &str) -> Result<u32> {
    for line in header.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("GGML_TYPE_COUNT") {
            let v = rest.trim().trim_start_matches('=').trim().trim_end_matches(',').trim();
            return v.parse().with_context(|| format!("GGML_TYPE_COUNT = {v:?} in ggml.h"));
        }
    }
    bail!("GGML_TYPE_COUNT not found in ggml.h")
}

/// Checks that `struct ggml_type_traits` in `ggml.h` has the fields of [`RawTypeTraits`].
fn check_traits_layout(header: &str) -> Result<()> {
    let start = header.find("struct ggml_type_traits {").context("struct ggml_type_traits not found in ggml.h")?;
    let body = &header[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find("};").context("unterminated struct")?];
    let fields: Vec<(String, String)> = body
        .lines()
        .map(|l| l.split("//").next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let l = l.trim_end_matches(';');
            let split = l.rfind(|c: char| c.is_whitespace() || c == '*').unwrap_or(0);
            let (ty, name) = l.split_at(split + 1);
            (ty.split_whitespace().collect::<Vec<_>>().join(" "), name.trim().to_string())
        })
        .collect();
    let expected: Vec<(String, String)> = TRAITS_FIELDS.iter().map(|(t, n)| (t.to_string(), n.to_string())).collect();
    ensure!(
        fields == expected,
        "struct ggml_type_traits in ggml.h is {fields:?}; xtask's RawTypeTraits is {expected:?}"
    );
    Ok(())
}

/// The `GGML_TYPE_*` names with a `case` in `ggml_quantize_chunk` (`ggml/src/ggml.c`).
fn parse_quantize_chunk_cases(source: &str) -> Result<BTreeSet<String>> {
    let start = source.find("size_t ggml_quantize_chunk(").context("ggml_quantize_chunk not found in ggml.c")?;
    let body = &source[start..];
    let end = body.find("\n}\n").context("end of ggml_quantize_chunk not found")?;
    let cases: BTreeSet<String> = body[..end]
        .split("case GGML_TYPE_")
        .skip(1)
        .filter_map(|s| s.split(':').next())
        .map(|s| s.trim().to_string())
        .collect();
    ensure!(!cases.is_empty(), "no cases found in ggml_quantize_chunk");
    Ok(cases)
}

fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: ggml returns NUL-terminated strings that live as long as the library or the
    // gguf context; the caller holds both while this runs.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

impl Ggml {
    /// Loads `<build>/bin/libggml-base.so`, checking it against the headers in `src`.
    pub fn load(lib_path: &Path, src: &Path) -> Result<Self> {
        let header = std::fs::read_to_string(src.join("ggml/include/ggml.h"))
            .with_context(|| format!("reading {}/ggml/include/ggml.h", src.display()))?;
        check_traits_layout(&header)?;
        let type_count = parse_type_count(&header)?;
        let ggml_c = std::fs::read_to_string(src.join("ggml/src/ggml.c"))
            .with_context(|| format!("reading {}/ggml/src/ggml.c", src.display()))?;
        let chunk_cases = parse_quantize_chunk_cases(&ggml_c)?;

        // SAFETY: loading runs the library's initialisers; libggml-base's only set up
        // static tables. The library is kept alive in `_lib` for as long as `Ggml` lives.
        let lib = unsafe { Library::new(lib_path) }.with_context(|| format!("loading {}", lib_path.display()))?;
        // SAFETY (all three): the signatures are those of ggml.h, checked above for the
        // struct they return.
        let get_traits: unsafe extern "C" fn(c_int) -> *const RawTypeTraits =
            *unsafe { lib.get(b"ggml_get_type_traits\0") }.context("ggml_get_type_traits")?;
        let quantize_chunk = *unsafe { lib.get(b"ggml_quantize_chunk\0") }.context("ggml_quantize_chunk")?;
        let requires_imatrix: unsafe extern "C" fn(c_int) -> bool =
            *unsafe { lib.get(b"ggml_quantize_requires_imatrix\0") }.context("ggml_quantize_requires_imatrix")?;
        // SAFETY: `lib` is libggml-base built from `src`, whose gguf.h declares these.
        let gguf = unsafe { GgufFns::load(&lib) }?;

        let mut types = Vec::with_capacity(type_count as usize);
        for id in 0..type_count {
            // SAFETY: id < GGML_TYPE_COUNT, so ggml_get_type_traits returns a pointer into
            // its static table (no assert); the struct layout was checked above.
            let raw = unsafe { &*get_traits(id as c_int) };
            let name = cstr(raw.type_name);
            let info = match name {
                Some(name) if raw.blck_size > 0 && raw.type_size > 0 => {
                    let has_chunk = chunk_cases.contains(&name.to_ascii_uppercase());
                    // ggml-quants.h exports some row functions that type_traits leaves out
                    // (q8_K's): `dequantize_row_<name>(const block *, float *, int64_t)` and
                    // `quantize_row_<name>_ref(const float *, block *, int64_t)`.
                    let to_float_sym = format!("dequantize_row_{name}");
                    let from_ref_sym = format!("quantize_row_{name}_ref");
                    // SAFETY: ggml-quants.h declares these with the signatures of
                    // ggml_to_float_t / ggml_from_float_t (a block pointer for void *).
                    let exported_to: Option<ToFloat> =
                        unsafe { lib.get::<ToFloat>(format!("{to_float_sym}\0").as_bytes()) }.ok().map(|s| *s);
                    let exported_from: Option<FromFloat> =
                        unsafe { lib.get::<FromFloat>(format!("{from_ref_sym}\0").as_bytes()) }.ok().map(|s| *s);
                    let (to_float, to_float_source) = match (raw.to_float, exported_to) {
                        (Some(f), _) => (Some(f), Some("to_float".to_string())),
                        (None, Some(f)) => (Some(f), Some(to_float_sym)),
                        (None, None) => (None, None),
                    };
                    let (from_float_ref, from_float_ref_source) = match (raw.from_float_ref, exported_from) {
                        (Some(f), _) => (Some(f), Some("from_float_ref".to_string())),
                        (None, Some(f)) => (Some(f), Some(from_ref_sym)),
                        (None, None) => (None, None),
                    };
                    Some(TypeInfo {
                        id,
                        name,
                        block_size: raw.blck_size as usize,
                        type_size: raw.type_size,
                        is_quantized: raw.is_quantized,
                        has_from_float_ref: raw.from_float_ref.is_some(),
                        has_quantize_chunk: has_chunk,
                        // SAFETY: a plain predicate on the id.
                        requires_imatrix: unsafe { requires_imatrix(id as c_int) },
                        to_float_source,
                        from_float_ref_source,
                        to_float,
                        from_float_ref,
                    })
                }
                _ => None,
            };
            types.push(info);
        }
        Ok(Self { types, quantize_chunk, gguf, type_count, path: lib_path.to_path_buf(), _lib: lib })
    }

    /// The type with this id, `None` for ids ggml does not know (or deprecated ones).
    pub fn type_info(&self, id: u32) -> Option<&TypeInfo> {
        self.types.get(id as usize).and_then(|t| t.as_ref())
    }

    /// Every type ggml knows.
    pub fn types(&self) -> impl Iterator<Item = &TypeInfo> {
        self.types.iter().flatten()
    }

    fn info_checked(&self, id: u32) -> Result<&TypeInfo> {
        self.type_info(id).with_context(|| format!("ggml does not know type id {id}"))
    }

    /// `type_traits[id].to_float(src, dst, dst.len())`.
    pub fn to_float(&self, id: u32, src: &[u8], dst: &mut [f32]) -> Result<()> {
        let t = self.info_checked(id)?;
        let f = t.to_float.with_context(|| format!("{}: ggml has no to_float or dequantize_row", t.name))?;
        ensure!(dst.len().is_multiple_of(t.block_size), "{}: {} elements is not whole blocks", t.name, dst.len());
        ensure!(src.len() == dst.len() / t.block_size * t.type_size, "{}: source length", t.name);
        // SAFETY: src holds exactly dst.len()/block_size blocks and dst has room for
        // dst.len() floats, which is what to_float reads and writes.
        unsafe { f(src.as_ptr().cast(), dst.as_mut_ptr(), dst.len() as i64) };
        Ok(())
    }

    /// `type_traits[id].from_float_ref(src, dst, src.len())` (or the exported `quantize_row_<name>_ref`).
    pub fn quantize_row_ref(&self, id: u32, src: &[f32], dst: &mut [u8]) -> Result<()> {
        let t = self.info_checked(id)?;
        let f =
            t.from_float_ref.with_context(|| format!("{}: ggml has no from_float_ref or quantize_row_ref", t.name))?;
        ensure!(src.len().is_multiple_of(t.block_size), "{}: {} elements is not whole blocks", t.name, src.len());
        ensure!(dst.len() == src.len() / t.block_size * t.type_size, "{}: destination length", t.name);
        // SAFETY: lengths checked above: src.len() floats in, whole blocks out.
        unsafe { f(src.as_ptr(), dst.as_mut_ptr().cast(), src.len() as i64) };
        Ok(())
    }

    /// `ggml_quantize_chunk(id, src, dst, 0, nrows, n_per_row, imatrix)` with
    /// `nrows = src.len() / n_per_row`; returns the bytes written.
    pub fn quantize_chunk(
        &self,
        id: u32,
        src: &[f32],
        dst: &mut [u8],
        n_per_row: usize,
        imatrix: Option<&[f32]>,
    ) -> Result<usize> {
        let t = self.info_checked(id)?;
        ensure!(t.has_quantize_chunk, "{}: ggml_quantize_chunk has no case for this type", t.name);
        ensure!(n_per_row > 0 && n_per_row.is_multiple_of(t.block_size), "{}: row length {n_per_row}", t.name);
        ensure!(src.len().is_multiple_of(n_per_row), "{}: source is not whole rows", t.name);
        let nrows = src.len() / n_per_row;
        ensure!(dst.len() == nrows * (n_per_row / t.block_size) * t.type_size, "{}: destination length", t.name);
        if let Some(im) = imatrix {
            ensure!(im.len() == n_per_row, "{}: imatrix length {} != {n_per_row}", t.name, im.len());
        }
        ensure!(imatrix.is_some() || !t.requires_imatrix, "{}: ggml requires an imatrix", t.name);
        let im = imatrix.map_or(std::ptr::null(), |m| m.as_ptr());
        // SAFETY: the type has a case in the switch, the row length is whole blocks, src
        // holds nrows rows, dst holds nrows encoded rows, the imatrix (if any) holds one
        // weight per column and is given whenever ggml asserts on it.
        let n = unsafe {
            (self.quantize_chunk)(
                id as c_int,
                src.as_ptr(),
                dst.as_mut_ptr().cast(),
                0,
                nrows as i64,
                n_per_row as i64,
                im,
            )
        };
        Ok(n)
    }

    /// Reads a GGUF file with libggml's own parser (`gguf_init_from_file`, `no_alloc`) into
    /// the JSON schema of `gguf inspect --json --full` (see `verify::gguf`).
    pub fn read_gguf(&self, path: &Path) -> Result<Json> {
        let g = &self.gguf;
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())?;
        let params = GgufInitParams { no_alloc: true, ctx: std::ptr::null_mut() };
        // SAFETY: a valid C path and params that ask for metadata only (no ggml context).
        let ctx = unsafe { (g.gguf_init_from_file)(cpath.as_ptr(), params) };
        if ctx.is_null() {
            bail!("libggml's gguf_init_from_file rejected {}", path.display());
        }
        let guard = CtxGuard { ctx, free: g.gguf_free };
        let ctx = guard.ctx as *const c_void;
        // SAFETY (every call below): `ctx` is a live gguf_context (freed by `guard` on
        // return), every index is in 0..n_kv or 0..n_tensors, and every gguf_get_val_* /
        // array access matches the type gguf_get_kv_type / gguf_get_arr_type reported, so
        // none of ggml's type asserts can fire.
        let (version, alignment, data_offset, n_kv, n_tensors) = unsafe {
            (
                (g.gguf_get_version)(ctx),
                (g.gguf_get_alignment)(ctx),
                (g.gguf_get_data_offset)(ctx),
                (g.gguf_get_n_kv)(ctx),
                (g.gguf_get_n_tensors)(ctx),
            )
        };
        let mut metadata = Vec::with_capacity(n_kv.max(0) as usize);
        for i in 0..n_kv {
            let key = cstr(unsafe { (g.gguf_get_key)(ctx, i) }).unwrap_or_default();
            let ckey = CString::new(key.clone())?;
            let found = unsafe { (g.gguf_find_key)(ctx, ckey.as_ptr()) };
            ensure!(found == i, "gguf_find_key({key:?}) = {found}, expected {i}");
            let kv_type = unsafe { (g.gguf_get_kv_type)(ctx, i) };
            let mut entry = serde_json::Map::new();
            entry.insert("key".into(), json!(key));
            entry.insert("type".into(), json!(gguf_type_name(kv_type)));
            let value = if kv_type == GGUF_TYPE_ARRAY {
                let et = unsafe { (g.gguf_get_arr_type)(ctx, i) };
                let n = unsafe { (g.gguf_get_arr_n)(ctx, i) };
                entry.insert("element_type".into(), json!(gguf_type_name(et)));
                let mut items = Vec::with_capacity(n);
                if et == GGUF_TYPE_STRING {
                    for j in 0..n {
                        items.push(json!(cstr(unsafe { (g.gguf_get_arr_str)(ctx, i, j) }).unwrap_or_default()));
                    }
                } else {
                    let size = scalar_size(et).with_context(|| format!("{key}: array of type {et}"))?;
                    let data = unsafe { (g.gguf_get_arr_data)(ctx, i) } as *const u8;
                    ensure!(!data.is_null() || n == 0, "{key}: null array data");
                    let bytes = if n == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(data, n * size) } };
                    for chunk in bytes.chunks_exact(size) {
                        items.push(scalar_json(et, chunk));
                    }
                }
                Json::Array(items)
            } else {
                unsafe {
                    match kv_type {
                        GGUF_TYPE_UINT8 => json!((g.gguf_get_val_u8)(ctx, i)),
                        GGUF_TYPE_INT8 => json!((g.gguf_get_val_i8)(ctx, i)),
                        GGUF_TYPE_UINT16 => json!((g.gguf_get_val_u16)(ctx, i)),
                        GGUF_TYPE_INT16 => json!((g.gguf_get_val_i16)(ctx, i)),
                        GGUF_TYPE_UINT32 => json!((g.gguf_get_val_u32)(ctx, i)),
                        GGUF_TYPE_INT32 => json!((g.gguf_get_val_i32)(ctx, i)),
                        GGUF_TYPE_FLOAT32 => f64_json((g.gguf_get_val_f32)(ctx, i) as f64),
                        GGUF_TYPE_BOOL => json!((g.gguf_get_val_bool)(ctx, i)),
                        GGUF_TYPE_STRING => json!(cstr((g.gguf_get_val_str)(ctx, i)).unwrap_or_default()),
                        GGUF_TYPE_UINT64 => json!((g.gguf_get_val_u64)(ctx, i)),
                        GGUF_TYPE_INT64 => json!((g.gguf_get_val_i64)(ctx, i)),
                        GGUF_TYPE_FLOAT64 => f64_json((g.gguf_get_val_f64)(ctx, i)),
                        other => bail!("{key}: unknown gguf type {other}"),
                    }
                }
            };
            entry.insert("value".into(), value);
            metadata.push(Json::Object(entry));
        }
        let mut tensors = Vec::with_capacity(n_tensors.max(0) as usize);
        for i in 0..n_tensors {
            let name = cstr(unsafe { (g.gguf_get_tensor_name)(ctx, i) }).unwrap_or_default();
            let type_id = unsafe { (g.gguf_get_tensor_type)(ctx, i) };
            let offset = unsafe { (g.gguf_get_tensor_offset)(ctx, i) };
            let size = unsafe { (g.gguf_get_tensor_size)(ctx, i) };
            // SAFETY: gguf_get_tensor_ne returns GGML_MAX_DIMS (4) values.
            let ne = unsafe { std::slice::from_raw_parts((g.gguf_get_tensor_ne)(ctx, i), 4) };
            // ggml pads to 4 dims with 1s; the file's own n_dims is not exported, so the
            // shape is trimmed of trailing 1s (comparisons do the same on the other side).
            let mut shape: Vec<i64> = ne.to_vec();
            while shape.len() > 1 && *shape.last().unwrap() == 1 {
                shape.pop();
            }
            let type_name = self.type_info(type_id as u32).map(|t| t.name.clone()).unwrap_or_default();
            tensors.push(json!({
                "name": name, "type": type_name, "type_id": type_id, "shape": shape,
                "offset": offset, "bytes": size,
            }));
        }
        let file_size = std::fs::metadata(path)?.len();
        drop(guard);
        Ok(json!({
            "path": path.display().to_string(),
            "version": version,
            "alignment": alignment,
            "file_size": file_size,
            "data_offset": data_offset,
            "metadata": metadata,
            "tensors": tensors,
        }))
    }
}

struct CtxGuard {
    ctx: *mut c_void,
    free: unsafe extern "C" fn(*mut c_void),
}

impl Drop for CtxGuard {
    fn drop(&mut self) {
        // SAFETY: ctx came from gguf_init_from_file and is freed exactly once.
        unsafe { (self.free)(self.ctx) }
    }
}

const GGUF_TYPE_UINT8: c_int = 0;
const GGUF_TYPE_INT8: c_int = 1;
const GGUF_TYPE_UINT16: c_int = 2;
const GGUF_TYPE_INT16: c_int = 3;
const GGUF_TYPE_UINT32: c_int = 4;
const GGUF_TYPE_INT32: c_int = 5;
const GGUF_TYPE_FLOAT32: c_int = 6;
const GGUF_TYPE_BOOL: c_int = 7;
const GGUF_TYPE_STRING: c_int = 8;
const GGUF_TYPE_ARRAY: c_int = 9;
const GGUF_TYPE_UINT64: c_int = 10;
const GGUF_TYPE_INT64: c_int = 11;
const GGUF_TYPE_FLOAT64: c_int = 12;

/// The names the inspect JSON uses for `enum gguf_type`.
pub fn gguf_type_name(t: c_int) -> &'static str {
    match t {
        GGUF_TYPE_UINT8 => "u8",
        GGUF_TYPE_INT8 => "i8",
        GGUF_TYPE_UINT16 => "u16",
        GGUF_TYPE_INT16 => "i16",
        GGUF_TYPE_UINT32 => "u32",
        GGUF_TYPE_INT32 => "i32",
        GGUF_TYPE_FLOAT32 => "f32",
        GGUF_TYPE_BOOL => "bool",
        GGUF_TYPE_STRING => "string",
        GGUF_TYPE_ARRAY => "array",
        GGUF_TYPE_UINT64 => "u64",
        GGUF_TYPE_INT64 => "i64",
        GGUF_TYPE_FLOAT64 => "f64",
        _ => "unknown",
    }
}

fn scalar_size(t: c_int) -> Option<usize> {
    Some(match t {
        GGUF_TYPE_UINT8 | GGUF_TYPE_INT8 | GGUF_TYPE_BOOL => 1,
        GGUF_TYPE_UINT16 | GGUF_TYPE_INT16 => 2,
        GGUF_TYPE_UINT32 | GGUF_TYPE_INT32 | GGUF_TYPE_FLOAT32 => 4,
        GGUF_TYPE_UINT64 | GGUF_TYPE_INT64 | GGUF_TYPE_FLOAT64 => 8,
        _ => return None,
    })
}

fn scalar_json(t: c_int, b: &[u8]) -> Json {
    match t {
        GGUF_TYPE_UINT8 => json!(b[0]),
        GGUF_TYPE_INT8 => json!(b[0] as i8),
        GGUF_TYPE_BOOL => json!(b[0] != 0),
        GGUF_TYPE_UINT16 => json!(u16::from_le_bytes([b[0], b[1]])),
        GGUF_TYPE_INT16 => json!(i16::from_le_bytes([b[0], b[1]])),
        GGUF_TYPE_UINT32 => json!(u32::from_le_bytes(b.try_into().unwrap())),
        GGUF_TYPE_INT32 => json!(i32::from_le_bytes(b.try_into().unwrap())),
        GGUF_TYPE_FLOAT32 => f64_json(f32::from_le_bytes(b.try_into().unwrap()) as f64),
        GGUF_TYPE_UINT64 => json!(u64::from_le_bytes(b.try_into().unwrap())),
        GGUF_TYPE_INT64 => json!(i64::from_le_bytes(b.try_into().unwrap())),
        GGUF_TYPE_FLOAT64 => f64_json(f64::from_le_bytes(b.try_into().unwrap())),
        _ => Json::Null,
    }
}

/// A float as JSON; non-finite values (which JSON lacks) as the strings gguf_dump.py uses.
pub fn f64_json(v: f64) -> Json {
    if v.is_finite() {
        json!(v)
    } else if v.is_nan() {
        json!("nan")
    } else if v > 0.0 {
        json!("inf")
    } else {
        json!("-inf")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_header_facts() {
        let h = "struct ggml_type_traits {\n  const char * type_name;\n int64_t blck_size;\n int64_t blck_size_interleave; // x\n size_t type_size;\n bool is_quantized;\n ggml_to_float_t to_float;\n ggml_from_float_t from_float_ref;\n };\n enum ggml_type {\n GGML_TYPE_COUNT   = 43,\n};";
        check_traits_layout(h).unwrap();
        assert_eq!(parse_type_count(h).unwrap(), 43);
        let c = "size_t ggml_quantize_chunk(\n x) {\n switch (type) {\n case GGML_TYPE_Q4_0: r = 1; break;\n case GGML_TYPE_IQ2_XXS: break;\n default: x;\n }\n}\n";
        let cases = parse_quantize_chunk_cases(c).unwrap();
        assert!(cases.contains("Q4_0") && cases.contains("IQ2_XXS") && cases.len() == 2);
    }
}
