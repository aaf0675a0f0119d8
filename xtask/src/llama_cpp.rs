//! `cargo xtask llama-cpp`: llama.cpp from the llama-cpp-python sdist, built once into
//! the cache (`<cache>/llama.cpp-src`, `<cache>/llama.cpp-build`) and reused.
//!
//! A stamp file in the build folder records the configure flags and targets; when it
//! matches and the key outputs exist, nothing runs. `--lib-only` builds just
//! `libggml-base` (all that `verify` and `bench-quants` load), for CI. A build already present without a
//! stamp (made by hand with the same flags) gets `cmake --build`, a no-op on an
//! up-to-date tree, and then the stamp.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use xshell::{cmd, Shell};

use crate::models;

/// CMake cache flags, exactly as documented in `shared/MODELS.md`.
pub const CONFIGURE_FLAGS: &[&str] = &[
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DGGML_CUDA=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=ON",
    "-DLLAMA_BUILD_TESTS=ON",
];

/// The C/C++ flags added on a CPU that reports AMX (`amx_int8` in `/proc/cpuinfo`): the
/// pinned source's AMX path (`ggml_backend_amx_mul_mat`, chosen by `-march=native` there)
/// segfaults on every model on the Sapphire Rapids VMs of this workplace (2026-12-06,
/// gdb backtrace in BENCHMARKS.md), so the reference there is the native build without
/// AMX — the same AVX-512 VNNI kernels the engine competes with. Explicit `-mno-*` flags
/// win over `-march=native` in GCC whatever their order.
const NO_AMX: &str = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16";

/// Whether this CPU reports AMX.
fn cpu_has_amx() -> bool {
    fs::read_to_string("/proc/cpuinfo").is_ok_and(|s| {
        s.lines().filter(|l| l.starts_with("flags")).any(|l| l.split_whitespace().any(|f| f == "amx_int8"))
    })
}

/// [`CONFIGURE_FLAGS`] plus, on an AMX CPU, [`NO_AMX`] for C and C++.
pub fn configure_flags() -> Vec<String> {
    let mut flags: Vec<String> = CONFIGURE_FLAGS.iter().map(|s| s.to_string()).collect();
    if cpu_has_amx() {
        flags.push(format!("-DCMAKE_C_FLAGS={NO_AMX}"));
        flags.push(format!("-DCMAKE_CXX_FLAGS={NO_AMX}"));
    }
    flags
}

/// The targets built.
pub const TARGETS: &[&str] = &[
    "llama-completion",
    "llama-bench",
    "llama-quantize",
    "llama-perplexity",
    "llama-tokenize",
    "llama-imatrix",
    "llama-gguf",
    "llama-server",
    "test-quantize-fns",
];

/// The targets of `--lib-only`: just the library the verify oracle loads.
pub const LIB_TARGETS: &[&str] = &["ggml-base"];

const STAMP: &str = ".xtask-build-stamp";
const LIB_STAMP: &str = ".xtask-build-stamp-lib";
const SRC_STAMP: &str = ".xtask-extracted";

/// `<cache>/llama.cpp-src`.
pub fn src_dir(cache: &Path) -> PathBuf {
    cache.join("llama.cpp-src")
}

/// `<cache>/llama.cpp-build`.
pub fn build_dir(cache: &Path) -> PathBuf {
    cache.join("llama.cpp-build")
}

/// The environment variable naming another build folder of the pinned source (its `bin/`
/// holding `libllama.so` and `llama-bench`) for the comparisons (`verify`, `bench`), e.g. a build
/// with `-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF` to check the engine's AVX2
/// paths (`GGUF_CPU_FEATURES=avx2`) against llama.cpp's (`cargo xtask llama-cpp --avx2`
/// builds one: [`run_avx2`]). `cargo xtask llama-cpp` ignores the variable: it builds
/// [`build_dir`] or [`avx2_build_dir`].
pub const BUILD_DIR_ENV: &str = "XTASK_LLAMA_BUILD_DIR";

/// The build folder the comparisons load llama.cpp from: [`BUILD_DIR_ENV`] when set and
/// not empty, else [`build_dir`].
pub fn loaded_build_dir(cache: &Path) -> PathBuf {
    match std::env::var_os(BUILD_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => build_dir(cache),
    }
}

/// `<cache>/llama.cpp-build/bin/libggml-base.so`.
pub fn libggml_base(cache: &Path) -> PathBuf {
    build_dir(cache).join("bin").join("libggml-base.so")
}

