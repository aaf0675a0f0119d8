//! The HTTP side: axum routes with llama-server's paths, API keys, body limits, SSE, and
//! graceful shutdown. The model loads in the background while `/health` answers 503.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::body::{Body as HttpBody, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gguf_models::sampling::SamplerType;
use gguf_models::{CacheType, SamplerParams};
use gguf_tokenizer::chat::{ChatTemplate, Message};
use gguf_tokenizer::Tokenizer;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::api::{self, Body};
use crate::embed::{self, Embedder};
use crate::engine::{Constrain, Engine, EngineOptions, Event, GenParams, Job, Summary};
use crate::Error;

/// Server settings (llama-server's flags).
#[derive(Debug, Clone)]
pub struct Config {
    /// The model file.
    pub model: PathBuf,
    /// Listen address.
    pub host: String,
    /// Listen port (0 = any free one).
    pub port: u16,
    /// Slots (`-np`).
    pub n_parallel: usize,
    /// Total context, split over the slots (`-c`; 0 = the model's training context).
    pub n_ctx: usize,
    /// Tokens per pass, all slots together (`-b`).
    pub n_batch: usize,
    /// Tokens per pass of one sequence (`-ub`).
    pub n_ubatch: usize,
    /// Compute threads (`-t`).
    pub n_threads: usize,
    /// HTTP worker threads (`--threads-http`; 0 = 2).
    pub threads_http: usize,
    /// Model name shown to clients (`-a`).
    pub alias: Option<String>,
    /// Accepted API keys (`--api-key`, `--api-key-file`); empty = no auth.
    pub api_keys: Vec<String>,
    /// Default generation limit (`-n`; -1 = none).
    pub n_predict: i64,
    /// K cache type (`-ctk`).
    pub cache_type_k: String,
    /// V cache type (`-ctv`).
    pub cache_type_v: String,
    /// Serve `/metrics`.
    pub metrics: bool,
    /// Serve `/slots`.
    pub slots: bool,
    /// A chat template (a built-in name or Jinja source) instead of the file's.
    pub chat_template: Option<String>,
    /// Per-request time limit in seconds (`--timeout`; 0 = none).
    pub timeout_s: u64,
    /// Requests that may wait for a slot before new ones get 503.
    pub queue_size: usize,
    /// Largest request body in bytes (413 beyond).
    pub max_body: usize,
    /// Smallest cached chunk reused by KV shifting (`--cache-reuse`; 0 = off): the default
    /// of a request's `n_cache_reuse`.
    pub cache_reuse: usize,
    /// One KV cell pool of `n_ctx` shared by all slots (`-kvu`): each slot may use the whole
    /// context (capped at the training context), all together at most `n_ctx`.
    pub kv_unified: bool,
    /// Print the bound address as `listening on http://ADDR` on stdout once ready to accept.
    pub announce: bool,
    /// An embedding model's pooling (`--pooling`; `None`: the file's; `rank` for a
    /// reranker, `--reranking`).
    pub pooling: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            model: PathBuf::new(),
            host: "127.0.0.1".into(),
            port: 8080,
            n_parallel: 1,
            n_ctx: 4096,
            n_batch: 2048,
            n_ubatch: 512,
            n_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            threads_http: 0,
            alias: None,
            api_keys: Vec::new(),
            n_predict: -1,
            cache_type_k: "f16".into(),
            cache_type_v: "f16".into(),
            metrics: false,
            slots: true,
            chat_template: None,
            timeout_s: 600,
            queue_size: 64,
            max_body: 32 << 20,
            cache_reuse: 0,
            kv_unified: false,
            announce: true,
            pooling: None,
        }
    }
}

/// Makes the constraint for a request's grammar / JSON schema.
pub type ConstraintMaker = dyn Fn(&GrammarRequest) -> Result<Box<dyn Constrain>, Error> + Send + Sync;

/// What a request asks its output to follow.
#[derive(Debug, Clone)]
pub enum GrammarRequest {
    /// A GBNF grammar (`grammar`).
    Gbnf(String),
    /// A JSON schema (`json_schema`, `response_format.json_schema.schema`).
    JsonSchema(Value),
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// An llguidance Lark grammar (start rule `start`): what `tool_choice` "required" or
    /// a named function forces (see [`tool_call_grammar`]).
    Lark(String),
}

/// What the loaded model serves.
enum Backend {
    /// Generation: completions and chat.
    Generate(Engine),
    /// An encoder: embeddings and reranking.
    Embed(Embedder),
}

struct Ready {
    /// The grammar vocabulary, built on the first constrained request.
    vocab: OnceLock<Result<Arc<gguf_grammar::Vocab>, String>>,
    backend: Backend,
    tok: Arc<Tokenizer>,
    template: ChatTemplate,
    model_id: String,
    n_vocab: usize,
    n_ctx_train: usize,
    bos: String,
    eos: String,
    constraints: Option<Arc<ConstraintMaker>>,
}

struct App {
    cfg: Config,
    ready: OnceLock<Ready>,
    load_error: OnceLock<String>,
    /// Signalled when loading fails: the server stops with the error, as llama-server exits.
    failed: tokio::sync::Notify,
    t_start: u64,
}

impl Ready {
    /// The generation engine, or llama-server's refusal when the model is an encoder.
    fn engine(&self) -> Result<&Engine, Error> {
        match &self.backend {
            Backend::Generate(e) => Ok(e),
            Backend::Embed(_) => Err(Error::NotSupported(format!(
                "`{}` is an embedding model: this server answers /embedding, /v1/embeddings and /rerank, not \
                 generation",
                self.model_id
            ))),
        }
    }

    /// The encoder, or llama-server's refusal when the model generates.
    fn embedder(&self) -> Result<&Embedder, Error> {
        match &self.backend {
            Backend::Embed(e) => Ok(e),
            Backend::Generate(_) => Err(Error::NotSupported(
                "This server does not support embeddings: its model is generative (start it with an embedding model \
                 such as bert or nomic-bert)"
                    .into(),
            )),
        }
    }
}

impl App {
    fn ready(&self) -> Result<&Ready, Error> {
        if let Some(r) = self.ready.get() {
            return Ok(r);
        }
        if let Some(e) = self.load_error.get() {
            return Err(Error::Unavailable(format!("the model failed to load: {e}")));
        }
        Err(Error::Unavailable("Loading model".into()))
    }
}

fn load(cfg: &Config, constraints: Option<Arc<ConstraintMaker>>) -> Result<Ready, Error> {
    let (file, model) = gguf_models::load(&cfg.model)?;
    let md = file.metadata();
    let tok = Arc::new(Tokenizer::from_gguf(md)?);
    let piece = |id: Option<u32>| {
        id.and_then(|i| tok.token_to_piece(i, true).ok()).map(|b| String::from_utf8_lossy(&b).into_owned())
    };
    let (bos, eos) = (piece(tok.bos()).unwrap_or_default(), piece(tok.eos()).unwrap_or_default());
    let template = match &cfg.chat_template {
        Some(t) if gguf_tokenizer::chat::builtin_names().contains(&t.as_str()) => ChatTemplate::builtin(t)?,
        Some(src) => ChatTemplate::new(src, &bos, &eos)?,
        None => match ChatTemplate::from_gguf_with(md, &tok)? {
            Some(t) => t,
            None => ChatTemplate::builtin("chatml")?,
        },
    };
    let model_id = cfg.alias.clone().unwrap_or_else(|| {
        cfg.model.file_name().map_or_else(|| cfg.model.display().to_string(), |n| n.to_string_lossy().into_owned())
    });
    let pooling = cfg.pooling.as_deref().map(gguf_models::Pooling::parse).transpose()?;
    let (backend, n_vocab, n_ctx_train) = if model.encoder().is_some() {
        let rerank = md.get_str("tokenizer.chat_template.rerank").map(str::to_string);
        let e = Embedder::new(model, pooling, cfg.n_threads, rerank)?;
        eprintln!("model: an encoder, pooling `{}`, inputs up to {} tokens", e.pooling.name(), e.n_ctx);
        let n_ctx = e.n_ctx;
        (Backend::Embed(e), tok.n_vocab(), n_ctx)
    } else {
        if pooling.is_some() {
            return Err(Error::Invalid(format!(
                "--pooling applies to embedding models; `{}` is generative ({})",
                model_id,
                model.arch()
            )));
        }
        let (n_vocab, n_ctx_train) = (model.n_vocab(), model.n_ctx_train());
        (Backend::Generate(start_engine(cfg, model, &tok)?), n_vocab, n_ctx_train)
    };
    Ok(Ready { vocab: OnceLock::new(), backend, bos, eos, tok, template, model_id, n_vocab, n_ctx_train, constraints })
}

