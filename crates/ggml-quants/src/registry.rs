//! The type registry: what every ggml type is, collected from `inventory` submissions and
//! indexed once.

use std::sync::OnceLock;

use crate::{Error, Result};

/// A block decoder: `src` holds whole blocks, `dst` has `block_size` floats per block.
/// Callers ([`TypeTraits::dequantize`]) check the lengths first.
pub type DequantizeFn = fn(src: &[u8], dst: &mut [f32]);
/// ggml's `from_float_ref`: encode whole blocks of `src` into `dst`.
pub type QuantizeRefFn = fn(src: &[f32], dst: &mut [u8]);
/// ggml's `quantize_<type>(src, dst, nrows, n_per_row, imatrix)` as `ggml_quantize_chunk`
/// calls it: `src.len() / n_per_row` rows, each `n_per_row` long, `imatrix` (when given)
/// `n_per_row` importance weights shared by all rows.
pub type QuantizeRowsFn = fn(src: &[f32], dst: &mut [u8], n_per_row: usize, imatrix: Option<&[f32]>);

/// What one ggml type is: ggml's `type_traits` entry, plus the quantizer that
/// `ggml_quantize_chunk` dispatches to.
///
/// It is a plain `const`-constructible struct of names, sizes and function pointers so
/// that `inventory::submit!` can place it in a static. Implement [`GgmlType`] and submit
/// [`GgmlType::TRAITS`] rather than filling it by hand.
#[derive(Debug)]
pub struct TypeTraits {
    /// ggml's `type_name`, e.g. `"q4_K"`.
    pub name: &'static str,
    /// The GGUF / `enum ggml_type` id, e.g. 12.
    pub id: u32,
    /// Elements per block (`blck_size`).
    pub block_size: usize,
    /// Bytes per block (`type_size`).
    pub type_size: usize,
    /// Whether ggml marks the type as quantized.
    pub is_quantized: bool,
    /// ggml's `to_float`.
    pub dequantize_fn: DequantizeFn,
    /// ggml's reference encoder: `from_float_ref`, or the exported `quantize_row_*_ref`
    /// where the type table leaves it out (q8_K), or the plain copy for f32. `None` where
    /// ggml has no encoder at all.
    pub quantize_ref_fn: Option<QuantizeRefFn>,
    /// The quantizer `ggml_quantize_chunk` uses, `None` where it has none.
    pub quantize_rows_fn: Option<QuantizeRowsFn>,
    /// `ggml_quantize_requires_imatrix`.
    pub requires_imatrix: bool,
    /// Higher wins when two types claim one id (a plug-in replacing a built-in type's
    /// code); built-ins have 0.
    pub priority: i32,
}

inventory::collect!(TypeTraits);

/// The static side of a type: implement this on a marker type in the type's module, then
/// `inventory::submit! { <Marker as GgmlType>::TRAITS }`.
///
/// Associated consts let kernels use sizes at compile time; [`GgmlType::TRAITS`] erases
/// them into the object the registry stores.
pub trait GgmlType: 'static {
    /// ggml's `type_name`.
    const NAME: &'static str;
    /// GGUF / ggml id.
    const ID: u32;
    /// Elements per block.
    const BLOCK_SIZE: usize;
    /// Bytes per block.
    const TYPE_SIZE: usize;
    /// Whether ggml marks the type as quantized.
    const IS_QUANTIZED: bool = true;
    /// `ggml_quantize_requires_imatrix`.
    const REQUIRES_IMATRIX: bool = false;
    /// `from_float_ref`, if ggml has one.
    const QUANTIZE_REF: Option<QuantizeRefFn> = None;
    /// `ggml_quantize_chunk`'s quantizer, if ggml has one.
    const QUANTIZE_ROWS: Option<QuantizeRowsFn> = None;
    /// Precedence over another type with the same id (see [`TypeTraits::priority`]).
    const PRIORITY: i32 = 0;

    /// Decodes whole blocks (`src.len() / TYPE_SIZE` of them) into `dst`.
    fn dequantize(src: &[u8], dst: &mut [f32]);

    /// The registry entry.
    const TRAITS: TypeTraits = TypeTraits {
        name: Self::NAME,
        id: Self::ID,
        block_size: Self::BLOCK_SIZE,
        type_size: Self::TYPE_SIZE,
        is_quantized: Self::IS_QUANTIZED,
        dequantize_fn: Self::dequantize,
        quantize_ref_fn: Self::QUANTIZE_REF,
        quantize_rows_fn: Self::QUANTIZE_ROWS,
        requires_imatrix: Self::REQUIRES_IMATRIX,
        priority: Self::PRIORITY,
    };
}

