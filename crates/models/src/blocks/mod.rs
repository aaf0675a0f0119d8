//! The public building blocks of a decoder-only transformer, the ones the built-in
//! architectures are made of: [`RmsNorm`], [`Linear`] (a weight matrix, quantized in place,
//! with its optional bias), [`Attention`] (Q/K/V projections, QK-norm, rope, the KV cache
//! and llama.cpp's flash-attention arithmetic, the output projection) and [`attend`] (just
//! the attention over the cache, for a family with projections of its own), [`Mla`]
//! (DeepSeek's multi-head latent attention over a compressed cache row), [`Mamba2`] (the
//! Mamba-2 selective-state-space mixer), the FFNs
//! ([`GatedFfn`], [`Moe`], [`Ffn`]) and [`Embedding`].
//!
//! Every block computes what the matching part of llama.cpp's graph computes, in the same
//! order of operations, so a model assembled from them gives llama.cpp's logits.
//!
//! # One batch pass
//!
//! A pass evaluates the rows of one or more sequences at once. [`RowLayout::lay_out`] puts
//! the single-token sequences first and each longer one after, contiguously; a [`Pass`]
//! carries the layout, the worker pool and an activation observer (`gguf imatrix`) to every
//! block. A block's result for one sequence never depends on the others in the pass.
//!
//! ```no_run
//! use gguf_models::blocks::{Pass, RmsNorm, RowLayout};
//! # fn demo(norm: &RmsNorm, wq: &gguf_models::blocks::Linear, x: &[f32]) -> gguf_models::Result<()> {
//! let pool = gguf_models::Pool::new(2);
//! let (rows, row0) = RowLayout::lay_out(&[5]); // one sequence of 5 tokens
//! assert_eq!(row0, [0]);
//! let pass = Pass { pool: &pool, observer: None, rows: &rows };
//! let (mut h, mut q) = (Vec::new(), Vec::new());
//! norm.forward(x, &mut h);
//! wq.forward(&pass, &h, &mut q)?;
//! # Ok(()) }
//! ```

mod attention;
mod delta_net;
mod ffn;
mod linear;
mod mamba2;
mod mla;
mod norm;

use std::sync::Arc;

pub use attention::{
    attend, attend_full, attend_softcap, attend_with, temperature, Attention, AttentionScratch, Heads, Scores, SeqKv,
    SeqView,
};
pub use delta_net::{
    causal_conv, dot_ggml, sigmoid, silu_inplace, softplus, DeltaNet, DeltaNetDims, DeltaNetScratch, RecurrentState,
    SeqRs,
};
pub use ffn::{mask_groups, Activation, Experts, Ffn, FfnScratch, GateUp, GatedFfn, Gating, Moe};
pub use linear::{Embedding, Linear};
pub use mamba2::{group_rms_norm, ssm_scan_head, Mamba2, Mamba2Dims, Mamba2Scratch};
pub use mla::{Mla, MlaDims, MlaScratch};
pub use norm::{layer_norm_row, LayerNorm, RmsNorm};

use quant_kernels::Pool;

use crate::model::Observer;

/// How the rows of one batch pass are laid out: the single-token sequences' rows first
/// (`0..n_single`, one per sequence), then each multi-token sequence's rows contiguously.
/// Products over the single rows use [`quant_kernels::matmul_rowwise`] (each row's
/// arithmetic that of a one-token product), every multi-token sequence gets a product of
/// its own: so each row's result is the one its sequence would get alone.
#[derive(Debug, Clone, Default)]
pub struct RowLayout {
    n_single: usize,
    multi: Vec<(usize, usize)>,
    n: usize,
}

impl RowLayout {
    /// Lays out sequences of `lens` tokens (each ≥ 1); returns the layout and each
    /// sequence's first row.
    pub fn lay_out(lens: &[usize]) -> (RowLayout, Vec<usize>) {
        let mut order: Vec<usize> = (0..lens.len()).collect();
        order.sort_by_key(|&i| lens[i] > 1);
        let mut rows = RowLayout::default();
        let mut row0 = vec![0; lens.len()];
        for &i in &order {
            row0[i] = rows.n;
            rows.push(lens[i]);
        }
        (rows, row0)
    }

    /// One sequence of `n` rows.
    pub fn one(n: usize) -> RowLayout {
        let mut rows = RowLayout::default();
        rows.push(n);
        rows
    }