/// The generation engine over `model`: `-np` slots splitting `-c` (or sharing it, `-kvu`).
fn start_engine(cfg: &Config, model: Box<dyn gguf_models::Model>, tok: &Arc<Tokenizer>) -> Result<Engine, Error> {
    let n_parallel = cfg.n_parallel.max(1);
    let n_ctx_total = if cfg.n_ctx == 0 { model.n_ctx_train() } else { cfg.n_ctx };
    let n_ctx_slot = if cfg.kv_unified {
        let train = model.n_ctx_train();
        if train > 0 { n_ctx_total.min(train) } else { n_ctx_total }.max(1)
    } else {
        (n_ctx_total / n_parallel).max(1)
    };
    let opts = EngineOptions {
        n_parallel,
        n_ctx_slot,
        n_batch: cfg.n_batch.max(1),
        n_ubatch: cfg.n_ubatch.max(1).min(cfg.n_batch.max(1)),
        n_threads: cfg.n_threads.max(1),
        cache_type_k: CacheType::parse(&cfg.cache_type_k)?,
        cache_type_v: CacheType::parse(&cfg.cache_type_v)?,
        queue_size: cfg.queue_size,
        kv_unified: cfg.kv_unified.then_some(n_ctx_total.max(1)),
    };
    let n_vocab = model.n_vocab();
    if tok.n_vocab() > n_vocab {
        return Err(Error::Invalid(format!(
            "the tokenizer has {} tokens but the model's output has only {n_vocab} rows",
            tok.n_vocab()
        )));
    }
    eprintln!("model: {}", model.describe());
    if cfg.kv_unified {
        eprintln!("slots: {n_parallel} × up to {n_ctx_slot} tokens of context, {n_ctx_total} cells shared (unified)");
    } else {
        eprintln!("slots: {n_parallel} × {n_ctx_slot} tokens of context");
    }
    Engine::start(model, tok.clone(), &opts)
}

/// Runs the server until SIGTERM / Ctrl-C: binds first (so `/health` answers 503 while
/// the model loads), loads, serves; on the signal stops accepting, ends running
/// generations (clients get what was generated so far) and returns.
pub fn serve(cfg: Config, constraints: Option<Arc<ConstraintMaker>>) -> Result<(), Error> {
    let rt = runtime(&cfg)?;
    rt.block_on(async {
        let (listener, app) = bind(cfg, constraints).await?;
        run(listener, app, wait_for_signal()).await
    })
}

/// A server running on background threads (for tests and embedding).
pub struct Handle {
    /// The bound address.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), Error>>>,
}

impl Handle {
    /// Shuts down as a SIGTERM would and waits for it.
    pub fn stop(mut self) -> Result<(), Error> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<(), Error> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| Error::Io("the server thread panicked".into()))?,
            None => Ok(()),
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// Starts a server on background threads; returns once it listens (the model may still
/// be loading: poll `/health`).
pub fn spawn(cfg: Config, constraints: Option<Arc<ConstraintMaker>>) -> Result<Handle, Error> {
    let rt = runtime(&cfg)?;
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("gguf-http".into())
        .spawn(move || {
            rt.block_on(async {
                let (listener, app) = match bind(cfg, constraints).await {
                    Ok(x) => x,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e.to_string()));
                        return Ok(());
                    }
                };
                let addr = listener.local_addr().map_err(|e| Error::Io(e.to_string()))?;
                let _ = addr_tx.send(Ok(addr));
                run(listener, app, async {
                    let _ = stop_rx.await;
                })
                .await
            })
        })
        .map_err(|e| Error::Io(format!("starting the server thread: {e}")))?;
    match addr_rx.recv() {
        Ok(Ok(addr)) => Ok(Handle { addr, stop: Some(stop_tx), thread: Some(thread) }),
        Ok(Err(e)) => Err(Error::Io(e)),
        Err(_) => Err(Error::Io("the server thread ended before listening".into())),
    }
}

fn runtime(cfg: &Config) -> Result<tokio::runtime::Runtime, Error> {
    let threads = if cfg.threads_http == 0 { 2 } else { cfg.threads_http };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(|e| Error::Io(format!("starting the HTTP runtime: {e}")))
}

async fn bind(
    cfg: Config,
    constraints: Option<Arc<ConstraintMaker>>,
) -> Result<(tokio::net::TcpListener, Arc<App>), Error> {
    let addr = format!("{}:{}", cfg.host, cfg.port);
    let listener =
        tokio::net::TcpListener::bind(&addr).await.map_err(|e| Error::Io(format!("cannot listen on {addr}: {e}")))?;
    let local: SocketAddr = listener.local_addr().map_err(|e| Error::Io(e.to_string()))?;
    let app = Arc::new(App {
        cfg: cfg.clone(),
        ready: OnceLock::new(),
        load_error: OnceLock::new(),
        failed: tokio::sync::Notify::new(),
        t_start: api::now(),
    });
    eprintln!("listening on http://{local} (loading {})", cfg.model.display());
    if cfg.announce {
        println!("listening on http://{local}");
    }
    let loader = app.clone();
    tokio::task::spawn_blocking(move || match load(&loader.cfg, constraints) {
        Ok(r) => {
            let _ = loader.ready.set(r);
            eprintln!("model loaded; ready");
        }
        Err(e) => {
            eprintln!("error: loading {}: {e}", loader.cfg.model.display());
            let _ = loader.load_error.set(e.to_string());
            loader.failed.notify_one();
        }
    });
    Ok((listener, app))
}

async fn run(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
    signal: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let router = router(app.clone());
    let stopper = app.clone();
    let failed = app.clone();
    let shutdown = async move {
        tokio::select! {
            _ = signal => {}
            _ = failed.failed.notified() => {}
        }
        eprintln!("shutting down: no new requests; ending running generations");
        if let Some(r) = stopper.ready.get() {
            if let Backend::Generate(e) = &r.backend {
                tokio::task::block_in_place(|| e.shutdown());
            }
        }
    };
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| Error::Io(format!("serving: {e}")))?;
    eprintln!("stopped");
    match app.load_error.get() {
        Some(e) => Err(Error::Io(format!("loading {}: {e}", app.cfg.model.display()))),
        None => Ok(()),
    }
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/models", get(models_list))
        .route("/v1/models", get(models_list))
        .route("/props", get(props))
        .route("/slots", get(slots))
        .route("/metrics", get(metrics))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/apply-template", post(apply_template))
        .route("/completion", post(completion))
        .route("/completions", post(completion))
        .route("/v1/completions", post(oai_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/embedding", post(embeddings))
        .route("/embeddings", post(embeddings))
        .route("/v1/embeddings", post(embeddings_oai))
        .route("/rerank", post(rerank))
        .route("/reranking", post(rerank))
        .route("/v1/rerank", post(rerank))
        .route("/v1/reranking", post(rerank))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(app.clone(), auth))
        .layer(middleware::from_fn(log_request))
        .with_state(app)
}

async fn log_request(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let t0 = Instant::now();
    let res = next.run(req).await;
    eprintln!("request: {method} {path} {} {:.1} ms", res.status().as_u16(), t0.elapsed().as_secs_f64() * 1e3);
    res
}

/// llama-server's public endpoints: no key needed (it asks for one on `/v1/models`).
const PUBLIC: &[&str] = &["/health", "/v1/health"];

async fn auth(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if app.cfg.api_keys.is_empty() || PUBLIC.contains(&req.uri().path()) || req.method() == Method::OPTIONS {
        return next.run(req).await;
    }
    let h = req.headers();
    let bearer = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()));
    match bearer {
        Some(k) if app.cfg.api_keys.iter().any(|a| a == k) => next.run(req).await,
        _ => Error::Auth("Invalid API Key".into()).into_response(),
    }
}

async fn not_found() -> Response {
    Error::NotFound("File Not Found".into()).into_response()
}

async fn read_body(app: &App, body: HttpBody) -> Result<Map<String, Value>, Error> {
    let limit = app.cfg.max_body;
    let bytes: Bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| Error::TooLarge(format!("the request body is larger than the limit of {limit} bytes")))?;
    api::parse_object(&bytes)
}

