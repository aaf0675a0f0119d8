//! [`Matrix`] (a borrowed, quantized weight matrix), [`matmul`] and [`matmul_rowwise`].

use std::sync::Mutex;

use ggml_quants::TypeTraits;

use crate::registry::{act_quantizer_for, kernel_for, repack_for, Kernel, Repack, Tile};
use crate::{ops, Error, Pool};

/// A row-major weight matrix of one ggml type, borrowed as stored in GGUF: ggml `ne0 =
/// cols` is contiguous, `ne1 = rows`; each row is `row_size(type, cols)` bytes.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    traits: &'static TypeTraits,
    data: &'a [u8],
    rows: usize,
    cols: usize,
    row_bytes: usize,
    /// `data` is in the layout of this kernel (its [`Kernel::repack`]), not GGUF's.
    repacked: Option<&'static Kernel>,
}

/// A weight matrix rewritten at load time into a kernel's layout (see
/// [`crate::registry::Repack`]): owned bytes, used through [`Repacked::matrix`].
#[derive(Debug)]
pub struct Repacked {
    bytes: Vec<u8>,
    by: &'static Kernel,
    layout: &'static Repack,
    type_id: u32,
    rows: usize,
    cols: usize,
}

impl Repacked {
    /// Repacks `w` when the kernel chosen for its type on this CPU has a layout for its
    /// shape (`None` otherwise: use `w` as it is). `w` must be in GGUF's layout.
    pub fn new(w: &Matrix<'_>) -> Option<Repacked> {
        if w.repacked.is_some() {
            return None;
        }
        let (by, layout) = repack_for(w.type_id(), w.rows, w.cols)?;
        let bytes = (layout.repack)(w.data, w.rows, w.cols);
        (bytes.len() == w.data.len()).then_some(Repacked {
            bytes,
            by,
            layout,
            type_id: w.type_id(),
            rows: w.rows,
            cols: w.cols,
        })
    }

    /// The repacked matrix, for [`matmul`] (its rows cannot be read one by one).
    pub fn matrix(&self) -> Matrix<'_> {
        let traits = ggml_quants::lookup_id(self.type_id).expect("type checked when repacked");
        let row_bytes = self.bytes.len() / self.rows.max(1);
        Matrix { traits, data: &self.bytes, rows: self.rows, cols: self.cols, row_bytes, repacked: Some(self.by) }
    }

    /// The owning kernel's backend and the layout: `"avx512vnni-q4_0x8"`.
    pub fn backend(&self) -> String {
        format!("{}-{}", self.by.backend, self.layout.name)
    }

    /// The kernel whose layout this is.
    pub fn kernel(&self) -> &'static Kernel {
        self.by
    }
}

impl<'a> Matrix<'a> {
    /// Checks that `type_id` is registered, that `cols` is a whole number of its blocks and
    /// that `data` holds exactly `rows` rows.
    pub fn new(type_id: u32, data: &'a [u8], rows: usize, cols: usize) -> Result<Self, Error> {
        let traits = ggml_quants::lookup_id(type_id)?;
        let row_bytes = traits.row_size(cols).map_err(|_| Error::NotWholeBlocks {
            type_name: traits.name,
            cols,
            block_size: traits.block_size,
        })?;
        let expected =
            rows.checked_mul(row_bytes).ok_or(Error::Overflow { what: "matrix bytes (rows × row size)" })?;
        if data.len() != expected {
            return Err(Error::SizeMismatch { what: "matrix data bytes", expected, found: data.len() });
        }
        Ok(Matrix { traits, data, rows, cols, row_bytes, repacked: None })
    }

    /// Rows (ggml `ne1`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (ggml `ne0`).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The ggml type id.
    pub fn type_id(&self) -> u32 {
        self.traits.id
    }

