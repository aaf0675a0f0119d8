//! The per-type block math of every kernel source, built for the host (`GGUF_HOST`, see
//! `kernels/common.cuh`) with the system C++ compiler and run against ggml-quants: each
//! dequantize bit for bit, each mat-vec within its registered tolerance of the f64 dot of
//! the dequantized weights with the dequantized q8_1 activations. This checks the CUDA C
//! itself on a machine without a GPU; only the launch (threads, warp sums) is left to the
//! device runner. Skipped with a note where no `c++` runs.

use crate::common;
use gguf_cuda::registry::{self, Act, PRELUDE};
use std::path::{Path, PathBuf};

type DeqFn = unsafe extern "C" fn(*const u8, *mut f32, i64);
type MmvqFn = unsafe extern "C" fn(*const u8, *const u8, *mut f32, i32, i32, i64);
type MmvFn = unsafe extern "C" fn(*const u8, *const f32, *mut f32, i32, i32, i64);

fn cxx() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    std::process::Command::new(&cxx).arg("--version").output().ok()?.status.success().then_some(cxx)
}

fn build(cxx: &str, dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.cpp"));
    std::fs::write(&src, format!("#define GGUF_HOST 1\n{PRELUDE}\n#line 1 \"{name}.cu\"\n{source}")).unwrap();
    let lib = dir.join(format!("lib{name}.so"));
    let out = std::process::Command::new(cxx)
        .args([
            "-std=c++17",
            "-O1",
            "-ffp-contract=off",
            "-fno-fast-math",
            "-shared",
            "-fPIC",
            "-Wall",
            "-Werror",
            "-Wno-unused-function",
            "-Wno-unused-parameter",
            "-o",
        ])
        .arg(&lib)
        .arg(&src)
        .output()
        .expect("running c++");
    assert!(out.status.success(), "{name}: host build failed:\n{}", String::from_utf8_lossy(&out.stderr));
    lib
}

#[test]
fn every_kernel_source_matches_ggml_quants_on_the_host() {
    if !cfg!(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))) {
        return eprintln!("skipped: host twin check runs on Linux x86_64 / aarch64");
    }
    let Some(cxx) = cxx() else {
        return eprintln!("skipped: no C++ compiler (c++ or $CXX) for the host twin check");
    };
    let dir = std::env::temp_dir().join(format!("gguf-cuda-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut checked = Vec::new();
    for k in registry::entries() {
        let t =
            ggml_quants::by_id(k.type_id).unwrap_or_else(|| panic!("{}: no ggml-quants type {}", k.name, k.type_id));
        let lib_path = build(&cxx, &dir, k.name, k.source);
        // SAFETY: a library just built from this crate's own source; it has no initialisers.
        let lib = unsafe { libloading::Library::new(&lib_path) }.unwrap();
        if k.dequantize.is_some() {
            // SAFETY: the signature of GGUF_DEQUANTIZE_KERNEL's host loop.
            let deq: libloading::Symbol<DeqFn> =
                unsafe { lib.get(format!("host_dequantize_{}", k.name).as_bytes()) }.unwrap();
            for (seed, (rows, cols)) in common::shapes(t.block_size).into_iter().enumerate() {
                let w = if k.type_id == 9 {
                    common::q8_1(&common::values(rows * cols, seed as u64))
                } else {
                    common::blocks(t, rows, cols, seed as u64)
                };
                let want = t.dequantize_to_vec(&w).unwrap();
                let mut got = vec![f32::NAN; want.len()];
                // SAFETY: `w` holds the blocks of `want.len()` elements, `got` that many floats.
                unsafe { deq(w.as_ptr(), got.as_mut_ptr(), got.len() as i64) };
                for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        e.to_bits(),
                        "{}: dequantize {rows}x{cols}: element {i}: host twin {g}, ggml-quants {e}",
                        k.name
                    );
                }
            }
        }
        if let Some(mv) = k.matvec {
            for (seed, (rows, cols)) in common::shapes(t.block_size).into_iter().enumerate() {
                let w = common::blocks(t, rows, cols, 100 + seed as u64);
                let wf = t.dequantize_to_vec(&w).unwrap();
                let x = common::values(cols, 200 + seed as u64);
                let row_bytes = t.row_size(cols).unwrap() as i64;
                let mut got = vec![f32::NAN; rows];
                let want = match mv.act {
                    Act::Q8_1 => {
                        let xq = common::q8_1(&x);
                        // SAFETY: GGUF_MMVQ_KERNEL's host loop: `rows` rows of `row_bytes`,
                        // `cols / 32` q8_1 blocks, `rows` outputs.
                        let f: libloading::Symbol<MmvqFn> =
                            unsafe { lib.get(format!("host_{}", mv.entry).as_bytes()) }.unwrap();
                        unsafe { f(w.as_ptr(), xq.as_ptr(), got.as_mut_ptr(), cols as i32, rows as i32, row_bytes) };
                        let xd = ggml_quants::by_id(9).unwrap().dequantize_to_vec(&xq).unwrap();
                        common::reference(&wf, &xd, cols)
                    }
                    Act::F32 => {
                        // SAFETY: GGUF_MMV_KERNEL's host loop: as above with `cols` floats.
                        let f: libloading::Symbol<MmvFn> =
                            unsafe { lib.get(format!("host_{}", mv.entry).as_bytes()) }.unwrap();
                        unsafe { f(w.as_ptr(), x.as_ptr(), got.as_mut_ptr(), cols as i32, rows as i32, row_bytes) };
                        common::reference(&wf, &x, cols)
                    }
                    _ => unreachable!(),
                };
                common::check_dots(&format!("{} host mat-vec {rows}x{cols}", k.name), &got, &want, k.tolerance);
            }
        }
        checked.push(k.name);
    }
    std::fs::remove_dir_all(&dir).ok();
    eprintln!("host twins checked: {}", checked.join(" "));
    assert!(checked.len() >= 18, "{checked:?}");
}
