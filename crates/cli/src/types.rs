//! `gguf types`: the registered ggml types with the kernel each uses on this CPU, and
//! `gguf types --check`: every registry's clashes and overrides (types, kernels,
//! architectures, pre-tokenizers, recipes), the check a plug-in author runs after
//! linking their crate into a rebuilt `gguf`.

use std::fmt::Write as _;

/// The type table: id, name, block, bytes, what quantizes it, the kernel used here.
pub fn table() -> String {
    let mut out = String::new();
    let cap = match quant_kernels::cpu::cap() {
        quant_kernels::cpu::Level::Native => String::new(),
        l => format!(" (capped by {}={l})", quant_kernels::cpu::ENV),
    };
    let _ = writeln!(
        out,
        "{:>4}  {:<10} {:>6} {:>6}  {:<22}  kernel here{cap}",
        "id", "name", "block", "bytes", "quantize"
    );
    for t in ggml_quants::all() {
        let q = match (t.quantize_rows_fn.is_some(), t.requires_imatrix) {
            (true, true) => "yes (imatrix required)",
            (true, false) => "yes",
            (false, _) if t.quantize_ref_fn.is_some() => "reference only",
            _ => "no",
        };
        let kernel = quant_kernels::kernel_info(t.id);
        let _ = writeln!(out, "{:>4}  {:<10} {:>6} {:>6}  {q:<22}  {kernel}", t.id, t.name, t.block_size, t.type_size);
    }
    out
}

/// Every registry's report, by registry: `(text, sound)` where `sound` is false when any
/// registry has a problem.
pub fn check() -> (String, bool) {
    let registries: [(&str, usize, gguf_registry::Report); 5] = [
        ("ggml types", ggml_quants::all().len(), ggml_quants::registry_problems()),
        (
            "kernels",
            ggml_quants::all().iter().filter(|t| quant_kernels::registry::kernel_for(t.id).is_some()).count(),
            quant_kernels::registry_problems(),
        ),
        ("architectures", gguf_models::architectures().len(), gguf_models::registry_problems()),
        ("pre-tokenizers", gguf_tokenizer::pretok::known_names().len(), gguf_tokenizer::pretok::registry_problems()),
        ("recipes", gguf_quantize::recipe::all().len(), gguf_quantize::recipe::registry_problems()),
    ];
    let mut out = String::new();
    let mut sound = true;
    for (name, n, r) in registries {
        let state = if r.problems.is_empty() { "ok" } else { "PROBLEMS" };
        let _ = writeln!(
            out,
            "{name}: {n} {}, {} problem(s), {} override(s): {state}",
            if name == "kernels" { "types with a kernel here" } else { "registered" },
            r.problems.len(),
            r.overrides.len()
        );
        for p in &r.problems {
            let _ = writeln!(out, "  problem: {p}");
        }
        for o in &r.overrides {
            let _ = writeln!(out, "  override: {o}");
        }
        sound &= r.problems.is_empty();
    }
    (out, sound)
}
