//! [`HybridState`]: the inference state of a model that mixes attention layers (one KV
//! cache) with recurrent layers (one [`RecurrentState`] each) — qwen35's gated delta nets,
//! granitehybrid's Mamba-2 mixers.

use std::sync::Arc;

use quant_kernels::Pool;

use crate::blocks::RecurrentState;
use crate::kv_cache::KvCache;
use crate::model::{State, StateOptions};
use crate::{Error, Result};

/// The attention layers' KV cache and the recurrent layers' states of one sequence.
pub struct HybridState {
    pub(crate) kv: KvCache,
    pub(crate) rs: Vec<RecurrentState>,
    pub(crate) n_past: usize,
    pub(crate) n_ubatch: usize,
    pub(crate) pool: Arc<Pool>,
    pub(crate) observer: Option<Arc<dyn crate::model::Observer>>,
}

impl HybridState {
    /// A fresh state over `kv` and `rs`, with `opts`' ubatch and pool (or a pool of its
    /// threads).
    pub(crate) fn new(kv: KvCache, rs: Vec<RecurrentState>, opts: &StateOptions) -> HybridState {
        let threads = opts.n_threads.max(1);
        HybridState {
            kv,
            rs,
            n_past: 0,
            n_ubatch: opts.n_ubatch.max(1),
            pool: opts.pool.clone().unwrap_or_else(|| Arc::new(Pool::new(threads))),
            observer: None,
        }
    }

    /// `state` as a [`HybridState`] with room for `n_tokens` more: an error if another
    /// model made it or the context would overflow.
    pub(crate) fn of(state: &mut dyn State, n_tokens: usize) -> Result<&mut HybridState> {
        let st = state
            .as_any_mut()
            .downcast_mut::<HybridState>()
            .ok_or_else(|| Error::Invalid("state was not made by this model".into()))?;
        if st.n_past + n_tokens > st.kv.n_ctx {
            return Err(Error::ContextFull { n_tokens, n_ctx: st.kv.n_ctx, pos: st.n_past });
        }
        Ok(st)
    }
}

impl State for HybridState {
    fn set_observer(&mut self, observer: Option<Arc<dyn crate::model::Observer>>) -> bool {
        self.observer = observer;
        true
    }
    fn n_past(&self) -> usize {
        self.n_past
    }
    fn n_ctx(&self) -> usize {
        self.kv.n_ctx
    }
    /// A recurrent state cannot be rolled back: to fewer tokens than held, it forgets all.
    fn truncate(&mut self, n: usize) {
        if n < self.n_past {
            self.n_past = 0;
            for s in &mut self.rs {
                s.clear();
            }
        }
    }
    fn cache_bytes(&self) -> usize {
        self.kv.bytes() + self.rs.iter().map(RecurrentState::bytes).sum::<usize>()
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}
