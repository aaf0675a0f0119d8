//! Cross-crate registry tests: they see every `inventory` submission linked into this
//! binary, which unit tests inside the crate cannot rely on.

use ggml_quants as gq;

/// ggml's (id, type_name, block size, bytes per block) for the built-in types, from
/// `type_traits` in ggml/src/ggml.c (llama.cpp 0c1e57098).
const BUILT_IN: &[(u32, &str, usize, usize)] = &[
    (0, "f32", 1, 4),
    (1, "f16", 1, 2),
    (2, "q4_0", 32, 18),
    (3, "q4_1", 32, 20),
    (6, "q5_0", 32, 22),
    (7, "q5_1", 32, 24),
    (8, "q8_0", 32, 34),
    (9, "q8_1", 32, 36),
    (10, "q2_K", 256, 84),
    (11, "q3_K", 256, 110),
    (12, "q4_K", 256, 144),
    (13, "q5_K", 256, 176),
    (14, "q6_K", 256, 210),
    (15, "q8_K", 256, 292),
    (24, "i8", 1, 1),
    (25, "i16", 1, 2),
    (26, "i32", 1, 4),
    (27, "i64", 1, 8),
    (28, "f64", 1, 8),
    (30, "bf16", 1, 2),
];

#[test]
fn every_built_in_type_is_registered_exactly_once() {
    assert!(gq::registry_problems().problems.is_empty(), "{:?}", gq::registry_problems());
    for &(id, name, bs, ts) in BUILT_IN {
        let t = gq::by_id(id).unwrap_or_else(|| panic!("type {name} (id {id}) not registered"));
        assert_eq!((t.name, t.block_size, t.type_size), (name, bs, ts), "id {id}");
        assert_eq!(gq::by_name(name).map(|t| t.id), Some(id));
        assert_eq!(gq::all().iter().filter(|t| t.id == id).count(), 1);
    }
    let ids: Vec<u32> = gq::all().iter().map(|t| t.id).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "all() is sorted by id");
}

#[test]
fn unknown_lookups_name_the_key_and_list_the_known() {
    let e = gq::lookup_id(4).unwrap_err().to_string();
    assert!(e.contains("unknown ggml type id 4"), "{e}");
    assert!(e.contains("12=q4_K"), "{e}");
    let e = gq::lookup_name("q7_K").unwrap_err().to_string();
    assert!(e.contains("\"q7_K\"") && e.contains("q6_K"), "{e}");
}

#[test]
fn case_insensitive_name_lookup_when_unique() {
    assert_eq!(gq::by_name("Q4_K").map(|t| t.id), Some(12));
    assert_eq!(gq::by_name("BF16").map(|t| t.id), Some(30));
}

#[test]
fn length_checks_are_errors_not_panics() {
    let t = gq::by_name("q4_0").unwrap();
    let mut out = vec![0f32; 32];
    assert!(t.dequantize(&[0u8; 17], &mut out).is_err());
    assert!(t.dequantize(&[0u8; 18], &mut out[..31]).is_err());
    assert!(t.quantize_to_vec(&[0.0; 33], 33, None).is_err());
    assert!(t.quantize_to_vec(&[0.0; 64], 32, Some(&[1.0; 31])).is_err());
    let mut dst = vec![0u8; 17];
    assert!(t.quantize_rows(&[0.0; 32], &mut dst, 32, None).is_err());
    let i32t = gq::by_name("i32").unwrap();
    assert!(i32t.quantize_to_vec(&[0.0; 4], 4, None).is_err(), "ggml has no i32 quantizer");
}

#[test]
fn every_quantizer_roundtrips_within_its_precision() {
    let n = 1024;
    let x: Vec<f32> = (0..n).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 3.0).collect();
    for t in gq::all() {
        if t.quantize_rows_fn.is_none() || t.requires_imatrix {
            continue;
        }
        let Ok(_) = t.row_size(n) else { continue };
        let q = t.quantize_to_vec(&x, n, None).unwrap();
        let y = t.dequantize_to_vec(&q).unwrap();
        let rmse = (x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / n as f32).sqrt();
        // Uniform data of amplitude 3: the 1-bit and ternary codes (q1_0, q2_0, tq1_0,
        // tq2_0, iq1_m: under 2.3 bits per weight) reach an RMSE of 3/(2·√3) ≈ 0.87; every
        // finer type stays well under 0.8.
        let bpw = 8.0 * t.type_size as f32 / t.block_size as f32;
        let bound = if bpw < 2.3 { 0.95 } else { 0.8 };
        assert!(rmse < bound, "{}: rmse {rmse} ({bpw} bits per weight)", t.name);
        let imatrix: Vec<f32> = (0..n).map(|i| 0.5 + (i % 13) as f32).collect();
        let qi = t.quantize_to_vec(&x, n, Some(&imatrix)).unwrap();
        assert_eq!(qi.len(), q.len(), "{}", t.name);
    }
}