    /// The type's registry entry.
    pub fn traits(&self) -> &'static TypeTraits {
        self.traits
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The raw bytes of row `r`.
    pub fn row(&self, r: usize) -> Result<&'a [u8], Error> {
        if self.repacked.is_some() {
            return Err(Error::RepackedRows { type_name: self.traits.name });
        }
        if r >= self.rows {
            return Err(Error::RowOutOfRange { row: r, rows: self.rows });
        }
        Ok(&self.data[r * self.row_bytes..(r + 1) * self.row_bytes])
    }

    /// Decodes row `r` into `out` (`cols` floats), exactly as ggml's `to_float` (embedding
    /// lookups: ggml's `get_rows`).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), Error> {
        let row = self.row(r)?;
        if out.len() != self.cols {
            return Err(Error::SizeMismatch {
                what: "dequantize_row output length",
                expected: self.cols,
                found: out.len(),
            });
        }
        self.traits.dequantize(row, out)?;
        Ok(())
    }
}

/// Token count from which [`matmul`] splits the work by token blocks rather than by row blocks.
const TOKEN_SPLIT_FROM: usize = 16;
/// Most tokens per token block.
const MAX_TOKEN_BLOCK: usize = 16;
/// Activation bytes per token block that should stay in L1/L2.
const TOKEN_BLOCK_BYTES: usize = 64 * 1024;
/// Weight bytes per row tile in the token-block split (L2-resident; measured: 16 KiB
/// tiles are 2× slower than 256 KiB ones because of the per-tile activation set-up).
const ROW_TILE_BYTES: usize = 256 * 1024;
/// Row blocks per pool thread of a [`matmul_rowwise`] of 2..=8 tokens (8 for one token).
const ROWWISE_TILES_PER_THREAD: usize = 4;
/// Elements from which the activation quantization runs on the pool.
const PARALLEL_QUANT_FROM: usize = 1 << 15;

/// How the product is computed for one weight type.
#[derive(Clone, Copy)]
enum Path {
    Kernel { k: &'static Kernel, act: &'static TypeTraits, quantize: fn(&[f32], &mut [u8]) },
    Generic,
}

fn path_for(w: &Matrix<'_>) -> Result<Path, Error> {
    // A repacked matrix runs through the kernel that owns its layout.
    let Some(k) = w.repacked.or_else(|| kernel_for(w.type_id())) else {
        return Ok(Path::Generic);
    };
    let act = ggml_quants::lookup_id(k.vec_dot_type)?;
    let quantize = match act_quantizer_for(k.vec_dot_type) {
        Some(q) => q.quantize,
        None => act
            .quantize_ref_fn
            .ok_or(Error::NoActivationQuantizer { type_name: w.traits.name, vec_dot_type: k.vec_dot_type })?,
    };
    Ok(Path::Kernel { k, act, quantize })
}

