//! Hostile chat templates (issue 12): each must come back as an error, or as a bounded
//! rendering, within a few seconds, without aborting or hanging the process. Every case
//! runs in this test process, so a template that takes the process down fails the suite.
//!
//! To measure one case alone (time, peak RSS): run the test binary with the case's name
//! and `--exact`, e.g. under `/usr/bin/time -v`.

use std::time::{Duration, Instant};

use gguf_tokenizer::chat::{ChatTemplate, Message};

/// The longest a hostile case may take (the default deadline is 10 s; most cases are
/// refused in milliseconds).
const MAX_TIME: Duration = Duration::from_secs(20);

/// (The expected text is what the renderer gave before the limits.)
///
/// Renders `src` with the default limits; returns the rendering or the error text.
fn run(src: &str) -> (Result<String, String>, Duration) {
    let t0 = Instant::now();
    let msgs = [Message::new("system", "You are helpful."), Message::new("user", "Hello!")];
    let r = ChatTemplate::new(src, "<s>", "</s>").and_then(|t| t.render(&msgs, true, None)).map_err(|e| e.to_string());
    (r, t0.elapsed())
}

/// Asserts that `src` is refused (an error containing `needle`) in time.
fn refused(src: &str, needle: &str) {
    let (r, dt) = run(src);
    assert!(dt < MAX_TIME, "took {dt:?}");
    match r {
        Ok(out) => panic!("rendered {} bytes, expected an error containing {needle:?}", out.len()),
        Err(e) => assert!(e.contains(needle), "error {e:?} does not contain {needle:?}"),
    }
}

/// Asserts that `src` is refused, or renders a bounded output, in time.
fn bounded(src: &str) {
    let (r, dt) = run(src);
    assert!(dt < MAX_TIME, "took {dt:?}");
    if let Ok(out) = r {
        assert!(out.len() <= 16 << 20, "rendered {} bytes", out.len());
    }
}

fn chain(head: &str, sep: &str, item: &str, n: usize) -> String {
    let mut s = String::from(head);
    for _ in 0..n {
        s.push_str(sep);
        s.push_str(item);
    }
    s
}

// --- the cases from the issue ---

#[test]
fn string_doubling_in_loop() {
    refused(
        "{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        "TemplateLimits",
    );
}

#[test]
fn big_repeat_printed_many_times() {
    refused("{% for i in range(100000) %}{{ 'a' * 100000000 }}{% endfor %}", "TemplateLimits");
}

#[test]
fn replace_method_with_big_string() {
    refused("{{ ('a' * 1000000).replace('a', 'b' * 1000000) }}", "TemplateLimits");
}

#[test]
fn replace_filter_with_big_string() {
    refused("{{ ('a' * 1000000)|replace('a', 'b' * 1000000) }}", "TemplateLimits");
}

#[test]
fn indent_huge() {
    refused("{{ 'a\nb\nc'|indent(10**12) }}", "TemplateLimits");
}

#[test]
fn indent_u64_max() {
    refused("{{ 'a\nb'|indent(18446744073709551615) }}", "chat template");
}

#[test]
fn printf_format_width() {
    refused("{{ '%1000000000000d'|format(1) }}", "TemplateLimits");
}

#[test]
fn printf_format_star_width() {
    bounded("{{ '%*d'|format(1000000000000, 1) }}");
}

#[test]
fn str_format_width() {
    refused("{{ '{:>1000000000000}'.format(1) }}", "TemplateLimits");
}

#[test]
fn batch_huge() {
    refused("{{ [1, 2, 3]|batch(10**12)|list }}", "TemplateLimits");
}

#[test]
fn batch_huge_with_fill() {
    refused("{{ [1, 2, 3]|batch(10**12, 0)|list }}", "TemplateLimits");
}

#[test]
fn slice_huge() {
    refused("{{ [1, 2, 3]|slice(10**12)|list }}", "TemplateLimits");
}

