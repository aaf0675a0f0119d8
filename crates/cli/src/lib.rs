//! The `gguf` command as a library: [`main`] is the whole command line (a crate rebuilds
//! `gguf` with its own plug-ins by calling it from its `fn main`), and the modules behind
//! it — the model cache and fetcher shared with `xtask`, `inspect`'s rendering, the engine
//! commands — can be called without a process.

#![forbid(unsafe_code)]
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use gguf_format::SplitGguf;

pub mod advise;
mod app;
pub use app::main;
pub mod bench;
pub mod chat;
pub mod device;
pub mod embed;
pub mod engine;
pub mod fetch;
pub mod imatrix;
pub mod inspect;
pub mod mem;
pub mod perplexity;
pub mod quantize;
pub mod sampling;
pub mod serve;
pub mod split;
pub mod task_check;
pub mod tokenize;
pub mod types;

/// Writes `bytes` to `path` atomically ([`gguf_format::atomic`]: an unpredictable
/// create-new temporary beside it, renamed over it once synced, removed on any error).
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    Ok(gguf_format::atomic::write(path, bytes)?)
}

/// `gguf dequant`: tensor `name` of the model at `path` written to `output` as raw
/// little-endian f32 in stored element order, one row at a time (memory bounded for any
/// tensor), atomically.
pub fn dequant(path: &Path, name: &str, output: &Path) -> Result<()> {
    // A shard of a split model opens the whole set: the tensor may be in any shard.
    let f = SplitGguf::open(path).with_context(|| format!("reading {}", path.display()))?;
    let info = f.tensor(name).with_context(|| format!("{}: no tensor named {name:?}", path.display()))?;
    let t = info.require_type()?;
    let data = f.tensor_data(info)?;
    // Decode and write one row at a time: memory stays bounded for any tensor size.
    let ne0 = info.dims.first().copied().unwrap_or(1) as usize;
    let row_bytes = t.row_size(ne0)?;
    // The temporary is removed on every error path (dropped uncommitted).
    let mut w = BufWriter::new(gguf_format::AtomicFile::create(output)?);
    if row_bytes == 0 || data.is_empty() {
        // a tensor with no elements: its row width is not backed by any bytes, allocate nothing
        if !data.is_empty() {
            anyhow::bail!("tensor {name:?}: zero-width rows but {} data bytes", data.len());
        }
    } else {
        // a row is backed by `row_bytes` of file data, so `ne0` is bounded by the file's size
        let mut row = vec![0f32; ne0];
        let mut bytes = Vec::with_capacity(ne0 * 4);
        for chunk in data.chunks_exact(row_bytes) {
            t.dequantize(chunk, &mut row)?;
            bytes.clear();
            for v in &row {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            w.write_all(&bytes).with_context(|| format!("writing {}", output.display()))?;
        }
    }
    w.into_inner().map_err(|e| e.into_error())?.commit()?;
    Ok(())
}
