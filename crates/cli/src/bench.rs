//! `gguf bench`: llama-bench's parameters, tests and output (tools/llama-bench).
//!
//! Every test parameter takes a list (commas, a repeated flag, and for numbers llama-bench's
//! ranges `first-last`, `first-last+step`, `first-last*mult`); the tests are the cartesian
//! product in llama-bench's loop order, one row each, printed as llama-bench's md, csv,
//! json, jsonl or sql. Parameters of GPU offload and thread placement are accepted and
//! reported as asked (with a note on stderr): this engine runs every layer on the CPU.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use gguf_models::{CacheType, Logits, Pool, State, StateOptions};

use crate::engine::{load, peak_rss, threads, Loaded, ModelArgs, INTERRUPTED};

mod weights;

pub use weights::{
    dram_buffer_bytes, dram_read_bound, weight_report, weights_read_bound, DramBound, TypeUse, WeightPass, WeightReport,
};

/// `gguf bench` (boxed: the parameter lists are many).
#[derive(Args, Debug)]
#[command(after_help = "Multiple values can be given for each test parameter by separating them with ',' or by \
giving the flag several times. Ranges can be given as 'first-last', 'first-last+step' or 'first-last*mult'. \
One test runs per combination, in llama-bench's order.")]
pub struct BenchArgs {
    #[command(flatten)]
    opts: Box<BenchOpts>,
}

/// The options of `gguf bench`: llama-bench's.
#[derive(Args, Debug)]
pub struct BenchOpts {
    /// Model files (a comma list; a `gguf fetch --list` name resolves); default: the default model.
    #[arg(short = 'm', long = "model", value_delimiter = ',', value_name = "FILE")]
    model: Vec<String>,
    /// Prompt tokens of the pp tests (0 = none) [default: 512].
    #[arg(short = 'p', long = "n-prompt", value_name = "N", allow_hyphen_values = true, value_parser = nonneg_list)]
    n_prompt: Vec<Ints>,
    /// Generated tokens of the tg tests (0 = none) [default: 128].
    #[arg(short = 'n', long = "n-gen", value_name = "N", allow_hyphen_values = true, value_parser = nonneg_list)]
    n_gen: Vec<Ints>,
    /// A prompt-then-generation test `PP,TG` ("ppPP+tgTG"; llama-bench's `-pg`, repeatable).
    #[arg(long = "pg", value_name = "PP,TG", value_parser = parse_pg)]
    pg: Vec<(i64, i64)>,
    /// Tokens already in the context before each test ("@ dN"; not timed) [default: 0].
    #[arg(short = 'd', long = "n-depth", value_name = "N", allow_hyphen_values = true, value_parser = nonneg_list)]
    n_depth: Vec<Ints>,
    /// Tokens handed to the engine per call [default: 2048]; each call is evaluated in
    /// passes of min(batch, ubatch) tokens, as llama.cpp does.
    #[arg(short = 'b', long = "batch-size", value_name = "N", allow_hyphen_values = true, value_parser = pos_list)]
    n_batch: Vec<Ints>,
    /// Largest number of tokens evaluated in one pass [default: 512].
    #[arg(long = "ubatch-size", value_name = "N", allow_hyphen_values = true, value_parser = pos_list)]
    n_ubatch: Vec<Ints>,
    /// K cache types: f16, f32, q8_0 [default: f16].
    #[arg(long = "cache-type-k", value_name = "TYPE", value_delimiter = ',', value_parser = kv_type)]
    type_k: Vec<String>,
    /// V cache types: f16, f32, q8_0 [default: f16].
    #[arg(long = "cache-type-v", value_name = "TYPE", value_delimiter = ',', value_parser = kv_type)]
    type_v: Vec<String>,
    /// Threads [default: all cores]; each count gets its own worker pool.
    #[arg(short = 't', long = "threads", value_name = "N", allow_hyphen_values = true, value_parser = pos_list)]
    n_threads: Vec<Ints>,
    /// CPU masks (hex) [default: 0x0]; accepted and reported, threads are not pinned.
    #[arg(short = 'C', long = "cpu-mask", value_name = "HEX", value_delimiter = ',', value_parser = cpu_mask)]
    cpu_mask: Vec<String>,
    /// Strict CPU placement, 0|1 [default: 0]; accepted and reported, threads are not pinned.
    #[arg(long = "cpu-strict", value_name = "0|1", value_delimiter = ',', value_parser = bool01)]
    cpu_strict: Vec<String>,
    /// Polling level 0...100 [default: 50]; accepted and reported, workers always spin
    /// briefly, then park.
    #[arg(long = "poll", value_name = "N", allow_hyphen_values = true, value_parser = nonneg_list)]
    poll: Vec<Ints>,
    /// Layers on the GPU [default: -1]; 0 and -1 run on the CPU; N > 0 asks for CUDA (not
    /// implemented yet: stops with an error saying what is missing).
    #[arg(long = "n-gpu-layers", value_name = "N", allow_hyphen_values = true, value_parser = int_list)]
    n_gpu_layers: Vec<Ints>,
    /// MoE layers whose experts stay on the CPU [default: 0]; accepted and reported, all
    /// run on the CPU.
    #[arg(long = "n-cpu-moe", value_name = "N", allow_hyphen_values = true, value_parser = nonneg_list)]
    n_cpu_moe: Vec<Ints>,
    /// Split mode: none, layer, row, tensor [default: layer]; accepted and reported (no GPU).
    #[arg(long = "split-mode", value_name = "MODE", value_delimiter = ',', value_parser = ["none", "layer", "row", "tensor"])]
    split_mode: Vec<String>,
    /// Main GPU [default: 0]; accepted and reported (no GPU).
    #[arg(long = "main-gpu", value_name = "I", allow_hyphen_values = true, value_parser = nonneg_list)]
    main_gpu: Vec<Ints>,
    /// KV cache off the GPU, 0|1 [default: 0]; accepted and reported, the cache is always in
    /// host memory.
    #[arg(long = "no-kv-offload", value_name = "0|1", value_delimiter = ',', value_parser = bool01)]
    no_kv_offload: Vec<String>,
    /// Flash attention: on, off, auto (1, 0, -1) [default: auto]; reported as asked: the
    /// engine always computes attention as llama.cpp's CPU flash attention does, so "off"
    /// rows measure the same kernels.
    #[arg(long = "flash-attn", value_name = "on|off|auto", value_delimiter = ',', allow_hyphen_values = true, value_parser = flash_attn)]
    flash_attn: Vec<String>,
    /// Devices: auto, none, or cuda / cuda:N (CUDA runs are not implemented yet: a CUDA
    /// device stops with an error saying what is missing) [default: auto].
    #[arg(long = "device", value_name = "DEV", value_delimiter = ',', value_parser = device)]
    devices: Vec<String>,
    /// Load mode: auto, none, mmap, mlock, mmap+mlock, dio [default: auto]; accepted and
    /// reported, the model is always memory-mapped.
    #[arg(long = "load-mode", value_name = "MODE", value_delimiter = ',', value_parser = ["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"])]
    load_mode: Vec<String>,
    /// Lazy mode: on, auto, off [default: auto]; accepted and reported (no effect here).
    #[arg(long = "lazy-mode", value_name = "MODE", value_delimiter = ',', value_parser = ["on", "auto", "off"])]
    lazy_mode: Vec<String>,
    /// Embeddings output, 0|1 [default: 0]; accepted and reported (no effect here).
    #[arg(long = "embeddings", value_name = "0|1", value_delimiter = ',', value_parser = bool01)]
    embeddings: Vec<String>,
    /// Tensor split across GPUs `ts0/ts1/..` [default: 0]; accepted and reported (no GPU).
    #[arg(long = "tensor-split", value_name = "TS", value_delimiter = ',', value_parser = tensor_split)]
    tensor_split: Vec<String>,
    /// Tensor buffer overrides `PATTERN=BUFT;...` (buffer type CPU) [default: none];
    /// accepted and reported, every tensor is in host memory already.
    #[arg(long = "override-tensor", value_name = "PATTERN=BUFT", value_delimiter = ',', value_parser = override_tensor)]
    overrides: Vec<String>,
    /// No op offload, 0|1 [default: 0]; accepted and reported (no GPU).
    #[arg(long = "no-op-offload", value_name = "0|1", value_delimiter = ',', value_parser = bool01)]
    no_op_offload: Vec<String>,
    /// No host buffers, 0|1 [default: 0]; accepted and reported (no GPU).
    #[arg(long = "no-host", value_name = "0|1", value_delimiter = ',', value_parser = bool01)]
    no_host: Vec<String>,
    /// Repacked weight layouts, 0|1 [default: 1]; accepted and reported, the engine reads
    /// the weights in place.
    #[arg(long = "repack", value_name = "0|1", value_delimiter = ',', value_parser = bool01)]
    repack: Vec<String>,
    /// Fit the model to device memory with this margin (MiB) [default: 0]; accepted and
    /// reported (no GPU).
    #[arg(long = "fit-target", value_name = "MiB", value_delimiter = ',', value_parser = clap::value_parser!(u64))]
    fit_target: Vec<u64>,
    /// Minimum context for --fit-target [default: 0]; accepted and reported (no GPU).
    #[arg(long = "fit-ctx", value_name = "N", value_delimiter = ',', value_parser = clap::value_parser!(u32))]
    fit_ctx: Vec<u32>,
    /// NUMA mode: distribute, isolate, numactl; accepted, no effect here.
    #[arg(long = "numa", value_name = "MODE", value_parser = ["distribute", "isolate", "numactl"], overrides_with = "numa")]
    numa: Option<String>,
    /// Times each test is repeated.
    #[arg(short = 'r', long = "repetitions", value_name = "N", default_value_t = 5, overrides_with = "reps")]
    reps: usize,
    /// Process/thread priority -1..3; accepted, no effect here.
    #[arg(long = "prio", value_name = "N", allow_hyphen_values = true, value_parser = clap::value_parser!(i32).range(-1..=3), overrides_with = "prio")]
    prio: Option<i32>,
    /// Seconds to wait before each test.
    #[arg(long = "delay", value_name = "SECONDS", default_value_t = 0, overrides_with = "delay")]
    delay: u64,
    /// Output format printed to stdout: csv, json, jsonl, md, sql, none (llama-bench's).
    #[arg(short = 'o', long = "output", value_name = "FORMAT", default_value = "md", value_parser = FORMATS, overrides_with = "output")]
    output: String,
    /// Output format printed to stderr [default: none].
    #[arg(long = "output-err", value_name = "FORMAT", value_parser = FORMATS, overrides_with = "output_err")]
    output_err: Option<String>,
    /// List the available devices and exit (none besides the CPU).
    #[arg(long = "list-devices")]
    list_devices: bool,
    /// Verbose: the model, each test's context and timings on stderr.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    /// Print test progress indicators on stderr.
    #[arg(long = "progress")]
    progress: bool,
    /// Skip the warm-up run before each test.
    #[arg(long = "no-warmup")]
    no_warmup: bool,
    /// Print one JSON object instead (this tool's summary form).
    #[arg(long)]
    json: bool,
    /// Print the kernel path of each weight type and the bytes of weights one decode
    /// token reads (stderr; always part of `--json`).
    #[arg(long)]
    weights: bool,
    /// Measure the DRAM read bound (a stream-read loop over 4 × the largest CPU cache, at
    /// least 512 MiB) at each thread count, and the same loop over the weights' own pages
    /// after each generation test, and report the test's share of each (stderr; `--json`:
    /// per result); then as many decode tokens again, each followed by a read pass over the
    /// weights' pages it read: the median of the tokens' shares of their passes
    /// (`weights_bound_fraction_paired`).
    #[arg(long = "dram-bound")]
    dram_bound: bool,
}