#[test]
fn tojson_indent_huge() {
    refused("{{ [1, [2]]|tojson(indent=10**12) }}", "TemplateLimits");
}

#[test]
fn list_repeat_then_list() {
    refused("{{ ([1] * 10**18)|list }}", "TemplateLimits");
}

#[test]
fn long_addition_chain() {
    refused(&format!("{{{{ {} }}}}", chain("1", " + ", "1", 50_000)), "TemplateLimits");
}

#[test]
fn long_filter_chain() {
    refused(&format!("{{{{ {} }}}}", chain("'x'", "|", "lower", 50_000)), "TemplateLimits");
}

#[test]
fn long_attribute_chain() {
    refused(&format!("{{{{ {} }}}}", chain("a", ".", "b", 50_000)), "TemplateLimits");
}

#[test]
fn loop_cycle_splat() {
    refused("{% for i in range(100000) %}{{ loop.cycle(*range(100000)) }}{% endfor %}", "TemplateLimits");
}

#[test]
fn loop_cycle_splat_no_output() {
    refused(
        "{% set r = range(100000)|list %}{% for i in range(100000) %}{% set x = loop.cycle(*r) %}{% endfor %}",
        "TemplateLimits",
    );
}

#[test]
fn join_huge_repeat() {
    refused("{{ ([1] * 10**12)|join }}", "TemplateLimits");
}

#[test]
fn empty_template_renders_empty() {
    let (r, _) = run("");
    assert_eq!(r.unwrap(), "");
    let (r, _) = run("{% if false %}x{% endif %}");
    assert_eq!(r.unwrap(), "");
}

// --- more ---

#[test]
fn source_too_large() {
    refused(&"a".repeat(2 << 20), "TemplateLimits::max_source");
}

