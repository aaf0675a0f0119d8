//! A counting global allocator: [`measure`] runs a closure and reports the peak number of
//! heap bytes it held live, counting only allocations made on the calling thread (tests run
//! in parallel, so a process-wide counter would see the other tests too).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Forwards to [`System`], recording sizes for the thread inside [`measure`].
pub struct Counting;

#[derive(Clone, Copy)]
struct State {
    on: bool,
    current: isize,
    peak: isize,
}

thread_local! {
    // `const`-initialised and free of destructors, so using it from the allocator never
    // allocates or re-enters.
    static STATE: Cell<State> = const { Cell::new(State { on: false, current: 0, peak: 0 }) };
}

/// Records `grow` bytes allocated (counted toward the peak first) and `shrink` freed.
fn record(grow: usize, shrink: usize) {
    let _ = STATE.try_with(|s| {
        let mut st = s.get();
        if st.on {
            st.peak = st.peak.max(st.current + grow as isize);
            st.current += grow as isize - shrink as isize;
            s.set(st);
        }
    });
}

// SAFETY: every call is forwarded unchanged to `System`; the bookkeeping touches only a
// thread-local `Cell` and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            record(layout.size(), 0);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            record(layout.size(), 0);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        record(0, layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as if old and new blocks were both live for a moment.
            record(new_size, layout.size());
        }
        p
    }
}

/// Runs `f` and returns its result with the peak heap bytes it held on this thread.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, usize) {
    STATE.with(|s| s.set(State { on: true, current: 0, peak: 0 }));
    let r = f();
    let peak = STATE.with(|s| {
        let st = s.get();
        s.set(State { on: false, current: 0, peak: 0 });
        st.peak
    });
    (r, peak.max(0) as usize)
}

#[test]
fn counting_allocator_sees_allocations() {
    let (v, peak) = measure(|| vec![0u8; 100_000]);
    assert!(peak >= 100_000, "peak {peak}");
    drop(v);
    let ((), peak) = measure(|| {});
    assert_eq!(peak, 0);
}