fn stamp_text(flags: &[String], targets: &[&str]) -> String {
    format!("{}\n-G Ninja {}\n{}\n", models::LLAMA_CPP_PYTHON, flags.join(" "), targets.join(" "))
}

fn outputs_present(build: &Path, lib_only: bool) -> bool {
    let bin = build.join("bin");
    bin.join("libggml-base.so").is_file() && (lib_only || bin.join("llama-quantize").is_file())
}

/// Whether `<cache>/llama.cpp-build` is a finished build of exactly this configuration
/// (of all [`TARGETS`], or with `lib_only` at least of [`LIB_TARGETS`]).
pub fn is_built(cache: &Path, lib_only: bool) -> bool {
    let build = build_dir(cache);
    let stamped = |file: &str, targets: &[&str]| {
        fs::read_to_string(build.join(file)).is_ok_and(|s| s == stamp_text(&configure_flags(), targets))
    };
    let full = stamped(STAMP, TARGETS) && outputs_present(&build, false);
    full || (lib_only && stamped(LIB_STAMP, LIB_TARGETS) && outputs_present(&build, true))
}

/// Fails with a hint unless libggml-base is built.
pub fn require_built(cache: &Path) -> Result<()> {
    if !outputs_present(&build_dir(cache), true) {
        bail!("no llama.cpp build in {}: run `cargo xtask llama-cpp` first", build_dir(cache).display());
    }
    Ok(())
}

/// Extracts `vendor/llama.cpp` from the sdist unless the source is already there.
pub fn ensure_src(cache: &Path) -> Result<PathBuf> {
    let src = src_dir(cache);
    let present = src.join("CMakeLists.txt").is_file() && src.join("ggml/include/ggml.h").is_file();
    if present {
        if !src.join(SRC_STAMP).is_file() {
            // Extracted earlier by hand from the same sdist: adopt it.
            fs::write(src.join(SRC_STAMP), format!("{}\n", models::LLAMA_CPP_PYTHON))?;
        }
        return Ok(src);
    }
    let sdist = models::ensure_sdist(cache)?;
    let tmp = cache.join("llama.cpp-src.partial");
    if tmp.exists() {
        fs::remove_dir_all(&tmp)?;
    }
    fs::create_dir_all(&tmp)?;
    eprintln!("extracting vendor/llama.cpp from {}", sdist.display());
    let files = models::extract_sdist(&sdist, "vendor/llama.cpp", &tmp, &|_| true)?;
    ensure!(tmp.join("CMakeLists.txt").is_file(), "sdist has no vendor/llama.cpp/CMakeLists.txt");
    fs::write(tmp.join(SRC_STAMP), format!("{}\n", models::LLAMA_CPP_PYTHON))?;
    if src.exists() {
        fs::remove_dir_all(&src)?;
    }
    fs::rename(&tmp, &src)?;
    eprintln!("llama.cpp source: {} files in {}", files.len(), src.display());
    Ok(src)
}

fn ensure_tools(sh: &Shell) -> Result<()> {
    let have = |tool: &str| cmd!(sh, "{tool} --version").quiet().ignore_stdout().ignore_stderr().run().is_ok();
    if have("cmake") && have("ninja") {
        return Ok(());
    }
    let py = models::python();
    eprintln!("cmake or ninja missing: pip install cmake ninja");
    cmd!(sh, "{py} -m pip install --disable-pip-version-check cmake ninja").run()?;
    ensure!(have("cmake") && have("ninja"), "cmake/ninja still not on PATH after pip install");
    Ok(())
}

/// Whether another build looks like it is running (the log of the hand-run build script
/// exists without its closing `EXIT` line and was written to recently).
fn other_build_running(cache: &Path) -> bool {
    let log = cache.join("build-llama.log");
    let Ok(text) = fs::read_to_string(&log) else { return false };
    if text.lines().any(|l| l.starts_with("EXIT ")) {
        return false;
    }
    fs::metadata(&log)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age.as_secs() < 600)
}

/// Whether `CMakeCache.txt` holds every flag of [`configure_flags`] (`NAME:TYPE=VALUE`).
fn cache_matches(build: &Path) -> bool {
    let Ok(text) = fs::read_to_string(build.join("CMakeCache.txt")) else { return false };
    configure_flags().iter().all(|flag| {
        let Some((name, value)) = flag.trim_start_matches("-D").split_once('=') else { return false };
        text.lines().any(|l| {
            l.split_once('=').is_some_and(|(k, v)| k.split(':').next() == Some(name) && v.eq_ignore_ascii_case(value))
        })
    })
}