#[test]
fn recursive_macro() {
    refused("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "chat template");
}

#[test]
fn macro_doubling() {
    refused(
        "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% else %}{{ s|length }}{% endif %}{% endmacro %}{{ d('a', 40) }}",
        "TemplateLimits",
    );
}

#[test]
fn macro_output_doubling() {
    refused(
        "{% macro d(n) %}{% if n %}{{ d(n - 1) }}{{ d(n - 1) }}{% else %}xxxxxxxxxxxxxxxx{% endif %}{% endmacro %}{{ d(40) }}",
        "TemplateLimits",
    );
}

#[test]
fn range_huge() {
    refused("{{ range(10**12)|list|length }}", "chat template");
}

#[test]
fn string_times_huge() {
    refused("{{ 'ab' * 10**12 }}", "chat template");
}

#[test]
fn string_times_100m() {
    refused("{{ ('a' * 100000000)|length }}", "TemplateLimits");
}

#[test]
fn concat_chain_of_big_strings() {
    refused(
        &format!("{{% set a = 'a' * 10000000 %}}{{{{ ({})|length }}}}", chain("a", " ~ ", "a", 300)),
        "TemplateLimits",
    );
}

#[test]
fn plus_chain_of_big_strings() {
    refused(
        &format!("{{% set a = 'a' * 10000000 %}}{{{{ ({})|length }}}}", chain("a", " + ", "a", 300)),
        "TemplateLimits",
    );
}

#[test]
fn list_of_big_slices() {
    refused(
        &format!("{{% set a = 'a' * 10000000 %}}{{{{ [{}]|length }}}}", chain("a[1:]", ", ", "a[1:]", 1000)),
        "TemplateLimits",
    );
}

#[test]
fn list_doubling_then_contains() {
    refused(
        "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ 2 in ns.l }}",
        "TemplateLimits",
    );
}

#[test]
fn list_times_huge_contains() {
    refused("{{ 2 in [1] * 10**12 }}", "TemplateLimits");
}

#[test]
fn sort_huge() {
    refused("{{ ([3, 1, 2] * 10**9)|sort|first }}", "TemplateLimits");
}

#[test]
fn unique_huge() {
    refused("{{ ([1] * 10**9)|unique|list|length }}", "TemplateLimits");
}

#[test]
fn reverse_huge() {
    refused("{{ ([1] * 10**9)|reverse|first }}", "TemplateLimits");
}

#[test]
fn dictsort_of_big_map() {
    bounded("{% set d = dict(a='x' * 10000000, b='y' * 10000000) %}{{ d|dictsort|string|length }}");
}

#[test]
fn nested_loops_10k_by_10k() {
    refused("{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}", "chat template");
}

#[test]
fn captured_raw_text_in_loop() {
    let raw = "A".repeat(100_000);
    refused(
        &format!("{{% set x %}}{{% for i in range(100000) %}}{raw}{{% endfor %}}{{% endset %}}{{{{ x|length }}}}"),
        "TemplateLimits",
    );
}

#[test]
fn raw_text_in_loop_to_output() {
    let raw = "A".repeat(100_000);
    refused(&format!("{{% for i in range(100000) %}}{raw}{{% endfor %}}"), "TemplateLimits");
}

#[test]
fn pprint_of_repeated_big_string() {
    refused("{{ (['a' * 10000000] * 1000)|pprint|length }}", "TemplateLimits");
}

#[test]
fn string_filter_of_repeated_big_string() {
    refused("{{ (['a' * 10000000] * 1000)|string|length }}", "TemplateLimits");
}

#[test]
fn map_upper_of_repeated_big_string() {
    refused("{{ (['a' * 10000000] * 1000)|map('upper')|list|length }}", "TemplateLimits");
}

#[test]
fn str_join_method_huge() {
    refused("{{ ','.join(['a' * 10000000] * 1000)|length }}", "TemplateLimits");
}

#[test]
fn emit_repeated_big_list() {
    refused("{{ ['a' * 10000000] * 1000 }}", "TemplateLimits");
}

#[test]
fn concat_repeated_big_list() {
    refused("{{ (['a' * 10000000] * 1000 ~ '')|length }}", "TemplateLimits");
}

#[test]
fn equality_of_big_strings_in_loop() {
    refused(
        "{% set a = 'a' * 10000000 %}{% set b = 'a' * 10000000 %}{% for i in range(100000) %}{% if a == b %}{% endif %}{% endfor %}",
        "TemplateLimits",
    );
}

#[test]
fn deep_parentheses() {
    refused(&format!("{{{{ {}1{} }}}}", "(".repeat(50_000), ")".repeat(50_000)), "chat template");
}

#[test]
fn deep_if_nesting() {
    refused(&format!("{}x{}", "{% if true %}".repeat(20_000), "{% endif %}".repeat(20_000)), "chat template");
}

#[test]
fn deep_list_literal() {
    refused(&format!("{{{{ {}1{} }}}}", "[".repeat(50_000), "]".repeat(50_000)), "chat template");
}

#[test]
fn dynamic_deep_nesting() {
    bounded(
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l|length }}",
    );
}

#[test]
fn escape_of_big_string() {
    bounded("{{ ('<' * 10000000)|e|length }}");
}

#[test]
fn urlencode_of_big_string() {
    bounded("{{ ('<' * 10000000)|urlencode|length }}");
}

#[test]
fn upper_of_expanding_chars() {
    bounded("{{ ('ß' * 5000000)|upper|upper|length }}");
}

#[test]
fn split_of_big_string() {
    bounded("{{ (' ' * 10000000).split(' ')|length }}");
}

#[test]
fn tojson_of_repeated_big_string() {
    refused("{{ (['a' * 10000000] * 1000)|tojson|length }}", "TemplateLimits");
}

#[test]
fn debug_function() {
    bounded("{% set a = 'a' * 10000000 %}{% set b = [a] * 100 %}{{ debug()|length }}");
}

