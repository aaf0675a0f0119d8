//! The registry every extension point of the GGUF engine shares.
//!
//! Quant types, kernels, architectures, pre-tokenizers and quantization recipes are
//! `inventory` submissions collected by the crate that owns each kind of entry. This crate
//! turns such a collection into an index with one rule for everything:
//!
//! - **Lookup by key** ([`Entry::keys`]: a name, an alias, a type id). Several entries may
//!   answer to one key; the one used is the best *available* one ([`Entry::available`]:
//!   runtime CPU-feature detection for kernels, always true elsewhere).
//! - **Precedence: explicit priority, then provider, never link order.** Candidates for a key
//!   are ordered by [`Entry::priority`] (higher first), then by [`Entry::provider`] (the
//!   backend of a kernel, the registering module of anything else: see [`submit!`]), in
//!   byte order. `inventory`'s iteration order (which depends on the linker) never decides.
//! - **Clashes are reported, never silent.** Two entries of one key with the same priority
//!   are a [`Problem`]; when they also have the same provider nothing can order them and
//!   the key resolves to no entry at all ([`Registry::get`] answers `None`, and the owner's
//!   lookup error names the clash). A plug-in that means to replace a built-in gives its
//!   entry a higher priority: that is an [`Override`], listed but not a problem. Kinds where
//!   several entries per key are the design (kernels: one per backend) set
//!   [`Entry::MANY_PER_KEY`] and get neither overrides nor problems for distinct priorities.
//!
//! The owning crates expose `registry_problems()` (tested to be empty for the built-ins) and
//! the CLI's `gguf types --check` prints every registry's problems and overrides.
//!
//! ```
//! use gguf_registry::{Entry, Registry};
//!
//! #[derive(Debug)]
//! struct Greeter { name: &'static str, priority: i32, origin: &'static str }
//! impl Entry for Greeter {
//!     type Key = &'static str;
//!     const KIND: &'static str = "greeter";
//!     fn keys(&self) -> Vec<&'static str> { vec![self.name] }
//!     fn priority(&self) -> i32 { self.priority }
//!     fn provider(&self) -> &str { self.origin }
//! }
//!
//! static BUILTIN: Greeter = Greeter { name: "hello", priority: 0, origin: "core" };
//! static PLUGIN: Greeter = Greeter { name: "hello", priority: 5, origin: "my_crate" };
//! static CLASH: Greeter = Greeter { name: "hello", priority: 5, origin: "other_crate" };
//!
//! let r = Registry::new([&BUILTIN, &PLUGIN]);
//! assert_eq!(r.get(&"hello").unwrap().origin, "my_crate"); // higher priority wins
//! assert!(r.problems().is_empty());
//! assert_eq!(r.overrides().len(), 1);
//!
//! let r = Registry::new([&PLUGIN, &CLASH, &BUILTIN]);
//! assert_eq!(r.get(&"hello").unwrap().origin, "my_crate"); // same priority: provider order
//! assert_eq!(r.problems().len(), 1); // ... and reported
//! ```

#![forbid(unsafe_code)]

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;

pub use inventory;

/// One kind of registry entry.
pub trait Entry: Sync + 'static {
    /// How the entry is looked up (a name, a type id). Keys that match case-insensitively
    /// are given here already folded, and the owner folds the query the same way.
    type Key: Ord + Clone + fmt::Display;
    /// What the registry holds, for messages: `"architecture"`, `"kernel"`.
    const KIND: &'static str;
    /// Whether several entries per key are the design (kernels: one per backend): then
    /// distinct priorities are neither overrides nor problems.
    const MANY_PER_KEY: bool = false;
    /// Every key the entry answers to (its name first, then aliases).
    fn keys(&self) -> Vec<Self::Key>;
    /// Higher wins among the candidates of a key.
    fn priority(&self) -> i32 {
        0
    }
    /// The tie-break after the priority and the name shown in reports: a kernel's backend,
    /// or the module that registered the entry ([`submit!`] records it).
    fn provider(&self) -> &str;
    /// Whether the entry can be used here (a kernel's CPU features). Unavailable entries
    /// stay listed but are skipped by [`Registry::get`].
    fn available(&self) -> bool {
        true
    }
}

/// A clash: two entries of one key that nothing orders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// [`Entry::KIND`].
    pub kind: &'static str,
    /// The key, displayed.
    pub key: String,
    /// The shared priority.
    pub priority: i32,
    /// The providers of the clashing entries, in precedence order.
    pub providers: Vec<String>,
    /// Whether the key resolves to nothing because the providers are equal too.
    pub unresolved: bool,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} `{}` is registered {} times at priority {} (by {})",
            self.kind,
            self.key,
            self.providers.len(),
            self.priority,
            self.providers.join(", ")
        )?;
        if self.unresolved {
            write!(f, ": nothing orders them, so `{}` resolves to none; give one a higher priority", self.key)
        } else {
            write!(f, ": `{}` wins by provider name; give the one you mean a higher priority", self.providers[0])
        }
    }
}

