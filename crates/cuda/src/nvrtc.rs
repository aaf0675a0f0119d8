//! NVRTC, the CUDA runtime compiler, opened with `libloading` from an explicit path or the
//! usual names. This crate calls it directly (eight functions) rather than through
//! `cudarc::nvrtc`, whose loader only tries fixed names and panics on a miss: here a
//! missing library is [`Error::NvrtcNotFound`] and the library can come from a pip wheel
//! outside the loader's search path (`GGUF_NVRTC_LIB`).

use crate::error::{Error, Result};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

type Program = *mut c_void;
type Status = c_int;

type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status;
type CreateFn = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> Status;
type CompileFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> Status;
type GetFn = unsafe extern "C" fn(Program, *mut c_char) -> Status;
type DestroyFn = unsafe extern "C" fn(*mut Program) -> Status;
type ErrorStringFn = unsafe extern "C" fn(Status) -> *const c_char;

/// An opened NVRTC library.
pub struct Nvrtc {
    /// Where it was opened from.
    path: String,
    version: (i32, i32),
    create: CreateFn,
    compile: CompileFn,
    log_size: SizeFn,
    log: GetFn,
    ptx_size: SizeFn,
    ptx: GetFn,
    destroy: DestroyFn,
    error_string: ErrorStringFn,
    // Keeps the function pointers above valid; dropped last.
    _lib: libloading::Library,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc").field("path", &self.path).field("version", &self.version).finish()
    }
}

/// Where NVRTC is looked for, in order: `GGUF_NVRTC_LIB` (a file, or a folder holding
/// `libnvrtc.so.12`), the loader's own names, then `$CUDA_HOME/lib64` and
/// `/usr/local/cuda/lib64`.
pub fn candidates() -> Vec<PathBuf> {
    let names: &[&str] = if cfg!(windows) {
        &["nvrtc64_120_0.dll", "nvrtc64_12.dll"]
    } else {
        &["libnvrtc.so.12", "libnvrtc.so", "libnvrtc.so.13"]
    };
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("GGUF_NVRTC_LIB") {
        let p = PathBuf::from(p);
        if p.is_dir() {
            out.extend(names.iter().map(|n| p.join(n)));
        } else {
            out.push(p);
        }
    }
    out.extend(names.iter().map(PathBuf::from));
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(home) = std::env::var_os(var) {
            out.extend(names.iter().map(|n| Path::new(&home).join("lib64").join(n)));
        }
    }
    out.extend(names.iter().map(|n| Path::new("/usr/local/cuda/lib64").join(n)));
    out
}

/// Looks up one symbol, copying out the function pointer.
fn sym<T: Copy>(lib: &libloading::Library, path: &str, name: &'static str) -> Result<T> {
    // SAFETY: `T` is the C signature NVRTC documents for `name` (nvrtc.h, stable since
    // CUDA 11); the pointer is used only while `lib` is alive (both live in `Nvrtc`).
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|_| Error::NvrtcSymbol { library: path.to_string(), symbol: name.trim_end_matches('\0') })
}

impl Nvrtc {
    /// Opens the first of [`candidates`] that loads.
    pub fn open() -> Result<Nvrtc> {
        let tried = candidates();
        for c in &tried {
            if let Some(n) = Nvrtc::open_path(c)? {
                return Ok(n);
            }
        }
        Err(Error::NvrtcNotFound { tried: tried.iter().map(|p| p.display().to_string()).collect() })
    }

    /// Opens NVRTC from `path` (a file name the loader searches for, or a path): `Ok(None)`
    /// when it does not load, an error when it loads but is not NVRTC.
    pub fn open_path(path: &Path) -> Result<Option<Nvrtc>> {
        // SAFETY: loading NVRTC runs only its own initialisers; it has no requirements on
        // the calling thread.
        let Ok(lib) = (unsafe { libloading::Library::new(path) }) else {
            return Ok(None);
        };
        let p = path.display().to_string();
        let version_fn: VersionFn = sym(&lib, &p, "nvrtcVersion\0")?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers, as nvrtcVersion requires.
        unsafe { version_fn(&mut major, &mut minor) };
        Ok(Some(Nvrtc {
            version: (major, minor),
            create: sym(&lib, &p, "nvrtcCreateProgram\0")?,
            compile: sym(&lib, &p, "nvrtcCompileProgram\0")?,
            log_size: sym(&lib, &p, "nvrtcGetProgramLogSize\0")?,
            log: sym(&lib, &p, "nvrtcGetProgramLog\0")?,
            ptx_size: sym(&lib, &p, "nvrtcGetPTXSize\0")?,
            ptx: sym(&lib, &p, "nvrtcGetPTX\0")?,
            destroy: sym(&lib, &p, "nvrtcDestroyProgram\0")?,
            error_string: sym(&lib, &p, "nvrtcGetErrorString\0")?,
            path: p,
            _lib: lib,
        }))
    }

