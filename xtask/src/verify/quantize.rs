//! `cargo xtask verify quantize [--quick] [--filter SUBSTR] [-t N] [--self-check [--plant FROM=TO]]`:
//! the project's `gguf quantize` against llama.cpp's `llama-quantize`, byte for byte.
//!
//! Both tools get the same arguments (`[OPTIONS] IN OUT RECIPE NTHREADS`, or `IN RECIPE
//! NTHREADS` for the default-name cases), each in its own empty folder under
//! `target/xtask-verify/quantize-<pid>/`, which is its working directory and holds its
//! output; the folder is removed after each case (the qwen2.5 F32 outputs are ~2 GB), unless
//! `GGUF_QUANTIZE_KEEP=1` keeps the folders of failing cases. A case passes when
//! - llama-quantize succeeds and ours succeeds, leaving the same file names with the same
//!   bytes (chunked stream compare; on a difference the first differing byte and, from both
//!   files parsed with `gguf_format`, the metadata keys and the tensors that differ: type
//!   ours vs theirs, shape, first differing data byte); or
//! - both refuse (exit ≠ 0) and ours leaves no file where llama-quantize left none
//!   (llama-quantize leaves a partial output behind when it fails after opening it, e.g. on
//!   "requantizing from type q4_1 is disabled"; ours may then leave one or none).
//!
//! The binary under test: `$GGUF_QUANTIZE_BIN` (split on whitespace: program and leading
//! arguments, e.g. `"target/release/gguf quantize"` or a `llama-quantize`), else `--gguf BIN`
//! (run as `BIN quantize ...`), else `target/release/gguf quantize` after
//! `cargo build --release -p gguf-cli --bin gguf`. `--self-check` runs llama-quantize against
//! itself (every case must pass); with `--plant FROM=TO` the "ours" run gets recipe TO
//! where the case says FROM (`--plant Q4_K_M=Q4_K_S`), to show that a difference is found.
//!
//! Sources, made once under `<cache>/quantize-src/` with `llama-quantize
//! --allow-requantize IN OUT F32|BF16`: SmolLM2 (from the cached Q4_1) in F32 and BF16,
//! qwen2.5-coder-0.5b (GQA 7, untied output, 896-wide rows: K-quant fallbacks) in F32,
//! the synthetic qwen3moe in F32, and the synthetic Mixtral-style `llama-moe8`
//! ([`crate::synth`], written in F32); the SmolLM2 Q4_1 file itself for the requantize cases.
//! Importance matrices: SmolLM2's of [`requant_imatrix::ensure_imatrix`] (and a legacy
//! `.dat` one, `llama-imatrix --output-format dat`), the others from `llama-imatrix` on the
//! same text with small contexts, cached beside the sources.
//!
//! Full mode: every recipe of llama-quantize's `QUANT_OPTIONS` on SmolLM2 F32 and on
//! llama-moe8 (those that need one with the imatrix), subsets on the other sources, some
//! recipes both with and without imatrix, and the option combinations (`--pure`,
//! `--output-tensor-type`, `--token-embedding-type`, `--tensor-type`, `--tensor-type-file`,
//! `--leave-output-tensor`, `--prune-layers`, `--override-kv`, `--include-weights`,
//! `--exclude-weights`, `--keep-split`, `--dry-run`, numeric and lower-case recipes,
//! the default output name, refusals). `--quick`: SmolLM2 F32 only, 14 recipes and 6
//! option cases plus the requantize refusal. The last lines: cases × tensors compared,
//! mismatches, and the median time ratio ours / llama.cpp for Q4_K_M, IQ4_XS with
//! imatrix and Q2_K (all cases run with NTHREADS = `-t`, default 2, for both tools).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use gguf_format::{GgufFile, Value};

use super::gguf::{scratch, target_dir};
use super::{workspace_root, Check, Report};
use crate::{llama_cpp, models, requant_imatrix, synth};

/// Options of `verify quantize`.
#[derive(Debug, Clone, Default)]
pub struct QuantOpts {
    /// SmolLM2 F32 only, a subset of the recipes and option cases.
    pub quick: bool,
    /// Only cases whose name contains this.
    pub filter: Option<String>,
    /// NTHREADS passed to both tools.
    pub threads: usize,
    /// Run llama-quantize against itself.
    pub self_check: bool,
    /// `gguf` binary to test (run as `BIN quantize ...`).
    pub gguf: Option<PathBuf>,
    /// `FROM=TO`: ours gets recipe TO where a case says FROM (shows that differences are caught).
    pub plant: Option<String>,
}

/// Every recipe name of llama-quantize's `QUANT_OPTIONS` (tools/quantize/quantize.cpp).
pub const RECIPES: &[&str] = &[
    "Q1_0",
    "Q2_0",
    "Q4_0",
    "Q4_1",
    "MXFP4_MOE",
    "Q5_0",
    "Q5_1",
    "IQ2_XXS",
    "IQ2_XS",
    "IQ2_S",
    "IQ2_M",
    "IQ1_S",
    "IQ1_M",
    "TQ1_0",
    "TQ2_0",
    "Q2_K",
    "Q2_K_S",
    "IQ3_XXS",
    "IQ3_S",
    "IQ3_M",
    "Q3_K",
    "IQ3_XS",
    "Q3_K_S",
    "Q3_K_M",
    "Q3_K_L",
    "IQ4_NL",
    "IQ4_XS",
    "Q4_K",
    "Q4_K_S",
    "Q4_K_M",
    "Q5_K",
    "Q5_K_S",
    "Q5_K_M",
    "Q6_K",
    "Q8_0",
    "F16",
    "BF16",
    "F32",
    "COPY",
];

/// Recipes run with the imatrix: those whose tensors llama-quantize refuses to make without
/// one (IQ1/IQ2, Q2_K_S) and IQ3_XXS/IQ3_XS, whose IQ3_XXS/IQ2_S tensors need one on
/// 256-wide rows.
const NEEDS_IMATRIX: &[&str] =
    &["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "Q2_K_S", "IQ3_XXS", "IQ3_XS"];

/// The recipes whose time ratio the summary reports (key, recipe, with imatrix).
const SPEED: &[(&str, &str, bool)] =
    &[("Q4_K_M", "Q4_K_M", false), ("IQ4_XS+imatrix", "IQ4_XS", true), ("Q2_K", "Q2_K", false)];

/// An input file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Src {
    SmolF32,
    SmolBf16,
    SmolQ41,
    QwenF32,
    Qwen3MoeF32,
    LlamaMoe8,
}

