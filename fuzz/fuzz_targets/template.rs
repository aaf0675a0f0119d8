//! Fuzz target: a chat template (the input up to its first NUL byte, as UTF-8) rendered
//! over a conversation (the rest, as a JSON array of messages; a fixed one when that
//! does not parse) must never panic, abort or hang: under `TemplateLimits` (tightened
//! here so that each input runs fast) it either renders within `max_output` or fails
//! with an error.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use gguf_tokenizer::chat::{ChatTemplate, Message, TemplateLimits};

fuzz_target!(|data: &[u8]| {
    let (src, rest) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(src) = std::str::from_utf8(src) else { return };
    let messages: Vec<Message> = serde_json::from_slice::<serde_json::Value>(rest)
        .ok()
        .and_then(|v| v.as_array().map(|a| a.iter().filter_map(|m| Message::from_json(m).ok()).collect()))
        .unwrap_or_else(|| vec![Message::new("system", "S"), Message::new("user", "hi")]);
    let limits = TemplateLimits {
        max_output: 1 << 20,
        max_value: 1 << 20,
        max_total: 16 << 20,
        timeout: Duration::from_secs(1),
        fuel: 1_000_000,
        ..TemplateLimits::default()
    };
    let Ok(t) = ChatTemplate::new_with_limits(src, "<s>", "</s>", limits.clone()) else { return };
    let tools = serde_json::json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]);
    for (gen, tools) in [(true, None), (false, Some(&tools))] {
        if let Ok(out) = t.render(&messages, gen, tools) {
            assert!(out.len() <= limits.max_output, "rendered {} bytes", out.len());
        }
    }
});