impl TypeTraits {
    /// Bytes taken by `n` elements, `None` if `n` is not a whole number of blocks or the
    /// size overflows.
    pub fn bytes_for(&self, n: u64) -> Option<u64> {
        let bs = self.block_size as u64;
        if bs == 0 || !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.type_size as u64)
    }

    /// `ggml_row_size`: bytes of one row of `n_per_row` elements.
    pub fn row_size(&self, n_per_row: usize) -> Result<usize> {
        if self.block_size == 0 || !n_per_row.is_multiple_of(self.block_size) {
            return Err(self.not_whole(n_per_row));
        }
        (n_per_row / self.block_size).checked_mul(self.type_size).ok_or_else(|| self.not_whole(n_per_row))
    }

    fn not_whole(&self, n: usize) -> Error {
        Error::NotWholeBlocks { type_name: self.name, n, block_size: self.block_size }
    }

    fn check_len(&self, what: &'static str, expected: usize, found: usize) -> Result<()> {
        if expected != found {
            return Err(Error::BadLength { type_name: self.name, what, expected, found });
        }
        Ok(())
    }

    /// Decodes `src` (whole blocks) into `dst` (`block_size` floats per block), exactly
    /// as ggml's `to_float`.
    pub fn dequantize(&self, src: &[u8], dst: &mut [f32]) -> Result<()> {
        let bytes = self.row_size(dst.len())?;
        self.check_len("source", bytes, src.len())?;
        (self.dequantize_fn)(src, dst);
        Ok(())
    }

    /// Decodes `src` into a new vector.
    pub fn dequantize_to_vec(&self, src: &[u8]) -> Result<Vec<f32>> {
        if self.type_size == 0 || !src.len().is_multiple_of(self.type_size) {
            return Err(Error::BadLength {
                type_name: self.name,
                what: "source (not whole blocks)",
                expected: src.len() / self.type_size.max(1) * self.type_size,
                found: src.len(),
            });
        }
        let mut out = vec![0f32; src.len() / self.type_size * self.block_size];
        (self.dequantize_fn)(src, &mut out);
        Ok(out)
    }

    /// `from_float_ref`: encodes `src` (whole blocks) into `dst`.
    pub fn quantize_ref(&self, src: &[f32], dst: &mut [u8]) -> Result<()> {
        let f = self.quantize_ref_fn.ok_or(Error::NoQuantizer { type_name: self.name })?;
        let bytes = self.row_size(src.len())?;
        self.check_len("destination", bytes, dst.len())?;
        f(src, dst);
        Ok(())
    }

    /// `ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, imatrix)`: encodes
    /// `src.len() / n_per_row` rows. Returns the bytes written.
    pub fn quantize_rows(
        &self,
        src: &[f32],
        dst: &mut [u8],
        n_per_row: usize,
        imatrix: Option<&[f32]>,
    ) -> Result<usize> {
        let f = self.quantize_rows_fn.ok_or(Error::NoQuantizer { type_name: self.name })?;
        if self.requires_imatrix && imatrix.is_none() {
            return Err(Error::ImatrixRequired { type_name: self.name });
        }
        let row = self.row_size(n_per_row)?;
        if n_per_row == 0 || !src.len().is_multiple_of(n_per_row) {
            return Err(self.not_whole(src.len()));
        }
        if let Some(im) = imatrix {
            self.check_len("imatrix", n_per_row, im.len())?;
        }
        let bytes = src.len() / n_per_row * row;
        self.check_len("destination", bytes, dst.len())?;
        f(src, dst, n_per_row, imatrix);
        Ok(bytes)
    }

    /// [`TypeTraits::quantize_rows`] into a new vector.
    pub fn quantize_to_vec(&self, src: &[f32], n_per_row: usize, imatrix: Option<&[f32]>) -> Result<Vec<u8>> {
        let row = self.row_size(n_per_row)?;
        let rows = src.len().checked_div(n_per_row).unwrap_or(0);
        let mut out = vec![0u8; rows * row];
        self.quantize_rows(src, &mut out, n_per_row, imatrix)?;
        Ok(out)
    }
}

