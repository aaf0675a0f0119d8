//! `gguf run`, `chat` and `logits`: the engine behind the command line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use gguf_models::residency::Residency;
use gguf_models::{CacheType, Logits, Model, State, StateOptions};
use gguf_tokenizer::Tokenizer;

use crate::fetch;
use crate::sampling::SampleArgs;

/// Set by the Ctrl-C handler; generation loops poll it.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// A count of at least 1.
fn positive(s: &str) -> std::result::Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Model and context options shared by the engine commands (llama.cpp's names).
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// The GGUF file, or a name of `gguf fetch --list` (fetched on first use); without it,
    /// the default model.
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// Threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Context size in tokens (0 = the model's training context; default 4096, and for
    /// `bench` the test's prompt + generated tokens, as llama-bench sizes it).
    #[arg(short = 'c', long = "ctx-size")]
    pub ctx_size: Option<usize>,
    /// Logical batch size, as llama.cpp's `-b`: at most `min(b, ub)` tokens are evaluated
    /// at once; `gguf imatrix` evaluates `b / c` chunks together, as llama-imatrix does
    /// (which fixes the order its squares are summed in).
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048, value_parser = positive)]
    pub batch: usize,
    /// Largest number of tokens evaluated at once (physical batch).
    #[arg(long = "ubatch-size", short = 'u', default_value_t = 512, value_parser = positive)]
    pub ubatch: usize,
    /// K cache type: f16, f32 or q8_0.
    #[arg(long = "cache-type-k", short = 'k', default_value = "f16")]
    pub cache_type_k: String,
    /// V cache type: f16, f32 or q8_0.
    #[arg(long = "cache-type-v", default_value = "f16")]
    pub cache_type_v: String,
    /// Read the weights into memory instead of mapping the file (llama.cpp's `--no-mmap`;
    /// also `GGUF_MMAP=0`): decode speed whatever state the page cache is in, at a slower
    /// load.
    #[arg(long = "no-mmap")]
    pub no_mmap: bool,
    /// Map the file (the default; llama.cpp's `--mmap`).
    #[arg(long = "mmap", conflicts_with = "no_mmap")]
    pub mmap: bool,
}

/// `gguf run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: crate::device::DeviceArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// The prompt.
    #[arg(short = 'p', long)]
    prompt: Option<String>,
    /// Read the prompt from a file (`-` = standard input).
    #[arg(short = 'f', long = "file", conflicts_with = "prompt")]
    file: Option<PathBuf>,
    /// Process escapes (\n, \r, \t, \', \", \\, \xHH) in the prompt and reverse prompts
    /// (the default, as llama.cpp).
    #[arg(short = 'e', long = "escape", overrides_with = "no_escape")]
    escape: bool,
    /// Take the prompt and reverse prompts literally.
    #[arg(long = "no-escape")]
    no_escape: bool,
    /// Prompt as token ids instead of text (`1,2,3`).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["prompt", "file"])]
    tokens: Option<Vec<u32>>,
    /// Tokens to generate (-1 = until end of generation or a full context).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    /// Stop when the output contains this text (repeatable).
    #[arg(short = 'r', long = "reverse-prompt")]
    reverse_prompt: Vec<String>,
    /// Do not add the BOS token even if the model asks for it.
    #[arg(long = "no-bos")]
    no_bos: bool,
    /// A system prompt: the prompt is then sent as a user message through the model's chat
    /// template (ChatML if it has none), as llama-cli's `-sys` does.
    #[arg(long = "system-prompt", visible_alias = "sys")]
    system_prompt: Option<String>,
    /// Never stop at end-of-generation tokens (they are masked out), as llama.cpp's flag.
    #[arg(long = "ignore-eos")]
    ignore_eos: bool,
    /// Print one JSON object (token ids, text, timings) instead of streaming text.
    #[arg(long)]
    json: bool,
    /// Print the prompt before the generated text (the default, as llama-completion).
    #[arg(long = "display-prompt", overrides_with = "no_display_prompt")]
    display_prompt: bool,
    /// Print only the generated text.
    #[arg(long = "no-display-prompt")]
    no_display_prompt: bool,
    /// Constrain the output with a GBNF grammar (llama.cpp's syntax; `%llguidance` for Lark).
    #[arg(long, conflicts_with_all = ["grammar_file", "json_schema"])]
    grammar: Option<String>,
    /// Read the GBNF grammar from a file.
    #[arg(long = "grammar-file", conflicts_with = "json_schema")]
    grammar_file: Option<PathBuf>,
    /// Constrain the output to JSON matching this JSON schema (`{}` for any JSON value).
    #[arg(short = 'j', long = "json-schema")]
    json_schema: Option<String>,
}

