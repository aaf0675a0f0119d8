//! Times `encode` on a file: `cargo run --release -p gguf-tokenizer --example encode_bench -- MODEL.gguf TEXT [parse_special]`.

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: encode_bench MODEL.gguf TEXT_FILE [parse_special]");
        std::process::exit(2);
    }
    let f = gguf_format::GgufFile::open(&args[1])?;
    let t0 = Instant::now();
    let tok = gguf_tokenizer::Tokenizer::from_gguf(f.metadata())?;
    eprintln!("load: {:.3}s", t0.elapsed().as_secs_f64());
    let text = std::fs::read(&args[2])?;
    let parse_special = args.get(3).is_some_and(|s| s == "1" || s == "true");
    // split into ~1 KB lines-ish chunks so fragments resemble prompts
    let chunks: Vec<&[u8]> = text.chunks(1024).collect();
    let t0 = Instant::now();
    let mut n = 0;
    for _ in 0..3 {
        for c in &chunks {
            n += tok.encode_bytes(c, true, parse_special)?.len();
        }
    }
    let s = t0.elapsed().as_secs_f64();
    println!("{} tokens, {:.2} MB/s", n, 3.0 * text.len() as f64 / s / 1e6);
    Ok(())
}
