//! The kernels against their twins, bit for bit, and the repacked layout against the
//! plain product.

use quant_kernels::registry::{kernel_for, kernels_of};
use quant_kernels::scalar::act::Q8_0_BYTES;
use quant_kernels::{matmul, matmul_rowwise, quantize_row, Matrix, Pool, Repacked, Tile};

use crate::kernels::{vec_dot_scalar, Q8_0_ID};
use crate::{layout, Q8_DEMO_BYTES, Q8_DEMO_ID};

/// A 64-bit LCG: deterministic data without a dependency.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn f32(&mut self) -> f32 {
        (self.next() as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Raw blocks with arbitrary quants (−128 included) and finite scales.
fn raw_weights(rng: &mut Lcg, rows: usize, cols: usize) -> Vec<u8> {
    let mut w = rng.bytes(rows * cols / 32 * Q8_DEMO_BYTES);
    for b in w.chunks_exact_mut(Q8_DEMO_BYTES) {
        b[..4].copy_from_slice(&(rng.f32() * 0.1).to_le_bytes());
    }
    w
}

fn raw_acts(rng: &mut Lcg, cols: usize) -> Vec<u8> {
    let mut x = rng.bytes(cols / 32 * Q8_0_BYTES);
    for b in x.chunks_exact_mut(Q8_0_BYTES) {
        b[..2].copy_from_slice(&half::f16::from_f32(rng.f32()).to_le_bytes());
    }
    x
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn kernels_are_registered_best_first() {
    let all: Vec<&str> = kernels_of(Q8_DEMO_ID).iter().map(|k| k.backend).collect();
    #[cfg(target_arch = "x86_64")]
    assert_eq!(all, ["demo-avx2", "demo-scalar"]);
    #[cfg(not(target_arch = "x86_64"))]
    assert_eq!(all, ["demo-scalar"]);
    let k = kernel_for(Q8_DEMO_ID).expect("a q8_demo kernel");
    assert_eq!(k.vec_dot_type, Q8_0_ID);
    assert!(quant_kernels::registry_problems().problems.is_empty(), "{:?}", quant_kernels::registry_problems());
}

/// The scalar twin is what its docs say: the exact block dot, scaled, summed.
#[test]
fn scalar_twin_is_the_dot_product() {
    let mut rng = Lcg(7);
    let cols = 256;
    let w = raw_weights(&mut rng, 1, cols);
    let x = raw_acts(&mut rng, cols);
    let mut want = 0f64;
    for (wb, xb) in w.chunks_exact(Q8_DEMO_BYTES).zip(x.chunks_exact(Q8_0_BYTES)) {
        let d =
            f32::from_le_bytes(wb[..4].try_into().unwrap()) as f64 * half::f16::from_le_bytes([xb[0], xb[1]]).to_f64();
        let s: i64 = (0..32).map(|i| wb[4 + i] as i8 as i64 * xb[2 + i] as i8 as i64).sum();
        want += d * s as f64;
    }
    let got = vec_dot_scalar(cols, &w, &x) as f64;
    assert!((got - want).abs() <= 1e-5 * want.abs().max(1.0), "{got} vs {want}");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_vec_dot_equals_the_scalar_twin_bit_for_bit() {
    if !quant_kernels::x86_64::has_avx2() {
        eprintln!("no AVX2 here (or GGUF_CPU_FEATURES caps it): the AVX2 kernel is the twin");
    }
    let mut rng = Lcg(1);
    for cols in [32usize, 64, 96, 256, 4096] {
        for _ in 0..20 {
            let w = raw_weights(&mut rng, 1, cols);
            let x = raw_acts(&mut rng, cols);
            let (a, b) = (crate::x86_64::vec_dot(cols, &w, &x), vec_dot_scalar(cols, &w, &x));
            assert_eq!(a.to_bits(), b.to_bits(), "{cols} columns: avx2 {a} vs scalar {b}");
        }
    }
    // Extremes: every quant −128 or 127 (no saturation anywhere).
    for (qw, qx) in [(0x80u8, 0x80u8), (0x7f, 0x80), (0x80, 0x7f)] {
        let mut w = vec![qw; 8 * Q8_DEMO_BYTES];
        let mut x = vec![qx; 8 * Q8_0_BYTES];
        w.chunks_exact_mut(Q8_DEMO_BYTES).for_each(|b| b[..4].copy_from_slice(&1.0f32.to_le_bytes()));
        x.chunks_exact_mut(Q8_0_BYTES).for_each(|b| b[..2].copy_from_slice(&half::f16::ONE.to_le_bytes()));
        let want = 256.0 * (qw as i8 as f32) * (qx as i8 as f32);
        assert_eq!(crate::x86_64::vec_dot(256, &w, &x), want);
        assert_eq!(vec_dot_scalar(256, &w, &x), want);
    }
}

#[test]
#[should_panic(expected = "Q8_0 activation row bytes for 64 columns")]
fn a_short_activation_row_is_refused() {
    let mut rng = Lcg(3);
    let w = raw_weights(&mut rng, 1, 64);
    vec_dot_scalar(64, &w, &[0u8; 34]);
}

/// Quantized weights of a `rows × cols` matrix, through the type's own quantizer.
fn weights(rng: &mut Lcg, rows: usize, cols: usize) -> Vec<u8> {
    let x: Vec<f32> = (0..rows * cols).map(|_| rng.f32()).collect();
    let mut q = vec![0u8; rows * cols / 32 * Q8_DEMO_BYTES];
    crate::quantize(&x, &mut q);
    q
}

/// The expected bits of `W · x`: the scalar twin over ggml-cpu's Q8_0 activations.
fn reference(w: &[u8], rows: usize, cols: usize, x: &[f32], n: usize) -> Vec<f32> {
    let (row, act) = (cols / 32 * Q8_DEMO_BYTES, cols / 32 * Q8_0_BYTES);
    let mut y = Vec::with_capacity(n * rows);
    for t in 0..n {
        let mut xq = vec![0u8; act];
        quantize_row(Q8_0_ID, &x[t * cols..(t + 1) * cols], &mut xq).unwrap();
        y.extend((0..rows).map(|r| vec_dot_scalar(cols, &w[r * row..(r + 1) * row], &xq)));
    }
    y
}

#[test]
fn repacked_matmul_equals_the_plain_one_bit_for_bit() {
    let mut rng = Lcg(5);
    let pool = Pool::new(3);
    // Rows: one group, groups not filling a 16-row tile, several tiles with a tail;
    // tokens: one, a partial pass of the tile's 4, several passes, token blocks (≥ 16).
    for (rows, cols) in [(4usize, 32usize), (12, 64), (36, 96), (64, 256), (260, 128)] {
        let w = weights(&mut rng, rows, cols);
        let plain = Matrix::new(Q8_DEMO_ID, &w, rows, cols).unwrap();
        let repacked = Repacked::new(&plain);
        #[cfg(target_arch = "x86_64")]
        if quant_kernels::x86_64::has_avx2() {
            let r = repacked.as_ref().expect("the AVX2 kernel repacks whole 4-row groups");
            assert_eq!(r.backend(), "demo-avx2-q8_demo_x4");
        }
        for n in [1usize, 3, 4, 7, 17, 40] {
            let x: Vec<f32> = (0..n * cols).map(|_| rng.f32() * 3.0).collect();
            let want = reference(&w, rows, cols, &x, n);
            let mut y = vec![f32::NAN; n * rows];
            matmul(&pool, &plain, &x, n, &mut y).unwrap();
            assert_eq!(bits(&y), bits(&want), "plain {rows}×{cols}, {n} tokens");
            if let Some(r) = &repacked {
                let m = r.matrix();
                let mut y = vec![f32::NAN; n * rows];
                matmul(&pool, &m, &x, n, &mut y).unwrap();
                assert_eq!(bits(&y), bits(&want), "repacked {rows}×{cols}, {n} tokens");
                let mut y = vec![f32::NAN; n * rows];
                matmul_rowwise(&pool, &m, &x, n, &mut y).unwrap();
                assert_eq!(bits(&y), bits(&want), "repacked rowwise {rows}×{cols}, {n} tokens");
            }
        }
    }
    // A shape that is not whole groups stays as stored.
    let w = weights(&mut rng, 6, 64);
    assert!(Repacked::new(&Matrix::new(Q8_DEMO_ID, &w, 6, 64).unwrap()).is_none());
}

/// The portable reader of the layout (the AVX2 tile's fallback) gives the same bits.
#[test]
fn the_layout_read_portably_equals_the_plain_rows() {
    let mut rng = Lcg(9);
    let (rows, cols, tokens) = (8usize, 96usize, 5usize);
    let w = raw_weights(&mut rng, rows, cols);
    let xs: Vec<Vec<u8>> = (0..tokens).map(|_| raw_acts(&mut rng, cols)).collect();
    let x: Vec<u8> = xs.concat();
    let packed = layout::repack(&w, rows, cols);
    assert_eq!(packed.len(), w.len());
    assert_ne!(packed, w, "the layout moves bytes");
    let row = cols / 32 * Q8_DEMO_BYTES;
    let act = cols / 32 * Q8_0_BYTES;
    let t = Tile {
        n: cols,
        w: &packed,
        w_stride: row,
        rows,
        x: &x,
        x_stride: act,
        tokens,
        batched: 0,
        total_tokens: tokens,
        total_rows: rows,
        expert: false,
    };
    let want: Vec<f32> = (0..tokens)
        .flat_map(|k| (0..rows).map(|r| vec_dot_scalar(cols, &w[r * row..][..row], &xs[k])).collect::<Vec<_>>())
        .collect();
    let mut y = vec![f32::NAN; tokens * rows];
    layout::tile_scalar(&t, &mut y, rows);
    assert_eq!(bits(&y), bits(&want));
    #[cfg(target_arch = "x86_64")]
    {
        let mut y = vec![f32::NAN; tokens * rows];
        crate::x86_64::tile(&t, &mut y, rows);
        assert_eq!(bits(&y), bits(&want));
    }
}
