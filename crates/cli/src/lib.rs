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

/// Writes `bytes` to `path` atomically: a temporary in the same directory, synced, then
/// renamed over the target; on error the temporary is removed and the target untouched.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let name = path.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let res = (|| -> anyhow::Result<()> {
        let mut f = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}
