//! `cargo xtask bench-quants`: single-thread throughput of ggml-quants against ggml on
//! the same rows, plus a rough DRAM bandwidth figure for context.
//!
//! Dequantize is reported as GB/s of f32 output, quantize as MB/s of f32 input; each
//! figure is the best of several runs. Ratios are ours / ggml (above 1 is faster).

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use crate::verify::quants::{fill_row, random_imatrix, Dist};
use crate::verify::{load_ggml, Opts};

/// Best time of `f` over at least `min` and at most `max` runs, stopping early once
/// `budget` is spent.
fn best_of(min: usize, max: usize, budget: Duration, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    let mut best = Duration::MAX;
    for i in 0..max {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
        if i + 1 >= min && start.elapsed() > budget {
            break;
        }
    }
    best
}

fn rate(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64()
}

fn fmt_opt(v: Option<f64>, scale: f64) -> String {
    v.map_or("-".into(), |v| format!("{:.2}", v / scale))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    }
}

/// Sequential read (sum) and copy bandwidth over large buffers, in GB/s.
pub fn dram_bandwidth(quick: bool) -> (f64, f64) {
    let bytes: usize = if quick { 256 << 20 } else { 1 << 30 };
    let n = bytes / 8;
    let mut buf: Vec<u64> = (0..n as u64).collect();
    let read = best_of(3, 5, Duration::from_secs(3), || {
        let mut acc = [0u64; 8];
        for c in buf.chunks_exact(8) {
            for k in 0..8 {
                acc[k] = acc[k].wrapping_add(c[k]);
            }
        }
        black_box(acc);
    });
    let half = n / 2;
    let (a, b) = buf.split_at_mut(half);
    let copy = best_of(3, 5, Duration::from_secs(3), || {
        b[..half].copy_from_slice(&a[..half]);
        black_box(&b[0]);
    });
    // copy moves half the buffer: read it once and write it once
    (rate(bytes, read) / 1e9, rate(half * 8 * 2, copy) / 1e9)
}

/// `cargo xtask bench-quants`.
pub fn run(cache: &Path, opts: &Opts) -> Result<()> {
    let ggml = load_ggml(cache)?;
    let rows = if opts.quick { 512 } else { 4096 };
    let (min, max, budget) =
        if opts.quick { (2, 3, Duration::from_millis(500)) } else { (3, 10, Duration::from_secs(2)) };
    let mut lines = Vec::new();
    for t in ggml_quants::all() {
        if !opts.only.is_empty() && !opts.only.iter().any(|o| o.eq_ignore_ascii_case(t.name)) {
            continue;
        }
        let Some(g) = ggml.type_info(t.id) else { continue };
        if g.block_size != t.block_size || g.type_size != t.type_size {
            continue;
        }
        eprintln!("bench-quants: {}", t.name);
        let n_per_row = if 256 % t.block_size == 0 { 256 } else { t.block_size };
        let n = rows * n_per_row;
        let mut rng = StdRng::seed_from_u64(opts.seed ^ t.id as u64);
        let mut src = vec![0f32; n];
        for r in src.chunks_exact_mut(n_per_row) {
            fill_row(&mut rng, Dist::Gaussian, r);
        }
        // The IQ types are importance-matrix quantizers in practice (llama-quantize with
        // --imatrix): time them with one, as ggml requires for iq1_s/iq2_xxs/iq2_xs.
        let with_im = t.requires_imatrix || g.requires_imatrix || t.name.starts_with("iq");
        let im = with_im.then(|| random_imatrix(&mut rng, n_per_row));
        let row_bytes = n_per_row / t.block_size * t.type_size;
        let mut enc = vec![0u8; rows * row_bytes];

        let q_ggml = g.has_quantize_chunk.then(|| {
            let d = best_of(min, max, budget, || {
                ggml.quantize_chunk(t.id, &src, &mut enc, n_per_row, im.as_deref()).expect("ggml_quantize_chunk");
            });
            rate(n * 4, d)
        });
        let q_ours = t.quantize_rows_fn.is_some().then(|| {
            let mut dst = vec![0u8; rows * row_bytes];
            let d = best_of(min, max, budget, || {
                t.quantize_rows(&src, &mut dst, n_per_row, im.as_deref()).expect("quantize_rows");
            });
            if !g.has_quantize_chunk {
                enc.copy_from_slice(&dst);
            }
            rate(n * 4, d)
        });
        if q_ggml.is_none() && q_ours.is_none() {
            rng.fill_bytes(&mut enc);
        }
        let mut out = vec![0f32; n];
        let d_ggml = g.to_float_source.is_some().then(|| {
            let d = best_of(min, max, budget, || ggml.to_float(t.id, &enc, &mut out).expect("to_float"));
            rate(n * 4, d)
        });
        let d_ours = {
            let d = best_of(min, max, budget, || t.dequantize(&enc, &mut out).expect("dequantize"));
            Some(rate(n * 4, d))
        };
        black_box(&out);
        lines.push(format!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            t.name,
            fmt_opt(d_ours, 1e9),
            fmt_opt(d_ggml, 1e9),
            ratio(d_ours, d_ggml),
            fmt_opt(q_ours, 1e6),
            fmt_opt(q_ggml, 1e6),
            ratio(q_ours, q_ggml),
        ));
    }
    eprintln!("bench-quants: DRAM bandwidth");
    let (read, copy) = dram_bandwidth(opts.quick);
    println!("bench-quants: {rows} rows per type (256 wide, or one block), single thread, best of {min}..{max} runs");
    println!();
    println!("| type | dequant ours GB/s | dequant ggml GB/s | ratio | quant ours MB/s | quant ggml MB/s | ratio |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for l in lines {
        println!("{l}");
    }
    println!();
    println!(
        "DRAM (single thread): read {read:.1} GB/s (sum over {} MiB), copy {copy:.1} GB/s (read+write)",
        if opts.quick { 256 } else { 1024 }
    );
    Ok(())
}
