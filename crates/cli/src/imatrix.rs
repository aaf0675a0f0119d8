//! `gguf imatrix`: llama-imatrix (`tools/imatrix/imatrix.cpp`) — the text cut into `-c`
//! token chunks (BOS first), each evaluated from an empty cache while an
//! [`gguf_models::Observer`] sums the squares of every activation column entering each
//! `blk.*` weight (products of fewer than 16 rows are skipped, experts counted per
//! expert), saved in llama.cpp's imatrix GGUF (`<name>.in_sum2` / `<name>.counts`,
//! `imatrix.*` keys) or legacy `.dat` format. `--in-file` merges earlier results.
//! The f32 sums are plain multiply-then-add in llama.cpp's row order, which makes
//! the file byte-identical to llama-imatrix's when the activations are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use gguf_format::{Array, GgufWriter, Value};
use gguf_models::{Logits, Observer, Segment};

use crate::engine::{self, ModelArgs};

/// Arguments of `gguf imatrix` (llama-imatrix's names).
#[derive(Args, Debug)]
pub struct ImatrixArgs {
    /// Model, threads, context (`-c`, default 512), caches.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The calibration text.
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Output file.
    #[arg(short = 'o', long = "output-file", default_value = "imatrix.gguf")]
    pub output: PathBuf,
    /// `gguf` (default) or `dat` (the legacy format).
    #[arg(long = "output-format", default_value = "gguf")]
    pub output_format: String,
    /// At most this many chunks (-1 = all).
    #[arg(long = "chunks", default_value_t = -1, allow_hyphen_values = true)]
    pub chunks: i64,
    /// Skip this many chunks at the start of the text.
    #[arg(long = "chunk", default_value_t = 0)]
    pub skip_chunks: usize,
    /// Earlier imatrix files to add in (repeatable; with no -f they are only merged).
    #[arg(long = "in-file")]
    pub in_files: Vec<PathBuf>,
    /// Also collect output.weight.
    #[arg(long = "process-output")]
    pub process_output: bool,
    /// Parse special tokens in the text.
    #[arg(long = "parse-special")]
    pub parse_special: bool,
    /// Do not compute the perplexity alongside.
    #[arg(long = "no-ppl")]
    pub no_ppl: bool,
}

#[derive(Default, Clone)]
struct Stats {
    values: Vec<f32>,
    counts: Vec<i64>,
}

struct Collector {
    stats: Mutex<BTreeMap<String, Stats>>,
    process_output: bool,
    error: Mutex<Option<String>>,
}

impl Collector {
    fn wanted(&self, name: &str) -> bool {
        name.starts_with("blk.") || (self.process_output && name == "output.weight")
    }
    fn fail(&self, msg: String) {
        self.error.lock().unwrap().get_or_insert(msg);
    }
}

impl Observer for Collector {
    fn matmul(&self, name: &str, x: &[f32], n: usize) {
        if n < 16 || !self.wanted(name) {
            return;
        }
        let cols = x.len() / n;
        let mut map = self.stats.lock().unwrap();
        let e = map.entry(name.to_string()).or_default();
        if e.counts.len() > 1 && e.counts.iter().all(|&c| c == e.counts[0]) {
            e.counts.truncate(1);
        }
        if e.values.is_empty() {
            e.values = vec![0.0; cols];
            e.counts = vec![0];
        } else if e.values.len() != cols {
            let msg = format!("inconsistent size for {name} ({} vs {cols})", e.values.len());
            drop(map);
            return self.fail(msg);
        }
        for row in x.chunks_exact(cols) {
            for (a, &v) in e.values.iter_mut().zip(row) {
                *a += v * v;
            }
        }
        if e.values.iter().any(|v| !v.is_finite()) {
            drop(map);
            return self.fail(format!("non-finite values detected in {name}"));
        }
        for c in e.counts.iter_mut() {
            *c += n as i64;
        }
    }

