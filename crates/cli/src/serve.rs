//! `gguf serve`: llama-server's command line over the `server` crate.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::fetch;

/// `gguf serve` (llama-server's flag names; `-np`, `-ub`, `-ctk`, `-ctv` are accepted
/// as written).
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The GGUF model; without it, the default model (fetched on first use).
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// `--device`, `-ngl`.
    #[command(flatten)]
    pub device: crate::device::DeviceArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 = any free port; the address is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Slots: requests generated at once (`-np`).
    #[arg(long = "parallel", default_value_t = 1)]
    pub parallel: usize,
    /// Total context in tokens, split evenly over the slots (0 = the model's training context).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    pub ctx_size: usize,
    /// Most tokens in one pass over the weights, all slots together.
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    pub batch_size: usize,
    /// Most tokens of one sequence in one pass (`-ub`).
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub ubatch_size: usize,
    /// Compute threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// HTTP threads.
    #[arg(long = "threads-http", default_value_t = 0)]
    pub threads_http: usize,
    /// Model name shown to clients (default: the file name).
    #[arg(short = 'a', long = "alias")]
    pub alias: Option<String>,
    /// API key(s) clients must send (`Authorization: Bearer KEY`); repeatable or comma-separated.
    #[arg(long = "api-key", value_delimiter = ',')]
    pub api_key: Vec<String>,
    /// A file with one API key per line.
    #[arg(long = "api-key-file")]
    pub api_key_file: Option<PathBuf>,
    /// Default most tokens to generate per request (-1 = no limit).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,
    /// K cache type: f16, f32 or q8_0 (`-ctk`).
    #[arg(long = "cache-type-k", default_value = "f16")]
    pub cache_type_k: String,
    /// V cache type: f16, f32 or q8_0 (`-ctv`).
    #[arg(long = "cache-type-v", default_value = "f16")]
    pub cache_type_v: String,
    /// Serve Prometheus metrics at /metrics.
    #[arg(long)]
    pub metrics: bool,
    /// Serve /slots (the default).
    #[arg(long, overrides_with = "no_slots")]
    pub slots: bool,
    /// Do not serve /slots.
    #[arg(long = "no-slots")]
    pub no_slots: bool,
    /// Chat template: a built-in name (chatml, llama3, gemma, ...) or Jinja source.
    #[arg(long = "chat-template")]
    pub chat_template: Option<String>,
    /// Read the chat template's Jinja source from a file.
    #[arg(long = "chat-template-file", conflicts_with = "chat_template")]
    pub chat_template_file: Option<PathBuf>,
    /// Jinja chat templates (always on; accepted for llama-server compatibility).
    #[arg(long)]
    pub jinja: bool,
    /// Smallest chunk of a slot's cached prompt to reuse by shifting its KV cells when it
    /// reappears later in a new prompt (llama-server's `--cache-reuse`; 0 = off: only the
    /// prefix is reused, in whole `-ub` chunks, which keeps answers independent of the cache).
    #[arg(long = "cache-reuse", default_value_t = 0)]
    pub cache_reuse: usize,
    /// One KV cache of `-c` cells shared by all slots (llama-server's `-kvu`): a slot may
    /// use the whole context while the others leave room; idle slots' caches are dropped
    /// when it fills.
    #[arg(long = "kv-unified", overrides_with = "no_kv_unified")]
    pub kv_unified: bool,
    /// A KV cache of `-c / -np` cells per slot (the default; `-no-kvu`).
    #[arg(long = "no-kv-unified")]
    pub no_kv_unified: bool,
    /// Per-request time limit in seconds (0 = none).
    #[arg(long = "timeout", default_value_t = 600)]
    pub timeout: u64,
    /// Never download: without -m, use the default model only if already cached.
    #[arg(long)]
    pub offline: bool,
    /// Requests that may wait for a free slot; beyond, new requests get 503.
    #[arg(long = "queue-size", default_value_t = 64)]
    pub queue_size: usize,
    /// Largest request body in bytes; larger ones get 413.
    #[arg(long = "max-body-size", default_value_t = 32 << 20)]
    pub max_body_size: usize,
    /// Embeddings (accepted for llama-server compatibility: an embedding model — bert,
    /// nomic-bert — always serves /embedding and /v1/embeddings, a generative one never).
    #[arg(long = "embedding", visible_alias = "embeddings")]
    pub embedding: bool,
    /// An embedding model's pooling: none, mean, cls, last or rank (default: the file's).
    #[arg(long)]
    pub pooling: Option<String>,
    /// Serve /rerank with a reranker model (pooling `rank`).
    #[arg(long = "reranking", visible_alias = "rerank", conflicts_with = "pooling")]
    pub reranking: bool,
}

/// Runs the server until SIGTERM / Ctrl-C.
pub fn run(args: &ServeArgs) -> Result<()> {
    args.device.check()?;
    let model = match &args.model {
        Some(p) => p.clone(),
        None if args.offline => match fetch::cached(fetch::default_model()) {
            Some(p) => p,
            None => bail!("--offline and no -m: the default model is not in the cache (run `gguf fetch` first)"),
        },
        None => fetch::ensure(fetch::default_model(), &mut |l| eprintln!("{l}"))?,
    };
    if !model.is_file() {
        bail!("model file {} does not exist", model.display());
    }
    let mut keys: Vec<String> = args.api_key.iter().filter(|k| !k.is_empty()).cloned().collect();
    if let Some(f) = &args.api_key_file {
        let text = std::fs::read_to_string(f).with_context(|| format!("reading --api-key-file {}", f.display()))?;
        keys.extend(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string));
    }
    if args.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    let chat_template = match &args.chat_template_file {
        Some(f) => Some(std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?),
        None => args.chat_template.clone(),
    };
    let cfg = gguf_server::Config {
        model,
        host: args.host.clone(),
        port: args.port,
        n_parallel: args.parallel,
        n_ctx: args.ctx_size,
        n_batch: args.batch_size,
        n_ubatch: args.ubatch_size,
        n_threads: crate::engine::threads(args.threads)?,
        threads_http: args.threads_http,
        alias: args.alias.clone(),
        api_keys: keys,
        n_predict: args.n_predict,
        cache_type_k: args.cache_type_k.clone(),
        cache_type_v: args.cache_type_v.clone(),
        metrics: args.metrics,
        slots: !args.no_slots,
        chat_template,
        timeout_s: args.timeout,
        queue_size: args.queue_size,
        max_body: args.max_body_size,
        cache_reuse: args.cache_reuse,
        kv_unified: args.kv_unified && !args.no_kv_unified,
        announce: true,
        pooling: if args.reranking { Some("rank".into()) } else { args.pooling.clone() },
    };
    gguf_server::serve(cfg, None)?;
    Ok(())
}