const FORMATS: [&str; 6] = ["csv", "json", "jsonl", "md", "sql", "none"];

/// Most values one list may expand to.
const MAX_LIST: usize = 1 << 16;
/// Most tests one command line may ask for.
const MAX_TESTS: usize = 100_000;

/// A parsed number list (one flag occurrence).
#[derive(Debug, Clone)]
pub struct Ints(Vec<i64>);

/// llama-bench's `parse_int_range`: comma separated `first[-last[(+|*)step]]` items
/// (`4-1` is empty, a step that does not grow is an error).
fn int_range(s: &str, allow_negative: bool) -> std::result::Result<Vec<i64>, String> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    let num = |i: &mut usize, neg: bool| -> Option<i64> {
        let start = *i;
        if neg && b.get(*i) == Some(&b'-') {
            *i += 1;
        }
        let digits = *i;
        while b.get(*i).is_some_and(|c| c.is_ascii_digit()) {
            *i += 1;
        }
        if *i == digits {
            return None;
        }
        s[start..*i].parse::<i32>().ok().map(i64::from)
    };
    let bad = || format!("{s:?}: invalid range format (expected first[-last[+step|*mult]], comma separated)");
    while i < b.len() {
        let first = num(&mut i, allow_negative).ok_or_else(bad)?;
        let (mut last, mut op, mut step) = (first, b'+', 1);
        if b.get(i) == Some(&b'-') {
            i += 1;
            last = num(&mut i, false).ok_or_else(bad)?;
            if let Some(&c @ (b'+' | b'*')) = b.get(i) {
                i += 1;
                op = c;
                step = num(&mut i, false).ok_or_else(bad)?;
            }
        }
        match b.get(i) {
            None => {}
            Some(b',') => i += 1,
            Some(_) => return Err(bad()),
        }
        let mut v = first;
        while v <= last {
            out.push(v);
            if out.len() > MAX_LIST {
                return Err(format!("{s:?}: more than {MAX_LIST} values"));
            }
            let next = if op == b'+' { v + step } else { v * step };
            if next <= v {
                return Err(format!("{s:?}: invalid range (the step must make it grow)"));
            }
            v = next;
        }
    }
    Ok(out)
}

fn nonneg_list(s: &str) -> std::result::Result<Ints, String> {
    int_range(s, false).map(Ints)
}

fn int_list(s: &str) -> std::result::Result<Ints, String> {
    int_range(s, true).map(Ints)
}

fn pos_list(s: &str) -> std::result::Result<Ints, String> {
    let v = int_range(s, false)?;
    if v.contains(&0) {
        return Err(format!("{s:?}: must be at least 1"));
    }
    Ok(Ints(v))
}

/// `-pg PP,TG`.
fn parse_pg(s: &str) -> std::result::Result<(i64, i64), String> {
    let (a, b) = s.split_once(',').ok_or_else(|| format!("{s:?}: expected PP,TG (e.g. 512,128)"))?;
    let n = |x: &str| x.trim().parse::<u32>().map(i64::from).map_err(|e| format!("{s:?}: {e}"));
    Ok((n(a)?, n(b)?))
}

/// A KV cache type this engine holds.
fn kv_type(s: &str) -> std::result::Result<String, String> {
    match s {
        "f16" | "f32" | "q8_0" => Ok(s.to_string()),
        "bf16" | "q4_0" | "q4_1" | "q5_0" | "q5_1" | "iq4_nl" => {
            Err(format!("the engine's KV cache holds f16, f32 or q8_0, not {s}"))
        }
        _ => Err(format!("unknown cache type {s:?} (f16, f32, q8_0)")),
    }
}

/// llama-bench's `<0|1>` values, as it prints them.
fn bool01(s: &str) -> std::result::Result<String, String> {
    match s {
        "0" | "false" => Ok("0".into()),
        "1" | "true" => Ok("1".into()),
        _ => Err(format!("{s:?}: expected 0 or 1")),
    }
}

/// `-fa`: llama.cpp's truthy/falsey/auto spellings, as the `flash_attn` field prints them.
fn flash_attn(s: &str) -> std::result::Result<String, String> {
    match s {
        "on" | "enabled" | "true" | "1" => Ok("1".into()),
        "off" | "disabled" | "false" | "0" => Ok("0".into()),
        "auto" | "-1" => Ok("-1".into()),
        _ => Err(format!("{s:?}: expected on, off or auto")),
    }
}

/// `-dev`: llama-bench's `parse_devices_arg`: auto, none, or a CUDA device (`cuda`,
/// `cuda:N`, `CUDA0`; see [`cuda_request`]).
fn device(s: &str) -> std::result::Result<String, String> {
    match s.trim() {
        "" => Err("no devices specified".into()),
        "auto" => Ok("auto".into()),
        "none" => Ok("none".into()),
        d if gguf_cuda::parse_device(d).is_ok_and(|d| d != gguf_cuda::DeviceSpec::Cpu) => Ok(d.into()),
        d => Err(format!("invalid device: {d} (auto, none, or cuda / cuda:N)")),
    }
}

/// The CUDA device a run asks for (`crate::device`'s rules over the lists): a `cuda`
/// device, or `-ngl N > 0` without `-dev none`.
fn cuda_request(a: &BenchOpts) -> Option<(usize, String)> {
    for d in &a.devices {
        if let Ok(gguf_cuda::DeviceSpec::Cuda(i)) = gguf_cuda::parse_device(d) {
            return Some((i, format!("--device {d}")));
        }
    }
    let none = a.devices.iter().any(|d| d == "none");
    ints(&a.n_gpu_layers).into_iter().find(|&n| n > 0 && !none).map(|n| (0, format!("-ngl {n}")))
}

/// `-C`: a hex mask (llama.cpp's `parse_cpu_mask`), kept as written.
fn cpu_mask(s: &str) -> std::result::Result<String, String> {
    let h = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    if h.is_empty() || !h.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("{s:?}: expected a hex mask (e.g. 0xff)"));
    }
    Ok(s.to_string())
}

