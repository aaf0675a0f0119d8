//! [`matmul_rowwise`] against one-token products, byte for byte, on every backend this
//! CPU can run: the path of each registered kernel (scalar, AVX2, AVX-512 VNNI, NEON; the
//! registry itself only ever picks the best one) is forced through [`run_path`], as is the
//! generic dequantize path, for plain and repacked matrices.

use super::*;
use crate::registry::{act_quantizers_of, kernels_of};

/// Token counts every small shape is run with.
const NS: [usize; 10] = [1, 2, 3, 4, 5, 8, 13, 16, 17, 33];
/// Token counts of the large shapes (a one-token tile, 4-token batches, the tiled
/// threshold, a tail over 16).
const NS_LARGE: [usize; 4] = [1, 3, 8, 17];

fn rng(seed: &mut u64) -> f32 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// `rows × cols` weights of type `t` (quantized from random values; raw little-endian
/// values for the integer and f64 types, which have no quantizer).
fn weights(t: &'static TypeTraits, rows: usize, cols: usize, seed: &mut u64) -> Vec<u8> {
    let v: Vec<f32> = (0..rows * cols).map(|_| rng(seed)).collect();
    if t.quantize_rows_fn.is_some() {
        let ones = vec![1f32; cols];
        let imatrix = t.requires_imatrix.then_some(&ones[..]);
        return t.quantize_to_vec(&v, cols, imatrix).unwrap();
    }
    if let Some(q) = t.quantize_ref_fn {
        let mut out = vec![0u8; rows * t.row_size(cols).unwrap()];
        q(&v, &mut out);
        return out;
    }
    match t.type_size {
        8 if t.name == "f64" => v.iter().flat_map(|f| (*f as f64 * 4.0).to_le_bytes()).collect(),
        size => v.iter().flat_map(|f| ((f * 100.0) as i64).to_le_bytes()[..size].to_vec()).collect(),
    }
}

/// Every path this CPU can run for weight type `id`: each available kernel (with the
/// activation quantizer of its own backend where there is one, else the one [`matmul`]
/// uses), and the generic path.
fn paths(id: u32) -> Vec<(String, Path)> {
    let mut out = Vec::new();
    for &k in kernels_of(id).iter().filter(|k| (k.available)()) {
        let act = ggml_quants::lookup_id(k.vec_dot_type).unwrap();
        let qs = act_quantizers_of(k.vec_dot_type);
        let q = qs
            .iter()
            .filter(|a| (a.available)())
            .find(|a| a.backend == k.backend)
            .or_else(|| qs.iter().find(|a| (a.available)()))
            .map(|a| a.quantize)
            .or(act.quantize_ref_fn)
            .unwrap();
        out.push((k.backend.to_string(), Path::Kernel { k, act, quantize: q }));
    }
    out.push(("generic".to_string(), Path::Generic));
    out
}