/// `cargo xtask llama-cpp [--lib-only] [--force]`.
pub fn run(cache: &Path, force: bool, lib_only: bool) -> Result<PathBuf> {
    let build = build_dir(cache);
    if !force && is_built(cache, lib_only) {
        eprintln!("llama.cpp: build in {} is up to date (stamp matches)", build.display());
        return Ok(build);
    }
    ensure!(
        !other_build_running(cache),
        "another llama.cpp build is writing {}; wait for it to finish",
        cache.join("build-llama.log").display()
    );
    let src = ensure_src(cache)?;
    let sh = Shell::new()?;
    ensure_tools(&sh)?;
    let configured = build.join("build.ninja").is_file() && cache_matches(&build);
    let flags = configure_flags();
    let targets = if lib_only { LIB_TARGETS } else { TARGETS };
    cmake_build(&sh, &src, &build, (!configured || force).then_some(&flags[..]), targets)?;
    ensure!(outputs_present(&build, lib_only), "build finished without the expected files in {}/bin", build.display());
    fs::write(build.join(if lib_only { LIB_STAMP } else { STAMP }), stamp_text(&flags, targets))?;
    eprintln!("llama.cpp: built in {}", build.display());
    Ok(build)
}

/// Configures `build` from `src` with `flags` (when given) and builds `targets` there.
fn cmake_build(sh: &Shell, src: &Path, build: &Path, flags: Option<&[String]>, targets: &[&str]) -> Result<()> {
    if let Some(flags) = flags {
        cmd!(sh, "cmake -S {src} -B {build} -G Ninja {flags...}").run().context("configuring llama.cpp")?;
    }
    let jobs = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).to_string();
    cmd!(sh, "cmake --build {build} -j{jobs} --target {targets...}").run().context("building llama.cpp")?;
    Ok(())
}

/// The AVX2-only build's configure flags beyond [`CONFIGURE_FLAGS`] (whose `GGML_NATIVE=ON`
/// they turn off): what an AVX2-only CPU's native build picks, on any x86-64 machine.
const AVX2_FLAGS: &[&str] = &[
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
    "-DGGML_AVX512=OFF",
    "-DGGML_AVX512_VNNI=OFF",
    "-DGGML_AVX512_VBMI=OFF",
    "-DGGML_AVX512_BF16=OFF",
    "-DGGML_AVX_VNNI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
];

/// What the AVX2-only build makes: `llama-bench` for `cargo xtask bench`, `libllama` for
/// `verify`.
const AVX2_TARGETS: &[&str] = &["llama-bench", "llama"];

/// `<cache>/llama.cpp-build-avx2`.
pub fn avx2_build_dir(cache: &Path) -> PathBuf {
    cache.join("llama.cpp-build-avx2")
}

/// `cargo xtask llama-cpp --avx2 [--force]`: the pinned source built for AVX2 only (the
/// flags of [`AVX2_FLAGS`]) into [`avx2_build_dir`] — to compare the engine's AVX2 paths
/// (`GGUF_CPU_FEATURES=avx2`) with llama.cpp's on an AVX-512 machine through
/// [`BUILD_DIR_ENV`].
pub fn run_avx2(cache: &Path, force: bool) -> Result<PathBuf> {
    let build = avx2_build_dir(cache);
    let flags: Vec<String> = CONFIGURE_FLAGS
        .iter()
        .filter(|f| !f.starts_with("-DGGML_NATIVE=") && !f.starts_with("-DLLAMA_BUILD_TESTS="))
        .chain(AVX2_FLAGS)
        .map(|s| s.to_string())
        .collect();
    let stamp = stamp_text(&flags, AVX2_TARGETS);
    let present = build.join("bin").join("llama-bench").is_file();
    if !force && present && fs::read_to_string(build.join(STAMP)).is_ok_and(|s| s == stamp) {
        eprintln!("llama.cpp (AVX2): build in {} is up to date (stamp matches)", build.display());
        return Ok(build);
    }
    let src = ensure_src(cache)?;
    let sh = Shell::new()?;
    ensure_tools(&sh)?;
    cmake_build(&sh, &src, &build, Some(&flags), AVX2_TARGETS)?;
    ensure!(
        build.join("bin").join("llama-bench").is_file(),
        "build finished without {}/bin/llama-bench",
        build.display()
    );
    fs::write(build.join(STAMP), stamp)?;
    eprintln!("llama.cpp (AVX2): built in {}; use it with {BUILD_DIR_ENV}={}", build.display(), build.display());
    Ok(build)
}
