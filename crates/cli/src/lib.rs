//! Library side of the `gguf` command: the model cache and fetcher shared with `xtask`,
//! and the `inspect` rendering (so tests can call it without a process).

pub mod advise;
pub mod chat;
pub mod engine;
pub mod fetch;
pub mod imatrix;
pub mod inspect;
pub mod mem;
pub mod perplexity;
pub mod quantize;
pub mod serve;
pub mod split;
pub mod task_check;
pub mod tokenize;

/// Writes `bytes` to `path` atomically ([`gguf_format::atomic`]: an unpredictable
/// create-new temporary beside it, renamed over it once synced, removed on any error).
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    Ok(gguf_format::atomic::write(path, bytes)?)
}
