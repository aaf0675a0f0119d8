//! The `gguf` command line as a library function, so a crate can build its own `gguf`
//! with its plug-ins linked in: `fn main() -> ExitCode { gguf_cli::main() }` (see
//! `examples/custom-quant`, whose `gguf` lists and reads its plug-in type).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::{engine, fetch, inspect};
use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gguf_format::GgufFile;

// Link every built-in quant type into the binary (inventory registrations).
use ggml_quants as _;
// And every built-in recipe.
use gguf_quantize as _;

#[derive(Parser)]
#[command(name = "gguf", version, about = "Read, inspect and run llama.cpp GGUF model files")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a file's metadata, tensor table, type mix and size (default model if no FILE).
    Inspect {
        /// The GGUF file; without it, the default model (fetched on first use).
        file: Option<PathBuf>,
        /// Print one JSON document with every key, value and tensor.
        #[arg(long)]
        json: bool,
        /// Do not summarize long arrays.
        #[arg(long)]
        full: bool,
    },
    /// Write one tensor as raw little-endian f32, in stored element order (`ne[0]` fastest).
    Dequant {
        /// The GGUF file.
        file: PathBuf,
        /// Tensor name.
        tensor: String,
        /// Output file.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Download a known model into the cache and print its path; list, remove, clean up.
    Fetch {
        /// Model name (default: the default model); `--list` shows them.
        model: Option<String>,
        /// List the known models, with what is cached and its size.
        #[arg(long, conflicts_with_all = ["remove", "clean"])]
        list: bool,
        /// Remove this model from the cache (a name of `--list`).
        #[arg(long, value_name = "NAME", conflicts_with = "model")]
        remove: Option<String>,
        /// Remove what failed or interrupted fetches left: downloaded wheels, partial files.
        #[arg(long)]
        clean: bool,
    },
    /// List the registered quant types and the kernel each uses on this CPU.
    Types {
        /// Check every registry (types, kernels, architectures, pre-tokenizers, recipes)
        /// for clashes and list overrides; exit 1 on a clash.
        #[arg(long)]
        check: bool,
    },
    /// Generate text from a prompt (default model if no -m).
    Run(engine::RunArgs),
    /// Interactive chat using the model's chat template.
    Chat(crate::chat::ChatArgs),
    /// Write every position's logits as raw f32 (`[n_tokens][n_vocab]`).
    Logits(engine::LogitsArgs),
    /// Embeddings of each input line with an encoder model, like llama-embedding.
    Embed(crate::embed::EmbedArgs),
    /// Measure prompt processing and generation speed, like llama-bench.
    Bench(crate::bench::BenchArgs),
    /// Print the token ids of a text, like llama-tokenize.
    Tokenize(crate::tokenize::TokenizeArgs),
    /// Print the text of token ids.
    Detokenize(crate::tokenize::DetokenizeArgs),
    /// Quantize a model with a llama.cpp recipe (llama-quantize's options and output).
    Quantize(crate::quantize::QuantizeArgs),
    /// Compute an importance matrix over a text, like llama-imatrix.
    Imatrix(crate::imatrix::ImatrixArgs),
    /// Memory needed to run a model at a context: weights, KV cache, compute buffers.
    Mem(crate::mem::MemArgs),
    /// Which recipe fits a memory budget best: quantize, measure KL / top-1 / PPL, rank.
    Advise(crate::advise::AdviseArgs),
    /// Rate of answers passing a check (valid JSON, a regex) for several models side by side.
    TaskCheck(crate::task_check::TaskCheckArgs),
    /// Perplexity and KL divergence over a text, like llama-perplexity.
    Perplexity(crate::perplexity::PerplexityArgs),
    /// Render a conversation (JSON messages) with the file's chat template.
    ChatTemplate(crate::tokenize::ChatTemplateArgs),
    /// Split a model into shards, like llama-gguf-split (byte-identical shards).
    Split(crate::split::SplitArgs),
    /// Merge a split model's shards into one file, like llama-gguf-split --merge.
    Merge(crate::split::MergeArgs),
    /// An OpenAI- and llama-server-compatible HTTP server (llama-server's flags).
    Serve(crate::serve::ServeArgs),
}

