//! The on-disk PTX cache: one file per (kernel source, NVRTC version, device, compute
//! capability), so a kernel is compiled once per machine rather than once per process.
//!
//! Location: `$GGUF_CUDA_CACHE`, else `$XDG_CACHE_HOME/gguf-engine/cuda`, else
//! `~/.cache/gguf-engine/cuda`. Layout: `<device>-sm<cc>/<kernel>-<hash>.ptx`, the hash an
//! FNV-1a 64 of the full source, the architecture and the NVRTC version (stable across
//! Rust versions, unlike `DefaultHasher`). A file is written to a temporary name and
//! renamed, so a concurrent reader never sees half of one. An unreadable cache is not an
//! error: the kernel is compiled again.

use crate::error::{Error, Result};
use crate::nvrtc::Nvrtc;
use std::path::{Path, PathBuf};

/// The cache folder (see the module docs), `None` when no home is known.
pub fn dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("GGUF_CUDA_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(Path::new(&d).join("gguf-engine/cuda"));
    }
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/gguf-engine/cuda"))
}

/// FNV-1a, 64 bits.
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // separator, so ("ab", "c") and ("a", "bc") differ
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A device's folder name: its name with anything but `[A-Za-z0-9_-]` as `_`, then the
/// compute capability.
pub fn device_tag(name: &str, cc: (i32, i32)) -> String {
    let clean: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    format!("{clean}-sm{}{}", cc.0, cc.1)
}

/// The cache file of one compile.
pub fn path_for(root: &Path, device_tag: &str, kernel: &str, source: &str, arch: &str, nvrtc: (i32, i32)) -> PathBuf {
    let v = format!("{}.{}", nvrtc.0, nvrtc.1);
    let h = fnv1a(&[source.as_bytes(), arch.as_bytes(), v.as_bytes()]);
    root.join(device_tag).join(format!("{kernel}-{h:016x}.ptx"))
}

/// PTX for `source` on the device `device_tag`, from the cache under `root` when there,
/// else compiled with `nvrtc` and stored. `root: None` compiles without caching.
pub fn compile_cached(
    nvrtc: &Nvrtc,
    root: Option<&Path>,
    device_tag: &str,
    kernel: &str,
    source: &str,
    arch: &str,
) -> Result<String> {
    let Some(root) = root else {
        return nvrtc.compile(kernel, source, arch);
    };
    let path = path_for(root, device_tag, kernel, source, arch, nvrtc.version());
    if let Ok(ptx) = std::fs::read_to_string(&path) {
        if ptx.contains(".entry") {
            return Ok(ptx);
        }
    }
    let ptx = nvrtc.compile(kernel, source, arch)?;
    store(&path, &ptx)?;
    Ok(ptx)
}

fn store(path: &Path, ptx: &str) -> Result<()> {
    let io = |source| Error::Cache { path: path.display().to_string(), source };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, ptx).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_separates_source_arch_version_and_device() {
        let r = Path::new("/c");
        let a = path_for(r, "H200-sm90", "q4_0", "src", "compute_90", (12, 9));
        assert_eq!(a.parent().unwrap(), Path::new("/c/H200-sm90"));
        assert!(a.file_name().unwrap().to_str().unwrap().starts_with("q4_0-"));
        assert_ne!(a, path_for(r, "H200-sm90", "q4_0", "src2", "compute_90", (12, 9)));
        assert_ne!(a, path_for(r, "H200-sm90", "q4_0", "src", "compute_80", (12, 9)));
        assert_ne!(a, path_for(r, "H200-sm90", "q4_0", "src", "compute_90", (12, 4)));
        assert_ne!(a, path_for(r, "A100-sm80", "q4_0", "src", "compute_90", (12, 9)));
        assert_eq!(device_tag("NVIDIA H200 (MIG 1g)", (9, 0)), "NVIDIA_H200__MIG_1g_-sm90");
    }

    #[test]
    fn fnv1a_is_the_published_function() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; the separator byte follows it.
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        h ^= b'a' as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        assert_eq!(h, 0xaf63dc4c8601ec8c);
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }

    #[test]
    fn store_then_read_back() {
        let d = std::env::temp_dir().join(format!("gguf-cuda-cache-test-{}", std::process::id()));
        let p = d.join("dev-sm90/k-1.ptx");
        store(&p, ".entry x").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), ".entry x");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
