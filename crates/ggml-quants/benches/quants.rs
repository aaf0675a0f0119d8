//! Dequantize and quantize throughput per registered type (criterion).
//! Throughput is reported in bytes of f32 output (dequantize) or input (quantize).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn data(n: usize) -> Vec<f32> {
    let mut s = 0x9E37_79B9u32;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32 - 0.5) * 2.0
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let n_per_row = 4096;
    let rows = 64;
    let x = data(n_per_row * rows);
    let mut g = c.benchmark_group("dequantize");
    for t in ggml_quants::all() {
        let Ok(row) = t.row_size(n_per_row) else { continue };
        let q = match t.quantize_rows_fn {
            Some(_) if !t.requires_imatrix => t.quantize_to_vec(&x, n_per_row, None).unwrap(),
            _ => {
                // No quantizer: decode arbitrary bytes (valid for every type's layout).
                (0..row * rows).map(|i| (i * 7 % 251) as u8 & 0x3f).collect()
            }
        };
        let mut out = vec![0f32; n_per_row * rows];
        g.throughput(Throughput::Bytes((out.len() * 4) as u64));
        g.bench_function(t.name, |b| b.iter(|| t.dequantize(&q, &mut out).unwrap()));
    }
    g.finish();
    let mut g = c.benchmark_group("quantize");
    for t in ggml_quants::all() {
        if t.quantize_rows_fn.is_none() || t.requires_imatrix {
            continue;
        }
        let mut out = vec![0u8; t.row_size(n_per_row).unwrap() * rows];
        g.throughput(Throughput::Bytes((x.len() * 4) as u64));
        g.bench_function(t.name, |b| b.iter(|| t.quantize_rows(&x, &mut out, n_per_row, None).unwrap()));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