/// llama.cpp's multi-letter short flags, rewritten to their long forms before parsing
/// (clap's short flags are one letter).
const LLAMA_SHORT_FLAGS: &[(&str, &str)] = &[
    ("-np", "--parallel"),
    ("-ub", "--ubatch-size"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-sys", "--system-prompt"),
    ("-pg", "--pg"),
    ("-st", "--single-turn"),
    // llama-bench's (accepted by `gguf bench` as lists, with a note where they do nothing here)
    ("-oe", "--output-err"),
    ("-nkvo", "--no-kv-offload"),
    ("-kvu", "--kv-unified"),
    ("-no-kvu", "--no-kv-unified"),
    ("-sm", "--split-mode"),
    ("-mg", "--main-gpu"),
    ("-ts", "--tensor-split"),
    ("-ot", "--override-tensor"),
    ("-embd", "--embeddings"),
    ("-nopo", "--no-op-offload"),
    ("-ncmoe", "--n-cpu-moe"),
    ("-lm", "--load-mode"),
    ("-lzm", "--lazy-mode"),
    ("-fitt", "--fit-target"),
    ("-fitc", "--fit-ctx"),
];

/// `gguf bench` takes these as llama-bench's parameter lists (one row per value), where the
/// other commands drop or refuse them.
const BENCH_FLAGS: &[(&str, &str)] = &[("-ngl", "--n-gpu-layers"), ("-fa", "--flash-attn"), ("-dev", "--device")];

/// The engine commands that take `-ngl` and `-dev` (`crate::device`), where the others
/// drop or refuse them.
const DEVICE_COMMANDS: &[&str] = &["run", "chat", "logits", "perplexity", "serve"];
const DEVICE_FLAGS: &[(&str, &str)] = &[("-ngl", "--n-gpu-layers"), ("-dev", "--device")];

/// Every spelling of every llama.cpp flag (llama-cli/-completion/-server/... and
/// llama-bench), written by `scripts/flag_table.py --flags-out`: one this command does not
/// take is named as such, not as an unknown argument.
const LLAMA_FLAGS: &str = include_str!("llama_flags.txt");

fn is_llama_flag(flag: &str) -> bool {
    LLAMA_FLAGS.lines().any(|l| l == flag)
}

/// llama.cpp flags that do not apply to this CPU engine: dropped with a note (with their
/// value when they take one), so llama.cpp command lines run unchanged.
const IGNORED_FLAGS: &[(&str, bool, &str)] = &[
    ("-ngl", true, "GPU offload is not available yet: every layer runs on the CPU"),
    ("--n-gpu-layers", true, "GPU offload is not available yet: every layer runs on the CPU"),
    ("--gpu-layers", true, "GPU offload is not available yet: every layer runs on the CPU"),
    ("-fa", false, "attention always follows llama.cpp's CPU flash attention"),
    ("--flash-attn", false, "attention always follows llama.cpp's CPU flash attention"),
    ("-no-cnv", false, "`gguf run` never enters conversation mode (that is `gguf chat`)"),
    ("--no-conversation", false, "`gguf run` never enters conversation mode (that is `gguf chat`)"),
    ("-tb", true, "one thread count (-t) serves prompt and generation"),
    ("--threads-batch", true, "one thread count (-t) serves prompt and generation"),
    ("--jinja", false, "chat templates are always Jinja"),
];

/// llama.cpp flags this project does not have, with what to do instead.
const UNSUPPORTED_FLAGS: &[(&str, &str)] = &[
    ("-hf", "downloading from Hugging Face is not supported here: use -m FILE, or -m NAME / `gguf fetch NAME` for the known models (`gguf fetch --list`)"),
    ("--hf-repo", "downloading from Hugging Face is not supported here: use -m FILE, or `gguf fetch NAME`"),
    ("-mu", "downloading a model by URL is not supported here: use -m FILE or `gguf fetch NAME`"),
    ("--model-url", "downloading a model by URL is not supported here: use -m FILE or `gguf fetch NAME`"),
    ("-cnv", "conversation mode is `gguf chat` (same model and sampling flags)"),
    ("--conversation", "conversation mode is `gguf chat` (same model and sampling flags)"),
    ("-dev", "only the CPU is supported for now"),
    ("--device", "only the CPU is supported for now"),
    ("-hff", "downloading from Hugging Face is not supported here: use -m FILE or `gguf fetch NAME`"),
    ("--hf-file", "downloading from Hugging Face is not supported here: use -m FILE or `gguf fetch NAME`"),
    ("-hft", "downloading from Hugging Face is not supported here: use -m FILE or `gguf fetch NAME`"),
    ("--hf-token", "downloading from Hugging Face is not supported here: use -m FILE or `gguf fetch NAME`"),
    ("-hfr", "downloading from Hugging Face is not supported here: use -m FILE or `gguf fetch NAME`"),
    ("-rpc", "remote (RPC) backends are not supported: everything runs on this machine's CPU"),
    ("--rpc", "remote (RPC) backends are not supported: everything runs on this machine's CPU"),
];

/// The command line with llama.cpp's spellings mapped: multi-letter short flags to long
/// ones, inapplicable flags dropped with a note; `Err` names an unsupported flag.
fn llama_args(args: Vec<std::ffi::OsString>) -> Result<Vec<std::ffi::OsString>, String> {
    let mut out = Vec::with_capacity(args.len());
    let command = subcommand(&args).unwrap_or_default();
    let bench = command == "bench";
    let device = DEVICE_COMMANDS.contains(&command.as_str());
    let mut it = args.into_iter().peekable();
    while let Some(a) = it.next() {
        let s = a.to_str().unwrap_or_default();
        let (flag, inline) = match s.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (s, None),
        };
        if bench {
            if let Some((_, long)) = BENCH_FLAGS.iter().find(|(f, long)| *f == s || *long == flag) {
                out.push(if *long == flag { a } else { long.into() });
                continue;
            }
        }
        if device {
            if let Some((_, long)) = DEVICE_FLAGS.iter().find(|(f, long)| *f == s || *long == flag) {
                out.push(if *long == flag { a } else { long.into() });
                continue;
            }
            if flag == "--gpu-layers" {
                out.push(a);
                continue;
            }
        }
        if let Some((_, why)) = UNSUPPORTED_FLAGS.iter().find(|(f, _)| *f == flag) {
            return Err(format!("`{flag}` is not supported: {why}"));
        }
        if let Some((_, takes_value, why)) = IGNORED_FLAGS.iter().find(|(f, _, _)| *f == flag) {
            let value_next = inline.is_none()
                && it
                    .peek()
                    .and_then(|v| v.to_str())
                    .is_some_and(|v| *takes_value || matches!(v, "on" | "off" | "auto" | "1" | "0" | "true" | "false"));
            if value_next {
                it.next();
            }
            eprintln!("note: `{flag}` ignored: {why}");
            continue;
        }
        match LLAMA_SHORT_FLAGS.iter().find(|(f, _)| *f == s) {
            Some((_, long)) => out.push(long.into()),
            // clap would read `-nkvo` as `-n kvo`: a llama.cpp multi-letter flag not mapped
            // above is refused by name
            None if is_multi_letter_short(s) && is_llama_flag(s) => {
                return Err(format!("`{s}` is a llama.cpp flag that `gguf {command}` does not support"));
            }
            None => out.push(a),
        }
    }
    Ok(out)
}