impl Src {
    fn name(self) -> &'static str {
        match self {
            Src::SmolF32 => "smollm2-f32",
            Src::SmolBf16 => "smollm2-bf16",
            Src::SmolQ41 => "smollm2-q4_1",
            Src::QwenF32 => "qwen2.5-coder-0.5b-f32",
            Src::Qwen3MoeF32 => "qwen3moe-f32",
            Src::LlamaMoe8 => "llama-moe8-f32",
        }
    }
}

/// One argument of a case; the file ones are resolved when the case runs.
#[derive(Debug, Clone, PartialEq)]
enum Arg {
    Lit(String),
    /// The source's imatrix (GGUF format).
    Imatrix,
    /// SmolLM2's imatrix in the legacy `.dat` format.
    ImatrixDat,
    /// The `--tensor-type-file` of [`TENSOR_TYPE_FILE`].
    TtFile,
}

/// How the positional arguments are given.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    /// `IN OUT RECIPE NTHREADS`, OUT = `<dir>/out.gguf`.
    Explicit,
    /// `IN RECIPE NTHREADS`, IN a symlink in the tool's folder: llama-quantize names the
    /// output `<dir of IN>/ggml-model-<RECIPE>.gguf`.
    DefaultName,
}

#[derive(Debug, Clone)]
struct Case {
    src: Src,
    opts: Vec<Arg>,
    recipe: String,
    form: Form,
    /// llama-quantize must refuse it (otherwise the case does not test what it says).
    expect_fail: bool,
}

impl Case {
    fn new(src: Src, opts: &[&str], recipe: &str) -> Case {
        let opts = opts
            .iter()
            .map(|&o| match o {
                "@IM" => Arg::Imatrix,
                "@IMDAT" => Arg::ImatrixDat,
                "@TT" => Arg::TtFile,
                s => Arg::Lit(s.to_string()),
            })
            .collect();
        Case { src, opts, recipe: recipe.to_string(), form: Form::Explicit, expect_fail: false }
    }
    fn recipe(src: Src, recipe: &str, imatrix: bool) -> Case {
        Case::new(src, if imatrix { &["--imatrix", "@IM"] } else { &[] }, recipe)
    }
    fn default_name(mut self) -> Case {
        self.form = Form::DefaultName;
        self
    }
    fn fails(mut self) -> Case {
        self.expect_fail = true;
        self
    }
    /// The arguments as shown (files by placeholder).
    fn args_shown(&self) -> String {
        let mut v: Vec<String> = self
            .opts
            .iter()
            .map(|a| match a {
                Arg::Lit(s) => s.clone(),
                Arg::Imatrix => "IM".into(),
                Arg::ImatrixDat => "IM.dat".into(),
                Arg::TtFile => "TT.txt".into(),
            })
            .collect();
        v.push(self.recipe.clone());
        if self.form == Form::DefaultName {
            v.push("(IN RECIPE form)".into());
        }
        v.join(" ")
    }
    fn name(&self) -> String {
        format!("{}: {}", self.src.name(), self.args_shown())
    }
    fn uses_imatrix(&self) -> bool {
        self.opts.iter().any(|a| *a == Arg::Imatrix || *a == Arg::ImatrixDat)
    }
    /// The key of [`SPEED`] this case's timing counts for.
    fn speed_key(&self) -> Option<&'static str> {
        if self.form != Form::Explicit {
            return None;
        }
        SPEED.iter().find_map(|&(key, recipe, im)| {
            let plain =
                if im { self.opts == [Arg::Lit("--imatrix".into()), Arg::Imatrix] } else { self.opts.is_empty() };
            (plain && self.recipe == recipe).then_some(key)
        })
    }
}

/// The `--tensor-type-file` content: regex patterns (std::regex, searched), separated by
/// spaces and newlines.
const TENSOR_TYPE_FILE: &str =
    "blk\\.[0-4]\\.attn_q=q5_k ffn_gate=q4_0\nattn_output=iq4_nl\n  blk\\.1[0-9]\\.ffn_up=q8_0\n";

fn quick_cases() -> Vec<Case> {
    let s = Src::SmolF32;
    let mut v: Vec<Case> = [
        ("Q4_0", false),
        ("Q5_1", false),
        ("Q8_0", false),
        ("Q2_K", false),
        ("Q3_K_S", false),
        ("Q4_K_M", false),
        ("Q5_K_M", false),
        ("Q6_K", false),
        ("IQ4_NL", false),
        ("IQ4_XS", true),
        ("IQ2_XXS", true),
        ("F16", false),
        ("BF16", false),
        ("COPY", false),
    ]
    .iter()
    .map(|&(r, im)| Case::recipe(s, r, im))
    .collect();
    v.push(Case::new(s, &["--pure"], "Q4_K_M"));
    v.push(Case::new(s, &["--output-tensor-type", "q8_0"], "Q4_K_M"));
    v.push(Case::new(s, &["--tensor-type", "attn_v=q8_0", "--tensor-type", "ffn_down=q6_k"], "Q4_K_M"));
    v.push(Case::new(s, &["--override-kv", "general.name=str:test", "--override-kv", "foo.bar=int:7"], "Q8_0"));
    v.push(Case::new(s, &["--include-weights", "ffn_down", "--imatrix", "@IM"], "IQ4_XS"));
    v.push(Case::new(s, &["--dry-run"], "Q4_K_M"));
    v.push(Case::new(Src::SmolQ41, &[], "Q4_K_M").fails());
    v
}