/// `gguf logits`.
#[derive(Args, Debug)]
pub struct LogitsArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: crate::device::DeviceArgs,
    /// The prompt.
    #[arg(short = 'p', long)]
    prompt: Option<String>,
    /// Token ids instead of text (`1,2,3`).
    #[arg(long, value_delimiter = ',', conflicts_with = "prompt")]
    tokens: Option<Vec<u32>>,
    /// Output file: raw little-endian f32, `[n_tokens][n_vocab]`.
    #[arg(short = 'o', long)]
    output: PathBuf,
}

/// A loaded model with its tokenizer.
pub struct Loaded {
    /// The mapped model: one file or every shard of a split model (metadata from the first).
    pub file: Arc<gguf_format::SplitGguf>,
    /// The model.
    pub model: Box<dyn Model>,
    /// Its tokenizer.
    pub tok: Tokenizer,
    /// Load time in milliseconds.
    pub load_ms: f64,
}

fn progress(line: &str) {
    eprintln!("{line}");
}

/// The file `-m` names: a path, or a name of `gguf fetch --list` that is not a file here
/// (that model, fetched on first use); without `-m`, the default model.
pub fn model_path(m: Option<&Path>) -> Result<PathBuf> {
    Ok(match m {
        Some(p) if !p.exists() && fetch::model(&p.to_string_lossy()).is_ok() => {
            fetch::ensure(fetch::model(&p.to_string_lossy())?, &mut progress)?
        }
        Some(p) => p.to_path_buf(),
        None => fetch::ensure(fetch::default_model(), &mut progress)?,
    })
}

/// Resolves `-m` (or the default model) and loads model and tokenizer.
pub fn load(args: &ModelArgs) -> Result<Loaded> {
    if args.no_mmap || args.mmap {
        let r = if args.no_mmap { Residency::Resident } else { Residency::Mapped };
        gguf_models::residency::set_residency(r);
    }
    let path = model_path(args.model.as_deref())?;
    let t0 = Instant::now();
    let (file, model) = gguf_models::load(&path).with_context(|| format!("loading {}", path.display()))?;
    let tok = Tokenizer::from_gguf(file.metadata()).with_context(|| format!("tokenizer of {}", path.display()))?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(Loaded { file, model, tok, load_ms })
}

pub(crate) fn state(l: &Loaded, args: &ModelArgs) -> Result<Box<dyn State>> {
    state_with_ctx(l, args, args.ctx_size.unwrap_or(4096))
}

/// The thread count of `-t` (default: every core): at least 1, at most
/// [`gguf_models::MAX_THREADS`] (llama.cpp's cap), with a warning when cut.
pub fn threads(requested: Option<usize>) -> Result<usize> {
    let n = requested.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if n == 0 {
        bail!("--threads must be at least 1");
    }
    if n > gguf_models::MAX_THREADS {
        eprintln!("warning: --threads {n} is more than {}: using {0}", gguf_models::MAX_THREADS);
        return Ok(gguf_models::MAX_THREADS);
    }
    Ok(n)
}

pub(crate) fn state_with_ctx(l: &Loaded, args: &ModelArgs, n_ctx: usize) -> Result<Box<dyn State>> {
    let opts = StateOptions {
        n_ctx,
        n_threads: threads(args.threads)?,
        cache_type_k: CacheType::parse(&args.cache_type_k)?,
        cache_type_v: CacheType::parse(&args.cache_type_v)?,
        n_ubatch: args.ubatch.min(args.batch),
        pool: None,
    };
    let train = l.model.n_ctx_train();
    if args.ctx_size.is_some() && n_ctx > train && train > 0 {
        // llama.cpp: "n_ctx_seq (N) > n_ctx_train (M) -- possible training context overflow"
        eprintln!("warning: -c {n_ctx} is more than the {train} positions the model was trained for; quality may drop past them");
    }
    Ok(l.model.new_state(&opts)?)
}

/// Peak resident memory of this process (VmHWM), bytes.
pub fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).map(|kb| kb * 1024))
        })
        .unwrap_or(0)
}

fn prompt_tokens(
    l: &Loaded,
    prompt: Option<&str>,
    file: Option<&Path>,
    tokens: Option<&[u32]>,
    no_bos: bool,
) -> Result<Vec<u32>> {
    if let Some(t) = tokens {
        return Ok(t.to_vec());
    }
    let text = match (prompt, file) {
        (Some(p), _) => p.to_string(),
        (None, Some(f)) => std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
        (None, None) => bail!("no prompt: give -p TEXT, -f FILE or --tokens"),
    };
    let mut ids = l.tok.encode(&text, !no_bos, true)?;
    if no_bos && l.tok.add_bos() {
        if let (Some(b), Some(&first)) = (l.tok.bos(), ids.first()) {
            if first == b {
                ids.remove(0);
            }
        }
    }
    Ok(ids)
}