/// A deliberate replacement: a key whose winner has a higher priority than the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    /// [`Entry::KIND`].
    pub kind: &'static str,
    /// The key, displayed.
    pub key: String,
    /// Provider and priority of the winner.
    pub winner: (String, i32),
    /// Providers and priorities of the entries it hides.
    pub hidden: Vec<(String, i32)>,
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden: Vec<String> = self.hidden.iter().map(|(p, n)| format!("{p} (priority {n})")).collect();
        write!(
            f,
            "{} `{}`: {} (priority {}) overrides {}",
            self.kind,
            self.key,
            self.winner.0,
            self.winner.1,
            hidden.join(", ")
        )
    }
}

/// An index of entries of one kind (see the crate docs for the rules).
pub struct Registry<T: Entry> {
    by_key: BTreeMap<T::Key, Vec<&'static T>>,
    /// Keys hidden by a clash, with the index of the problem that says so.
    unresolved: Vec<(T::Key, usize)>,
    entries: Vec<&'static T>,
    problems: Vec<Problem>,
    overrides: Vec<Override>,
}

impl<T: Entry> fmt::Debug for Registry<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("kind", &T::KIND)
            .field("keys", &self.by_key.len())
            .field("entries", &self.entries.len())
            .field("problems", &self.problems)
            .finish()
    }
}

fn precedence<T: Entry>(a: &&'static T, b: &&'static T) -> std::cmp::Ordering {
    b.priority().cmp(&a.priority()).then_with(|| a.provider().cmp(b.provider()))
}

impl<T: Entry> Registry<T> {
    /// Indexes `entries` (usually `inventory::iter::<T>`).
    pub fn new(entries: impl IntoIterator<Item = &'static T>) -> Self {
        let mut by_key: BTreeMap<T::Key, Vec<&'static T>> = BTreeMap::new();
        let mut all: Vec<&'static T> = Vec::new();
        for e in entries {
            all.push(e);
            let mut keys = e.keys();
            keys.sort();
            keys.dedup();
            for k in keys {
                by_key.entry(k).or_default().push(e);
            }
        }
        let mut problems = Vec::new();
        let mut overrides = Vec::new();
        let mut unresolved = Vec::new();
        for (key, v) in by_key.iter_mut() {
            v.sort_by(precedence::<T>);
            // Same priority, in runs: each run of two or more is a problem.
            let mut i = 0;
            while i < v.len() {
                let j = i + v[i..].iter().take_while(|e| e.priority() == v[i].priority()).count();
                if j - i > 1 {
                    let run = &v[i..j];
                    // Only a tie for first place that the provider cannot break hides the key.
                    let tie_at_top = i == 0 && run[0].provider() == run[1].provider();
                    if tie_at_top {
                        unresolved.push((key.clone(), problems.len()));
                    }
                    problems.push(Problem {
                        kind: T::KIND,
                        key: key.to_string(),
                        priority: run[0].priority(),
                        providers: run.iter().map(|e| e.provider().to_string()).collect(),
                        unresolved: tie_at_top,
                    });
                }
                i = j;
            }
            if !T::MANY_PER_KEY && v.len() > 1 && v[0].priority() > v[1].priority() {
                overrides.push(Override {
                    kind: T::KIND,
                    key: key.to_string(),
                    winner: (v[0].provider().to_string(), v[0].priority()),
                    hidden: v[1..].iter().map(|e| (e.provider().to_string(), e.priority())).collect(),
                });
            }
        }
        all.sort_by(|a, b| {
            let ka = a.keys().into_iter().next();
            let kb = b.keys().into_iter().next();
            ka.cmp(&kb).then_with(|| precedence::<T>(a, b))
        });
        Registry { by_key, unresolved, entries: all, problems, overrides }
    }