/// `-abc`: one dash and two or more letters (not a number, not `--long`).
fn is_multi_letter_short(s: &str) -> bool {
    s.len() > 2
        && s.starts_with('-')
        && !s.starts_with("--")
        && s[1..].bytes().all(|b| b.is_ascii_alphabetic() || b == b'-')
}

/// The subcommand's name: the first argument after the program that is not a flag.
fn subcommand(args: &[std::ffi::OsString]) -> Option<String> {
    args.iter().skip(1).find_map(|a| a.to_str().filter(|s| !s.starts_with('-')).map(str::to_string))
}

/// Parses the process's arguments and runs the command: the whole `gguf` binary. The
/// registries see every quant type, kernel, architecture, pre-tokenizer and recipe linked
/// into the calling binary.
pub fn main() -> ExitCode {
    let args = match llama_args(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let command = subcommand(&args).unwrap_or_default();
    let typed: Vec<String> = std::env::args().collect();
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // an unknown argument that is a llama.cpp flag: say so by name
            if e.kind() == clap::error::ErrorKind::UnknownArgument {
                if let Some(clap::error::ContextValue::String(arg)) = e.get(clap::error::ContextKind::InvalidArg) {
                    let flag = arg.split_once('=').map_or(arg.as_str(), |(f, _)| f);
                    if is_llama_flag(flag) {
                        // named as typed: `-nkvo`, not the `--no-kv-offload` it was mapped to
                        let typed = LLAMA_SHORT_FLAGS
                            .iter()
                            .find(|(_, l)| *l == flag)
                            .filter(|(f, _)| typed.iter().any(|t| t == f));
                        let flag = typed.map_or(flag, |(f, _)| f);
                        eprintln!(
                            "error: `{flag}` is a llama.cpp flag that `gguf {command}` does not support (README: \"llama.cpp flags\")"
                        );
                        return ExitCode::from(2);
                    }
                }
            }
            e.exit()
        }
    };
    // Ctrl-C: the first stops generation cleanly, a second one exits at once (the server
    // handles its signals itself).
    let serving = matches!(cli.command, Command::Serve(_));
    // A closed stdout (`gguf types | head`) ends the process quietly, as for C tools; not
    // for the server, whose sockets must not raise SIGPIPE.
    if !serving {
        sigpipe::reset();
    }
    let _ = (!serving).then(|| {
        ctrlc::set_handler(|| {
            if engine::INTERRUPTED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                // A second Ctrl-C exits at once: no destructor runs, so take the
                // temporaries of unfinished writes away first.
                gguf_format::atomic::remove_pending();
                std::process::exit(130);
            }
        })
    });
    // A SIMD cap the kernels cannot read would silently run at full speed: refuse it.
    if let Err(e) = quant_kernels::cpu::check_env() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// One line for an error and its causes, `: `-joined; a cause whose text its parent
