//! `cargo xtask`: the project's automation, one binary with subcommands.
//!
//! - `fetch-models [NAME...]`: the three real models and the vocab fixtures, into the cache.
//! - `llama-cpp [--lib-only] [--force]`: llama.cpp from the llama-cpp-python sdist, built into the cache.
//! - `verify [quants|gguf|all] [--quick] [--seed N] [--type NAME...]`: comparisons
//!   against that build; ends with `N passed, M failed` and fails if M > 0.
//! - `bench-quants [--quick] [--type NAME...]`: ggml-quants vs ggml throughput.
//!
//! The cache is `$GGUF_CACHE`, else `$XDG_CACHE_HOME/gguf-engine`, else
//! `~/.cache/gguf-engine` ([`models::cache_dir`]).

mod bench;
mod ggml;
mod llama_cpp;
mod models;
mod verify;

// Links every built-in type's `inventory::submit!` into this binary.
use ggml_quants as _;

use anyhow::{bail, Context, Result};

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  fetch-models [NAME...]            fetch the models of shared/MODELS.md (smollm2, gemma3,
                                    qwen2.5; default all) and the vocab fixtures into the cache
  llama-cpp [--lib-only] [--force]  build llama.cpp (llama-cpp-python 0.3.36 sdist) in the cache;
                                    --lib-only: just libggml-base (what verify needs)
  verify [quants|gguf|all]          compare against the llama.cpp build (default: all)
      --quick                       smaller counts (CI)
      --seed N                      RNG seed (default 0x5eed)
      --type NAME                   only this quant type (repeatable; quants only)
  bench-quants [--quick] [--type NAME...]
                                    ggml-quants vs ggml dequantize/quantize throughput
  cache-dir                         print the cache directory

environment: GGUF_CACHE, XDG_CACHE_HOME (cache location), XTASK_PYTHON (python with pip)";

struct Args {
    positional: Vec<String>,
    quick: bool,
    force: bool,
    lib_only: bool,
    seed: u64,
    types: Vec<String>,
}

fn parse_args(args: &[String]) -> Result<Args> {
    let mut a =
        Args { positional: Vec::new(), quick: false, force: false, lib_only: false, seed: 0x5eed, types: Vec::new() };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => a.quick = true,
            "--force" => a.force = true,
            "--lib-only" => a.lib_only = true,
            "--seed" => {
                let v = it.next().context("--seed needs a value")?;
                a.seed = match v.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16)?,
                    None => v.parse()?,
                };
            }
            "--type" => a.types.push(it.next().context("--type needs a value")?.clone()),
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
            let build = llama_cpp::run(&cache, args.force, args.lib_only)?;
            println!("{}", build.display());
        }
        "verify" => {
            let what = args.positional.first().map(String::as_str).unwrap_or("all");
            let mut report = verify::Report::default();
            match what {
                "quants" => verify::quants::run(&cache, &opts, &mut report)?,
                "gguf" => verify::gguf::run(&cache, &opts, &mut report)?,
                "all" => {
                    verify::quants::run(&cache, &opts, &mut report)?;
                    verify::gguf::run(&cache, &opts, &mut report)?;
                }
                other => bail!("verify what? {other:?} (quants, gguf or all)"),
            }
            print!("{}", report.render());
            let (_, failed, _) = report.counts();
            if failed > 0 {
                std::process::exit(1);
            }
        }
        "bench-quants" => bench::run(&cache, &opts)?,
        "cache-dir" => println!("{}", cache.display()),
        "__verify-type" => {
            let id: u32 = args.positional.first().context("__verify-type needs a type id")?.parse()?;
            verify::quants::worker(&cache, id, &opts)?;
        }
        other => bail!("unknown command {other:?}\n\n{USAGE}"),
    }
    Ok(())
}
