//! `cargo xtask`: the project's automation, one binary with subcommands.
//!
//! - `fetch-models [NAME...]`: the three real models and the vocab fixtures, into the cache.
//! - `llama-cpp [--lib-only] [--force] [--avx2]`: llama.cpp from the llama-cpp-python sdist, built into the cache
//!   (`--avx2`: an AVX2-only build beside the native one).
//! - `verify [quants|gguf|requant|quantize|logits|tokenizer|sampling|all] [--quick] [--seed N] [--type NAME...]`: comparisons
//!   against that build; ends with `N passed, M failed` and fails if M > 0.
//! - `bench-quants [--quick] [--type NAME...]`: ggml-quants vs ggml throughput.
//!
//! The cache is `$GGUF_CACHE`, else `$XDG_CACHE_HOME/gguf-engine`, else
//! `~/.cache/gguf-engine` ([`models::cache_dir`]).

mod bench;
mod bench_files;
mod bench_models;
mod ggml;
mod llama;
mod llama_cpp;
mod llama_vocab;
mod models;
mod requant;
mod requant_imatrix;
mod synth;
mod verify;

// Links every built-in type's `inventory::submit!` into this binary.
use ggml_quants as _;

use anyhow::{bail, ensure, Context, Result};

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  fetch-models [NAME...]            fetch the models of shared/MODELS.md (smollm2, gemma3,
                                    qwen2.5; default all) and the vocab fixtures into the cache
  llama-cpp [--lib-only] [--force]  build llama.cpp (llama-cpp-python 0.3.36 sdist) in the cache;
                                    --lib-only: just libggml-base (what verify needs)
  llama-cpp --avx2 [--force]        also an AVX2-only build (llama-bench, libllama) in
                                    llama.cpp-build-avx2, for XTASK_LLAMA_BUILD_DIR beside
                                    GGUF_CPU_FEATURES=avx2
  verify [quants|gguf|all]          compare against the llama.cpp build (default: all)
  verify requant [--type FTYPE...]  SmolLM2 requantized by llama-quantize into IQ1_S..IQ4_XS,
                                    TQ1_0/TQ2_0, MXFP4_MOE: every tensor vs libggml, gguf CLI
  verify quantize [--quick] [--filter SUBSTR] [-t N] [--self-check [--plant FROM=TO]] [--gguf BIN]
                                    gguf quantize vs llama-quantize, same arguments, output byte
                                    for byte: every recipe, imatrix, option combinations, 5 sources
                                    (GGUF_QUANTIZE_BIN='PROG [ARGS]' overrides the binary;
                                    --self-check: llama-quantize vs itself; --plant: ours gets
                                    recipe TO for FROM; GGUF_QUANTIZE_KEEP=1 keeps failing outputs)
  verify tokenizer [--quick]        tokenizer vs libllama: fixtures, >=1 MB corpus, pieces, eog
  verify sampling [--quick] [--seed N]  sampler chain vs libllama: every sampler, random chains
      --quick                       smaller counts (CI)
      --seed N                      RNG seed (default 0x5eed)
      --type NAME                   only this quant type (repeatable; quants only)
  bench-quants [--quick] [--type NAME...]
                                    ggml-quants vs ggml dequantize/quantize throughput
  verify logits [--model NAME|PATH...] [--quick] [-t N] [--self-check] [--gguf BIN]
                                    engine (target/release/gguf run/logits) vs libllama:
                                    greedy 32 tokens, KL and top-1 over every position;
                                    models: smollm2, gemma3-270m, qwen2.5-coder-0.5b, qwen3,
                                    qwen3moe, smollm2-q4_0..q6_k, -iq4_nl, -iq4_xs, -mxfp4 (groups: real, synth, requant)
  verify families [--family NAME...] [--quick] [-t N] [--gguf BIN]
                                    issue 15: each family's synthetic file (synth::FAMILIES) vs
                                    libllama, F16 / Q8_0 KV: greedy 32 on 10 prompts, KL and
                                    top-1 per position, at -ub 1, 7, 64 via llama-perplexity
  bench [--model NAME...] [-t 2] [-r 3] [-p 512] [-n 64] [-d 0] [--md FILE] [--llama-only]
                                    gguf bench vs llama-bench, interleaved, ratio table of
                                    medians, kernel path per weight type, decode's share of
                                    the DRAM read bound; -d: llama-bench's depth (tokens in
                                    the context before each test); --model matrix: issue 9's
                                    files (SmolLM2 in 15 types, qwen2.5, gemma3, 1-3 B bench
                                    files llama-1b/qwen3-1.7b-q4_k_m|q8_0|q4_0)
  llama-logits -m FILE (--prompt TEXT | --tokens 1,2,3) -o OUT [-n N] [-t N]
                                    llama.cpp's logits at every position (raw f32, as
                                    gguf logits writes them); -n: append its greedy tokens
  llama-dump -m FILE --tokens 1,2,3 -o DIR [--filter PREFIX,...]
                                    every intermediate tensor of llama.cpp's forward pass
                                    (cb_eval: Qcur-0, kqv_out-0, l_out-0, ...) as raw f32
  layer-diff -m FILE (--prompt TEXT | --tokens 1,2,3) [-t N] [--gguf BIN]
                                    run llama.cpp (cb_eval) and gguf logits (GGUF_DUMP_DIR) on
                                    the same tokens; every node's difference, in forward order,
                                    and the first node that is not bit-identical
                                    (XTASK_LLAMA_CACHE_TYPE: that cache type on both sides)
  synth [qwen3|qwen3moe|llama-moe8|FAMILY] write the random-weight test models into the cache
  requant [FTYPE...]                SmolLM2 requantized by llama-quantize into the cache
  cache-dir                         print the cache directory

