//! `gguf split` and `gguf merge`: llama-gguf-split's shard sets, byte for byte.
//!
//! What llama-gguf-split (`tools/gguf-split/gguf-split.cpp`) writes, and so what we write:
//! - Shard `i` of `n` is `OUT_PREFIX-<i+1:05>-of-<n:05>.gguf`, GGUF v3.
//! - The first shard has every metadata key of the input, in order; every shard then
//!   "sets" `split.no` (u16), `split.count` (u16), `split.tensors.count` (i32) and finally
//!   `split.count` again — ggml's `gguf_set_val_*` removes a key and appends it, so each
//!   shard ends in `split.no, split.tensors.count, split.count` whether or not the input
//!   already had them.
//! - Tensors keep the input order. `--split-max-tensors N` (default 128) starts a shard
//!   at every multiple of N; `--split-max-size` counts only tensor data, each tensor padded
//!   to 32 bytes, and starts a shard when the next tensor would pass the limit (M = 10^6,
//!   G = 10^9 bytes). `--no-tensor-first-split` leaves the first shard metadata-only.
//! - A tensor's dimensions are written as `ggml_n_dims` (trailing 1s dropped).
//! - Merge: the first shard's metadata with `split.count` set to 0 (moved last), all
//!   tensors in shard order. So the merged file is the original plus
//!   `split.no = 0, split.tensors.count = N, split.count = 0` — not the original bytes.
//!
//! Where we differ: a shard set is written to temporaries and renamed into place only once
//! every shard is complete (nothing is left on error or Ctrl-C); the input may itself be a
//! split model (its shards are read as one); `--split-max-size` must be a whole number
//! of M or G (llama.cpp reads "1.5G" as 1G); and a `general.alignment` other than 32 is
//! honoured in the first shard (llama-gguf-split keeps the key but pads to 32, writing a
//! file its own reader rejects).

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use gguf_format::split::{split_path, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT};
use gguf_format::{AtomicFile, GgufWriter, Metadata, SplitGguf, TensorInfo, TensorSource, Value};

/// llama.cpp's `GGUF_DEFAULT_ALIGNMENT`, which `--split-max-size` pads each tensor to.
const PAD: u64 = 32;

/// `gguf split`.
#[derive(clap::Args, Debug)]
pub struct SplitArgs {
    /// Most tensors per shard [default: 128].
    #[arg(long, value_name = "N", conflicts_with = "split_max_size", value_parser = clap::value_parser!(u64).range(1..))]
    pub split_max_tensors: Option<u64>,
    /// Most tensor bytes per shard: a whole number followed by M (10^6 bytes) or G (10^9).
    /// Counts tensor data (each tensor padded to 32 bytes), not metadata.
    #[arg(long, value_name = "N(M|G)", value_parser = parse_size)]
    pub split_max_size: Option<u64>,
    /// Put no tensors in the first shard (metadata only).
    #[arg(long)]
    pub no_tensor_first_split: bool,
    /// Print the plan only; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The model to split (a plain GGUF or any shard of a split model).
    pub input: PathBuf,
    /// Output prefix: shards are `OUT_PREFIX-00001-of-0000N.gguf` ….
    pub output_prefix: PathBuf,
}

/// `gguf merge`.
#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Read the shards and check them, write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The first shard (`PREFIX-00001-of-0000N.gguf`); the others are found by name.
    pub input: PathBuf,
    /// The merged file (must not exist).
    pub output: PathBuf,
}

/// `--split-max-size`: `N` followed by `M` or `G` (decimal units, as llama-gguf-split).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mult) = match s.as_bytes().last() {
        Some(b'M') => (&s[..s.len() - 1], 1_000_000u64),
        Some(b'G') => (&s[..s.len() - 1], 1_000_000_000u64),
        _ => return Err(format!("{s:?}: supported units are M (megabytes) or G (gigabytes), e.g. 500M or 2G")),
    };
    let n: u64 = num.parse().map_err(|_| format!("{s:?}: expected a whole number before the unit"))?;
    if n == 0 {
        return Err("size must be a positive value".into());
    }
    n.checked_mul(mult).ok_or_else(|| format!("{s:?}: too large"))
}

