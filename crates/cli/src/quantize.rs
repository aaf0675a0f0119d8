//! `gguf quantize`: llama-quantize's command line over the `quantize` crate — same
//! options, same positional forms (`IN OUT RECIPE [N]` or `IN RECIPE [N]`, which writes
//! `ggml-model-<RECIPE>.gguf` beside the input), same output bytes.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use gguf_format::SplitGguf;
use gguf_quantize::{recipe, Imatrix, KvOverride, Params, Progress};

/// Arguments of `gguf quantize` (llama-quantize's names).
#[derive(clap::Args, Debug)]
#[command(after_help = recipe_table())]
pub struct QuantizeArgs {
    /// Allow requantizing tensors that are already quantized (quality suffers).
    #[arg(long)]
    pub allow_requantize: bool,
    /// Leave output.weight un(re)quantized.
    #[arg(long)]
    pub leave_output_tensor: bool,
    /// Disable the recipe's mixture: every tensor gets the default type.
    #[arg(long)]
    pub pure: bool,
    /// Importance matrix (llama-imatrix's GGUF or legacy .dat).
    #[arg(long, value_name = "FILE")]
    pub imatrix: Option<PathBuf>,
    /// Use the importance matrix only for tensors whose name contains this (repeatable).
    #[arg(long, value_name = "NAME", conflicts_with = "exclude_weights")]
    pub include_weights: Vec<String>,
    /// Do not use the importance matrix for tensors whose name contains this (repeatable).
    #[arg(long, value_name = "NAME")]
    pub exclude_weights: Vec<String>,
    /// ggml type of output.weight.
    #[arg(long, value_name = "TYPE")]
    pub output_tensor_type: Option<String>,
    /// ggml type of the token embeddings.
    #[arg(long, value_name = "TYPE")]
    pub token_embedding_type: Option<String>,
    /// PATTERN=TYPE: tensors matching the regex PATTERN get TYPE (repeatable; first wins).
    #[arg(long, value_name = "PATTERN=TYPE")]
    pub tensor_type: Vec<String>,
    /// A file of PATTERN=TYPE entries separated by spaces or newlines.
    #[arg(long, value_name = "FILE")]
    pub tensor_type_file: Vec<PathBuf>,
    /// Comma-separated layer numbers to remove from the model.
    #[arg(long, value_name = "L0,L1,...")]
    pub prune_layers: Option<String>,
    /// Write the output in the same shards as the input.
    #[arg(long)]
    pub keep_split: bool,
    /// KEY=TYPE:VALUE (TYPE: int, float, bool, str) set in the output (repeatable).
    #[arg(long, value_name = "KEY=TYPE:VALUE")]
    pub override_kv: Vec<String>,
    /// Show every tensor's type and the final size without writing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Accepted for llama-quantize compatibility (memory here is bounded per tensor slab).
    #[arg(long, value_name = "MiB")]
    pub max_buffer_size: Option<u64>,
    /// Plain progress lines even on a terminal.
    #[arg(long)]
    pub no_progress: bool,
    /// `IN [OUT] RECIPE [NTHREADS]`
    #[arg(num_args = 2..=4, required = true, value_name = "ARGS")]
    pub args: Vec<String>,
}

fn recipe_table() -> String {
    let mut s = String::from("Recipes (RECIPE, by name or number):\n");
    for r in recipe::all() {
        let names = std::iter::once(r.name).chain(r.aliases.iter().copied()).collect::<Vec<_>>().join(" / ");
        let num = if r.copy_only { "    ".to_string() } else { format!("{:>2}  ", r.ftype) };
        s.push_str(&format!("  {num}{names:<16} {}\n", r.description.trim()));
    }
    s
}

fn parse_type(option: &str, name: &str) -> Result<u32> {
    match ggml_quants::all().iter().find(|t| t.name.eq_ignore_ascii_case(name)) {
        Some(t) => Ok(t.id),
        None => {
            let known: Vec<&str> = ggml_quants::all().iter().map(|t| t.name).collect();
            bail!("{option}: unknown ggml type {name:?}; known: {}", known.join(", "))
        }
    }
}

fn parse_tensor_type(s: &str) -> Result<(String, u32)> {
    let Some((pat, ty)) = s.split_once('=') else { bail!("--tensor-type: malformed tensor type {s:?} (PATTERN=TYPE)") };
    if pat.is_empty() {
        bail!("--tensor-type: missing tensor name in {s:?}");
    }
    if ty.is_empty() {
        bail!("--tensor-type: missing quantization type in {s:?}");
    }
    Ok((pat.to_lowercase(), parse_type("--tensor-type", ty)?))
}