/// The `--grammar` / `--grammar-file` / `--json-schema` constraint, if any.
fn constraint_of(l: &Loaded, args: &RunArgs) -> Result<Option<gguf_grammar::Constraint>> {
    let spec = match (&args.grammar, &args.grammar_file, &args.json_schema) {
        (Some(g), _, _) => gguf_grammar::Spec::Gbnf(g.clone()),
        (_, Some(f), _) => gguf_grammar::Spec::Gbnf(
            std::fs::read_to_string(f).with_context(|| format!("reading --grammar-file {}", f.display()))?,
        ),
        (_, _, Some(j)) => {
            let v: serde_json::Value = serde_json::from_str(j).context("--json-schema is not valid JSON")?;
            gguf_grammar::Spec::JsonSchema(gguf_server::api::bounded_json_whitespace(v))
        }
        _ => return Ok(None),
    };
    let vocab = std::sync::Arc::new(gguf_grammar::Vocab::from_tokenizer(&l.tok)?);
    Ok(Some(gguf_grammar::Constraint::new(&vocab, &spec)?))
}

/// llama.cpp's `string_process_escapes`: `\n \r \t \' \" \\` and `\xHH`; any other
/// backslash stays as written.
pub fn process_escapes(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            i += 1;
            match b[i] {
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'\'' => out.push(b'\''),
                b'"' => out.push(b'"'),
                b'\\' => out.push(b'\\'),
                b'x' if i + 2 < b.len() && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit() => {
                    let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("00");
                    out.push(u8::from_str_radix(hex, 16).unwrap_or(0));
                    i += 2;
                }
                c => out.extend_from_slice(&[b'\\', c]),
            }
        } else {
            out.push(b[i]);
        }
        i += 1;
    }
    // a `\xHH` may leave bytes that are not UTF-8; the tokenizer takes text
    String::from_utf8_lossy(&out).into_owned()
}

impl RunArgs {
    /// The prompt of `-p` or `-f` (`-` = standard input; one trailing newline dropped, as
    /// llama.cpp does), escapes processed unless `--no-escape`.
    fn prompt_text(&self) -> Result<Option<String>> {
        let text = match (&self.prompt, &self.file) {
            (Some(p), _) => p.clone(),
            (None, Some(f)) => {
                let mut t = if f.as_os_str() == "-" {
                    let mut t = String::new();
                    std::io::Read::read_to_string(&mut std::io::stdin(), &mut t)
                        .context("reading the prompt from stdin")?;
                    t
                } else {
                    std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
                };
                if t.ends_with('\n') {
                    t.pop();
                }
                t
            }
            (None, None) => return Ok(None),
        };
        Ok(Some(if self.no_escape { text } else { process_escapes(&text) }))
    }

    fn reverse_prompts(&self) -> Vec<String> {
        self.reverse_prompt.iter().map(|r| if self.no_escape { r.clone() } else { process_escapes(r) }).collect()
    }
}