fn full_cases() -> Vec<Case> {
    let s = Src::SmolF32;
    let mut v = Vec::new();
    // Every recipe on SmolLM2 and on the 8-expert llama.
    for src in [Src::SmolF32, Src::LlamaMoe8] {
        for &r in RECIPES {
            v.push(Case::recipe(src, r, NEEDS_IMATRIX.contains(&r)));
        }
    }
    // With and without imatrix (imatrix changes the Q4_0/Q5_0 ffn_down and IQ4 rules).
    for src in [Src::SmolF32, Src::LlamaMoe8] {
        for r in ["Q4_K_M", "IQ4_XS", "Q4_0", "Q5_0"] {
            v.push(Case::recipe(src, r, true));
        }
    }
    // IQ3_XXS / IQ3_XS without imatrix (576-wide rows fall back, so llama-quantize allows it).
    v.push(Case::recipe(s, "IQ3_XXS", false));
    v.push(Case::recipe(s, "IQ3_XS", false));
    // The legacy .dat imatrix.
    v.push(Case::new(s, &["--imatrix", "@IMDAT"], "IQ2_XS"));
    v.push(Case::new(s, &["--imatrix", "@IMDAT"], "Q4_K_M"));
    // Options.
    v.push(Case::new(s, &["--pure"], "Q4_K_M"));
    v.push(Case::new(s, &["--pure", "--imatrix", "@IM"], "IQ2_XXS"));
    v.push(Case::new(s, &["--output-tensor-type", "q8_0"], "Q4_K_M"));
    v.push(Case::new(s, &["--token-embedding-type", "q4_0"], "Q5_K_M"));
    v.push(Case::new(s, &["--tensor-type", "attn_v=q8_0", "--tensor-type", "ffn_down=q6_k"], "Q4_K_M"));
    v.push(Case::new(s, &["--tensor-type", "blk\\.[0-9]\\.ffn_up=iq4_nl", "--tensor-type", "ffn=q5_0"], "Q6_K"));
    v.push(Case::new(s, &["--tensor-type-file", "@TT"], "Q3_K_M"));
    v.push(Case::new(s, &["--leave-output-tensor"], "Q4_K_M"));
    v.push(Case::new(s, &["--prune-layers", "3,7"], "Q4_K_M"));
    v.push(Case::new(s, &["--prune-layers", "3,7", "--imatrix", "@IM"], "IQ4_XS"));
    v.push(Case::new(
        s,
        &[
            "--override-kv",
            "general.name=str:test",
            "--override-kv",
            "foo.bar=int:7",
            "--override-kv",
            "foo.neg=int:-7",
            "--override-kv",
            "foo.f=float:0.25",
            "--override-kv",
            "foo.b=bool:true",
        ],
        "Q8_0",
    ));
    v.push(Case::new(s, &["--include-weights", "ffn_down", "--imatrix", "@IM"], "IQ4_XS"));
    v.push(Case::new(s, &["--exclude-weights", "attn", "--imatrix", "@IM"], "IQ4_XS"));
    v.push(Case::new(s, &["--keep-split"], "Q4_K_M"));
    v.push(Case::new(s, &["--dry-run"], "Q4_K_M"));
    v.push(Case::new(s, &["--dry-run"], "IQ2_XXS").default_name());
    v.push(Case::new(s, &[], "Q8_0").default_name());
    v.push(Case::new(s, &[], "q4_k_m").default_name());
    v.push(Case::new(s, &[], "15")); // LLAMA_FTYPE_MOSTLY_Q4_K_M by number
    v.push(Case::new(s, &[], "q5_k_s"));
    // Refusals.
    v.push(Case::recipe(s, "IQ2_XXS", false).fails());
    // attn_q (576 wide) would fall back to iq4_nl; ffn_down (1536) takes iq1_s and needs the imatrix.
    v.push(Case::new(s, &["--tensor-type", "ffn_down=iq1_s"], "Q4_K_M").fails());
    v.push(Case::new(Src::SmolQ41, &[], "Q4_K_M").fails());
    v.push(Case::new(Src::SmolQ41, &["--allow-requantize"], "Q4_K_M"));
    v.push(Case::new(Src::SmolQ41, &["--allow-requantize"], "Q8_0"));
    v.push(Case::new(Src::SmolQ41, &["--allow-requantize", "--imatrix", "@IM"], "IQ2_S"));
    // SmolLM2 BF16 in.
    for (r, im) in [
        ("Q4_0", false),
        ("Q8_0", false),
        ("Q4_K_M", false),
        ("Q6_K", false),
        ("IQ4_NL", false),
        ("IQ2_XS", true),
        ("F16", false),
        ("BF16", false),
        ("F32", false),
        ("COPY", false),
    ] {
        v.push(Case::recipe(Src::SmolBf16, r, im));
    }
    // qwen2.5-coder: GQA 7, untied output, 896-wide rows.
    let q = Src::QwenF32;
    for (r, im) in [
        ("Q4_0", false),
        ("Q4_K_M", false),
        ("Q2_K", false),
        ("Q3_K_M", false),
        ("Q5_K_M", false),
        ("IQ4_XS", false),
        ("IQ4_XS", true),
        ("IQ3_XXS", true),
        ("IQ2_M", true),
        ("Q8_0", false),
    ] {
        v.push(Case::recipe(q, r, im));
    }
    v.push(Case::new(q, &["--leave-output-tensor"], "Q4_K_M"));
    v.push(Case::new(q, &["--token-embedding-type", "q5_1", "--output-tensor-type", "q8_0"], "Q4_K_M"));
    // --output-tensor-type skips the block-size fallback: q6_K on 896-wide rows is accepted,
    // then fails ggml's row validation after the output was opened.
    v.push(Case::new(q, &["--token-embedding-type", "q8_0", "--output-tensor-type", "q6_k"], "Q4_0").fails());
    // qwen3moe: 256-wide experts with per-expert imatrix.
    let m = Src::Qwen3MoeF32;
    for (r, im) in [
        ("Q1_0", false),
        ("Q4_0", false),
        ("Q4_0", true),
        ("Q4_K_M", false),
        ("Q2_K", false),
        ("Q3_K_S", false),
        ("IQ4_XS", true),
        ("MXFP4_MOE", false),
        ("IQ2_XXS", true),
        ("IQ1_M", true),
        ("IQ3_XS", true),
        ("Q5_K_M", false),
        ("Q6_K", false),
        ("Q8_0", false),
    ] {
        v.push(Case::recipe(m, r, im));
    }
    v.push(Case::new(m, &["--leave-output-tensor"], "Q4_K_M"));
    v.push(Case::new(m, &["--prune-layers", "1", "--imatrix", "@IM"], "IQ4_XS"));
    // llama-moe8 options.
    let e = Src::LlamaMoe8;
    v.push(Case::new(e, &["--leave-output-tensor"], "Q4_K_M"));
    v.push(Case::new(e, &["--prune-layers", "0,5"], "Q3_K_M"));
    v.push(Case::new(e, &["--tensor-type", "ffn_down_exps=q8_0"], "IQ4_XS"));
    v
}

