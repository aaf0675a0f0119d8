//! The scheduler: one thread owns the model and `n_parallel` slots (a KV cache each,
//! sized `n_ctx / n_parallel` as llama-server sizes them) and runs continuous batching —
//! every step takes one decode token of each generating slot and the next prompt chunk of
//! each slot still reading its prompt, and sends them through the weights together
//! ([`gguf_models::Model::forward_batch`]).
//!
//! Determinism: a sequence's tokens do not depend on what shares its batch. The batch
//! pass gives each sequence bitwise its logits alone, and prompts are always cut at
//! multiples of `n_ubatch` from position 0, so a prompt's chunks are those it would get
//! alone. Prefix reuse keeps this: a slot's cache is reused only up to the last multiple
//! of `n_ubatch` of its previous prompt that the new prompt shares (the cells there were
//! computed in the same chunks the new request would compute).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gguf_models::{Logits, Model, Sampler, SamplerParams, Segment, State, StateOptions};
use gguf_tokenizer::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

use crate::text::{drain_utf8, find_stop, partial_stop_len};
use crate::Error;

/// Restricts the tokens a request may produce (a grammar or JSON schema).
pub trait Constrain: Send {
    /// Masks the forbidden tokens' logits to `-inf`.
    fn apply(&mut self, logits: &mut [f32]) -> Result<(), String>;
    /// Advances past the sampled token.
    fn accept(&mut self, token: u32) -> Result<(), String>;
    /// Whether the constrained output is complete.
    fn is_finished(&self) -> bool;
}

/// What a request asks of the generation.
pub struct GenParams {
    /// Sampling chain settings.
    pub sampler: SamplerParams,
    /// Most tokens to generate (`None`: until end of generation or a full context).
    pub n_predict: Option<usize>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Top probabilities to report per token (0 = none).
    pub n_probs: usize,
    /// Never stop at end-of-generation tokens (they are masked out).
    pub ignore_eos: bool,
    /// Reuse a slot's cached prefix.
    pub cache_prompt: bool,
    /// llama-server's `n_cache_reuse` (`--cache-reuse`): reuse cached chunks of at least
    /// this many tokens that appear later in the prompt by shifting their KV cells; 0 =
    /// off (only the aligned prefix is reused, see the module docs).
    pub n_cache_reuse: usize,
    /// Output constraint.
    pub constraint: Option<Box<dyn Constrain>>,
    /// Stop generating at this time (the request's time limit).
    pub deadline: Option<Instant>,
    /// Run on this slot.
    pub id_slot: Option<usize>,
    /// Echo of the settings for `generation_settings` / `/slots`.
    pub settings: serde_json::Value,
    /// Render special tokens (other than end-of-generation ones) in the text: tool-call
    /// markers such as Qwen's `<tool_call>` are special tokens.
    pub special: bool,
}

/// Probabilities reported for one generated token.
#[derive(Debug, Clone)]
pub struct TokenProbs {
    /// Log-probability of the chosen token.
    pub logprob: f32,
    /// The most likely tokens: `(id, bytes, logprob)`, most likely first.
    pub top: Vec<(u32, Vec<u8>, f32)>,
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopType {
    /// An end-of-generation token.
    Eos,
    /// A stop string.
    Word,
    /// `n_predict`, the context or the time limit.
    Limit,
}

impl StopType {
    /// llama-server's `stop_type`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopType::Eos => "eos",
            StopType::Word => "word",
            StopType::Limit => "limit",
        }
    }
    /// OpenAI's `finish_reason`.
    pub fn finish_reason(self) -> &'static str {
        match self {
            StopType::Eos | StopType::Word => "stop",
            StopType::Limit => "length",
        }
    }
}

/// The end of a generation.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Why it ended.
    pub stop: StopType,
    /// The stop string that ended it.
    pub stopping_word: String,
    /// Prompt tokens.
    pub n_prompt: usize,
    /// Prompt tokens reused from the slot's cache.
    pub n_cached: usize,
    /// Generated tokens.
    pub n_decoded: usize,
    /// Prompt time (ms).
    pub prompt_ms: f64,
    /// Generation time (ms).
    pub gen_ms: f64,
    /// The slot it ran on.
    pub id_slot: usize,
    /// The context filled up.
    pub truncated: bool,
}

/// What the scheduler tells a request.
#[derive(Debug)]
pub enum Event {
    /// A generated token and the text it completes (maybe empty: held back while it may
    /// start a stop string, or an incomplete UTF-8 sequence).
    Token {
        /// The slot generating it.
        slot: usize,
        /// Token id.
        id: u32,
        /// Text to send now.
        text: String,
        /// Probabilities, when asked for.
        probs: Option<TokenProbs>,
    },
    /// Text held back for a stop string that did not come, sent at the end.
    Text(String),
    /// Done; nothing follows.
    Done(Summary),
    /// Failed; nothing follows.
    Error(String),
}

