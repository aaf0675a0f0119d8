//! The recipe registry: a recipe is what llama-quantize calls a file type (`Q4_K_M`) —
//! a default tensor type, the `general.file_type` number it writes, and a per-tensor rule
//! that moves sensitive tensors to other types.
//!
//! Recipes register themselves with `gguf_registry::submit!` (`inventory::submit!` with
//! the registering module recorded); a crate outside this one adds a recipe with one
//! module (see `tests/custom_recipe.rs`). A name registered twice is reported by
//! [`registry_problems`]; the higher priority, then the module name, wins.

use std::sync::OnceLock;

use crate::rules::TensorCtx;
use crate::{Error, Result};

/// A recipe's per-tensor rule: given the tensor and the type chosen so far (the recipe's
/// default type), return the type to use. It runs only for tensors that may be
/// quantized, when the default type is a quantized one, without `--pure` and without a
/// matching `--tensor-type`; the block-size fallback is applied to its answer afterwards.
pub type RuleFn = fn(recipe: &Recipe, t: &TensorCtx<'_>, chosen: u32) -> std::result::Result<u32, String>;

/// One recipe.
#[derive(Debug)]
pub struct Recipe {
    /// The name llama-quantize takes, e.g. `"Q4_K_M"`.
    pub name: &'static str,
    /// Other names for it (llama-quantize's `Q4_K` = `Q4_K_M`). Matched case-insensitively.
    pub aliases: &'static [&'static str],
    /// The `llama_ftype` number, written as `general.file_type` (also accepted as the name).
    pub ftype: u32,
    /// The ggml type most tensors get (ggml's name, e.g. `"q4_K"`).
    pub default_type: &'static str,
    /// One line for `--help` and error messages.
    pub description: &'static str,
    /// Copy every tensor as it is (llama-quantize's `COPY`): no conversion at all, and the
    /// input's own file type is written.
    pub copy_only: bool,
    /// The per-tensor rule.
    pub rule: RuleFn,
    /// Listing order (llama-quantize's table order for the built-ins).
    pub order: u32,
    /// Higher wins when two recipes claim one name (a plug-in replacing a built-in);
    /// built-ins have 0.
    pub priority: i32,
    /// The module that registered it (set by `gguf_registry::submit!`).
    pub origin: &'static str,
}

inventory::collect!(Recipe);

// Names and aliases, upper-cased: llama-quantize matches them case-insensitively.
gguf_registry::named_entry!(Recipe, "recipe", String, |r: &Recipe| {
    std::iter::once(&r.name).chain(r.aliases).map(|n| n.to_ascii_uppercase()).collect()
});

impl Recipe {
    /// A recipe whose tensors all get `default_type` unless `rule` says otherwise, listed
    /// after the built-ins, priority 0.
    pub const fn new(name: &'static str, ftype: u32, default_type: &'static str, rule: RuleFn) -> Self {
        Recipe {
            name,
            aliases: &[],
            ftype,
            default_type,
            description: "",
            copy_only: false,
            rule,
            order: 1000,
            priority: 0,
            origin: "",
        }
    }
    /// With other names.
    pub const fn with_aliases(self, aliases: &'static [&'static str]) -> Self {
        Recipe { aliases, ..self }
    }
    /// With a line for `--help`.
    pub const fn with_description(self, description: &'static str) -> Self {
        Recipe { description, ..self }
    }
    /// With a listing position.
    pub const fn with_order(self, order: u32) -> Self {
        Recipe { order, ..self }
    }

    /// The default type's registry entry.
    pub fn default_traits(&self) -> Result<&'static ggml_quants::TypeTraits> {
        ggml_quants::by_name(self.default_type).ok_or_else(|| Error::Rule {
            recipe: self.name,
            reason: format!("its default type {:?} is not a registered ggml type", self.default_type),
        })
    }
}

/// A rule that keeps the chosen type: every tensor gets the default type.
pub fn uniform_rule(_: &Recipe, _: &TensorCtx<'_>, chosen: u32) -> std::result::Result<u32, String> {
    Ok(chosen)
}

struct Index {
    registry: gguf_registry::Registry<Recipe>,
    listed: Vec<&'static Recipe>,
}

fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let registry = gguf_registry::Registry::new(inventory::iter::<Recipe>);
        let mut listed = registry.winners();
        listed.sort_by_key(|r| (r.order, r.name));
        Index { registry, listed }
    })
}

/// Every registered recipe, in listing order.
pub fn all() -> &'static [&'static Recipe] {
    &index().listed
}

/// Looks a recipe up as llama-quantize does: by name or alias, case-insensitively, then by
/// its `llama_ftype` number (the first recipe in listing order with that number).
pub fn by_name(name: &str) -> Option<&'static Recipe> {
    if let Some(r) = index().registry.get(&name.to_ascii_uppercase()) {
        return Some(r);
    }
    let n: u32 = name.trim().parse().ok()?;
    all().iter().find(|r| r.ftype == n && !r.copy_only).copied()
}

/// [`by_name`] plus the name llama-quantize would print for it (the alias row comes first
/// in its table, so `15` resolves to `"Q4_K"`); used for the default output file name.
pub fn resolve(name: &str) -> Option<(&'static Recipe, &'static str)> {
    let r = by_name(name)?;
    if r.name.eq_ignore_ascii_case(name) {
        return Some((r, r.name));
    }
    if let Some(a) = r.aliases.iter().find(|a| a.eq_ignore_ascii_case(name)) {
        return Some((r, a));
    }
    Some((r, r.aliases.first().copied().unwrap_or(r.name)))
}

/// [`by_name`], or an error listing the known recipes.
pub fn lookup(name: &str) -> Result<&'static Recipe> {
    by_name(name).ok_or_else(|| match index().registry.clash(&name.to_ascii_uppercase()) {
        Some(p) => Error::Registry(p.to_string()),
        None => Error::UnknownRecipe {
            name: name.to_string(),
            known: all().iter().map(|r| r.name).collect::<Vec<_>>().join(", "),
        },
    })
}

/// Registry consistency problems: two recipes (or aliases) with one name at one priority,
/// a default type that is not registered; and deliberate overrides. No problems for the
/// built-ins; tested.
pub fn registry_problems() -> gguf_registry::Report {
    let mut report = index().registry.report();
    for r in index().registry.entries() {
        if ggml_quants::by_name(r.default_type).is_none() {
            report.problems.push(format!("recipe {}: default type {:?} is not registered", r.name, r.default_type));
        }
    }
    report
}

#[cfg(test)]
mod tests {
    #[test]
    fn builtin_recipes_are_sound() {
        let r = super::registry_problems();
        assert!(r.problems.is_empty() && r.overrides.is_empty(), "{r:?}");
        assert_eq!(super::lookup("q4_k").unwrap().name, "Q4_K_M");
        assert_eq!(super::resolve("15").unwrap().1, "Q4_K");
    }
}
