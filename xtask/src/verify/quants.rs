//! `cargo xtask verify quants`: every type in the `ggml-quants` registry against ggml.
//!
//! Per type: (traits) name, sizes and flags equal ggml's `type_traits`; (dequantize)
//! random blocks decode to the same f32 bits as ggml's `to_float`; (quantize) rows of
//! many lengths and distributions, with and without an importance matrix, encode to the
//! same bytes as `ggml_quantize_chunk`; (quantize_ref) `quantize_ref` equals
//! `from_float_ref`.
//!
//! ggml aborts the process on some inputs (`GGML_ASSERT`), so each type runs in a child
//! process (`xtask __verify-type`) that prints its results as JSON lines; a crash is
//! reported as a failure of that type and the other types still run.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use ggml_quants::TypeTraits;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use super::{load_ggml, Check, Opts, Report, Status};
use crate::ggml::{Ggml, TypeInfo};

const RESULT_PREFIX: &str = "@@check ";

/// Input distributions for the quantizers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dist {
    /// N(0, σ) with σ drawn per row from 1e-3..1e2.
    Gaussian,
    /// U(-a, a), a drawn per row.
    Uniform,
    /// All zeros.
    Zero,
    /// Gaussian plus one element 1e3..1e5 times larger.
    Outlier,
    /// Gaussian times 1e-30.
    Tiny,
    /// -|gaussian|.
    Negative,
    /// Gaussian times 10^U(-6, 6) per element.
    Mixed,
}

/// Every distribution, in the order cases are generated.
pub const DISTS: [Dist; 7] =
    [Dist::Gaussian, Dist::Uniform, Dist::Zero, Dist::Outlier, Dist::Tiny, Dist::Negative, Dist::Mixed];

impl Dist {
    /// Short name for notes.
    pub fn name(self) -> &'static str {
        match self {
            Dist::Gaussian => "gaussian",
            Dist::Uniform => "uniform",
            Dist::Zero => "zero",
            Dist::Outlier => "outlier",
            Dist::Tiny => "tiny",
            Dist::Negative => "negative",
            Dist::Mixed => "mixed",
        }
    }
}

/// A standard normal sample (Box-Muller).
pub fn gaussian(rng: &mut StdRng) -> f32 {
    let u1: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
    let u2: f64 = rng.gen();
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

/// Fills one row with `dist`.
pub fn fill_row(rng: &mut StdRng, dist: Dist, row: &mut [f32]) {
    let sigma = 10f32.powf(rng.gen_range(-3.0..2.0));
    match dist {
        Dist::Gaussian => row.iter_mut().for_each(|x| *x = sigma * gaussian(rng)),
        Dist::Uniform => row.iter_mut().for_each(|x| *x = sigma * rng.gen_range(-1.0f32..1.0)),
        Dist::Zero => row.fill(0.0),
        Dist::Outlier => {
            row.iter_mut().for_each(|x| *x = sigma * gaussian(rng));
            let i = rng.gen_range(0..row.len());
            let sign = if rng.gen() { 1.0 } else { -1.0 };
            row[i] = sign * sigma * 10f32.powf(rng.gen_range(3.0..5.0));
        }
        Dist::Tiny => row.iter_mut().for_each(|x| *x = 1e-30 * gaussian(rng)),
        Dist::Negative => row.iter_mut().for_each(|x| *x = -(sigma * gaussian(rng)).abs()),
        Dist::Mixed => row.iter_mut().for_each(|x| *x = gaussian(rng) * 10f32.powf(rng.gen_range(-6.0..6.0))),
    }
}

/// A random positive importance matrix: log-normal weights.
pub fn random_imatrix(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| (1.5 * gaussian(rng)).exp().max(1e-6)).collect()
}

/// Row lengths tried for a block size: multiples of it, including 2304 for 256-blocks
/// and 32, 96, 576, 896 for blocks that divide 32.
pub fn row_lengths(block_size: usize) -> Vec<usize> {
    let mut v: Vec<usize> = [32, 96, 256, 512, 576, 768, 896, 1024, 1536, 2048, 2304, 3072, 4096]
        .into_iter()
        .filter(|n| n % block_size == 0)
        .collect();
    for extra in [block_size, 3 * block_size] {
        if !v.contains(&extra) && extra <= 16384 {
            v.push(extra);
        }
    }
    v.sort_unstable();
    v
}