/// A request for the scheduler.
pub struct Job {
    /// Task id (for logs and `/slots`).
    pub id: u64,
    /// Prompt tokens (non-empty, shorter than a slot's context).
    pub prompt: Vec<u32>,
    /// Settings.
    pub params: GenParams,
    /// Where events go; a closed channel (client gone) cancels the job.
    pub tx: UnboundedSender<Event>,
}

/// Counters for `/metrics` (llama-server's names).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Prompt tokens evaluated (not counting reused ones).
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens reused from a cache.
    pub prompt_cached: AtomicU64,
    /// Prompt time, µs.
    pub prompt_us: AtomicU64,
    /// Tokens generated.
    pub predicted: AtomicU64,
    /// Generation time, µs.
    pub predicted_us: AtomicU64,
    /// Batch passes.
    pub n_decode: AtomicU64,
    /// Sum over passes of the slots in them.
    pub busy_slots: AtomicU64,
    /// Longest sequence seen.
    pub n_tokens_max: AtomicU64,
    /// Slots generating now.
    pub processing: AtomicUsize,
    /// Requests waiting for a slot.
    pub deferred: AtomicUsize,
    /// Requests accepted.
    pub requests: AtomicU64,
    /// Requests finished.
    pub requests_done: AtomicU64,
    /// Requests refused because the queue was full.
    pub rejected: AtomicU64,
}

/// What `/slots` shows of a slot.
#[derive(Debug, Clone, Default)]
pub struct SlotInfo {
    /// Slot id.
    pub id: usize,
    /// Context size.
    pub n_ctx: usize,
    /// Busy.
    pub is_processing: bool,
    /// Task on it.
    pub id_task: Option<u64>,
    /// Tokens in its cache.
    pub n_past: usize,
    /// Tokens generated by the current task.
    pub n_decoded: usize,
    /// The current task's settings.
    pub settings: serde_json::Value,
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Slots.
    pub n_parallel: usize,
    /// Context per slot.
    pub n_ctx_slot: usize,
    /// Most tokens per pass (all slots together).
    pub n_batch: usize,
    /// Most tokens per pass of one sequence.
    pub n_ubatch: usize,
    /// Threads.
    pub n_threads: usize,
    /// K cache type.
    pub cache_type_k: gguf_models::CacheType,
    /// V cache type.
    pub cache_type_v: gguf_models::CacheType,
    /// Requests that may wait for a slot.
    pub queue_size: usize,
    /// llama-server's `--kv-unified`: all slots together hold at most this many cells
    /// (each slot may fill up to `n_ctx_slot` of them); when a pass does not fit, idle
    /// slots' caches are dropped one at a time, and when that is not enough the running
    /// requests fail with "Context size has been exceeded." (`None`: a cache per slot).
    pub kv_unified: Option<usize>,
}

/// The HTTP side's handle on the scheduler.
pub struct Engine {
    tx: Mutex<Option<Sender<Job>>>,
    queue_size: usize,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Slot states.
    pub slots: Arc<Mutex<Vec<SlotInfo>>>,
    /// Context per slot.
    pub n_ctx_slot: usize,
    /// Slots.
    pub n_parallel: usize,
    shutdown: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    next_id: AtomicU64,
}

