//! `gguf advise`: which recipe to ship. Every candidate recipe whose file plus KV cache
//! and compute buffers (at `-c`) fits `--budget` is quantized from the source, and
//! measured against the source on text held apart from the imatrix calibration text:
//! mean KL divergence, top-1 agreement ("same top p") and perplexity, with llama-perplexity's
//! arithmetic. Recipes that need an importance matrix get one computed (llama-imatrix's
//! way) from the first half of the text; the second half is the evaluation text. The
//! lowest mean KL that fits is marked (ties: the smaller file).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use gguf_format::SplitGguf;
use gguf_models::Logits;
use gguf_quantize::{recipe, Error as QError, Imatrix, Params};

use crate::engine::{self, ModelArgs};
use crate::perplexity::{encode_log_probs, kld_one, mean_unc, nv, Kld};

/// The recipes tried by default (llama.cpp's common choices, largest first).
const DEFAULT_RECIPES: &[&str] = &[
    "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q4_K_M", "Q4_K_S", "IQ4_XS", "IQ4_NL", "Q4_0", "Q3_K_L", "Q3_K_M", "IQ3_M",
    "IQ3_XS", "Q3_K_S", "IQ3_XXS", "Q2_K", "IQ2_M", "IQ2_S",
];

/// Arguments of `gguf advise`.
#[derive(Args, Debug)]
pub struct AdviseArgs {
    /// The source model (F32 / F16 / BF16) and threads; `-c` is the deployment context the
    /// memory budget is checked at (default 4096).
    #[command(flatten)]
    pub model: ModelArgs,
    /// Calibration + evaluation text.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Memory budget, e.g. `6GiB`, `800MiB`, `1.5G` (weights + KV cache + compute).
    #[arg(long)]
    pub budget: String,
    /// Comma-separated recipes to try (`all` = every registered recipe).
    #[arg(long)]
    pub recipes: Option<String>,
    /// Evaluation chunk size in tokens.
    #[arg(long = "eval-ctx", default_value_t = 512)]
    pub eval_ctx: usize,
    /// Evaluation chunks (from the second half of the text).
    #[arg(long = "chunks", default_value_t = 4)]
    pub chunks: usize,
    /// Keep the quantized files in this folder (default: a temporary folder, removed).
    #[arg(long)]
    pub keep: Option<PathBuf>,
    /// Allow a quantized source.
    #[arg(long)]
    pub allow_requantize: bool,
    /// One JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Parses `6GiB`, `800MiB`, `1.5G`, `512M`, `123456` (bytes).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().with_context(|| format!("--budget: bad size {s:?}"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" | "kb" => 1024.0,
        "m" | "mib" | "mb" => 1048576.0,
        "g" | "gib" | "gb" => 1073741824.0,
        "t" | "tib" | "tb" => 1099511627776.0,
        u => bail!("--budget: unknown unit {u:?} in {s:?} (use KiB, MiB, GiB)"),
    };
    ensure!(v > 0.0, "--budget must be positive");
    Ok((v * mult) as u64)
}

struct Row {
    recipe: &'static str,
    file_bytes: u64,
    total_bytes: u64,
    imatrix: bool,
    kld: Option<(f64, f64, f64)>, // mean KL, same-top fraction, PPL
    note: String,
}

fn eval_tokens(l: &engine::Loaded, text: &str, n_ctx: usize, chunks: usize) -> Result<Vec<Vec<u32>>> {
    let toks = l.tok.encode(text, true, false)?;
    let n = (toks.len() / n_ctx).min(chunks);
    ensure!(n >= 1, "the evaluation half of the text has {} tokens, less than one chunk of {n_ctx}", toks.len());
    let bos = l.tok.bos();
    Ok((0..n)
        .map(|i| {
            let mut c = toks[i * n_ctx..(i + 1) * n_ctx].to_vec();
            if let (true, Some(b)) = (l.tok.add_bos(), bos) {
                c[0] = b;
            }
            c
        })
        .collect())
}