fn type_rng(seed: u64, id: u32, salt: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ ((id as u64) << 32) ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Runs ours, turning a panic into an error.
fn guarded<T>(f: impl FnOnce() -> ggml_quants::Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(anyhow::Error::from),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            Err(anyhow::anyhow!("panicked: {msg}"))
        }
    }
}

fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits()
}

fn abs_err(a: f32, b: f32) -> f64 {
    let d = (a as f64 - b as f64).abs();
    if d.is_nan() {
        f64::INFINITY
    } else {
        d
    }
}

fn max_opt(a: Option<f64>, b: f64) -> Option<f64> {
    Some(a.map_or(b, |a| a.max(b)))
}

/// The reference decoder for one type: ggml's `to_float`, or for the plain types that
/// have none (f32 and the integers) the plain conversion.
enum Reference {
    ToFloat,
    Plain(fn(&[u8]) -> f32),
}

fn reference_for(g: &TypeInfo) -> Option<(Reference, String)> {
    if let Some(src) = &g.to_float_source {
        return Some((Reference::ToFloat, src.clone()));
    }
    let plain: fn(&[u8]) -> f32 = match g.name.as_str() {
        "f32" => |b| f32::from_le_bytes(b.try_into().unwrap()),
        "f64" => |b| f64::from_le_bytes(b.try_into().unwrap()) as f32,
        "i8" => |b| b[0] as i8 as f32,
        "i16" => |b| i16::from_le_bytes(b.try_into().unwrap()) as f32,
        "i32" => |b| i32::from_le_bytes(b.try_into().unwrap()) as f32,
        "i64" => |b| i64::from_le_bytes(b.try_into().unwrap()) as f32,
        _ => return None,
    };
    Some((Reference::Plain(plain), "plain conversion (ggml has no to_float)".to_string()))
}

fn reference_decode(ggml: &Ggml, g: &TypeInfo, r: &Reference, src: &[u8], dst: &mut [f32]) -> Result<()> {
    match r {
        Reference::ToFloat => ggml.to_float(g.id, src, dst),
        Reference::Plain(f) => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(g.type_size)) {
                *d = f(s);
            }
            Ok(())
        }
    }
}

/// (traits) our registration against ggml's `type_traits`.
fn check_traits(t: &TypeTraits, g: &TypeInfo) -> Check {
    let mut bad = Vec::new();
    let mut notes = Vec::new();
    if t.name != g.name {
        bad.push(format!("name {:?} vs ggml {:?}", t.name, g.name));
    }
    if t.block_size != g.block_size {
        bad.push(format!("block_size {} vs {}", t.block_size, g.block_size));
    }
    if t.type_size != g.type_size {
        bad.push(format!("type_size {} vs {}", t.type_size, g.type_size));
    }
    if t.is_quantized != g.is_quantized {
        bad.push(format!("is_quantized {} vs {}", t.is_quantized, g.is_quantized));
    }
    if t.requires_imatrix != g.requires_imatrix {
        bad.push(format!("requires_imatrix {} vs {}", t.requires_imatrix, g.requires_imatrix));
    }
    match (t.quantize_ref_fn.is_some(), g.has_from_float_ref) {
        (true, false) => notes.push(match &g.from_float_ref_source {
            Some(s) => format!("has quantize_ref; ggml's traits have no from_float_ref (checked against {s})"),
            None => "has quantize_ref, ggml has no from_float_ref".to_string(),
        }),
        (false, true) => notes.push("no quantize_ref yet (ggml has from_float_ref)".to_string()),
        _ => {}
    }
    match (t.quantize_rows_fn.is_some(), g.has_quantize_chunk) {
        (true, false) => notes.push("has quantize_rows, ggml_quantize_chunk has no case".to_string()),
        (false, true) => notes.push("no quantize_rows yet (ggml_quantize_chunk has one)".to_string()),
        _ => {}
    }
    let note = bad.iter().chain(&notes).cloned().collect::<Vec<_>>().join("; ");
    Check::counted("traits", t.name, 6, bad.len() as u64, None, note)
}

