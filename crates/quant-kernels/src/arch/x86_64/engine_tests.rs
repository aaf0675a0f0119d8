//! What the tests of the prompt engines (`k16.rs`, `k8_avx2.rs`) share: random K-quant and
//! biased-format tiles run without (the oracle: the kernels an engine stands in for) and
//! with the engine, compared bit for bit.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::registry::Tile;
use crate::scalar::act::{quantize_q8_k, Q8_K_BYTES};

/// A tile kernel with its engine off (`false`: the oracle) or on.
pub(super) type Run = fn(&Tile<'_>, &mut [f32], usize, bool);

fn gauss(rng: &mut StdRng) -> f32 {
    let u1: f32 = rng.gen_range(1e-7f32..1.0);
    let u2: f32 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

fn data(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    let mut v: Vec<f32> = (0..n).map(|_| gauss(rng) * scale).collect();
    if n >= 512 && rng.gen_bool(0.3) {
        v[256..288].fill(0.0);
    }
    if rng.gen_bool(0.3) {
        let i = rng.gen_range(0..n);
        v[i] *= 30.0;
    }
    v
}

/// `cases` random tiles of type `name` (ragged row bands and token groups; total rows a
/// multiple of 8 or not, so q2_K/q4_K take their repacked and their tiled arithmetic;
/// all or some tokens batched) through `run` without and with the engine, bit for bit,
/// nothing written outside the tile; returns the outputs compared.
fn compare(name: &str, run: Run, rng: &mut StdRng, cases: usize, shape: &Shape) -> usize {
    let traits = ggml_quants::lookup_name(name).unwrap();
    let mut compared = 0usize;
    for case in 0..cases {
        let nb = [1, 2, 3, 8][case % 4];
        let cols = nb * 256;
        let rows = shape.rows[case % shape.rows.len()];
        let tokens = [8, 16, 17, 33, 64, 9, 31][(case + case / 7) % 7];
        let total_rows = (shape.total_rows)(case, rows);
        let batched = if case % 3 == 0 { tokens - tokens % 4 } else { tokens };
        let wf = data(rng, rows * cols, 1.0);
        let imatrix: Vec<f32> = (0..cols).map(|_| rng.gen_range(0.5f32..2.0)).collect();
        let w = traits.quantize_to_vec(&wf, cols, Some(&imatrix)).unwrap();
        let mut x = vec![0u8; tokens * nb * Q8_K_BYTES];
        for t in 0..tokens {
            let xf = data(rng, cols, 3.0);
            quantize_q8_k(&xf, &mut x[t * nb * Q8_K_BYTES..(t + 1) * nb * Q8_K_BYTES]);
        }
        let tile = Tile {
            n: cols,
            w: &w,
            w_stride: w.len() / rows,
            rows,
            x: &x,
            x_stride: nb * Q8_K_BYTES,
            tokens,
            batched,
            total_tokens: tokens,
            total_rows,
            expert: false,
        };
        let ys = rows + 3;
        let mut want = vec![f32::NAN; tokens * ys];
        let mut got = vec![f32::NAN; tokens * ys];
        run(&tile, &mut want, ys, false);
        run(&tile, &mut got, ys, true);
        for t in 0..tokens {
            for r in 0..rows {
                let (a, b) = (want[t * ys + r], got[t * ys + r]);
                assert!(a.is_finite(), "{name}: oracle output not finite");
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{name} rows {rows}/{total_rows} cols {cols} tokens {tokens} batched {batched}: \
                     row {r} token {t}: {a} vs {b}"
                );
                compared += 1;
            }
            for r in rows..ys {
                assert!(got[t * ys + r].is_nan(), "{name}: wrote outside the tile");
            }
        }
    }
    compared
}

/// The tile shapes a test draws from: weight rows per tile, and the matrix's total rows
/// (which pick q2_K/q4_K's repacked or tiled arithmetic) for case `case` of `rows` rows.
pub(super) struct Shape {
    pub rows: &'static [usize],
    pub total_rows: fn(usize, usize) -> usize,
}

/// [`compare`] over every `(name, run)` of `types`, `cases` tiles each from RNG `seed`;
/// panics unless more than 10 000 outputs were compared.
pub(super) fn compare_all(types: &[(&str, Run)], seed: u64, cases: usize, shape: &Shape) {
    let mut rng = StdRng::seed_from_u64(seed);
    let compared: usize = types.iter().map(|&(name, run)| compare(name, run, &mut rng, cases, shape)).sum();
    assert!(compared > 10_000, "{compared}");
}