/// `gguf run`.
pub fn run(args: &RunArgs) -> Result<()> {
    args.device.check()?;
    let l = load(&args.model)?;
    let mut st = state(&l, &args.model)?;
    let prompt = match &args.system_prompt {
        Some(sys) => {
            let Some(user) = args.prompt_text()? else {
                bail!("--system-prompt needs a prompt (-p or -f) for the user message")
            };
            let template = match gguf_tokenizer::chat::ChatTemplate::from_gguf_with(l.file.metadata(), &l.tok)? {
                Some(t) => t,
                None => gguf_tokenizer::chat::ChatTemplate::builtin("chatml")?,
            };
            let msgs =
                [gguf_tokenizer::chat::Message::new("system", sys), gguf_tokenizer::chat::Message::new("user", &user)];
            l.tok.encode(&template.render(&msgs, true, None)?, !args.no_bos, true)?
        }
        None => prompt_tokens(&l, args.prompt_text()?.as_deref(), None, args.tokens.as_deref(), args.no_bos)?,
    };
    if prompt.is_empty() {
        bail!("the prompt is empty (no tokens)");
    }
    if prompt.len() > st.n_ctx() {
        bail!("the prompt is {} tokens, longer than the context of {} (use a larger -c)", prompt.len(), st.n_ctx());
    }
    let (mut sampler, drawn_seed) = crate::sampling::sampler(&args.sample, &l.tok);
    for &t in &prompt {
        sampler.accept(t);
    }
    let mut constraint = constraint_of(&l, args)?;
    let t0 = Instant::now();
    let mut logits = l.model.forward(st.as_mut(), &prompt, Logits::Last)?;
    let prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let mut out_ids = Vec::new();
    let mut text = Vec::<u8>::new();
    let mut stream = l.tok.stream_decoder(false);
    let reverse = args.reverse_prompts();
    let mut stdout = std::io::stdout().lock();
    if let Some(seed) = drawn_seed {
        eprintln!("sampler seed: {seed}");
    }
    if !args.json && !args.no_display_prompt {
        // llama-completion echoes the prompt's pieces (control tokens hidden)
        for &t in &prompt {
            stdout.write_all(&l.tok.token_to_piece(t, false)?)?;
        }
        stdout.flush()?;
    }
    let limit = if args.n_predict < 0 { usize::MAX } else { args.n_predict as usize };
    let mut stop_reason = "length";
    let eog = l.tok.eog_ids();
    while out_ids.len() < limit {
        if INTERRUPTED.load(Ordering::Relaxed) {
            stop_reason = "interrupted";
            break;
        }
        if args.ignore_eos {
            for &e in &eog {
                if let Some(x) = logits.get_mut(e as usize) {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
        if let Some(c) = constraint.as_mut() {
            c.apply(&mut logits)?;
        }
        let id = sampler.sample(&logits);
        if let Some(c) = constraint.as_mut() {
            c.accept(id)?;
        }
        if l.tok.is_eog(id) {
            stop_reason = "eog";
            break;
        }
        sampler.accept(id);
        out_ids.push(id);
        let piece = stream.push(id)?;
        text.extend_from_slice(piece.as_bytes());
        if !args.json {
            stdout.write_all(piece.as_bytes())?;
            stdout.flush()?;
        }
        if reverse.iter().any(|r| !r.is_empty() && String::from_utf8_lossy(&text).contains(r.as_str())) {
            stop_reason = "reverse-prompt";
            break;
        }
        if out_ids.len() >= limit {
            break;
        }
        if st.n_past() + 1 > st.n_ctx() {
            stop_reason = "context";
            break;
        }
        logits = l.model.forward(st.as_mut(), &[id], Logits::Last)?;
    }
    let tail = stream.finish();
    text.extend_from_slice(tail.as_bytes());
    let gen_ms = t1.elapsed().as_secs_f64() * 1e3;
    let n_gen = out_ids.len();
    let pp_tps = prompt.len() as f64 / (prompt_ms / 1e3);
    let tg_tps = if gen_ms > 0.0 { n_gen as f64 / (gen_ms / 1e3) } else { 0.0 };
    if args.json {
        let v = serde_json::json!({
            "prompt_tokens": prompt,
            "tokens": out_ids,
            "text": String::from_utf8_lossy(&text),
            "stop": stop_reason,
            "timings": {
                "load_ms": l.load_ms,
                "prompt_ms": prompt_ms,
                "prompt_tokens_per_s": pp_tps,
                "gen_ms": gen_ms,
                "gen_tokens_per_s": tg_tps,
                "peak_rss_bytes": peak_rss(),
            }
        });
        writeln!(stdout, "{v}")?;
    } else {
        stdout.write_all(tail.as_bytes())?;
        writeln!(stdout)?;
        stdout.flush()?;
        eprintln!(
            "\n[{}] load {:.0} ms | prompt {} tokens, {:.1} tok/s | generated {} tokens, {:.1} tok/s | peak RSS {:.1} MiB | stop: {stop_reason}",
            l.model.describe(),
            l.load_ms,
            prompt.len(),
            pp_tps,
            n_gen,
            tg_tps,
            peak_rss() as f64 / 1048576.0
        );
    }
    if stop_reason == "interrupted" {
        bail!("interrupted (Ctrl-C) after {n_gen} generated tokens");
    }
    Ok(())
}

/// `gguf logits`.
pub fn logits(args: &LogitsArgs) -> Result<()> {
    args.device.check()?;
    let l = load(&args.model)?;
    let mut st = state(&l, &args.model)?;
    let toks = prompt_tokens(&l, args.prompt.as_deref(), None, args.tokens.as_deref(), false)?;
    if toks.is_empty() {
        bail!("no tokens to evaluate");
    }
    let t0 = Instant::now();
    let out = l.model.forward(st.as_mut(), &toks, Logits::All)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut bytes = Vec::with_capacity(out.len() * 4);
    for v in &out {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    crate::write_atomic(&args.output, &bytes)?;
    eprintln!(
        "wrote {} x {} logits to {} ({:.0} ms, {:.1} tok/s)",
        toks.len(),
        l.model.n_vocab(),
        args.output.display(),
        ms,
        toks.len() as f64 / (ms / 1e3)
    );
    Ok(())
}