/// (dequantize) random blocks, our `dequantize` vs ggml's `to_float`, bit for bit.
fn check_dequantize(ggml: &Ggml, t: &TypeTraits, g: &TypeInfo, opts: &Opts) -> Check {
    const GROUP: &str = "dequantize";
    let Some((reference, ref_name)) = reference_for(g) else {
        return Check::skip(GROUP, t.name, "ggml has no to_float and no plain conversion applies");
    };
    let (bs, ts) = (g.block_size, g.type_size);
    let mut rng = type_rng(opts.seed, t.id, 1);
    let mut tmp = vec![0f32; bs];
    let mut buf = Vec::new();
    let mut notes = Vec::new();
    let exhaustive = bs == 1 && ts <= 2;
    if exhaustive {
        // Every bit pattern whose reference value is finite.
        for v in 0..(1u32 << (8 * ts)) {
            let b = &v.to_le_bytes()[..ts];
            if let Err(e) = reference_decode(ggml, g, &reference, b, &mut tmp) {
                return Check::error(GROUP, t.name, e);
            }
            if tmp[0].is_finite() {
                buf.extend_from_slice(b);
            }
        }
        notes.push(format!("exhaustive over finite values, vs {ref_name}"));
    } else {
        let n_blocks = if opts.quick { 2_000 } else { 10_000 };
        let mut block = vec![0u8; ts];
        let mut resampled = 0u64;
        let mut gave_up = 0u64;
        for _ in 0..n_blocks {
            let mut tries = 0;
            loop {
                rng.fill_bytes(&mut block);
                if let Err(e) = reference_decode(ggml, g, &reference, &block, &mut tmp) {
                    return Check::error(GROUP, t.name, e);
                }
                if tmp.iter().all(|x| x.is_finite()) {
                    break;
                }
                tries += 1;
                resampled += 1;
                if tries >= 1000 {
                    gave_up += 1;
                    break;
                }
            }
            buf.extend_from_slice(&block);
        }
        notes.push(format!("random blocks vs {ref_name}, {resampled} resampled for non-finite output"));
        if gave_up > 0 {
            notes.push(format!("{gave_up} blocks kept with non-finite output after 1000 tries"));
        }
    }
    let n_blocks = buf.len() / ts;
    let mut want = vec![0f32; n_blocks * bs];
    if let Err(e) = reference_decode(ggml, g, &reference, &buf, &mut want) {
        return Check::error(GROUP, t.name, e);
    }
    let mut got = vec![0f32; n_blocks * bs];
    if let Err(e) = guarded(|| t.dequantize(&buf, &mut got)) {
        return Check::error(GROUP, t.name, e);
    }
    let mut mismatches = 0u64;
    let mut max_err = None;
    let mut first = None;
    for (i, (w, o)) in want.chunks_exact(bs).zip(got.chunks_exact(bs)).enumerate() {
        if let Some(j) = (0..bs).find(|&j| !same_bits(w[j], o[j])) {
            mismatches += 1;
            for j in 0..bs {
                if !same_bits(w[j], o[j]) {
                    max_err = max_opt(max_err, abs_err(w[j], o[j]));
                }
            }
            if first.is_none() {
                let bytes = &buf[i * ts..(i + 1) * ts];
                let shown: String = bytes.iter().take(16).map(|b| format!("{b:02x}")).collect();
                first = Some(format!(
                    "first: block {i} ({shown}{}) elem {j}: ours {:e} ggml {:e}",
                    if ts > 16 { "..." } else { "" },
                    o[j],
                    w[j]
                ));
            }
        }
    }
    notes.extend(first);
    Check::counted(GROUP, t.name, n_blocks as u64, mismatches, max_err, notes.join("; "))
}

/// Decodes encoded rows for error measurement: ggml's to_float when it exists, else ours.
fn decode_for_error(ggml: &Ggml, t: &TypeTraits, g: &TypeInfo, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    let ok = if g.to_float_source.is_some() {
        ggml.to_float(g.id, bytes, &mut out).is_ok()
    } else {
        guarded(|| t.dequantize(bytes, &mut out)).is_ok()
    };
    if !ok {
        out.fill(f32::NAN);
    }
    out
}

struct RowCompare {
    cases: u64,
    mismatches: u64,
    max_err: Option<f64>,
    first: Option<String>,
}

impl RowCompare {
    fn new() -> Self {
        RowCompare { cases: 0, mismatches: 0, max_err: None, first: None }
    }

