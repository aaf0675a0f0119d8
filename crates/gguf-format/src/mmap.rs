//! The one place this crate touches `unsafe`: mapping a file read-only.

use std::fs::File;
use std::ops::Deref;

/// The bytes of a file: memory-mapped, or owned for empty files and in-memory input.
#[derive(Debug)]
pub(crate) enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    pub(crate) fn map(file: &File) -> std::io::Result<Bytes> {
        if file.metadata()?.len() == 0 {
            return Ok(Bytes::Owned(Vec::new()));
        }
        // SAFETY: the map is read-only and private to this process. Another process
        // truncating or rewriting the file while it is mapped is outside what we can
        // guard against (as for every mmap-based loader, llama.cpp's included); our own
        // writer never writes to a file in place (it renames a finished temporary).
        #[allow(unsafe_code)] // the crate's one `unsafe`: the memory map
        let map = unsafe { memmap2::Mmap::map(file)? };
        // Huge pages where the page cache has them: a file system with large folios
        // (ext4, xfs, …) reads such a mapping ahead in 2 MiB folios, which the kernel then
        // maps with one page-table entry each. Decode reads every weight once per token:
        // llama-1b Q4_K_M 26.9 → 32.5 t/s on a Sapphire Rapids VM (`gguf_models::residency`).
        // Advice only: where the kernel does not follow it, nothing changes.
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        Ok(Bytes::Mapped(map))
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}
