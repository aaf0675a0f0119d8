//! `cargo xtask verify requant`: SmolLM2 requantized by llama.cpp's `llama-quantize
//! --allow-requantize` into every IQ/TQ/MXFP4 file type ([`crate::requant_imatrix::FTYPES`];
//! IQ1..IQ3 with an imatrix from `llama-imatrix`), then
//! - (files) `gguf inspect --json --full` reads each file; the note lists its type mix;
//! - (model tensors) every tensor dequantizes bit-exactly vs libggml's `to_float`;
//! - (cli dequant) `gguf dequant` writes, for the first tensor of each type in the file,
//!   exactly the f32 bytes `to_float` gives — the CLI handles the new types unchanged.
//!
//! - (real rows quantize) the 15 types' quantizers on real weights: rows of every
//!   `ffn_down` (1536 wide) of SmolLM2, dequantized from its Q4_1 file (so full of ties), with
//!   the imatrix of `llama-imatrix` (`in_sum2 / counts`, as llama-quantize uses it) and,
//!   where ggml allows, without: ours vs `ggml_quantize_chunk`, byte for byte.
//!
//! The files live in the cache only (`<cache>/requant/`), never in git.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde_json::Value as Json;

use super::gguf::{build_cli, inspect, model_tensors, scratch};
use super::{load_ggml, Check, Opts, Report};
use crate::ggml::Ggml;
use crate::requant_imatrix::{ensure, ensure_imatrix, FTYPES};

/// The types whose quantizers the real-rows check runs (issue 3's modules).
const NEW_TYPES: &[&str] = &[
    "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "iq1_m", "tq1_0", "tq2_0", "mxfp4",
    "nvfp4", "q1_0", "q2_0",
];
/// Rows taken from each layer's `ffn_down`.
const ROWS_PER_LAYER: usize = 20;

/// `cargo xtask verify requant [--type FTYPE...]`.
pub fn run(cache: &Path, opts: &Opts, report: &mut Report) -> Result<()> {
    let ggml = load_ggml(cache)?;
    let cli = build_cli();
    let tmp = scratch()?;
    match real_rows(&ggml, opts) {
        Ok(checks) => checks.into_iter().for_each(|c| report.push(c)),
        Err(e) => report.push(Check::error("real rows quantize", "smollm2", e)),
    }
    for r in FTYPES {
        let ftype = r.name;
        if !opts.only.is_empty() && !opts.only.iter().any(|o| o.eq_ignore_ascii_case(ftype)) {
            continue;
        }
        eprintln!("verify requant: {ftype}");
        let path = match ensure(r) {
            Ok(p) => p,
            Err(e) => {
                report.push(Check::error("requant files", ftype, e));
                continue;
            }
        };
        let mut how = format!("llama-quantize {}{}", r.ftype, if r.imatrix { " --imatrix" } else { "" });
        for t in r.tensor_types {
            how.push_str(&format!(" --tensor-type {t}"));
        }
        let dump = match &cli {
            Ok(bin) => inspect(bin, &path),
            Err(e) => Err(anyhow::anyhow!("{e:#}")),
        };
        match &dump {
            Ok(d) => {
                let n = d["tensors"].as_array().map_or(0, |a| a.len()) as u64;
                report.push(Check::counted("requant files", ftype, n, 0, None, format!("{how}; {}", type_mix(d))));
            }
            Err(e) => report.push(Check::error("requant files", ftype, e)),
        }
        match model_tensors(&ggml, &path) {
            Ok(checks) => {
                for mut c in checks {
                    c.what = format!("{ftype} {}", c.what);
                    report.push(c);
                }
            }
            Err(e) => report.push(Check::error("model tensors", ftype, e)),
        }
        if let (Ok(bin), Ok(d)) = (&cli, &dump) {
            for c in cli_dequant(&ggml, bin, &path, d, ftype, &tmp) {
                report.push(c);
            }
        }
    }
    Ok(())
}

/// `type×count` for the tensor types of an inspect dump, most common first.
fn type_mix(d: &Json) -> String {
    let mut m: BTreeMap<String, u64> = BTreeMap::new();
    for t in d["tensors"].as_array().into_iter().flatten() {
        *m.entry(t["type"].as_str().unwrap_or("?").to_string()).or_default() += 1;
    }
    let mut v: Vec<_> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.into_iter().map(|(t, n)| format!("{t}×{n}")).collect::<Vec<_>>().join(", ")
}

/// (cli dequant) one tensor per quantized type: `gguf dequant` vs `to_float`.
fn cli_dequant(ggml: &Ggml, bin: &Path, path: &Path, d: &Json, ftype: &str, tmp: &Path) -> Vec<Check> {
    const GROUP: &str = "cli dequant";
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for t in d["tensors"].as_array().into_iter().flatten() {
        let ty = t["type"].as_str().unwrap_or("?").to_string();
        if ty == "f32" || !seen.insert(ty.clone()) {
            continue;
        }
        let name = t["name"].as_str().unwrap_or("?").to_string();
        let what = format!("{ftype} {ty}");
        match one_tensor(ggml, bin, path, d, t, tmp) {
            Ok(bad) => out.push(Check::counted(
                GROUP,
                &what,
                1,
                bad.is_some() as u64,
                None,
                bad.unwrap_or_else(|| format!("{name}: gguf dequant output = to_float, byte for byte")),
            )),
            Err(e) => out.push(Check::error(GROUP, &what, e)),
        }
    }
    out
}

