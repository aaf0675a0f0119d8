//! `cargo bench -p quant-kernels --bench matmul [-- FILTER]`: matmul per type at the test
//! models' shapes. Decode (n = 1) reports bytes of weights per second; prompt (n = 64)
//! reports elements = floating-point operations (2·rows·cols·n) per second. Threads:
//! `QK_THREADS` (default 2).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use quant_kernels::{kernel_info, matmul, Matrix, Pool};

/// (type, rows, cols): SmolLM2-135M (576 wide, ffn 1536, vocab 49152) and
/// qwen2.5-coder-0.5B (896 wide, ffn 4864; K types need cols % 256 == 0, so their
/// shapes are the ffn_down 896×4864 and q/o-like 1536×768).
const CASES: &[(&str, usize, usize)] = &[
    ("q4_1", 576, 576),
    ("q4_1", 1536, 576),
    ("q4_1", 576, 1536),
    ("q8_0", 49152, 576),
    ("q8_0", 896, 896),
    ("q4_0", 1536, 576),
    ("q5_0", 896, 896),
    ("q5_0", 4864, 896),
    ("q5_1", 1536, 576),
    ("q2_K", 896, 4864),
    ("q3_K", 896, 4864),
    ("q4_K", 1536, 768),
    ("q4_K", 896, 4864),
    ("q5_K", 896, 4864),
    ("q6_K", 896, 4864),
    ("f16", 1536, 576),
    ("bf16", 1536, 576),
    ("f32", 1536, 576),
];

const PROMPT: usize = 64;

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let threads: usize = std::env::var("QK_THREADS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    let pool = Pool::new(threads);
    let mut decode = c.benchmark_group(format!("decode_t{threads}"));
    decode.sample_size(20).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    let mut mats = Vec::new();
    for (i, &(name, rows, cols)) in CASES.iter().enumerate() {
        let t = ggml_quants::lookup_name(name).unwrap();
        let w = t.quantize_to_vec(&data(rows * cols, i as u64 + 1), cols, None).unwrap();
        mats.push((name, rows, cols, t.id, w));
    }
    let x = data(PROMPT * 4864, 99);
    for (name, rows, cols, id, w) in &mats {
        let m = Matrix::new(*id, w, *rows, *cols).unwrap();
        let mut y = vec![0f32; *rows];
        decode.throughput(Throughput::Bytes(w.len() as u64));
        let label = format!("{name}/{}/{rows}x{cols}", kernel_info(*id));
        decode.bench_function(BenchmarkId::from_parameter(label), |b| {
            b.iter(|| matmul(&pool, &m, &x[..*cols], 1, &mut y).unwrap())
        });
    }
    decode.finish();
    let mut prompt = c.benchmark_group(format!("prompt{PROMPT}_t{threads}"));
    prompt.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    for (name, rows, cols, id, w) in &mats {
        if *rows > 10_000 {
            continue; // the output matrix only ever sees the last token
        }
        let m = Matrix::new(*id, w, *rows, *cols).unwrap();
        let mut y = vec![0f32; rows * PROMPT];
        prompt.throughput(Throughput::Elements((2 * rows * cols * PROMPT) as u64));
        let label = format!("{name}/{}/{rows}x{cols}", kernel_info(*id));
        prompt.bench_function(BenchmarkId::from_parameter(label), |b| {
            b.iter(|| matmul(&pool, &m, &x[..PROMPT * cols], PROMPT, &mut y).unwrap())
        });
    }
    prompt.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
