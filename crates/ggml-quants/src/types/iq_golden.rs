//! Golden checks of the 15 issue-3 types against libggml, runnable without it: for each
//! type, the FNV-1a 64 hash of what `ggml_quantize_chunk` wrote for 4 deterministic rows of
//! 512 (without and with a deterministic importance matrix) and of the f32 bits (NaN
//! canonicalised) that ggml's `to_float` decoded from 64 blocks of deterministic bytes.
//!
//! The constants were produced once by calling libggml-base (llama.cpp `0c1e57098`) through
//! Python's ctypes on inputs generated exactly as [`inputs`] does; `cargo xtask verify
//! quants` is the full comparison (≥ 10,000 blocks and ≥ 1,000 rows per type), this test
//! keeps `cargo test` able to catch a regression on its own.

use crate::registry::TypeTraits;

/// (type, hash without imatrix (0: ggml requires one), hash with imatrix, hash of the
/// decoded random blocks).
const GOLDEN: &[(&str, u64, u64, u64)] = &[
    ("iq2_xxs", 0x0, 0x756404a5021e9f02, 0x11a5ba0161e0e93c),
    ("iq2_xs", 0x0, 0xb2282c23275be7a2, 0x7614b8e3142f5744),
    ("iq3_xxs", 0x1677f90e2f080ec2, 0x199b9a90b34f61d, 0x59288b0f4b5bb649),
    ("iq1_s", 0x0, 0x6253a0698d12ed72, 0x8a71cfd0fce957f3),
    ("iq4_nl", 0xb010130f6cedaeeb, 0x2f8ea35860a5c32d, 0x75f90b436566a0b8),
    ("iq3_s", 0xe347629d1472bb61, 0x856f30e065033fa6, 0x9897414f9c8d9b1d),
    ("iq2_s", 0xf194055215ca37ef, 0x7630435d5b4ac32f, 0xa963c910219f6957),
    ("iq4_xs", 0xbb365fd47d8ac04c, 0x723f8ccb3d30ea1f, 0xf241625497dde930),
    ("iq1_m", 0x35faa886d241bce, 0xdcb1d71427bbd039, 0x7f9a790cbb8db51b),
    ("tq1_0", 0x648c2d5f1956b55a, 0x648c2d5f1956b55a, 0xce393e1210d0ba5),
    ("tq2_0", 0xb3f4aa6570ced7c8, 0xb3f4aa6570ced7c8, 0xeb2592d404d4ab98),
    ("mxfp4", 0xc502d88ef635ba32, 0xc502d88ef635ba32, 0x849821a39b569f20),
    ("nvfp4", 0xe3cc019f22510a4a, 0xe3cc019f22510a4a, 0xb62965e779f49e4e),
    ("q1_0", 0x6198e79cf7e1de20, 0x6198e79cf7e1de20, 0xc7ea44fe90955425),
    ("q2_0", 0x6577b7102d5eed97, 0x6577b7102d5eed97, 0xade112ec9dde8df5),
];

fn xorshift(seed: u32) -> impl FnMut() -> u32 {
    let mut s = seed.max(1);
    move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s
    }
}

fn floats(seed: u32, n: usize) -> Vec<f32> {
    let mut g = xorshift(seed);
    (0..n).map(|_| (g() as f32 / u32::MAX as f32) * 2.0 - 1.0).collect()
}

fn fnv(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Rows (4 × 512, amplitude 3) and the importance matrix for type `id`.
fn inputs(id: u32) -> (Vec<f32>, Vec<f32>) {
    let x = floats(0x5eed + id, 4 * 512).into_iter().map(|v| v * 3.0).collect();
    let im = floats(0xbeef + id, 512).into_iter().map(|v| v.abs() + 0.1).collect();
    (x, im)
}

fn check(t: &TypeTraits, no_im: u64, with_im: u64, dq: u64) {
    let (x, im) = inputs(t.id);
    if no_im == 0 {
        assert!(t.quantize_to_vec(&x, 512, None).is_err(), "{}: ggml requires an imatrix", t.name);
    } else {
        assert_eq!(fnv(t.quantize_to_vec(&x, 512, None).unwrap()), no_im, "{} without imatrix", t.name);
    }
    assert_eq!(fnv(t.quantize_to_vec(&x, 512, Some(&im)).unwrap()), with_im, "{} with imatrix", t.name);
    let mut g = xorshift(0xd00d + t.id);
    let raw: Vec<u8> = (0..64 * t.type_size).map(|_| g() as u8).collect();
    let y = t.dequantize_to_vec(&raw).unwrap();
    let bits = y.iter().flat_map(|v| if v.is_nan() { 0x7fc0_0000u32 } else { v.to_bits() }.to_le_bytes());
    assert_eq!(fnv(bits), dq, "{} dequantize", t.name);
}

#[test]
fn quantize_and_dequantize_match_ggml_golden_hashes() {
    for &(name, no_im, with_im, dq) in GOLDEN {
        let t = crate::by_name(name).unwrap_or_else(|| panic!("{name} not registered"));
        check(t, no_im, with_im, dq);
    }
}

/// ggml aborts or packs garbage on non-finite input; ours must return (whatever bytes) and
/// never panic, with overflow checks on.
#[test]
fn non_finite_and_extreme_input_never_panics() {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -f32::MAX, 1e-45, -0.0, 3e9, -7e20];
    for &(name, no_im, _, _) in GOLDEN {
        let t = crate::by_name(name).unwrap();
        let (mut x, im) = inputs(t.id);
        for (i, v) in x.iter_mut().enumerate() {
            if i % 7 == 0 {
                *v = specials[(i / 7) % specials.len()];
            }
        }
        let all_nan = vec![f32::NAN; 512];
        for rows in [&x[..], &all_nan[..]] {
            let _ = t.quantize_to_vec(rows, 512, Some(&im)).unwrap();
            if no_im != 0 {
                let _ = t.quantize_to_vec(rows, 512, None).unwrap();
            }
            let mut bad_im = im.clone();
            bad_im[3] = f32::NAN;
            bad_im[5] = 0.0;
            let _ = t.quantize_to_vec(rows, 512, Some(&bad_im)).unwrap();
            let _ = t.quantize_to_vec(rows, 512, Some(&[0.0; 512])).unwrap();
        }
    }
}
