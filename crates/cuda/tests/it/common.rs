//! Shared helpers: finding NVRTC / ptxas / a C++ compiler, random blocks of a type, the
//! f64 reference dot product and the tolerance check.

use rand::{Rng, SeedableRng};
use std::path::PathBuf;

/// `GGUF_CUDA_REQUIRE_NVRTC=1`: a missing NVRTC or ptxas fails the test instead of
/// skipping it (CI sets it after installing the wheels).
pub fn require_tools() -> bool {
    std::env::var("GGUF_CUDA_REQUIRE_NVRTC").is_ok_and(|v| v == "1")
}

/// Skips (prints why and returns) or, under [`require_tools`], fails.
pub fn skip(why: &str) {
    if require_tools() {
        panic!("GGUF_CUDA_REQUIRE_NVRTC=1 but {why}");
    }
    eprintln!("skipped: {why}");
}

/// A pip wheel's package folder (`nvidia.cuda_nvrtc` → `.../site-packages/nvidia/cuda_nvrtc`),
/// asked from `python3` (the packages are namespace packages: no `__file__`).
fn wheel_dir(module: &str) -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args(["-c", &format!("import {module} as m; print(list(m.__path__)[0])")])
        .output()
        .ok()?;
    out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// NVRTC: `GGUF_NVRTC_LIB`'s candidates and the system names first ([`gguf_cuda::nvrtc::Nvrtc::open`]),
/// then the `nvidia-cuda-nvrtc-cu12` wheel.
pub fn nvrtc() -> Option<gguf_cuda::nvrtc::Nvrtc> {
    if let Ok(n) = gguf_cuda::nvrtc::Nvrtc::open() {
        return Some(n);
    }
    let lib = wheel_dir("nvidia.cuda_nvrtc")?.join("lib/libnvrtc.so.12");
    gguf_cuda::nvrtc::Nvrtc::open_path(&lib).ok().flatten()
}

/// ptxas: `GGUF_PTXAS`, then `ptxas` on `PATH`, then the `nvidia-cuda-nvcc-cu12` wheel.
pub fn ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GGUF_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let works =
        |p: &std::path::Path| std::process::Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success());
    if works(std::path::Path::new("ptxas")) {
        return Some(PathBuf::from("ptxas"));
    }
    let p = wheel_dir("nvidia.cuda_nvcc")?.join("bin/ptxas");
    works(&p).then_some(p)
}

/// Random values of varied magnitude: per 32-element group a scale from 1e-3 to 10, some
/// groups all positive (so a min / offset is exercised), a few exact zeros.
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut r = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n);
    for g in 0..n.div_ceil(32) {
        let scale = 10f32.powf(r.gen_range(-3.0..1.0));
        let shift = if g % 3 == 1 { scale } else { 0.0 };
        for _ in 0..32 {
            let v: f32 = if r.gen_range(0..50) == 0 { 0.0 } else { r.gen_range(-1.0..1.0) * scale + shift };
            out.push(v);
        }
    }
    out.truncate(n);
    out
}

/// `rows × cols` values quantized to `t` (its rows quantizer, else its reference one).
pub fn blocks(t: &ggml_quants::TypeTraits, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let v = values(rows * cols, seed);
    if t.quantize_rows_fn.is_some() && !t.requires_imatrix {
        return t.quantize_to_vec(&v, cols, None).expect("quantize_rows");
    }
    let mut out = vec![0u8; t.row_size(cols).unwrap() * rows];
    t.quantize_ref(&v, &mut out).expect("quantize_ref");
    out
}

/// q8_1 of `x` by ggml-quants' `quantize_row_q8_1_ref`.
pub fn q8_1(x: &[f32]) -> Vec<u8> {
    let t = ggml_quants::by_id(9).unwrap();
    let mut out = vec![0u8; x.len() / 32 * 36];
    t.quantize_ref(x, &mut out).unwrap();
    out
}

/// Per row of `w` (dequantized, `cols` each) the f64 dot with `x` and `Σ |w_i| |x_i|`.
pub fn reference(w: &[f32], x: &[f32], cols: usize) -> Vec<(f64, f64)> {
    w.chunks_exact(cols)
        .map(|row| {
            row.iter()
                .zip(x)
                .fold((0f64, 0f64), |(s, a), (&a_, &b_)| (s + a_ as f64 * b_ as f64, a + (a_ as f64 * b_ as f64).abs()))
        })
        .collect()
}

/// Checks `got[r]` against the reference within `tol · Σ |w_i| |x_i|` (plus 1e-30).
pub fn check_dots(what: &str, got: &[f32], want: &[(f64, f64)], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: row count");
    for (r, (&g, &(w, mag))) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        let bound = tol as f64 * mag + 1e-30;
        assert!(
            err <= bound,
            "{what}: row {r}: got {g}, want {w} (|err| {err:.3e} > {bound:.3e} = {tol} · Σ|w||x| {mag:.3e})"
        );
    }
}

/// Shapes every check runs: (rows, cols in blocks of 256 elements or 32 ones).
pub fn shapes(block_size: usize) -> Vec<(usize, usize)> {
    let unit = block_size.max(32);
    vec![(1, unit), (3, 2 * unit), (17, 3 * unit), (5, 13 * unit), (2, 40 * unit), (33, 9 * unit)]
}