/// How shards are bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// At most this many tensors per shard.
    Tensors(u64),
    /// At most this many bytes of (32-byte padded) tensor data per shard.
    Bytes(u64),
}

/// The tensor indices of each shard, as llama-gguf-split's `split_strategy` assigns them
/// (`sizes`: each tensor's data size in bytes, in file order).
pub fn plan(sizes: &[u64], limit: Limit, no_tensor_first_split: bool) -> Result<Vec<Vec<usize>>> {
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    if no_tensor_first_split {
        shards.push(Vec::new());
    }
    let mut current = 0u64;
    for (i, &size) in sizes.iter().enumerate() {
        let n_bytes = size.div_ceil(PAD) * PAD;
        let next = current.saturating_add(n_bytes);
        let split = match limit {
            Limit::Bytes(max) => next > max,
            Limit::Tensors(n) => i > 0 && (i as u64).is_multiple_of(n),
        };
        if split {
            // Only the first tensor can meet an empty shard here (after a split the
            // tensor always goes in); llama-gguf-split refuses then, and so do we. A later
            // tensor over the limit gets a shard of its own, over the limit.
            if shards.last().is_some_and(Vec::is_empty) {
                bail!(
                    "tensor {i} ({n_bytes} bytes, padded) is over --split-max-size {}: the shard would hold no \
                     tensors",
                    match limit {
                        Limit::Bytes(b) => b,
                        Limit::Tensors(n) => n,
                    }
                );
            }
            shards.push(Vec::new());
            current = n_bytes;
        } else {
            current = next;
        }
        if let Some(last) = shards.last_mut() {
            last.push(i);
        }
    }
    if shards.len() > u16::MAX as usize {
        bail!("{} shards: at most {} (split.count is a u16)", shards.len(), u16::MAX);
    }
    Ok(shards)
}

/// ggml's `gguf_set_val_*`: remove the key, then append it.
fn set_last(m: &mut Metadata, key: &str, v: Value) {
    m.remove(key);
    m.set(key, v);
}

/// Dimensions as ggml writes them: `ne` padded to 4 with 1s, then `ggml_n_dims` of them.
pub fn ggml_dims(dims: &[u64]) -> Vec<u64> {
    let mut d = dims.to_vec();
    if d.is_empty() {
        d.push(1);
    }
    while d.len() > 1 && d.last() == Some(&1) {
        d.pop();
    }
    d
}

fn interrupted_err() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "interrupted")
}

/// Bytes written between two checks of the interrupt flag.
const WRITE_CHUNK: usize = 16 << 20;

/// Adds `t` (data from `model`) to `w`, streamed so that an interrupt stops the write.
fn add_tensor<'a>(
    w: &mut GgufWriter<'a>,
    model: &'a SplitGguf,
    t: &TensorInfo,
    interrupted: &'a AtomicBool,
) -> Result<()> {
    let data = model.tensor_data(t).with_context(|| format!("reading tensor {:?}", t.name))?;
    let source = TensorSource::Stream(Box::new(move |out: &mut dyn Write| {
        for c in data.chunks(WRITE_CHUNK) {
            if interrupted.load(Ordering::Relaxed) {
                return Err(interrupted_err());
            }
            out.write_all(c)?;
        }
        Ok(())
    }));
    w.add_tensor_source(&t.name, &ggml_dims(&t.dims), t.type_id, data.len() as u64, source)?;
    Ok(())
}

fn open_model(path: &Path) -> Result<SplitGguf> {
    SplitGguf::open(path).with_context(|| format!("reading {}", path.display()))
}

/// The writers of every shard of `model` under `plan`.
fn shard_writers<'a>(
    model: &'a SplitGguf,
    plan: &[Vec<usize>],
    interrupted: &'a AtomicBool,
) -> Result<Vec<GgufWriter<'a>>> {
    let n_tensors = i32::try_from(model.tensors().len()).context("more tensors than split.tensors.count can hold")?;
    let n_split = plan.len() as u16;
    let mut out = Vec::with_capacity(plan.len());
    for (i, idx) in plan.iter().enumerate() {
        let mut w = GgufWriter::new();
        let m = w.metadata_mut();
        if i == 0 {
            *m = model.metadata().clone();
        }
        set_last(m, KEY_SPLIT_NO, Value::U16(i as u16));
        set_last(m, KEY_SPLIT_COUNT, Value::U16(0));
        set_last(m, KEY_SPLIT_TENSORS_COUNT, Value::I32(n_tensors));
        set_last(m, KEY_SPLIT_COUNT, Value::U16(n_split));
        for &t in idx {
            add_tensor(&mut w, model, &model.tensors()[t], interrupted)?;
        }
        out.push(w);
    }
    Ok(out)
}