    /// The entry used for `key`: the first available candidate in precedence order; `None`
    /// when there is none or when the key is an unresolved clash. `key` may be any borrowed
    /// form of the key type (`&str` for `&'static str` keys).
    pub fn get<Q>(&self, key: &Q) -> Option<&'static T>
    where
        T::Key: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.resolve(key).ok()
    }

    /// [`Registry::get`], saying why there is no entry: a clash hides the key, or nothing
    /// (available) is registered under it.
    pub fn resolve<Q>(&self, key: &Q) -> Result<&'static T, Miss<'_>>
    where
        T::Key: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        if let Some((_, p)) = self.unresolved.iter().find(|(k, _)| k.borrow() == key) {
            return Err(Miss::Clash(&self.problems[*p]));
        }
        self.by_key.get(key).and_then(|v| v.iter().find(|e| e.available()).copied()).ok_or(Miss::Unknown)
    }

    /// Every entry registered under `key`, available or not, in precedence order.
    pub fn candidates<Q>(&self, key: &Q) -> &[&'static T]
    where
        T::Key: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.by_key.get(key).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The clash that keeps `key` from resolving, if any.
    pub fn clash<Q>(&self, key: &Q) -> Option<&Problem>
    where
        T::Key: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        match self.resolve(key) {
            Err(Miss::Clash(p)) => Some(p),
            _ => None,
        }
    }

    /// Every key, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &T::Key> {
        self.by_key.keys()
    }

    /// Every entry once, sorted by its first key, then precedence.
    pub fn entries(&self) -> &[&'static T] {
        &self.entries
    }

    /// The winner of each key that has an available entry, sorted by key, each entry once
    /// (an entry with aliases appears under its first key only).
    pub fn winners(&self) -> Vec<&'static T> {
        let mut seen: Vec<*const T> = Vec::new();
        let mut out = Vec::new();
        for k in self.by_key.keys() {
            if let Some(e) = self.get(k) {
                if !seen.contains(&(e as *const T)) {
                    seen.push(e as *const T);
                    out.push(e);
                }
            }
        }
        out
    }

    /// Clashes found while indexing; empty when the registry is sound.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// Deliberate replacements (higher-priority entries hiding others of the same key).
    pub fn overrides(&self) -> &[Override] {
        &self.overrides
    }

    /// Problems and overrides as report lines (problems first).
    pub fn report(&self) -> Report {
        Report {
            problems: self.problems.iter().map(ToString::to_string).collect(),
            overrides: self.overrides.iter().map(ToString::to_string).collect(),
        }
    }
}

/// Why [`Registry::resolve`] found no entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss<'a> {
    /// Entries of one priority and provider hide the key.
    Clash(&'a Problem),
    /// Nothing available is registered under the key.
    Unknown,
}

/// What `registry_problems()`-style checks return: one line per clash and per override.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Clashes ([`Problem`]): a sound registry has none.
    pub problems: Vec<String>,
    /// Deliberate overrides ([`Override`]): informational.
    pub overrides: Vec<String>,
}

impl Report {
    /// Appends `other`.
    pub fn extend(&mut self, other: Report) {
        self.problems.extend(other.problems);
        self.overrides.extend(other.overrides);
    }
}

/// `inventory::submit!` of an entry built by a `const` expression, recording the module
/// that registers it as the entry's origin: the expression's type must have a
/// `const fn with_origin(self, &'static str) -> Self` (every built-in entry type does).
///
/// ```ignore
/// gguf_registry::submit!(gguf_models::Architecture::new("my-arch", my_load).priority(10));
/// ```
#[macro_export]
macro_rules! submit {
    ($entry:expr) => {
        $crate::inventory::submit! { ($entry).with_origin(::core::module_path!()) }
    };
}

