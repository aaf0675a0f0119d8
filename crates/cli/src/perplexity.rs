//! `gguf perplexity`: llama-perplexity's perplexity and KL-divergence modes
//! (`tools/perplexity/perplexity.cpp`): the text tokenized with BOS, cut into `-c`-token
//! chunks (BOS in the first position of each), every chunk evaluated from an empty cache,
//! and the second half of each chunk scored. `--kl-divergence-base FILE` alone writes
//! llama.cpp's base-logits file (`_logits_`, n_ctx, n_vocab, n_chunk, the tokens, then
//! per scored token its log-probabilities as 16-bit steps above the minimum); with
//! `--kl-divergence` that file is read and the model compared against it.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use gguf_models::Logits;

use crate::engine::{self, ModelArgs};

/// Arguments of `gguf perplexity` (llama-perplexity's names).
#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// Model, threads, context (`-c`, default 512 here as in llama-perplexity), caches.
    #[command(flatten)]
    pub model: ModelArgs,
    /// `--device`, `-ngl`.
    #[command(flatten)]
    pub device: crate::device::DeviceArgs,
    /// The text to score.
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Score at most this many chunks (-1 = all).
    #[arg(long = "chunks", default_value_t = -1, allow_hyphen_values = true)]
    pub chunks: i64,
    /// The base-logits file: written when `--kl-divergence` is absent, read when present.
    #[arg(long = "kl-divergence-base", value_name = "FILE")]
    pub kl_base: Option<PathBuf>,
    /// Compare against `--kl-divergence-base` (its tokens; `-f` is not needed).
    #[arg(long = "kl-divergence")]
    pub kl: bool,
}