async fn health(State(app): State<Arc<App>>) -> Response {
    match app.ready() {
        Ok(_) => Json(json!({"status": "ok"})).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn models_list(State(app): State<Arc<App>>) -> Response {
    let r = match app.ready() {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    Json(json!({
        "object": "list",
        "data": [{
            "id": r.model_id,
            "object": "model",
            "created": app.t_start,
            "owned_by": "llamacpp",
            "meta": {"n_vocab": r.n_vocab, "n_ctx_train": r.n_ctx_train},
        }],
    }))
    .into_response()
}

fn build_info() -> String {
    format!("gguf-engine {}", env!("CARGO_PKG_VERSION"))
}

async fn props(State(app): State<Arc<App>>) -> Response {
    let r = match app.ready() {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let d = SamplerParams::default();
    let (n_ctx, n_slots) = match &r.backend {
        Backend::Generate(e) => (e.n_ctx_slot, e.n_parallel),
        Backend::Embed(e) => (e.n_ctx, 1),
    };
    Json(json!({
        "default_generation_settings": {
            "id": 0,
            "n_ctx": n_ctx,
            "params": {
                "n_predict": app.cfg.n_predict,
                "temperature": d.temp, "top_k": d.top_k, "top_p": d.top_p, "min_p": d.min_p,
                "repeat_penalty": d.repeat_penalty, "repeat_last_n": d.repeat_last_n,
            },
        },
        "total_slots": n_slots,
        "model_alias": r.model_id,
        "model_path": app.cfg.model.display().to_string(),
        "chat_template": r.template.source(),
        "bos_token": r.bos,
        "eos_token": r.eos,
        "build_info": build_info(),
        "modalities": {"vision": false, "audio": false},
    }))
    .into_response()
}

async fn slots(State(app): State<Arc<App>>) -> Response {
    if !app.cfg.slots {
        return Error::NotSupported("This server does not support slots endpoint. Start it with `--slots`".into())
            .into_response();
    }
    let r = match app.ready() {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let infos = match &r.backend {
        Backend::Generate(e) => e.slots.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        Backend::Embed(_) => Vec::new(),
    };
    let v: Vec<Value> = infos
        .iter()
        .map(|s| {
            json!({
                "id": s.id,
                "id_task": s.id_task.map_or(-1, |t| t as i64),
                "n_ctx": s.n_ctx,
                "speculative": false,
                "is_processing": s.is_processing,
                "params": s.settings,
                "next_token": [{"has_next_token": s.is_processing, "n_decoded": s.n_decoded}],
                "n_past": s.n_past,
            })
        })
        .collect();
    Json(Value::Array(v)).into_response()
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    if !app.cfg.metrics {
        return Error::NotSupported("This server does not support metrics endpoint. Start it with `--metrics`".into())
            .into_response();
    }
    let r = match app.ready() {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let m = match r.engine() {
        Ok(e) => &e.metrics,
        Err(e) => return e.into_response(),
    };
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
    let n_decode = ld(&m.n_decode);
    let rate = |n: f64, us: f64| if us > 0.0 { n / (us / 1e6) } else { 0.0 };
    let counters = [
        ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", ld(&m.prompt_tokens)),
        ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", ld(&m.prompt_cached)),
        ("prompt_seconds_total", "Total time spent processing prompts", ld(&m.prompt_us) / 1e6),
        ("tokens_predicted_total", "Number of generation tokens processed", ld(&m.predicted)),
        ("tokens_predicted_seconds_total", "Total time spent generating tokens", ld(&m.predicted_us) / 1e6),
        ("n_decode_total", "Total number of batch passes", n_decode),
        ("n_tokens_max", "Largest observed sequence length (prompt + generation)", ld(&m.n_tokens_max)),
        ("requests_total", "Number of generation requests accepted", ld(&m.requests)),
        ("requests_finished_total", "Number of generation requests finished or cancelled", ld(&m.requests_done)),
        ("requests_rejected_total", "Number of requests refused because the queue was full", ld(&m.rejected)),
    ];
    let gauges = [
        (
            "prompt_tokens_seconds",
            "Average prompt throughput in tokens/s",
            rate(ld(&m.prompt_tokens), ld(&m.prompt_us)),
        ),
        (
            "predicted_tokens_seconds",
            "Average generation throughput in tokens/s",
            rate(ld(&m.predicted), ld(&m.predicted_us)),
        ),
        ("requests_processing", "Number of requests processing", m.processing.load(Ordering::Relaxed) as f64),
        ("requests_deferred", "Number of requests deferred", m.deferred.load(Ordering::Relaxed) as f64),
        (
            "n_busy_slots_per_decode",
            "Average number of busy slots per batch pass",
            ld(&m.busy_slots) / n_decode.max(1.0),
        ),
    ];
    let mut out = String::new();
    for (ty, items) in [("counter", &counters[..]), ("gauge", &gauges[..])] {
        for (name, help, v) in items {
            out += &format!("# HELP llamacpp:{name} {help}\n# TYPE llamacpp:{name} {ty}\nllamacpp:{name} {v}\n");
        }
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

async fn embeddings(State(app): State<Arc<App>>, body: HttpBody) -> Response {
    embeddings_impl(app, body, false).await
}

async fn embeddings_oai(State(app): State<Arc<App>>, body: HttpBody) -> Response {
    embeddings_impl(app, body, true).await
}

async fn embeddings_impl(app: Arc<App>, body: HttpBody, oai: bool) -> Response {
    let res = async {
        app.ready()?.embedder()?;
        let m = read_body(&app, body).await?;
        blocking(&app, move |r| embed::embeddings_body(r.embedder()?, &r.tok, &r.model_id, &m, oai).map(Json)).await
    };
    res.await.into_response()
}

async fn rerank(State(app): State<Arc<App>>, body: HttpBody) -> Response {
    let res = async {
        app.ready()?.embedder()?;
        let m = read_body(&app, body).await?;
        blocking(&app, move |r| embed::rerank_body(r.embedder()?, &r.tok, &r.model_id, &m).map(Json)).await
    };
    res.await.into_response()
}

async fn tokenize(State(app): State<Arc<App>>, body: HttpBody) -> Response {
    let res = async {
        app.ready()?;
        let m = read_body(&app, body).await?;
        blocking(&app, move |r| tokenize_body(r, &m)).await
    };
    res.await.into_response()
}

/// Runs `f` on the blocking pool: tokenizing a large text, rendering a chat template (up
/// to its time limit) or compiling a grammar must not hold an HTTP worker.
async fn blocking<T: Send + 'static>(
    app: &Arc<App>,
    f: impl FnOnce(&Ready) -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    let app = app.clone();
    tokio::task::spawn_blocking(move || f(app.ready()?))
        .await
        .map_err(|e| Error::Invalid(format!("the request's preparation failed: {e}")))?
}

fn tokenize_body(r: &Ready, m: &Map<String, Value>) -> Result<Json<Value>, Error> {
    {
        let b = Body(m);
        let content = b.str("content")?.unwrap_or_default();
        let add_special = b.bool("add_special")?.unwrap_or(false);
        let parse_special = b.bool("parse_special")?.unwrap_or(true);
        let with_pieces = b.bool("with_pieces")?.unwrap_or(false);
        let ids = r.tok.encode(content, add_special, parse_special)?;
        let tokens: Vec<Value> = if with_pieces {
            ids.iter()
                .map(|&id| {
                    let p = r.tok.token_to_piece(id, true).unwrap_or_default();
                    match String::from_utf8(p) {
                        Ok(s) => json!({"id": id, "piece": s}),
                        Err(e) => json!({"id": id, "piece": e.into_bytes()}),
                    }
                })
                .collect()
        } else {
            ids.iter().map(|&id| json!(id)).collect()
        };
        Ok::<_, Error>(Json(json!({ "tokens": tokens })))
    }
}

fn token_list(v: &Value, n_vocab: usize, key: &str) -> Result<Vec<u32>, Error> {
    let Some(a) = v.as_array() else { return Err(Error::Invalid(format!("\"{key}\" must be a list of token ids"))) };
    a.iter()
        .map(|t| match t.as_u64() {
            Some(id) if (id as usize) < n_vocab => Ok(id as u32),
            Some(id) => Err(Error::Invalid(format!("token id {id} is out of range (vocabulary of {n_vocab})"))),
            None => Err(Error::Invalid(format!("\"{key}\" must hold token ids, got {t}"))),
        })
        .collect()
}

async fn detokenize(State(app): State<Arc<App>>, body: HttpBody) -> Response {
    let res = async {
        let r = app.ready()?;
        let m = read_body(&app, body).await?;
        let ids = match m.get("tokens") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => token_list(v, r.n_vocab, "tokens")?,
        };
        let mut bytes = Vec::new();
        for id in ids {
            bytes.extend(r.tok.token_to_piece(id, true)?);
        }
        Ok::<_, Error>(Json(json!({"content": String::from_utf8_lossy(&bytes)})))
    };
    res.await.into_response()
}

/// The request's tools, unless absent, empty or `tool_choice` is "none".
fn tools_of(m: &Map<String, Value>) -> Option<&Value> {
    if m.get("tool_choice").and_then(Value::as_str) == Some("none") {
        return None;
    }
    m.get("tools").filter(|t| t.as_array().is_some_and(|a| !a.is_empty()))
}

/// The grammar `tool_choice` asks for on the chat endpoint: `None` for "auto" (the default)
/// and "none"; for "required" one call (or, with `parallel_tool_calls: true`, one or more)
/// of any offered tool, for `{"type": "function", "function": {"name": N}}` of tool N
/// only, written as the Hermes / Qwen2.5 templates ask (`<tool_call>\n{"name": ..,
/// "arguments": {..}}\n</tool_call>`), the arguments following the tool's `parameters`
/// schema. llama-server's default for `parallel_tool_calls` is false; so is ours.
pub fn tool_call_grammar(m: &Map<String, Value>) -> Result<Option<String>, Error> {
    let Some(tools) = tools_of(m).and_then(Value::as_array) else { return Ok(None) };
    let bad_choice = |v: &Value| {
        Error::Invalid(format!(
            "\"tool_choice\" must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {v}"
        ))
    };
    let only = match m.get("tool_choice") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(c)) if c == "auto" || c == "none" => return Ok(None),
        Some(Value::String(c)) if c == "required" => None,
        Some(v @ Value::Object(o)) => match o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
            Some(n) if o.get("type").and_then(Value::as_str).is_none_or(|t| t == "function") => Some(n),
            _ => return Err(bad_choice(v)),
        },
        Some(v) => return Err(bad_choice(v)),
    };
    let parallel = match m.get("parallel_tool_calls") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(Error::Invalid(format!("\"parallel_tool_calls\" must be a boolean, got {v}"))),
    };
    let mut alternatives = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let f = t.get("function").unwrap_or(t);
        let Some(name) = f.get("name").and_then(Value::as_str) else {
            return Err(Error::Invalid(format!("\"tools[{i}].function.name\" must be a string")));
        };
        if only.is_some_and(|n| n != name) {
            continue;
        }
        let params = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object"}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(p) => {
                return Err(Error::Invalid(format!("\"tools[{i}].function.parameters\" must be an object, got {p}")))
            }
        };
        alternatives.push(json!({
            "type": "object",
            "properties": {"name": {"const": name}, "arguments": params},
            "required": ["name", "arguments"],
            "additionalProperties": false,
        }));
    }
    if alternatives.is_empty() {
        let n = only.unwrap_or_default();
        return Err(Error::Invalid(format!("\"tool_choice\" names the function \"{n}\", which is not in \"tools\"")));
    }
    let schema = api::bounded_json_whitespace(json!({"anyOf": alternatives}));
    let start = if parallel { "call (\"\\n\" call)*" } else { "call" };
    Ok(Some(format!(
        "%llguidance {{}}\nstart: {start}\ncall: \"<tool_call>\\n\" body \"\\n</tool_call>\"\nbody: %json {schema}\n"
    )))
}

