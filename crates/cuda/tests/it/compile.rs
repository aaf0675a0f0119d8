//! Every registered kernel source through NVRTC for compute_80 and compute_90, and its PTX
//! through `ptxas -arch=sm_80 / sm_90`: a syntax error, a missing entry point, a ptxas
//! error (too much shared memory, too many registers) or any register spill fails. Without
//! NVRTC or ptxas it prints "skipped: ..." unless `GGUF_CUDA_REQUIRE_NVRTC=1`.

use crate::common;
use gguf_cuda::registry;

const ARCHS: [(&str, &str); 2] = [("compute_80", "sm_80"), ("compute_90", "sm_90")];

/// `N bytes spill stores, M bytes spill loads` → N + M, over every line of `ptxas -v`.
fn spills(log: &str) -> u64 {
    let mut total = 0;
    for line in log.lines() {
        let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
        for w in words.windows(3) {
            if w[1] == "bytes" && w[2] == "spill" {
                total += w[0].parse::<u64>().unwrap_or(0);
            }
        }
    }
    total
}

#[test]
fn spill_counting_reads_ptxas_lines() {
    let log = "ptxas info    : Used 30 registers, used 0 barriers, 376 bytes cmem[0]\n    0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n";
    assert_eq!(spills(log), 12);
    assert_eq!(spills("    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"), 0);
}

#[test]
fn every_kernel_source_compiles_and_assembles_for_sm80_and_sm90() {
    let Some(nvrtc) = common::nvrtc() else {
        return common::skip("NVRTC not found (set GGUF_NVRTC_LIB or pip install nvidia-cuda-nvrtc-cu12)");
    };
    let Some(ptxas) = common::ptxas() else {
        return common::skip("ptxas not found (set GGUF_PTXAS or pip install nvidia-cuda-nvcc-cu12)");
    };
    let dir = std::env::temp_dir().join(format!("gguf-cuda-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let entries = registry::entries();
    assert!(entries.len() >= 18, "{} registered sources", entries.len());
    let mut failures = Vec::new();
    let mut kernels = 0;
    for (arch, sm) in ARCHS {
        for k in entries {
            let ptx = match nvrtc.compile(k.name, &k.full_source(), arch) {
                Ok(p) => p,
                Err(e) => {
                    failures.push(e.to_string());
                    continue;
                }
            };
            for e in k.entry_points() {
                if !ptx.contains(&format!(".entry {e}(")) {
                    failures.push(format!("{}: {arch}: no entry point {e} in the PTX", k.name));
                }
            }
            let path = dir.join(format!("{}-{sm}.ptx", k.name));
            std::fs::write(&path, &ptx).unwrap();
            let out = std::process::Command::new(&ptxas)
                .arg(format!("-arch={sm}"))
                .args(["-v", "--warning-as-error", "-o"])
                .arg(dir.join(format!("{}-{sm}.cubin", k.name)))
                .arg(&path)
                .output()
                .expect("running ptxas");
            let log = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                failures.push(format!("{}: ptxas -arch={sm} failed:\n{log}", k.name));
            } else if spills(&log) > 0 {
                failures.push(format!("{}: ptxas -arch={sm}: register spills:\n{log}", k.name));
            } else {
                kernels += k.entry_points().len();
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    let (major, minor) = nvrtc.version();
    eprintln!(
        "NVRTC {major}.{minor} ({}), {}: {} sources, {kernels} kernels compiled and assembled over sm_80 + sm_90 ({} each)",
        nvrtc.path(),
        ptxas.display(),
        entries.len(),
        kernels / 2
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_syntax_error_is_a_compile_error_with_the_log() {
    let Some(nvrtc) = common::nvrtc() else {
        return common::skip("NVRTC not found");
    };
    match nvrtc.compile("broken", "extern \"C\" __global__ void k() { int x = ; }", "compute_80") {
        Err(gguf_cuda::Error::Compile { kernel, arch, log, .. }) => {
            assert_eq!((kernel.as_str(), arch.as_str()), ("broken", "compute_80"));
            assert!(log.contains("broken.cu"), "{log}");
            assert!(log.contains("error"), "{log}");
        }
        other => panic!("{other:?}"),
    }
}
