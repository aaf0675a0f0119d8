//! The interface every architecture implements.

use crate::kv_cache::CacheType;
use crate::Result;

/// Which positions of a batch need logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (generation).
    Last,
    /// Every token's (`gguf logits`, perplexity).
    All,
    /// None (prompt chunks whose logits nobody reads).
    None,
}

impl Logits {
    /// `tokens` in chunks of at most `n_ubatch`, each run by `run` with the logits it must
    /// return (the last chunk's for [`Logits::Last`]), the outputs concatenated: the ubatch
    /// loop of a `forward` that evaluates one chunk at a time.
    pub fn by_ubatch(
        self,
        tokens: &[u32],
        n_ubatch: usize,
        mut run: impl FnMut(&[u32], Logits) -> Result<Vec<f32>>,
    ) -> Result<Vec<f32>> {
        let ub = n_ubatch.max(1);
        let n_chunks = tokens.len().div_ceil(ub);
        let mut out = Vec::new();
        for (c, chunk) in tokens.chunks(ub).enumerate() {
            let want = match self {
                Logits::All => Logits::All,
                Logits::Last if c == n_chunks - 1 => Logits::Last,
                _ => Logits::None,
            };
            out.extend(run(chunk, want)?);
        }
        Ok(out)
    }
}

/// Options for a new inference state.
#[derive(Debug, Clone)]
pub struct StateOptions {
    /// Context size in tokens (0 = the model's training context).
    pub n_ctx: usize,
    /// Worker threads.
    pub n_threads: usize,
    /// K cache element type.
    pub cache_type_k: CacheType,
    /// V cache element type.
    pub cache_type_v: CacheType,
    /// Largest number of tokens evaluated in one pass (llama.cpp's `n_ubatch`).
    pub n_ubatch: usize,
    /// A worker pool to share with other states (the server's slots); `None` starts one
    /// of `n_threads` for this state.
    pub pool: Option<std::sync::Arc<quant_kernels::Pool>>,
}

impl Default for StateOptions {
    fn default() -> Self {
        StateOptions {
            n_ctx: 4096,
            n_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cache_type_k: CacheType::F16,
            cache_type_v: CacheType::F16,
            n_ubatch: 512,
            pool: None,
        }
    }
}

/// Sees the activations entering every weight matrix product (llama-imatrix's
/// `collect_imatrix` callback): `x` holds `n` rows of the weight's input width.
pub trait Observer: Send + Sync {
    /// A dense product with the 2-D weight `name`.
    fn matmul(&self, name: &str, x: &[f32], n: usize);
    /// The rows routed to expert `expert` (of `n_expert`) of the stacked weight `name`
    /// (`MUL_MAT_ID`); one row per (token, slot) that chose it, in (slot, token) order,
    /// `slots[r]` the top-k slot of row `r`.
    fn expert_matmul(&self, name: &str, expert: usize, n_expert: usize, x: &[f32], slots: &[usize]);
}

/// Per-sequence mutable state (KV cache, scratch, thread pool).
pub trait State: Send {
    /// Installs (or removes) an activation observer; `false` if this state cannot.
    fn set_observer(&mut self, _observer: Option<std::sync::Arc<dyn Observer>>) -> bool {
        false
    }
    /// Tokens currently in the cache.
    fn n_past(&self) -> usize;
    /// Context size.
    fn n_ctx(&self) -> usize;
    /// Forgets everything after the first `n` tokens. A state that cannot go back to an
    /// earlier position (a recurrent family's) forgets everything instead: callers read
    /// [`State::n_past`] after truncating.
    fn truncate(&mut self, n: usize);
    /// Bytes held by the KV cache.
    fn cache_bytes(&self) -> usize;
    /// For the model that made this state to reach its concrete type.
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
}

