//! The one integration-test binary of `gguf-format` (EXAMPLES rule 17).
//!
//! - `roundtrip`: files built with `GgufWriter` holding every value type, every registered
//!   tensor type and several alignments parse back exactly and re-write byte-identically;
//!   the writer rejects bad tensors and never leaves a partial or temporary file.
//! - `hostile`: hundreds of generated malformed files, each an `Err` (never a panic) of
//!   the expected variant, and bounded memory for inputs that claim huge counts.
//! - `regressions`: fuzz crashers and bugs found while writing these tests.

// Registrations in `ggml-quants` are linked only if the binary names the crate.
use ggml_quants as _;

mod alloc;
mod hostile;
mod raw;
mod regressions;
mod roundtrip;
mod seeds;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;
