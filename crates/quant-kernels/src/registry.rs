//! The kernel registry: per (weight type, backend) dot-product kernels and per (activation
//! type, backend) activation quantizers, collected from `inventory` submissions.
//!
//! Selection ([`gguf_registry`]'s rule): among the entries for a type whose `available()`
//! is true (runtime CPU feature detection), the highest `priority` wins, ties broken by
//! backend name and reported by [`registry_problems`]. A kernel may own a load-time
//! layout ([`Repack`]); it is used only when that kernel is the one chosen. A weight type with no entry at all runs through
//! the generic path of [`crate::matmul`]: dequantize the weight row to f32 and dot it with
//! the f32 activations.

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
///
/// Build one with [`Kernel::new`] and the `with_*` methods (all `const`), and register it
/// with `inventory::submit!` (or `gguf_registry::submit!`).
#[derive(Debug)]
pub struct Kernel {
    /// GGUF / ggml id of the weight type.
    pub type_id: u32,
    /// Backend name shown by [`crate::kernel_info`]: `"scalar"`, `"avx2"`, `"avx512vnni"`, ...
    /// It breaks ties between kernels of one type and one priority (a tie is a registry
    /// problem all the same).
    pub backend: &'static str,
    /// Higher wins among available kernels of the same type.
    pub priority: i32,
    /// Whether this CPU can run the kernel (runtime feature detection, capped by
    /// [`crate::cpu`]).
    pub available: fn() -> bool,
    /// Type id the activations are quantized to (ggml's `vec_dot_type`).
    pub vec_dot_type: u32,
    /// One row · one activation row.
    pub vec_dot: VecDotFn,
    /// Optional many-rows × many-tokens kernel.
    pub tile: Option<TileFn>,
    /// The load-time layout this kernel reads, if it has one. Whether a matrix is
    /// repacked is decided by the kernel chosen for its type: a kernel without a layout
    /// (a plug-in that outranks the built-ins, say) gets GGUF's rows, never another
    /// kernel's layout or activations.
    pub repack: Option<Repack>,
    /// Tokens per tile the [`Kernel::tile`] wants in prompt batches (0: [`crate::matmul`]'s
    /// default shape). Such a tile gets all rows of the matrix and up to this many tokens
    /// (a multiple of 16, balanced over the pool's threads): the kernel decodes each
    /// weight band once per tile and transposes the tile's activations once. Its results
    /// must not depend on how the tokens are split into tiles (the split depends on the
    /// thread count). [`ALL_TOKENS`]: row blocks instead, each with every token of the
    /// batch.
    pub tile_tokens: usize,
}

/// [`Kernel::tile_tokens`] of a kernel whose prompt tiles are row blocks with all of the
/// batch's tokens: for weights that are costly to decode (the IQ lattice types on AVX2),
/// each row is then decoded once per product, and the rows balance over the threads
/// whatever the token count.
pub const ALL_TOKENS: usize = usize::MAX;