    /// Compares encoded rows (`row_bytes` each) and measures the error of differing rows.
    #[allow(clippy::too_many_arguments)]
    fn rows(
        &mut self,
        ggml: &Ggml,
        t: &TypeTraits,
        g: &TypeInfo,
        ours: &[u8],
        theirs: &[u8],
        n_per_row: usize,
        row_bytes: usize,
        what: &dyn Fn() -> String,
    ) {
        for (r, (o, w)) in ours.chunks_exact(row_bytes).zip(theirs.chunks_exact(row_bytes)).enumerate() {
            self.cases += 1;
            if o == w {
                continue;
            }
            self.mismatches += 1;
            let a = decode_for_error(ggml, t, g, o, n_per_row);
            let b = decode_for_error(ggml, t, g, w, n_per_row);
            let e = a
                .iter()
                .zip(&b)
                .map(|(x, y)| if same_bits(*x, *y) { 0.0 } else { abs_err(*x, *y) })
                .fold(0.0, f64::max);
            self.max_err = max_opt(self.max_err, e);
            if self.first.is_none() {
                let byte = o.iter().zip(w).position(|(x, y)| x != y).unwrap_or(0);
                let blk = byte / g.type_size;
                self.first = Some(format!(
                    "first: {} row {r} byte {byte} (block {blk}, offset {}): ours {:02x} ggml {:02x}",
                    what(),
                    byte % g.type_size,
                    o[byte],
                    w[byte]
                ));
            }
        }
    }

    fn fail_all(&mut self, rows: usize, err: &anyhow::Error, what: &dyn Fn() -> String) {
        self.cases += rows as u64;
        self.mismatches += rows as u64;
        self.max_err = max_opt(self.max_err, f64::INFINITY);
        if self.first.is_none() {
            self.first = Some(format!("first: {}: {err:#}", what()));
        }
    }
}

/// (quantize) our `quantize_rows` vs `ggml_quantize_chunk`, byte for byte.
fn check_quantize(ggml: &Ggml, t: &TypeTraits, g: &TypeInfo, opts: &Opts) -> Check {
    const GROUP: &str = "quantize";
    match (t.quantize_rows_fn.is_some(), g.has_quantize_chunk) {
        (false, false) => return Check::skip(GROUP, t.name, "neither side has a quantizer"),
        (false, true) => return Check::skip(GROUP, t.name, "no quantize_rows registered yet"),
        (true, false) => return Check::skip(GROUP, t.name, "ggml_quantize_chunk has no case for this type"),
        (true, true) => {}
    }
    let mut rng = type_rng(opts.seed, t.id, 2);
    let lengths = row_lengths(g.block_size);
    let imatrix_modes: &[bool] = if g.requires_imatrix || t.requires_imatrix { &[true] } else { &[false, true] };
    let combos = lengths.len() * DISTS.len() * imatrix_modes.len();
    let target: usize = if opts.quick { 120 } else { 1000 };
    let rows = target.div_ceil(combos).max(1);
    let mut cmp = RowCompare::new();
    for &n in &lengths {
        let row_bytes = n / g.block_size * g.type_size;
        for dist in DISTS {
            for &with_im in imatrix_modes {
                let mut src = vec![0f32; rows * n];
                for row in src.chunks_exact_mut(n) {
                    fill_row(&mut rng, dist, row);
                }
                let im = with_im.then(|| random_imatrix(&mut rng, n));
                let what = || format!("len {n} {} imatrix={}", dist.name(), if with_im { "yes" } else { "no" });
                let mut theirs = vec![0u8; rows * row_bytes];
                if let Err(e) = ggml.quantize_chunk(g.id, &src, &mut theirs, n, im.as_deref()) {
                    return Check::error(GROUP, t.name, e);
                }
                let mut ours = vec![0u8; rows * row_bytes];
                match guarded(|| t.quantize_rows(&src, &mut ours, n, im.as_deref())) {
                    Ok(_) => cmp.rows(ggml, t, g, &ours, &theirs, n, row_bytes, &what),
                    Err(e) => cmp.fail_all(rows, &e, &what),
                }
            }
        }
    }
    let lens = lengths.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(",");
    let mut note = format!(
        "lengths {lens}; {} dists; imatrix {}",
        DISTS.len(),
        if imatrix_modes.len() == 2 { "none+random" } else { "random only (required)" }
    );
    if let Some(f) = cmp.first {
        note = format!("{f}; {note}");
    }
    Check::counted(GROUP, t.name, cmp.cases, cmp.mismatches, cmp.max_err, note)
}

