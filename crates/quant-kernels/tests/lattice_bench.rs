//! Timing of the lattice and other block kernels (not a check): `cargo test --release -p quant-kernels
//! --test lattice_bench -- --ignored --nocapture`; env `QK_SHAPE=type,rows,cols,n,threads,reps`
//! (default: iq3_s and iq2_xs, 576×1536, 1 and 512 tokens, 1 thread). Minimum over calls.

use quant_kernels::{kernel_info, matmul, Matrix, Pool};
use std::time::Instant;

fn time(name: &str, rows: usize, cols: usize, n: usize, threads: usize, reps: usize) {
    let t = ggml_quants::lookup_name(name).unwrap();
    let bb = t.type_size;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut w: Vec<u8> = (0..rows * cols / t.block_size * bb).map(|_| next() as u8).collect();
    for blk in w.chunks_exact_mut(bb) {
        if name == "mxfp4" {
            // E8M0 exponent 2^-1: no subnormal scales (they would time the FPU's assists).
            blk[0] = 126;
        } else if name == "iq1_m" {
            // The fp16 scale 0x2000 in the top nibbles of the four scale words.
            for (k, at) in [49, 51, 53, 55].into_iter().enumerate() {
                blk[at] = blk[at] & 0x0f | (((0x2000u16 >> (4 * k)) & 0xf) << 4) as u8;
            }
        } else {
            blk[..2].copy_from_slice(&0x2000u16.to_le_bytes());
        }
    }
    let m = Matrix::new(t.id, &w, rows, cols).unwrap();
    let x: Vec<f32> = (0..n * cols).map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5).collect();
    let mut y = vec![0f32; rows * n];
    let pool = Pool::new(threads);
    let mut best = f64::MAX;
    for _ in 0..reps {
        let s = Instant::now();
        matmul(&pool, &m, &x, n, &mut y).unwrap();
        best = best.min(s.elapsed().as_secs_f64());
    }
    println!("ours {name} {rows}x{cols} n={n} t={threads} [{}]: {:.3} ms", kernel_info(t.id), best * 1e3);
}

#[test]
#[ignore]
fn lattice_timing() {
    if let Ok(s) = std::env::var("QK_SHAPE") {
        let v: Vec<&str> = s.split(',').collect();
        let p = |i: usize| v[i].parse::<usize>().unwrap();
        time(v[0], p(1), p(2), p(3), p(4), p(5));
        return;
    }
    for name in ["iq3_s", "iq2_xs"] {
        time(name, 576, 1536, 1, 1, 300);
        time(name, 576, 1536, 512, 1, 10);
    }
}