/// Writes every `(path, writer)` into a temporary next to its path, then renames them all
/// into place. On any error nothing of the set remains: temporaries are removed, and so
/// are shards already renamed.
pub fn write_set(files: Vec<(PathBuf, GgufWriter<'_>)>, mut progress: impl FnMut(&Path)) -> Result<()> {
    // Dropping an uncommitted temporary removes it: an error anywhere below leaves none.
    let mut staged: Vec<AtomicFile> = Vec::with_capacity(files.len());
    for (path, w) in files {
        let mut buf = BufWriter::with_capacity(1 << 20, AtomicFile::create(&path)?);
        w.write_to(&mut buf).with_context(|| format!("writing {}", path.display()))?;
        buf.flush().with_context(|| format!("writing {}", path.display()))?;
        staged.push(buf.into_inner().map_err(|e| e.into_error())?);
        progress(&path);
    }
    let mut done: Vec<PathBuf> = Vec::with_capacity(staged.len());
    for f in staged {
        let path = f.target().to_path_buf();
        if let Err(e) = f.commit() {
            for p in &done {
                let _ = fs::remove_file(p);
            }
            return Err(e).with_context(|| format!("writing {}", path.display()));
        }
        done.push(path);
    }
    Ok(())
}

/// The error of a write that failed because the interrupt flag was set: said plainly
/// (the temporaries are gone by then), not as the I/O error the writer saw.
fn plain_interrupt(r: Result<()>, interrupted: &AtomicBool) -> Result<()> {
    match r {
        Err(_) if interrupted.load(Ordering::SeqCst) => bail!("interrupted; no output file written"),
        r => r,
    }
}

/// `gguf split`.
pub fn split(a: &SplitArgs, interrupted: &'static AtomicBool) -> Result<()> {
    let model = open_model(&a.input)?;
    let limit = match a.split_max_size {
        Some(b) => Limit::Bytes(b),
        None => Limit::Tensors(a.split_max_tensors.unwrap_or(128)),
    };
    let sizes: Vec<u64> = model
        .tensors()
        .iter()
        .map(|t| t.size.ok_or_else(|| anyhow::anyhow!("tensor {:?}: unknown ggml type id {}", t.name, t.type_id)))
        .collect::<Result<_>>()?;
    if let (Limit::Bytes(max), Some(t)) = (limit, model.tensors().first()) {
        let padded = sizes[0].div_ceil(PAD) * PAD;
        if padded > max {
            bail!(
                "tensor {:?} alone is {padded} bytes (padded to {PAD}), over --split-max-size {max}: its shard would \
                 hold no tensors (llama-gguf-split refuses this too)",
                t.name
            );
        }
    }
    let plan = plan(&sizes, limit, a.no_tensor_first_split)?;
    let writers = shard_writers(&model, &plan, interrupted)?;

    // llama-gguf-split's plan report: sizes are header + unpadded tensor data, in 10^6 bytes.
    println!("n_split: {}", plan.len());
    for (i, (w, idx)) in writers.iter().zip(&plan).enumerate() {
        let total = w.header_len()? + idx.iter().map(|&t| sizes[t]).sum::<u64>();
        println!("split {:05}: n_tensors = {}, total_size = {}M", i + 1, idx.len(), total / 1000 / 1000);
    }
    if a.dry_run {
        return Ok(());
    }
    let n = plan.len() as u32;
    let files: Vec<(PathBuf, GgufWriter)> =
        writers.into_iter().enumerate().map(|(i, w)| (split_path(&a.output_prefix, i as u32, n), w)).collect();
    let stop = crate::quantize::StopOnTerm::install(interrupted);
    let r = write_set(files, |p| println!("Writing file {} ... done", p.display()));
    plain_interrupt(r, interrupted)?;
    drop(stop);
    eprintln!("gguf split: {n} shards written with a total of {} tensors", sizes.len());
    Ok(())
}

/// `gguf merge`.
pub fn merge(a: &MergeArgs, interrupted: &'static AtomicBool) -> Result<()> {
    if fs::symlink_metadata(&a.output).is_ok() {
        bail!("output file {} already exists", a.output.display());
    }
    let model = open_model(&a.input)?;
    match model.metadata().get(KEY_SPLIT_COUNT) {
        Some(Value::U16(c)) if *c >= 1 => {}
        Some(Value::U16(c)) => bail!("{}: not a split model ({KEY_SPLIT_COUNT} is {c})", a.input.display()),
        _ => bail!("{}: not a split model (no {KEY_SPLIT_COUNT} key)", a.input.display()),
    }
    let mut w = GgufWriter::new();
    let m = w.metadata_mut();
    *m = model.metadata().clone();
    // llama-gguf-split: "do not trigger merge if we try to merge again the output".
    set_last(m, KEY_SPLIT_COUNT, Value::U16(0));
    for t in model.tensors() {
        add_tensor(&mut w, &model, t, interrupted)?;
    }
    let n = model.shards().len();
    if a.dry_run {
        eprintln!("gguf merge: {n} shards with {} tensors checked (dry run)", model.tensors().len());
        return Ok(());
    }
    let stop = crate::quantize::StopOnTerm::install(interrupted);
    let r = w.write_to_path(&a.output).with_context(|| format!("writing {}", a.output.display()));
    plain_interrupt(r, interrupted)?;
    drop(stop);
    eprintln!("gguf merge: {} merged from {n} shards with {} tensors", a.output.display(), model.tensors().len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_llama() {
        assert_eq!(parse_size("30M"), Ok(30_000_000));
        assert_eq!(parse_size("2G"), Ok(2_000_000_000));
        assert!(parse_size("0M").is_err());
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("100").unwrap_err().contains("supported units"));
        assert!(parse_size("100K").is_err());
        assert!(parse_size("M").is_err());
    }

    #[test]
    fn plans_follow_split_strategy() {
        let s = [10u64; 5];
        assert_eq!(plan(&s, Limit::Tensors(2), false).unwrap(), [vec![0, 1], vec![2, 3], vec![4]]);
        assert_eq!(plan(&s, Limit::Tensors(2), true).unwrap(), [Vec::<usize>::new(), vec![0, 1], vec![2, 3], vec![4]]);
        assert_eq!(plan(&s, Limit::Tensors(128), false).unwrap(), [vec![0, 1, 2, 3, 4]]);
        assert_eq!(plan(&[], Limit::Tensors(2), false).unwrap(), [Vec::<usize>::new()]);
        assert_eq!(plan(&[], Limit::Tensors(2), true).unwrap(), [Vec::<usize>::new(), vec![]]);
        // Each tensor counts 32 bytes (padded): 3 fit in 96.
        assert_eq!(plan(&s, Limit::Bytes(96), false).unwrap(), [vec![0, 1, 2], vec![3, 4]]);
        assert_eq!(plan(&s, Limit::Bytes(95), false).unwrap(), [vec![0, 1], vec![2, 3], vec![4]]);
        assert_eq!(plan(&[40, 10], Limit::Bytes(64), false).unwrap(), [vec![0], vec![1]]);
        // A tensor over the limit where a shard starts: refused, as llama-gguf-split does.
        assert!(plan(&[100], Limit::Bytes(64), false).is_err());
        assert!(plan(&[100], Limit::Bytes(64), true).is_err());
        assert_eq!(plan(&[10, 100, 10], Limit::Bytes(64), false).unwrap(), [vec![0], vec![1], vec![2]]);
    }

    #[test]
    fn dims_as_ggml_n_dims() {
        assert_eq!(ggml_dims(&[]), [1]);
        assert_eq!(ggml_dims(&[1]), [1]);
        assert_eq!(ggml_dims(&[64, 1]), [64]);
        assert_eq!(ggml_dims(&[64, 1, 3]), [64, 1, 3]);
        assert_eq!(ggml_dims(&[1, 1, 1, 1]), [1]);
    }
}
