//! A second registration of a built-in type is reported, and — with nothing to order the
//! two — the id and the name resolve to neither, with an error naming the clash; a
//! replacement with a higher priority wins and is listed as an override.
//!
//! A test binary of its own: these registrations change the whole registry.

use ggml_quants::{self as gq, GgmlType};

struct DupQ4_0;
impl GgmlType for DupQ4_0 {
    const NAME: &'static str = "q4_0";
    const ID: u32 = 2;
    const BLOCK_SIZE: usize = 32;
    const TYPE_SIZE: usize = 18;
    fn dequantize(_: &[u8], dst: &mut [f32]) {
        dst.fill(0.0);
    }
}
gq::inventory::submit! { <DupQ4_0 as GgmlType>::TRAITS }

struct BetterQ8_0;
impl GgmlType for BetterQ8_0 {
    const NAME: &'static str = "q8_0_fast";
    const ID: u32 = 8;
    const BLOCK_SIZE: usize = 32;
    const TYPE_SIZE: usize = 34;
    const PRIORITY: i32 = 5;
    fn dequantize(_: &[u8], dst: &mut [f32]) {
        dst.fill(1.0);
    }
}
gq::inventory::submit! { <BetterQ8_0 as GgmlType>::TRAITS }

#[test]
fn a_duplicate_builtin_type_is_reported_and_resolves_to_neither() {
    let r = gq::registry_problems();
    assert_eq!(r.problems.len(), 2, "{:?}", r.problems);
    assert!(r.problems.iter().any(|p| p.contains("ggml type `id 2` is registered 2 times")), "{:?}", r.problems);
    assert!(r.problems.iter().any(|p| p.contains("ggml type `q4_0` is registered 2 times")), "{:?}", r.problems);
    assert!(gq::by_id(2).is_none() && gq::by_name("q4_0").is_none());
    let e = gq::lookup_id(2).unwrap_err().to_string();
    assert!(e.contains("registered 2 times") && e.contains("higher priority"), "{e}");
    assert!(!gq::all().iter().any(|t| t.id == 2));
}

#[test]
fn a_higher_priority_replacement_wins_and_is_listed() {
    let t = gq::by_id(8).unwrap();
    assert_eq!(t.name, "q8_0_fast");
    // The built-in stays reachable by its own name.
    assert_eq!(gq::by_name("q8_0").unwrap().priority, 0);
    let r = gq::registry_problems();
    assert!(
        r.overrides.iter().any(|o| o.contains("`id 8`: q8_0_fast (priority 5) overrides q8_0")),
        "{:?}",
        r.overrides
    );
}