thread_local! {
    static ACT_BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `y[t * rows + r] = Σ_c W[r][c] · x[t * cols + c]` for `t in 0..n_tokens`.
///
/// The activations are converted once to the kernel's activation type (ggml's
/// `vec_dot_type`: Q8_0 for q4_0/q5_0/q8_0, Q8_1 for q4_1/q5_1, Q8_K for the K types, F16,
/// BF16 or F32 for those weights), with ggml-cpu's quantizer, then every output is one
/// kernel dot product. A weight type without a registered kernel is dequantized row by
/// row and dotted with the f32 activations. Work is split over `pool` by row blocks
/// (few tokens) or token blocks (prompt processing).
pub fn matmul(pool: &Pool, w: &Matrix<'_>, x: &[f32], n_tokens: usize, y: &mut [f32]) -> Result<(), Error> {
    matmul_imp(pool, w, x, n_tokens, y, Mode::Call { expert: false })
}

/// [`matmul`] for one expert of a mixture-of-experts layer (`x` holds the tokens routed
/// to it). The product is the same; only the arithmetic llama.cpp's `MUL_MAT_ID` uses
/// differs (repacked weights one token at a time, no tinyBLAS), which kernels that
/// mirror it follow.
pub fn matmul_expert(pool: &Pool, w: &Matrix<'_>, x: &[f32], n_tokens: usize, y: &mut [f32]) -> Result<(), Error> {
    matmul_imp(pool, w, x, n_tokens, y, Mode::Call { expert: true })
}

/// `y[t] = W · x[t]` for every t, each output row bitwise equal to what
/// `matmul(pool, w, &x[t*cols..][..cols], 1, &mut y[t*rows..][..rows])` gives,
/// whatever `n_tokens` is; weights are read once per tile for all tokens.
///
/// For a server's decode step over several sequences: a sequence's result never depends
/// on which others share the batch (nor on the pool's thread count). [`matmul`] of
/// `n_tokens` picks its arithmetic by the token count, as llama.cpp does (tinyBLAS, the
/// repacked 4-token and tiled kernels), so its rows may differ in the last bits from
/// one-token products; this one runs every tile with [`Tile::total_tokens`] `= 1` and
/// [`Tile::batched`] `= 0` — the one-token arithmetic for each of the tile's tokens —
/// and splits the work by row blocks only.
pub fn matmul_rowwise(pool: &Pool, w: &Matrix<'_>, x: &[f32], n_tokens: usize, y: &mut [f32]) -> Result<(), Error> {
    matmul_imp(pool, w, x, n_tokens, y, Mode::Rowwise)
}

/// One token through several matrices of the same width (a layer's Q, K and V, its gate
/// and up): `ys[i] = W_i · x`, each output bitwise equal to its own one-token
/// [`matmul_rowwise`] — the same kernels and activations, only scheduled as one job over
/// all of the matrices' rows (one split of their concatenation, as a one-token product's), so the pool
/// is woken once and the small matrices do not each pay a job's start and end.
/// Matrices without a kernel, or a row count (but the last's) not a multiple of 16, run
/// one by one.
pub fn matmul_rowwise_group(pool: &Pool, ws: &[Matrix<'_>], x: &[f32], ys: &mut [&mut [f32]]) -> Result<(), Error> {
    if ws.len() != ys.len() {
        return Err(Error::SizeMismatch { what: "outputs of a grouped product", expected: ws.len(), found: ys.len() });
    }
    for (w, y) in ws.iter().zip(ys.iter()) {
        check_lengths(w.rows, w.cols, x, 1, y)?;
    }
    let paths = ws.iter().map(path_for).collect::<Result<Vec<_>, _>>()?;
    let groupable = ws.len() > 1
        && ws.iter().all(|w| w.cols > 0 && w.rows > 0)
        && ws[..ws.len() - 1].iter().all(|w| w.rows.is_multiple_of(16))
        && paths.iter().all(|p| matches!(p, Path::Kernel { .. }));
    if !groupable {
        for (w, y) in ws.iter().zip(ys.iter_mut()) {
            matmul_rowwise(pool, w, x, 1, y)?;
        }
        return Ok(());
    }
    // Each matrix's activations (by its kernel's type) and tile, as `run_path` builds them.
    let mut acts: Vec<Vec<u8>> = Vec::with_capacity(ws.len());
    for (w, p) in ws.iter().zip(&paths) {
        let Path::Kernel { k: _, act, quantize } = *p else { unreachable!("checked above") };
        if let Some(owner) = w.repacked.filter(|o| o.vec_dot_type != act.id) {
            return Err(Error::NoActivationQuantizer { type_name: w.traits.name, vec_dot_type: owner.vec_dot_type });
        }
        let act_row = act.row_size(w.cols).map_err(|_| Error::NotWholeBlocks {
            type_name: act.name,
            cols: w.cols,
            block_size: act.block_size,
        })?;
        let mut xq = vec![0u8; act_row];
        quantize(x, &mut xq);
        acts.push(xq);
    }
    let tiles: Vec<Box<TileClosure<'_>>> = ws
        .iter()
        .zip(&paths)
        .zip(&acts)
        .map(|((w, p), xq)| {
            let Path::Kernel { k, .. } = *p else { unreachable!("checked above") };
            let f: Box<TileClosure<'_>> = Box::new(move |r0, nr, _t0, _nt, out: &mut [f32], ys| {
                let t = Tile {
                    n: w.cols,
                    w: &w.data[r0 * w.row_bytes..(r0 + nr) * w.row_bytes],
                    w_stride: w.row_bytes,
                    rows: nr,
                    x: xq,
                    x_stride: xq.len(),
                    tokens: 1,
                    batched: 0,
                    total_tokens: 1,
                    total_rows: w.rows,
                    expert: false,
                };
                run_tile(w, k, &t, out, ys);
            });
            f
        })
        .collect();
    // Global row `g` is matrix `i`'s row `g - starts[i]`.
    let mut starts = Vec::with_capacity(ws.len() + 1);
    let mut total = 0;
    for w in ws {
        starts.push(total);
        total += w.rows;
    }
    starts.push(total);
    let bytes: usize = ws.iter().map(|w| w.rows * w.row_bytes).sum();
    let nth = pool.n_threads();
    let ranges = Ranges::new(total, nth, CLAIM_MIN_BYTES / (bytes / total).max(1));
    let ys = Mutex::new(ys);
    let run = |(g0, n): (usize, usize), out: &mut Vec<f32>| {
        let mut g = g0;
        while g < g0 + n {
            let i = starts.partition_point(|&s| s <= g) - 1;
            let (r0, nr) = (g - starts[i], (g0 + n).min(starts[i + 1]) - g);
            out.clear();
            out.resize(nr, 0.0);
            tiles[i](r0, nr, 0, 1, out, nr);
            ys.lock().unwrap_or_else(|e| e.into_inner())[i][r0..r0 + nr].copy_from_slice(out);
            g += nr;
        }
    };
    ranges.run(pool, &run);
    Ok(())
}