/// Tool calls in the Hermes / Qwen2.5 format (`<tool_call>{"name", "arguments"}</tool_call>`,
/// what those chat templates ask for): the text outside them and OpenAI `tool_calls`.
/// A reply that is nothing but such a JSON object naming one of `tools` counts too (small
/// Qwen2.5 models often drop the tags; Llama 3.1 templates ask for exactly that, with
/// `parameters`). Mistral's `[TOOL_CALLS]` is parsed too: a JSON list of calls after it
/// (`[TOOL_CALLS][{"name", "arguments", "id"?}, ...]`, Mistral Nemo / Small 3) or, in the
/// newer templates, `[TOOL_CALLS]name[ARGS]{...}` once per call. `None` when the text
/// holds no well-formed call.
pub fn parse_tool_calls(text: &str, tools: &[String]) -> Option<(String, Vec<Value>)> {
    let call = |v: &Value| -> Option<Value> {
        let name = v.get("name")?.as_str()?.to_string();
        // `arguments` (Hermes, Qwen, Mistral) or `parameters` (Llama 3.1's JSON tool calls)
        let args = match v.get("arguments").or_else(|| v.get("parameters")) {
            Some(Value::String(s)) => s.clone(),
            Some(a) => a.to_string(),
            None => "{}".to_string(),
        };
        // Mistral's calls carry their own (9-character) ids
        let id = v.get("id").and_then(Value::as_str).map_or_else(|| api::random_id("call_"), str::to_string);
        Some(json!({
            "type": "function",
            "id": id,
            "function": {"name": name, "arguments": args},
        }))
    };
    if let Some(at) = text.find("[TOOL_CALLS]") {
        return mistral_tool_calls(&text[..at], &text[at..], &call);
    }
    if !text.contains("<tool_call>") {
        let v: Value = serde_json::from_str(text.trim()).ok()?;
        let named = v.get("name").and_then(Value::as_str).is_some_and(|n| tools.iter().any(|t| t == n));
        return if named { Some((String::new(), vec![call(&v)?])) } else { None };
    }
    let mut rest = text;
    let mut content = String::new();
    let mut calls = Vec::new();
    while let Some(start) = rest.find("<tool_call>") {
        content.push_str(&rest[..start]);
        let after = &rest[start + "<tool_call>".len()..];
        let (body, tail) = match after.find("</tool_call>") {
            Some(end) => (&after[..end], &after[end + "</tool_call>".len()..]),
            None => (after, ""),
        };
        let v: Value = serde_json::from_str(body.trim()).ok()?;
        calls.push(call(&v)?);
        rest = tail;
    }
    content.push_str(rest);
    (!calls.is_empty()).then(|| (content.trim().to_string(), calls))
}

/// The calls in `rest` (which starts with `[TOOL_CALLS]`), `content` the text before.
fn mistral_tool_calls(
    content: &str,
    mut rest: &str,
    call: &dyn Fn(&Value) -> Option<Value>,
) -> Option<(String, Vec<Value>)> {
    const MARK: &str = "[TOOL_CALLS]";
    let mut calls = Vec::new();
    while let Some(after) = rest.strip_prefix(MARK) {
        let after = after.trim_start();
        if after.starts_with('[') {
            // a JSON list of call objects, maybe followed by more text
            let mut it = serde_json::Deserializer::from_str(after).into_iter::<Vec<Value>>();
            let list = it.next()?.ok()?;
            for v in &list {
                calls.push(call(v)?);
            }
            rest = after[it.byte_offset()..].trim_start();
        } else {
            // name[ARGS]{json}
            let (name, args) = after.split_once("[ARGS]")?;
            let mut it = serde_json::Deserializer::from_str(args).into_iter::<Value>();
            let a = it.next()?.ok()?;
            calls.push(call(&json!({"name": name.trim(), "arguments": a}))?);
            rest = args[it.byte_offset()..].trim_start();
        }
    }
    (!calls.is_empty()).then(|| (content.trim().to_string(), calls))
}

fn render_chat(r: &Ready, m: &Map<String, Value>) -> Result<String, Error> {
    let Some(Value::Array(msgs)) = m.get("messages") else {
        return Err(Error::Invalid("\"messages\" must be a list of messages".into()));
    };
    if msgs.is_empty() {
        return Err(Error::Invalid("\"messages\" must not be empty".into()));
    }
    let mut messages = Vec::with_capacity(msgs.len());
    for v in msgs {
        messages.push(Message::from_json(&api::message_text(v)?)?);
    }
    // A conversation ending with an assistant message is a prefill, as llama-server
    // treats it: the others rendered with the generation prompt, then its text, left open.
    if messages.last().is_some_and(|m| m.role == "assistant") {
        if messages.len() >= 2 && messages[messages.len() - 2].role == "assistant" {
            return Err(Error::Invalid("Cannot have 2 or more assistant messages at the end of the list.".into()));
        }
        let last = messages.pop().expect("not empty");
        let head = r.template.render(&messages, true, tools_of(m))?;
        return Ok(head + &last.content);
    }
    Ok(r.template.render(&messages, true, tools_of(m))?)
}

async fn apply_template(State(app): State<Arc<App>>, body: HttpBody) -> Response {
    let res = async {
        app.ready()?;
        let m = read_body(&app, body).await?;
        blocking(&app, move |r| Ok(Json(json!({"prompt": render_chat(r, &m)?})))).await
    };
    res.await.into_response()
}

/// Which protocol a generation request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// llama-server's `/completion`.
    Llama,
    /// OpenAI `/v1/completions`.
    Completions,
    /// OpenAI `/v1/chat/completions`.
    Chat,
}