/// llama's device count (`LLAMA_MAX_DEVICES`): the length of a tensor split.
const MAX_DEVICES: usize = 16;

/// `-ts`: proportions split on `/` or `;`, printed as llama-bench prints them ("%.2f" up to
/// the last non-zero one, joined by `/`).
fn tensor_split(s: &str) -> std::result::Result<String, String> {
    let mut parts: Vec<&str> = s.split(['/', ';']).collect();
    if parts.last() == Some(&"") {
        parts.pop();
    }
    let parts: Vec<&str> =
        parts.iter().enumerate().filter(|(i, p)| *i == 0 || !p.is_empty()).map(|(_, p)| *p).collect();
    if parts.len() > MAX_DEVICES {
        return Err(format!("{s:?}: more than {MAX_DEVICES} devices"));
    }
    let mut v = [0f32; MAX_DEVICES];
    for (i, p) in parts.iter().enumerate() {
        v[i] = p.trim().parse::<f32>().map_err(|_| format!("{s:?}: {p:?} is not a number"))?;
    }
    let last = v.iter().rposition(|&x| x > 0.0).unwrap_or(0);
    Ok(v[..=last].iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join("/"))
}

/// `-ot`: one group of `PATTERN=BUFT` overrides separated by `;`, printed as llama-bench
/// prints it ("none" for an empty group).
fn override_tensor(s: &str) -> std::result::Result<String, String> {
    let mut out = Vec::new();
    for o in s.split(';') {
        if o.is_empty() {
            break;
        }
        let (pat, buft) = o.split_once('=').ok_or_else(|| format!("{o:?}: expected PATTERN=BUFFER_TYPE"))?;
        if buft != "CPU" {
            return Err(format!("unrecognized buffer type {buft:?} (available: CPU)"));
        }
        out.push(format!("{pat}={buft}"));
    }
    Ok(if out.is_empty() { "none".into() } else { out.join(";") })
}

/// One test parameter: its llama-bench field name, the values asked for, its default.
struct Axis {
    field: &'static str,
    values: Vec<String>,
    default: Vec<String>,
}

impl Axis {
    fn new(field: &'static str, given: Vec<String>, default: &[&str]) -> Axis {
        let default: Vec<String> = default.iter().map(|s| s.to_string()).collect();
        let values = if given.is_empty() { default.clone() } else { given };
        Axis { field, values, default }
    }

    /// llama-bench's markdown rule: a column when the list has several values or is not the
    /// default one.
    fn varies(&self) -> bool {
        self.values.len() > 1 || self.values != self.default
    }
}

/// The long flag of a field (llama-bench's spelling).
fn flag_of(field: &str) -> &str {
    match field {
        "fit_target" => "fit-target",
        "fit_min_ctx" => "fit-ctx",
        "n_gpu_layers" => "n-gpu-layers",
        "n_cpu_moe" => "n-cpu-moe",
        "split_mode" => "split-mode",
        "load_mode" => "load-mode",
        "lazy_mode" => "lazy-mode",
        "main_gpu" => "main-gpu",
        "devices" => "device",
        "tensor_split" => "tensor-split",
        "tensor_buft_overrides" => "override-tensor",
        "no_host" => "no-host",
        "no_op_offload" => "no-op-offload",
        "no_kv_offload" => "no-kv-offload",
        "cpu_mask" => "cpu-mask",
        "cpu_strict" => "cpu-strict",
        f => f,
    }
}

fn ints(v: &[Ints]) -> Vec<i64> {
    v.iter().flat_map(|x| x.0.iter().copied()).collect()
}

fn strs(v: &[i64]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// The parameters of a run: every axis in llama-bench's loop order (outermost first).
struct Params {
    models: Vec<Option<String>>,
    axes: Vec<Axis>,
    n_prompt: Vec<i64>,
    n_gen: Vec<i64>,
    pg: Vec<(i64, i64)>,
}

/// One test: a model, one value of every axis, the tokens to time.
struct Inst {
    model: usize,
    vals: Vec<String>,
    n_prompt: i64,
    n_gen: i64,
}

impl Params {
    fn new(a: &BenchOpts) -> Result<Params> {
        let default_threads = threads(None)?;
        let mut nt = Vec::new();
        for n in ints(&a.n_threads) {
            nt.push(threads(Some(n as usize))? as i64);
        }
        let axes = vec![
            Axis::new("fit_target", a.fit_target.iter().map(|x| x.to_string()).collect(), &["0"]),
            Axis::new("fit_min_ctx", a.fit_ctx.iter().map(|x| x.to_string()).collect(), &["0"]),
            Axis::new("n_gpu_layers", strs(&ints(&a.n_gpu_layers)), &["-1"]),
            Axis::new("n_cpu_moe", strs(&ints(&a.n_cpu_moe)), &["0"]),
            Axis::new("split_mode", a.split_mode.clone(), &["layer"]),
            Axis::new("load_mode", a.load_mode.clone(), &["auto"]),
            Axis::new("lazy_mode", a.lazy_mode.clone(), &["auto"]),
            Axis::new("main_gpu", strs(&ints(&a.main_gpu)), &["0"]),
            Axis::new("devices", a.devices.clone(), &["auto"]),
            Axis::new("tensor_split", a.tensor_split.clone(), &["0.00"]),
            Axis::new("tensor_buft_overrides", a.overrides.clone(), &["none"]),
            Axis::new("no_host", a.no_host.clone(), &["0"]),
            Axis::new("repack", a.repack.clone(), &["1"]),
            Axis::new("embeddings", a.embeddings.clone(), &["0"]),
            Axis::new("no_op_offload", a.no_op_offload.clone(), &["0"]),
            Axis::new("n_batch", strs(&ints(&a.n_batch)), &["2048"]),
            Axis::new("n_ubatch", strs(&ints(&a.n_ubatch)), &["512"]),
            Axis::new("type_k", a.type_k.clone(), &["f16"]),
            Axis::new("type_v", a.type_v.clone(), &["f16"]),
            Axis::new("no_kv_offload", a.no_kv_offload.clone(), &["0"]),
            Axis::new("flash_attn", a.flash_attn.clone(), &["-1"]),
            Axis::new("n_threads", strs(&nt), &[&default_threads.to_string()]),
            Axis::new("cpu_mask", a.cpu_mask.clone(), &["0x0"]),
            Axis::new("cpu_strict", a.cpu_strict.clone(), &["0"]),
            Axis::new("n_depth", strs(&ints(&a.n_depth)), &["0"]),
            Axis::new("poll", strs(&ints(&a.poll)), &["50"]),
        ];
        let or = |v: Vec<i64>, d: i64| if v.is_empty() { vec![d] } else { v };
        let models = if a.model.is_empty() { vec![None] } else { a.model.iter().cloned().map(Some).collect() };
        Ok(Params {
            models,
            axes,
            n_prompt: or(ints(&a.n_prompt), 512),
            n_gen: or(ints(&a.n_gen), 128),
            pg: a.pg.clone(),
        })
    }

    fn axis(&self, field: &str) -> &Axis {
        self.axes.iter().find(|a| a.field == field).expect("a known axis")
    }

    /// What a parameter with no effect here says on stderr, once.
    fn notes(&self, a: &BenchOpts) -> Vec<String> {
        let why = |f: &str| -> Option<&str> {
            Some(match f {
                "n_gpu_layers" => "every layer runs on the CPU",
                "n_cpu_moe" => "every expert runs on the CPU",
                "split_mode" | "main_gpu" | "devices" | "tensor_split" | "no_op_offload" | "no_host" | "fit_target"
                | "fit_min_ctx" => "there is no GPU here",
                "tensor_buft_overrides" => "every tensor is in host memory already",
                "no_kv_offload" => "the KV cache is always in host memory",
                "load_mode" => "the file is memory-mapped (GGUF_MMAP=0: read into memory)",
                "lazy_mode" | "embeddings" => "this engine has no such mode",
                "repack" => "the engine reads the weights in place (no repacking)",
                "cpu_mask" | "cpu_strict" | "poll" => "worker threads are not pinned and poll the same way",
                _ => return None,
            })
        };
        let mut out: Vec<String> = self
            .axes
            .iter()
            .filter(|ax| ax.values != ax.default)
            .filter_map(|ax| {
                why(ax.field).map(|w| {
                    format!(
                        "--{} {}: no effect, {w}; rows report the value asked for",
                        flag_of(ax.field),
                        ax.values.join(",")
                    )
                })
            })
            .collect();
        if self.axis("flash_attn").values.iter().any(|v| v == "0") {
            out.push(
                "--flash-attn 0: the engine always computes attention as llama.cpp's CPU flash attention does; \
                 rows report the value asked for"
                    .into(),
            );
        }
        if let Some(n) = &a.numa {
            out.push(format!("--numa {n}: no effect here"));
        }
        if let Some(p) = a.prio {
            out.push(format!("--prio {p}: no effect here"));
        }
        out
    }

    /// The tests, in llama-bench's order: models, then every axis (outermost first), then
    /// every pp, every tg and every pp+tg (those of 0 tokens skipped).
    fn instances(&self) -> Result<Vec<Inst>> {
        let inner: Vec<(i64, i64)> = self
            .n_prompt
            .iter()
            .filter(|&&n| n > 0)
            .map(|&n| (n, 0))
            .chain(self.n_gen.iter().filter(|&&n| n > 0).map(|&n| (0, n)))
            .chain(self.pg.iter().copied().filter(|&(p, g)| p != 0 || g != 0))
            .collect();
        let total = self
            .axes
            .iter()
            .map(|a| a.values.len())
            .chain([self.models.len(), inner.len()])
            .try_fold(1usize, |acc, n| acc.checked_mul(n))
            .filter(|&n| n <= MAX_TESTS);
        if total.is_none() {
            bail!("the parameter lists ask for more than {MAX_TESTS} tests");
        }
        let mut out = Vec::new();
        for model in 0..self.models.len() {
            let mut idx = vec![0usize; self.axes.len()];
            loop {
                let vals: Vec<String> = self.axes.iter().zip(&idx).map(|(a, &i)| a.values[i].clone()).collect();
                for &(n_prompt, n_gen) in &inner {
                    out.push(Inst { model, vals: vals.clone(), n_prompt, n_gen });
                }
                // the innermost axis turns fastest
                let mut k = self.axes.len();
                loop {
                    if k == 0 {
                        break;
                    }
                    k -= 1;
                    idx[k] += 1;
                    if idx[k] < self.axes[k].values.len() {
                        break;
                    }
                    idx[k] = 0;
                    if k == 0 {
                        k = usize::MAX;
                        break;
                    }
                }
                if k == usize::MAX || self.axes.is_empty() {
                    break;
                }
            }
        }
        Ok(out)
    }
}

impl Inst {
    fn get<'a>(&'a self, p: &Params, field: &str) -> &'a str {
        let i = p.axes.iter().position(|a| a.field == field).expect("a known axis");
        &self.vals[i]
    }

    fn int(&self, p: &Params, field: &str) -> i64 {
        self.get(p, field).parse().unwrap_or(0)
    }
}

