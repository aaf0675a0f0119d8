//! Where a dense weight matrix lives after load: read into process memory ("resident", as
//! the repacked matrices always are) or read through the file's memory map.
//!
//! Decode reads every dense weight once per token, so it runs at the speed of the memory
//! the weights sit in. Pages of the file's map are page-cache pages placed wherever the
//! kernel found room when the file was first read; memory the process allocates and fills
//! itself comes in long physically contiguous runs. Measured on a Sapphire Rapids VM
//! (`examples/decodebench.rs file=…`, 2 threads, every product of one token back to back):
//! llama-1b Q4_K_M 22.6 GB/s through the map, 27.3 GB/s from a copy; qwen3-1.7b Q4_K_M
//! 23.0 vs 26.5; llama-1b Q8_0 26.6 vs 27.2 (its two-row kernel keeps fewer pages open).
//! llama.cpp reads its repacked weights (on x86 most of a Q4_K_M file) into buffers of its
//! own too.
//!
//! The default is [`Residency::Mapped`], as llama.cpp's `--mmap`: the map is made with
//! `MADV_HUGEPAGE` (`gguf-format`), and where the page cache holds the file in 2 MiB folios
//! (a large-folio file system such as ext4 reading it through that map) the kernel maps
//! them whole — llama-1b Q4_K_M decode 26.9 → 32.5 t/s, load unchanged (98 ms) — and the
//! pages stay shared with every other process mapping the file. [`Residency::Resident`]
//! (`GGUF_MMAP=0`, the CLI's `--no-mmap`) reads each dense matrix that is not repacked into
//! an anonymous map of its own asked for huge pages instead: the same decode speed
//! whatever state the page cache is in (llama-1b Q4_K_M 31.9 t/s from a fragmented page
//! cache), at a load cost that depends on how fast the system hands out 2 MiB pages
//! (qwen3-1.7b Q8_0: 0.44–2.8 s against 64 ms mapped on a VM). Mixture-of-experts expert
//! tensors are not [`crate::blocks::Linear`]s and stay mapped either way.

use std::sync::atomic::{AtomicU8, Ordering};

/// Where the dense weight matrices of the next loads live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residency {
    /// Read through the file's memory map (llama.cpp's `--mmap`), unless repacked.
    Mapped,
    /// Read into process memory (llama.cpp's `--no-mmap`).
    Resident,
}

/// 0: not set (the environment decides), 1 mapped, 2 resident.
static SETTING: AtomicU8 = AtomicU8::new(0);

/// Sets where the matrices of the loads that follow live (a process-wide setting: the CLI's
/// `--mmap` / `--no-mmap`).
pub fn set_residency(r: Residency) {
    SETTING.store(if r == Residency::Mapped { 1 } else { 2 }, Ordering::Relaxed);
}

/// The setting in force: [`set_residency`]'s, else `GGUF_MMAP=0` resident, else mapped.
pub fn residency() -> Residency {
    match SETTING.load(Ordering::Relaxed) {
        1 => Residency::Mapped,
        2 => Residency::Resident,
        _ => parse_env(std::env::var("GGUF_MMAP").ok().as_deref()),
    }
}

/// `GGUF_MMAP`: `0` (or `false`, `no`, `off`) resident, anything else mapped.
fn parse_env(v: Option<&str>) -> Residency {
    match v.map(str::trim) {
        Some("0" | "false" | "no" | "off") => Residency::Resident,
        _ => Residency::Mapped,
    }
}

/// Whether the dense matrices of the file being loaded are read into memory.
pub(crate) fn keep_resident() -> bool {
    residency() == Residency::Resident
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_asks_for_resident_weights_with_0() {
        assert_eq!(parse_env(None), Residency::Mapped);
        assert_eq!(parse_env(Some("1")), Residency::Mapped);
        assert_eq!(parse_env(Some("0")), Residency::Resident);
        assert_eq!(parse_env(Some(" off ")), Residency::Resident);
        assert_eq!(parse_env(Some("yes")), Residency::Mapped);
    }
}