/// Checks `x` (`n_tokens × cols`) and `y` (`n_tokens × rows`).
fn check_lengths(rows: usize, cols: usize, x: &[f32], n_tokens: usize, y: &[f32]) -> Result<(), Error> {
    let x_len = n_tokens.checked_mul(cols).ok_or(Error::Overflow { what: "activation length (n_tokens × cols)" })?;
    if x.len() != x_len {
        return Err(Error::SizeMismatch {
            what: "activation length (n_tokens × cols)",
            expected: x_len,
            found: x.len(),
        });
    }
    let y_len = n_tokens.checked_mul(rows).ok_or(Error::Overflow { what: "output length (n_tokens × rows)" })?;
    if y.len() != y_len {
        return Err(Error::SizeMismatch { what: "output length (n_tokens × rows)", expected: y_len, found: y.len() });
    }
    Ok(())
}

/// Whose arithmetic a product follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// llama.cpp's for one call of `n_tokens` ([`matmul`], [`matmul_expert`]).
    Call {
        /// An expert product (`MUL_MAT_ID`).
        expert: bool,
    },
    /// Each token as in a one-token [`matmul`] ([`matmul_rowwise`]).
    Rowwise,
}

fn matmul_imp(pool: &Pool, w: &Matrix<'_>, x: &[f32], n_tokens: usize, y: &mut [f32], mode: Mode) -> Result<(), Error> {
    check_lengths(w.rows, w.cols, x, n_tokens, y)?;
    if y.is_empty() {
        return Ok(());
    }
    if w.cols == 0 {
        y.fill(0.0);
        return Ok(());
    }
    run_path(pool, w, x, n_tokens, y, mode, path_for(w)?)
}