/// llama.cpp's `llm_type_name` for the built-in architectures (`load_arch_hparams`):
/// "256M", "0.5B", "?B" when llama.cpp does not name the shape.
fn type_name(l: &Loaded) -> &'static str {
    let md = l.file.metadata();
    let arch = md.get_str("general.architecture").unwrap_or("");
    let key = |k: &str| md.get_u64(&format!("{arch}.{k}"));
    let n_layer = key("block_count").unwrap_or(0);
    let n_embd = key("embedding_length").unwrap_or(0);
    let n_head = key("attention.head_count");
    let n_head_kv = key("attention.head_count_kv").or(n_head);
    let n_vocab = key("vocab_size").unwrap_or(l.model.n_vocab() as u64);
    match arch {
        "llama" if key("expert_count") == Some(8) => match n_layer {
            32 => "8x7B",
            56 => "8x22B",
            _ => "?B",
        },
        "llama" => match n_layer {
            16 | 22 => "1B",
            26 | 28 => "3B",
            30 => "256M",
            32 if n_vocab == 49152 => "3B",
            32 if n_vocab < 40000 => "7B",
            32 => "8B",
            36 => "8B",
            40 => "13B",
            48 => "34B",
            60 => "30B",
            80 if n_head.is_some() && n_head == n_head_kv => "65B",
            80 => "70B",
            _ => "?B",
        },
        "qwen2" => match n_layer {
            24 if n_embd == 1024 => "0.5B",
            24 => "1B",
            28 if n_embd == 1536 => "1.5B",
            28 | 32 => "7B",
            36 => "3B",
            40 if n_head == Some(20) => "4B",
            40 => "13B",
            48 => "14B",
            64 => "32B",
            80 => "70B",
            _ => "?B",
        },
        "qwen3" => match n_layer {
            28 if n_embd == 1024 => "0.6B",
            28 => "1.7B",
            36 if n_embd == 2560 => "4B",
            36 => "8B",
            40 => "14B",
            64 => "32B",
            _ => "?B",
        },
        "qwen3moe" => match n_layer {
            48 => "30B.A3B",
            94 => "235B.A22B",
            _ => "?B",
        },
        "gemma3" => match n_layer {
            18 => "270M",
            26 => "1B",
            32 => "8B",
            34 => "4B",
            48 => "12B",
            62 => "27B",
            _ => "?B",
        },
        _ => "?B",
    }
}

/// llama.cpp's `llama_ftype_name` of the file type: `general.file_type`, else guessed from
/// the most common tensor type (then prefixed "(guessed) "), as llama_model_loader does.
fn ftype_name(l: &Loaded) -> String {
    let (ftype, guessed) = match l.file.metadata().get_u64("general.file_type") {
        Some(f) => (f, false),
        None => {
            // llama_model_loader walks its weights by (layer of "blk.N.", name); the first
            // type to reach the largest count wins
            let layer = |n: &str| -> i64 {
                n.strip_prefix("blk.")
                    .map(|r| r.bytes().take_while(|c| c.is_ascii_digit()).count())
                    .filter(|&d| d > 0)
                    .and_then(|d| n[4..4 + d].parse().ok())
                    .unwrap_or(-1)
            };
            let mut order: Vec<(i64, &str, u32)> =
                l.file.tensors().iter().map(|t| (layer(&t.name), t.name.as_str(), t.type_id)).collect();
            order.sort();
            let mut best = (0usize, 0u32);
            let mut seen = HashMap::<u32, usize>::new();
            for (_, _, ty) in order {
                let c = seen.entry(ty).or_default();
                *c += 1;
                if *c > best.0 {
                    best = (*c, ty);
                }
            }
            let f = u64::from(gguf_quantize::ftype_of_type(best.1));
            (f, true)
        }
    };
    let name = match ftype {
        0 => "all F32",
        1 => "F16",
        32 => "BF16",
        40 => "Q1_0",
        41 => "Q2_0",
        2 => "Q4_0",
        3 => "Q4_1",
        8 => "Q5_0",
        9 => "Q5_1",
        7 => "Q8_0",
        38 => "MXFP4 MoE",
        39 => "NVFP4",
        10 => "Q2_K - Medium",
        21 => "Q2_K - Small",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        36 => "TQ1_0 - 1.69 bpw ternary",
        37 => "TQ2_0 - 2.06 bpw ternary",
        19 => "IQ2_XXS - 2.0625 bpw",
        20 => "IQ2_XS - 2.3125 bpw",
        28 => "IQ2_S - 2.5 bpw",
        29 => "IQ2_M - 2.7 bpw",
        22 => "IQ3_XS - 3.3 bpw",
        23 => "IQ3_XXS - 3.0625 bpw",
        24 => "IQ1_S - 1.5625 bpw",
        31 => "IQ1_M - 1.75 bpw",
        25 => "IQ4_NL - 4.5 bpw",
        30 => "IQ4_XS - 4.25 bpw",
        26 => "IQ3_S - 3.4375 bpw",
        27 => "IQ3_S mix - 3.66 bpw",
        _ => "unknown, may not work",
    };
    if guessed {
        format!("(guessed) {name}")
    } else {
        name.to_string()
    }
}

/// What llama-bench reports of a model.
struct ModelInfo {
    filename: String,
    /// `llama_model_desc`: "llama 256M Q4_1".
    desc: String,
    /// Bytes of every tensor (`llama_model_size`).
    size: u64,
    /// Elements of every tensor (`llama_model_n_params`).
    n_params: u64,
}

fn model_info(l: &Loaded) -> ModelInfo {
    let arch = l.file.metadata().get_str("general.architecture").unwrap_or("unknown");
    ModelInfo {
        filename: l.file.first().path().display().to_string(),
        desc: format!("{arch} {} {}", type_name(l), ftype_name(l)),
        size: l.file.tensors().iter().fold(0u64, |a, t| a.saturating_add(t.size.unwrap_or(0))),
        n_params: l.file.tensors().iter().fold(0u64, |a, t| a.saturating_add(t.n_elements)),
    }
}

/// ggml's CPU device description: the first "model name" of /proc/cpuinfo, else "CPU".
fn cpu_info() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "CPU".into())
}

