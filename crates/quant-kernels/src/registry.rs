//! The kernel registry: per (weight type, backend) dot-product kernels and per (activation
//! type, backend) activation quantizers, collected from `inventory` submissions.
//!
//! Selection: among the entries for a type whose `available()` is true (runtime CPU feature
//! detection), the highest `priority` wins. A weight type with no entry at all runs through
//! the generic path of [`crate::matmul`]: dequantize the weight row to f32 and dot it with
//! the f32 activations.

use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Dot product of one weight row with one quantized activation row.
///
/// `n` is the number of columns; `w` holds exactly `row_size(type, n)` bytes and `x`
/// exactly `row_size(vec_dot_type, n)` bytes ([`crate::matmul`] guarantees it). A kernel
/// may panic if the lengths are wrong, but must never read out of bounds.
pub type VecDotFn = fn(n: usize, w: &[u8], x: &[u8]) -> f32;

/// A tile of dot products: for `r in 0..rows` and `t in 0..tokens`,
/// `y[t * y_stride + r] = vec_dot(n, w[r * w_stride..][..row bytes], x[t * x_stride..][..act bytes])`.
///
/// Kernels that reuse a decoded weight row across several activation rows (the mat-mat
/// case) provide one; otherwise [`crate::matmul`] loops over [`VecDotFn`].
pub type TileFn = fn(t: &Tile<'_>, y: &mut [f32], y_stride: usize);

/// Arguments of a [`TileFn`].
#[derive(Clone, Copy, Debug)]
pub struct Tile<'a> {
    /// Columns (elements per weight row).
    pub n: usize,
    /// Weight rows, `rows` of them `w_stride` bytes apart.
    pub w: &'a [u8],
    /// Bytes from one weight row to the next.
    pub w_stride: usize,
    /// Number of weight rows in the tile.
    pub rows: usize,
    /// Quantized activation rows, `tokens` of them `x_stride` bytes apart.
    pub x: &'a [u8],
    /// Bytes from one activation row to the next.
    pub x_stride: usize,
    /// Number of activation rows (tokens) in the tile.
    pub tokens: usize,
    /// How many of the tile's leading tokens llama.cpp would run through its 4-token
    /// batched kernels (the first `n_tokens − n_tokens % 4` tokens of a `matmul` call);
    /// the rest go through its one-token kernels. Only kernels that mirror llama.cpp's
    /// repacked arithmetic (where the two differ) look at it.
    pub batched: usize,
    /// Tokens of the whole `matmul` call this tile belongs to. llama.cpp picks its
    /// arithmetic per call (its tiled K-quant path from 8 tokens on), so kernels that
    /// mirror it look at the call, not the tile.
    ///
    /// [`crate::matmul_rowwise`] passes `1` (with `batched: 0`, `expert: false`) for tiles
    /// of any `tokens`: a kernel must then give every token the bits of a one-token call,
    /// which holds as long as its arithmetic per output depends only on these three
    /// fields and `total_rows`, never on `tokens` or on where the tile starts.
    pub total_tokens: usize,
    /// Weight rows of the whole matrix (llama.cpp repacks only when they are a multiple
    /// of 8).
    pub total_rows: usize,
    /// The tile is part of an expert product (llama.cpp's `MUL_MAT_ID`), where repacked
    /// weights run one token at a time and tinyBLAS is never used.
    pub expert: bool,
}

/// Converts one f32 activation row into the activation (`vec_dot_type`) format:
/// `src.len()` is a whole number of blocks and `dst` exactly its row size.
pub type QuantizeActFn = fn(src: &[f32], dst: &mut [u8]);

/// A dot-product kernel for one weight type on one backend.
#[derive(Debug)]
pub struct Kernel {
    /// GGUF / ggml id of the weight type.
    pub type_id: u32,
    /// Backend name shown by [`crate::kernel_info`]: `"scalar"`, `"avx2"`, `"avx512vnni"`, ...
    pub backend: &'static str,
    /// Higher wins among available kernels of the same type.
    pub priority: i32,
    /// Whether this CPU can run the kernel (runtime feature detection).
    pub available: fn() -> bool,
    /// Type id the activations are quantized to (ggml's `vec_dot_type`).
    pub vec_dot_type: u32,
    /// One row · one activation row.
    pub vec_dot: VecDotFn,
    /// Optional many-rows × many-tokens kernel.
    pub tile: Option<TileFn>,
}

inventory::collect!(Kernel);

/// An activation quantizer (ggml's `from_float` of the CPU backend) for one activation type.
#[derive(Debug)]
pub struct ActQuantizer {
    /// GGUF / ggml id of the activation type (`Q8_0`, `Q8_1`, `Q8_K`, `F16`, ...).
    pub type_id: u32,
    /// Backend name.
    pub backend: &'static str,
    /// Higher wins among available quantizers of the same type.
    pub priority: i32,
    /// Whether this CPU can run it.
    pub available: fn() -> bool,
    /// The conversion.
    pub quantize: QuantizeActFn,
}