/// A loaded model.
pub trait Model: Send + Sync {
    /// `general.architecture`.
    fn arch(&self) -> &str;
    /// Vocabulary size (rows of the output matrix).
    fn n_vocab(&self) -> usize;
    /// Training context length.
    fn n_ctx_train(&self) -> usize;
    /// A human summary (layers, widths, heads) for logs.
    fn describe(&self) -> String;
    /// A fresh state.
    fn new_state(&self, opts: &StateOptions) -> Result<Box<dyn State>>;
    /// Appends `tokens` to the state's sequence and returns logits: `[n][n_vocab]` for
    /// [`Logits::All`], `[n_vocab]` for [`Logits::Last`], empty for [`Logits::None`].
    fn forward(&self, state: &mut dyn State, tokens: &[u32], logits: Logits) -> Result<Vec<f32>>;
    /// Appends each segment's tokens to its own state's sequence in one pass through the
    /// weights (llama.cpp's `llama_batch` with one sequence id per state) and returns each
    /// segment's logits as [`Model::forward`] would. Every segment's result is bitwise the
    /// one `forward` gives for it alone: it does not depend on the other segments. The
    /// default runs the segments one after another.
    fn forward_batch(&self, segments: &mut [Segment<'_>]) -> Result<Vec<Vec<f32>>> {
        segments.iter_mut().map(|s| self.forward(&mut *s.state, s.tokens, s.logits)).collect()
    }
    /// The segments as one llama.cpp ubatch, uncut whatever their length (the caller
    /// splits, as llama.cpp's `split_equal` does): their rows, in order, go through each
    /// weight as one product and the experts are routed over all of them (one
    /// `MUL_MAT_ID`), so the arithmetic is picked by the ubatch's row count — what
    /// llama-imatrix and llama-perplexity compute with several chunks per batch. A
    /// segment's result may then differ in the last bits from [`Model::forward`]'s (e.g.
    /// one-token segments, which llama.cpp multiplies as one tinyBLAS product). The
    /// default: [`Model::forward_batch`].
    fn forward_ubatch(&self, segments: &mut [Segment<'_>]) -> Result<Vec<Vec<f32>>> {
        self.forward_batch(segments)
    }
    /// Keeps the first `keep` cached positions of `state`, then moves each cached chunk
    /// `(src, n)` (positions `src..src + n`, in increasing order, not overlapping, at or
    /// after `keep`) down to follow the previous one, rotating its K by the distance moved
    /// (llama.cpp's `llama_memory_seq_rm` + `llama_memory_seq_add` and the K-shift graph,
    /// as llama-server's `--cache-reuse` uses them); the state then holds `keep` plus the
    /// chunks' tokens. The default: [`crate::Error::Unsupported`].
    fn shift_cache(&self, _state: &mut dyn State, _keep: usize, _chunks: &[(usize, usize)]) -> Result<()> {
        Err(crate::Error::Unsupported(format!("{}: KV cache shifting", self.arch())))
    }
    /// The model as an embedding encoder (bert, nomic-bert), if it is one. The default:
    /// `None` (a decoder-only model has no `gguf embed` path yet).
    fn encoder(&self) -> Option<&dyn Encoder> {
        None
    }
}

/// How an encoder turns its per-token outputs into one result per sequence (llama.cpp's
/// `llama_pooling_type`; the numbers are its enum values and `{arch}.pooling_type`'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Every token's embedding (`LLAMA_POOLING_TYPE_NONE`, 0).
    None,
    /// The mean over the sequence's tokens (1).
    Mean,
    /// The first token's (2).
    Cls,
    /// The last token's (3).
    Last,
    /// A reranker's score(s): the first token's embedding through the classifier head
    /// (`cls`, tanh, `cls.output`), `n_cls_out` floats (4).
    Rank,
}

impl Pooling {
    /// Every pooling, in llama.cpp's order.
    pub const ALL: [Pooling; 5] = [Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last, Pooling::Rank];

    /// llama.cpp's spelling (`--pooling`).
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    /// By [`Pooling::name`].
    pub fn parse(s: &str) -> Result<Pooling> {
        Pooling::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            crate::Error::Invalid(format!(
                "unknown pooling `{s}` (known: {})",
                Pooling::ALL.map(|p| p.name()).join(", ")
            ))
        })
    }

    /// By llama.cpp's enum value (`{arch}.pooling_type`); `None` for an unknown value.
    pub fn from_id(id: i64) -> Option<Pooling> {
        Pooling::ALL.get(usize::try_from(id).ok()?).copied()
    }
}

/// llama.cpp's `common_embd_normalize` of `inp` into `out`: `norm` -1 none, 0 max
/// absolute (to the int16 range), 1 taxicab, 2 Euclidean, > 2 p-norm (sums in f64).
pub fn normalize_embedding(inp: &[f32], out: &mut [f32], norm: i32) {
    let mut sum = 0.0f64;
    match norm {
        -1 => sum = 1.0,
        0 => {
            for &x in inp {
                if sum < x.abs() as f64 {
                    sum = x.abs() as f64;
                }
            }
            sum /= 32760.0;
        }
        2 => {
            for &x in inp {
                sum += (x * x) as f64;
            }
            sum = sum.sqrt();
        }
        p => {
            for &x in inp {
                sum += (x.abs() as f64).powf(p as f64);
            }
            sum = sum.powf(1.0 / p as f64);
        }
    }
    let scale = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
    for (o, &x) in out.iter_mut().zip(inp) {
        *o = x * scale;
    }
}

/// An embedding model (an encoder with no KV cache: each call sees whole sequences, as
/// llama.cpp's `llama_encode`). Why a trait of its own rather than more [`Model`] methods:
/// its input is a set of complete sequences and its output vectors, not logits of a
/// growing sequence — nothing of [`State`] applies.
pub trait Encoder: Send + Sync {
    /// Width of one embedding (`n_embd_out`).
    fn n_embd_out(&self) -> usize;
    /// Floats of one [`Pooling::Rank`] result (`n_cls_out`: the classifier's labels, 1 when
    /// the file names none).
    fn n_cls_out(&self) -> usize;
    /// The file's pooling (`{arch}.pooling_type`; absent: [`Pooling::None`], as
    /// llama.cpp's context defaults).
    fn pooling(&self) -> Pooling;
    /// Encodes each sequence (token ids, its positions from 0) on its own and pools it:
    /// per sequence, `n × n_embd_out` floats for [`Pooling::None`], `n_embd_out` for
    /// mean/cls/last, `n_cls_out` for rank. A sequence's result never depends on the others.
    /// An empty sequence, one longer than the training context (absolute position
    /// embeddings end there), a token out of range or a pooling the file cannot do is an
    /// error naming it.
    fn embed(&self, pool: &quant_kernels::Pool, seqs: &[&[u32]], pooling: Pooling) -> Result<Vec<Vec<f32>>>;
}

/// One sequence's share of a [`Model::forward_batch`].
pub struct Segment<'a> {
    /// The sequence's state (distinct per segment).
    pub state: &'a mut dyn State,
    /// Tokens to append.
    pub tokens: &'a [u32],
    /// Which logits to return.
    pub logits: Logits,
}