    /// One `MUL_MAT_ID` of a ubatch: its rows arrive in the order `collect_imatrix`
    /// reads them (slot by slot, tokens in ubatch order within a slot).
    fn expert_matmul(&self, name: &str, expert: usize, n_expert: usize, x: &[f32], slots: &[usize]) {
        let n = slots.len();
        if n == 0 {
            return;
        }
        let cols = x.len() / n;
        let mut map = self.stats.lock().unwrap();
        let e = map.entry(name.to_string()).or_default();
        if e.counts.len() == 1 && n_expert > 1 {
            let c = e.counts[0];
            e.counts.resize(n_expert, c);
        }
        if e.values.is_empty() {
            e.values = vec![0.0; cols * n_expert];
            e.counts = vec![0; n_expert];
        } else if e.values.len() != cols * n_expert || e.counts.len() != n_expert {
            let msg = format!("inconsistent size for {name} ({} vs {})", e.values.len(), cols * n_expert);
            drop(map);
            return self.fail(msg);
        }
        let acc = &mut e.values[expert * cols..(expert + 1) * cols];
        for row in x.chunks_exact(cols) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a += v * v;
            }
        }
        e.counts[expert] += n as i64;
        if acc.iter().any(|v| !v.is_finite()) {
            drop(map);
            self.fail(format!("non-finite values detected in {name}"));
        }
    }
}

fn merge_in(stats: &mut BTreeMap<String, Stats>, datasets: &mut Vec<String>, path: &Path, chunk: i64) -> Result<()> {
    let im = gguf_quantize::imatrix::load_raw(path)?;
    for (name, gguf_quantize::imatrix::Raw { sums, counts }) in im.entries {
        let e = stats.entry(name.clone()).or_default();
        if im.legacy {
            if e.values.is_empty() {
                e.values = vec![0.0; sums.len()];
                e.counts = vec![0];
            }
            for (a, s) in e.values.iter_mut().zip(&sums) {
                *a += s * chunk as f32;
            }
            for c in e.counts.iter_mut() {
                *c += counts[0] * chunk;
            }
        } else {
            if e.values.is_empty() {
                e.values = vec![0.0; sums.len()];
            } else if e.values.len() != sums.len() {
                bail!("{}: mismatched sums size for {name}: {} != {}", path.display(), sums.len(), e.values.len());
            }
            if e.counts.is_empty() {
                e.counts = vec![0; counts.len()];
            } else if e.counts.len() == 1 && counts.len() > 1 {
                let c = e.counts[0];
                e.counts.resize(counts.len(), c);
            } else if e.counts.len() != counts.len() {
                bail!("{}: mismatched counts size for {name}", path.display());
            }
            for (a, s) in e.values.iter_mut().zip(&sums) {
                *a += s;
            }
            for (a, c) in e.counts.iter_mut().zip(&counts) {
                *a += c;
            }
        }
    }
    datasets.extend(im.datasets);
    Ok(())
}

fn trim(dims: &[u64]) -> Vec<u64> {
    let n = dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1);
    dims[..n].to_vec()
}

fn save_gguf(
    stats: &BTreeMap<String, Stats>,
    datasets: &[String],
    chunks: u32,
    chunk_size: u32,
    out: &Path,
) -> Result<()> {
    let mut w = GgufWriter::new();
    w.add_kv("general.type", "imatrix");
    let ds: gguf_format::StringArray = datasets.iter().collect();
    w.add_kv("imatrix.datasets", Value::Array(Array::String(ds)));
    w.add_kv("imatrix.chunk_count", Value::U32(chunks));
    w.add_kv("imatrix.chunk_size", Value::U32(chunk_size));
    for (name, s) in stats {
        let (nval, nmat) = (s.values.len(), s.counts.len());
        if nval == 0 || nmat == 0 {
            continue;
        }
        let sums = s.values.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor_owned(&format!("{name}.in_sum2"), &trim(&[(nval / nmat) as u64, nmat as u64]), 0, sums)?;
        let counts = s.counts.iter().flat_map(|&c| (c as f32).to_le_bytes()).collect();
        w.add_tensor_owned(&format!("{name}.counts"), &trim(&[1, nmat as u64]), 0, counts)?;
    }
    w.write_to_path(out)?;
    Ok(())
}