impl Kernel {
    /// A kernel for `type_id` on `backend`, always available, no tile, no layout.
    pub const fn new(type_id: u32, backend: &'static str, priority: i32, vec_dot_type: u32, vec_dot: VecDotFn) -> Self {
        Kernel {
            type_id,
            backend,
            priority,
            available: always,
            vec_dot_type,
            vec_dot,
            tile: None,
            repack: None,
            tile_tokens: 0,
        }
    }
    /// With a CPU-feature check.
    pub const fn with_available(self, available: fn() -> bool) -> Self {
        Kernel { available, ..self }
    }
    /// With a many-rows × many-tokens kernel.
    pub const fn with_tile(self, tile: TileFn) -> Self {
        Kernel { tile: Some(tile), ..self }
    }
    /// With a preferred tile shape for prompt batches (see [`Kernel::tile_tokens`]).
    pub const fn with_tile_tokens(self, tile_tokens: usize) -> Self {
        Kernel { tile_tokens, ..self }
    }
    /// With a load-time layout.
    pub const fn with_repack(self, repack: Repack) -> Self {
        Kernel { repack: Some(repack), ..self }
    }
    /// `gguf_registry::submit!`'s hook: a kernel's provider is its backend, so the origin
    /// is not recorded.
    pub const fn with_origin(self, _origin: &'static str) -> Self {
        self
    }
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

/// A load-time layout of one kernel (llama.cpp's "repack"): the rewrite and the tile
/// kernel that reads it. The repacked bytes have the size of the original and keep every
/// 8-row group in its own `8 × row_size` bytes, so tiles split at multiples of 8 rows.
/// The activations are those of the owning [`Kernel`] (`vec_dot_type`).
#[derive(Debug)]
pub struct Repack {
    /// The layout's name, shown by [`crate::Repacked::backend`]: `"q4_0x8"`.
    pub name: &'static str,
    /// Whether a matrix of this shape is repacked (llama.cpp: rows a multiple of 8).
    pub applies: fn(rows: usize, cols: usize) -> bool,
    /// The rewrite.
    pub repack: RepackFn,
    /// Tile kernel over repacked rows (`Tile::w` starts at an 8-row group, `rows` is a
    /// multiple of 8, `w_stride` is the original row size).
    pub tile: TileFn,
}

/// Always true: for portable (scalar) entries.
pub fn always() -> bool {
    true
}

/// Kernels and activation quantizers: one entry per backend of a type id, the backend
/// breaks ties.
macro_rules! per_backend_entry {
    ($ty:ty, $kind:literal) => {
        impl gguf_registry::Entry for $ty {
            type Key = u32;
            const KIND: &'static str = $kind;
            const MANY_PER_KEY: bool = true;
            fn keys(&self) -> Vec<u32> {
                vec![self.type_id]
            }
            fn priority(&self) -> i32 {
                self.priority
            }
            fn provider(&self) -> &str {
                self.backend
            }
            fn available(&self) -> bool {
                (self.available)()
            }
        }
    };
}

per_backend_entry!(Kernel, "kernel for type id");
per_backend_entry!(ActQuantizer, "activation quantizer for type id");

fn kernels() -> &'static gguf_registry::Registry<Kernel> {
    static INDEX: OnceLock<gguf_registry::Registry<Kernel>> = OnceLock::new();
    INDEX.get_or_init(|| gguf_registry::Registry::new(inventory::iter::<Kernel>))
}

fn acts() -> &'static gguf_registry::Registry<ActQuantizer> {
    static INDEX: OnceLock<gguf_registry::Registry<ActQuantizer>> = OnceLock::new();
    INDEX.get_or_init(|| gguf_registry::Registry::new(inventory::iter::<ActQuantizer>))
}

/// The kernel [`crate::matmul`] uses for weight type `type_id` on this CPU (the available
/// one of highest priority, ties by backend name), `None` when the type runs through the
/// generic dequantize path.
pub fn kernel_for(type_id: u32) -> Option<&'static Kernel> {
    kernels().get(&type_id)
}

/// The layout a `rows` × `cols` matrix of `type_id` is repacked into on this CPU: the one
/// of the kernel chosen for the type, when it has one that applies to the shape.
pub fn repack_for(type_id: u32, rows: usize, cols: usize) -> Option<(&'static Kernel, &'static Repack)> {
    let k = kernel_for(type_id)?;
    let r = k.repack.as_ref()?;
    (r.applies)(rows, cols).then_some((k, r))
}

/// Every registered kernel for `type_id` (available here or not), best first.
pub fn kernels_of(type_id: u32) -> &'static [&'static Kernel] {
    kernels().candidates(&type_id)
}

/// The activation quantizer used for activation type `type_id` on this CPU.
pub fn act_quantizer_for(type_id: u32) -> Option<&'static ActQuantizer> {
    acts().get(&type_id)
}

/// Every registered activation quantizer for `type_id`, best first.
pub fn act_quantizers_of(type_id: u32) -> &'static [&'static ActQuantizer] {
    acts().candidates(&type_id)
}

/// Which path [`crate::matmul`] takes for weight type `type_id` here: the backend name of
/// the selected kernel (`"avx2"`, `"avx512vnni"`, `"scalar"`), or `"generic-dequant"`.
pub fn kernel_info(type_id: u32) -> &'static str {
    kernel_for(type_id).map(|k| k.backend).unwrap_or("generic-dequant")
}

/// Clashes in the kernel and activation-quantizer registries (two entries of one type,
/// backend and priority). Empty for the built-ins; tested.
pub fn registry_problems() -> gguf_registry::Report {
    let mut r = kernels().report();
    r.extend(acts().report());
    r
}