fn one_tensor(ggml: &Ggml, bin: &Path, path: &Path, d: &Json, t: &Json, tmp: &Path) -> Result<Option<String>> {
    use std::os::unix::fs::FileExt;
    let name = t["name"].as_str().context("name")?;
    let id = t["type_id"].as_u64().context("type_id")? as u32;
    let offset = t["offset"].as_u64().context("offset")?;
    let bytes = t["bytes"].as_u64().context("bytes")? as usize;
    let data_offset = d["data_offset"].as_u64().context("data_offset")?;
    let g = ggml.type_info(id).context("type unknown to ggml")?;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open(path)?.read_exact_at(&mut buf, data_offset + offset)?;
    let mut want = vec![0f32; bytes / g.type_size * g.block_size];
    ggml.to_float(id, &buf, &mut want)?;
    let out = tmp.join(format!("requant-dequant-{}.f32", std::process::id()));
    let o = std::process::Command::new(bin).arg("dequant").arg(path).arg(name).arg("-o").arg(&out).output()?;
    ensure!(o.status.success(), "gguf dequant failed: {}", String::from_utf8_lossy(&o.stderr).trim());
    let got = std::fs::read(&out)?;
    let _ = std::fs::remove_file(&out);
    let want_bytes: Vec<u8> = want.iter().flat_map(|v| v.to_le_bytes()).collect();
    if got == want_bytes {
        return Ok(None);
    }
    let first = got.iter().zip(&want_bytes).position(|(a, b)| a != b);
    Ok(Some(format!(
        "{name}: {} bytes from gguf dequant, {} from to_float, first difference at byte {first:?}",
        got.len(),
        want_bytes.len()
    )))
}

/// (real rows quantize) see the module docs.
fn real_rows(ggml: &Ggml, opts: &Opts) -> Result<Vec<Check>> {
    const GROUP: &str = "real rows quantize";
    let src = crate::models::ensure_model(crate::models::find_model("smollm2").context("smollm2")?)?;
    let f = gguf_format::GgufFile::open(&src)?;
    let im_file = gguf_format::GgufFile::open(ensure_imatrix()?)?;
    let f32s = |b: &[u8]| b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<f32>>();
    // (rows, imatrix) per layer.
    let mut layers: Vec<(Vec<f32>, Vec<f32>)> = Vec::new();
    for l in 0.. {
        let name = format!("blk.{l}.ffn_down.weight");
        let Some(info) = f.tensor(&name) else { break };
        let n = info.dims[0] as usize;
        let t = info.require_type()?;
        let data = f.tensor_data(info)?;
        let row_bytes = t.row_size(n)?;
        let take = ROWS_PER_LAYER.min(data.len() / row_bytes);
        let rows = t.dequantize_to_vec(&data[..take * row_bytes])?;
        let sum2 = f32s(im_file.tensor_data_by_name(&format!("{name}.in_sum2"))?);
        let counts = f32s(im_file.tensor_data_by_name(&format!("{name}.counts"))?);
        ensure!(sum2.len() == n && !counts.is_empty(), "{name}: imatrix shape");
        let im: Vec<f32> = sum2.iter().map(|v| v / counts[0]).collect();
        layers.push((rows, im));
    }
    ensure!(!layers.is_empty(), "no ffn_down tensors in {}", src.display());
    let n = layers[0].1.len();
    let mut out = Vec::new();
    for &name in NEW_TYPES {
        if !opts.only.is_empty() && !opts.only.iter().any(|o| o.eq_ignore_ascii_case(name)) {
            continue;
        }
        let Some(t) = ggml_quants::by_name(name) else {
            out.push(Check::skip(GROUP, name, "not registered"));
            continue;
        };
        let Some(g) = ggml.type_info(t.id) else { continue };
        if t.quantize_rows_fn.is_none() || !g.has_quantize_chunk || !n.is_multiple_of(t.block_size) {
            out.push(Check::skip(GROUP, name, "no quantizer or row width not whole blocks"));
            continue;
        }
        let row_bytes = t.row_size(n)?;
        let modes: &[bool] = if g.requires_imatrix { &[true] } else { &[true, false] };
        let (mut cases, mut bad, mut first) = (0u64, 0u64, None);
        for &with_im in modes {
            for (li, (rows, im)) in layers.iter().enumerate() {
                let im = with_im.then_some(&im[..]);
                let mut theirs = vec![0u8; rows.len() / n * row_bytes];
                ggml.quantize_chunk(t.id, rows, &mut theirs, n, im)?;
                let ours = t.quantize_to_vec(rows, n, im)?;
                for (r, (o, w)) in ours.chunks_exact(row_bytes).zip(theirs.chunks_exact(row_bytes)).enumerate() {
                    cases += 1;
                    if o != w {
                        bad += 1;
                        first.get_or_insert_with(|| {
                            let b = o.iter().zip(w).position(|(a, b)| a != b).unwrap_or(0);
                            format!("first: blk.{li}.ffn_down row {r} imatrix={with_im} byte {b}")
                        });
                    }
                }
            }
        }
        let how = if modes.len() == 2 { "with and without imatrix" } else { "with imatrix (required)" };
        let note = format!("{} layers × {ROWS_PER_LAYER} rows of {n}, {how}", layers.len());
        out.push(Check::counted(GROUP, name, cases, bad, None, first.map_or(note.clone(), |f| format!("{f}; {note}"))));
    }
    Ok(out)
}