/// `%FT%TZ` of now (UTC).
fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Howard Hinnant's civil_from_days
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z.rem_euclid(146097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// C's `%g` (six significant digits), as `std::ostream` prints a double.
fn fmt_g(x: f64) -> String {
    if x == 0.0 {
        return if x.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf".into() } else { "inf".into() };
    }
    let strip = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    let e = format!("{x:.5e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        format!("{}e{}{:02}", strip(mant.to_string()), if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        strip(format!("{x:.*}", (5 - exp) as usize))
    }
}

/// llama-bench's `test::get_fields`: every field of a row, in its order.
const FIELDS: [&str; 42] = [
    "build_commit",
    "build_number",
    "cpu_info",
    "gpu_info",
    "backends",
    "model_filename",
    "model_type",
    "model_size",
    "model_n_params",
    "n_batch",
    "n_ubatch",
    "n_threads",
    "cpu_mask",
    "cpu_strict",
    "poll",
    "type_k",
    "type_v",
    "n_gpu_layers",
    "n_cpu_moe",
    "split_mode",
    "main_gpu",
    "no_kv_offload",
    "flash_attn",
    "devices",
    "tensor_split",
    "tensor_buft_overrides",
    "load_mode",
    "lazy_mode",
    "embeddings",
    "no_op_offload",
    "no_host",
    "repack",
    "fit_target",
    "fit_min_ctx",
    "n_prompt",
    "n_gen",
    "n_depth",
    "test_time",
    "avg_ns",
    "stddev_ns",
    "avg_ts",
    "stddev_ts",
];

#[derive(PartialEq)]
enum FieldType {
    Str,
    Bool,
    Int,
    Float,
}

/// llama-bench's `test::get_field_type`.
fn field_type(f: &str) -> FieldType {
    match f {
        "build_number" | "n_batch" | "n_ubatch" | "n_threads" | "poll" | "model_size" | "model_n_params"
        | "n_gpu_layers" | "main_gpu" | "n_prompt" | "n_gen" | "n_depth" | "avg_ns" | "stddev_ns" | "no_op_offload"
        | "n_cpu_moe" | "fit_target" | "fit_min_ctx" | "flash_attn" => FieldType::Int,
        "no_kv_offload" | "cpu_strict" | "embeddings" | "no_host" | "repack" => FieldType::Bool,
        "avg_ts" | "stddev_ts" => FieldType::Float,
        _ => FieldType::Str,
    }
}

/// This build, where llama-bench prints its llama.cpp commit and build number.
const BUILD_COMMIT: &str = concat!("gguf-", env!("CARGO_PKG_VERSION"));
const BUILD_NUMBER: i64 = 0;

/// One finished test.
struct Row {
    /// Every field of [`FIELDS`], as llama-bench's `get_values` writes it.
    values: Vec<String>,
    samples_ns: Vec<u64>,
    samples_ts: Vec<f64>,
    model_desc: String,
    model_size: u64,
    n_params: u64,
    n_prompt: i64,
    n_gen: i64,
    n_depth: i64,
    avg_ts: f64,
    stddev_ts: f64,
}

impl Row {
    fn get(&self, field: &str) -> &str {
        FIELDS.iter().position(|f| *f == field).map_or("", |i| &self.values[i])
    }

    /// The md `test` column: "pp512", "tg128", "pp512+tg128", with " @ dN" at a depth.
    fn test_name(&self) -> String {
        let mut s = if self.n_prompt > 0 && self.n_gen == 0 {
            format!("pp{}", self.n_prompt)
        } else if self.n_gen > 0 && self.n_prompt == 0 {
            format!("tg{}", self.n_gen)
        } else {
            format!("pp{}+tg{}", self.n_prompt, self.n_gen)
        };
        if self.n_depth > 0 {
            s += &format!(" @ d{}", self.n_depth);
        }
        s
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// llama-bench's `stdev`: the sample standard deviation (0 for fewer than two).
fn stdev(v: &[f64]) -> f64 {
    if v.len() <= 1 {
        return 0.0;
    }
    let (n, m) = (v.len() as f64, mean(v));
    let sq: f64 = v.iter().map(|x| x * x).sum();
    (sq / (n - 1.0) - m * m * n / (n - 1.0)).max(0.0).sqrt()
}

fn make_row(p: &Params, inst: &Inst, m: &ModelInfo, cpu: &str, test_time: String, samples_ns: Vec<u64>) -> Row {
    let n_tokens = (inst.n_prompt + inst.n_gen) as f64;
    let samples_ts: Vec<f64> = samples_ns.iter().map(|&t| 1e9 * n_tokens / t as f64).collect();
    let avg_ns = if samples_ns.is_empty() { 0 } else { samples_ns.iter().sum::<u64>() / samples_ns.len() as u64 };
    let stddev_ns = stdev(&samples_ns.iter().map(|&x| x as f64).collect::<Vec<_>>()) as u64;
    let (avg_ts, stddev_ts) = (mean(&samples_ts), stdev(&samples_ts));
    let n_depth = inst.int(p, "n_depth");
    let values = FIELDS
        .iter()
        .map(|f| match *f {
            "build_commit" => BUILD_COMMIT.to_string(),
            "build_number" => BUILD_NUMBER.to_string(),
            "cpu_info" => cpu.to_string(),
            "gpu_info" => String::new(),
            "backends" => "CPU".into(),
            "model_filename" => m.filename.clone(),
            "model_type" => m.desc.clone(),
            "model_size" => m.size.to_string(),
            "model_n_params" => m.n_params.to_string(),
            "n_prompt" => inst.n_prompt.to_string(),
            "n_gen" => inst.n_gen.to_string(),
            "test_time" => test_time.clone(),
            "avg_ns" => avg_ns.to_string(),
            "stddev_ns" => stddev_ns.to_string(),
            "avg_ts" => format!("{avg_ts:.6}"),
            "stddev_ts" => format!("{stddev_ts:.6}"),
            axis => inst.get(p, axis).to_string(),
        })
        .collect();
    Row {
        values,
        samples_ns,
        samples_ts,
        model_desc: m.desc.clone(),
        model_size: m.size,
        n_params: m.n_params,
        n_prompt: inst.n_prompt,
        n_gen: inst.n_gen,
        n_depth,
        avg_ts,
        stddev_ts,
    }
}

fn escape_json(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o += "\\\"",
            '\\' => o += "\\\\",
            c if (c as u32) <= 0x1f => o += &format!("\\u{:04x}", c as u32),
            c => o.push(c),
        }
    }
    o
}

/// llama-bench's `format_json_value`.
fn json_value(field: &str, v: &str) -> String {
    match field_type(field) {
        FieldType::Str => format!("\"{}\"", escape_json(v)),
        FieldType::Bool => (if v == "0" { "false" } else { "true" }).into(),
        _ => v.to_string(),
    }
}

fn join<T: ToString>(v: &[T], sep: &str) -> String {
    v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(sep)
}

/// One of llama-bench's printers (`-o` / `-oe`).
enum Printer {
    Csv,
    Json { first: bool },
    Jsonl,
    Md { fields: Vec<&'static str> },
    Sql,
}

/// llama-bench's markdown column widths (negative: left-aligned).
fn md_width(f: &str) -> i32 {
    match f {
        "model" => -30,
        "t/s" => 20,
        "size" | "params" => 10,
        "n_gpu_layers" => 3,
        "n_threads" | "n_batch" => 7,
        "n_ubatch" => 8,
        "type_k" | "type_v" | "split_mode" => 6,
        "load_mode" => 10,
        "flash_attn" => 3,
        "devices" => -12,
        "test" => 15,
        "no_op_offload" | "no_host" => 4,
        "repack" => 3,
        _ => {
            let w = (f.len() as i32).max(10);
            if field_type(f) == FieldType::Str {
                -w
            } else {
                w
            }
        }
    }
}

/// llama-bench's markdown column titles.
fn md_title(f: &str) -> &str {
    match f {
        "n_gpu_layers" => "ngl",
        "split_mode" => "sm",
        "n_threads" => "threads",
        "no_kv_offload" => "nkvo",
        "flash_attn" => "fa",
        "load_mode" => "lm",
        "embeddings" => "embd",
        "no_op_offload" => "nopo",
        "no_host" => "noh",
        "repack" => "rpk",
        "devices" => "dev",
        "tensor_split" => "ts",
        "tensor_buft_overrides" => "ot",
        "fit_target" => "fitt",
        "fit_min_ctx" => "fitc",
        f => f,
    }
}

fn pad(s: &str, w: i32) -> String {
    let n = w.unsigned_abs() as usize;
    if w < 0 {
        format!("{s:<n$}")
    } else {
        format!("{s:>n$}")
    }
}

impl Printer {
    fn new(format: &str, p: &Params) -> Option<Printer> {
        Some(match format {
            "csv" => Printer::Csv,
            "json" => Printer::Json { first: true },
            "jsonl" => Printer::Jsonl,
            "sql" => Printer::Sql,
            "md" => {
                // the columns llama-bench's markdown printer picks on a CPU backend
                let mut fields = vec!["model", "size", "params", "backend"];
                for f in [
                    "n_cpu_moe",
                    "n_threads",
                    "cpu_mask",
                    "cpu_strict",
                    "poll",
                    "n_batch",
                    "n_ubatch",
                    "type_k",
                    "type_v",
                    "main_gpu",
                    "split_mode",
                    "no_kv_offload",
                    "flash_attn",
                    "devices",
                    "tensor_split",
                    "tensor_buft_overrides",
                    "load_mode",
                    "lazy_mode",
                    "embeddings",
                    "no_op_offload",
                    "no_host",
                    "repack",
                    "fit_target",
                    "fit_min_ctx",
                ] {
                    if f == "n_threads" || p.axis(f).varies() {
                        fields.push(f);
                    }
                }
                fields.extend(["test", "t/s"]);
                Printer::Md { fields }
            }
            _ => return None,
        })
    }

    fn header(&self, w: &mut dyn Write) -> std::io::Result<()> {
        match self {
            Printer::Csv => writeln!(w, "{}", FIELDS.join(",")),
            Printer::Json { .. } => writeln!(w, "["),
            Printer::Jsonl => Ok(()),
            Printer::Sql => {
                writeln!(w, "CREATE TABLE IF NOT EXISTS llama_bench (")?;
                for (i, f) in FIELDS.iter().enumerate() {
                    let t = match field_type(f) {
                        FieldType::Str => "TEXT",
                        FieldType::Bool | FieldType::Int => "INTEGER",
                        FieldType::Float => "REAL",
                    };
                    writeln!(w, "  {f} {t}{}", if i + 1 < FIELDS.len() { "," } else { "" })?;
                }
                writeln!(w, ");\n")
            }
            Printer::Md { fields } => {
                let mut a = String::from("|");
                let mut b = String::from("|");
                for f in fields {
                    let wd = md_width(f);
                    a += &format!(" {} |", pad(md_title(f), wd));
                    b +=
                        &format!(" {}{} |", "-".repeat(wd.unsigned_abs() as usize - 1), if wd > 0 { ":" } else { "-" });
                }
                writeln!(w, "{a}\n{b}")
            }
        }
    }

    fn test(&mut self, w: &mut dyn Write, r: &Row) -> std::io::Result<()> {
        match self {
            Printer::Csv => {
                let cells: Vec<String> = r.values.iter().map(|v| format!("\"{}\"", v.replace('"', "\"\""))).collect();
                writeln!(w, "{}", cells.join(","))
            }
            Printer::Json { first } => {
                if !*first {
                    writeln!(w, ",")?;
                }
                *first = false;
                writeln!(w, "  {{")?;
                for (f, v) in FIELDS.iter().zip(&r.values) {
                    writeln!(w, "    \"{f}\": {},", json_value(f, v))?;
                }
                writeln!(w, "    \"samples_ns\": [ {} ],", join(&r.samples_ns, ", "))?;
                let ts: Vec<String> = r.samples_ts.iter().map(|&x| fmt_g(x)).collect();
                writeln!(w, "    \"samples_ts\": [ {} ]", ts.join(", "))?;
                write!(w, "  }}")
            }
            Printer::Jsonl => {
                let mut s = String::from("{");
                for (f, v) in FIELDS.iter().zip(&r.values) {
                    s += &format!("\"{f}\": {}, ", json_value(f, v));
                }
                let ts: Vec<String> = r.samples_ts.iter().map(|&x| fmt_g(x)).collect();
                s += &format!(
                    "\"samples_ns\": [ {} ],\"samples_ts\": [ {} ]}}",
                    join(&r.samples_ns, ", "),
                    ts.join(", ")
                );
                writeln!(w, "{s}")
            }
            Printer::Sql => {
                let vals: Vec<String> = r.values.iter().map(|v| format!("'{}'", v.replace('\'', "''"))).collect();
                writeln!(w, "INSERT INTO llama_bench ({}) VALUES ({});", FIELDS.join(", "), vals.join(", "))
            }
            Printer::Md { fields } => {
                let mut s = String::from("|");
                for f in fields.iter() {
                    let v = match *f {
                        "model" => r.model_desc.clone(),
                        "size" if r.model_size < 1 << 30 => format!("{:.2} MiB", r.model_size as f64 / 1048576.0),
                        "size" => format!("{:.2} GiB", r.model_size as f64 / 1073741824.0),
                        "params" if r.n_params < 1_000_000_000 => format!("{:.2} M", r.n_params as f64 / 1e6),
                        "params" => format!("{:.2} B", r.n_params as f64 / 1e9),
                        "backend" => "CPU".into(),
                        "test" => r.test_name(),
                        "t/s" => format!("{:.2} ± {:.2}", r.avg_ts, r.stddev_ts),
                        f => r.get(f).to_string(),
                    };
                    s += &format!(" {} |", pad(&v, md_width(f)));
                }
                writeln!(w, "{s}")
            }
        }
    }

    fn footer(&self, w: &mut dyn Write) -> std::io::Result<()> {
        match self {
            Printer::Json { .. } => writeln!(w, "\n]"),
            Printer::Md { .. } => writeln!(w, "\nbuild: {BUILD_COMMIT} ({BUILD_NUMBER})"),
            _ => Ok(()),
        }
    }
}

/// llama-bench's token source: `std::rand() % n_vocab` (any fixed pseudo-random sequence).
struct Tokens {
    state: u64,
    n_vocab: u64,
    bos: Option<u32>,
}

impl Tokens {
    fn next(&mut self) -> u32 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        ((self.state.wrapping_mul(0x2545F4914F6CDD1D) >> 32) % self.n_vocab) as u32
    }

    /// The first token of a sequence: BOS when the model adds one.
    fn first(&mut self) -> u32 {
        match self.bos {
            Some(b) => b,
            None => self.next(),
        }
    }
}

fn interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        bail!("interrupted (Ctrl-C)");
    }
    Ok(())
}