inventory::collect!(ActQuantizer);

/// Rewrites a weight matrix (`rows` × `cols`, as stored in GGUF) into a kernel's own layout.
pub type RepackFn = fn(w: &[u8], rows: usize, cols: usize) -> Vec<u8>;

/// A load-time layout for one weight type (llama.cpp's "repack"): the rewrite and the tile
/// kernel that reads it. The repacked bytes have the size of the original and keep every
/// 8-row group in its own `8 × row_size` bytes, so tiles split at multiples of 8 rows.
/// The activations are those of the type's [`Kernel`] (`vec_dot_type`).
#[derive(Debug)]
pub struct Repacker {
    /// GGUF / ggml id of the weight type.
    pub type_id: u32,
    /// Backend name.
    pub backend: &'static str,
    /// Higher wins among available repackers of the same type.
    pub priority: i32,
    /// Whether this CPU can run the tile kernel.
    pub available: fn() -> bool,
    /// Whether a matrix of this shape is repacked (llama.cpp: rows a multiple of 8).
    pub applies: fn(rows: usize, cols: usize) -> bool,
    /// The rewrite.
    pub repack: RepackFn,
    /// Tile kernel over repacked rows (`Tile::w` starts at an 8-row group, `rows` is a
    /// multiple of 8, `w_stride` is the original row size).
    pub tile: TileFn,
}

inventory::collect!(Repacker);

/// Always true: for portable (scalar) entries.
pub fn always() -> bool {
    true
}

struct Index {
    repackers: BTreeMap<u32, &'static Repacker>,
    kernels: BTreeMap<u32, &'static Kernel>,
    all_kernels: BTreeMap<u32, Vec<&'static Kernel>>,
    acts: BTreeMap<u32, &'static ActQuantizer>,
    all_acts: BTreeMap<u32, Vec<&'static ActQuantizer>>,
}

fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut all_kernels: BTreeMap<u32, Vec<&'static Kernel>> = BTreeMap::new();
        for k in inventory::iter::<Kernel> {
            all_kernels.entry(k.type_id).or_default().push(k);
        }
        let mut all_acts: BTreeMap<u32, Vec<&'static ActQuantizer>> = BTreeMap::new();
        for a in inventory::iter::<ActQuantizer> {
            all_acts.entry(a.type_id).or_default().push(a);
        }
        for v in all_kernels.values_mut() {
            v.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.backend.cmp(b.backend)));
        }
        for v in all_acts.values_mut() {
            v.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.backend.cmp(b.backend)));
        }
        let kernels =
            all_kernels.iter().filter_map(|(&id, v)| v.iter().find(|k| (k.available)()).map(|k| (id, *k))).collect();
        let acts =
            all_acts.iter().filter_map(|(&id, v)| v.iter().find(|a| (a.available)()).map(|a| (id, *a))).collect();
        let mut repackers: BTreeMap<u32, &'static Repacker> = BTreeMap::new();
        for r in inventory::iter::<Repacker> {
            if (r.available)() && repackers.get(&r.type_id).is_none_or(|o| o.priority < r.priority) {
                repackers.insert(r.type_id, r);
            }
        }
        Index { repackers, kernels, all_kernels, acts, all_acts }
    })
}

/// The kernel [`crate::matmul`] uses for weight type `type_id` on this CPU, `None` when
/// the type runs through the generic dequantize path.
pub fn kernel_for(type_id: u32) -> Option<&'static Kernel> {
    index().kernels.get(&type_id).copied()
}

/// The repacker for a `rows` × `cols` matrix of `type_id` on this CPU, if the type has
/// one that applies to the shape (and a kernel giving its activation type).
pub fn repacker_for(type_id: u32, rows: usize, cols: usize) -> Option<&'static Repacker> {
    let r = index().repackers.get(&type_id).copied()?;
    ((r.applies)(rows, cols) && kernel_for(type_id).is_some()).then_some(r)
}

/// Every registered kernel for `type_id` (available here or not), best first.
pub fn kernels_of(type_id: u32) -> &'static [&'static Kernel] {
    index().all_kernels.get(&type_id).map(|v| v.as_slice()).unwrap_or(&[])
}

/// The activation quantizer used for activation type `type_id` on this CPU.
pub fn act_quantizer_for(type_id: u32) -> Option<&'static ActQuantizer> {
    index().acts.get(&type_id).copied()
}

/// Every registered activation quantizer for `type_id`, best first.
pub fn act_quantizers_of(type_id: u32) -> &'static [&'static ActQuantizer] {
    index().all_acts.get(&type_id).map(|v| v.as_slice()).unwrap_or(&[])
}

/// Which path [`crate::matmul`] takes for weight type `type_id` here: the backend name of
/// the selected kernel (`"avx2"`, `"avx512vnni"`, `"scalar"`), or `"generic-dequant"`.
pub fn kernel_info(type_id: u32) -> &'static str {
    kernel_for(type_id).map(|k| k.backend).unwrap_or("generic-dequant")
}
