//! A persistent worker pool with a low-overhead parallel-for, in the manner of ggml's
//! threadpool: workers spin for a short while after each job (decode calls the pool a few
//! hundred times per token, microseconds apart), then park on a condition variable.
//!
//! This file holds the crate's one `unsafe` outside `arch/`: the job closure is borrowed
//! for the duration of [`Pool::for_each`] only, and workers see it as `'static`. The
//! soundness argument is the same as `std::thread::scope`'s: `for_each` does not return
//! (not even by unwinding) until the job is closed to new workers and every worker that
//! joined it has finished with the closure.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Job = &'static (dyn Fn(usize) + Sync);

/// How long an idle worker polls (spinning, then yielding) before it parks.
const SPIN_FOR: Duration = Duration::from_millis(2);
/// How long an idle worker busy-spins before it starts yielding between polls.
const BUSY_SPIN_FOR: Duration = Duration::from_micros(200);
/// Spin iterations of the caller waiting for the last workers before it yields.
const CALLER_SPINS: u32 = 2000;

/// The published job. Workers join it under the lock (counting themselves in `active`);
/// the caller closes it under the lock, so no worker can pick up the closure after that.
struct Slot {
    job: Option<Job>,
    generation: u64,
}

struct Shared {
    slot: Mutex<Slot>,
    generation: AtomicU64,
    next: AtomicUsize,
    n_items: AtomicUsize,
    active: AtomicUsize,
    n_sleeping: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
    panicked: AtomicBool,
    /// The pool's threads, the caller included (set once the workers are started).
    n_threads: AtomicUsize,
}

thread_local! {
    /// Threads of the job whose items this thread is running (1 outside a job).
    static JOB_THREADS: std::cell::Cell<usize> = const { std::cell::Cell::new(1) };
}

/// How many threads run the current job's items at once, asked from inside an item: the
/// pool's size, or 1 outside a job and in a job run on the calling thread alone. Memory
/// kernels size their prefetch distance by it (one thread streaming alone reads further
/// ahead than two sharing the memory).
pub fn job_threads() -> usize {
    JOB_THREADS.with(|c| c.get())
}

/// Runs `f` with [`job_threads`] reading `n`, then restores it.
fn with_job_threads(n: usize, f: impl FnOnce()) {
    let old = JOB_THREADS.with(|c| c.replace(n));
    f();
    JOB_THREADS.with(|c| c.set(old));
}