    /// The path or name it was opened from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// NVRTC's (major, minor) version.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    fn status(&self, s: Status) -> String {
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any code.
        let p = unsafe { (self.error_string)(s) };
        if p.is_null() {
            return format!("NVRTC error {s}");
        }
        // SAFETY: non-null, NUL-terminated, static (see above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Compiles `source` to PTX for `arch` (`"compute_80"`), C++17, `--fmad=false`.
    /// `kernel` names the source in errors and in NVRTC's messages.
    pub fn compile(&self, kernel: &str, source: &str, arch: &str) -> Result<String> {
        let fail = |status: String, log: String| Error::Compile {
            kernel: kernel.to_string(),
            arch: arch.to_string(),
            status,
            log,
        };
        let src = CString::new(source).map_err(|_| fail("source contains a NUL byte".into(), String::new()))?;
        let name =
            CString::new(format!("{kernel}.cu")).map_err(|_| fail("name contains a NUL byte".into(), String::new()))?;
        // No FMA contraction: a dequantize then performs the CPU twin's IEEE operations one by
        // one and matches it bit for bit (the mat-vec is memory-bound; the lost FMAs do
        // not show).
        let opts: Vec<CString> = [format!("--gpu-architecture={arch}"), "--std=c++17".into(), "--fmad=false".into()]
            .into_iter()
            .map(|o| CString::new(o).expect("options have no NUL"))
            .collect();
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: `src` and `name` are NUL-terminated and outlive the call; no headers
        // (count 0, null arrays), as nvrtcCreateProgram allows.
        let s = unsafe { (self.create)(&mut prog, src.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null()) };
        if s != 0 {
            return Err(fail(self.status(s), String::new()));
        }
        // SAFETY: `prog` was created above; `opt_ptrs` points at `opts`' live strings.
        let s = unsafe { (self.compile)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
        let result = if s != 0 {
            Err(fail(self.status(s), self.read(prog, self.log_size, self.log)))
        } else {
            let ptx = self.read(prog, self.ptx_size, self.ptx);
            Ok(ptx)
        };
        // SAFETY: `prog` is a live program, destroyed once.
        unsafe { (self.destroy)(&mut prog) };
        result
    }

    /// Reads the log or the PTX of a program (NUL-terminated text of the reported size).
    fn read(&self, prog: Program, size: SizeFn, get: GetFn) -> String {
        let mut n = 0usize;
        // SAFETY: `prog` is live, `n` a valid out-pointer.
        if unsafe { size(prog, &mut n) } != 0 || n == 0 {
            return String::new();
        }
        let mut buf = vec![0u8; n];
        // SAFETY: `buf` holds the `n` bytes NVRTC reported for this text.
        if unsafe { get(prog, buf.as_mut_ptr().cast()) } != 0 {
            return String::new();
        }
        while buf.last() == Some(&0) {
            buf.pop();
        }
        String::from_utf8_lossy(&buf).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_does_not_load_is_none() {
        assert!(Nvrtc::open_path(Path::new("/nonexistent/libnvrtc.so.12")).unwrap().is_none());
    }

    #[test]
    fn a_library_that_is_not_nvrtc_is_a_symbol_error() {
        let libc = if cfg!(target_os = "linux") { "libc.so.6" } else { return };
        match Nvrtc::open_path(Path::new(libc)) {
            Err(Error::NvrtcSymbol { symbol, .. }) => assert_eq!(symbol, "nvrtcVersion"),
            other => panic!("{other:?}"),
        }
    }
}
