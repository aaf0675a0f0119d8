//! The architecture registry's contract: a second `llama` at the built-in's priority is a
//! reported problem and the module name decides (never link order); a plug-in `qwen2` at
//! a higher priority replaces the built-in and is listed as an override.
//!
//! A test binary of its own: these registrations change the whole registry.

use gguf_models::{gguf_registry, registry, Architecture, Error};

mod aaa_first {
    use super::*;
    gguf_registry::submit!(Architecture::new("llama", |_| Err(Error::Invalid("plug-in llama".into()))));
}

mod zzz_plugin {
    use super::*;
    gguf_registry::submit!(Architecture::new("qwen2", |_| Err(Error::Invalid("plug-in qwen2".into()))).priority(1));
}

#[test]
fn a_duplicate_builtin_architecture_is_reported() {
    let r = gguf_models::registry_problems();
    assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
    let p = &r.problems[0];
    assert!(p.contains("architecture `llama` is registered 2 times at priority 0"), "{p}");
    assert!(p.contains("duplicate_arch::aaa_first") && p.contains("gguf_models::arch::llama"), "{p}");
    // Provider order: "duplicate_arch::…" sorts before "gguf_models::…", whatever the link order.
    assert_eq!(registry::lookup("llama").unwrap().origin, "duplicate_arch::aaa_first");
}

#[test]
fn a_higher_priority_architecture_replaces_the_builtin() {
    let a = registry::lookup("qwen2").unwrap();
    assert_eq!((a.origin, a.priority), ("duplicate_arch::zzz_plugin", 1));
    let r = gguf_models::registry_problems();
    assert!(
        r.overrides.iter().any(|o| o.contains(
            "architecture `qwen2`: duplicate_arch::zzz_plugin (priority 1) overrides gguf_models::arch::qwen2"
        )),
        "{:?}",
        r.overrides
    );
    // Every built-in name is still listed once.
    let names: Vec<&str> = gguf_models::architectures().iter().map(|a| a.name).collect();
    for n in ["gemma3", "llama", "qwen2", "qwen3", "qwen3moe"] {
        assert_eq!(names.iter().filter(|&&x| x == n).count(), 1, "{names:?}");
    }
}