#[test]
fn sum_of_lists() {
    refused("{{ ([[1] * 100000] * 100000)|sum(start=[])|length }}", "TemplateLimits");
}

#[test]
fn namespace_of_big_values() {
    refused("{% set ns = namespace(a=['x' * 10000000] * 1000) %}{{ ns.a|join|length }}", "TemplateLimits");
}

#[test]
fn chained_comparisons_long() {
    refused(&format!("{{{{ {} }}}}", chain("1", " < ", "2", 50_000)), "TemplateLimits");
}

#[test]
fn not_chain_long() {
    refused(&format!("{{{{ {}1 }}}}", "not ".repeat(50_000)), "chat template");
}

#[test]
fn unary_minus_chain_long() {
    refused(&format!("{{{{ {}1 }}}}", "-".repeat(100_000)), "chat template");
}

// --- limits are the caller's to choose ---

#[test]
fn limits_can_be_overridden() {
    use gguf_tokenizer::chat::TemplateLimits;
    let t = ChatTemplate::new("{{ 'a' * 1000 }}", "", "").unwrap();
    assert_eq!(t.render(&[], false, None).unwrap().len(), 1000);
    let small = TemplateLimits { max_output: 100, ..TemplateLimits::default() };
    let e = t.render_with_limits(&[], false, None, &small).unwrap_err().to_string();
    assert!(e.contains("TemplateLimits::max_output"), "{e}");
    let t = ChatTemplate::new("{% for i in range(100000) %}{% endfor %}", "", "").unwrap();
    let quick = TemplateLimits { timeout: Duration::from_millis(1), ..TemplateLimits::default() };
    let e = t.render_with_limits(&[], false, None, &quick).unwrap_err().to_string();
    assert!(e.contains("TemplateLimits::timeout"), "{e}");
}

#[test]
fn real_template_features_still_work() {
    let src = "{%- set ns = namespace(sys='') -%}{%- for m in messages -%}{%- if m.role == 'system' -%}{%- set ns.sys = ns.sys + m.content -%}{%- else -%}{{ '<|' ~ m.role ~ '|>' + (ns.sys ~ '\n' if loop.first else '') + m.content|trim }}{%- endif -%}{%- endfor -%}{{ [1, 2] + [3] }}{{ ([1] * 3)|list }}{{ 'ab' * 2 }}{{ 'x,y'.split(',')|join('-') }}{{ '%05d|%s'|format(42, 'z') }}{{ '{:>4}'.format(7) }}{{ 'a\nb'|indent(2) }}{{ [1, 2, 3]|batch(2)|list }}{{ 'abc'[1:] }}{{ {'a': [1]}|tojson(indent=2) }}{% set c %}cap{{ 1 }}{% endset %}{{ c }}{{ 'abcabc'.replace('b', 'XX') }}{% macro m(x) %}<{{ x }}>{% endmacro %}{{ m(1) ~ m(2) }}{{ (1, 2) }}{{ loop is undefined }}";
    let (r, _) = run(src);
    assert_eq!(
        r.unwrap(),
        "<|user|>Hello![1, 2, 3][1, 1, 1]ababx-y00042|z   7a\n  b[[1, 2], [3]]bc{\n  \"a\": [\n    1\n  ]\n}cap1aXXcaXXc<1><2>[1, 2]True"
    );
}