async fn completion(State(app): State<Arc<App>>, body: HttpBody) -> Response {
    generate(app, Kind::Llama, body).await
}

async fn oai_completions(State(app): State<Arc<App>>, body: HttpBody) -> Response {
    generate(app, Kind::Completions, body).await
}

async fn chat_completions(State(app): State<Arc<App>>, body: HttpBody) -> Response {
    generate(app, Kind::Chat, body).await
}

/// The prompt's tokens and text.
fn prompt_of(r: &Ready, kind: Kind, m: &Map<String, Value>) -> Result<(Vec<u32>, String), Error> {
    let text = match kind {
        Kind::Chat => render_chat(r, m)?,
        Kind::Llama | Kind::Completions => match m.get("prompt") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(a)) if kind == Kind::Completions && a.len() == 1 && a[0].is_string() => {
                a[0].as_str().unwrap_or_default().to_string()
            }
            Some(v @ Value::Array(a)) if a.iter().all(Value::is_u64) => {
                let ids = token_list(v, r.n_vocab, "prompt")?;
                let text = String::from_utf8_lossy(&r.tok.decode(&ids, false, true)?).into_owned();
                return Ok((ids, text));
            }
            Some(Value::Array(a)) => {
                // llama-server's mixed form: strings and token ids, concatenated
                let mut ids = Vec::new();
                for (i, p) in a.iter().enumerate() {
                    match p {
                        Value::String(s) => ids.extend(r.tok.encode(s, i == 0, true)?),
                        Value::Number(_) => {
                            ids.extend(token_list(&Value::Array(vec![p.clone()]), r.n_vocab, "prompt")?)
                        }
                        _ => {
                            return Err(Error::Invalid(
                                "\"prompt\" must be a string or a list of strings and token ids".into(),
                            ))
                        }
                    }
                }
                let text = String::from_utf8_lossy(&r.tok.decode(&ids, false, true)?).into_owned();
                return Ok((ids, text));
            }
            None | Some(Value::Null) => return Err(Error::Invalid("\"prompt\" is required".into())),
            Some(v) => {
                return Err(Error::Invalid(format!("\"prompt\" must be a string or a list of token ids, got {v}")))
            }
        },
    };
    let ids = r.tok.encode(&text, true, true)?;
    Ok((ids, text))
}

struct Parsed {
    params: GenParams,
    stream: bool,
    include_usage: bool,
    logprobs: bool,
}

fn grammar_request(b: &Body<'_>) -> Result<Option<GrammarRequest>, Error> {
    if let Some(g) = b.str("grammar")? {
        if !g.trim().is_empty() {
            return Ok(Some(GrammarRequest::Gbnf(g.to_string())));
        }
    }
    if let Some(s) = b.get("json_schema") {
        if !s.is_object() {
            return Err(Error::Invalid("\"json_schema\" must be an object".into()));
        }
        return Ok(Some(GrammarRequest::JsonSchema(s.clone())));
    }
    let Some(rf) = b.get("response_format") else { return Ok(None) };
    let Some(o) = rf.as_object() else { return Err(Error::Invalid("\"response_format\" must be an object".into())) };
    match o.get("type").and_then(Value::as_str) {
        Some("text") | None => Ok(None),
        Some("json_object") => Ok(Some(match o.get("schema") {
            Some(s) if s.is_object() => GrammarRequest::JsonSchema(s.clone()),
            _ => GrammarRequest::JsonObject,
        })),
        Some("json_schema") => {
            let js = o.get("json_schema").and_then(Value::as_object);
            match js.and_then(|j| j.get("schema")).or_else(|| o.get("schema")) {
                Some(s) if s.is_object() => Ok(Some(GrammarRequest::JsonSchema(s.clone()))),
                _ => Err(Error::Invalid("\"response_format.json_schema.schema\" must be an object".into())),
            }
        }
        Some(t) => Err(Error::Invalid(format!(
            "\"response_format.type\" must be \"text\", \"json_object\" or \"json_schema\", got \"{t}\""
        ))),
    }
}

/// [`gguf_grammar::Constraint`] as the scheduler's [`Constrain`].
struct Grammar(gguf_grammar::Constraint);

impl Constrain for Grammar {
    fn apply(&mut self, logits: &mut [f32]) -> Result<(), String> {
        self.0.apply(logits).map_err(|e| e.to_string())
    }
    fn accept(&mut self, token: u32) -> Result<(), String> {
        self.0.accept(token).map_err(|e| e.to_string())
    }
    fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

/// The built-in constraint (llguidance, via the `grammar` crate): a bad grammar or schema
/// is a 400 naming the problem.
fn builtin_constraint(r: &Ready, g: &GrammarRequest) -> Result<Box<dyn Constrain>, Error> {
    let vocab = r
        .vocab
        .get_or_init(|| {
            gguf_grammar::Vocab::from_shared_tokenizer(r.tok.clone()).map(Arc::new).map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| Error::NotSupported(format!("constrained decoding is not available for this model: {e}")))?;
    let bounded = api::bounded_json_whitespace;
    let spec = match g {
        GrammarRequest::Gbnf(src) => gguf_grammar::Spec::Gbnf(src.clone()),
        GrammarRequest::JsonSchema(v) => gguf_grammar::Spec::JsonSchema(bounded(v.clone())),
        GrammarRequest::JsonObject => gguf_grammar::Spec::JsonSchema(bounded(json!({"type": "object"}))),
        GrammarRequest::Lark(src) => gguf_grammar::Spec::Lark(src.clone()),
    };
    let c = gguf_grammar::Constraint::new(&vocab, &spec).map_err(|e| Error::Invalid(e.to_string()))?;
    Ok(Box::new(Grammar(c)))
}

fn logit_bias(v: Option<&Value>, r: &Ready) -> Result<Vec<(u32, f32)>, Error> {
    let mut out = Vec::new();
    let bias_of = |b: &Value| -> Result<f32, Error> {
        match b {
            Value::Bool(false) => Ok(f32::NEG_INFINITY),
            Value::Number(n) => Ok(n.as_f64().unwrap_or(0.0) as f32),
            _ => Err(Error::Invalid(format!("a logit bias must be a number or false, got {b}"))),
        }
    };
    let mut add = |key: &Value, b: &Value| -> Result<(), Error> {
        let bias = bias_of(b)?;
        match key {
            Value::Number(n) if n.as_u64().is_some_and(|i| (i as usize) < r.n_vocab) => {
                out.push((n.as_u64().unwrap_or(0) as u32, bias))
            }
            Value::String(s) => match s.parse::<u64>() {
                Ok(i) if (i as usize) < r.n_vocab => out.push((i as u32, bias)),
                Ok(i) => return Err(Error::Invalid(format!("logit_bias token {i} is out of range"))),
                Err(_) => {
                    for id in r.tok.encode(s, false, false)? {
                        out.push((id, bias));
                    }
                }
            },
            _ => return Err(Error::Invalid(format!("logit_bias token {key} is out of range or not a token"))),
        }
        Ok(())
    };
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) => {
            for (k, b) in o {
                add(&Value::String(k.clone()), b)?;
            }
        }
        Some(Value::Array(a)) => {
            for e in a {
                match e.as_array().map(Vec::as_slice) {
                    Some([k, b]) => add(k, b)?,
                    _ => return Err(Error::Invalid(format!("logit_bias entries must be [token, bias], got {e}"))),
                }
            }
        }
        Some(v) => return Err(Error::Invalid(format!("\"logit_bias\" must be an object or a list, got {v}"))),
    }
    Ok(out)
}

