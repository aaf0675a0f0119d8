//! Times `ops::flash_f16_chunk` over a decode-at-depth cache: `layers` × 4096 cells of 8
//! KV heads × 64 (llama-1b's shape), the query heads of each KV head together, as the
//! engine walks them per token (one thread). Usage: `flashbench [cells] [layers]`.
use half::f16;
use quant_kernels::ops::{self, FlashF16};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("a number"));
    let cells = args.next().unwrap_or(4096);
    let layers = args.next().unwrap_or(16);
    let (nkv, hd, g) = (8, 64, 4);
    let width = nkv * hd;
    let mut seed = 1u32;
    let mut r = move || {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        (seed >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
    };
    let k: Vec<Vec<f16>> = (0..layers).map(|_| (0..cells * width).map(|_| f16::from_f32(r())).collect()).collect();
    let v: Vec<Vec<f16>> = (0..layers).map(|_| (0..cells * width).map(|_| f16::from_f32(r())).collect()).collect();
    let q: Vec<f16> = (0..g * hd).map(|_| f16::from_f32(r())).collect();
    let layout = ops::native_dot_layout();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let mut sink = 0f32;
        for l in 0..layers {
            for h in 0..nkv {
                let c = FlashF16 {
                    k: &k[l][h * hd..],
                    v: &v[l][h * hd..],
                    k_stride: width,
                    v_stride: width,
                    n: cells,
                    hk: hd,
                    hv: hd,
                    scale: 0.125,
                    cap: 0.0,
                    layout,
                    fp16: ops::native_fp16_vec(),
                };
                let (mut m, mut s, mut a) = (vec![f32::NEG_INFINITY; g], vec![0f32; g], vec![f16::ZERO; g * hd]);
                ops::flash_f16_chunk(&c, &q, &mut m, &mut s, &mut a);
                sink += s[0];
            }
        }
        let dt = t.elapsed().as_secs_f64();
        best = best.min(dt);
        std::hint::black_box(sink);
    }
    let pairs = (layers * nkv * g * cells) as f64;
    println!(
        "{cells} cells x {layers} layers: {:.2} ms per token, {:.2} ns per (key, head)",
        best * 1e3,
        best * 1e9 / pairs
    );
}