fn save_dat(stats: &BTreeMap<String, Stats>, dataset: &str, chunks: i32, chunk_size: i64, out: &Path) -> Result<()> {
    let mut b = Vec::new();
    let stored: Vec<(&String, &Stats)> =
        stats.iter().filter(|(_, s)| !s.counts.is_empty() && s.counts.iter().any(|&c| c != 0)).collect();
    b.extend_from_slice(&(stored.len() as i32).to_le_bytes());
    for (name, s) in stored {
        b.extend_from_slice(&(name.len() as i32).to_le_bytes());
        b.extend_from_slice(name.as_bytes());
        let ncall = ((s.counts.iter().max().copied().unwrap_or(0) + chunk_size - 1) / chunk_size) as i32;
        b.extend_from_slice(&ncall.to_le_bytes());
        let (nval, nmat) = (s.values.len(), s.counts.len());
        b.extend_from_slice(&(nval as i32).to_le_bytes());
        for (i, &v) in s.values.iter().enumerate() {
            let mut count = s.counts[i / (nval / nmat)] as f32;
            let mut value = v;
            if count == 0.0 {
                value = 1.0;
                count = 1.0;
            }
            b.extend_from_slice(&((value / count) * ncall as f32).to_le_bytes());
        }
    }
    b.extend_from_slice(&chunks.to_le_bytes());
    b.extend_from_slice(&(dataset.len() as i32).to_le_bytes());
    b.extend_from_slice(dataset.as_bytes());
    crate::write_atomic(out, &b)
}