/// llama-server's sampling fields (`server-schema.cpp`): soft limits clamp, hard limits
/// are a 400, as there.
fn sampler_params(b: &Body, r: &Ready, seed: u32) -> Result<SamplerParams, Error> {
    let d = SamplerParams::default();
    let clamp = |v: Option<f32>, lo: f32, hi: f32, dflt: f32| v.map_or(dflt, |x| x.min(hi).max(lo));
    let hard_i = |key: &str, lo: i64, hi: i64| -> Result<Option<i64>, Error> {
        match b.i64(key)? {
            Some(v) if v < lo || v > hi => {
                Err(Error::Invalid(format!("\"{key}\": value must be between {lo} <= value <= {hi}, but got {v}")))
            }
            v => Ok(v),
        }
    };
    let adaptive_decay = match b.f32("adaptive_decay")? {
        Some(v) if !(0.0..=0.99).contains(&v) => {
            return Err(Error::Invalid(format!(
                "\"adaptive_decay\": value must be between 0 <= value <= 0.99, but got {v}"
            )))
        }
        v => v.unwrap_or(d.adaptive_decay),
    };
    let samplers = match b.get("samplers") {
        None => d.samplers.clone(),
        Some(Value::Array(a)) => {
            let names: Vec<&str> = a
                .iter()
                .map(|x| {
                    x.as_str().ok_or_else(|| Error::Invalid(format!("\"samplers\" entries must be strings, got {x}")))
                })
                .collect::<Result<_, _>>()?;
            SamplerType::parse_names(names).0
        }
        Some(Value::String(s)) => SamplerType::parse_letters(s).0,
        Some(v) => {
            return Err(Error::Invalid(format!(
                "\"samplers\" must be a list of sampler names or a string of sampler letters, got {v}"
            )))
        }
    };
    let dry_sequence_breakers = match b.get("dry_sequence_breakers") {
        None => d.dry_sequence_breakers.clone(),
        Some(_) => {
            let v = b.strings("dry_sequence_breakers")?;
            if v.is_empty() {
                return Err(Error::Invalid("\"dry_sequence_breakers\" must be a non-empty array of strings".into()));
            }
            v
        }
    };
    Ok(SamplerParams {
        seed,
        min_keep: hard_i("min_keep", 0, i32::MAX as i64)?.map_or(d.min_keep, |v| v as usize),
        temp: clamp(b.f32("temperature")?, 0.0, f32::INFINITY, d.temp),
        dynatemp_range: b.f32("dynatemp_range")?.unwrap_or(d.dynatemp_range),
        dynatemp_exponent: b.f32("dynatemp_exponent")?.unwrap_or(d.dynatemp_exponent),
        top_k: b.i64("top_k")?.map_or(d.top_k, |k| k.clamp(0, i32::MAX as i64) as usize),
        top_p: clamp(b.f32("top_p")?, 0.0, 1.0, d.top_p),
        min_p: clamp(b.f32("min_p")?, 0.0, 1.0, d.min_p),
        typical_p: b.f32("typical_p")?.unwrap_or(d.typical_p),
        top_n_sigma: b.f32("top_n_sigma")?.unwrap_or(d.top_n_sigma),
        xtc_probability: clamp(b.f32("xtc_probability")?, 0.0, 1.0, d.xtc_probability),
        xtc_threshold: clamp(b.f32("xtc_threshold")?, 0.0, 1.0, d.xtc_threshold),
        repeat_penalty: b.f32("repeat_penalty")?.unwrap_or(d.repeat_penalty),
        repeat_last_n: b.i64("repeat_last_n")?.map_or(d.repeat_last_n, |n| if n < 0 { usize::MAX } else { n as usize }),
        frequency_penalty: b.f32("frequency_penalty")?.unwrap_or(d.frequency_penalty),
        presence_penalty: b.f32("presence_penalty")?.unwrap_or(d.presence_penalty),
        dry_multiplier: b.f32("dry_multiplier")?.unwrap_or(d.dry_multiplier),
        dry_base: b.f32("dry_base")?.map_or(d.dry_base, |v| if v < 1.0 { d.dry_base } else { v }),
        dry_allowed_length: hard_i("dry_allowed_length", 0, i32::MAX as i64)?
            .map_or(d.dry_allowed_length, |v| v as i32),
        dry_penalty_last_n: hard_i("dry_penalty_last_n", 0, i32::MAX as i64)?
            .map_or(d.dry_penalty_last_n, |v| v as usize),
        dry_sequence_breakers,
        mirostat: b.i64("mirostat")?.map_or(d.mirostat, |m| m.clamp(0, 2) as u8),
        mirostat_tau: b.f32("mirostat_tau")?.unwrap_or(d.mirostat_tau),
        mirostat_eta: b.f32("mirostat_eta")?.unwrap_or(d.mirostat_eta),
        adaptive_target: clamp(b.f32("adaptive_target")?, -f32::MAX, 1.0, d.adaptive_target),
        adaptive_decay,
        logit_bias: logit_bias(b.get("logit_bias"), r)?,
        samplers,
    })
}

fn parse_params(app: &App, r: &Ready, kind: Kind, m: &Map<String, Value>) -> Result<Parsed, Error> {
    let b = Body(m);
    let seed = match b.i64("seed")? {
        Some(s) if s >= 0 && s != u32::MAX as i64 => s as u32,
        _ => rand::random::<u32>(),
    };
    let sampler = sampler_params(&b, r, seed)?;
    let n_predict = match kind {
        Kind::Llama => b.i64("n_predict")?,
        _ => match b.i64("max_completion_tokens")? {
            Some(n) => Some(n),
            None => b.i64("max_tokens")?,
        },
    }
    .or(b.i64("n_predict")?)
    .unwrap_or(app.cfg.n_predict);
    let n_predict = if n_predict < 0 { None } else { Some(n_predict as usize) };
    let (n_probs, logprobs) = match kind {
        Kind::Chat => {
            let on = b.bool("logprobs")?.unwrap_or(false);
            let top = b.usize("top_logprobs")?.unwrap_or(0);
            if top > 0 && !on {
                return Err(Error::Invalid("\"top_logprobs\" requires \"logprobs\": true".into()));
            }
            (if on { top.max(1) } else { 0 }, on)
        }
        Kind::Completions => match b.get("logprobs") {
            Some(Value::Bool(on)) => (usize::from(*on), *on),
            Some(_) => {
                let n = b.usize("logprobs")?.unwrap_or(0);
                (n, n > 0)
            }
            None => (0, false),
        },
        Kind::Llama => {
            let n = b.usize("n_probs")?.unwrap_or(0);
            (n, n > 0)
        }
    };
    if n_probs > 100 {
        return Err(Error::Invalid(format!("at most 100 top log-probabilities, asked for {n_probs}")));
    }
    let stream = b.bool("stream")?.unwrap_or(false);
    let include_usage = match b.get("stream_options") {
        Some(Value::Object(o)) => o.get("include_usage").and_then(Value::as_bool).unwrap_or(false),
        Some(v) => return Err(Error::Invalid(format!("\"stream_options\" must be an object, got {v}"))),
        None => false,
    };
    let tool_grammar = if kind == Kind::Chat { tool_call_grammar(m)? } else { None };
    let request = match (grammar_request(&b)?, tool_grammar) {
        (Some(_), Some(_)) => {
            return Err(Error::Invalid("Cannot use custom grammar constraints with tools.".into()));
        }
        (g, None) => g,
        (None, Some(lark)) => Some(GrammarRequest::Lark(lark)),
    };
    let constraint = match request {
        None => None,
        Some(g) => match &r.constraints {
            Some(make) => Some(make(&g)?),
            None => Some(builtin_constraint(r, &g)?),
        },
    };
    let id_slot = match b.i64("id_slot")? {
        Some(i) if i >= 0 => Some(i as usize),
        _ => None,
    };
    let settings = json!({
        "n_predict": n_predict.map_or(-1, |n| n as i64),
        "seed": sampler.seed,
        "temperature": sampler.temp,
        "top_k": sampler.top_k,
        "top_p": sampler.top_p,
        "min_p": sampler.min_p,
        "repeat_penalty": sampler.repeat_penalty,
        "repeat_last_n": sampler.repeat_last_n,
        "presence_penalty": sampler.presence_penalty,
        "frequency_penalty": sampler.frequency_penalty,
        "dynatemp_range": sampler.dynatemp_range,
        "dynatemp_exponent": sampler.dynatemp_exponent,
        "top_n_sigma": sampler.top_n_sigma,
        "xtc_probability": sampler.xtc_probability,
        "xtc_threshold": sampler.xtc_threshold,
        "typical_p": sampler.typical_p,
        "dry_multiplier": sampler.dry_multiplier,
        "dry_base": sampler.dry_base,
        "dry_allowed_length": sampler.dry_allowed_length,
        "dry_penalty_last_n": sampler.dry_penalty_last_n,
        "dry_sequence_breakers": sampler.dry_sequence_breakers,
        "mirostat": sampler.mirostat,
        "mirostat_tau": sampler.mirostat_tau,
        "mirostat_eta": sampler.mirostat_eta,
        "adaptive_target": sampler.adaptive_target,
        "adaptive_decay": sampler.adaptive_decay,
        "min_keep": sampler.min_keep,
        "samplers": sampler.samplers.iter().map(|t| t.name()).collect::<Vec<_>>(),
        "n_probs": n_probs,
        "stream": stream,
    });
    let timeout = app.cfg.timeout_s;
    Ok(Parsed {
        params: GenParams {
            sampler,
            n_predict,
            stop: b.strings("stop")?,
            n_probs,
            ignore_eos: b.bool("ignore_eos")?.unwrap_or(false),
            cache_prompt: b.bool("cache_prompt")?.unwrap_or(true),
            n_cache_reuse: b.usize("n_cache_reuse")?.unwrap_or(app.cfg.cache_reuse),
            constraint,
            deadline: (timeout > 0).then(|| Instant::now() + Duration::from_secs(timeout)),
            id_slot,
            settings,
            special: b.bool("special")?.unwrap_or(false) || (kind == Kind::Chat && tools_of(m).is_some()),
        },
        stream,
        include_usage,
        logprobs,
    })
}

