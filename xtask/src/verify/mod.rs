//! `cargo xtask verify`: compares this project against the llama.cpp build in the cache
//! and prints one table per group of checks, then `N passed, M failed`.

pub mod encoders;
pub mod families;
pub mod gguf;
pub mod gguf_api;
pub mod iq_tables;
pub mod layers;
pub mod logits;
pub mod quantize;
pub mod quants;
pub mod requant;
pub mod sampling;
pub mod tokenizer;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{json, Value as Json};

use crate::ggml::Ggml;
use crate::llama_cpp;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// No mismatch.
    Pass,
    /// At least one mismatch, or the check could not run for a reason that is a bug.
    Fail,
    /// Not applicable or not yet possible; says why in the note.
    Skip,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }
    fn parse(s: &str) -> Status {
        match s {
            "pass" => Status::Pass,
            "skip" => Status::Skip,
            _ => Status::Fail,
        }
    }
}

/// One row of a report table.
#[derive(Debug, Clone)]
pub struct Check {
    /// The table it belongs to (`dequantize`, `quantize`, `inspect vs gguf-py`, ...).
    pub group: String,
    /// What was checked (a type name, a file name).
    pub what: String,
    /// How many cases (blocks, rows, keys, tensors) were compared.
    pub cases: u64,
    /// How many of them differed.
    pub mismatches: u64,
    /// Largest absolute difference among the mismatches, where that means something.
    pub max_err: Option<f64>,
    /// Pass, fail or skip.
    pub status: Status,
    /// Free text: the first mismatch, why it was skipped.
    pub note: String,
}

impl Check {
    /// A check that compared `cases` things and found `mismatches` of them different.
    pub fn counted(group: &str, what: &str, cases: u64, mismatches: u64, max_err: Option<f64>, note: String) -> Self {
        let status = if mismatches == 0 && cases > 0 { Status::Pass } else { Status::Fail };
        let note = if cases == 0 && note.is_empty() { "no cases ran".to_string() } else { note };
        Check { group: group.into(), what: what.into(), cases, mismatches, max_err, status, note }
    }
    /// A check that did not apply.
    pub fn skip(group: &str, what: &str, note: impl Into<String>) -> Self {
        Check {
            group: group.into(),
            what: what.into(),
            cases: 0,
            mismatches: 0,
            max_err: None,
            status: Status::Skip,
            note: note.into(),
        }
    }
    /// A check that could not run because of an error.
    pub fn error(group: &str, what: &str, err: impl std::fmt::Display) -> Self {
        Check {
            group: group.into(),
            what: what.into(),
            cases: 0,
            mismatches: 0,
            max_err: None,
            status: Status::Fail,
            note: format!("error: {err:#}"),
        }
    }

    /// As one line of JSON (the protocol between `verify quants` and its workers).
    pub fn to_json(&self) -> Json {
        json!({
            "group": self.group, "what": self.what, "cases": self.cases, "mismatches": self.mismatches,
            "max_err": self.max_err.map(crate::ggml::f64_json), "status": self.status.as_str(), "note": self.note,
        })
    }

    /// The inverse of [`Check::to_json`].
    pub fn from_json(v: &Json) -> Option<Self> {
        Some(Check {
            group: v["group"].as_str()?.to_string(),
            what: v["what"].as_str()?.to_string(),
            cases: v["cases"].as_u64()?,
            mismatches: v["mismatches"].as_u64()?,
            max_err: match &v["max_err"] {
                Json::Number(n) => n.as_f64(),
                Json::String(s) if s == "nan" => Some(f64::NAN),
                Json::String(_) => Some(f64::INFINITY),
                _ => None,
            },
            status: Status::parse(v["status"].as_str()?),
            note: v["note"].as_str().unwrap_or_default().to_string(),
        })
    }
}

/// Everything `verify` found.
#[derive(Debug, Default)]
pub struct Report {
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
    /// Lines printed before the tables (registered types, missing types).
    pub notes: Vec<String>,
    /// Lines printed after the tables, before `N passed, M failed` (totals, speed).
    pub footer: Vec<String>,
}

impl Report {
    /// Adds a check and prints a progress line to stderr.
    pub fn push(&mut self, c: Check) {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let t = START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64();
        eprintln!(
            "  [{t:7.1}s] [{}] {} / {}: {} cases, {} mismatches",
            c.status.as_str(),
            c.group,
            c.what,
            c.cases,
            c.mismatches
        );
        self.checks.push(c);
    }

    /// Adds a line printed before the tables.
    pub fn note(&mut self, s: impl Into<String>) {
        let s = s.into();
        eprintln!("{s}");
        self.notes.push(s);
    }

    /// Adds a line printed after the tables.
    pub fn footer(&mut self, s: impl Into<String>) {
        self.footer.push(s.into());
    }

    /// Passed and failed counts.
    pub fn counts(&self) -> (usize, usize, usize) {
        let count = |s| self.checks.iter().filter(|c| c.status == s).count();
        (count(Status::Pass), count(Status::Fail), count(Status::Skip))
    }

    /// The tables (markdown), grouped in order of first appearance.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for n in &self.notes {
            let _ = writeln!(out, "{n}");
        }
        let mut groups: Vec<&str> = Vec::new();
        for c in &self.checks {
            if !groups.contains(&c.group.as_str()) {
                groups.push(&c.group);
            }
        }
        for g in groups {
            let _ = writeln!(out, "\n### {g}\n");
            let _ = writeln!(out, "| what | cases | mismatches | max error | result | note |");
            let _ = writeln!(out, "|---|---:|---:|---:|---|---|");
            for c in self.checks.iter().filter(|c| c.group == g) {
                let err = match c.max_err {
                    Some(e) => format!("{e:.3e}"),
                    None => "-".into(),
                };
                let note = c.note.replace('|', "\\|").replace('\n', " ");
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} |",
                    c.what,
                    c.cases,
                    c.mismatches,
                    err,
                    c.status.as_str(),
                    note
                );
            }
        }
        let (pass, fail, skip) = self.counts();
        let _ = writeln!(out);
        for f in &self.footer {
            let _ = writeln!(out, "{f}");
        }
        if skip > 0 {
            let _ = writeln!(out, "({skip} skipped)");
        }
        let _ = writeln!(out, "{pass} passed, {fail} failed");
        out
    }
}

/// Options shared by the verify subcommands.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Smaller counts (CI).
    pub quick: bool,
    /// RNG seed; every type derives its own stream from it.
    pub seed: u64,
    /// Only these types (ggml names), when non-empty.
    pub only: Vec<String>,
}

/// Loads libggml-base from the cached build.
pub fn load_ggml(cache: &Path) -> Result<Ggml> {
    llama_cpp::require_built(cache)?;
    Ggml::load(&llama_cpp::libggml_base(cache), &llama_cpp::src_dir(cache))
}

/// The workspace root (xtask's manifest directory's parent).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}