/// llama-bench's `test_prompt`: `n_prompt` tokens in calls of `n_batch` (the first BOS when
/// the model adds one).
fn test_prompt(l: &Loaded, st: &mut dyn State, toks: &mut Tokens, n_prompt: usize, n_batch: usize) -> Result<()> {
    let mut done = 0;
    let mut batch = Vec::with_capacity(n_batch.min(n_prompt));
    while done < n_prompt {
        let n = (n_prompt - done).min(n_batch);
        batch.clear();
        batch.push(if done == 0 { toks.first() } else { toks.next() });
        batch.extend((1..n).map(|_| toks.next()));
        l.model.forward(st, &batch, Logits::Last)?;
        done += n;
        interrupted()?;
    }
    Ok(())
}

/// llama-bench's `test_gen`: `n_gen` single-token steps.
fn test_gen(l: &Loaded, st: &mut dyn State, toks: &mut Tokens, n_gen: usize) -> Result<()> {
    let mut t = toks.first();
    for _ in 0..n_gen {
        l.model.forward(st, &[t], Logits::Last)?;
        interrupted()?;
        t = toks.next();
    }
    Ok(())
}

/// `n` decode tokens, each followed by a read pass over the weights' pages one token reads
/// ([`WeightPass`], at its best prefetch distance): (the token's seconds, the pass's
/// seconds) per token. Empty when the weights are too small to pass over
/// ([`WeightPass::new`]).
fn paired_decode(l: &Loaded, st: &mut dyn State, toks: &mut Tokens, pool: &Pool, n: usize) -> Result<Vec<(f64, f64)>> {
    let Some(pass) = WeightPass::new(&l.file) else { return Ok(Vec::new()) };
    let prefetch = pass.best_prefetch(pool);
    let mut t = toks.first();
    let mut pairs = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        l.model.forward(st, &[t], Logits::Last)?;
        let secs = t0.elapsed().as_secs_f64().max(1e-9);
        interrupted()?;
        pairs.push((secs, pass.secs(pool, prefetch)));
        t = toks.next();
    }
    Ok(pairs)
}

/// The median of `v` (the mean of the middle two for an even count); `None` when empty.
fn median_of(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (n > 0).then(|| (v[(n - 1) / 2] + v[n / 2]) / 2.0)
}

fn load_model(name: Option<&str>) -> Result<Loaded> {
    load(&ModelArgs {
        model: name.map(Into::into),
        threads: None,
        ctx_size: None,
        batch: 2048,
        ubatch: 512,
        cache_type_k: "f16".into(),
        cache_type_v: "f16".into(),
        no_mmap: false,
        mmap: false,
    })
}

/// Notes on stderr for the types that run the generic dequantize path; with `all`, every
/// type's kernel path and the decode bytes.
fn print_weights(w: &WeightReport, all: bool) {
    for t in w.generic() {
        eprintln!(
            "note: {} {} matrices ({:.1} MiB) run the generic dequantize path: no {} kernel on this CPU",
            t.tensors,
            t.type_name,
            t.bytes as f64 / 1048576.0,
            t.type_name
        );
    }
    if all {
        for t in &w.types {
            eprintln!(
                "weights: {:>8} {:4} matrices {:9.1} MiB  {}",
                t.type_name,
                t.tensors,
                t.bytes as f64 / 1048576.0,
                t.path
            );
        }
        eprintln!("weights: one decode token reads {:.1} MiB", w.decode_bytes as f64 / 1048576.0);
    }
}