/// [`matmul_imp`] along a given path (lengths checked, `cols > 0`, `y` not empty); the
/// tests force each registered backend through it.
fn run_path(
    pool: &Pool,
    w: &Matrix<'_>,
    x: &[f32],
    n_tokens: usize,
    y: &mut [f32],
    mode: Mode,
    path: Path,
) -> Result<(), Error> {
    let (rows, cols) = (w.rows, w.cols);
    match path {
        Path::Kernel { k, act, quantize } => {
            // A layout is read only with the activations of the kernel that owns it.
            if let Some(owner) = w.repacked.filter(|o| o.vec_dot_type != act.id) {
                return Err(Error::NoActivationQuantizer {
                    type_name: w.traits.name,
                    vec_dot_type: owner.vec_dot_type,
                });
            }
            let act_row = act.row_size(cols).map_err(|_| Error::NotWholeBlocks {
                type_name: act.name,
                cols,
                block_size: act.block_size,
            })?;
            let mut xq = ACT_BUF.with(|b| b.take());
            xq.clear();
            xq.resize(n_tokens * act_row, 0);
            quantize_acts(pool, quantize, x, cols, &mut xq, act_row);
            // The fields by which kernels that mirror llama.cpp pick their arithmetic: the
            // call's, or those of a one-token call for every token.
            let (expert, total_tokens) = match mode {
                Mode::Call { expert } => (expert, n_tokens),
                Mode::Rowwise => (false, 1),
            };
            let tile = |r0: usize, nr: usize, t0: usize, nt: usize, out: &mut [f32], ys: usize| {
                let t = Tile {
                    n: cols,
                    w: &w.data[r0 * w.row_bytes..(r0 + nr) * w.row_bytes],
                    w_stride: w.row_bytes,
                    rows: nr,
                    x: &xq[t0 * act_row..(t0 + nt) * act_row],
                    x_stride: act_row,
                    tokens: nt,
                    batched: if expert || total_tokens == 1 {
                        0
                    } else {
                        (n_tokens - n_tokens % 4).saturating_sub(t0).min(nt)
                    },
                    total_tokens,
                    total_rows: rows,
                    expert,
                };
                run_tile(w, k, &t, out, ys);
            };
            let shape = Shape { act_row_bytes: act_row, w_row_bytes: w.row_bytes, tile_tokens: k.tile_tokens };
            split(pool, mode, rows, n_tokens, shape, y, &tile);
            ACT_BUF.with(|b| b.set(xq));
        }
        Path::Generic => {
            if w.repacked.is_some() {
                return Err(Error::RepackedRows { type_name: w.traits.name });
            }
            let traits = w.traits;
            let tile = |r0: usize, nr: usize, t0: usize, nt: usize, out: &mut [f32], ys: usize| {
                let mut row = vec![0f32; cols];
                for r in 0..nr {
                    let src = &w.data[(r0 + r) * w.row_bytes..(r0 + r + 1) * w.row_bytes];
                    (traits.dequantize_fn)(src, &mut row);
                    for t in 0..nt {
                        out[t * ys + r] = ops::dot_f32(&row, &x[(t0 + t) * cols..(t0 + t + 1) * cols]);
                    }
                }
            };
            let shape = Shape { act_row_bytes: cols * 4, w_row_bytes: w.row_bytes, tile_tokens: 0 };
            split(pool, mode, rows, n_tokens, shape, y, &tile);
        }
    }
    Ok(())
}

/// The default [`crate::registry::TileFn`]: one [`crate::registry::VecDotFn`] call per output.
pub fn tile_by_vec_dot(vec_dot: crate::registry::VecDotFn, t: &Tile<'_>, y: &mut [f32], y_stride: usize) {
    for r in 0..t.rows {
        let wr = &t.w[r * t.w_stride..(r + 1) * t.w_stride];
        for tok in 0..t.tokens {
            let xr = &t.x[tok * t.x_stride..(tok + 1) * t.x_stride];
            y[tok * y_stride + r] = vec_dot(t.n, wr, xr);
        }
    }
}

fn quantize_acts(pool: &Pool, quantize: fn(&[f32], &mut [u8]), x: &[f32], cols: usize, xq: &mut [u8], act_row: usize) {
    let run = |r0: usize, dst: &mut [u8]| {
        for (s, d) in x.get(r0 * cols..).unwrap_or_default().chunks_exact(cols).zip(dst.chunks_exact_mut(act_row)) {
            quantize(s, d);
        }
    };
    if x.len() < PARALLEL_QUANT_FROM {
        return run(0, xq);
    }
    pool.for_rows(xq, act_row, &run);
}

/// Tile `t` of `w` through kernel `k`: the layout's own tile for a repacked matrix, else
/// the kernel's tile, else its `vec_dot` output by output.
fn run_tile(w: &Matrix<'_>, k: &Kernel, t: &Tile<'_>, out: &mut [f32], ys: usize) {
    match (w.repacked.and_then(|o| o.repack.as_ref()), k.tile) {
        (Some(r), _) => (r.tile)(t, out, ys),
        (None, Some(f)) => f(t, out, ys),
        (None, None) => tile_by_vec_dot(k.vec_dot, t, out, ys),
    }
}

/// `tile(r0, nr, t0, nt, out, out_stride)`: rows `r0..r0+nr` × tokens `t0..t0+nt` into
/// `out[t * out_stride + r]`.
type TileClosure<'a> = dyn Fn(usize, usize, usize, usize, &mut [f32], usize) + Sync + 'a;

/// What [`split`] sizes tiles by.
#[derive(Clone, Copy)]
struct Shape {
    /// Bytes of one token's activation row.
    act_row_bytes: usize,
    /// Bytes of one weight row.
    w_row_bytes: usize,
    /// The kernel's [`Kernel::tile_tokens`].
    tile_tokens: usize,
}

