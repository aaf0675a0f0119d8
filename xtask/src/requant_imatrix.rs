//! SmolLM2 requantized into the low-bit IQ types, which `llama-quantize` only makes well
//! (IQ1_S, IQ2_XXS, IQ2_XS: only) with an importance matrix: `llama-imatrix` is run once on
//! a fixed text (llama.cpp's own README.md and docs/build.md from the cached source) and the
//! result cached as `<cache>/requant/SmolLM2-135M-Instruct.imatrix.gguf`; the requantized
//! files land beside [`crate::requant::ensure_requant`]'s, under the same naming.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

use crate::{llama_cpp, models, requant};

/// One requantized SmolLM2 of issue 3's real-file acceptance line.
#[derive(Debug, Clone, Copy)]
pub struct Requant {
    /// Cache name: `SmolLM2-135M-Instruct.<name>.gguf`.
    pub name: &'static str,
    /// The `llama-quantize` file type.
    pub ftype: &'static str,
    /// Whether the importance matrix of [`ensure_imatrix`] is passed.
    pub imatrix: bool,
    /// `--tensor-type` overrides (to get types no file type of a dense model produces).
    pub tensor_types: &'static [&'static str],
}

const fn rq(name: &'static str, imatrix: bool) -> Requant {
    Requant { name, ftype: name, imatrix, tensor_types: &[] }
}

/// The files: every IQ/TQ/MXFP4 file type of the issue (IQ1..IQ3 with the imatrix), Q2_0,
/// Q1_0 on the FFN down matrices, and `FP4_FFN`: Q8_0 with the FFN matrices forced to nvfp4 (down) and mxfp4
/// (up, gate) — MXFP4_MOE only touches MoE experts, which SmolLM2 does not have, and no
/// file type makes nvfp4.
pub const FTYPES: &[Requant] = &[
    rq("IQ1_S", true),
    rq("IQ1_M", true),
    rq("IQ2_XXS", true),
    rq("IQ2_XS", true),
    rq("IQ2_S", true),
    rq("IQ2_M", true),
    rq("IQ3_XXS", true),
    rq("IQ3_XS", true),
    rq("IQ3_S", true),
    rq("IQ3_M", true),
    rq("IQ4_NL", false),
    rq("IQ4_XS", false),
    rq("TQ1_0", false),
    rq("TQ2_0", false),
    rq("MXFP4_MOE", false),
    // llama-quantize refuses Q1_0 for SmolLM2 (576 columns are not whole 128-blocks and
    // q1_0 has no fallback type): the 1536-wide ffn_down matrices carry it instead.
    Requant { name: "Q1_0_FFN", ftype: "Q8_0", imatrix: false, tensor_types: &["ffn_down=q1_0"] },
    rq("Q2_0", false),
    Requant {
        name: "FP4_FFN",
        ftype: "Q8_0",
        imatrix: false,
        tensor_types: &["ffn_down=nvfp4", "ffn_up=mxfp4", "ffn_gate=mxfp4"],
    },
    MXFP4_ALL,
];

/// Every matrix of the blocks in mxfp4 (the closest a dense model gets to MXFP4_MOE): the
/// MXFP4 line of issue 5's per-type logits check.
pub const MXFP4_ALL: Requant = Requant {
    name: "MXFP4_ALL",
    ftype: "Q8_0",
    imatrix: false,
    tensor_types: &[
        "attn_q=mxfp4",
        "attn_k=mxfp4",
        "attn_v=mxfp4",
        "attn_output=mxfp4",
        "ffn_gate=mxfp4",
        "ffn_up=mxfp4",
        "ffn_down=mxfp4",
    ],
};

/// Runs `cmd`, failing with the last lines of its stderr.
pub fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        bail!("{what} failed ({}): {}", out.status, tail.into_iter().rev().collect::<Vec<_>>().join(" / "));
    }
    Ok(())
}

fn bin_dir() -> Result<PathBuf> {
    let bin = llama_cpp::build_dir(&models::cache_dir()?).join("bin");
    ensure!(
        bin.join("llama-imatrix").is_file(),
        "no {}/llama-imatrix: run `cargo xtask llama-cpp` first",
        bin.display()
    );
    Ok(bin)
}

/// The importance matrix of SmolLM2 (Q4_1) over llama.cpp's README.md + docs/build.md,
/// made on first use with `llama-imatrix -c 256` and cached.
pub fn ensure_imatrix() -> Result<PathBuf> {
    let cache = models::cache_dir()?;
    let dir = cache.join("requant");
    let out = dir.join("SmolLM2-135M-Instruct.imatrix.gguf");
    if out.is_file() {
        return Ok(out);
    }
    fs::create_dir_all(&dir)?;
    let src = models::ensure_model(models::find_model("smollm2").context("smollm2 is not in the model table")?)?;
    let llama_src = llama_cpp::src_dir(&cache);
    let mut text = String::new();
    for f in ["README.md", "docs/build.md"] {
        text.push_str(&fs::read_to_string(llama_src.join(f)).with_context(|| format!("reading {f} of llama.cpp"))?);
        text.push('\n');
    }
    let text_path = dir.join("imatrix-text.txt");
    fs::write(&text_path, text)?;
    let bin = bin_dir()?;
    let partial = dir.join("SmolLM2-135M-Instruct.imatrix.partial.gguf");
    eprintln!("llama-imatrix {} -> {}", src.display(), out.display());
    run(
        Command::new(bin.join("llama-imatrix"))
            .env("LD_LIBRARY_PATH", &bin)
            .arg("-m")
            .arg(&src)
            .arg("-f")
            .arg(&text_path)
            .arg("-o")
            .arg(&partial)
            .args(["-c", "256", "-t", &threads()]),
        "llama-imatrix",
    )?;
    fs::rename(&partial, &out)?;
    Ok(out)
}

fn threads() -> String {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).to_string()
}

/// SmolLM2 requantized as `r` says (`llama-quantize --allow-requantize [--imatrix F]
/// [--tensor-type T...] ftype`), cached at [`requant::requant_path`]`(r.name)`. A plain file
/// type without imatrix or overrides is [`requant::ensure_requant`]'s file.
pub fn ensure(r: &Requant) -> Result<PathBuf> {
    if !r.imatrix && r.tensor_types.is_empty() && r.name == r.ftype {
        return requant::ensure_requant(r.ftype);
    }
    let out = requant::requant_path(r.name)?;
    if out.is_file() {
        return Ok(out);
    }
    let src = models::ensure_model(models::find_model("smollm2").context("smollm2 is not in the model table")?)?;
    let bin = bin_dir()?;
    let partial = out.with_extension("gguf.partial");
    let mut cmd = Command::new(bin.join("llama-quantize"));
    cmd.env("LD_LIBRARY_PATH", &bin).arg("--allow-requantize");
    if r.imatrix {
        cmd.arg("--imatrix").arg(ensure_imatrix()?);
    }
    for t in r.tensor_types {
        cmd.arg("--tensor-type").arg(t);
    }
    cmd.arg(&src).arg(&partial).arg(r.ftype).arg(threads());
    eprintln!("llama-quantize {:?} -> {}", r, out.display());
    if let Err(e) = run(&mut cmd, &format!("llama-quantize {}", r.name)) {
        let _ = fs::remove_file(&partial);
        return Err(e);
    }
    fs::rename(&partial, &out)?;
    Ok(out)
}