fn parse_prune(s: &str) -> Result<Vec<i64>> {
    let mut v = Vec::new();
    for id in s.split(',') {
        match id.trim().parse::<i64>() {
            Ok(n) if n >= 0 => v.push(n),
            _ => bail!("--prune-layers: invalid layer id {id:?}"),
        }
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// Whether a [`StopOnTerm`] is live.
static STOP_ON_TERM: AtomicBool = AtomicBool::new(false);

/// While alive, SIGTERM and SIGHUP stop a command that writes files the way a first
/// Ctrl-C does: the interrupt flag is set, the write stops at its next check and removes
/// its temporaries, and the command fails with "interrupted". A second such signal, or
/// one that arrives when no guard is alive, ends the process at once with 128 + the
/// signal (the default action's code), after removing every temporary still being
/// written ([`gguf_format::atomic::remove_pending`]).
pub(crate) struct StopOnTerm(());

impl StopOnTerm {
    /// Starts watching (one thread for the process, started on the first call);
    /// `flag` is the process's interrupt flag (the same one every call).
    pub(crate) fn install(flag: &'static AtomicBool) -> StopOnTerm {
        static START: Once = Once::new();
        START.call_once(|| {
            use signal_hook::consts::{SIGHUP, SIGTERM};
            let watch = signal_hook::iterator::Signals::new([SIGTERM, SIGHUP]).and_then(|mut signals| {
                std::thread::Builder::new().name("stop-on-term".into()).spawn(move || {
                    for sig in signals.forever() {
                        if STOP_ON_TERM.load(Ordering::SeqCst) && !flag.swap(true, Ordering::SeqCst) {
                            continue;
                        }
                        gguf_format::atomic::remove_pending();
                        std::process::exit(128 + sig);
                    }
                })
            });
            if let Err(e) = watch {
                eprintln!("warning: SIGTERM will not stop this command cleanly: {e}");
            }
        });
        STOP_ON_TERM.store(true, Ordering::SeqCst);
        StopOnTerm(())
    }
}

impl Drop for StopOnTerm {
    fn drop(&mut self) {
        STOP_ON_TERM.store(false, Ordering::SeqCst);
    }
}

/// Runs `gguf quantize`.
pub fn run(a: &QuantizeArgs, interrupted: &'static AtomicBool) -> Result<()> {
    let input = PathBuf::from(&a.args[0]);
    let (recipe, shown, out, rest) = match recipe::resolve(&a.args[1]) {
        Some((r, shown)) => {
            let dir = input.parent().map(Path::to_path_buf).unwrap_or_default();
            let mut name = format!("ggml-model-{shown}");
            if !a.keep_split {
                name.push_str(".gguf");
            }
            (r, shown, dir.join(name), &a.args[2..])
        }
        None => {
            let Some(r) = a.args.get(2) else { bail!("missing RECIPE after the output file") };
            let (recipe, shown) = recipe::resolve(r).ok_or_else(|| recipe::lookup(r).unwrap_err())?;
            (recipe, shown, PathBuf::from(&a.args[1]), &a.args[3..])
        }
    };
    let nthread = match rest {
        [] => 0,
        [n] => n.parse::<usize>().with_context(|| format!("invalid nthread {n:?}"))?,
        _ => bail!("too many arguments: {:?}", &rest[1..]),
    };
    let mut p = Params::new(recipe);
    p.nthread = nthread;
    p.allow_requantize = a.allow_requantize;
    p.quantize_output_tensor = !a.leave_output_tensor;
    p.pure = a.pure;
    p.dry_run = a.dry_run;
    p.output_tensor_type =
        a.output_tensor_type.as_deref().map(|t| parse_type("--output-tensor-type", t)).transpose()?;
    p.token_embedding_type =
        a.token_embedding_type.as_deref().map(|t| parse_type("--token-embedding-type", t)).transpose()?;
    for t in &a.tensor_type {
        p.tensor_types.push(parse_tensor_type(t)?);
    }
    for f in &a.tensor_type_file {
        let text = std::fs::read_to_string(f).with_context(|| format!("--tensor-type-file {}", f.display()))?;
        for t in text.split_whitespace() {
            p.tensor_types.push(parse_tensor_type(t)?);
        }
    }
    if let Some(s) = &a.prune_layers {
        p.prune_layers = parse_prune(s)?;
    }
    for o in &a.override_kv {
        p.kv_overrides.push(KvOverride::parse(o)?);
    }
    if let Some(f) = &a.imatrix {
        let mut im = Imatrix::load(f)?;
        im.filter(&a.include_weights, &a.exclude_weights);
        eprintln!(
            "loaded {} importance matrix entries from {} computed on {} chunks",
            im.entries.len(),
            f.display(),
            im.chunk_count
        );
        p.imatrix = Some(im);
    }
    p.keep_split = a.keep_split;
    let file = SplitGguf::open(&input)?;
    let t0 = Instant::now();
    let plan = gguf_quantize::plan(&file, &p)?;
    let targets = gguf_quantize::output_paths(&plan, &p, &out);
    if !a.dry_run {
        for t in &targets {
            if file.shards().iter().any(|s| same_file(s.path(), t)) {
                bail!("input and output files are the same: {}", t.display());
            }
        }
    }
    let target = targets[0].clone();
    let mib = |b: u64| b as f64 / 1024.0 / 1024.0;
    let n = plan.tensors.len();
    if a.dry_run {
        eprintln!("calculating quantization size for '{}' as {shown}", input.display());
        for (i, t) in plan.tensors.iter().enumerate() {
            eprintln!("[{:4}/{n:4}] {}", i + 1, describe(t, mib));
        }
    } else {
        let th = if nthread > 0 { format!(" using {nthread} threads") } else { String::new() };
        eprintln!("quantizing '{}' to '{}' as {shown}{th}", input.display(), target.display());
        if targets.len() > 1 {
            eprintln!("writing {} shards like the input's", targets.len());
        }
        let bar = (!a.no_progress && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(plan.size_in().max(1));
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} {bytes}/{total_bytes} {elapsed_precise} ETA {eta_precise} {msg}",
                )
                .expect("static template"),
            );
            b
        });
        let done_before = Mutex::new(0u64);
        let current = Mutex::new(0u64);
        let on_progress = |ev: Progress<'_>| match ev {
            Progress::Start { index, count, tensor } => {
                *current.lock().unwrap() = tensor.size_in;
                match &bar {
                    Some(b) => b.set_message(format!("[{}/{count}] {}", index + 1, tensor.name)),
                    None => eprintln!("[{:4}/{count:4}] {}", index + 1, describe(tensor, mib)),
                }
            }
            Progress::Rows { done, total } => {
                if let Some(b) = &bar {
                    let cur = *current.lock().unwrap();
                    b.set_position(*done_before.lock().unwrap() + cur * done / total.max(1));
                }
            }
            Progress::Done { tensor } => {
                let mut d = done_before.lock().unwrap();
                *d += tensor.size_in;
                if let Some(b) = &bar {
                    b.set_position(*d);
                }
            }
        };
        let stop = StopOnTerm::install(interrupted);
        let written = gguf_quantize::write(&file, &plan, &p, &out, interrupted, &on_progress);
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        if written.is_ok() && interrupted.load(Ordering::SeqCst) {
            // stopped as the last bytes went out: a failing exit code means no output
            for t in &targets {
                let _ = std::fs::remove_file(t);
            }
            bail!(gguf_quantize::Error::Interrupted);
        }
        drop(stop);
        written?;
    }
    let bpw = |b: u64| b as f64 * 8.0 / plan.n_elements.max(1) as f64;
    eprintln!("model size  = {:8.2} MiB ({:.2} BPW)", mib(plan.size_in()), bpw(plan.size_in()));
    eprintln!("quant size  = {:8.2} MiB ({:.2} BPW)", mib(plan.size_out()), bpw(plan.size_out()));
    if a.dry_run && plan.needs_imatrix {
        eprintln!("warning: dry run completed, but this quantization will require an imatrix (--imatrix FILE)");
    }
    if plan.n_fallback > 0 {
        eprintln!("warning: {} of {n} tensor(s) required fallback quantization", plan.n_fallback);
    }
    eprintln!("quantize time = {:8.2} ms", t0.elapsed().as_secs_f64() * 1e3);
    Ok(())
}

fn describe(t: &gguf_quantize::TensorPlan, mib: impl Fn(u64) -> f64) -> String {
    let name = |id| ggml_quants::by_id(id).map_or("?", |t| t.name);
    let shape = t.dims.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    if t.from == t.to {
        format!("{:<36} - [{shape}], type = {:>6}, size = {:8.3} MiB", t.name, name(t.from), mib(t.size_in))
    } else {
        let fb = if t.fell_back { " (fallback)" } else { "" };
        format!(
            "{:<36} - [{shape}], type = {:>6}, converting to {}{fb} .. size = {:8.2} MiB -> {:8.2} MiB",
            t.name,
            name(t.from),
            name(t.to),
            mib(t.size_in),
            mib(t.size_out)
        )
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}