/// A type is looked up by its GGUF id and by its ggml name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TypeKey {
    /// The GGUF / `enum ggml_type` id.
    Id(u32),
    /// ggml's `type_name`, as registered (case-sensitive).
    Name(String),
}

impl std::fmt::Display for TypeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TypeKey::Id(id) => write!(f, "id {id}"),
            TypeKey::Name(n) => f.write_str(n),
        }
    }
}

impl gguf_registry::Entry for TypeTraits {
    type Key = TypeKey;
    const KIND: &'static str = "ggml type";
    fn keys(&self) -> Vec<TypeKey> {
        vec![TypeKey::Id(self.id), TypeKey::Name(self.name.to_string())]
    }
    fn priority(&self) -> i32 {
        self.priority
    }
    /// Types carry no origin: the name orders two types of one id (`"q4_0"` before
    /// `"q4_0_mine"`), and two types of one name and priority resolve to neither.
    fn provider(&self) -> &str {
        self.name
    }
}

struct Index {
    registry: gguf_registry::Registry<TypeTraits>,
    all: Vec<&'static TypeTraits>,
    names: Vec<&'static str>,
    sizes: Vec<String>,
}

fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let registry = gguf_registry::Registry::new(inventory::iter::<TypeTraits>);
        let mut all: Vec<&'static TypeTraits> = Vec::new();
        let mut names: Vec<&'static str> = Vec::new();
        for k in registry.keys() {
            match k {
                TypeKey::Id(_) => all.extend(registry.get(k)),
                TypeKey::Name(_) => names.extend(registry.get(k).map(|t| t.name)),
            }
        }
        let sizes = registry
            .entries()
            .iter()
            .filter(|t| t.block_size == 0 || t.type_size == 0)
            .map(|t| format!("type {} has a zero block or type size", t.name))
            .collect();
        Index { registry, all, names, sizes }
    })
}

/// Every registered type with an unambiguous id, sorted by id.
pub fn all() -> &'static [&'static TypeTraits] {
    &index().all
}

/// The type with GGUF id `id`.
pub fn by_id(id: u32) -> Option<&'static TypeTraits> {
    index().registry.get(&TypeKey::Id(id))
}

/// The type with ggml name `name` (case-sensitive, `"q4_K"`); falls back to a
/// case-insensitive match when that is unique.
pub fn by_name(name: &str) -> Option<&'static TypeTraits> {
    let idx = index();
    if let Some(t) = idx.registry.get(&TypeKey::Name(name.to_string())) {
        return Some(t);
    }
    let mut hits = idx.names.iter().filter(|n| n.eq_ignore_ascii_case(name));
    match (hits.next(), hits.next()) {
        (Some(n), None) => idx.registry.get(&TypeKey::Name(n.to_string())),
        _ => None,
    }
}

/// [`by_id`], or an error that lists the known ids (or names the clash that hides it).
pub fn lookup_id(id: u32) -> Result<&'static TypeTraits> {
    by_id(id).ok_or_else(|| match index().registry.clash(&TypeKey::Id(id)) {
        Some(p) => Error::Clash(p.to_string()),
        None => Error::UnknownTypeId {
            id,
            known: all().iter().map(|t| format!("{}={}", t.id, t.name)).collect::<Vec<_>>().join(", "),
        },
    })
}

/// [`by_name`], or an error that lists the known names (or names the clash that hides it).
pub fn lookup_name(name: &str) -> Result<&'static TypeTraits> {
    by_name(name).ok_or_else(|| match index().registry.clash(&TypeKey::Name(name.to_string())) {
        Some(p) => Error::Clash(p.to_string()),
        None => Error::UnknownTypeName { name: name.to_string(), known: index().names.join(", ") },
    })
}

/// Clashes found while indexing (two types of one id or name at one priority, a zero
/// size) and deliberate overrides. No problems when the registry is sound; tests assert
/// that.
pub fn registry_problems() -> gguf_registry::Report {
    let idx = index();
    let mut r = idx.registry.report();
    r.problems.extend(idx.sizes.iter().cloned());
    r
}