/// A fixed set of worker threads; `n_threads` counts the calling thread, which takes part
/// in every [`Pool::for_each`].
///
/// The caller never waits for a worker that has not started: items are claimed one at a
/// time, workers join a job only while it is open, and the caller closes it once every
/// item is claimed. On an oversubscribed machine a descheduled worker therefore costs at
/// most the item it is running, not a whole time slice per call.
pub struct Pool {
    n_threads: usize,
    shared: Arc<Shared>,
    busy: AtomicBool,
    workers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("n_threads", &self.n_threads).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The most threads a pool runs (llama.cpp's `GGML_MAX_N_THREADS`).
pub const MAX_THREADS: usize = 512;

impl Pool {
    /// A pool of `n_threads` threads including the caller (`0` is treated as 1); starts
    /// `n_threads - 1` workers — fewer when the OS refuses a thread or past
    /// [`MAX_THREADS`]: [`Pool::n_threads`] says how many run.
    pub fn new(n_threads: usize) -> Pool {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot { job: None, generation: 0 }),
            generation: AtomicU64::new(0),
            next: AtomicUsize::new(0),
            n_items: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            n_sleeping: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            n_threads: AtomicUsize::new(1),
        });
        // As many workers as the OS gives, up to the request (and llama.cpp's cap): a
        // failed spawn leaves a smaller pool, never a panic. `n_threads()` tells the truth.
        let mut workers = Vec::new();
        for i in 1..n_threads.min(MAX_THREADS) {
            let s = Arc::clone(&shared);
            match std::thread::Builder::new().name(format!("qk-worker-{i}")).spawn(move || worker(&s)) {
                Ok(h) => workers.push(h),
                Err(_) => break,
            }
        }
        shared.n_threads.store(workers.len() + 1, Ordering::Release);
        Pool { n_threads: workers.len() + 1, shared, busy: AtomicBool::new(false), workers }
    }

    /// Threads taking part in a job, the caller included.
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Calls `f(i)` for every `i in 0..n_items`, spread over the pool's threads (items are
    /// claimed one at a time from a shared counter), and returns when all calls are done.
    /// A nested or concurrent call runs its items on the calling thread alone. A panic in
    /// `f` is re-raised here after every thread has stopped using `f`.
    pub fn for_each(&self, n_items: usize, f: &(dyn Fn(usize) + Sync)) {
        if n_items == 0 {
            return;
        }
        if self.workers.is_empty()
            || n_items == 1
            || self.busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err()
        {
            (0..n_items).for_each(f);
            return;
        }
        let s = &*self.shared;
        // SAFETY: only the lifetime is changed. Workers reach `f` only by copying it out of
        // `s.slot` while the job is open, and they count themselves in `s.active` under
        // the same lock. Below, the job is closed (`slot.job = None`) under the lock and
        // then `s.active` is awaited to reach 0, so when this function returns no worker
        // holds or can obtain the reference. The caller's own calls of `f` are wrapped in
        // `catch_unwind`, so no unwinding skips the close and the wait.
        let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Job>(f) };
        s.next.store(0, Ordering::Relaxed);
        s.n_items.store(n_items, Ordering::Relaxed);
        s.panicked.store(false, Ordering::Relaxed);
        let gen = {
            let mut slot = lock(&s.slot);
            slot.generation += 1;
            slot.job = Some(job);
            slot.generation
        };
        s.generation.store(gen, Ordering::SeqCst);
        if s.n_sleeping.load(Ordering::SeqCst) > 0 {
            let _g = lock(&s.sleep_lock);
            s.wake.notify_all();
        }
        with_job_threads(self.n_threads, || run_items(s, f));
        lock(&s.slot).job = None;
        // Workers that joined: spin briefly, then yield so that a preempted worker (an
        // oversubscribed machine) gets a core back instead of us burning our time slice.
        let mut spins = 0u32;
        while s.active.load(Ordering::Acquire) != 0 {
            spins = spins.saturating_add(1);
            if spins > CALLER_SPINS {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let panicked = s.panicked.swap(false, Ordering::Relaxed);
        self.busy.store(false, Ordering::Release);
        if panicked {
            panic!("a task run by quant_kernels::Pool::for_each panicked");
        }
    }
}

/// Elements below which [`Pool::for_rows`] stays on the calling thread (waking the pool
/// costs more than a few thousand element-wise operations).
const ROWS_MIN_ELEMS: usize = 8192;

impl Pool {
    /// Calls `f(first_row, rows)` over `data` cut into runs of whole rows of `width`
    /// elements (two runs per thread), spread over the pool; on the calling thread alone,
    /// as one run, when `data` holds fewer than 8192 elements (`ROWS_MIN_ELEMS`) or one row.
    /// For row-wise operations (norms, rope, activations, residual adds), whose rows do
    /// not depend on each other: the cut changes no row's arithmetic.
    pub fn for_rows<T: Send>(&self, data: &mut [T], width: usize, f: &(dyn Fn(usize, &mut [T]) + Sync)) {
        let n_rows = data.len().checked_div(width).unwrap_or(0);
        if self.n_threads == 1 || n_rows < 2 || data.len() < ROWS_MIN_ELEMS {
            f(0, data);
            return;
        }
        let per = n_rows.div_ceil(2 * self.n_threads);
        let runs: Vec<Mutex<&mut [T]>> = data.chunks_mut(per * width).map(Mutex::new).collect();
        self.for_each(runs.len(), &|i| f(i * per, &mut lock(&runs[i])));
    }
}

fn run_items(s: &Shared, f: &(dyn Fn(usize) + Sync)) {
    let n = s.n_items.load(Ordering::Relaxed);
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if i >= n || s.panicked.load(Ordering::Relaxed) {
            break;
        }
        if catch_unwind(AssertUnwindSafe(|| f(i))).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
    }
}