/// The [`Entry`] impl of an entry type with `priority: i32` and `origin: &'static str`
/// fields (the registering module is the provider), plus its `priority(p)` and
/// `with_origin(o)` const builders. `$keys` maps an entry to its keys.
///
/// ```ignore
/// gguf_registry::named_entry!(Architecture, "architecture", &'static str, |a: &Architecture| vec![a.name]);
/// ```
#[macro_export]
macro_rules! named_entry {
    ($ty:ty, $kind:literal, $key:ty, $keys:expr) => {
        impl $crate::Entry for $ty {
            type Key = $key;
            const KIND: &'static str = $kind;
            fn keys(&self) -> Vec<$key> {
                ($keys)(self)
            }
            fn priority(&self) -> i32 {
                self.priority
            }
            fn provider(&self) -> &str {
                self.origin
            }
        }

        impl $ty {
            /// With a priority (above 0 replaces a built-in entry of the same key).
            pub const fn priority(self, priority: i32) -> Self {
                Self { priority, ..self }
            }
            /// With the registering module (what `gguf_registry::submit!` calls).
            pub const fn with_origin(self, origin: &'static str) -> Self {
                Self { origin, ..self }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E {
        keys: &'static [&'static str],
        priority: i32,
        origin: &'static str,
        available: bool,
    }
    impl Entry for E {
        type Key = &'static str;
        const KIND: &'static str = "thing";
        fn keys(&self) -> Vec<&'static str> {
            self.keys.to_vec()
        }
        fn priority(&self) -> i32 {
            self.priority
        }
        fn provider(&self) -> &str {
            self.origin
        }
        fn available(&self) -> bool {
            self.available
        }
    }

    #[derive(Debug)]
    struct K(u32, i32, &'static str, bool);
    impl Entry for K {
        type Key = u32;
        const KIND: &'static str = "kernel";
        const MANY_PER_KEY: bool = true;
        fn keys(&self) -> Vec<u32> {
            vec![self.0]
        }
        fn priority(&self) -> i32 {
            self.1
        }
        fn provider(&self) -> &str {
            self.2
        }
        fn available(&self) -> bool {
            self.3
        }
    }

    const fn e(keys: &'static [&'static str], priority: i32, origin: &'static str) -> E {
        E { keys, priority, origin, available: true }
    }

    static A: E = e(&["a", "alias"], 0, "core::a");
    static A_PLUG: E = e(&["a"], 10, "plug::a");
    static A_SAME: E = e(&["a"], 0, "aaa::first");
    static A_TWIN: E = e(&["a"], 0, "core::a");
    static B: E = e(&["b"], 0, "core::b");
    static B_OFF: E = E { keys: &["b"], priority: 10, origin: "plug::b", available: false };

    #[test]
    fn order_of_submission_never_decides() {
        for order in [[&A, &A_PLUG, &B], [&B, &A_PLUG, &A], [&A_PLUG, &B, &A]] {
            let r = Registry::new(order);
            assert_eq!(r.get(&"a").unwrap().origin, "plug::a");
            assert_eq!(r.get(&"alias").unwrap().origin, "core::a");
            assert_eq!(r.candidates(&"a").iter().map(|e| e.origin).collect::<Vec<_>>(), ["plug::a", "core::a"]);
            assert!(r.problems().is_empty());
            assert_eq!(r.overrides().len(), 1);
            assert_eq!(r.overrides()[0].to_string(), "thing `a`: plug::a (priority 10) overrides core::a (priority 0)");
        }
    }

    #[test]
    fn equal_priority_is_a_problem_resolved_by_provider() {
        for order in [[&A, &A_SAME], [&A_SAME, &A]] {
            let r = Registry::new(order);
            assert_eq!(r.get(&"a").unwrap().origin, "aaa::first");
            assert_eq!(r.problems().len(), 1);
            let p = &r.problems()[0];
            assert_eq!(p.providers, ["aaa::first", "core::a"]);
            assert!(!p.unresolved);
            assert!(p.to_string().contains("registered 2 times at priority 0"), "{p}");
        }
    }

    #[test]
    fn identical_twins_resolve_to_nothing() {
        let r = Registry::new([&A, &A_TWIN, &B]);
        assert!(r.get(&"a").is_none());
        assert!(r.clash(&"a").unwrap().unresolved);
        assert!(r.get(&"b").is_some());
        assert!(r.clash(&"b").is_none());
        // A clash below the winner does not unresolve the key.
        let r = Registry::new([&A, &A_TWIN, &A_PLUG]);
        assert_eq!(r.get(&"a").unwrap().origin, "plug::a");
        assert_eq!(r.problems().len(), 1);
        assert!(!r.problems()[0].unresolved);
    }

    #[test]
    fn unavailable_entries_are_skipped_but_listed() {
        let r = Registry::new([&B, &B_OFF]);
        assert_eq!(r.get(&"b").unwrap().origin, "core::b");
        assert_eq!(r.candidates(&"b").len(), 2);
        assert_eq!(r.entries().len(), 2);
    }

    #[test]
    fn many_per_key_kinds_have_no_overrides() {
        static S: K = K(2, 0, "scalar", true);
        static V: K = K(2, 20, "avx512vnni", false);
        static X: K = K(2, 10, "avx2", true);
        static X2: K = K(2, 10, "avx2", true);
        let r = Registry::new([&S, &V, &X]);
        assert_eq!(r.get(&2).unwrap().2, "avx2");
        assert!(r.overrides().is_empty() && r.problems().is_empty());
        let r = Registry::new([&S, &X2, &X]);
        assert!(r.get(&2).is_none());
        assert_eq!(r.report().problems.len(), 1);
    }

    #[test]
    fn winners_lists_each_entry_once() {
        let r = Registry::new([&A, &B]);
        let w: Vec<_> = r.winners().iter().map(|e| e.origin).collect();
        assert_eq!(w, ["core::a", "core::b"]);
    }
}