/// What a response needs to know of its request.
struct Meta {
    kind: Kind,
    id: String,
    model: String,
    created: u64,
    stream: bool,
    include_usage: bool,
    logprobs: bool,
    prompt_text: String,
    settings: Value,
    tok: Arc<Tokenizer>,
    /// The names of the tools offered: the text is parsed for tool calls at the end (and
    /// not streamed as content, since it may turn out to be a call).
    tools: Option<Vec<String>>,
}

async fn generate(app: Arc<App>, kind: Kind, body: HttpBody) -> Response {
    match start(&app, kind, body).await {
        Ok((meta, rx)) if meta.stream => stream_response(meta, rx),
        Ok((meta, rx)) => collect_response(meta, rx).await,
        Err(e) => e.into_response(),
    }
}

async fn start(app: &Arc<App>, kind: Kind, body: HttpBody) -> Result<(Meta, mpsc::UnboundedReceiver<Event>), Error> {
    let r = app.ready()?;
    let m = read_body(app, body).await?;
    let app2 = app.clone();
    let (Parsed { params, stream, include_usage, logprobs }, (prompt, prompt_text), m) =
        blocking(app, move |r| Ok((parse_params(&app2, r, kind, &m)?, prompt_of(r, kind, &m)?, m))).await?;
    if prompt.is_empty() {
        return Err(Error::Invalid("the prompt is empty (it has no tokens)".into()));
    }
    let engine = r.engine()?;
    let n_ctx = engine.n_ctx_slot;
    if prompt.len() >= n_ctx {
        return Err(Error::ExceedContext {
            message: format!(
                "request ({} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it",
                prompt.len()
            ),
            n_prompt_tokens: prompt.len(),
            n_ctx,
        });
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let id = engine.next_id();
    let settings = params.settings.clone();
    engine.submit(Job { id, prompt, params, tx })?;
    let prefix = match kind {
        Kind::Chat => "chatcmpl-",
        _ => "cmpl-",
    };
    Ok((
        Meta {
            kind,
            id: api::random_id(prefix),
            model: r.model_id.clone(),
            created: api::now(),
            stream,
            include_usage,
            logprobs,
            prompt_text,
            settings,
            tok: r.tok.clone(),
            tools: tools_of(&m).filter(|_| kind == Kind::Chat).map(|t| {
                t.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f.pointer("/function/name").and_then(Value::as_str).map(str::to_string))
                    .collect()
            }),
        },
        rx,
    ))
}

/// What a generation produced, gathered.
#[derive(Default)]
struct Gathered {
    text: String,
    tokens: Vec<u32>,
    probs: Vec<Value>,
    slot: usize,
}

impl Gathered {
    fn add(&mut self, tok: &Tokenizer, ev: &Event) {
        match ev {
            Event::Token { slot, id, text, probs } => {
                self.slot = *slot;
                self.text.push_str(text);
                self.tokens.push(*id);
                if let Some(p) = probs {
                    self.probs.push(api::prob_entry(*id, &tok.token_to_piece(*id, true).unwrap_or_default(), p));
                }
            }
            Event::Text(t) => self.text.push_str(t),
            Event::Done(_) | Event::Error(_) => {}
        }
    }
}

fn finish_reason(s: &Summary) -> &'static str {
    s.stop.finish_reason()
}

fn final_llama(meta: &Meta, g: &Gathered, s: &Summary, stream: bool) -> Value {
    let mut v = json!({
        "index": 0,
        "content": if stream { "" } else { g.text.as_str() },
        "tokens": if stream { Vec::new() } else { g.tokens.clone() },
        "id_slot": s.id_slot,
        "stop": true,
        "model": meta.model,
        "tokens_predicted": s.n_decoded,
        "tokens_evaluated": s.n_prompt,
        "generation_settings": meta.settings,
        "prompt": meta.prompt_text,
        "has_new_line": g.text.contains('\n'),
        "truncated": s.truncated,
        "stop_type": s.stop.as_str(),
        "stopping_word": s.stopping_word,
        "tokens_cached": s.n_prompt + s.n_decoded,
        "timings": api::timings(s),
    });
    if !stream && !g.probs.is_empty() {
        v["completion_probabilities"] = Value::Array(g.probs.clone());
    }
    v
}

fn final_completions(meta: &Meta, g: &Gathered, s: &Summary, stream: bool) -> Value {
    let logprobs = if !stream && meta.logprobs { json!({"content": g.probs}) } else { Value::Null };
    json!({
        "choices": [{
            "text": if stream { "" } else { g.text.as_str() },
            "index": 0,
            "logprobs": logprobs,
            "finish_reason": finish_reason(s),
        }],
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": build_info(),
        "object": "text_completion",
        "usage": api::usage(s),
        "id": meta.id,
        "timings": api::timings(s),
    })
}

/// The assistant message and finish reason of a chat completion.
fn chat_message(meta: &Meta, g: &Gathered, s: &Summary) -> (Value, &'static str) {
    let text_or_null = |t: &str| if t.is_empty() { Value::Null } else { Value::String(t.to_string()) };
    if let Some(tools) = &meta.tools {
        if let Some((content, calls)) = parse_tool_calls(&g.text, tools) {
            return (
                json!({"role": "assistant", "content": text_or_null(&content), "tool_calls": calls}),
                "tool_calls",
            );
        }
    }
    (json!({"role": "assistant", "content": text_or_null(&g.text)}), finish_reason(s))
}

fn final_chat(meta: &Meta, g: &Gathered, s: &Summary) -> Value {
    let (message, reason) = chat_message(meta, g, s);
    let mut choice = json!({
        "finish_reason": reason,
        "index": 0,
        "message": message,
    });
    if meta.logprobs {
        choice["logprobs"] = json!({"content": g.probs});
    }
    json!({
        "choices": [choice],
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": build_info(),
        "object": "chat.completion",
        "usage": api::usage(s),
        "id": meta.id,
        "timings": api::timings(s),
    })
}

