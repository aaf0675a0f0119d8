//! `verify quants`, group `tables`: the lattice and codebook tables of `ggml-quants`
//! (`types::iq_tables`, transcribed from `ggml-common.h`) and the grids its quantizers
//! search (`types::iq_grid`, derived from those tables) against the llama.cpp sources:
//! every `GGML_TABLE_BEGIN` table of `ggml/src/ggml-common.h` and the `kgrid_*` level
//! tables inside `iq2xs_init_impl` / `iq3xs_init_impl` of `ggml/src/ggml-quants.c`.
//!
//! libggml does not export these tables (they are `static`), so they are read from the
//! source the library was built from; dequantize and quantize then check them in use.

use std::path::Path;

use anyhow::{bail, Context, Result};
use ggml_quants::types::{iq_grid, iq_tables as t};

use super::Check;

/// The integers of `name`'s initializer in `src`: a `GGML_TABLE_BEGIN(type, name, n)` table
/// or a `static const T name[n] = { ... };` array.
fn c_table(src: &str, name: &str) -> Result<Vec<i128>> {
    let body = if let Some(at) = src.find(&format!(", {name},")).filter(|_| src.contains("GGML_TABLE_BEGIN")) {
        let rest = &src[at..];
        let open = rest.find(')').context("GGML_TABLE_BEGIN")? + 1;
        let end = rest.find("GGML_TABLE_END").with_context(|| format!("end of {name}"))?;
        &rest[open..end]
    } else if let Some(at) = src.find(&format!(" {name}[")) {
        let rest = &src[at..];
        let open = rest.find('{').context("{")? + 1;
        let end = rest.find("};").with_context(|| format!("end of {name}"))?;
        &rest[open..end]
    } else {
        bail!("table {name} not found");
    };
    let mut out = Vec::new();
    for line in body.lines() {
        let line = line.split("//").next().unwrap_or("");
        for tok in line.split(',') {
            let tok = tok.trim();
            if tok.is_empty() {
                continue;
            }
            let (neg, digits) = match tok.strip_prefix('-') {
                Some(d) => (true, d),
                None => (false, tok),
            };
            let v = match digits.strip_prefix("0x") {
                Some(h) => i128::from_str_radix(h, 16),
                None => digits.parse::<i128>(),
            }
            .with_context(|| format!("{name}: bad number {tok:?}"))?;
            out.push(if neg { -v } else { v });
        }
    }
    Ok(out)
}

fn compare(name: &str, ours: Vec<i128>, theirs: Result<Vec<i128>>, from: &str) -> Check {
    let theirs = match theirs {
        Ok(v) => v,
        Err(e) => return Check::error("tables", name, e),
    };
    if ours.len() != theirs.len() {
        return Check::counted(
            "tables",
            name,
            theirs.len() as u64,
            theirs.len() as u64,
            None,
            format!("{} entries, {from} has {}", ours.len(), theirs.len()),
        );
    }
    let bad: Vec<usize> = (0..ours.len()).filter(|&i| ours[i] != theirs[i]).collect();
    let note = match bad.first() {
        Some(&i) => format!("first: entry {i}: ours {:#x} {from} {:#x}", ours[i], theirs[i]),
        None => format!("vs {from}"),
    };
    Check::counted("tables", name, ours.len() as u64, bad.len() as u64, None, note)
}

/// The packed level vectors of a search grid (`kgrid_*` in ggml): `bits` per coordinate.
fn kgrid<const N: usize>(g: &iq_grid::IqGrid<N>, bits: u32) -> Vec<i128> {
    g.grid
        .iter()
        .map(|p| p.iter().enumerate().map(|(i, &v)| (((v - 1) / 2) as i128) << (bits as usize * i)).sum())
        .collect()
}

/// Every table check, one row each.
pub fn checks(src_dir: &Path) -> Vec<Check> {
    let common_path = src_dir.join("ggml/src/ggml-common.h");
    let quants_path = src_dir.join("ggml/src/ggml-quants.c");
    let (common, quants) = match (std::fs::read_to_string(&common_path), std::fs::read_to_string(&quants_path)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return vec![Check::error("tables", "sources", e)],
    };
    let h = "ggml-common.h";
    let q = "ggml-quants.c";
    let u64s = |v: &[u64]| v.iter().map(|&x| x as i128).collect::<Vec<_>>();
    let u32s = |v: &[u32]| v.iter().map(|&x| x as i128).collect::<Vec<_>>();
    let i8s = |v: &[i8]| v.iter().map(|&x| x as i128).collect::<Vec<_>>();
    let u8s = |v: &[u8]| v.iter().map(|&x| x as i128).collect::<Vec<_>>();
    vec![
        compare("kmask_iq2xs", u8s(&t::KMASK_IQ2XS), c_table(&common, "kmask_iq2xs"), h),
        compare("ksigns_iq2xs", u8s(&t::KSIGNS_IQ2XS), c_table(&common, "ksigns_iq2xs"), h),
        compare("iq2xxs_grid", u64s(&t::IQ2XXS_GRID), c_table(&common, "iq2xxs_grid"), h),
        compare("iq2xs_grid", u64s(&t::IQ2XS_GRID), c_table(&common, "iq2xs_grid"), h),
        compare("iq2s_grid", u64s(&t::IQ2S_GRID), c_table(&common, "iq2s_grid"), h),
        compare("iq3xxs_grid", u32s(&t::IQ3XXS_GRID), c_table(&common, "iq3xxs_grid"), h),
        compare("iq3s_grid", u32s(&t::IQ3S_GRID), c_table(&common, "iq3s_grid"), h),
        compare("iq1s_grid", u64s(&t::IQ1S_GRID), c_table(&common, "iq1s_grid"), h),
        compare("kvalues_iq4nl", i8s(&t::KVALUES_IQ4NL), c_table(&common, "kvalues_iq4nl"), h),
        compare("kvalues_fp4", i8s(&t::KVALUES_FP4), c_table(&common, "kvalues_fp4"), h),
        compare("search grid iq2_xxs", kgrid(iq_grid::iq2xxs(), 2), c_table(&quants, "kgrid_2bit_256"), q),
        compare("search grid iq2_xs", kgrid(iq_grid::iq2xs(), 2), c_table(&quants, "kgrid_2bit_512"), q),
        compare("search grid iq2_s", kgrid(iq_grid::iq2s(), 2), c_table(&quants, "kgrid_2bit_1024"), q),
        compare("search grid iq1_s/iq1_m", kgrid(iq_grid::iq1s(), 2), c_table(&quants, "kgrid_1bit_2048"), q),
        compare("search grid iq3_xxs", kgrid(iq_grid::iq3xxs(), 3), c_table(&quants, "kgrid_256"), q),
        compare("search grid iq3_s", kgrid(iq_grid::iq3s(), 3), c_table(&quants, "kgrid_512"), q),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_table_styles() {
        let h = "GGML_TABLE_BEGIN(int8_t, kv, 4)\n    -127, 0x10, // c\n 3,\nGGML_TABLE_END()\n";
        assert_eq!(c_table(h, "kv").unwrap(), vec![-127, 16, 3]);
        let c = "static const uint16_t kgrid_256[3] = {\n  0, 2,\n 5,\n};";
        assert_eq!(c_table(c, "kgrid_256").unwrap(), vec![0, 2, 5]);
        assert!(c_table(c, "nope").is_err());
    }
}