/// Runs `gguf advise`.
pub fn run(a: &AdviseArgs) -> Result<()> {
    let budget = parse_size(&a.budget)?;
    let src_path = a.model.model.clone().context("advise needs -m SOURCE (an F32/F16/BF16 GGUF)")?;
    let text = std::fs::read_to_string(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    let mut mid = text.len() / 2;
    while !text.is_char_boundary(mid) {
        mid += 1;
    }
    let (calib, eval) = text.split_at(mid);
    let names: Vec<&'static recipe::Recipe> = match a.recipes.as_deref() {
        Some("all") => recipe::all().iter().copied().filter(|r| !r.copy_only).collect(),
        Some(list) => list.split(',').map(|n| recipe::lookup(n.trim())).collect::<Result<_, _>>()?,
        None => DEFAULT_RECIPES.iter().map(|n| recipe::lookup(n)).collect::<Result<_, _>>()?,
    };
    let tmp = tempfile::Builder::new().prefix("gguf-advise").tempdir()?;
    let out_dir = a.keep.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;

    // The source's view of the evaluation text.
    let src = engine::load(&a.model)?;
    let chunks = eval_tokens(&src, eval, a.eval_ctx, a.chunks)?;
    let n_vocab = src.model.n_vocab();
    let stride = nv(n_vocab);
    let first = a.eval_ctx / 2;
    let scored = a.eval_ctx - 1 - first;
    let mut eval_args = a.model.clone();
    eval_args.ctx_size = Some(a.eval_ctx);
    let mut base = vec![0u16; chunks.len() * scored * stride];
    let mut st = engine::state_with_ctx(&src, &eval_args, a.eval_ctx)?;
    let mut base_nll = 0f64;
    for (c, toks) in chunks.iter().enumerate() {
        st.truncate(0);
        let lg = src.model.forward(st.as_mut(), toks, Logits::All)?;
        for k in 0..scored {
            let p = first + k;
            let row = &lg[p * n_vocab..(p + 1) * n_vocab];
            let o = (c * scored + k) * stride;
            base_nll += encode_log_probs(row, &mut base[o..o + stride], toks[p + 1] as usize);
        }
    }
    let base_ppl = (base_nll / (chunks.len() * scored) as f64).exp();
    drop(st);
    let mem_args = crate::mem::MemArgs {
        model: src_path.clone(),
        ctx: a.model.ctx_size.unwrap_or(4096) as u64,
        parallel: 1,
        cache_type_k: a.model.cache_type_k.clone(),
        cache_type_v: a.model.cache_type_v.clone(),
        ubatch: a.model.ubatch as u64,
        json: false,
    };
    let src_file = SplitGguf::open(&src_path)?;
    let (est, n_ctx) = crate::mem::estimate(&src_file, &mem_args)?;
    drop(src);

    let mut imatrix: Option<Imatrix> = None;
    let mut rows = Vec::new();
    let cancel = AtomicBool::new(false);
    for r in names {
        if engine::INTERRUPTED.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let mut p = Params::new(r);
        p.nthread = a.model.threads.unwrap_or(0);
        p.allow_requantize = a.allow_requantize;
        p.dry_run = true;
        let dry = gguf_quantize::plan(&src_file, &p)?;
        let needs = dry.needs_imatrix;
        if needs && imatrix.is_none() {
            let calib_path = tmp.path().join("calibration.txt");
            std::fs::write(&calib_path, calib)?;
            let im_path = tmp.path().join("imatrix.gguf");
            eprintln!("computing an importance matrix on the first half of {}", a.file.display());
            crate::imatrix::run(&crate::imatrix::ImatrixArgs {
                model: eval_args.clone(),
                file: Some(calib_path),
                output: im_path.clone(),
                output_format: "gguf".into(),
                chunks: -1,
                skip_chunks: 0,
                in_files: Vec::new(),
                process_output: false,
                parse_special: false,
                no_ppl: true,
            })
            .context("computing the importance matrix (needs ≥ 2 chunks of --eval-ctx tokens in the first half)")?;
            imatrix = Some(Imatrix::load(&im_path)?);
        }
        p.dry_run = false;
        if needs {
            p.imatrix = imatrix.clone();
        }
        let plan = match gguf_quantize::plan(&src_file, &p) {
            Ok(plan) => plan,
            Err(e @ (QError::Requantize { .. } | QError::Convert { .. } | QError::Rule { .. })) => {
                rows.push(Row {
                    recipe: r.name,
                    file_bytes: 0,
                    total_bytes: 0,
                    imatrix: needs,
                    kld: None,
                    note: e.to_string(),
                });
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let file_bytes = plan.size_out();
        let total = file_bytes + est.kv + est.compute;
        if total > budget {
            rows.push(Row {
                recipe: r.name,
                file_bytes,
                total_bytes: total,
                imatrix: needs,
                kld: None,
                note: "over budget".into(),
            });
            continue;
        }
        let out = out_dir.join(format!(
            "{}.{}.gguf",
            src_path.file_stem().map(|s| s.to_string_lossy()).unwrap_or_default(),
            r.name
        ));
        eprintln!("{}: quantizing ({:.1} MiB) and evaluating", r.name, file_bytes as f64 / 1048576.0);
        gguf_quantize::write(&src_file, &plan, &p, &out, &cancel, &|_| {})?;
        let mut qa = eval_args.clone();
        qa.model = Some(out.clone());
        let q = engine::load(&qa)?;
        let mut st = engine::state_with_ctx(&q, &qa, a.eval_ctx)?;
        let mut k = Kld::default();
        for (c, toks) in chunks.iter().enumerate() {
            st.truncate(0);
            let lg = q.model.forward(st.as_mut(), toks, Logits::All)?;
            for j in 0..scored {
                let pos = first + j;
                let o = (c * scored + j) * stride;
                kld_one(&lg[pos * n_vocab..(pos + 1) * n_vocab], &base[o..o + stride], toks[pos + 1] as usize, &mut k);
            }
        }
        let (kl, _) = mean_unc(k.sum_kld, k.sum_kld2, k.count);
        let ppl = (k.sum_nll / k.count as f64).exp();
        let top = k.n_same_top as f64 / k.count as f64;
        rows.push(Row {
            recipe: r.name,
            file_bytes,
            total_bytes: total,
            imatrix: needs,
            kld: Some((kl, top, ppl)),
            note: String::new(),
        });
        drop(st);
        drop(q);
        if a.keep.is_none() {
            let _ = std::fs::remove_file(&out);
        }
    }
    let best = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.kld.map(|(kl, _, _)| (i, kl, r.file_bytes)))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.2.cmp(&b.2)))
        .map(|(i, _, _)| i);
    if best.is_none() {
        let smallest = rows.iter().filter(|r| r.total_bytes > 0).map(|r| r.total_bytes).min().unwrap_or(0);
        bail!(
            "nothing fits in {} at -c {n_ctx}: the smallest candidate needs {:.1} MiB (weights + KV {:.1} MiB + compute {:.1} MiB)",
            a.budget,
            smallest as f64 / 1048576.0,
            est.kv as f64 / 1048576.0,
            est.compute as f64 / 1048576.0
        );
    }
    let mib = |b: u64| b as f64 / 1048576.0;
    if a.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                serde_json::json!({
                    "recipe": r.recipe, "file_bytes": r.file_bytes, "total_bytes": r.total_bytes, "imatrix": r.imatrix,
                    "fits": r.kld.is_some(), "mean_kld": r.kld.map(|x| x.0), "same_top": r.kld.map(|x| x.1),
                    "ppl": r.kld.map(|x| x.2), "best": Some(i) == best, "note": r.note,
                })
            })
            .collect();
        let j = serde_json::json!({"budget_bytes": budget, "n_ctx": n_ctx, "base_ppl": base_ppl,
            "eval_tokens": chunks.len() * scored, "recipes": v});
        println!("{j}");
        return Ok(());
    }
    println!(
        "budget {} at -c {n_ctx} (KV {:.1} MiB + compute {:.1} MiB); evaluated on {} tokens; source PPL {base_ppl:.4}",
        a.budget,
        mib(est.kv),
        mib(est.compute),
        chunks.len() * scored
    );
    println!(
        "  {:<10} {:>10} {:>12} {:>10} {:>8} {:>10}",
        "recipe", "file MiB", "total MiB", "mean KL", "top-1", "PPL"
    );
    for (i, r) in rows.iter().enumerate() {
        let mark = if Some(i) == best { "*" } else { " " };
        let im = if r.imatrix { " (imatrix)" } else { "" };
        match r.kld {
            Some((kl, top, ppl)) => println!(
                "{mark} {:<10} {:>10.1} {:>12.1} {kl:>10.6} {:>7.2}% {ppl:>10.4}{im}",
                r.recipe,
                mib(r.file_bytes),
                mib(r.total_bytes),
                100.0 * top
            ),
            None if r.total_bytes > 0 => println!(
                "  {:<10} {:>10.1} {:>12.1} {:>10} {:>8} {:>10}{im}",
                r.recipe,
                mib(r.file_bytes),
                mib(r.total_bytes),
                "-",
                "-",
                r.note
            ),
            None => println!("  {:<10} {}", r.recipe, r.note),
        }
    }
    if let Some(b) = best {
        println!("* best fit: {}", rows[b].recipe);
    }
    Ok(())
}