environment: GGUF_CACHE, XDG_CACHE_HOME (cache location), XTASK_PYTHON (python with pip)";

struct Args {
    positional: Vec<String>,
    quick: bool,
    force: bool,
    lib_only: bool,
    avx2: bool,
    seed: u64,
    types: Vec<String>,
    models: Vec<String>,
    families: Vec<String>,
    threads: usize,
    reps: usize,
    n_prompt: usize,
    n_gen: usize,
    depth: usize,
    md: Option<String>,
    gguf: Option<String>,
    self_check: bool,
    llama_only: bool,
    prompt: Option<String>,
    tokens: Option<String>,
    out: Option<String>,
    filter: Option<String>,
    plant: Option<String>,
}

fn parse_args(args: &[String]) -> Result<Args> {
    let mut a = Args {
        positional: Vec::new(),
        quick: false,
        force: false,
        lib_only: false,
        avx2: false,
        seed: 0x5eed,
        types: Vec::new(),
        models: Vec::new(),
        families: Vec::new(),
        threads: 2,
        reps: 3,
        n_prompt: 512,
        n_gen: 64,
        depth: 0,
        md: None,
        gguf: None,
        self_check: false,
        llama_only: false,
        prompt: None,
        tokens: None,
        out: None,
        filter: None,
        plant: None,
    };
    let num = |v: Option<&String>, flag: &str| -> Result<usize> {
        v.with_context(|| format!("{flag} needs a value"))?.parse().with_context(|| format!("{flag}: not a number"))
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => a.quick = true,
            "--force" => a.force = true,
            "--lib-only" => a.lib_only = true,
            "--avx2" => a.avx2 = true,
            "--seed" => {
                let v = it.next().context("--seed needs a value")?;
                a.seed = match v.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16)?,
                    None => v.parse()?,
                };
            }
            "--type" => a.types.push(it.next().context("--type needs a value")?.clone()),
            "--family" => a.families.push(it.next().context("--family needs a value")?.clone()),
            "--model" | "-m" => a.models.push(it.next().context("--model needs a value")?.clone()),
            "-t" | "--threads" => a.threads = num(it.next(), "-t")?,
            "-r" | "--repetitions" => a.reps = num(it.next(), "-r")?,
            "-p" | "--n-prompt" => a.n_prompt = num(it.next(), "-p")?,
            "-n" | "--n-gen" => a.n_gen = num(it.next(), "-n")?,
            "-d" | "--depth" => a.depth = num(it.next(), "-d")?,
            "--md" => a.md = Some(it.next().context("--md needs a file")?.clone()),
            "--gguf" => a.gguf = Some(it.next().context("--gguf needs a path")?.clone()),
            "--self-check" => a.self_check = true,
            "--prompt" => a.prompt = Some(it.next().context("--prompt needs a value")?.clone()),
            "--tokens" => a.tokens = Some(it.next().context("--tokens needs a value")?.clone()),
            "--plant" => a.plant = Some(it.next().context("--plant needs FROM=TO")?.clone()),
            "--filter" => a.filter = Some(it.next().context("--filter needs a value")?.clone()),
            "-o" => a.out = Some(it.next().context("-o needs a file")?.clone()),
            "--llama-only" => a.llama_only = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            s if s.starts_with('-') => bail!("unknown option {s}\n\n{USAGE}"),
            s => a.positional.push(s.to_string()),
        }
    }
    Ok(a)
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}