/// Runs `gguf imatrix`.
pub fn run(a: &ImatrixArgs) -> Result<()> {
    let legacy = match a.output_format.as_str() {
        "gguf" => false,
        "dat" => true,
        f => bail!("--output-format: unknown format {f:?} (gguf or dat)"),
    };
    let n_ctx = a.model.ctx_size.unwrap_or(512);
    ensure!(n_ctx >= 4, "imatrix needs --ctx-size of at least 4");
    // SIGTERM / SIGHUP stop the run as Ctrl-C does (nothing is written).
    let _stop = crate::quantize::StopOnTerm::install(&engine::INTERRUPTED);
    let mut stats = BTreeMap::new();
    let mut datasets = Vec::new();
    for f in &a.in_files {
        merge_in(&mut stats, &mut datasets, f, n_ctx as i64)?;
    }
    let collector =
        Arc::new(Collector { stats: Mutex::new(stats), process_output: a.process_output, error: Mutex::new(None) });
    if let Some(file) = &a.file {
        let l = engine::load(&a.model)?;
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let mut tokens = l.tok.encode(&text, true, a.parse_special)?;
        if a.skip_chunks > 0 {
            ensure!(
                (a.skip_chunks + 2) * n_ctx < tokens.len(),
                "there will be not enough tokens left after removing {} chunks",
                a.skip_chunks
            );
            tokens.drain(..a.skip_chunks * n_ctx);
        }
        let n_chunk = crate::perplexity::chunk_count(tokens.len(), n_ctx, a.chunks, file)?;
        // llama-imatrix puts n_seq = b / c chunks in one batch; its ubatches (of
        // --ubatch-size tokens) take an equal share of each sequence in turn, so every
        // weight sees chunk 0's first share, chunk 1's first share, … as one product
        // (its arithmetic picked by the ubatch's rows: one-token shares are one tinyBLAS
        // product there) and the experts are routed over the whole ubatch. Each ubatch
        // is one `forward_ubatch` over one state per chunk.
        let n_seq = (a.model.batch / n_ctx).max(1);
        let mut states = Vec::new();
        for _ in 0..n_seq.min(n_chunk.max(1)) {
            let mut st = engine::state_with_ctx(&l, &a.model, n_ctx)?;
            ensure!(st.set_observer(Some(collector.clone())), "this architecture's engine cannot report activations");
            states.push(st);
        }
        let n_vocab = l.model.n_vocab();
        let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
        eprintln!("computing over {n_chunk} chunks, n_ctx={n_ctx}, batch_size={}, n_seq={n_seq}", a.model.batch);
        let t0 = Instant::now();
        let logits_mode = if a.no_ppl { Logits::None } else { Logits::All };
        for i in (0..n_chunk).step_by(n_seq) {
            let group = n_seq.min(n_chunk - i);
            let mut inputs = Vec::with_capacity(group);
            for s in 0..group {
                let mut input = tokens[(i + s) * n_ctx..(i + s + 1) * n_ctx].to_vec();
                if l.tok.add_bos() {
                    input[0] = l.tok.bos().context("the tokenizer adds BOS but has no BOS token")?;
                }
                inputs.push(input);
                states[s].truncate(0);
            }
            let mut logits: Vec<Vec<f32>> = vec![Vec::new(); group];
            // llama.cpp's split_equal: as many tokens of each sequence as fit n_ubatch.
            let share = (a.model.ubatch / group).clamp(1, n_ctx);
            for off in (0..n_ctx).step_by(share) {
                if engine::INTERRUPTED.load(Ordering::Relaxed) {
                    bail!("interrupted; no imatrix written");
                }
                let end = (off + share).min(n_ctx);
                let mut segments: Vec<Segment<'_>> = states[..group]
                    .iter_mut()
                    .zip(&inputs)
                    .map(|(st, input)| Segment { state: st.as_mut(), tokens: &input[off..end], logits: logits_mode })
                    .collect();
                let outs = l.model.forward_ubatch(&mut segments)?;
                for (lg, out) in logits.iter_mut().zip(outs) {
                    lg.extend_from_slice(&out);
                }
                if let Some(e) = collector.error.lock().unwrap().take() {
                    bail!(e);
                }
            }
            if i == 0 {
                let s = t0.elapsed().as_secs_f64();
                eprintln!("{s:.2} seconds per pass - ETA {:.2} minutes", s * n_chunk.div_ceil(n_seq) as f64 / 60.0);
            }
            for (s, lg) in logits.iter().enumerate() {
                if a.no_ppl {
                    break;
                }
                let chunk = &tokens[(i + s) * n_ctx..(i + s + 1) * n_ctx];
                for p in n_ctx / 2..n_ctx - 1 {
                    let v = crate::perplexity::nll_of(&lg[p * n_vocab..(p + 1) * n_vocab], chunk[p + 1] as usize);
                    nll += v;
                    nll2 += v * v;
                    count += 1;
                }
                print!("[{}]{:.4},", i + s + 1, (nll / count as f64).exp());
                use std::io::Write;
                std::io::stdout().flush().ok();
            }
        }
        if !a.no_ppl && count > 1 {
            let m = nll / count as f64;
            let v = (nll2 / count as f64 - m * m).max(0.0);
            println!("\nFinal estimate: PPL = {:.4} +/- {:.5}", m.exp(), (v / (count as f64 - 1.0)).sqrt() * m.exp());
        }
        datasets.push(file.to_string_lossy().into_owned());
    } else if a.in_files.is_empty() {
        bail!("nothing to do: give -f TEXT and/or --in-file IMATRIX");
    }
    if engine::INTERRUPTED.load(Ordering::Relaxed) {
        bail!("interrupted; no imatrix written");
    }
    let stats = collector.stats.lock().unwrap();
    // llama-imatrix's m_last_chunk: the largest count in whole chunks.
    let max_count = stats.values().flat_map(|s| s.counts.iter().copied()).max().unwrap_or(0);
    let chunks = (max_count / n_ctx as i64) as u32;
    if legacy {
        let ds = datasets.last().cloned().unwrap_or_default();
        save_dat(&stats, &ds, chunks as i32, n_ctx as i64, &a.output)?;
    } else {
        save_gguf(&stats, &datasets, chunks, n_ctx as u32, &a.output)?;
    }
    eprintln!("stored collected data after {chunks} chunks in {} ({} entries)", a.output.display(), stats.len());
    Ok(())
}