/// Runs `tile(r0, nr, t0, nt, out, out_stride)` over the whole `rows × n_tokens` output,
/// split across the pool: by row blocks for few tokens and always in [`Mode::Rowwise`],
/// else by token blocks.
fn split(pool: &Pool, mode: Mode, rows: usize, n_tokens: usize, shape: Shape, y: &mut [f32], tile: &TileClosure<'_>) {
    let Shape { act_row_bytes, w_row_bytes, tile_tokens } = shape;
    let nth = pool.n_threads();
    // Row blocks, all tokens per block: weights are read once.
    // A multiple of 16 rows, so 8-row kernels never fall back to their one-row tail and
    // 16-row ones (two 8-row groups per 512-bit vector) not to their 8-row one.
    let rb = rows.div_ceil(nth * 8).next_multiple_of(16).clamp(16, 1024).min(rows);
    if mode == Mode::Rowwise {
        // Tile kernels run 8 tokens per pass over the tile's rows: with more, keep the
        // tile's weights L2-sized (still a multiple of 16 rows; no row's arithmetic
        // depends on where its block starts or ends). With 2..=8 tokens the per-tile
        // activation set-up (the kernels' scales and token pairs) is paid once per tile:
        // half as many tiles as for one token (measured: SmolLM2 decoding 8 sequences,
        // see BENCHMARKS.md "Batched decode kernels").
        let rb = match n_tokens {
            1 => rb,
            2..=8 => rows.div_ceil(nth * ROWWISE_TILES_PER_THREAD).next_multiple_of(16).clamp(16, 1024).min(rows),
            _ => rb.min((ROW_TILE_BYTES / w_row_bytes.max(1)).clamp(16, 1024) / 16 * 16),
        };
        return split_rows(pool, rows, n_tokens, rb, w_row_bytes, y, tile);
    }
    if n_tokens < TOKEN_SPLIT_FROM {
        return split_rows(pool, rows, n_tokens, rb, w_row_bytes, y, tile);
    }
    if tile_tokens == crate::registry::ALL_TOKENS {
        return split_rows(pool, rows, n_tokens, rb, w_row_bytes, y, tile);
    }
    if tile_tokens > 0 {
        // The kernel's shape: all rows, up to `tile_tokens` tokens per tile, whole
        // 16-token groups, at least one tile per thread where there are tokens for it.
        let tb = n_tokens.div_ceil(nth).next_multiple_of(16).clamp(16, tile_tokens.next_multiple_of(16));
        let chunks: Vec<Mutex<&mut [f32]>> = y.chunks_mut(tb * rows).map(Mutex::new).collect();
        pool.for_each(chunks.len(), &|i| {
            let mut out = chunks[i].lock().unwrap_or_else(|e| e.into_inner());
            let nt = out.len() / rows;
            tile(0, rows, i * tb, nt, &mut out, rows);
        });
        return;
    }
    // Token blocks, all rows per block: a weight row is decoded once per token block and
    // the block's activations stay in cache.
    // The block size depends on the token count and the activation row size only, never on
    // the thread count, so results do not depend on `-t`.
    // A multiple of 4 tokens: register-blocked kernels (4-token groups: tinyBLAS's F16/F32
    // blocks) then never run a leftover group inside a block.
    let tb = (n_tokens / 8).clamp(4, (TOKEN_BLOCK_BYTES / act_row_bytes.max(1)).clamp(4, MAX_TOKEN_BLOCK)) / 4 * 4;
    // Rows per tile: the tile's weights (re-read once per 4 tokens) stay in L2, and the
    // kernel's per-tile set-up (activation scales) is amortised over many rows.
    // A multiple of 16 rows: repacked layouts keep 8-row groups together, in pairs.
    let row_block = (ROW_TILE_BYTES / w_row_bytes.max(1)).clamp(16, 512) / 16 * 16;
    let chunks: Vec<Mutex<&mut [f32]>> = y.chunks_mut(tb * rows).map(Mutex::new).collect();
    pool.for_each(chunks.len(), &|i| {
        let mut out = chunks[i].lock().unwrap_or_else(|e| e.into_inner());
        let nt = out.len() / rows;
        let mut r0 = 0;
        while r0 < rows {
            let nr = row_block.min(rows - r0);
            tile(r0, nr, i * tb, nt, &mut out[r0..], rows);
            r0 += nr;
        }
    });
}

