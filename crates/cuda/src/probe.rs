//! Finding the CUDA driver library before any `cudarc` call: `cudarc` opens `libcuda` on
//! first use and panics when it is absent, so every entry point of this crate asks
//! [`driver_library`] first and turns a miss into [`Error::DriverNotFound`].

use crate::error::{Error, Result};
use std::sync::OnceLock;

/// The names `dlopen` is asked for, in order (`cudarc` tries these among its own
/// candidates, so whichever one opens here opens there too).
pub fn driver_candidates() -> Vec<String> {
    if cfg!(windows) {
        vec!["nvcuda.dll".into()]
    } else {
        vec!["libcuda.so.1".into(), "libcuda.so".into()]
    }
}

/// The first driver library that opens, or [`Error::DriverNotFound`] naming every name
/// tried. The answer is computed once per process.
pub fn driver_library() -> Result<String> {
    static FOUND: OnceLock<Result<String, Vec<String>>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let tried = driver_candidates();
        for name in &tried {
            // SAFETY: opening the driver runs its initialisers, which is what loading it
            // through cudarc would do as well; the handle is dropped right away (the
            // library stays mapped if cudarc opens it again).
            if unsafe { libloading::Library::new(name) }.is_ok() {
                return Ok(name.clone());
            }
        }
        Err(tried)
    });
    match found {
        Ok(name) => Ok(name.clone()),
        Err(tried) => Err(Error::DriverNotFound { tried: tried.clone() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_miss_names_every_candidate() {
        let e = Error::DriverNotFound { tried: driver_candidates() };
        let s = e.to_string();
        assert!(s.starts_with("no CUDA driver: "), "{s}");
        for c in driver_candidates() {
            assert!(s.contains(&c), "{s}");
        }
    }
}
