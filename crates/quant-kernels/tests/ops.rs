//! `ops` against their scalar twins and against plain definitions.

use half::f16;
use quant_kernels::ops;
use quant_kernels::scalar::ops as sc;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn vec(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-4.0f32..4.0)).collect()
}

fn close(a: f32, b: f32, mag: f32) -> bool {
    (a - b).abs() <= 1e-5 * mag + 1e-6
}

#[test]
fn dots_and_axpy_match_twins() {
    let mut rng = StdRng::seed_from_u64(11);
    for n in [0usize, 1, 7, 8, 31, 32, 33, 64, 100, 1000] {
        let a = vec(&mut rng, n);
        let b = vec(&mut rng, n);
        let mag: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
        assert!(close(ops::dot_f32(&a, &b), sc::dot_f32(&a, &b), mag), "dot_f32 {n}");
        let ah: Vec<f16> = a.iter().map(|v| f16::from_f32(*v)).collect();
        let bh: Vec<f16> = b.iter().map(|v| f16::from_f32(*v)).collect();
        assert!(close(ops::dot_f16_f32(&ah, &b), sc::dot_f16_f32(&ah, &b), mag), "dot_f16_f32 {n}");
        assert!(close(ops::dot_f16_f16(&ah, &bh), sc::dot_f16_f16(&ah, &bh), mag), "dot_f16_f16 {n}");
        let mut y1 = b.clone();
        let mut y2 = b.clone();
        ops::axpy_f16(&mut y1, 0.37, &ah);
        sc::axpy_f16(&mut y2, 0.37, &ah);
        for (p, q) in y1.iter().zip(&y2) {
            assert!(close(*p, *q, 4.0), "axpy_f16 {n}");
        }
        let mut y1 = b.clone();
        let mut y2 = b.clone();
        ops::axpy_f32(&mut y1, -1.5, &a);
        sc::axpy_f32(&mut y2, -1.5, &a);
        for (p, q) in y1.iter().zip(&y2) {
            assert!(close(*p, *q, 8.0), "axpy_f32 {n}");
        }
    }
    for n in [0usize, 1, 7, 8, 9, 64, 100, 129] {
        let a = vec(&mut rng, n);
        let x: Vec<f16> = vec(&mut rng, n).iter().map(|v| f16::from_f32(*v)).collect();
        let y0: Vec<f16> = a.iter().map(|v| f16::from_f32(*v)).collect();
        let (mut y1, mut y2) = (y0.clone(), y0.clone());
        ops::mad_f16(&mut y1, 0.731, &x);
        sc::mad_f16(&mut y2, 0.731, &x);
        assert_eq!(y1, y2, "mad_f16 {n}");
        for i in 0..n {
            assert_eq!(y1[i], f16::from_f32(x[i].to_f32().mul_add(0.731, y0[i].to_f32())));
        }
        ops::scale_f16(&mut y1, 0.37);
        sc::scale_f16(&mut y2, 0.37);
        assert_eq!(y1, y2, "scale_f16 {n}");
    }
    // Mismatched lengths: the common prefix, no panic.
    assert_eq!(ops::dot_f32(&[1.0, 2.0, 3.0], &[1.0, 1.0]), 3.0);
}

