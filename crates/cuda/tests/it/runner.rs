//! The kernel runner: every registered CUDA type on the device against its CPU twin, over
//! odd shapes (1, 3, 17, 5, 2, 33 rows; 1 to 40 blocks a row; 1 and 3 activation rows).
//!
//! - dequantize: bit for bit with ggml-quants' dequantize (NVRTC compiles with
//!   `--fmad=false`, so the device does the same IEEE operations in the same order);
//! - dequantize to f16: the f16 (round to nearest even) of ggml-quants' value;
//! - quantize_q8_1: byte for byte with ggml-quants' `quantize_row_q8_1_ref`;
//! - mat-vec: within the type's registered tolerance × `Σ |w_i| |x_i|` of the f64 dot of
//!   the dequantized weights with the dequantized q8_1 activations (f32 ones for the float
//!   types).
//!
//! With no driver or no device it prints "skipped: no CUDA device (...)" and passes, unless
//! `GGUF_CUDA_REQUIRE_DEVICE=1` (the GPU session sets it, so a skip cannot pass there).

use crate::common;
use gguf_cuda::{registry, Act, Device, Error};

fn open() -> Option<Device> {
    let require = std::env::var("GGUF_CUDA_REQUIRE_DEVICE").is_ok_and(|v| v == "1");
    let nvrtc = match common::nvrtc() {
        Some(n) => n,
        None => {
            // say first whether there is a device at all
            let why = match Device::count() {
                Err(e) => format!("no CUDA device ({e})"),
                Ok(n) => format!("{n} CUDA device(s) but NVRTC not found (set GGUF_NVRTC_LIB)"),
            };
            assert!(!require, "GGUF_CUDA_REQUIRE_DEVICE=1 but {why}");
            eprintln!("skipped: {why}");
            return None;
        }
    };
    let ordinal = std::env::var("GGUF_CUDA_DEVICE").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    match Device::open_with(ordinal, nvrtc) {
        Ok(d) => Some(d),
        Err(e @ (Error::DriverNotFound { .. } | Error::NoDevice { .. })) if !require => {
            eprintln!("skipped: no CUDA device ({e})");
            None
        }
        Err(e) => panic!("opening CUDA device {ordinal}: {e}"),
    }
}

#[test]
fn every_cuda_kernel_matches_its_cpu_twin() {
    let Some(dev) = open() else { return };
    eprintln!("runner on {}", dev.describe());
    let mut done = Vec::new();
    for k in registry::all() {
        let t = ggml_quants::by_id(k.type_id).unwrap();
        for (seed, (rows, cols)) in common::shapes(t.block_size).into_iter().enumerate() {
            let seed = seed as u64;
            let w = if k.type_id == 9 {
                common::q8_1(&common::values(rows * cols, seed))
            } else {
                common::blocks(t, rows, cols, seed)
            };
            let want = t.dequantize_to_vec(&w).unwrap();
            if k.dequantize.is_some() {
                let got = dev.dequantize(k.type_id, &w).unwrap_or_else(|e| panic!("{}: {e}", k.name));
                assert_eq!(got.len(), want.len(), "{}", k.name);
                for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        e.to_bits(),
                        "{}: dequantize {rows}x{cols}: element {i}: device {g}, ggml-quants {e}",
                        k.name
                    );
                }
            }
            if k.dequantize_f16.is_some() {
                let got = dev.dequantize_f16(k.type_id, &w).unwrap_or_else(|e| panic!("{}: {e}", k.name));
                for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                    let e16 = half::f16::from_f32(*e).to_bits();
                    assert_eq!(*g, e16, "{}: dequantize_f16 {rows}x{cols}: element {i} ({e})", k.name);
                }
            }
            if k.quantize.is_some() {
                let x = common::values(rows * cols, 300 + seed);
                let got = dev.quantize_q8_1(&x).unwrap_or_else(|e| panic!("{}: {e}", k.name));
                assert_eq!(got, common::q8_1(&x), "{}: quantize {rows}x{cols}", k.name);
            }
            if let Some(mv) = k.matvec {
                for ntok in [1, 3] {
                    let x = common::values(ntok * cols, 400 + seed);
                    let got = dev.matvec(k.type_id, &w, rows, cols, &x).unwrap_or_else(|e| panic!("{}: {e}", k.name));
                    assert_eq!(got.len(), rows * ntok);
                    for tk in 0..ntok {
                        let xt = &x[tk * cols..][..cols];
                        let want_dots = match mv.act {
                            Act::Q8_1 => {
                                let xd = ggml_quants::by_id(9).unwrap().dequantize_to_vec(&common::q8_1(xt)).unwrap();
                                common::reference(&want, &xd, cols)
                            }
                            _ => common::reference(&want, xt, cols),
                        };
                        let what = format!("{} mat-vec {rows}x{cols}, token {tk} of {ntok}", k.name);
                        common::check_dots(&what, &got[tk * rows..][..rows], &want_dots, k.tolerance);
                    }
                }
            }
        }
        done.push(k.name);
    }
    eprintln!("runner: {} types checked on {}: {}", done.len(), dev.describe(), done.join(" "));
    assert!(done.len() >= 18, "{done:?}");
}

#[test]
fn bad_shapes_are_errors_not_launches() {
    let Some(dev) = open() else { return };
    assert!(matches!(dev.dequantize(2, &[0u8; 17]), Err(Error::Shape { .. })));
    assert!(matches!(dev.matvec(2, &[0u8; 18], 2, 32, &[0.0; 32]), Err(Error::Shape { .. })));
    assert!(matches!(dev.matvec(2, &[0u8; 18], 1, 32, &[0.0; 31]), Err(Error::Shape { .. })));
    assert!(matches!(dev.dequantize(0x7fff_fff0, &[]), Err(Error::Unsupported { .. })));
}
