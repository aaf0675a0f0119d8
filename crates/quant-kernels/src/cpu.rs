//! Which SIMD levels kernels may use: everything the CPU has, or less when the
//! `GGUF_CPU_FEATURES` environment variable caps it, so a machine tests and measures the
//! paths it would not pick by itself (the AVX2 kernels on an AVX-512 CPU, the scalar twins
//! everywhere).
//!
//! The levels, lowest first: `scalar`; `avx2` (x86-64: AVX2 + FMA + F16C) or `neon`
//! (aarch64); `avx512vnni` (x86-64: AVX-512 F/BW/VL + VNNI) or `dotprod` (aarch64);
//! `native` (no cap, the default). Every feature check of this crate (`has_avx2`,
//! `has_vnni`, `has_neon`, `has_dotprod`) answers `false` above the cap, so kernels,
//! activation quantizers, repacked layouts and the f32 ops all step down together.

use std::sync::OnceLock;

use crate::Error;

/// The environment variable read once, at the first feature check.
pub const ENV: &str = "GGUF_CPU_FEATURES";

/// A SIMD level, comparable: a cap allows every level at or below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Portable Rust only.
    Scalar,
    /// AVX2 + FMA + F16C on x86-64, NEON on aarch64.
    Simd,
    /// AVX-512 VNNI on x86-64, NEON + SDOT on aarch64.
    Wide,
    /// No cap.
    Native,
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let arm = cfg!(target_arch = "aarch64");
        f.write_str(match self {
            Level::Scalar => "scalar",
            Level::Simd if arm => "neon",
            Level::Simd => "avx2",
            Level::Wide if arm => "dotprod",
            Level::Wide => "avx512vnni",
            Level::Native => "native",
        })
    }
}

/// The names [`parse`] accepts, for messages.
pub const NAMES: &str = "scalar, avx2, neon, avx512vnni, dotprod, native";

/// Reads a level name (case-insensitive; `avx512` and `vnni` mean `avx512vnni`).
pub fn parse(s: &str) -> Result<Level, Error> {
    Ok(match s.trim().to_ascii_lowercase().as_str() {
        "scalar" | "none" => Level::Scalar,
        "avx2" | "neon" => Level::Simd,
        "avx512vnni" | "avx512" | "vnni" | "dotprod" => Level::Wide,
        "native" | "" => Level::Native,
        _ => return Err(Error::CpuFeatures { value: s.to_string(), known: NAMES }),
    })
}

/// The cap read from the environment, or the value it could not read.
fn from_env() -> &'static Result<Level, String> {
    static CAP: OnceLock<Result<Level, String>> = OnceLock::new();
    CAP.get_or_init(|| match std::env::var(ENV) {
        Ok(v) => parse(&v).map_err(|_| v),
        Err(std::env::VarError::NotPresent) => Ok(Level::Native),
        Err(std::env::VarError::NotUnicode(v)) => Err(v.to_string_lossy().into_owned()),
    })
}

/// The cap in force. A value [`parse`] refuses caps nothing here; programs call
/// [`check_env`] first to refuse it with a clear error.
pub fn cap() -> Level {
    from_env().as_ref().copied().unwrap_or(Level::Native)
}

/// Whether kernels of `level` may run (the CPU must still have the features).
#[inline]
pub fn allows(level: Level) -> bool {
    level <= cap()
}

/// `Err` naming the bad value when `GGUF_CPU_FEATURES` is set to something unknown.
pub fn check_env() -> Result<Level, Error> {
    from_env().clone().map_err(|value| Error::CpuFeatures { value, known: NAMES })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(parse("AVX2").unwrap(), Level::Simd);
        assert_eq!(parse("avx512").unwrap(), Level::Wide);
        assert_eq!(parse("scalar").unwrap(), Level::Scalar);
        assert!(Level::Scalar < Level::Simd && Level::Wide < Level::Native);
        let e = parse("sse9").unwrap_err().to_string();
        assert!(e.contains("sse9") && e.contains("avx2") && e.contains(ENV), "{e}");
    }
}