/// One token's rows as one contiguous range per thread, each walked from its front by its
/// owner in halves of what is left, so that every block a thread runs starts where its
/// last one ended: the kernels' weight prefetches run a few rows past a block's end, so
/// the next block of the same range starts warm. A thread done with its range steals the
/// back half of the fullest other range (a cold start once per steal), so the threads
/// still finish together. Every block boundary but `rows` is a multiple of 16.
///
/// Measured on a Sapphire Rapids VM (2 threads, one-token products beyond the caches):
/// row blocks claimed in turn from one counter (each block a cold start) read a 512 × 2048
/// q4_K matrix at 16.4–16.8 GB/s and 2048 × 2048 at 20.3 GB/s; one block per thread at
/// 19.6–19.8 and 22.3–22.8 — but a thread waiting for the other at the end of every
/// product cost as much in the model (qwen3-1.7b Q4_K_M decode −6 %).
///
/// A claim takes at least [`CLAIM_MIN_BYTES`] of weights, and each range sits on a cache
/// line of its own: a small model's products are a few hundred KiB, where halving down to
/// 16 rows made most claims (and their locks, which the threads' cache lines bounced
/// between the cores) cost more than their rows (Zen 5 VM, SmolLM2 decode `-t 2`: Q4_0
/// 385 → 446 t/s, IQ2_XS 310 → 338; llama-1b level).
struct Ranges {
    ranges: Vec<Slot>,
    /// The fewest rows a claim takes (a multiple of 16).
    min_rows: usize,
}

/// `run((first row, rows), output buffer)` of one claimed block ([`Ranges::run`]).
type BlockRun<'a> = dyn Fn((usize, usize), &mut Vec<f32>) + Sync + 'a;

/// A range on a cache line of its own: the threads claim from their own range without
/// pulling each other's lines.
#[repr(align(128))]
struct Slot(Mutex<(usize, usize)>);

impl Ranges {
    fn new(rows: usize, nth: usize, min_rows: usize) -> Ranges {
        let nth = nth.max(1);
        let per = rows.div_ceil(nth).next_multiple_of(16);
        let ranges = (0..nth).map(|i| Slot(Mutex::new(((i * per).min(rows), ((i + 1) * per).min(rows))))).collect();
        Ranges { ranges, min_rows: min_rows.next_multiple_of(16).max(16) }
    }

    fn lock(&self, i: usize) -> std::sync::MutexGuard<'_, (usize, usize)> {
        self.ranges[i].0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The front half of what is left of range `i` (at least `min_rows` rows).
    fn claim(&self, i: usize) -> Option<(usize, usize)> {
        let mut r = self.lock(i);
        let (front, back) = *r;
        if front >= back {
            return None;
        }
        let end = (front + (back - front).div_ceil(2).max(self.min_rows)).next_multiple_of(16).min(back);
        r.0 = end;
        Some((front, end - front))
    }

    /// `run(block, buffer)` for every block, on `pool`: items `0..nth` own a range each,
    /// then steal; the other `nth` only steal (a thread that arrives after the others took
    /// every range still helps). Each item keeps one output buffer for its blocks.
    fn run(&self, pool: &Pool, run: &BlockRun<'_>) {
        let nth = self.ranges.len();
        pool.for_each(2 * nth, &|i| {
            let mut out = Vec::new();
            if i < nth {
                while let Some(b) = self.claim(i) {
                    run(b, &mut out);
                }
            }
            while let Some(b) = self.steal() {
                run(b, &mut out);
            }
        });
    }

    /// The back half of the fullest range left (at least 16 rows).
    fn steal(&self) -> Option<(usize, usize)> {
        loop {
            let (i, left) = (0..self.ranges.len())
                .map(|i| {
                    let (f, b) = *self.lock(i);
                    (i, b.saturating_sub(f))
                })
                .max_by_key(|&(_, left)| left)?;
            if left == 0 {
                return None;
            }
            let mut r = self.lock(i);
            let (front, back) = *r;
            if front >= back {
                continue; // emptied in between: look again
            }
            let start = (back - (back - front) / 2).next_multiple_of(16).clamp(front, back);
            let start = if start == back { front } else { start };
            r.1 = start;
            return Some((start, back - start));
        }
    }
}