/// `matmul_rowwise`'s arithmetic along `path` for each of `ns`, on each pool, against
/// one-token calls of the same path on the first pool: every output bit-identical (so
/// neither the batch nor the thread count shows in a token's outputs).
fn check(label: &str, pools: &[Pool], w: &Matrix<'_>, x: &[f32], ns: &[usize], path: Path) {
    let (rows, cols) = (w.rows, w.cols);
    let max_n = ns.iter().copied().max().unwrap();
    let one: Vec<Vec<f32>> = (0..max_n)
        .map(|t| {
            let mut y = vec![f32::NAN; rows];
            run_path(&pools[0], w, &x[t * cols..(t + 1) * cols], 1, &mut y, Mode::Call { expert: false }, path)
                .unwrap();
            y
        })
        .collect();
    for pool in pools {
        for &n in ns {
            let mut y = vec![f32::NAN; n * rows];
            run_path(pool, w, &x[..n * cols], n, &mut y, Mode::Rowwise, path).unwrap();
            for (t, want) in one.iter().take(n).enumerate() {
                let got = &y[t * rows..(t + 1) * rows];
                let bad = got.iter().zip(want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                let th = pool.n_threads();
                assert_eq!(
                    bad, 0,
                    "{label} {rows}x{cols}, {th} threads: token {t} of {n}: {bad} of {rows} outputs differ"
                );
            }
        }
    }
}

/// Column counts for a block size: one block, then SmolLM2-like widths that are whole
/// blocks (576 = 2.25 K-blocks is not; 2048 stands in).
fn col_set(block: usize) -> Vec<usize> {
    let mut c = vec![block.max(16)];
    c.extend([576usize, 1536, 2048].iter().filter(|&&c| c % block == 0).take(2));
    c
}

fn run_type(t: &'static TypeTraits, pools: &[Pool]) {
    let cols_all = col_set(t.block_size);
    // Small shapes with every token count, large ones with a few.
    let mut shapes: Vec<(usize, usize, &[usize])> = Vec::new();
    for rows in [1usize, 7, 64] {
        for &cols in &cols_all {
            shapes.push((rows, cols, &NS));
        }
    }
    shapes.push((576, cols_all[1], &NS_LARGE));
    shapes.push((1536, cols_all[0], &NS_LARGE));
    let paths = paths(t.id);
    for (rows, cols, ns) in shapes {
        let mut seed = (t.id as u64) << 32 | (rows * 7919 + cols) as u64;
        let wq = weights(t, rows, cols, &mut seed);
        let m = Matrix::new(t.id, &wq, rows, cols).unwrap();
        let x: Vec<f32> = (0..ns.iter().max().unwrap() * cols).map(|_| rng(&mut seed)).collect();
        let rep = Repacked::new(&m);
        for (backend, path) in &paths {
            check(&format!("{} {backend}", t.name), pools, &m, &x, ns, *path);
            if let (Some(r), Path::Kernel { .. }) = (&rep, path) {
                check(&format!("{} {backend} repacked {}", t.name, r.backend()), pools, &r.matrix(), &x, ns, *path);
            }
        }
    }
}

/// The types with a kernel, one test each so that the harness runs them in parallel.
macro_rules! per_type {
    ($($test:ident = $name:expr;)*) => {$(
        #[test]
        fn $test() {
            let t = ggml_quants::by_name($name).unwrap();
            run_type(t, &[Pool::new(1), Pool::new(2)]);
        }
    )*};
}

per_type! {
    rowwise_f32 = "f32";
    rowwise_f16 = "f16";
    rowwise_bf16 = "bf16";
    rowwise_q4_0 = "q4_0";
    rowwise_q4_1 = "q4_1";
    rowwise_q5_0 = "q5_0";
    rowwise_q5_1 = "q5_1";
    rowwise_q8_0 = "q8_0";
    rowwise_q2_k = "q2_K";
    rowwise_q3_k = "q3_K";
    rowwise_q4_k = "q4_K";
    rowwise_q5_k = "q5_K";
    rowwise_q6_k = "q6_K";
    rowwise_iq4_nl = "iq4_nl";
    rowwise_iq4_xs = "iq4_xs";
    rowwise_mxfp4 = "mxfp4";
    rowwise_iq3_s = "iq3_s";
    rowwise_iq2_xs = "iq2_xs";
    rowwise_iq2_xxs = "iq2_xxs";
    rowwise_iq3_xxs = "iq3_xxs";
    rowwise_iq2_s = "iq2_s";
    rowwise_tq1_0 = "tq1_0";
    rowwise_tq2_0 = "tq2_0";
    rowwise_iq1_s = "iq1_s";
    rowwise_iq1_m = "iq1_m";
    rowwise_q1_0 = "q1_0";
    rowwise_q2_0 = "q2_0";
    rowwise_nvfp4 = "nvfp4";
}

/// The list above covers every type with a kernel here; the others (the generic path)
/// run on one small and one tall shape.
#[test]
fn rowwise_every_other_type_generic() {
    let listed = [
        "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl",
        "iq4_xs", "mxfp4", "iq3_s", "iq2_xs", "iq2_xxs", "iq3_xxs", "iq2_s", "tq1_0", "tq2_0", "iq1_s", "iq1_m",
        "q1_0", "q2_0", "nvfp4",
    ];
    let pools = [Pool::new(1), Pool::new(2)];
    for t in ggml_quants::all() {
        if listed.contains(&t.name) {
            continue;
        }
        assert!(kernel_for(t.id).is_none(), "{}: has a kernel but no rowwise test", t.name);
        let cols = t.block_size.max(16) * 2;
        for (rows, ns) in [(7usize, &NS[..]), (64, &NS_LARGE[..])] {
            let mut seed = t.id as u64 + 1;
            let wq = weights(t, rows, cols, &mut seed);
            let m = Matrix::new(t.id, &wq, rows, cols).unwrap();
            let x: Vec<f32> = (0..33 * cols).map(|_| rng(&mut seed)).collect();
            check(&format!("{} generic", t.name), &pools, &m, &x, ns, Path::Generic);
        }
    }
}

/// The public entry points: `matmul_rowwise` is the registry's path in rowwise mode.
#[test]
fn public_rowwise_is_rowwise_mode_of_the_selected_path() {
    let pool = Pool::new(2);
    for name in ["q4_0", "q4_K", "f32", "tq2_0"] {
        let t = ggml_quants::by_name(name).unwrap();
        let (rows, cols) = (64, 512);
        let mut seed = 3;
        let wq = weights(t, rows, cols, &mut seed);
        let m = Matrix::new(t.id, &wq, rows, cols).unwrap();
        let x: Vec<f32> = (0..9 * cols).map(|_| rng(&mut seed)).collect();
        let mut a = vec![0f32; 9 * rows];
        let mut b = vec![1f32; 9 * rows];
        matmul_rowwise(&pool, &m, &x, 9, &mut a).unwrap();
        run_path(&pool, &m, &x, 9, &mut b, Mode::Rowwise, path_for(&m).unwrap()).unwrap();
        assert!(a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}");
    }
}

/// The comparison above can fail: where this CPU's kernels follow llama.cpp's batch
/// arithmetic (AVX-512 VNNI: tinyBLAS for F32, the tiled q4_K kernel from 8 tokens),
/// `matmul` of a batch does differ from one-token calls, and `matmul_rowwise` does not.
#[test]
fn batch_arithmetic_differs_where_rowwise_must_not() {
    let pool = Pool::new(2);
    for (name, rows, cols, n) in [("f32", 64usize, 512usize, 2usize), ("q4_K", 20, 512, 8), ("q4_K", 64, 512, 4)] {
        let t = ggml_quants::by_name(name).unwrap();
        let k = kernel_for(t.id).unwrap();
        if k.tile.is_none() {
            continue;
        }
        let mut seed = 17;
        let wq = weights(t, rows, cols, &mut seed);
        let m = Matrix::new(t.id, &wq, rows, cols).unwrap();
        let x: Vec<f32> = (0..n * cols).map(|_| rng(&mut seed)).collect();
        let mut batch = vec![0f32; n * rows];
        let mut rowwise = vec![0f32; n * rows];
        matmul(&pool, &m, &x, n, &mut batch).unwrap();
        matmul_rowwise(&pool, &m, &x, n, &mut rowwise).unwrap();
        let mut one = vec![0f32; n * rows];
        for (xt, yt) in x.chunks_exact(cols).zip(one.chunks_exact_mut(rows)) {
            matmul(&pool, &m, xt, 1, yt).unwrap();
        }
        let differ = |a: &[f32]| a.iter().zip(&one).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert!(differ(&batch) > 0, "{name} {rows}x{cols} n={n}: matmul of the batch equals one-token calls");
        assert_eq!(differ(&rowwise), 0, "{name} {rows}x{cols} n={n}");
    }
}

/// The decode-batch shapes of the server (2..=8 single-token rows, whose row blocks are
/// sized per token count and thread count): random row counts (not only multiples of 16)
/// and widths, every token count 2..=8, on 1, 2 and 3 threads, for the weight types of
/// the SmolLM2 Q4_1 and qwen2.5 Q4_K_M files, along every path this CPU can run.
#[test]
fn rowwise_random_decode_batches() {
    let pools = [Pool::new(1), Pool::new(2), Pool::new(3)];
    let ns: Vec<usize> = (2..=8).collect();
    let mut seed = 0x5eed_u64;
    let mut pick = |n: usize| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as usize % n
    };
    for name in ["q4_1", "q5_0", "q8_0", "q4_K", "q6_K"] {
        let t = ggml_quants::by_name(name).unwrap();
        for _ in 0..3 {
            let rows = 1 + pick(700);
            let cols = t.block_size * (1 + pick(if t.block_size == 256 { 4 } else { 40 }));
            let mut s = (t.id as u64) << 32 | (rows * 7919 + cols) as u64;
            let wq = weights(t, rows, cols, &mut s);
            let m = Matrix::new(t.id, &wq, rows, cols).unwrap();
            let x: Vec<f32> = (0..8 * cols).map(|_| rng(&mut s)).collect();
            for (backend, path) in &paths(t.id) {
                check(&format!("{name} {backend}"), &pools, &m, &x, &ns, *path);
            }
        }
    }
}