/// A command line to run: program and leading arguments.
#[derive(Debug, Clone)]
struct Tool {
    label: String,
    program: PathBuf,
    pre: Vec<String>,
}

/// The binary under test (see the module docs).
fn ours(opts: &QuantOpts, llama: &Path) -> Result<Tool> {
    if opts.self_check {
        return Ok(Tool { label: "llama-quantize (self-check)".into(), program: llama.to_path_buf(), pre: vec![] });
    }
    if let Some(v) = std::env::var("GGUF_QUANTIZE_BIN").ok().filter(|s| !s.trim().is_empty()) {
        let mut words = v.split_whitespace().map(String::from);
        let program = PathBuf::from(words.next().context("GGUF_QUANTIZE_BIN is empty")?);
        return Ok(Tool { label: format!("$GGUF_QUANTIZE_BIN ({v})"), program, pre: words.collect() });
    }
    if let Some(bin) = &opts.gguf {
        return Ok(Tool {
            label: format!("{} quantize", bin.display()),
            program: bin.clone(),
            pre: vec!["quantize".into()],
        });
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("cargo build --release -p gguf-cli --bin gguf");
    let st = Command::new(cargo)
        .args(["build", "--release", "-p", "gguf-cli", "--bin", "gguf"])
        .current_dir(workspace_root())
        .status()
        .context("running cargo")?;
    ensure!(
        st.success(),
        "cargo build --release -p gguf-cli --bin gguf failed (or test another binary: GGUF_QUANTIZE_BIN, --gguf BIN, --self-check)"
    );
    let bin = target_dir().join("release").join("gguf");
    ensure!(bin.is_file(), "{} not found after the build", bin.display());
    Ok(Tool { label: format!("{} quantize", bin.display()), program: bin, pre: vec!["quantize".into()] })
}

/// The cached inputs, made on first use.
struct Sources {
    cache: PathBuf,
    bin: PathBuf,
    threads: String,
    made: HashMap<String, std::result::Result<PathBuf, String>>,
}

impl Sources {
    fn dir(&self) -> PathBuf {
        self.cache.join("quantize-src")
    }

    fn memo(&mut self, key: &str, make: impl FnOnce(&mut Self) -> Result<PathBuf>) -> Result<PathBuf> {
        if let Some(r) = self.made.get(key) {
            return r.clone().map_err(anyhow::Error::msg);
        }
        let r = make(self).map_err(|e| format!("{e:#}"));
        self.made.insert(key.to_string(), r.clone());
        r.map_err(anyhow::Error::msg)
    }

    fn smollm2(&self) -> Result<PathBuf> {
        models::ensure_model(models::find_model("smollm2").context("smollm2 is not in the model table")?)
    }

    /// `llama-quantize --allow-requantize src <dir>/<name> ftype`, cached.
    fn converted(&self, src: &Path, name: &str, ftype: &str) -> Result<PathBuf> {
        let out = self.dir().join(name);
        if out.is_file() {
            return Ok(out);
        }
        fs::create_dir_all(self.dir())?;
        let partial = out.with_extension("partial.gguf");
        eprintln!("llama-quantize --allow-requantize {} -> {} ({ftype})", src.display(), out.display());
        let mut cmd = Command::new(self.bin.join("llama-quantize"));
        cmd.env("LD_LIBRARY_PATH", &self.bin)
            .arg("--allow-requantize")
            .arg(src)
            .arg(&partial)
            .arg(ftype)
            .arg(&self.threads);
        if let Err(e) = run_quiet(&mut cmd, "llama-quantize") {
            let _ = fs::remove_file(&partial);
            return Err(e);
        }
        fs::rename(&partial, &out)?;
        Ok(out)
    }

    fn input(&mut self, src: Src) -> Result<PathBuf> {
        self.memo(src.name(), |s| match src {
            Src::SmolQ41 => s.smollm2(),
            Src::SmolF32 => s.converted(&s.smollm2()?, "SmolLM2-135M-Instruct.F32.gguf", "F32"),
            Src::SmolBf16 => s.converted(&s.smollm2()?, "SmolLM2-135M-Instruct.BF16.gguf", "BF16"),
            Src::QwenF32 => {
                let m = models::ensure_model(models::find_model("qwen2.5-coder-0.5b").context("qwen2.5 model")?)?;
                s.converted(&m, "qwen2.5-coder-0.5b-instruct.F32.gguf", "F32")
            }
            Src::Qwen3MoeF32 => {
                let m = synth::ensure_synth(&s.cache, "qwen3moe", synth::SEED)?;
                s.converted(&m, &format!("qwen3moe-s{:x}.F32.gguf", synth::SEED), "F32")
            }
            Src::LlamaMoe8 => synth::ensure_synth(&s.cache, "llama-moe8", synth::SEED),
        })
    }

    /// The fixed text `llama-imatrix` runs on (llama.cpp's README.md + docs/build.md, as
    /// [`requant_imatrix::ensure_imatrix`] uses).
    fn text(&self) -> Result<PathBuf> {
        let p = self.dir().join("imatrix-text.txt");
        if !p.is_file() {
            fs::create_dir_all(self.dir())?;
            let src = llama_cpp::src_dir(&self.cache);
            let mut text = String::new();
            for f in ["README.md", "docs/build.md"] {
                text.push_str(&fs::read_to_string(src.join(f)).with_context(|| format!("reading {f} of llama.cpp"))?);
                text.push('\n');
            }
            fs::write(&p, text)?;
        }
        Ok(p)
    }

    /// `llama-imatrix -m model -c ctx --chunks chunks` on [`Sources::text`], cached as `name`.
    fn make_imatrix(&self, model: &Path, name: &str, ctx: u32, chunks: u32, dat: bool) -> Result<PathBuf> {
        let out = self.dir().join(name);
        if out.is_file() {
            return Ok(out);
        }
        let text = self.text()?;
        let partial = self.dir().join(format!("partial-{name}"));
        eprintln!("llama-imatrix {} -> {}", model.display(), out.display());
        let mut cmd = Command::new(self.bin.join("llama-imatrix"));
        cmd.env("LD_LIBRARY_PATH", &self.bin).arg("-m").arg(model).arg("-f").arg(&text).arg("-o").arg(&partial).args([
            "-c",
            &ctx.to_string(),
            "--chunks",
            &chunks.to_string(),
            "-t",
            &self.threads,
        ]);
        if dat {
            cmd.args(["--output-format", "dat"]);
        }
        if let Err(e) = run_quiet(&mut cmd, "llama-imatrix") {
            let _ = fs::remove_file(&partial);
            return Err(e);
        }
        fs::rename(&partial, &out)?;
        Ok(out)
    }

    fn imatrix(&mut self, src: Src, dat: bool) -> Result<PathBuf> {
        let key = format!("imatrix {} {dat}", src.name());
        self.memo(&key, |s| match (src, dat) {
            (Src::SmolF32 | Src::SmolBf16 | Src::SmolQ41, false) => requant_imatrix::ensure_imatrix(),
            (Src::SmolF32 | Src::SmolBf16 | Src::SmolQ41, true) => {
                s.make_imatrix(&s.smollm2()?, "SmolLM2-135M-Instruct.imatrix.dat", 256, 8, true)
            }
            (Src::QwenF32, false) => {
                let m = models::ensure_model(models::find_model("qwen2.5-coder-0.5b").context("qwen2.5 model")?)?;
                s.make_imatrix(&m, "qwen2.5-coder-0.5b-instruct.imatrix.gguf", 128, 4, false)
            }
            (Src::Qwen3MoeF32, false) => {
                let m = synth::ensure_synth(&s.cache, "qwen3moe", synth::SEED)?;
                s.make_imatrix(&m, &format!("qwen3moe-s{:x}.imatrix.gguf", synth::SEED), 128, 8, false)
            }
            (Src::LlamaMoe8, false) => {
                let m = s.input(Src::LlamaMoe8)?;
                s.make_imatrix(&m, &format!("llama-moe8-s{:x}.imatrix.gguf", synth::SEED), 128, 8, false)
            }
            (_, true) => bail!("no .dat imatrix for {}", src.name()),
        })
    }
}

use crate::requant_imatrix::run as run_quiet;

/// What one tool did in one case.
struct Run {
    ok: bool,
    code: Option<i32>,
    secs: f64,
    /// Regular files it left in its folder (name → size).
    files: BTreeMap<String, u64>,
    /// Its error, as one line.
    error: String,
}

/// The error line of a failed run: llama's "failed to quantize: X" if present, else the
/// last non-empty line of stderr, else of stdout.
fn error_line(stdout: &[u8], stderr: &[u8]) -> String {
    let err = String::from_utf8_lossy(stderr);
    if let Some(l) = err.lines().rev().find(|l| l.contains("failed to quantize: ")) {
        return l.split("failed to quantize: ").nth(1).unwrap_or(l).trim().to_string();
    }
    let out = String::from_utf8_lossy(stdout);
    let last = |s: &str| s.lines().rev().map(str::trim).find(|l| !l.is_empty()).map(String::from);
    let line = last(&err).or_else(|| last(&out)).unwrap_or_default();
    line.chars().take(200).collect()
}

fn list_files(dir: &Path) -> Result<BTreeMap<String, u64>> {
    let mut m = BTreeMap::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        let md = fs::symlink_metadata(e.path())?;
        if md.is_file() {
            m.insert(e.file_name().to_string_lossy().into_owned(), md.len());
        }
    }
    Ok(m)
}