#[test]
fn norms_and_activations() {
    let mut rng = StdRng::seed_from_u64(12);
    let x = vec(&mut rng, 576);
    let w = vec(&mut rng, 576);
    let mut out = vec![0f32; 576];
    ops::rms_norm(&x, &w, 1e-5, &mut out);
    let ms: f64 = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / 576.0;
    for i in 0..576 {
        let want = x[i] as f64 / (ms + 1e-5).sqrt() * w[i] as f64;
        assert!((out[i] as f64 - want).abs() < 1e-5 * want.abs().max(1.0), "rms_norm {i}");
    }
    let mut s = vec(&mut rng, 100);
    let orig = s.clone();
    ops::softmax_inplace(&mut s);
    let total: f32 = s.iter().sum();
    assert!((total - 1.0).abs() < 1e-5);
    let m = orig.iter().copied().fold(f32::MIN, f32::max);
    let z: f64 = orig.iter().map(|v| ((v - m) as f64).exp()).sum();
    for (p, o) in s.iter().zip(&orig) {
        assert!((*p as f64 - ((o - m) as f64).exp() / z).abs() < 1e-6);
    }
    let mut g = vec(&mut rng, 100);
    let u = vec(&mut rng, 100);
    let g0 = g.clone();
    ops::silu_mul_inplace(&mut g, &u);
    for i in 0..100 {
        let want = g0[i] / (1.0 + (-g0[i]).exp()) * u[i];
        assert!((g[i] - want).abs() < 1e-5 * want.abs().max(1.0));
    }
    let mut g = g0.clone();
    ops::gelu_mul_inplace(&mut g, &u);
    for i in 0..100 {
        // ggml's f16 table: gelu evaluated at f16(x), result rounded to f16.
        let xh = f16::from_f32(g0[i]).to_f32();
        let want = f16::from_f32(sc::gelu_f32(xh)).to_f32() * u[i];
        assert_eq!(g[i], want);
        assert!((g[i] - sc::gelu_f32(g0[i]) * u[i]).abs() < 1e-2 * u[i].abs().max(1.0));
    }
    assert_eq!(ops::gelu(-11.0), 0.0);
    assert_eq!(ops::gelu(12.0), 12.0);
    let mut y = vec![1.0f32, 2.0];
    ops::add_inplace(&mut y, &[0.5, 0.5]);
    ops::scale_inplace(&mut y, 2.0);
    assert_eq!(y, vec![3.0, 5.0]);
}

/// swiglu and softmax take ggml's vector `expf` of the build the CPU (and the cap) names —
/// AVX-512's or AVX2's, which round differently — for whole vectors, libm's for the tail.
#[test]
fn swiglu_and_softmax_use_the_native_builds_expf() {
    let layout = ops::native_dot_layout();
    let lanes = if layout == ops::DotLayout::Avx512 { 16 } else { 8 };
    let mut rng = StdRng::seed_from_u64(13);
    for n in [7usize, 8, 16, 100, 576] {
        let g0 = vec(&mut rng, n);
        let u = vec(&mut rng, n);
        let mut g = g0.clone();
        ops::silu_mul_inplace(&mut g, &u);
        let nv = n - n % lanes;
        for i in 0..n {
            let e = if i < nv { sc::expf_ggml_for(0.0 - g0[i], layout) } else { (-g0[i]).exp() };
            assert_eq!(g[i].to_bits(), ((g0[i] / (1.0 + e)) * u[i]).to_bits(), "swiglu {n} {i}");
        }
        let mut s = g0.clone();
        ops::softmax_inplace(&mut s);
        let m = g0.iter().copied().fold(f32::MIN, f32::max);
        let mut e: Vec<f32> = g0.iter().map(|v| v - m).collect();
        for (i, v) in e.iter_mut().enumerate() {
            *v = if i < nv { sc::expf_ggml_for(*v, layout) } else { v.exp() };
        }
        let mut sum = 0f64;
        for c in e[..nv].chunks(lanes) {
            sum += match layout {
                ops::DotLayout::Avx512 => quant_kernels::scalar::dots::reduce16(c.try_into().unwrap()),
                ops::DotLayout::Avx2 => ((c[4] + c[0]) + (c[6] + c[2])) + ((c[5] + c[1]) + (c[7] + c[3])),
            } as f64;
        }
        for v in &e[nv..] {
            sum += *v as f64;
        }
        let inv = (1.0 / sum) as f32;
        for i in 0..n {
            assert_eq!(s[i].to_bits(), (e[i] * inv).to_bits(), "softmax {n} {i}");
        }
    }
}