fn sampling_opts(args: &Args) -> verify::sampling::SampOpts {
    verify::sampling::SampOpts { quick: args.quick, seed: args.seed }
}

fn real_main() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = argv.split_first() else {
        println!("{USAGE}");
        return Ok(());
    };
    let args = parse_args(rest)?;
    let cache = models::cache_dir()?;
    let opts = verify::Opts { quick: args.quick, seed: args.seed, only: args.types.clone() };
    match cmd.as_str() {
        "fetch-models" => {
            let wanted: Vec<&models::Model> = if args.positional.is_empty() {
                models::MODELS.iter().collect()
            } else {
                args.positional
                    .iter()
                    .map(|n| models::find_model(n).with_context(|| format!("unknown model {n}")))
                    .collect::<Result<_>>()?
            };
            for m in wanted {
                let p = models::ensure_model(m)?;
                println!("{}", p.display());
            }
            let vocab = models::ensure_vocab(&cache)?;
            println!("{} vocab fixtures in {}", vocab.len(), cache.join("vocab").display());
        }
        "llama-cpp" => {
            ensure!(
                !(args.avx2 && args.lib_only),
                "--avx2 and --lib-only: the AVX2 build is always llama-bench and libllama"
            );
            let build = if args.avx2 {
                llama_cpp::run_avx2(&cache, args.force)?
            } else {
                llama_cpp::run(&cache, args.force, args.lib_only)?
            };
            println!("{}", build.display());
        }
        "verify" => {
            let what = args.positional.first().map(String::as_str).unwrap_or("all");
            let mut report = verify::Report::default();
            match what {
                "quants" => verify::quants::run(&cache, &opts, &mut report)?,
                "gguf" => verify::gguf::run(&cache, &opts, &mut report)?,
                "requant" => verify::requant::run(&cache, &opts, &mut report)?,
                "quantize" => verify::quantize::run(
                    &cache,
                    &verify::quantize::QuantOpts {
                        quick: args.quick,
                        filter: args.filter.clone(),
                        threads: args.threads,
                        self_check: args.self_check,
                        gguf: args.gguf.as_ref().map(Into::into),
                        plant: args.plant.clone(),
                    },
                    &mut report,
                )?,
                "logits" => {
                    let lo = verify::logits::LogitsOpts {
                        quick: args.quick,
                        models: args.models.clone(),
                        threads: args.threads,
                        self_check: args.self_check,
                        gguf: args.gguf.as_ref().map(Into::into),
                        synth_seed: synth::SEED,
                    };
                    verify::logits::run(&cache, &lo, &mut report)?
                }
                "families" => verify::families::run(
                    &cache,
                    &verify::families::FamOpts {
                        quick: args.quick,
                        families: args.families.clone(),
                        threads: args.threads,
                        gguf: args.gguf.as_ref().map(Into::into),
                        seed: synth::SEED,
                    },
                    &mut report,
                )?,
                "tokenizer" => {
                    verify::tokenizer::run(&cache, &verify::tokenizer::TokOpts { quick: args.quick }, &mut report)?
                }
                "sampling" => verify::sampling::run(&cache, &sampling_opts(&args), &mut report)?,
                "all" => {
                    verify::quants::run(&cache, &opts, &mut report)?;
                    verify::gguf::run(&cache, &opts, &mut report)?;
                    verify::sampling::run(&cache, &sampling_opts(&args), &mut report)?;
                }
                other => {
                    bail!(
                        "verify what? {other:?} (quants, gguf, requant, quantize, logits, families, tokenizer, sampling or all)"
                    )
                }
            }
            print!("{}", report.render());
            let (_, failed, _) = report.counts();
            if failed > 0 {
                std::process::exit(1);
            }
        }
        "bench-quants" => bench::run(&cache, &opts)?,
        "bench" => bench_models::run(
            &cache,
            &bench_models::BenchOpts {
                models: args.models.clone(),
                threads: args.threads,
                rounds: args.reps,
                n_prompt: args.n_prompt,
                n_gen: args.n_gen,
                depth: args.depth,
                md: args.md.as_ref().map(Into::into),
                llama_only: args.llama_only,
                gguf: args.gguf.as_ref().map(Into::into),
            },
        )?,
        "llama-logits" => {
            let model = args.models.first().context("llama-logits needs -m FILE")?;
            let out = args.out.as_ref().context("llama-logits needs -o OUT")?;
            let n_gen = if argv.iter().any(|a| a == "-n" || a == "--n-gen") { args.n_gen } else { 0 };
            verify::logits::dump_reference(
                &cache,
                std::path::Path::new(model),
                args.prompt.as_deref(),
                args.tokens.as_deref(),
                n_gen,
                args.threads,
                std::path::Path::new(out),
            )?;
        }
        "layer-diff" => {
            let model = args.models.first().context("layer-diff needs -m FILE")?;
            verify::layers::run(
                &cache,
                std::path::Path::new(model),
                args.prompt.as_deref(),
                args.tokens.as_deref(),
                args.threads,
                args.gguf.as_deref().map(std::path::Path::new),
            )?;
        }
        "llama-dump" => {
            let model = args.models.first().context("llama-dump needs -m FILE")?;
            let out = args.out.as_ref().context("llama-dump needs -o DIR")?;
            let tokens = args.tokens.as_ref().context("llama-dump needs --tokens 1,2,3")?;
            verify::logits::dump_intermediates(
                &cache,
                std::path::Path::new(model),
                tokens,
                args.filter.as_deref(),
                args.threads,
                std::path::Path::new(out),
            )?;
        }
        "synth" => {
            for arch in if args.positional.is_empty() {
                synth::ARCHS.iter().map(|s| s.to_string()).collect()
            } else {
                args.positional.clone()
            } {
                let path = match synth::family(&arch) {
                    Some(fam) => synth::ensure_family(&cache, fam, synth::SEED)?,
                    None => synth::ensure_synth(&cache, &arch, synth::SEED)?,
                };
                println!("{}", path.display());
            }
        }
        "requant" => {
            for ft in if args.positional.is_empty() {
                requant::FTYPES.iter().map(|s| s.to_string()).collect()
            } else {
                args.positional.clone()
            } {
                println!("{}", requant::ensure_requant(&ft)?.display());
            }
        }
        "cache-dir" => println!("{}", cache.display()),
        "__verify-type" => {
            let id: u32 = args.positional.first().context("__verify-type needs a type id")?.parse()?;
            verify::quants::worker(&cache, id, &opts)?;
        }
        other => bail!("unknown command {other:?}\n\n{USAGE}"),
    }
    Ok(())
}