/// Fills `buf` from `r` as far as the stream goes; returns how many bytes.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The first byte offset where `a` and `b` differ (a length difference counts), streamed
/// in 4 MiB chunks; `None` when identical.
fn first_difference(a: &Path, b: &Path) -> Result<Option<u64>> {
    const CHUNK: usize = 4 << 20;
    let mut ra = BufReader::with_capacity(CHUNK, fs::File::open(a)?);
    let mut rb = BufReader::with_capacity(CHUNK, fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let mut off = 0u64;
    loop {
        let na = fill(&mut ra, &mut ba)?;
        let nb = fill(&mut rb, &mut bb)?;
        let n = na.min(nb);
        if let Some(i) = ba[..n].iter().zip(&bb[..n]).position(|(x, y)| x != y) {
            return Ok(Some(off + i as u64));
        }
        if na != nb {
            return Ok(Some(off + n as u64));
        }
        if na == 0 {
            return Ok(None);
        }
        off += na as u64;
    }
}

/// A metadata value, shortened for a note.
fn short(v: &Value) -> String {
    match v {
        Value::String(b) => {
            let s = String::from_utf8_lossy(b);
            if s.chars().count() > 40 {
                format!("{:?}…", s.chars().take(40).collect::<String>())
            } else {
                format!("{s:?}")
            }
        }
        Value::Array(a) => format!("[{}; {}]", a.elem_type().name(), a.len()),
        other => format!("{other:?}"),
    }
}

fn list_some(items: &[String], n: usize) -> String {
    let mut s = items.iter().take(n).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > n {
        s.push_str(&format!(", +{} more", items.len() - n));
    }
    s
}

/// What differs between two GGUF files, from their parsed headers and tensor data; the
/// number of differing tensors (at least 1) and a description.
fn describe(ours: &Path, theirs: &Path, first: u64) -> (u64, String) {
    let (o, t) = match (GgufFile::open(ours), GgufFile::open(theirs)) {
        (Ok(o), Ok(t)) => (o, t),
        (Err(e), _) => return (1, format!("first differing byte {first}; ours does not parse: {e}")),
        (_, Err(e)) => return (1, format!("first differing byte {first}; llama.cpp's does not parse: {e}")),
    };
    let mut parts = vec![format!(
        "first differing byte {first} (sizes ours {}, llama.cpp {}; data section at {} / {})",
        o.file_size(),
        t.file_size(),
        o.data_offset(),
        t.data_offset()
    )];
    if o.version() != t.version() || o.alignment() != t.alignment() {
        parts.push(format!(
            "version {} / {}, alignment {} / {}",
            o.version(),
            t.version(),
            o.alignment(),
            t.alignment()
        ));
    }
    // Metadata.
    let om: Vec<(&str, &Value)> = o.metadata().iter().collect();
    let tm: Vec<(&str, &Value)> = t.metadata().iter().collect();
    let omap: HashMap<&str, &Value> = om.iter().copied().collect();
    let tmap: HashMap<&str, &Value> = tm.iter().copied().collect();
    let only_o: Vec<String> =
        om.iter().filter(|(k, _)| !tmap.contains_key(k)).map(|(k, v)| format!("{k}={}", short(v))).collect();
    let only_t: Vec<String> =
        tm.iter().filter(|(k, _)| !omap.contains_key(k)).map(|(k, v)| format!("{k}={}", short(v))).collect();
    let differ: Vec<String> = tm
        .iter()
        .filter_map(|(k, v)| {
            omap.get(k).filter(|ov| *ov != v).map(|ov| format!("{k}: ours {} vs {}", short(ov), short(v)))
        })
        .collect();
    if !only_o.is_empty() {
        parts.push(format!("metadata only in ours: {}", list_some(&only_o, 4)));
    }
    if !only_t.is_empty() {
        parts.push(format!("metadata only in llama.cpp's: {}", list_some(&only_t, 4)));
    }
    if !differ.is_empty() {
        parts.push(format!("metadata values differ: {}", list_some(&differ, 4)));
    }
    if only_o.is_empty() && only_t.is_empty() {
        if let Some(i) = om.iter().zip(&tm).position(|(a, b)| a.0 != b.0) {
            parts.push(format!("metadata order differs at #{i}: ours {}, llama.cpp {}", om[i].0, tm[i].0));
        }
    }
    // Tensors.
    let ot = o.tensors();
    let tt = t.tensors();
    let oby: HashMap<&str, _> = ot.iter().map(|i| (i.name.as_str(), i)).collect();
    let tby: HashMap<&str, _> = tt.iter().map(|i| (i.name.as_str(), i)).collect();
    let mut bad: BTreeSet<String> = BTreeSet::new();
    let mut details = Vec::new();
    let only_o: Vec<String> =
        ot.iter().filter(|i| !tby.contains_key(i.name.as_str())).map(|i| i.name.clone()).collect();
    let only_t: Vec<String> =
        tt.iter().filter(|i| !oby.contains_key(i.name.as_str())).map(|i| i.name.clone()).collect();
    bad.extend(only_o.iter().cloned());
    bad.extend(only_t.iter().cloned());
    let mut offsets = 0;
    for ti in tt {
        let Some(oi) = oby.get(ti.name.as_str()) else { continue };
        if oi.offset != ti.offset {
            offsets += 1;
        }
        if oi.type_id != ti.type_id {
            bad.insert(ti.name.clone());
            details.push(format!("{}: type ours {} vs {}", ti.name, oi.type_name(), ti.type_name()));
        } else if oi.dims != ti.dims {
            bad.insert(ti.name.clone());
            details.push(format!("{}: shape ours {:?} vs {:?}", ti.name, oi.dims, ti.dims));
        } else {
            match (o.tensor_data(oi), t.tensor_data(ti)) {
                (Ok(a), Ok(b)) if a != b => {
                    bad.insert(ti.name.clone());
                    let at = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
                    details.push(format!(
                        "{} ({}): data differs from byte {at} of {}",
                        ti.name,
                        ti.type_name(),
                        b.len()
                    ));
                }
                (Ok(_), Ok(_)) => {}
                (Err(e), _) | (_, Err(e)) => {
                    bad.insert(ti.name.clone());
                    details.push(format!("{}: {e}", ti.name));
                }
            }
        }
    }
    if !only_o.is_empty() {
        parts.push(format!("tensors only in ours: {}", list_some(&only_o, 4)));
    }
    if !only_t.is_empty() {
        parts.push(format!("tensors only in llama.cpp's: {}", list_some(&only_t, 4)));
    }
    if only_o.is_empty() && only_t.is_empty() {
        if let Some(i) = ot.iter().zip(tt).position(|(a, b)| a.name != b.name) {
            parts.push(format!("tensor order differs at #{i}: ours {}, llama.cpp {}", ot[i].name, tt[i].name));
        }
    }
    if !details.is_empty() {
        parts.push(format!("{} tensors differ: {}", bad.len(), list_some(&details, 6)));
    } else if !bad.is_empty() {
        parts.push(format!("{} tensors differ", bad.len()));
    }
    if offsets > 0 {
        parts.push(format!("{offsets} tensor offsets differ"));
    }
    if bad.is_empty() && parts.len() == 1 {
        parts.push("every key and tensor equal: the difference is in padding or encoding".into());
    }
    (bad.len().max(1) as u64, parts.join("; "))
}

/// Runs `tool` for `case` in `dir`.
fn run_tool(tool: &Tool, bin: &Path, argv: &[String], dir: &Path) -> Result<Run> {
    let start = Instant::now();
    let out = Command::new(&tool.program)
        .args(&tool.pre)
        .args(argv)
        .current_dir(dir)
        .env("LD_LIBRARY_PATH", bin)
        .output()
        .with_context(|| format!("running {}", tool.program.display()))?;
    let secs = start.elapsed().as_secs_f64();
    let error = if out.status.success() { String::new() } else { error_line(&out.stdout, &out.stderr) };
    Ok(Run { ok: out.status.success(), code: out.status.code(), secs, files: list_files(dir)?, error })
}

/// The result of one case (besides the check).
struct Outcome {
    tensors: u64,
    mismatches: u64,
    llama_secs: f64,
    ours_secs: f64,
    both_ok: bool,
}

struct Ctx {
    sources: Sources,
    llama: Tool,
    ours: Tool,
    tmp: PathBuf,
    threads: String,
    plant: Option<(String, String)>,
    tt_file: PathBuf,
    keep_failed: bool,
}

fn run_case(ctx: &mut Ctx, idx: usize, case: &Case) -> Result<(Check, Outcome)> {
    let group = format!("quantize {}", case.src.name());
    let what = case.args_shown();
    let input = ctx.sources.input(case.src)?;
    let mut opts = Vec::new();
    for a in &case.opts {
        opts.push(match a {
            Arg::Lit(s) => s.clone(),
            Arg::Imatrix => ctx.sources.imatrix(case.src, false)?.display().to_string(),
            Arg::ImatrixDat => ctx.sources.imatrix(case.src, true)?.display().to_string(),
            Arg::TtFile => ctx.tt_file.display().to_string(),
        });
    }
    let case_dir = ctx.tmp.join(format!("case{idx:03}"));
    let _ = fs::remove_dir_all(&case_dir);
    let mut runs = Vec::new();
    let mut argvs = Vec::new();
    for (k, tool) in [("llama", &ctx.llama), ("ours", &ctx.ours)] {
        let dir = case_dir.join(k);
        fs::create_dir_all(&dir)?;
        let mut recipe = case.recipe.clone();
        if let Some((from, to)) = &ctx.plant {
            if k == "ours" && recipe.eq_ignore_ascii_case(from) {
                recipe = to.clone();
            }
        }
        let mut argv = opts.clone();
        match case.form {
            Form::Explicit => {
                argv.push(input.display().to_string());
                argv.push(dir.join("out.gguf").display().to_string());
            }
            Form::DefaultName => {
                let link = dir.join("input.gguf");
                std::os::unix::fs::symlink(&input, &link)?;
                argv.push(link.display().to_string());
            }
        }
        argv.push(recipe);
        argv.push(ctx.threads.clone());
        runs.push(run_tool(tool, &ctx.sources.bin, &argv, &dir)?);
        argvs.push((dir, argv));
    }
    let (l, o) = (&runs[0], &runs[1]);
    // The timed recipes of the summary: once more, in the other order, and the faster of
    // the two runs each (the machine is shared and small; one run is noisy).
    let (mut l_secs, mut o_secs) = (l.secs, o.secs);
    if case.speed_key().is_some() && l.ok && o.ok {
        for (k, tool) in [(1, &ctx.ours), (0, &ctx.llama)] {
            let (dir, argv) = &argvs[k];
            let r = run_tool(tool, &ctx.sources.bin, argv, dir)?;
            if k == 0 {
                l_secs = l_secs.min(r.secs);
            } else {
                o_secs = o_secs.min(r.secs);
            }
        }
    }
    let times = format!(
        "llama {l_secs:.2} s, ours {o_secs:.2} s (×{:.2}{})",
        if l_secs > 0.0 { o_secs / l_secs } else { f64::NAN },
        if case.speed_key().is_some() { ", best of 2" } else { "" }
    );
    let files_of = |r: &Run| {
        if r.files.is_empty() {
            "no file".to_string()
        } else {
            r.files.iter().map(|(n, s)| format!("{n} ({s} B)")).collect::<Vec<_>>().join(", ")
        }
    };
    let (tensors, mismatches, note) = match (l.ok, o.ok) {
        (true, true) if case.expect_fail => {
            (1, 1, format!("llama-quantize succeeded where it should refuse ({}); {times}", files_of(l)))
        }
        (true, true) => {
            let names_l: Vec<&String> = l.files.keys().collect();
            let names_o: Vec<&String> = o.files.keys().collect();
            if names_l != names_o {
                (1, 1, format!("output files differ: llama.cpp {}, ours {}; {times}", files_of(l), files_of(o)))
            } else if names_l.is_empty() {
                (1, 0, format!("both exit 0 and write no file; {times}"))
            } else {
                let (mut tensors, mut bad, mut notes) = (0u64, 0u64, Vec::new());
                for name in names_l {
                    let (a, b) = (case_dir.join("ours").join(name), case_dir.join("llama").join(name));
                    let n = GgufFile::open(&b).map(|f| f.tensors().len() as u64).unwrap_or(0);
                    tensors += n;
                    if let Some(off) = first_difference(&a, &b)? {
                        let (m, d) = describe(&a, &b, off);
                        bad += m;
                        notes.push(format!("{name}: {d}"));
                    }
                }
                let tensors = tensors.max(1);
                let files = if l.files.len() == 1 && l.files.contains_key("out.gguf") {
                    String::new()
                } else {
                    format!("{}; ", files_of(l))
                };
                if bad == 0 {
                    (tensors, 0, format!("{files}identical, {tensors} tensors; {times}"))
                } else {
                    (tensors, bad, format!("{files}{}; {times}", notes.join(" | ")))
                }
            }
        }
        (false, false) => {
            let left = format!("llama.cpp left {}, ours {}", files_of(l), files_of(o));
            if !o.files.is_empty() && l.files.is_empty() {
                (1, 1, format!("both refuse, but ours leaves a file ({left}); llama.cpp: {}", l.error))
            } else {
                (
                    1,
                    0,
                    format!(
                        "both refuse (exit {:?} / {:?}); llama.cpp: {}; ours: {}; {left}",
                        l.code, o.code, l.error, o.error
                    ),
                )
            }
        }
        (true, false) => (1, 1, format!("ours fails (exit {:?}): {}; {times}", o.code, o.error)),
        (false, true) => {
            (1, 1, format!("ours succeeds ({}) where llama-quantize refuses: {}; {times}", files_of(o), l.error))
        }
    };
    let check = Check::counted(&group, &what, tensors, mismatches, None, note);
    let failed = check.status == super::Status::Fail;
    if failed && ctx.keep_failed {
        eprintln!("  kept {}", case_dir.display());
    } else {
        let _ = fs::remove_dir_all(&case_dir);
    }
    Ok((check, Outcome { tensors, mismatches, llama_secs: l_secs, ours_secs: o_secs, both_ok: l.ok && o.ok }))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `cargo xtask verify quantize`.
pub fn run(cache: &Path, opts: &QuantOpts, report: &mut Report) -> Result<()> {
    let bin = llama_cpp::build_dir(cache).join("bin");
    let llama_quantize = bin.join("llama-quantize");
    ensure!(
        llama_quantize.is_file() && bin.join("llama-imatrix").is_file(),
        "no {} / llama-imatrix: run `cargo xtask llama-cpp` first",
        llama_quantize.display()
    );
    let plant = match &opts.plant {
        Some(p) => {
            let (a, b) = p.split_once('=').context("--plant takes FROM=TO (recipes)")?;
            Some((a.to_string(), b.to_string()))
        }
        None => None,
    };
    let ours = ours(opts, &llama_quantize)?;
    let all = if opts.quick { quick_cases() } else { full_cases() };
    let cases: Vec<Case> =
        all.into_iter().filter(|c| opts.filter.as_ref().is_none_or(|f| c.name().contains(f.as_str()))).collect();
    ensure!(!cases.is_empty(), "no case matches the filter {:?}", opts.filter);
    let threads = opts.threads.max(1).to_string();
    let tmp = scratch()?.join(format!("quantize-{}", std::process::id()));
    fs::create_dir_all(&tmp)?;
    let tt_file = tmp.join("tensor-types.txt");
    fs::write(&tt_file, TENSOR_TYPE_FILE)?;
    report.note(format!(
        "verify quantize: {} cases ({}), NTHREADS {threads}; llama.cpp: {}; ours: {}{}",
        cases.len(),
        if opts.quick { "quick" } else { "full" },
        llama_quantize.display(),
        ours.label,
        plant.as_ref().map_or(String::new(), |(a, b)| format!(" with the planted difference {a} → {b}"))
    ));
    let mut ctx = Ctx {
        sources: Sources {
            cache: cache.to_path_buf(),
            bin: bin.clone(),
            threads: threads.clone(),
            made: HashMap::new(),
        },
        llama: Tool { label: "llama-quantize".into(), program: llama_quantize.clone(), pre: vec![] },
        ours,
        tmp: tmp.clone(),
        threads,
        plant,
        tt_file,
        keep_failed: std::env::var("GGUF_QUANTIZE_KEEP").is_ok_and(|v| v == "1"),
    };
    let (mut n_files, mut tensors, mut mismatches, mut t_llama, mut t_ours) = (0u64, 0u64, 0u64, 0f64, 0f64);
    let mut speed: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (i, case) in cases.iter().enumerate() {
        eprintln!("verify quantize [{}/{}] {}", i + 1, cases.len(), case.name());
        match run_case(&mut ctx, i, case) {
            Ok((check, out)) => {
                eprintln!(
                    "  {} {}: {}",
                    if check.status == super::Status::Pass { "PASS" } else { "FAIL" },
                    case.name(),
                    check.note
                );
                mismatches += out.mismatches;
                t_llama += out.llama_secs;
                t_ours += out.ours_secs;
                if out.both_ok {
                    n_files += 1;
                    tensors += out.tensors;
                    if let Some(k) = case.speed_key() {
                        speed.entry(k).or_default().push(out.ours_secs / out.llama_secs.max(1e-9));
                    }
                }
                report.push(check);
            }
            Err(e) => {
                eprintln!("  FAIL {}: {e:#}", case.name());
                mismatches += 1;
                report.push(Check::error(&format!("quantize {}", case.src.name()), &case.args_shown(), e));
            }
        }
    }
    let _ = fs::remove_dir_all(&tmp);
    let uses_im = cases.iter().filter(|c| c.uses_imatrix()).count();
    report.footer(format!(
        "verify quantize: {} cases ({} with an imatrix), {n_files} outputs written by both, {tensors} tensors compared, \
         {mismatches} mismatches",
        cases.len(),
        uses_im
    ));
    report.footer(format!(
        "total time: llama-quantize {t_llama:.1} s, ours {t_ours:.1} s (×{:.2})",
        t_ours / t_llama.max(1e-9)
    ));
    let mut line = format!("time ours / llama.cpp, median over sources (NTHREADS {}):", ctx.threads);
    for &(key, _, _) in SPEED {
        match speed.get_mut(key) {
            Some(v) if !v.is_empty() => {
                let n = v.len();
                line.push_str(&format!(" {key} ×{:.2} (n={n});", median(v)));
            }
            _ => line.push_str(&format!(" {key} -;")),
        }
    }
    report.footer(line.trim_end_matches(';').to_string());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_names_are_unique_and_speed_keys_found() {
        for cases in [quick_cases(), full_cases()] {
            let mut seen = BTreeSet::new();
            for c in &cases {
                assert!(seen.insert(c.name()), "duplicate case {}", c.name());
            }
            for &(key, _, _) in SPEED {
                assert!(cases.iter().any(|c| c.speed_key() == Some(key)), "no case for {key}");
            }
        }
        assert_eq!(RECIPES.len(), 39);
    }

    #[test]
    fn first_difference_streams() {
        let d = std::env::temp_dir().join(format!("xtask-qcmp-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        let (a, b) = (d.join("a"), d.join("b"));
        let mut data = vec![7u8; (4 << 20) + 10];
        fs::write(&a, &data).unwrap();
        fs::write(&b, &data).unwrap();
        assert_eq!(first_difference(&a, &b).unwrap(), None);
        data[(4 << 20) + 3] = 0;
        fs::write(&b, &data).unwrap();
        assert_eq!(first_difference(&a, &b).unwrap(), Some((4 << 20) + 3));
        fs::write(&b, &data[..100]).unwrap();
        assert_eq!(first_difference(&a, &b).unwrap(), Some(100));
        fs::remove_dir_all(&d).unwrap();
    }
}