/// already shows is not repeated, nor a path both name ("reading f.gguf: f.gguf: No such
/// file" reads "reading f.gguf: No such file").
fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for c in e.chain().map(|c| c.to_string()) {
        if line.ends_with(&c) {
            continue;
        }
        let last = line.rsplit(' ').next().unwrap_or_default();
        let c = match c.strip_prefix(last).and_then(|r| r.strip_prefix(": ")) {
            Some(rest) if !last.is_empty() => rest.to_string(),
            _ => c,
        };
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&c);
    }
    line
}

fn progress(line: &str) {
    eprintln!("{line}");
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Inspect { file, json, full } => {
            let path = match file {
                Some(p) => p,
                None => fetch::ensure(fetch::default_model(), &mut progress)?,
            };
            let f = open(&path)?;
            let mut out = std::io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(&mut out, &inspect::to_json(&f, full))?;
                writeln!(out)?;
            } else {
                out.write_all(inspect::to_text(&f, full).as_bytes())?;
            }
            Ok(())
        }
        Command::Dequant { file, tensor, output } => crate::dequant(&file, &tensor, &output),
        Command::Fetch { model, list, remove, clean } => {
            if remove.is_some() || clean {
                if let Some(name) = remove {
                    let m = fetch::model(&name)?;
                    match fetch::remove(m)? {
                        Some(n) => println!("removed {} ({:.1} MiB)", m.file, n as f64 / (1 << 20) as f64),
                        None => println!("{} is not cached", m.name),
                    }
                }
                if clean {
                    let (paths, freed) = fetch::clean()?;
                    for p in &paths {
                        println!("removed {}", p.display());
                    }
                    println!("freed {:.1} MiB in {} files", freed as f64 / (1 << 20) as f64, paths.len());
                }
                return Ok(());
            }
            if list {
                // what `-m NAME` accepts, and whether it is already here
                for m in fetch::MODELS {
                    let here = match fetch::cached(m) {
                        Some(p) => format!("cached: {}", p.display()),
                        None => "not cached".into(),
                    };
                    println!("{:<20} {:<45} {:>8.1} MiB  {here}", m.name, m.file, m.size as f64 / (1 << 20) as f64);
                }
                return Ok(());
            }
            let m = match model {
                Some(name) => fetch::model(&name)?,
                None => fetch::default_model(),
            };
            let p = fetch::ensure(m, &mut progress)?;
            println!("{}", p.display());
            Ok(())
        }
        Command::Run(a) => engine::run(&a),
        Command::Serve(a) => crate::serve::run(&a),
        Command::Tokenize(a) => crate::tokenize::tokenize(&a, &mut std::io::stdout().lock()),
        Command::Detokenize(a) => crate::tokenize::detokenize(&a, &mut std::io::stdout().lock()),
        Command::ChatTemplate(a) => crate::tokenize::chat_template(&a, &mut std::io::stdout().lock()),
        Command::Split(a) => crate::split::split(&a, &engine::INTERRUPTED),
        Command::Merge(a) => crate::split::merge(&a, &engine::INTERRUPTED),
        Command::Chat(a) => crate::chat::chat(&a),
        Command::Logits(a) => engine::logits(&a),
        Command::Embed(a) => crate::embed::run(&a),
        Command::Bench(a) => crate::bench::run(&a),
        Command::Imatrix(a) => crate::imatrix::run(&a),
        Command::Mem(a) => crate::mem::run(&a),
        Command::Advise(a) => crate::advise::run(&a),
        Command::TaskCheck(a) => crate::task_check::run(&a),
        Command::Perplexity(a) => crate::perplexity::run(&a),
        Command::Quantize(a) => crate::quantize::run(&a, &engine::INTERRUPTED),
        Command::Types { check } => {
            if check {
                let (text, sound) = crate::types::check();
                print!("{text}");
                if !sound {
                    anyhow::bail!("the registries have problems (listed above)");
                }
            } else {
                print!("{}", crate::types::table());
            }
            Ok(())
        }
    }
}

fn open(path: &Path) -> Result<GgufFile> {
    GgufFile::open(path).with_context(|| format!("reading {}", path.display()))
}