fn weights_json(w: &WeightReport) -> serde_json::Value {
    serde_json::json!({
        "decode_bytes": w.decode_bytes,
        "types": w.types.iter().map(|t| serde_json::json!({
            "type": t.type_name, "tensors": t.tensors, "bytes": t.bytes, "kernel": t.path,
        })).collect::<Vec<_>>(),
    })
}

/// `gguf bench`: llama-bench's tests and output.
pub fn run(args: &BenchArgs) -> Result<()> {
    let args = &*args.opts;
    if args.list_devices {
        println!("Available devices:\n  (none)");
        return Ok(());
    }
    if let Some((ordinal, what)) = cuda_request(args) {
        crate::device::require_cuda(ordinal, &what)?;
    }
    let p = Params::new(args)?;
    let insts = p.instances()?;
    for n in p.notes(args) {
        eprintln!("note: {n}");
    }
    // the first model up front: a bad path is one error line, before any output
    let mut loaded: Option<(usize, Loaded, ModelInfo)> = None;
    if let Some(first) = insts.first() {
        let l = load_model(p.models[first.model].as_deref())?;
        let info = model_info(&l);
        loaded = Some((first.model, l, info));
    }
    let mut out = if args.json { None } else { Printer::new(&args.output, &p) };
    let mut err = args.output_err.as_deref().and_then(|f| Printer::new(f, &p));
    let stdout = &mut std::io::stdout();
    let stderr = &mut std::io::stderr();
    if let Some(o) = &out {
        o.header(stdout)?;
    }
    if let Some(e) = &err {
        e.header(stderr)?;
    }
    let cpu = cpu_info();
    let mut pools: HashMap<usize, Arc<Pool>> = HashMap::new();
    let mut summary = Vec::new();
    let mut load_ms = None;
    let mut report: Option<WeightReport> = None;
    let mut first_report: Option<serde_json::Value> = None;
    let mut bounds: HashMap<usize, f64> = HashMap::new();
    let count = insts.len();
    let progress = |msg: String| {
        if args.progress {
            eprintln!("gguf bench: {msg}");
        }
    };
    for (i, inst) in insts.iter().enumerate() {
        let k = i + 1;
        progress(format!("benchmark {k}/{count}: starting"));
        if loaded.as_ref().is_none_or(|(m, _, _)| *m != inst.model) {
            drop(loaded.take()); // unmap the previous model first
            let l = load_model(p.models[inst.model].as_deref())?;
            let info = model_info(&l);
            loaded = Some((inst.model, l, info));
        }
        let Some((_, l, info)) = loaded.as_ref() else { unreachable!("a model was just loaded") };
        load_ms.get_or_insert(l.load_ms);
        if i == 0 || insts[i - 1].model != inst.model {
            if args.verbose {
                eprintln!("model: {} ({}), loaded in {:.0} ms", info.filename, l.model.describe(), l.load_ms);
            }
            let w = weight_report(&l.file);
            print_weights(&w, args.weights || args.verbose);
            report = Some(w);
        }
        let decode_bytes = report.as_ref().map_or(0, |w| w.decode_bytes);
        let n_threads = inst.int(&p, "n_threads") as usize;
        let n_batch = inst.int(&p, "n_batch") as usize;
        let n_ubatch = inst.int(&p, "n_ubatch") as usize;
        let n_depth = inst.int(&p, "n_depth") as usize;
        let (n_prompt, n_gen) = (inst.n_prompt as usize, inst.n_gen as usize);
        let pool = pools.entry(n_threads).or_insert_with(|| Arc::new(Pool::new(n_threads))).clone();
        if pool.n_threads() < n_threads {
            eprintln!("warning: {n_threads} threads asked, the system started {}", pool.n_threads());
        }
        let bound = (args.dram_bound && n_gen > 0).then(|| {
            *bounds.entry(n_threads).or_insert_with(|| {
                progress(format!("benchmark {k}/{count}: DRAM read bound at {n_threads} threads"));
                let (bytes, llc) = dram_buffer_bytes();
                let b = dram_read_bound(&pool, bytes, 5);
                let why = llc.map(|c| format!(" (the largest cache {} MiB)", c >> 20)).unwrap_or_default();
                let huge = b.huge.map(|h| format!(", 2 MiB pages {:.1}", h / 1e9)).unwrap_or_default();
                eprintln!(
                    "DRAM read bound (stream-read loop, {} MiB{why}, {n_threads} threads): {:.1} GB/s (4 KiB pages {:.1}{huge})",
                    bytes >> 20,
                    b.best() / 1e9,
                    b.heap / 1e9
                );
                b.best()
            })
        });
        let opts = StateOptions {
            n_ctx: n_prompt + n_gen + n_depth,
            n_threads,
            cache_type_k: CacheType::parse(inst.get(&p, "type_k"))?,
            cache_type_v: CacheType::parse(inst.get(&p, "type_v"))?,
            // llama.cpp: n_ubatch = min(n_batch, n_ubatch)
            n_ubatch: n_ubatch.min(n_batch),
            pool: Some(pool.clone()),
        };
        let mut st = l.model.new_state(&opts).with_context(|| format!("benchmark {k}/{count}: the context"))?;
        if args.verbose {
            eprintln!(
                "benchmark {k}/{count}: n_ctx {}, n_batch {n_batch}, n_ubatch {}, {n_threads} threads, K {} V {}",
                opts.n_ctx,
                opts.n_ubatch,
                inst.get(&p, "type_k"),
                inst.get(&p, "type_v")
            );
        }
        let test_time = rfc3339_now();
        if args.delay > 0 {
            std::thread::sleep(Duration::from_secs(args.delay));
        }
        let mut toks = Tokens {
            state: 0x9E3779B97F4A7C15,
            n_vocab: l.model.n_vocab().max(1) as u64,
            bos: l.tok.add_bos().then(|| l.tok.bos()).flatten(),
        };
        if !args.no_warmup {
            if n_prompt > 0 {
                progress(format!("benchmark {k}/{count}: warmup prompt run"));
                test_prompt(l, st.as_mut(), &mut toks, n_prompt, n_batch).context("the prompt warmup")?;
            }
            if n_gen > 0 {
                progress(format!("benchmark {k}/{count}: warmup generation run"));
                st.truncate(0);
                test_gen(l, st.as_mut(), &mut toks, 1).context("the generation warmup")?;
            }
        }
        let mut samples_ns = Vec::with_capacity(args.reps);
        let mut depth_done = false;
        for r in 1..=args.reps {
            if n_depth > 0 && depth_done {
                // the context at this depth is still in the cache: forget only the test's tokens
                progress(format!("benchmark {k}/{count}: depth run {r}/{} (cached)", args.reps));
                st.truncate(n_depth);
            } else {
                st.truncate(0);
                if n_depth > 0 {
                    progress(format!("benchmark {k}/{count}: depth run {r}/{}", args.reps));
                    test_prompt(l, st.as_mut(), &mut toks, n_depth, n_batch).context("the depth run")?;
                    depth_done = true;
                }
            }
            let t0 = Instant::now();
            if n_prompt > 0 {
                progress(format!("benchmark {k}/{count}: prompt run {r}/{}", args.reps));
                test_prompt(l, st.as_mut(), &mut toks, n_prompt, n_batch)?;
            }
            if n_gen > 0 {
                progress(format!("benchmark {k}/{count}: generation run {r}/{}", args.reps));
                test_gen(l, st.as_mut(), &mut toks, n_gen)?;
            }
            samples_ns.push((t0.elapsed().as_nanos() as u64).max(1));
        }
        // With --dram-bound: decode tokens alternated with read passes over the same
        // weights' pages, each token against the pass right after it (a shared VM's memory
        // speed drifts within seconds, so a bound measured apart from the tokens moves the
        // share by tens of per cent).
        let paired = if bound.is_some() && n_prompt == 0 && decode_bytes > 0 {
            progress(format!("benchmark {k}/{count}: decode tokens alternated with read passes"));
            st.truncate(if depth_done { n_depth } else { 0 });
            paired_decode(l, st.as_mut(), &mut toks, &pool, n_gen)?
        } else {
            Vec::new()
        };
        // each token's share of its pass, and the fastest pass over the fastest token (the
        // uncontended figures of a shared machine, as `mmbench` takes minima)
        let shares: Vec<f64> = paired.iter().map(|(tok, pass)| pass / tok).collect();
        let paired_fraction = median_of(&shares);
        let best_fraction = (!paired.is_empty()).then(|| {
            let min = |f: fn(&(f64, f64)) -> f64| paired.iter().map(f).fold(f64::INFINITY, f64::min);
            min(|p| p.1) / min(|p| p.0)
        });
        let row = make_row(&p, inst, info, &cpu, test_time, samples_ns);
        // decode reads every weight once per token: its share of the DRAM read bound, and of
        // the same loop over the weights' own pages, read right after the decode runs
        let bound_fraction = bound.filter(|_| n_prompt == 0).map(|b| row.avg_ts * decode_bytes as f64 / b);
        let pages = bound_fraction.and_then(|_| {
            progress(format!("benchmark {k}/{count}: read bound over the weights' pages"));
            weights_read_bound(&pool, &l.file, 3)
        });
        let pages_fraction = pages.map(|b| row.avg_ts * decode_bytes as f64 / b);
        if let Some(f) = bound_fraction {
            let own = pages.zip(pages_fraction).map_or(String::new(), |(b, g)| {
                format!("; the weights' own pages read {:.1} GB/s: {:.0} % of that", b / 1e9, g * 100.0)
            });
            eprintln!(
                "{}: {:.2} t/s × {:.1} MiB of weights per token = {:.1} GB/s, {:.0} % of the DRAM read bound{own}",
                row.test_name(),
                row.avg_ts,
                decode_bytes as f64 / 1048576.0,
                row.avg_ts * decode_bytes as f64 / 1e9,
                f * 100.0
            );
        }
        if let Some((f, b)) = paired_fraction.zip(best_fraction) {
            let lo = shares.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = shares.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            eprintln!(
                "{}: {} tokens, each against a read pass over its weights' pages right after it: median {:.0} % ({:.0}–{:.0} %); the fastest pass over the fastest token {:.0} %",
                row.test_name(),
                paired.len(),
                f * 100.0,
                lo * 100.0,
                hi * 100.0,
                b * 100.0
            );
        }
        if args.verbose {
            eprintln!(
                "benchmark {k}/{count}: {} {:.2} t/s, KV cache {:.1} MiB, peak RSS {:.1} MiB",
                row.test_name(),
                row.avg_ts,
                st.cache_bytes() as f64 / 1048576.0,
                peak_rss() as f64 / 1048576.0
            );
        }
        if let Some(o) = out.as_mut() {
            o.test(stdout, &row)?;
            stdout.flush()?;
        }
        if let Some(e) = err.as_mut() {
            e.test(stderr, &row)?;
            stderr.flush()?;
        }
        if args.json {
            summary.push(serde_json::json!({
                "test": row.test_name(), "model": info.filename, "n_prompt": row.n_prompt, "n_gen": row.n_gen,
                "n_depth": row.n_depth, "n_threads": n_threads, "n_batch": n_batch, "n_ubatch": n_ubatch,
                "type_k": row.get("type_k"), "type_v": row.get("type_v"),
                "avg_ts": row.avg_ts, "stddev_ts": row.stddev_ts, "samples_ts": row.samples_ts,
                "decode_weight_bytes": decode_bytes,
                "dram_read_bytes_per_s": bound, "dram_bound_fraction": bound_fraction,
                "weights_read_bytes_per_s": pages, "weights_bound_fraction": pages_fraction,
                "weights_bound_fraction_paired": paired_fraction, "weights_bound_fraction_best": best_fraction,
            }));
            if first_report.is_none() {
                first_report = report.as_ref().map(weights_json);
            }
        }
    }
    if let Some(o) = &out {
        o.footer(stdout)?;
    }
    if let Some(e) = &err {
        e.footer(stderr)?;
    }
    if args.json {
        let first = |f: &str| p.axis(f).values.first().cloned().unwrap_or_default();
        let v = serde_json::json!({
            "model": loaded.as_ref().map(|(_, _, m)| m.filename.clone()),
            "n_threads": first("n_threads").parse::<u64>().unwrap_or(0),
            "load_ms": load_ms,
            "peak_rss_bytes": peak_rss(),
            "weights": first_report,
            "results": summary,
        });
        println!("{v}");
    }
    if args.verbose {
        eprintln!("peak RSS {:.1} MiB", peak_rss() as f64 / 1048576.0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_llama_bench() {
        assert_eq!(int_range("1,2,8", false).unwrap(), [1, 2, 8]);
        assert_eq!(int_range("1-4", false).unwrap(), [1, 2, 3, 4]);
        assert_eq!(int_range("1-9+4", false).unwrap(), [1, 5, 9]);
        assert_eq!(int_range("1-16*2", false).unwrap(), [1, 2, 4, 8, 16]);
        assert_eq!(int_range("4-1", false).unwrap(), Vec::<i64>::new());
        assert_eq!(int_range("1,2,", false).unwrap(), [1, 2]);
        assert_eq!(int_range("", false).unwrap(), Vec::<i64>::new());
        assert_eq!(int_range("-1,0,99", true).unwrap(), [-1, 0, 99]);
        for bad in ["x", "1-", ",1", "1,,2", "1-4/2", "-1", "1-4|2", "99999999999"] {
            assert!(int_range(bad, false).is_err(), "{bad}");
        }
        assert!(int_range("0-4*2", false).unwrap_err().contains("invalid range"));
        assert!(int_range("5-5*1", false).is_err());
        assert!(int_range("0-1000000", false).unwrap_err().contains("more than"));
    }

    #[test]
    fn paired_shares_take_the_median() {
        assert_eq!(median_of(&[]), None);
        assert_eq!(median_of(&[0.9]), Some(0.9));
        assert_eq!(median_of(&[1.2, 0.5, 0.8]), Some(0.8));
        assert_eq!(median_of(&[0.9, 0.5, 1.1, 0.7]), Some(0.8));
    }

    #[test]
    fn values_print_as_llama_bench_prints_them() {
        assert_eq!(fmt_g(389.475123), "389.475");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
        assert_eq!(fmt_g(0.0001234), "0.0001234");
        assert_eq!(fmt_g(0.00001234), "1.234e-05");
        assert_eq!(fmt_g(100.0), "100");
        assert_eq!(fmt_g(999999.5), "1e+06");
        assert_eq!(tensor_split("0").unwrap(), "0.00");
        assert_eq!(tensor_split("3/1").unwrap(), "3.00/1.00");
        assert_eq!(tensor_split("1;0;2;0").unwrap(), "1.00/0.00/2.00");
        assert!(tensor_split("a/1").is_err());
        assert_eq!(override_tensor("blk=CPU;x=CPU").unwrap(), "blk=CPU;x=CPU");
        assert_eq!(override_tensor("").unwrap(), "none");
        assert!(override_tensor("blk=CUDA0").unwrap_err().contains("CUDA0"));
        assert_eq!(flash_attn("on").unwrap(), "1");
        assert_eq!(flash_attn("auto").unwrap(), "-1");
        assert_eq!(json_value("repack", "1"), "true");
        assert_eq!(json_value("flash_attn", "-1"), "-1");
        assert_eq!(json_value("type_k", "f16"), "\"f16\"");
        let t = rfc3339_now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        b: BenchArgs,
    }

    fn parse(args: &[&str]) -> std::result::Result<BenchOpts, String> {
        use clap::Parser;
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .map(|c| *c.b.opts)
            .map_err(|e| e.to_string())
    }

    /// `--n-gpu-layers` and `--flash-attn` (which main.rs does not pass to the binary yet):
    /// lists in llama-bench's loop order, `fa` shown as a column, ngl never on a CPU backend.
    #[test]
    fn gpu_layers_and_flash_attn_are_lists() {
        let a = parse(&["--n-gpu-layers", "-1,99", "--flash-attn", "on,off", "-p", "8", "-n", "0"]).unwrap();
        let p = Params::new(&a).unwrap();
        let insts = p.instances().unwrap();
        let got: Vec<(&str, &str)> =
            insts.iter().map(|i| (i.get(&p, "n_gpu_layers"), i.get(&p, "flash_attn"))).collect();
        assert_eq!(got, [("-1", "1"), ("-1", "0"), ("99", "1"), ("99", "0")]);
        let Some(md) = Printer::new("md", &p) else { panic!("md") };
        let mut head = Vec::new();
        md.header(&mut head).unwrap();
        let head = String::from_utf8(head).unwrap();
        assert!(head.contains("| threads |  fa |            test |"), "{head}");
        assert!(!head.contains("ngl"), "{head}");
        let notes = p.notes(&a);
        assert!(notes.iter().any(|n| n.starts_with("--n-gpu-layers -1,99: no effect")), "{notes:?}");
        assert!(notes.iter().any(|n| n.starts_with("--flash-attn 0:")), "{notes:?}");
        // auto is the default: no column, no note
        let a = parse(&["--flash-attn", "auto"]).unwrap();
        let p = Params::new(&a).unwrap();
        assert!(!p.axis("flash_attn").varies() && p.notes(&a).is_empty());
        for bad in [&["--flash-attn", "maybe"][..], &["--n-gpu-layers", "x"], &["--device", "vulkan0"]] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(bad[0]), "{e}");
        }
        assert_eq!(parse(&["--device", "none"]).unwrap().devices, ["none"]);
    }

    #[test]
    fn stdev_is_the_sample_deviation() {
        assert_eq!(stdev(&[5.0]), 0.0);
        assert!((stdev(&[1.0, 2.0, 3.0, 4.0]) - 1.2909944).abs() < 1e-6);
    }
}
