//! A type from outside gguf-cuda, registered the way a plug-in crate would: its format
//! with ggml-quants (`q8_test`, f32 scale + 32 int8 codes) and its CUDA kernels with
//! gguf-cuda, source `tests/it/q8_test.cu`. The compile, host-twin and runner tests then
//! cover it like a built-in type, with no change to gguf-cuda.

use ggml_quants::{GgmlType, QuantizeRefFn};
use gguf_cuda::{registry, Act, CudaKernels};

/// The made-up type's id (far above ggml's range).
pub const Q8_TEST_ID: u32 = 0x4000_00c0;

struct Q8Test;

impl GgmlType for Q8Test {
    const NAME: &'static str = "q8_test";
    const ID: u32 = Q8_TEST_ID;
    const BLOCK_SIZE: usize = 32;
    const TYPE_SIZE: usize = 36;
    const QUANTIZE_REF: Option<QuantizeRefFn> = Some(quantize);

    fn dequantize(src: &[u8], dst: &mut [f32]) {
        for (b, y) in src.chunks_exact(36).zip(dst.chunks_exact_mut(32)) {
            let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            for (yi, &q) in y.iter_mut().zip(&b[4..36]) {
                *yi = d * (q as i8) as f32;
            }
        }
    }
}

fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(36)) {
        let d = x.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[..4].copy_from_slice(&d.to_le_bytes());
        for (q, &v) in b[4..].iter_mut().zip(x) {
            *q = ((v * id).round() as i8) as u8;
        }
    }
}

ggml_quants::inventory::submit! { <Q8Test as GgmlType>::TRAITS }

gguf_registry::submit!(CudaKernels::new(Q8_TEST_ID, "q8_test", include_str!("q8_test.cu"))
    .with_dequantize("dequantize_q8_test", "dequantize_q8_test_f16")
    .with_matvec("mmvq_q8_test", Act::Q8_1)
    .with_tolerance(1e-4));

#[test]
fn a_plugin_type_is_registered_next_to_the_built_ins() {
    let k = registry::kernels(Q8_TEST_ID).expect("q8_test registered");
    assert_eq!(k.name, "q8_test");
    assert_eq!(k.entry_points(), ["dequantize_q8_test", "dequantize_q8_test_f16", "mmvq_q8_test"]);
    assert!(k.origin.contains("plugin"), "{}", k.origin);
    assert!(k.full_source().starts_with(registry::PRELUDE));
    // every built-in once, the plug-in too, and no clash
    let names: Vec<&str> = registry::all().iter().map(|k| k.name).collect();
    for n in [
        "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K",
        "q8_K", "iq4_nl", "iq4_xs", "mxfp4", "q8_test",
    ] {
        assert_eq!(names.iter().filter(|&&m| m == n).count(), 1, "{n} in {names:?}");
    }
    let report = registry::registry_problems();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
