//! Library side of the `gguf` command: the model cache and fetcher shared with `xtask`,
//! and the `inspect` rendering (so tests can call it without a process).

pub mod fetch;
pub mod inspect;