/// Control flow through the rewritten instructions (jumps, loops, recursion, macros,
/// call/filter/with blocks, loop controls): the same rendering as minijinja 2.24 with
/// the same settings, before any rewrite (but `tojson`, which is ours).
#[test]
fn control_flow_matches_plain_minijinja() {
    let src = r#"{%- macro item(x, y=2) -%}[{{ x }}:{{ y }}{{ caller() if caller is defined else '' }}]{%- endmacro -%}
{%- for m in messages if m.role != 'system' -%}
{{ loop.index }}/{{ loop.length }}{{ loop.cycle('a', 'b') }}{% if loop.changed(m.role) %}!{% endif %}{{ m.role[:1]|upper }}{{ m.content * 2 }}
{%- if loop.last %}L{% else %},{% endif -%}
{%- else -%}none
{%- endfor -%}
{%- for x in [1, 2, 3, 4, 5] -%}{%- if x == 2 %}{% continue %}{% endif -%}{%- if x > 4 %}{% break %}{% endif -%}{{ x }}{%- endfor -%}
{%- for n in [1, [2, [3]]] recursive -%}<{%- if n is sequence -%}{{ loop(n) }}{%- else -%}{{ n }}{%- endif -%}>{%- endfor -%}
{%- call item(1) -%}body{{ 1 + 1 }}{%- endcall -%}
{%- filter upper %}up {{ 'x' ~ 1 }}{% endfilter -%}
{%- with a = 3, b = [1, 2] + [3] %}{{ a * 2 }}{{ b|sum }}{{ b[1:]|list }}{{ b[::-1] }}{% endwith -%}
{%- set ns = namespace(n=0) -%}{%- for i in range(10) -%}{%- set ns.n = ns.n + i -%}{%- endfor -%}{{ ns.n }}
{{- 'a' in 'cat' }}{{ 1 < 2 < 3 }}{{ 3 is odd and not (2 is odd) }}{{ 'x' if false else 'y' }}{{ -(2 ** 10) // 3 % 7 }}
{{- {'k': 'v', 'n': 1}|dictsort }}{{ ['b', 'a']|sort|join('|') }}{{ 'A B'.lower().split() }}{{ 'x,y'|replace(',', ';') }}
{{- "%s-%03d"|format('q', 7) }}{{ '{}+{}'.format(1, 'z') }}{{ ('a' ~ none ~ undefined_thing ~ 1.5) }}{{ [1, 'a', none]|tojson }}
{%- set cap %}{% for i in range(3) %}{{ i }}{% endfor %}{% endset %}{{ cap|length }}{{ cap }}
{%- do range(3) -%}
"#;
    let msgs = [Message::new("user", "hi"), Message::new("assistant", "yo")];
    let out = ChatTemplate::new(src, "", "").unwrap().render(&msgs, false, None).unwrap();
    assert_eq!(
        out,
        r#"1/2a!Uhihi,2/2b!AyoyoL134<1><<2><<3>>>[1:2body2]UP X166[2, 3][3, 2, 1]45TrueTrueTruey1[["k", "v"], ["n", 1]]a|b["a", "b"]x;yq-0071+zaNone1.5[1, "a", null]3012"#
    );
}

/// Fuzzer find (`template`, libFuzzer timeout): an empty list repeated 7.7 billion times
/// built nothing but looped for minutes.
#[test]
fn fuzz_empty_list_times_huge() {
    bounded("{{-[]\r\r\r*7777777777}}");
    bounded("{{ '' * 7777777777 }}");
    bounded("{% set n = 7777777777 %}{{ ([] * n) | length }}{{ ('' * n) | length }}");
}

/// Fuzzer find (`template`, libFuzzer timeout): chained repetitions of an empty list.
#[test]
fn fuzz_empty_list_times_chain() {
    bounded("\n{{-[]\r\r\r*--31313*--31313+{}+{}}}+{}+{}}}}}}}{urlz");
    bounded("{{ [] * 31313 * 31313 }}");
    bounded("{{ ([] * 31313 * 31313) | length }}");
    // the same at run time (not constant-folded)
    bounded("{% set n = 31313 %}{{ [] * n * n * n }}{{ ([] * n * n) | length }}{% for x in [] * n * n %}{% endfor %}");
    bounded("{% set n = 1000 %}{% set ns = namespace(v=[]) %}{% for i in range(20) %}{% set ns.v = ns.v * n %}{% endfor %}{{ ns.v }}");
}