/// (imatrix required) where ggml asserts on a missing importance matrix
/// (`ggml_quantize_requires_imatrix`), ours must refuse with `Error::ImatrixRequired`.
fn check_requires_imatrix(t: &TypeTraits, g: &TypeInfo) -> Option<Check> {
    const GROUP: &str = "imatrix required";
    if !g.requires_imatrix || t.quantize_rows_fn.is_none() {
        return None;
    }
    let n = g.block_size;
    let src = vec![1.0f32; n];
    let mut dst = vec![0u8; g.type_size];
    Some(match guarded(|| t.quantize_rows(&src, &mut dst, n, None)) {
        Err(e)
            if e.downcast_ref::<ggml_quants::Error>()
                .is_some_and(|e| matches!(e, ggml_quants::Error::ImatrixRequired { .. })) =>
        {
            Check::counted(GROUP, t.name, 1, 0, None, format!("refused: {e}"))
        }
        Err(e) => Check::counted(GROUP, t.name, 1, 1, None, format!("refused with the wrong error: {e:#}")),
        Ok(_) => Check::counted(GROUP, t.name, 1, 1, None, "quantized without an imatrix (ggml aborts)".into()),
    })
}

/// Blocks of `quantize_row_iq4_nl_ref` whose codes are uninitialised memory in ggml: with
/// `ntry = -1` an all-zero block (amax < GROUP_MAX_EPS) skips the code search and packs
/// whatever the caller's stack array `L` held. Such a block has scale 0 on both sides and
/// decodes to zeros either way; its code bytes are copied from ggml's output and counted.
fn tolerate_uninit_codes(t: &TypeTraits, ours: &mut [u8], theirs: &[u8]) -> u64 {
    if t.name != "iq4_nl" {
        return 0;
    }
    let mut n = 0;
    for (o, w) in ours.chunks_exact_mut(t.type_size).zip(theirs.chunks_exact(t.type_size)) {
        if o != w && o[..2] == [0, 0] && w[..2] == [0, 0] {
            o.copy_from_slice(w);
            n += 1;
        }
    }
    n
}

/// (quantize_ref) our `quantize_ref` vs ggml's `from_float_ref`, byte for byte.
fn check_quantize_ref(ggml: &Ggml, t: &TypeTraits, g: &TypeInfo, opts: &Opts) -> Check {
    const GROUP: &str = "quantize_ref";
    let theirs = g.from_float_ref_source.is_some();
    match (t.quantize_ref_fn.is_some(), theirs) {
        (false, false) => return Check::skip(GROUP, t.name, "neither side has a reference quantizer"),
        (false, true) => return Check::skip(GROUP, t.name, "no quantize_ref registered yet"),
        (true, false) => return Check::skip(GROUP, t.name, "ggml has no from_float_ref"),
        (true, true) => {}
    }
    let mut rng = type_rng(opts.seed, t.id, 3);
    let lengths = row_lengths(g.block_size);
    let target: usize = if opts.quick { 120 } else { 1000 };
    let rows = target.div_ceil(lengths.len() * DISTS.len()).max(1);
    let mut cmp = RowCompare::new();
    let mut tolerated = 0u64;
    for &n in &lengths {
        let row_bytes = n / g.block_size * g.type_size;
        for dist in DISTS {
            let mut src = vec![0f32; rows * n];
            for row in src.chunks_exact_mut(n) {
                fill_row(&mut rng, dist, row);
            }
            let what = || format!("len {n} {}", dist.name());
            let mut theirs = vec![0u8; rows * row_bytes];
            if let Err(e) = ggml.quantize_row_ref(g.id, &src, &mut theirs) {
                return Check::error(GROUP, t.name, e);
            }
            let mut ours = vec![0u8; rows * row_bytes];
            match guarded(|| t.quantize_ref(&src, &mut ours)) {
                Ok(()) => {
                    tolerated += tolerate_uninit_codes(t, &mut ours, &theirs);
                    cmp.rows(ggml, t, g, &ours, &theirs, n, row_bytes, &what)
                }
                Err(e) => cmp.fail_all(rows, &e, &what),
            }
        }
    }
    let mut note = format!("vs {}", g.from_float_ref_source.as_deref().unwrap_or("?"));
    if tolerated > 0 {
        note.push_str(&format!(
            "; {tolerated} all-zero blocks (scale 0) whose codes are uninitialised stack memory in ggml \
             (quantize_row_iq4_nl_ref, ntry = -1) taken from ggml's output"
        ));
    }
    if let Some(f) = cmp.first {
        note = format!("{f}; {note}");
    }
    Check::counted(GROUP, t.name, cmp.cases, cmp.mismatches, cmp.max_err, note)
}