impl Engine {
    /// Starts the scheduler thread over `model`.
    pub fn start(model: Box<dyn Model>, tok: Arc<Tokenizer>, opts: &EngineOptions) -> Result<Engine, Error> {
        let n_parallel = opts.n_parallel.max(1);
        let pool = Arc::new(gguf_models::Pool::new(opts.n_threads.max(1)));
        let mut slots = Vec::with_capacity(n_parallel);
        for id in 0..n_parallel {
            let st = model.new_state(&StateOptions {
                n_ctx: opts.n_ctx_slot,
                n_threads: opts.n_threads.max(1),
                cache_type_k: opts.cache_type_k,
                cache_type_v: opts.cache_type_v,
                n_ubatch: opts.n_ubatch.max(1),
                pool: Some(pool.clone()),
            })?;
            slots.push(Slot { id, state: st, cached: Vec::new(), aligned_end: 0, active: None, last_used: 0 });
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let metrics = Arc::new(Metrics::default());
        let infos = Arc::new(Mutex::new(
            (0..n_parallel).map(|id| SlotInfo { id, n_ctx: opts.n_ctx_slot, ..Default::default() }).collect(),
        ));
        let shutdown = Arc::new(AtomicBool::new(false));
        let mut sched = Scheduler {
            model,
            tok,
            slots,
            rx,
            waiting: VecDeque::new(),
            metrics: metrics.clone(),
            infos: infos.clone(),
            shutdown: shutdown.clone(),
            n_batch: opts.n_batch.max(1),
            n_ubatch: opts.n_ubatch.max(1),
            kv_unified: opts.kv_unified,
            clock: 0,
            profile: std::env::var_os("GGUF_SERVE_PROFILE").map(|_| Profile::default()),
        };
        let thread = std::thread::Builder::new()
            .name("gguf-scheduler".into())
            .spawn(move || sched.run())
            .map_err(|e| Error::Io(format!("starting the scheduler thread: {e}")))?;
        Ok(Engine {
            tx: Mutex::new(Some(tx)),
            queue_size: opts.queue_size,
            metrics,
            slots: infos,
            n_ctx_slot: opts.n_ctx_slot,
            n_parallel,
            shutdown,
            thread: Mutex::new(Some(thread)),
            next_id: AtomicU64::new(0),
        })
    }

    /// A fresh task id.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues a job; `Err` when `queue_size` requests already wait beyond the free slots,
    /// or the engine is stopping.
    pub fn submit(&self, job: Job) -> Result<(), Error> {
        let guard = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = guard.as_ref() else {
            return Err(Error::Unavailable("the server is shutting down".into()));
        };
        let m = &self.metrics;
        let free = self.n_parallel.saturating_sub(m.processing.load(Ordering::SeqCst));
        if m.deferred.load(Ordering::SeqCst) >= free + self.queue_size {
            m.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(Error::Unavailable(format!(
                "the request queue is full ({} waiting); try again later",
                self.queue_size
            )));
        }
        m.deferred.fetch_add(1, Ordering::SeqCst);
        if tx.send(job).is_err() {
            m.deferred.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::Unavailable("the scheduler has stopped".into()));
        }
        m.requests.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Stops taking jobs, ends running ones (their clients get what was generated, with
    /// `finish_reason` "length") and waits for the scheduler thread.
    pub fn shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

struct Active {
    job: Job,
    /// Prompt tokens in the cache.
    pos: usize,
    /// The prompt is read in chunks aligned at multiples of `n_ubatch` from position 0
    /// over cells that were too (false after an unaligned reuse or a KV shift).
    aligned: bool,
    sampler: Sampler,
    /// The chain always picks the largest logit when it is unique ([`picks_argmax`]).
    greedy: bool,
    generated: Vec<u32>,
    /// The last sampled token, not yet in the cache.
    next: Option<u32>,
    pending: Vec<u8>,
    text: String,
    sent: usize,
    n_cached: usize,
    /// 1 when an end-of-generation token was sampled (counted, not shown).
    n_eog: usize,
    t_start: Instant,
    t_first: Option<Instant>,
}

struct Slot {
    id: usize,
    state: Box<dyn State>,
    /// Tokens in the cache (prompt, then generated).
    cached: Vec<u32>,
    /// Cells below this were computed in whole aligned prompt chunks.
    aligned_end: usize,
    active: Option<Active>,
    last_used: u64,
}

struct Scheduler {
    model: Box<dyn Model>,
    tok: Arc<Tokenizer>,
    slots: Vec<Slot>,
    rx: Receiver<Job>,
    waiting: VecDeque<Job>,
    metrics: Arc<Metrics>,
    infos: Arc<Mutex<Vec<SlotInfo>>>,
    shutdown: Arc<AtomicBool>,
    n_batch: usize,
    n_ubatch: usize,
    kv_unified: Option<usize>,
    clock: u64,
    /// `GGUF_SERVE_PROFILE` set: where the scheduler's time goes, printed to stderr
    /// whenever the server falls idle.
    profile: Option<Profile>,
}

/// Scheduler time by phase (µs) and passes by number of segments.
#[derive(Default)]
struct Profile {
    steps: u64,
    segments: u64,
    prompt_tokens: u64,
    forward_us: u64,
    sample_us: u64,
    other_us: u64,
    t_last: Option<Instant>,
}

impl Profile {
    fn report(&mut self) {
        if self.steps > 0 {
            eprintln!(
                "profile: {} passes ({:.2} segments each, {} prompt tokens): forward {:.1} ms, sample+send {:.1} ms, other {:.1} ms; per pass {:.2} / {:.2} / {:.2} ms",
                self.steps,
                self.segments as f64 / self.steps as f64,
                self.prompt_tokens,
                self.forward_us as f64 / 1e3,
                self.sample_us as f64 / 1e3,
                self.other_us as f64 / 1e3,
                self.forward_us as f64 / 1e3 / self.steps as f64,
                self.sample_us as f64 / 1e3 / self.steps as f64,
                self.other_us as f64 / 1e3 / self.steps as f64,
            );
        }
        *self = Profile::default();
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// llama-server's prompt reuse with `n_cache_reuse = min > 0`: the whole common prefix of
/// the cache and the prompt, then, walking on through the cache, every run of at least
/// `min` tokens that continues the prompt where the reused part ends (its cells are to be
/// shifted there). Returns the prefix length and the chunks `(cache position, length)`.
pub fn reuse_plan(cached: &[u32], prompt: &[u32], min: usize) -> (usize, Vec<(usize, usize)>) {
    let keep = common_prefix(cached, prompt);
    let mut chunks = Vec::new();
    let (mut head_c, mut head_p) = (keep, keep);
    while min > 0 && head_c < cached.len() && head_p < prompt.len() {
        let n = common_prefix(&cached[head_c..], &prompt[head_p..]);
        if n >= min {
            chunks.push((head_c, n));
            head_c += n;
            head_p += n;
        } else {
            head_c += 1;
        }
    }
    (keep, chunks)
}

impl Scheduler {
    fn run(&mut self) {
        let mut open = true;
        loop {
            if self.shutdown.load(Ordering::SeqCst) {
                self.stop_all();
                break;
            }
            // Take what has arrived.
            while open {
                match self.rx.try_recv() {
                    Ok(job) => self.waiting.push_back(job),
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => open = false,
                }
            }
            self.admit();
            if self.slots.iter().all(|s| s.active.is_none()) {
                if let Some(p) = self.profile.as_mut() {
                    p.report();
                }
                if !open && self.waiting.is_empty() {
                    break;
                }
                match self.rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(job) => self.waiting.push_back(job),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => open = false,
                }
                continue;
            }
            if let Err(e) = self.step() {
                // A failed pass fails every request in it; the slots are reset.
                let msg = e.to_string();
                for s in self.slots.iter_mut() {
                    if let Some(a) = s.active.take() {
                        self.metrics.processing.fetch_sub(1, Ordering::Relaxed);
                        self.metrics.requests_done.fetch_add(1, Ordering::Relaxed);
                        let _ = a.job.tx.send(Event::Error(msg.clone()));
                    }
                    s.state.truncate(0);
                    s.cached.clear();
                    s.aligned_end = 0;
                }
            }
            self.publish();
        }
        self.publish();
    }

    /// Ends every running and waiting job.
    fn stop_all(&mut self) {
        for i in 0..self.slots.len() {
            if self.slots[i].active.is_some() {
                self.finish(i, StopType::Limit, String::new(), false);
            }
        }
        while let Ok(job) = self.rx.try_recv() {
            self.waiting.push_back(job);
        }
        for job in self.waiting.drain(..) {
            let _ = job.tx.send(Event::Error("the server is shutting down".into()));
            self.metrics.deferred.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Puts waiting jobs on free slots: the asked-for slot, else the free slot with the
    /// longest reusable prefix, else the least recently used.
    fn admit(&mut self) {
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].tx.is_closed() {
                self.waiting.remove(i);
                self.metrics.deferred.fetch_sub(1, Ordering::Relaxed);
                self.metrics.requests_done.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let job = &self.waiting[i];
            let free: Vec<usize> = (0..self.slots.len()).filter(|&s| self.slots[s].active.is_none()).collect();
            if free.is_empty() {
                return;
            }
            let pick = match job.params.id_slot {
                Some(want) if want < self.slots.len() => {
                    if self.slots[want].active.is_some() {
                        i += 1;
                        continue;
                    }
                    want
                }
                _ => {
                    let reuse = |s: usize| {
                        if job.params.cache_prompt {
                            self.reusable(s, &job.prompt, job.params.n_cache_reuse)
                        } else {
                            0
                        }
                    };
                    *free
                        .iter()
                        .max_by_key(|&&s| (reuse(s), std::cmp::Reverse(self.slots[s].last_used)))
                        .expect("free is not empty")
                }
            };
            let Some(job) = self.waiting.remove(i) else { return };
            self.metrics.deferred.fetch_sub(1, Ordering::Relaxed);
            self.start(pick, job);
        }
    }

    /// Cells of slot `s` a request with `prompt` can keep (see the module docs).
    fn reusable(&self, s: usize, prompt: &[u32], n_cache_reuse: usize) -> usize {
        let slot = &self.slots[s];
        if n_cache_reuse > 0 {
            let (keep, chunks) = reuse_plan(&slot.cached, prompt, n_cache_reuse);
            return (keep + chunks.iter().map(|c| c.1).sum::<usize>()).min(prompt.len().saturating_sub(1));
        }
        let common = common_prefix(&slot.cached, prompt).min(slot.aligned_end).min(prompt.len().saturating_sub(1));
        common / self.n_ubatch * self.n_ubatch
    }

    fn start(&mut self, s: usize, job: Job) {
        let ub = self.n_ubatch;
        self.clock += 1;
        let slot = &mut self.slots[s];
        slot.last_used = self.clock;
        let last = job.prompt.len().saturating_sub(1);
        let (keep, aligned) = if !job.params.cache_prompt {
            (0, true)
        } else if job.params.n_cache_reuse == 0 {
            let common = common_prefix(&slot.cached, &job.prompt).min(slot.aligned_end).min(last);
            (common / ub * ub, true)
        } else {
            // llama-server's reuse: the whole common prefix, then chunks moved into place
            let (prefix, chunks) = reuse_plan(&slot.cached, &job.prompt, job.params.n_cache_reuse);
            slot.aligned_end = slot.aligned_end.min(prefix);
            let shifted = !chunks.is_empty()
                && match self.model.shift_cache(slot.state.as_mut(), prefix, &chunks) {
                    Ok(()) => true,
                    Err(e) => {
                        // a model that cannot shift reuses the prefix only (llama-server: "cache
                        // reuse is not supported")
                        eprintln!("slot {}: cache reuse: {e}", slot.id);
                        false
                    }
                };
            let n = if shifted { slot.state.n_past() } else { prefix };
            // at least one prompt token is evaluated, for its logits
            let keep = n.min(last);
            (keep, !shifted && keep.is_multiple_of(ub) && keep <= slot.aligned_end)
        };
        if job.params.cache_prompt && job.params.n_cache_reuse > 0 {
            // the cache now holds the prompt's first `keep` tokens (shifted chunks included)
            slot.cached.clear();
            slot.cached.extend_from_slice(&job.prompt[..keep]);
        }
        slot.state.truncate(keep);
        // a recurrent state cannot roll back: it forgets the whole sequence instead
        let keep = slot.state.n_past().min(keep);
        slot.cached.truncate(keep);
        slot.aligned_end = slot.aligned_end.min(keep);
        let mut sampler = Sampler::with_vocab(job.params.sampler.clone(), &Pieces(&self.tok));
        for &t in &job.prompt {
            sampler.accept(t);
        }
        self.metrics.processing.fetch_add(1, Ordering::Relaxed);
        self.metrics.prompt_cached.fetch_add(keep as u64, Ordering::Relaxed);
        let greedy = picks_argmax(&job.params.sampler);
        slot.active = Some(Active {
            job,
            pos: keep,
            aligned,
            greedy,
            sampler,
            generated: Vec::new(),
            next: None,
            pending: Vec::new(),
            text: String::new(),
            sent: 0,
            n_cached: keep,
            n_eog: 0,
            t_start: Instant::now(),
            t_first: None,
        });
    }

    /// One pass: every generating slot's next token and every reading slot's next
    /// prompt chunk, within `n_batch` tokens.
    fn step(&mut self) -> Result<(), Error> {
        // Drop jobs whose client went away or whose time is up.
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let Some(a) = &self.slots[i].active else { continue };
            if a.job.tx.is_closed() {
                self.release(i);
            } else if a.job.params.deadline.is_some_and(|d| now >= d) {
                self.finish(i, StopType::Limit, String::new(), false);
            }
        }
        let ub = self.n_ubatch;
        let mut budget = self.n_batch;
        // (slot, tokens, is the prompt's last chunk or a decode token)
        let mut plan: Vec<(usize, Vec<u32>, bool)> = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(Active { next: Some(t), .. }) = &s.active {
                plan.push((i, vec![*t], true));
                budget = budget.saturating_sub(1);
            }
        }
        let n_decode = plan.len();
        if !self.cells_fit(n_decode) {
            return Err(Error::Invalid("Context size has been exceeded.".into()));
        }
        let mut cells = n_decode;
        for i in 0..self.slots.len() {
            let Some(a) = &self.slots[i].active else { continue };
            if a.next.is_some() || a.pos >= a.job.prompt.len() {
                continue;
            }
            let end = (a.pos + ub).min(a.job.prompt.len());
            let n = end - a.pos;
            if n > budget && !plan.is_empty() {
                continue;
            }
            if !self.cells_fit(cells + n) {
                // the unified cache is full: this chunk waits for cells to free up
                continue;
            }
            cells += n;
            budget = budget.saturating_sub(n);
            let a = self.slots[i].active.as_ref().expect("checked above");
            plan.push((i, a.job.prompt[a.pos..end].to_vec(), end == a.job.prompt.len()));
        }
        if plan.is_empty() {
            if self.slots.iter().any(|s| s.active.as_ref().is_some_and(|a| a.pos < a.job.prompt.len())) {
                // prompts that cannot go on while nothing generates (unified cache full)
                return Err(Error::Invalid("Context size has been exceeded.".into()));
            }
            return Ok(());
        }
        let t0 = Instant::now();
        if let Some(p) = self.profile.as_mut() {
            if let Some(t) = p.t_last {
                p.other_us += (t0 - t).as_micros() as u64;
            }
            p.steps += 1;
            p.segments += plan.len() as u64;
            p.prompt_tokens += plan.iter().filter(|x| x.1.len() > 1 || !x.2).map(|x| x.1.len() as u64).sum::<u64>();
        }
        let logits = {
            let mut by_slot: Vec<Option<&mut Slot>> = self.slots.iter_mut().map(Some).collect();
            let mut segs = Vec::with_capacity(plan.len());
            for (i, tokens, last) in &plan {
                let slot = by_slot[*i].take().expect("one segment per slot");
                segs.push(Segment {
                    state: slot.state.as_mut(),
                    tokens,
                    logits: if *last { Logits::Last } else { Logits::None },
                });
            }
            self.model.forward_batch(&mut segs)?
        };
        let t1 = Instant::now();
        self.metrics.n_decode.fetch_add(1, Ordering::Relaxed);
        self.metrics.busy_slots.fetch_add(plan.len() as u64, Ordering::Relaxed);
        for ((i, tokens, last), l) in plan.into_iter().zip(logits) {
            let slot = &mut self.slots[i];
            slot.cached.extend_from_slice(&tokens);
            let a = slot.active.as_mut().expect("planned slots are active");
            if a.next.take().is_none() {
                a.pos += tokens.len();
                self.metrics.prompt_tokens.fetch_add(tokens.len() as u64, Ordering::Relaxed);
                if a.pos == a.job.prompt.len() && a.aligned {
                    slot.aligned_end = a.pos / ub * ub;
                }
            }
            self.metrics.n_tokens_max.fetch_max(slot.cached.len() as u64, Ordering::Relaxed);
            if last {
                self.sample(i, l);
            }
        }
        if let Some(p) = self.profile.as_mut() {
            let t2 = Instant::now();
            p.forward_us += (t1 - t0).as_micros() as u64;
            p.sample_us += (t2 - t1).as_micros() as u64;
            p.t_last = Some(t2);
        }
        Ok(())
    }

    /// Whether `n` more cells fit the unified cache (always, with a cache per slot); makes
    /// room by dropping idle slots' cached cells one slot at a time, as llama-server's
    /// `try_clear_idle_slots` does.
    fn cells_fit(&mut self, n: usize) -> bool {
        let Some(total) = self.kv_unified else { return true };
        loop {
            let used: usize = self.slots.iter().map(|s| s.state.n_past()).sum();
            if used + n <= total {
                return true;
            }
            let Some(idle) = self.slots.iter_mut().find(|s| s.active.is_none() && s.state.n_past() > 0) else {
                return false;
            };
            eprintln!("slot {}: purging {} cached tokens (unified KV cache full)", idle.id, idle.state.n_past());
            idle.state.truncate(0);
            idle.cached.clear();
            idle.aligned_end = 0;
        }
    }

    /// Samples slot `i`'s next token from `logits` and tells its client.
    fn sample(&mut self, i: usize, mut logits: Vec<f32>) {
        let tok = self.tok.clone();
        let slot = &mut self.slots[i];
        let n_ctx = slot.state.n_ctx();
        let n_past = slot.state.n_past();
        let a = slot.active.as_mut().expect("sampled slots are active");
        if a.t_first.is_none() {
            a.t_first = Some(Instant::now());
        }
        if a.job.params.ignore_eos {
            for e in tok.eog_ids() {
                if let Some(x) = logits.get_mut(e as usize) {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
        if let Some(c) = a.job.params.constraint.as_mut() {
            if let Err(e) = c.apply(&mut logits) {
                let e = Event::Error(format!("grammar: {e}"));
                self.end(i, e);
                return;
            }
        }
        let id = match a.greedy.then(|| unique_argmax(&logits)).flatten() {
            Some(id) => id,
            None => a.sampler.sample(&logits),
        };
        let probs = (a.job.params.n_probs > 0).then(|| probs_of(&tok, &logits, id, a.job.params.n_probs));
        a.sampler.accept(id);
        if let Some(c) = a.job.params.constraint.as_mut() {
            if let Err(e) = c.accept(id) {
                let e = Event::Error(format!("grammar: {e}"));
                self.end(i, e);
                return;
            }
        }
        if tok.is_eog(id) && !a.job.params.ignore_eos {
            // llama-server counts the end-of-generation token as predicted
            a.n_eog = 1;
            self.finish(i, StopType::Eos, String::new(), false);
            return;
        }
        a.generated.push(id);
        a.pending.extend_from_slice(&tok.token_to_piece(id, a.job.params.special).unwrap_or_default());
        let from = a.text.len();
        a.text.push_str(&drain_utf8(&mut a.pending, false));
        if let Some((p, word)) = find_stop(&a.text, from, &a.job.params.stop) {
            let word = word.to_string();
            a.text.truncate(p);
            let text = a.text.get(a.sent..).unwrap_or_default().to_string();
            a.sent = a.text.len().max(a.sent);
            let _ = a.job.tx.send(Event::Token { slot: i, id, text, probs });
            self.finish(i, StopType::Word, word, false);
            return;
        }
        let hold = partial_stop_len(&a.text, &a.job.params.stop);
        let upto = a.text.len() - hold;
        let text = if upto > a.sent { a.text[a.sent..upto].to_string() } else { String::new() };
        a.sent = a.sent.max(upto);
        if a.job.tx.send(Event::Token { slot: i, id, text, probs }).is_err() {
            self.release(i);
            return;
        }
        let n_decoded = a.generated.len();
        if a.job.params.n_predict.is_some_and(|n| n_decoded >= n) {
            self.finish(i, StopType::Limit, String::new(), false);
        } else if n_past + 1 >= n_ctx {
            // prompt + generated tokens fill the slot (llama-server's limit)
            self.finish(i, StopType::Limit, String::new(), true);
        } else if a.job.params.constraint.as_ref().is_some_and(|c| c.is_finished()) {
            self.finish(i, StopType::Eos, String::new(), false);
        } else {
            a.next = Some(id);
        }
    }

    /// Sends the rest of the text and the summary, then frees the slot.
    fn finish(&mut self, i: usize, stop: StopType, word: String, truncated: bool) {
        let slot = &mut self.slots[i];
        let Some(a) = slot.active.as_mut() else { return };
        if stop != StopType::Word {
            a.text.push_str(&drain_utf8(&mut a.pending, true));
            if a.text.len() > a.sent {
                let text = a.text[a.sent..].to_string();
                a.sent = a.text.len();
                let _ = a.job.tx.send(Event::Text(text));
            }
        }
        let now = Instant::now();
        let first = a.t_first.unwrap_or(now);
        let n_decoded = a.generated.len() + a.n_eog;
        let prompt_ms = (first - a.t_start).as_secs_f64() * 1e3;
        let gen_ms = (now - first).as_secs_f64() * 1e3;
        let summary = Summary {
            stop,
            stopping_word: word,
            n_prompt: a.job.prompt.len(),
            n_cached: a.n_cached,
            n_decoded,
            prompt_ms,
            gen_ms,
            id_slot: slot.id,
            truncated,
        };
        self.metrics.predicted.fetch_add(n_decoded as u64, Ordering::Relaxed);
        self.metrics.predicted_us.fetch_add((gen_ms * 1e3) as u64, Ordering::Relaxed);
        self.metrics.prompt_us.fetch_add((prompt_ms * 1e3) as u64, Ordering::Relaxed);
        self.end(i, Event::Done(summary));
    }

    /// Frees slot `i`, then sends its last event: a client that has its answer sees the
    /// slot free in `/metrics` and `/slots`.
    fn end(&mut self, i: usize, last: Event) {
        let Some(tx) = self.slots[i].active.as_ref().map(|a| a.job.tx.clone()) else { return };
        self.release(i);
        self.publish();
        let _ = tx.send(last);
    }

    /// Frees slot `i`; its cache keeps the evaluated tokens for prefix reuse.
    fn release(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if let Some(a) = slot.active.take() {
            if a.pos < a.job.prompt.len() {
                // the prompt was cut short: only whole aligned chunks stay reusable
                slot.aligned_end = slot.aligned_end.min(a.pos / self.n_ubatch * self.n_ubatch);
            }
            self.metrics.processing.fetch_sub(1, Ordering::Relaxed);
            self.metrics.requests_done.fetch_add(1, Ordering::Relaxed);
        }
        let n = slot.state.n_past();
        slot.cached.truncate(n);
    }

    fn publish(&self) {
        let mut infos = self.infos.lock().unwrap_or_else(|e| e.into_inner());
        for (info, s) in infos.iter_mut().zip(&self.slots) {
            let id_task = s.active.as_ref().map(|a| a.job.id);
            if info.id_task != id_task || info.is_processing != s.active.is_some() {
                // the settings change with the task only (not cloned at every step)
                info.settings = s.active.as_ref().map_or(serde_json::Value::Null, |a| a.job.params.settings.clone());
            }
            info.is_processing = s.active.is_some();
            info.id_task = id_task;
            info.n_past = s.state.n_past();
            info.n_decoded = s.active.as_ref().map_or(0, |a| a.generated.len());
        }
    }
}

/// Whether the chain for `p` always ends with the largest logit when exactly one token has
/// it: temperature ≤ 0 in the chain (which keeps the first largest candidate) and no stage
/// that changes logits or may drop the top candidate (logit bias, penalties, DRY, typical,
/// XTC, dynamic temperature, Mirostat, adaptive-p). top-k, top-p, min-p and top-n-sigma
/// always keep it. Then sampling is one scan for the maximum instead of the whole chain
/// (sorting up to a vocabulary of candidates), with the same token.
pub fn picks_argmax(p: &SamplerParams) -> bool {
    use gguf_models::sampling::SamplerType as T;
    let has = |t: T| p.samplers.contains(&t);
    p.temp <= 0.0
        && has(T::Temperature)
        && p.dynatemp_range <= 0.0
        && p.mirostat == 0
        && p.logit_bias.is_empty()
        && !has(T::AdaptiveP)
        && (!has(T::Penalties)
            || p.repeat_last_n == 0
            || (p.repeat_penalty == 1.0 && p.frequency_penalty == 0.0 && p.presence_penalty == 0.0))
        && (!has(T::Dry) || p.dry_multiplier == 0.0)
        && (!has(T::TypicalP) || p.typical_p >= 1.0)
        && (!has(T::Xtc) || p.xtc_probability <= 0.0)
}

/// The index of the largest logit when no other token has it (`None` on a tie, when all
/// are -inf, or when any is NaN: then the chain decides). Written as lane-wise passes the
/// compiler vectorizes: a scan of a 152k vocabulary costs microseconds.
fn unique_argmax(logits: &[f32]) -> Option<u32> {
    const L: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; L];
    let mut nan = false;
    let chunks = logits.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for j in 0..L {
            nan |= c[j].is_nan();
            lanes[j] = if c[j] > lanes[j] { c[j] } else { lanes[j] };
        }
    }
    let mut best = f32::NEG_INFINITY;
    for &x in lanes.iter().chain(rest) {
        nan |= x.is_nan();
        best = if x > best { x } else { best };
    }
    if nan || best == f32::NEG_INFINITY || logits.iter().filter(|&&x| x == best).count() != 1 {
        return None;
    }
    logits.iter().position(|&x| x == best).map(|i| i as u32)
}

/// Log-softmax of `logits`: the chosen token's log-probability and the `n` most likely.
fn probs_of(tok: &Tokenizer, logits: &[f32], id: u32, n: usize) -> TokenProbs {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    let lp = |l: f32| (l as f64 - lse).max(f32::MIN as f64) as f32;
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let n = n.min(idx.len());
    if n > 0 && n < idx.len() {
        idx.select_nth_unstable_by(n - 1, |&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    }
    idx.truncate(n);
    idx.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
    TokenProbs {
        logprob: logits.get(id as usize).map_or(f32::MIN, |&l| lp(l)),
        top: idx
            .into_iter()
            .map(|t| (t, tok.token_to_piece(t, true).unwrap_or_default(), lp(logits[t as usize])))
            .collect(),
    }
}

/// The tokenizer as the sampler's vocabulary (DRY's sequence breakers); `gguf run` and
/// `gguf chat` use it too.
pub struct Pieces<'a>(pub &'a Tokenizer);

impl gguf_models::sampling::SamplerVocab for Pieces<'_> {
    fn n_tokens(&self) -> usize {
        self.0.n_vocab()
    }
    fn piece(&self, id: u32) -> Vec<u8> {
        self.0.decode(&[id], false, true).unwrap_or_default()
    }
    fn tokenize(&self, text: &[u8]) -> Vec<u32> {
        self.0.encode_bytes(text, false, false).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::reuse_plan;

    #[test]
    fn the_argmax_shortcut_picks_what_the_chain_picks() {
        use gguf_models::{Sampler, SamplerParams};
        let greedy = SamplerParams { temp: 0.0, seed: 3, ..Default::default() };
        assert!(super::picks_argmax(&greedy));
        let mut chain = Sampler::new(greedy.clone());
        let mut x: u64 = 12345;
        for step in 0..200 {
            let logits: Vec<f32> = (0..500)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((x >> 33) % 2000) as f32 / 100.0 - 10.0
                })
                .collect();
            match super::unique_argmax(&logits) {
                Some(id) => assert_eq!(chain.sample(&logits), id, "step {step}"),
                None => assert!(
                    logits.iter().filter(|&&l| l == logits.iter().copied().fold(f32::MIN, f32::max)).count() > 1
                ),
            }
        }
        assert_eq!(super::unique_argmax(&[1.0, 3.0, 3.0]), None);
        assert_eq!(super::unique_argmax(&[f32::NEG_INFINITY; 3]), None);
        assert_eq!(super::unique_argmax(&[1.0, f32::NAN, 0.0]), None);
        assert_eq!(super::unique_argmax(&[f32::NEG_INFINITY, -1.0, f32::NEG_INFINITY]), Some(1));
        for p in [
            SamplerParams { temp: 0.7, ..greedy.clone() },
            SamplerParams { repeat_penalty: 1.1, ..greedy.clone() },
            SamplerParams { logit_bias: vec![(1, 2.0)], ..greedy.clone() },
            SamplerParams { xtc_probability: 0.5, ..greedy.clone() },
            SamplerParams { typical_p: 0.5, ..greedy.clone() },
            SamplerParams { mirostat: 2, ..greedy.clone() },
            SamplerParams { dry_multiplier: 0.8, ..greedy.clone() },
            SamplerParams { dynatemp_range: 0.5, ..greedy.clone() },
        ] {
            assert!(!super::picks_argmax(&p), "{p:?}");
        }
    }

    #[test]
    fn reuse_plan_follows_llama_server() {
        let cached = [1, 2, 3, 9, 9, 4, 5, 6, 7, 8, 0];
        // prefix 1 2 3, then 4 5 6 7 moved up to follow it
        assert_eq!(reuse_plan(&cached, &[1, 2, 3, 4, 5, 6, 7, 11], 3), (3, vec![(5, 4)]));
        // a run shorter than the minimum is skipped
        assert_eq!(reuse_plan(&cached, &[1, 2, 3, 4, 5, 6, 7, 11], 5), (3, vec![]));
        // two chunks, in cache order
        assert_eq!(reuse_plan(&[1, 7, 7, 2, 3, 8, 4, 5], &[1, 2, 3, 4, 5], 2), (1, vec![(3, 2), (6, 2)]));
        // off
        assert_eq!(reuse_plan(&cached, &[1, 2, 3, 4, 5, 6, 7], 0), (3, vec![]));
        assert_eq!(reuse_plan(&[], &[1, 2], 1), (0, vec![]));
    }
}
