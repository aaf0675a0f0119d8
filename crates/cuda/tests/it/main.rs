//! gguf-cuda's integration tests: the kernel sources through NVRTC and ptxas (`compile`),
//! the per-type block math on the host against ggml-quants (`host_twin`), the kernel
//! runner on a device (`runner`, skipped without one), the no-driver errors (`no_device`)
//! and a third-party type's registration (`plugin`).

// Registrations live in these crates; name them so they are linked (inventory#7).
use ggml_quants as _;
use gguf_cuda as _;

mod common;
mod compile;
mod host_twin;
mod no_device;
mod plugin;
mod runner;