async fn collect_response(meta: Meta, mut rx: mpsc::UnboundedReceiver<Event>) -> Response {
    let mut g = Gathered::default();
    let tok = meta.tok.clone();
    while let Some(ev) = rx.recv().await {
        match &ev {
            Event::Done(s) => {
                let v = match meta.kind {
                    Kind::Llama => final_llama(&meta, &g, s, false),
                    Kind::Completions => final_completions(&meta, &g, s, false),
                    Kind::Chat => final_chat(&meta, &g, s),
                };
                return Json(v).into_response();
            }
            Event::Error(e) => return Error::Io(e.clone()).into_response(),
            _ => g.add(&tok, &ev),
        }
    }
    Error::Unavailable("the generation was cancelled".into()).into_response()
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

fn chunk(meta: &Meta, choices: Value) -> Value {
    json!({
        "choices": choices,
        "created": meta.created,
        "id": meta.id,
        "model": meta.model,
        "system_fingerprint": build_info(),
        "object": "chat.completion.chunk",
    })
}

/// The first chunk of a chat stream (OpenAI sends the role first).
fn role_chunk(meta: &Meta) -> Value {
    chunk(meta, json!([{"finish_reason": null, "index": 0, "delta": {"role": "assistant", "content": null}}]))
}

fn stream_response(meta: Meta, mut rx: mpsc::UnboundedReceiver<Event>) -> Response {
    let (tx, out) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    tokio::spawn(async move {
        let tok = meta.tok.clone();
        let mut g = Gathered::default();
        let mut first = true;
        let send = |b: Bytes| {
            let tx = tx.clone();
            async move { tx.send(Ok(b)).await.is_ok() }
        };
        while let Some(ev) = rx.recv().await {
            let mut events: Vec<Value> = Vec::new();
            let mut done = false;
            match &ev {
                Event::Token { .. } | Event::Text(_) => {
                    g.add(&tok, &ev);
                    let (id, text, slot, probs) = match &ev {
                        Event::Token { slot, id, text, probs } => {
                            (Some(*id), text.as_str(), Some(*slot), probs.as_ref())
                        }
                        Event::Text(t) => (None, t.as_str(), None, None),
                        _ => unreachable!("matched above"),
                    };
                    let entry = match (id, probs) {
                        (Some(id), Some(p)) => {
                            Some(api::prob_entry(id, &tok.token_to_piece(id, true).unwrap_or_default(), p))
                        }
                        _ => None,
                    };
                    match meta.kind {
                        Kind::Llama => {
                            let mut v = json!({
                                "index": 0, "content": text, "tokens": id.map_or(Vec::new(), |i| vec![i]), "stop": false,
                                "id_slot": slot, "tokens_predicted": g.tokens.len(), "tokens_evaluated": Value::Null,
                            });
                            if let Some(e) = entry {
                                v["completion_probabilities"] = json!([e]);
                            }
                            events.push(v);
                        }
                        Kind::Completions => {
                            if !text.is_empty() || entry.is_some() {
                                let lp = entry.map_or(Value::Null, |e| json!({"content": [e]}));
                                events.push(json!({
                                    "choices": [{"text": text, "index": 0, "logprobs": lp, "finish_reason": null}],
                                    "created": meta.created, "model": meta.model, "system_fingerprint": build_info(),
                                    "object": "text_completion", "id": meta.id,
                                }));
                            }
                        }
                        Kind::Chat => {
                            if first {
                                first = false;
                                events.push(role_chunk(&meta));
                            }
                            if !text.is_empty() && meta.tools.is_none() {
                                let mut c = json!({"finish_reason": null, "index": 0, "delta": {"content": text}});
                                if let Some(e) = entry {
                                    c["logprobs"] = json!({"content": [e]});
                                }
                                events.push(chunk(&meta, json!([c])));
                            }
                        }
                    }
                }
                Event::Done(s) => {
                    done = true;
                    match meta.kind {
                        Kind::Llama => events.push(final_llama(&meta, &g, s, true)),
                        Kind::Completions => events.push(final_completions(&meta, &g, s, true)),
                        Kind::Chat => {
                            if first {
                                events.push(role_chunk(&meta));
                            }
                            let mut reason = finish_reason(s);
                            if meta.tools.is_some() {
                                // the held-back text: content, or tool calls
                                let (msg, r) = chat_message(&meta, &g, s);
                                reason = r;
                                if let Some(c) = msg.get("content").filter(|c| !c.is_null()) {
                                    events.push(chunk(
                                        &meta,
                                        json!([{"finish_reason": null, "index": 0, "delta": {"content": c}}]),
                                    ));
                                }
                                if let Some(Value::Array(calls)) = msg.get("tool_calls") {
                                    let calls: Vec<Value> = calls
                                        .iter()
                                        .enumerate()
                                        .map(|(i, c)| {
                                            let mut c = c.clone();
                                            c["index"] = json!(i);
                                            c
                                        })
                                        .collect();
                                    events.push(chunk(
                                        &meta,
                                        json!([{"finish_reason": null, "index": 0, "delta": {"tool_calls": calls}}]),
                                    ));
                                }
                            }
                            let mut last = chunk(&meta, json!([{"finish_reason": reason, "index": 0, "delta": {}}]));
                            if meta.include_usage {
                                events.push(last);
                                last = chunk(&meta, json!([]));
                                last["usage"] = api::usage(s);
                            }
                            last["timings"] = api::timings(s);
                            events.push(last);
                        }
                    }
                }
                Event::Error(e) => {
                    done = true;
                    events.push(json!({"error": Error::Io(e.clone()).to_json()}));
                }
            }
            for v in &events {
                if !send(sse(v)).await {
                    return; // the client is gone: dropping `rx` frees the slot
                }
            }
            if done {
                break;
            }
        }
        if meta.kind != Kind::Llama {
            let _ = send(Bytes::from_static(b"data: [DONE]\n\n")).await;
        }
    });
    let body = HttpBody::from_stream(tokio_stream::wrappers::ReceiverStream::new(out));
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-cache"));
    (StatusCode::OK, headers, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hermes_tool_calls_parse() {
        let t = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        let names = vec!["get_weather".to_string(), "a".to_string()];
        let (content, calls) = parse_tool_calls(t, &names).unwrap();
        assert_eq!(content, "Let me check.");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        let args: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"city": "Paris"}));
        let two = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>";
        assert_eq!(parse_tool_calls(two, &names).unwrap().1.len(), 2);
        assert!(parse_tool_calls("no calls here", &names).is_none());
        assert!(parse_tool_calls("<tool_call>{not json}</tool_call>", &names).is_none());
        // a bare call object counts only when it names an offered tool
        let bare = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}";
        assert_eq!(parse_tool_calls(bare, &names).unwrap().1[0]["function"]["name"], "get_weather");
        assert!(parse_tool_calls("{\"name\": \"other\"}", &names).is_none());
        let llama = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
        let c = &parse_tool_calls(llama, &names).unwrap().1[0];
        assert_eq!(c["function"]["arguments"], "{\"city\":\"Oslo\"}");
    }

    #[test]
    fn mistral_tool_calls_parse() {
        let names = vec!["get_weather".to_string()];
        // Mistral Nemo / Small 3: a JSON list after the marker, ids kept
        let t = "Sure.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123XYZ\"}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]";
        let (content, calls) = parse_tool_calls(t, &names).unwrap();
        assert_eq!(content, "Sure.");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0]["id"], "abc123XYZ");
        assert_eq!(calls[1]["function"]["arguments"], "{\"city\":\"Rome\"}");
        assert!(calls[1]["id"].as_str().unwrap().starts_with("call_"));
        // the newer templates: name[ARGS]{...} per call
        let t = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Bergen\"}";
        let (content, calls) = parse_tool_calls(t, &names).unwrap();
        assert_eq!(content, "");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        assert_eq!(calls[1]["function"]["arguments"], "{\"city\":\"Bergen\"}");
        // malformed: no call
        assert!(parse_tool_calls("[TOOL_CALLS][{\"name\": ", &names).is_none());
        assert!(parse_tool_calls("[TOOL_CALLS]get_weather{}", &names).is_none());
        assert!(parse_tool_calls("[TOOL_CALLS]", &names).is_none());
    }

    #[test]
    fn tool_choice_grammars_compile_and_force_a_call() {
        use std::sync::Arc;
        let tools = json!([
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "get_time"}},
        ]);
        let body = |choice: Value, parallel: bool| {
            let v = json!({"tools": tools, "tool_choice": choice, "parallel_tool_calls": parallel});
            v.as_object().unwrap().clone()
        };
        assert_eq!(tool_call_grammar(&body(json!("auto"), false)).unwrap(), None);
        assert_eq!(tool_call_grammar(&body(json!("none"), false)).unwrap(), None);
        assert!(tool_call_grammar(&body(json!("always"), false)).is_err());
        assert!(tool_call_grammar(&body(json!({"type": "function", "function": {"name": "x"}}), false)).is_err());
        // a byte vocabulary, end-of-generation token 256
        let mut bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        bytes.push(b"</s>".to_vec());
        let mut special = vec![false; 256];
        special.push(true);
        let vocab = Arc::new(gguf_grammar::Vocab::new(bytes, special, vec![256]).unwrap());
        let accepts = |lark: &str, text: &str| -> bool {
            let mut c = gguf_grammar::Constraint::new(&vocab, &gguf_grammar::Spec::Lark(lark.to_string())).unwrap();
            for &b in text.as_bytes() {
                if !c.is_allowed(b as u32).unwrap() {
                    return false;
                }
                c.accept(b as u32).unwrap();
            }
            c.can_end().unwrap()
        };
        let one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        let other = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
        let required = tool_call_grammar(&body(json!("required"), false)).unwrap().unwrap();
        assert!(accepts(&required, one));
        assert!(accepts(&required, other));
        assert!(!accepts(&required, "Hello"), "prose is not a call");
        assert!(!accepts(&required, &one.replace("get_weather", "get_wether")), "an unknown tool");
        assert!(!accepts(&required, &one.replace("\"city\"", "\"town\"")), "arguments outside the schema");
        assert!(!accepts(&required, &format!("{one}\n{other}")), "one call unless parallel");
        let parallel = tool_call_grammar(&body(json!("required"), true)).unwrap().unwrap();
        assert!(accepts(&parallel, &format!("{one}\n{other}")));
        let named = tool_call_grammar(&body(json!({"type": "function", "function": {"name": "get_time"}}), false))
            .unwrap()
            .unwrap();
        assert!(accepts(&named, other));
        assert!(!accepts(&named, one), "only the named function");
    }
}