/// `nearest_int` of perplexity.cpp (round-to-nearest via the 1.5·2²³ trick).
fn nearest_int(f: f32) -> i32 {
    let v = f + 12582912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// max, Σ exp(l − max) in f64 with f32 `expf` terms, as perplexity.cpp.
pub(crate) fn max_sum_exp(logits: &[f32]) -> (f32, usize, f64) {
    let mut max = logits[0];
    let mut imax = 0;
    for (i, &l) in logits.iter().enumerate().skip(1) {
        if l > max {
            max = l;
            imax = i;
        }
    }
    let sum = logits.iter().map(|&l| (l - max).exp() as f64).sum();
    (max, imax, sum)
}

/// The negative log-likelihood of `tok` under `logits` (perplexity.cpp's `log_softmax`).
pub(crate) fn nll_of(logits: &[f32], tok: usize) -> f64 {
    let (max, _, sum) = max_sum_exp(logits);
    -((logits[tok] - max) as f64 - sum.ln())
}

/// How many `n_ctx` chunks of `n_tokens` to score (`chunks` < 0: all), refusing a text
/// shorter than two chunks as llama-perplexity and llama-imatrix do.
pub(crate) fn chunk_count(n_tokens: usize, n_ctx: usize, chunks: i64, file: &std::path::Path) -> Result<usize> {
    if n_tokens < 2 * n_ctx {
        bail!(
            "you need at least {} tokens to evaluate a context of {n_ctx}; {} tokenizes to only {n_tokens}",
            2 * n_ctx,
            file.display()
        );
    }
    let max = n_tokens / n_ctx;
    Ok(if chunks < 0 { max } else { (chunks as usize).min(max) })
}

/// Row stride of the base file in u16s: the log-probs padded to even + 4 (scale, min).
pub(crate) fn nv(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// Encodes one position's log-probabilities (perplexity.cpp's `log_softmax` with a
/// `log_prob` output); returns its negative log-likelihood of `tok`.
pub(crate) fn encode_log_probs(logits: &[f32], out: &mut [u16], tok: usize) -> f64 {
    let mut min = logits[0];
    for &l in &logits[1..] {
        min = min.min(l);
    }
    let (max, _, sum) = max_sum_exp(logits);
    let min = min.max(max - 16.0);
    let log_sum_exp = sum.ln() as f32;
    let min_log_prob = min - max - log_sum_exp;
    let scale = (max - min) / 65535.0;
    let (head, rest) = out.split_at_mut(4);
    let s = scale.to_le_bytes();
    let m = min_log_prob.to_le_bytes();
    head[0] = u16::from_le_bytes([s[0], s[1]]);
    head[1] = u16::from_le_bytes([s[2], s[3]]);
    head[2] = u16::from_le_bytes([m[0], m[1]]);
    head[3] = u16::from_le_bytes([m[2], m[3]]);
    if scale != 0.0 {
        let inv = 1.0 / scale;
        for (o, &l) in rest.iter_mut().zip(logits) {
            *o = if l > min { nearest_int(inv * (l - min)) as u16 } else { 0 };
        }
    } else {
        rest[..logits.len()].fill(0);
    }
    (max as f64 + log_sum_exp as f64) - logits[tok] as f64
}

#[derive(Default)]
pub(crate) struct Kld {
    pub(crate) sum_nll: f64,
    pub(crate) sum_nll2: f64,
    pub(crate) sum_nll_base: f64,
    pub(crate) sum_nll_base2: f64,
    pub(crate) sum_nll_nll_base: f64,
    pub(crate) sum_kld: f64,
    pub(crate) sum_kld2: f64,
    pub(crate) sum_p_diff: f64,
    pub(crate) sum_p_diff2: f64,
    pub(crate) sum_p_diff4: f64,
    pub(crate) max_p_diff: f32,
    pub(crate) n_same_top: usize,
    pub(crate) count: usize,
}

/// One position of the KL mode (perplexity.cpp's `log_softmax` against a base row).
pub(crate) fn kld_one(logits: &[f32], base: &[u16], tok: usize, k: &mut Kld) -> (f64, f32) {
    let (mut max, imax, sum_exp) = max_sum_exp(logits);
    let log_sum_exp = sum_exp.ln() as f32;
    let f = |i: usize| {
        f32::from_le_bytes({
            let (a, b) = (base[i].to_le_bytes(), base[i + 1].to_le_bytes());
            [a[0], a[1], b[0], b[1]]
        })
    };
    let (scale, min_log_prob) = (f(0), f(2));
    let lp = &base[4..];
    let nll = max + log_sum_exp - logits[tok];
    k.sum_nll += nll as f64;
    k.sum_nll2 += (nll * nll) as f64;
    let nll_base = -(scale * lp[tok] as f32 + min_log_prob);
    k.sum_nll_base += nll_base as f64;
    k.sum_nll_base2 += (nll_base * nll_base) as f64;
    k.sum_nll_nll_base += (nll * nll_base) as f64;
    max += log_sum_exp;
    let mut sum = 0f64;
    let mut imax_base = 0usize;
    let mut p_max = 0f32;
    for (i, &l) in logits.iter().enumerate() {
        let p_log_base = scale * lp[i] as f32 + min_log_prob;
        if i == 0 || p_log_base > p_max {
            p_max = p_log_base;
            imax_base = i;
        }
        if p_log_base > -16.0 {
            let p_base = p_log_base.exp();
            sum += (p_base * (p_log_base - l + max)) as f64;
        }
    }
    k.sum_kld += sum;
    k.sum_kld2 += sum * sum;
    k.count += 1;
    k.n_same_top += (imax == imax_base) as usize;
    let p_diff = (-nll).exp() - (-nll_base).exp();
    k.sum_p_diff += p_diff as f64;
    let d2 = (p_diff * p_diff) as f64;
    k.sum_p_diff2 += d2;
    k.sum_p_diff4 += d2 * d2;
    k.max_p_diff = k.max_p_diff.max(p_diff.abs());
    (sum, p_diff)
}

pub(crate) fn mean_unc(sum: f64, sum2: f64, n: usize) -> (f64, f64) {
    if n < 1 {
        return (0.0, 0.0);
    }
    let f = sum / n as f64;
    let df = sum2 / n as f64 - f * f;
    (f, if df > 0.0 && n > 10 { (df / (n as f64 - 1.0)).sqrt() } else { 0.0 })
}

fn covariance(a: f64, b: f64, ab: f64, n: usize) -> f64 {
    if n < 10 {
        return 0.0;
    }
    let n = n as f64;
    (ab / n - (a / n) * (b / n)) / (n - 1.0)
}

fn percentile(v: &[f32], fraction: f32) -> f32 {
    if fraction <= 0.0 {
        return v[0];
    }
    if fraction >= 1.0 {
        return v[v.len() - 1];
    }
    let mut p = fraction * (v.len() - 1) as f32;
    let ip = p as usize;
    p -= ip as f32;
    (1.0 - p) * v[ip] + p * v[(ip + 1).min(v.len() - 1)]
}

fn median(v: &[f32]) -> f32 {
    let n = v.len();
    if n.is_multiple_of(2) {
        0.5 * (v[n / 2] + v[n / 2 - 1])
    } else {
        v[n / 2]
    }
}

fn read_i32(r: &mut impl Read, what: &str) -> Result<i32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b).with_context(|| format!("reading {what}"))?;
    Ok(i32::from_le_bytes(b))
}