/// The fewest weight bytes a one-token claim of [`Ranges`] takes.
const CLAIM_MIN_BYTES: usize = 256 << 10;

/// [`split`] by blocks of `rb` rows (a multiple of 16, or all rows), all tokens per block;
/// one token by [`Ranges`].
fn split_rows(
    pool: &Pool,
    rows: usize,
    n_tokens: usize,
    rb: usize,
    w_row_bytes: usize,
    y: &mut [f32],
    tile: &TileClosure<'_>,
) {
    if n_tokens == 1 {
        let nth = pool.n_threads();
        let ranges = Ranges::new(rows, nth, CLAIM_MIN_BYTES / w_row_bytes.max(1));
        let y = Mutex::new(&mut y[..rows]);
        let run = |(r0, nr): (usize, usize), out: &mut Vec<f32>| {
            out.clear();
            out.resize(nr, 0.0);
            tile(r0, nr, 0, 1, out, nr);
            y.lock().unwrap_or_else(|e| e.into_inner())[r0..r0 + nr].copy_from_slice(out);
        };
        ranges.run(pool, &run);
        return;
    }
    let n_items = rows.div_ceil(rb);
    let bufs: Vec<Mutex<Vec<f32>>> = (0..n_items).map(|_| Mutex::new(Vec::new())).collect();
    pool.for_each(n_items, &|i| {
        let nr = rb.min(rows - i * rb);
        let mut out = vec![0f32; nr * n_tokens];
        tile(i * rb, nr, 0, n_tokens, &mut out, nr);
        *bufs[i].lock().unwrap_or_else(|e| e.into_inner()) = out;
    });
    for (i, b) in bufs.into_iter().enumerate() {
        let b = b.into_inner().unwrap_or_else(|e| e.into_inner());
        let nr = rb.min(rows - i * rb);
        for t in 0..n_tokens {
            y[t * rows + i * rb..t * rows + i * rb + nr].copy_from_slice(&b[t * nr..(t + 1) * nr]);
        }
    }
}

#[cfg(test)]
mod rowwise_tests;

#[cfg(test)]
mod range_tests {
    use super::Ranges;

    /// Claims and steals in every interleaving a seeded walk picks: every row exactly
    /// once, each block boundary but `rows` a multiple of 16, an owner's blocks in order
    /// and back to back.
    #[test]
    fn ranges_hand_out_every_row_once_in_16_row_blocks() {
        let mut seed = 7u32;
        for nth in [1, 2, 3, 4, 8] {
            for rows in [1, 8, 15, 16, 17, 100, 512, 576, 2048, 2056, 8192, 128_256] {
                for k in 0..20 {
                    let r = Ranges::new(rows, nth, [0, 16, 40, 300][k % 4]);
                    let mut seen = vec![false; rows];
                    let mut next_of: Vec<Option<usize>> = (0..nth).map(|_| None).collect();
                    loop {
                        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                        let who = (seed >> 16) as usize % nth;
                        let owner = !(seed >> 8).is_multiple_of(3);
                        let (owner, got) = match if owner { r.claim(who) } else { None } {
                            Some(b) => (true, Some(b)),
                            None => (false, r.steal()),
                        };
                        // nothing to claim and nothing to steal: every row is out
                        let Some((r0, nr)) = got else { break };
                        if owner {
                            if let Some(n) = next_of[who] {
                                assert_eq!(r0, n, "{rows} rows, {nth} threads: owner {who} jumped");
                            }
                            next_of[who] = Some(r0 + nr);
                        }
                        assert!(nr > 0);
                        assert!(
                            r0.is_multiple_of(16) && ((r0 + nr).is_multiple_of(16) || r0 + nr == rows),
                            "{r0}+{nr} of {rows}"
                        );
                        for s in &mut seen[r0..r0 + nr] {
                            assert!(!*s, "{rows} rows, {nth} threads: row handed out twice");
                            *s = true;
                        }
                    }
                    assert!(seen.iter().all(|&s| s), "{rows} rows, {nth} threads: rows left");
                }
            }
        }
    }
}
