//! `gguf serve`: an HTTP server speaking OpenAI's chat/completions protocol and
//! llama-server's own endpoints, over continuous batching of `n_parallel` slots.
//!
//! - [`engine`]: the scheduler thread (slots, batching, sampling, stop strings).
//! - [`api`]: request parsing and response shapes (llama-server's field names).
//! - [`embed`]: embeddings and reranking when the model is an encoder.
//! - [`http`]: the axum router, API keys, body limits, SSE, shutdown.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod api;
pub mod embed;
pub mod engine;
mod error;
pub mod http;
pub mod text;

pub use error::Error;
pub use http::{serve, spawn, Config, Handle};
