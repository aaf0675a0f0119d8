//! The CUDA kernel registry: per weight type, the CUDA C source of its kernels and their
//! entry points, collected from `inventory` submissions. This is the `cuda` backend of a
//! type, next to the CPU kernels `quant-kernels` registers per (type, backend): both are
//! keyed by the GGUF type id, so a type with no CUDA entry is simply not offloaded.
//!
//! A source is compiled as [`PRELUDE`] followed by the type's own file, so it can use
//! the prelude's loads, fp16 conversions, `dp4a`, the q8_1 accessors and the
//! `GGUF_DEQUANTIZE_KERNEL` / `GGUF_MMVQ_KERNEL` / `GGUF_MMV_KERNEL` macros, which name
//! the entry points `dequantize_<type>`, `dequantize_<type>_f16`, `mmvq_<type>` and
//! `mmv_<type>`. A third-party crate registers its own type the same way (see
//! `tests/it/plugin.rs`); a higher [`CudaKernels::priority`] replaces a built-in entry.

use std::sync::OnceLock;

/// The prelude prepended to every kernel source (`kernels/common.cuh`).
pub const PRELUDE: &str = include_str!("../kernels/common.cuh");

/// What a mat-vec kernel takes as activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Act {
    /// q8_1 blocks, quantized on the device by `quantize_q8_1` (the MMVQ path).
    Q8_1,
    /// f32 (float weight types).
    F32,
}

/// A mat-vec entry point: `(w, x, y, ncols, nrows, row_bytes)`, one warp per row,
/// 128-thread blocks, `gridDim.y` activation rows.
#[derive(Clone, Copy, Debug)]
pub struct MatVec {
    /// The `extern "C"` kernel name.
    pub entry: &'static str,
    /// Its activation format.
    pub act: Act,
}

/// The CUDA kernels of one type.
#[derive(Debug)]
pub struct CudaKernels {
    /// GGUF / ggml type id.
    pub type_id: u32,
    /// ggml's type name (`"q4_K"`); also the source's name in errors and in the cache.
    pub name: &'static str,
    /// The CUDA C source, compiled after [`PRELUDE`].
    pub source: &'static str,
    /// `dequantize_<type>(src, float *dst, int64 n)`, one thread per element.
    pub dequantize: Option<&'static str>,
    /// The same writing fp16 bits.
    pub dequantize_f16: Option<&'static str>,
    /// The decode mat-vec.
    pub matvec: Option<MatVec>,
    /// `quantize_<type>(const float *x, uint8_t *y, int64 n)`: only the activation type.
    pub quantize: Option<&'static str>,
    /// The mat-vec check's tolerance, relative to `Σ |w_i| |x_i|` of a row (the kernel
    /// runner in `tests/`): float rounding, and where the kernel uses q8_1's fp16 `s`,
    /// that rounding too.
    pub tolerance: f32,
    /// Higher wins when two entries claim one type id; built-ins have 0.
    pub priority: i32,
    /// The registering module (`gguf_registry::submit!` fills it).
    pub origin: &'static str,
}

impl CudaKernels {
    /// A type's source with no entry points yet.
    pub const fn new(type_id: u32, name: &'static str, source: &'static str) -> Self {
        CudaKernels {
            type_id,
            name,
            source,
            dequantize: None,
            dequantize_f16: None,
            matvec: None,
            quantize: None,
            tolerance: 1e-5,
            priority: 0,
            origin: "",
        }
    }
    /// With `dequantize_<type>` and `dequantize_<type>_f16` (both from the macro).
    pub const fn with_dequantize(self, f32_entry: &'static str, f16_entry: &'static str) -> Self {
        CudaKernels { dequantize: Some(f32_entry), dequantize_f16: Some(f16_entry), ..self }
    }
    /// With a mat-vec kernel.
    pub const fn with_matvec(self, entry: &'static str, act: Act) -> Self {
        CudaKernels { matvec: Some(MatVec { entry, act }), ..self }
    }
    /// With an activation quantizer.
    pub const fn with_quantize(self, entry: &'static str) -> Self {
        CudaKernels { quantize: Some(entry), ..self }
    }
    /// With a mat-vec tolerance.
    pub const fn with_tolerance(self, tolerance: f32) -> Self {
        CudaKernels { tolerance, ..self }
    }

    /// The full text NVRTC compiles: the prelude, then the type's source.
    pub fn full_source(&self) -> String {
        format!("{PRELUDE}\n#line 1 \"{}.cu\"\n{}", self.name, self.source)
    }

    /// Every entry point the source must define.
    pub fn entry_points(&self) -> Vec<&'static str> {
        [self.dequantize, self.dequantize_f16, self.matvec.map(|m| m.entry), self.quantize]
            .into_iter()
            .flatten()
            .collect()
    }
}

inventory::collect!(CudaKernels);

gguf_registry::named_entry!(CudaKernels, "CUDA kernels for type id", u32, |k: &CudaKernels| vec![k.type_id]);

fn index() -> &'static gguf_registry::Registry<CudaKernels> {
    static INDEX: OnceLock<gguf_registry::Registry<CudaKernels>> = OnceLock::new();
    INDEX.get_or_init(|| gguf_registry::Registry::new(inventory::iter::<CudaKernels>))
}

/// The CUDA kernels of a type id (the highest priority entry), if any.
pub fn kernels(type_id: u32) -> Option<&'static CudaKernels> {
    index().get(&type_id)
}

/// Every type's chosen entry, by type id.
pub fn all() -> Vec<&'static CudaKernels> {
    index().winners()
}

/// Clashes (two entries of one type id at one priority) and overrides.
pub fn registry_problems() -> gguf_registry::Report {
    index().report()
}

/// Every registered entry, replaced ones included (what the compile check builds).
pub fn entries() -> &'static [&'static CudaKernels] {
    index().entries()
}