/// Runs `gguf perplexity`.
pub fn run(a: &PerplexityArgs) -> Result<()> {
    a.device.check()?;
    let l = engine::load(&a.model)?;
    let n_vocab = l.model.n_vocab();
    let add_bos = l.tok.add_bos();
    ensure!(!l.tok.add_eos(), "the tokenizer adds EOS; perplexity needs a model that does not");
    let bos = l.tok.bos();
    let mut base_in = None;
    let (n_ctx, tokens, n_chunk) = if a.kl {
        let path = a.kl_base.as_ref().context("--kl-divergence needs --kl-divergence-base FILE")?;
        let mut r = BufReader::new(File::open(path).with_context(|| format!("opening {}", path.display()))?);
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).ok();
        ensure!(&magic == b"_logits_", "{} does not look like a file containing log-probabilities", path.display());
        let n_ctx = read_i32(&mut r, "n_ctx")?;
        let nv_file = read_i32(&mut r, "n_vocab")?;
        let n_chunk = read_i32(&mut r, "n_chunk")?;
        ensure!(n_ctx >= 4 && n_chunk >= 1, "{}: bad header (n_ctx {n_ctx}, n_chunk {n_chunk})", path.display());
        ensure!(
            nv_file as usize == n_vocab,
            "{}: inconsistent vocabulary ({nv_file} vs the model's {n_vocab})",
            path.display()
        );
        let n =
            (n_ctx as usize).checked_mul(n_chunk as usize).filter(|&n| n < (1 << 31)).context("header too large")?;
        let mut raw = vec![0u8; n * 4];
        r.read_exact(&mut raw).context("reading the evaluation tokens")?;
        let toks: Vec<u32> = raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        if let Some(t) = toks.iter().find(|&&t| t as usize >= n_vocab) {
            bail!("{}: token id {t} is outside the vocabulary", path.display());
        }
        base_in = Some(r);
        (n_ctx as usize, toks, n_chunk as usize)
    } else {
        let f = a.file.as_ref().context("no text: give -f FILE")?;
        let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let t0 = Instant::now();
        let toks = l.tok.encode(&text, true, false)?;
        eprintln!("tokenization took {:.1} ms ({} tokens)", t0.elapsed().as_secs_f64() * 1e3, toks.len());
        let n_ctx = a.model.ctx_size.unwrap_or(512);
        ensure!(n_ctx >= 4, "perplexity needs --ctx-size of at least 4");
        let n_chunk = chunk_count(toks.len(), n_ctx, a.chunks, f)?;
        (n_ctx, toks, n_chunk)
    };
    let n_chunk = if a.kl && a.chunks >= 0 { n_chunk.min(a.chunks as usize) } else { n_chunk };
    let mut state = engine::state_with_ctx(&l, &a.model, n_ctx)?;
    let first = n_ctx / 2;
    let scored = n_ctx - 1 - first;
    let stride = nv(n_vocab);
    let mut base_out = match (&a.kl_base, a.kl) {
        (Some(p), false) => {
            let mut w = BufWriter::new(gguf_format::AtomicFile::create(p)?);
            w.write_all(b"_logits_")?;
            for v in [n_ctx as i32, n_vocab as i32, n_chunk as i32] {
                w.write_all(&v.to_le_bytes())?;
            }
            for &t in &tokens[..n_chunk * n_ctx] {
                w.write_all(&t.to_le_bytes())?;
            }
            Some(w)
        }
        _ => None,
    };
    eprintln!("calculating perplexity over {n_chunk} chunks, n_ctx={n_ctx}, batch_size={}", a.model.ubatch);
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    let mut kld = Kld::default();
    let mut kld_values = Vec::new();
    let mut p_diffs = Vec::new();
    let mut row_u16 = vec![0u16; scored * stride];
    if a.kl {
        eprintln!("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p");
    }
    for i in 0..n_chunk {
        if engine::INTERRUPTED.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let t0 = Instant::now();
        let chunk = &tokens[i * n_ctx..(i + 1) * n_ctx];
        let mut input = chunk.to_vec();
        if add_bos {
            input[0] = bos.context("the tokenizer adds BOS but has no BOS token")?;
        }
        state.truncate(0);
        let logits = l.model.forward(state.as_mut(), &input, Logits::All)?;
        if i == 0 {
            let s = t0.elapsed().as_secs_f64();
            eprintln!("{s:.2} seconds per pass - ETA {:.2} minutes", s * n_chunk as f64 / 60.0);
        }
        let row = |p: usize| &logits[p * n_vocab..(p + 1) * n_vocab];
        if let Some(r) = base_in.as_mut() {
            let mut raw = vec![0u8; row_u16.len() * 2];
            r.read_exact(&mut raw).with_context(|| format!("reading log-probs for chunk {i}"))?;
            for (o, c) in row_u16.iter_mut().zip(raw.chunks_exact(2)) {
                *o = u16::from_le_bytes([c[0], c[1]]);
            }
            for k in 0..scored {
                let p = first + k;
                let (kv, pd) = kld_one(row(p), &row_u16[k * stride..(k + 1) * stride], chunk[p + 1] as usize, &mut kld);
                kld_values.push(kv as f32);
                p_diffs.push(pd);
            }
            let (lp, lpu) = mean_unc(kld.sum_nll, kld.sum_nll2, kld.count);
            let (lb, lbu) = mean_unc(kld.sum_nll_base, kld.sum_nll_base2, kld.count);
            let cov = covariance(kld.sum_nll, kld.sum_nll_base, kld.sum_nll_nll_base, kld.count);
            let (kl, klu) = mean_unc(kld.sum_kld, kld.sum_kld2, kld.count);
            let (mse, mseu) = mean_unc(kld.sum_p_diff2, kld.sum_p_diff4, kld.count);
            let top = kld.n_same_top as f64 / kld.count as f64;
            println!(
                "{:4}    {:9.4} ± {:9.4}    {:10.5} ± {:10.5}    {:10.5} ± {:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %",
                i + 1,
                lp.exp(),
                lp.exp() * lpu,
                lp - lb,
                (lpu * lpu + lbu * lbu - 2.0 * cov).sqrt(),
                kl,
                klu,
                100.0 * mse.sqrt(),
                100.0 * 0.5 / mse.sqrt() * mseu,
                100.0 * top,
                100.0 * (top * (1.0 - top) / (kld.count as f64 - 1.0)).sqrt()
            );
        } else {
            for k in 0..scored {
                let p = first + k;
                let tok = chunk[p + 1] as usize;
                let v = if base_out.is_some() {
                    encode_log_probs(row(p), &mut row_u16[k * stride..(k + 1) * stride], tok)
                } else {
                    nll_of(row(p), tok)
                };
                nll += v;
                nll2 += v * v;
            }
            if let Some(w) = base_out.as_mut() {
                for v in &row_u16 {
                    w.write_all(&v.to_le_bytes())?;
                }
            }
            count += scored;
            print!("[{}]{:.4},", i + 1, (nll / count as f64).exp());
            std::io::stdout().flush().ok();
        }
    }
    println!();
    if let Some(w) = base_out {
        let f = w.into_inner().map_err(|e| e.into_error())?;
        let path = f.target().to_path_buf();
        f.commit()?;
        eprintln!("saved all log-probabilities to {}", path.display());
    }
    if !a.kl {
        let n = count as f64;
        let m = nll / n;
        let v = nll2 / n - m * m;
        if v > 0.0 {
            println!("Final estimate: PPL = {:.4} +/- {:.5}", m.exp(), (v / (n - 1.0)).sqrt() * m.exp());
        } else {
            bail!("unexpected negative standard deviation of log(prob)");
        }
        return Ok(());
    }
    if kld.count < 100 {
        return Ok(());
    }
    kld_values.sort_by(f32::total_cmp);
    p_diffs.sort_by(f32::total_cmp);
    let (lp, lpu) = mean_unc(kld.sum_nll, kld.sum_nll2, kld.count);
    let (ppl, pplu) = (lp.exp(), lp.exp() * lpu);
    let (lb, lbu) = mean_unc(kld.sum_nll_base, kld.sum_nll_base2, kld.count);
    let (pb, pbu) = (lb.exp(), lb.exp() * lbu);
    let cov = covariance(kld.sum_nll, kld.sum_nll_base, kld.sum_nll_nll_base, kld.count);
    let ratio_unc = (lpu * lpu + lbu * lbu - 2.0 * cov).sqrt();
    println!("====== Perplexity statistics ======");
    println!("Mean PPL(Q)                   : {ppl:10.6} ± {pplu:10.6}");
    println!("Mean PPL(base)                : {pb:10.6} ± {pbu:10.6}");
    println!("Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%", 100.0 * cov / (lpu * lbu));
    println!("Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {ratio_unc:10.6}", lp - lb);
    println!("Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}", (lp - lb).exp(), (lp - lb).exp() * ratio_unc);
    let pcov = ppl * pb * cov;
    println!(
        "Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6}",
        ppl - pb,
        (pplu * pplu + pbu * pbu - 2.0 * pcov).sqrt()
    );
    println!();
    println!("====== KL divergence statistics ======");
    let (kl, klu) = mean_unc(kld.sum_kld, kld.sum_kld2, kld.count);
    println!("Mean    KLD: {kl:10.6} ± {klu:10.6}");
    let v = &kld_values;
    println!("Maximum KLD: {:10.6}", v[v.len() - 1]);
    for (label, f) in [("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.9)] {
        println!("{label}   KLD: {:10.6}", percentile(v, f));
    }
    println!("Median  KLD: {:10.6}", median(v));
    for (label, f) in [("10.0%", 0.1), (" 5.0%", 0.05), (" 1.0%", 0.01), (" 0.1%", 0.001)] {
        println!("{label}   KLD: {:10.6}", percentile(v, f));
    }
    println!("Minimum KLD: {:10.6}", v[0]);
    println!();
    println!("====== Token probability statistics ======");
    let (pd, pdu) = mean_unc(kld.sum_p_diff, kld.sum_p_diff2, kld.count);
    println!("Mean    Δp: {:6.3} ± {:5.3} %", 100.0 * pd, 100.0 * pdu);
    let v = &p_diffs;
    println!("Maximum Δp: {:6.3}%", 100.0 * v[v.len() - 1]);
    for (label, f) in [("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.9), ("75.0%", 0.75)] {
        println!("{label}   Δp: {:6.3}%", 100.0 * percentile(v, f));
    }
    println!("Median  Δp: {:6.3}%", 100.0 * median(v));
    for (label, f) in [("25.0%", 0.25), ("10.0%", 0.1), (" 5.0%", 0.05), (" 1.0%", 0.01), (" 0.1%", 0.001)] {
        println!("{label}   Δp: {:6.3}%", 100.0 * percentile(v, f));
    }
    println!("Minimum Δp: {:6.3}%", 100.0 * v[0]);
    let (mse, mseu) = mean_unc(kld.sum_p_diff2, kld.sum_p_diff4, kld.count);
    println!("RMS Δp    : {:6.3} ± {:5.3} %", 100.0 * mse.sqrt(), 100.0 * 0.5 / mse.sqrt() * mseu);
    let top = kld.n_same_top as f64 / kld.count as f64;
    println!(
        "Same top p: {:6.3} ± {:5.3} %",
        100.0 * top,
        100.0 * (top * (1.0 - top) / (kld.count as f64 - 1.0)).sqrt()
    );
    Ok(())
}