/// Every check for one type (run inside the worker process).
pub fn type_checks(ggml: &Ggml, t: &TypeTraits, opts: &Opts, emit: &mut dyn FnMut(Check)) {
    let Some(g) = ggml.type_info(t.id) else {
        emit(Check::skip("traits", t.name, format!("ggml does not know type id {}", t.id)));
        return;
    };
    emit(check_traits(t, g));
    if t.block_size != g.block_size || t.type_size != g.type_size {
        emit(Check::skip("dequantize", t.name, "block layout differs from ggml's"));
        return;
    }
    emit(check_dequantize(ggml, t, g, opts));
    if let Some(c) = check_requires_imatrix(t, g) {
        emit(c);
    }
    emit(check_quantize(ggml, t, g, opts));
    emit(check_quantize_ref(ggml, t, g, opts));
}

/// `xtask __verify-type <id>`: the worker. Prints one `@@check {json}` line per check.
pub fn worker(cache: &Path, id: u32, opts: &Opts) -> Result<()> {
    let ggml = load_ggml(cache)?;
    let t = ggml_quants::by_id(id).with_context(|| format!("type id {id} is not registered"))?;
    // Keep panics from our code short: the message is in the check's note.
    std::panic::set_hook(Box::new(|info| eprintln!("panic: {info}")));
    type_checks(&ggml, t, opts, &mut |c| println!("{RESULT_PREFIX}{}", c.to_json()));
    Ok(())
}

/// `cargo xtask verify quants`.
pub fn run(cache: &Path, opts: &Opts, report: &mut Report) -> Result<()> {
    let ggml = load_ggml(cache)?;
    let all = ggml_quants::all();
    report.note(format!(
        "ggml-quants registry: {} types registered ({}); libggml {} knows {} of {} ids",
        all.len(),
        all.iter().map(|t| t.name).collect::<Vec<_>>().join(", "),
        ggml.path.display(),
        ggml.types().count(),
        ggml.type_count
    ));
    for p in &ggml_quants::registry_problems().problems {
        report.push(Check::counted("registry", "problems", 1, 1, None, p.clone()));
    }
    let missing: Vec<String> = ggml
        .types()
        .filter(|g| ggml_quants::by_id(g.id).is_none())
        .map(|g| format!("{} (id {})", g.name, g.id))
        .collect();
    for m in &missing {
        report.note(format!("not registered: {m}"));
    }
    if opts.only.is_empty() || opts.only.iter().any(|o| o == "tables") {
        for c in super::iq_tables::checks(&crate::llama_cpp::src_dir(cache)) {
            report.push(c);
        }
    }
    let exe = std::env::current_exe()?;
    for t in all {
        if !opts.only.is_empty() && !opts.only.iter().any(|o| o.eq_ignore_ascii_case(t.name)) {
            continue;
        }
        eprintln!("verify quants: {} (id {})", t.name, t.id);
        let mut cmd = Command::new(&exe);
        cmd.arg("__verify-type").arg(t.id.to_string()).arg("--seed").arg(opts.seed.to_string());
        if opts.quick {
            cmd.arg("--quick");
        }
        let out = cmd.output().context("running the verify worker")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut got = 0;
        for line in stdout.lines() {
            if let Some(j) = line.strip_prefix(RESULT_PREFIX) {
                if let Some(c) = serde_json::from_str(j).ok().as_ref().and_then(Check::from_json) {
                    report.push(c);
                    got += 1;
                }
            }
        }
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect();
            report.push(Check {
                group: "worker".into(),
                what: t.name.into(),
                cases: 1,
                mismatches: 1,
                max_err: None,
                status: Status::Fail,
                note: format!("worker {} after {got} checks: {}", out.status, tail.join(" / ")),
            });
        }
    }
    Ok(())
}