    /// Appends a sequence of `n` rows: to the single rows when `n == 1` and no longer
    /// sequence came before, else as a product of its own.
    pub fn push(&mut self, n: usize) {
        if n == 1 && self.multi.is_empty() {
            self.n_single += 1;
            self.n += 1;
        } else {
            self.push_product(n);
        }
    }

    /// Appends `n` rows that get a product of their own even when `n == 1`.
    pub fn push_product(&mut self, n: usize) {
        self.multi.push((self.n, n));
        self.n += n;
    }

    /// Rows in all.
    pub fn n_rows(&self) -> usize {
        self.n
    }

    /// The leading single-token rows.
    pub fn n_single(&self) -> usize {
        self.n_single
    }

    /// `(first row, rows)` of each multi-token sequence.
    pub fn multi(&self) -> &[(usize, usize)] {
        &self.multi
    }
}

/// What every block of one pass shares: the worker pool, the activation observer and the
/// row layout.
#[derive(Clone, Copy)]
pub struct Pass<'a> {
    /// Worker threads.
    pub pool: &'a Pool,
    /// Sees the input of every weight product (`gguf imatrix`), when set.
    pub observer: Option<&'a Arc<dyn Observer>>,
    /// The rows of the pass.
    pub rows: &'a RowLayout,
}

impl<'a> Pass<'a> {
    /// The same pass over another row layout (a subset of the rows: the output head's,
    /// one sequence's).
    pub fn with_rows<'b>(&self, rows: &'b RowLayout) -> Pass<'b>
    where
        'a: 'b,
    {
        Pass { pool: self.pool, observer: self.observer, rows }
    }
}

/// `GGUF_DUMP_DIR=DIR`: write intermediate tensors as raw f32 under llama.cpp's `cb_eval`
/// names (`attn_norm-0`, `kqv_out-0`, `l_out-0`, `result_output`, ...), to compare a forward
/// pass with `cargo xtask llama-dump` node by node. A debugging aid; off by default.
pub fn dump(name: &str, data: &[f32]) {
    static DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    if let Some(dir) = DIR.get_or_init(|| std::env::var_os("GGUF_DUMP_DIR").map(Into::into)) {
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        let _ = std::fs::create_dir_all(dir);
        let _ = std::fs::write(dir.join(format!("{name}.f32")), bytes);
    }
}

/// The output head of one sequence's `n` rows `x` (`width` floats each): the rows `logits`
/// asks for (the last, or all as one product), through `norm` and `output`; empty for
/// [`crate::Logits::None`]. The caller applies what follows (soft-caps) and dumps
/// `result_output`.
pub fn output_head(
    pass: &Pass<'_>,
    norm: &RmsNorm,
    output: &Linear,
    x: &[f32],
    n: usize,
    logits: crate::Logits,
    tmp: &mut Vec<f32>,
) -> crate::Result<Vec<f32>> {
    let width = x.len() / n.max(1);
    let (r0, m, rows) = match logits {
        crate::Logits::None => return Ok(Vec::new()),
        crate::Logits::Last => (n - 1, 1, RowLayout::one(1)),
        crate::Logits::All => {
            let mut r = RowLayout::default();
            r.push_product(n);
            (0, n, r)
        }
    };
    let mut sel = x[r0 * width..(r0 + m) * width].to_vec();
    norm.forward_inplace(&mut sel, tmp);
    dump("result_norm", &sel);
    let mut out = Vec::new();
    output.forward(&pass.with_rows(&rows), &sel, &mut out)?;
    Ok(out)
}

/// `y[i] += x[i]` (residual adds) spread over `pool` in runs of 1024 elements.
pub fn add_on(pool: &Pool, y: &mut [f32], x: &[f32]) {
    const RUN: usize = 1024;
    pool.for_rows(y, RUN, &|r0, run| quant_kernels::ops::add_inplace(run, x.get(r0 * RUN..).unwrap_or_default()));
}

/// Adds `b` to every row of `y` (`b.len()` wide).
pub fn add_bias(y: &mut [f32], b: Option<&[f32]>) {
    if let Some(b) = b {
        for row in y.chunks_exact_mut(b.len()) {
            quant_kernels::ops::add_inplace(row, b);
        }
    }
}