fn worker(s: &Shared) {
    let mut seen = 0u64;
    loop {
        // Spin, then yield, then park, until a new generation is published.
        let start = Instant::now();
        let mut spins = 0u32;
        let mut yielding = false;
        let mut gen = s.generation.load(Ordering::Acquire);
        while gen == seen {
            if yielding {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            spins = spins.wrapping_add(1);
            if !yielding && spins.is_multiple_of(256) && start.elapsed() > BUSY_SPIN_FOR {
                yielding = true;
            }
            if yielding && spins.is_multiple_of(16) && start.elapsed() > SPIN_FOR {
                s.n_sleeping.fetch_add(1, Ordering::SeqCst);
                let mut g = lock(&s.sleep_lock);
                while s.generation.load(Ordering::SeqCst) == seen {
                    g = s.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                drop(g);
                s.n_sleeping.fetch_sub(1, Ordering::SeqCst);
            }
            gen = s.generation.load(Ordering::Acquire);
        }
        seen = gen;
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        // Join the job if it is still open (and still the one we saw).
        let job = {
            let slot = lock(&s.slot);
            match slot.job {
                Some(f) if slot.generation == gen => {
                    s.active.fetch_add(1, Ordering::AcqRel);
                    Some(f)
                }
                _ => None,
            }
        };
        if let Some(f) = job {
            with_job_threads(s.n_threads.load(Ordering::Acquire), || run_items(s, f));
            s.active.fetch_sub(1, Ordering::Release);
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, Ordering::SeqCst);
        {
            let mut slot = lock(&s.slot);
            slot.generation += 1;
            s.generation.store(slot.generation, Ordering::SeqCst);
        }
        {
            let _g = lock(&s.sleep_lock);
            s.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// Items see their job's thread count; outside a job (and after one) it reads 1.
    #[test]
    fn items_see_how_many_threads_run_their_job() {
        assert_eq!(job_threads(), 1);
        for n in [1usize, 2, 3] {
            let pool = Pool::new(n);
            let seen = Mutex::new(Vec::new());
            pool.for_each(64, &|_| {
                lock(&seen).push(job_threads());
                std::thread::sleep(Duration::from_micros(50));
            });
            let seen = seen.into_inner().unwrap();
            assert_eq!(seen.len(), 64);
            assert!(seen.iter().all(|&t| t == pool.n_threads()), "{n}: {seen:?}");
            assert_eq!(job_threads(), 1);
        }
    }

    #[test]
    fn every_item_once() {
        for threads in 1..=4 {
            let pool = Pool::new(threads);
            for n in [0usize, 1, 2, 3, 7, 100, 1000] {
                let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                pool.for_each(n, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "threads {threads} n {n}");
            }
        }
    }

    #[test]
    fn for_rows_hands_every_row_once_with_its_index() {
        for threads in 1..=3 {
            let pool = Pool::new(threads);
            for (rows, width) in [(0usize, 4usize), (1, 9000), (3, 5), (2, 4096), (7, 3000), (100, 576)] {
                let mut data = vec![0u32; rows * width];
                let runs = AtomicU32::new(0);
                pool.for_rows(&mut data, width, &|r0, run| {
                    runs.fetch_add(1, Ordering::Relaxed);
                    assert_eq!(run.len() % width, 0);
                    for (i, row) in run.chunks_exact_mut(width).enumerate() {
                        row.iter_mut().for_each(|v| *v += (r0 + i) as u32 + 1);
                    }
                });
                for (i, row) in data.chunks_exact(width).enumerate() {
                    assert!(row.iter().all(|&v| v == i as u32 + 1), "threads {threads} rows {rows} row {i}");
                }
                let parallel = threads > 1 && rows > 1 && rows * width >= ROWS_MIN_ELEMS;
                assert_eq!(runs.load(Ordering::Relaxed) > 1, parallel, "threads {threads} rows {rows}");
            }
        }
    }

    #[test]
    fn nested_runs_inline() {
        let pool = Pool::new(3);
        let total = AtomicU32::new(0);
        pool.for_each(4, &|_| {
            pool.for_each(5, &|_| {
                total.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 20);
    }

    #[test]
    fn panic_propagates_and_pool_survives() {
        let pool = Pool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.for_each(16, &|i| {
                if i == 7 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let count = AtomicU32::new(0);
        pool.for_each(10, &|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 10);
    }

    #[test]
    fn wakes_after_parking() {
        let pool = Pool::new(2);
        std::thread::sleep(SPIN_FOR * 3);
        let count = AtomicU32::new(0);
        pool.for_each(50, &|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 50);
    }
}
