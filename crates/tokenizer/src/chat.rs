//! Chat templates: `tokenizer.chat_template` (Jinja) rendered with minijinja in the way
//! llama.cpp's own Jinja engine (`common/jinja`) renders it: `trim_blocks` and
//! `lstrip_blocks` on, Python string methods (minijinja-contrib `pycompat`),
//! `raise_exception`, `strftime_now`, a `tojson` with Python's separators, the context
//! llama.cpp builds (`messages`, `bos_token`, `eos_token`, `add_generation_prompt` when
//! true, `tools` when given, `enable_thinking`), and llama.cpp's removal of a leading
//! BOS / trailing EOS text that the tokenizer adds anyway.
//!
//! The template is a program from a stranger, so it is sandboxed: minijinja has no file
//! system or network access, and rendering runs under hard limits ([`TemplateLimits`],
//! overridable per template with [`ChatTemplate::with_limits`] or per call with
//! [`ChatTemplate::render_with_limits`]):
//!
//! | limit | default | bounds |
//! |---|---|---|
//! | `max_output` | 16 MiB | the rendering |
//! | `max_value` | 16 MiB | any one string, list or map a template makes, checked before it is built |
//! | `max_total` | 256 MiB | all values and output made, cumulatively (so the memory a template can hold) |
//! | `max_source` | 1 MiB | the template source, checked before parsing |
//! | `max_expression` | 2,000 | operators, filters, lookups and brackets in one tag, checked before parsing |
//! | `max_containers` | 100,000 | lists and maps built at run time (so how deep a value can nest) |
//! | `timeout` | 10 s | wall time of compiling and rendering |
//! | `fuel` | 50,000,000 | minijinja VM instructions |
//!
//! minijinja's fuel counts instructions, not the work one does, so the compiled template
//! is rewritten (see `chat/limits.rs`): `~`, `+`, `*` and slicing size their result
//! before building it, raw text and `{{ }}` output are counted, loops, comparisons and
//! calls check the deadline, and every builtin filter and Python method is wrapped with
//! checks on its arguments (`indent`, `format`, `str.format`, `batch`, `slice`,
//! `replace`, `join`, `tojson`, ...). Rendering runs on its own thread with a 256 MiB
//! stack, so that minijinja's recursive parser, code generator and VM cannot overflow
//! it within these limits. An over-limit template is an error naming the limit, e.g.
//! `chat template: ... a value exceeds 16 MiB (TemplateLimits::max_value)`.

mod limits;

use std::fmt::Write as _;
use std::sync::Arc;

use minijinja::value::{Value as JValue, ValueKind};
use minijinja::{Environment, ErrorKind};
use serde_json::{Map, Value as Json};

use crate::{Error, Result, Tokenizer};

pub use limits::TemplateLimits;
use limits::{Budget, Capped};

/// One chat message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The text.
    pub content: String,
    /// Tool calls made by an assistant message (OpenAI shape: a list of
    /// `{"type": "function", "function": {"name", "arguments"}}`).
    pub tool_calls: Option<Json>,
    /// Any other fields (`name`, `tool_call_id`, `reasoning_content`, ...).
    pub extra: Map<String, Json>,
}

impl Message {
    /// A message with a role and text.
    pub fn new(role: &str, content: &str) -> Message {
        Message { role: role.into(), content: content.into(), tool_calls: None, extra: Map::new() }
    }

    /// A message from its JSON form (`{"role", "content", "tool_calls", ...}`).
    pub fn from_json(v: &Json) -> Result<Message> {
        let o = v.as_object().ok_or_else(|| Error::Template("a message must be a JSON object".into()))?;
        let role = o
            .get("role")
            .and_then(Json::as_str)
            .ok_or_else(|| Error::Template("a message needs a string \"role\"".into()))?;
        let content = match o.get("content") {
            None | Some(Json::Null) => String::new(),
            Some(Json::String(s)) => s.clone(),
            Some(other) => return Err(Error::Template(format!("message content must be a string, found {other}"))),
        };
        let mut extra = o.clone();
        extra.remove("role");
        extra.remove("content");
        let tool_calls = extra.remove("tool_calls");
        Ok(Message { role: role.into(), content, tool_calls, extra })
    }

    fn to_json(&self) -> Json {
        let mut o = Map::new();
        o.insert("role".into(), Json::String(self.role.clone()));
        o.insert("content".into(), Json::String(self.content.clone()));
        if let Some(tc) = &self.tool_calls {
            o.insert("tool_calls".into(), tc.clone());
        }
        for (k, v) in &self.extra {
            o.insert(k.clone(), v.clone());
        }
        Json::Object(o)
    }
}

/// Named built-in templates, used when a file has none (llama.cpp's
/// `llm_chat_template` names; rendered here as Jinja equivalents of its C++ formatting).
pub const BUILTIN: &[(&str, &str)] = &[
    ("chatml", "{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"),
    ("llama3", "{%- for m in messages -%}{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + (m.content | trim) + '<|eot_id|>' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif -%}"),
    ("gemma", "{%- set ns = namespace(sys='') -%}{%- for m in messages -%}{%- if m.role == 'system' -%}{%- set ns.sys = ns.sys + (m.content | trim) -%}{%- else -%}{%- set role = 'model' if m.role == 'assistant' else m.role -%}{{ '<start_of_turn>' + role + '\n' }}{%- if ns.sys and role != 'model' -%}{{ ns.sys + '\n\n' }}{%- set ns.sys = '' -%}{%- endif -%}{{ (m.content | trim) + '<end_of_turn>\n' }}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"),
    ("phi3", "{%- for m in messages -%}{{ '<|' + m.role + '|>\n' + m.content + '<|end|>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}{%- endif -%}"),
    ("zephyr", "{%- for m in messages -%}{{ '<|' + m.role + '|>\n' + m.content + '<|endoftext|>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}{%- endif -%}"),
    ("vicuna", "{%- for m in messages -%}{%- if m.role == 'system' -%}{{ m.content + '\n\n' }}{%- elif m.role == 'user' -%}{{ 'USER: ' + m.content + '\n' }}{%- elif m.role == 'assistant' -%}{{ 'ASSISTANT: ' + m.content + '</s>\n' }}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{ 'ASSISTANT:' }}{%- endif -%}"),
    ("deepseek", "{%- for m in messages -%}{%- if m.role == 'system' -%}{{ m.content }}{%- elif m.role == 'user' -%}{{ '### Instruction:\n' + m.content + '\n' }}{%- elif m.role == 'assistant' -%}{{ '### Response:\n' + m.content + '\n<|EOT|>\n' }}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{ '### Response:\n' }}{%- endif -%}"),
    ("command-r", "{%- for m in messages -%}{%- if m.role == 'system' -%}{{ '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + (m.content | trim) + '<|END_OF_TURN_TOKEN|>' }}{%- elif m.role == 'user' -%}{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + (m.content | trim) + '<|END_OF_TURN_TOKEN|>' }}{%- elif m.role == 'assistant' -%}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' + (m.content | trim) + '<|END_OF_TURN_TOKEN|>' }}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{%- endif -%}"),
];

/// The names of the built-in templates.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// A compiled chat template with the BOS/EOS texts of its tokenizer.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
    strip_bos: bool,
    strip_eos: bool,
    limits: TemplateLimits,
}

/// The deepest value `tojson` writes.
const MAX_JSON_DEPTH: usize = 1000;

/// Python's `json.dumps` shape (`", "` and `": "`, no ASCII escaping), as llama.cpp's
/// `tojson` writes it, into a string capped at [`TemplateLimits::max_value`].
fn to_json_text(v: &JValue, indent: Option<usize>, level: usize, out: &mut Capped) -> std::fmt::Result {
    if level > MAX_JSON_DEPTH {
        return Err(std::fmt::Error);
    }
    let nl = |out: &mut Capped, level: usize| -> std::fmt::Result {
        if let Some(n) = indent {
            let pad = n.checked_mul(level).ok_or(std::fmt::Error)?;
            out.reserve(pad.saturating_add(1))?;
            out.s.push('\n');
            out.s.extend(std::iter::repeat_n(' ', pad));
        }
        Ok(())
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.write_str("null")?,
        ValueKind::Bool => out.write_str(if v.is_true() { "true" } else { "false" })?,
        ValueKind::Number => write!(out, "{v}")?,
        ValueKind::String | ValueKind::Bytes => {
            let owned;
            let s = match v.as_str() {
                Some(s) => s,
                None => {
                    owned = v.to_string();
                    &owned
                }
            };
            out.reserve(s.len().saturating_add(2))?;
            out.s.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.write_str("\\\"")?,
                    '\\' => out.write_str("\\\\")?,
                    '\n' => out.write_str("\\n")?,
                    '\r' => out.write_str("\\r")?,
                    '\t' => out.write_str("\\t")?,
                    '\u{8}' => out.write_str("\\b")?,
                    '\u{c}' => out.write_str("\\f")?,
                    c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32)?,
                    c => out.write_char(c)?,
                }
            }
            out.write_char('"')?;
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.write_char('[')?;
            let mut first = true;
            for item in v.try_iter().map_err(|_| std::fmt::Error)? {
                if !first {
                    out.write_str(item_sep)?;
                }
                first = false;
                nl(out, level + 1)?;
                to_json_text(&item, indent, level + 1, out)?;
            }
            if !first {
                nl(out, level)?;
            }
            out.write_char(']')?;
        }
        ValueKind::Map => {
            out.write_char('{')?;
            let mut first = true;
            for key in v.try_iter().map_err(|_| std::fmt::Error)? {
                let val = v.get_item(&key).map_err(|_| std::fmt::Error)?;
                if !first {
                    out.write_str(item_sep)?;
                }
                first = false;
                nl(out, level + 1)?;
                to_json_text(&JValue::from(key.to_string()), None, 0, out)?;
                out.write_str(": ")?;
                to_json_text(&val, indent, level + 1, out)?;
            }
            if !first {
                nl(out, level)?;
            }
            out.write_char('}')?;
        }
        _ => to_json_text(&JValue::from(v.to_string()), None, 0, out)?,
    }
    Ok(())
}

fn tojson(
    budget: &Budget,
    v: JValue,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<JValue, minijinja::Error> {
    budget.tick()?;
    let indent: Option<usize> = kwargs.get("indent")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let mut s = Capped::new(budget.limits.max_value);
    if to_json_text(&v, indent, 0, &mut s).is_err() {
        return Err(budget.value_err());
    }
    budget.charge(s.s.len())?;
    Ok(JValue::from_safe_string(s.s))
}

/// `strftime_now(fmt)`: the current UTC time, for the common `%` codes.
fn strftime_now(fmt: String) -> String {
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    strftime(secs, &fmt)
}

pub(crate) fn strftime(secs: i64, fmt: &str) -> String {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // civil from days (Howard Hinnant)
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    let wd = (days + 4).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    const MON: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAY: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
    let mut out = String::new();
    let mut it = fmt.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('-') => match it.next() {
                Some('d') => out.push_str(&d.to_string()),
                Some('m') => out.push_str(&m.to_string()),
                Some(o) => {
                    out.push_str("%-");
                    out.push(o);
                }
                None => out.push_str("%-"),
            },
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('M') => out.push_str(&format!("{mi:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('B') => out.push_str(MON[(m - 1) as usize]),
            Some('b') => out.push_str(&MON[(m - 1) as usize][..3]),
            Some('A') => out.push_str(DAY[wd]),
            Some('a') => out.push_str(&DAY[wd][..3]),
            Some('y') => out.push_str(&format!("{:02}", y % 100)),
            Some('j') => out.push_str(&format!("{:03}", doy_of(y, m, d))),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

fn doy_of(y: i64, m: i64, d: i64) -> i64 {
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    cum[(m - 1) as usize] + d + if leap && m > 2 { 1 } else { 0 }
}

fn env(budget: &Arc<Budget>) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_fuel(Some(budget.limits.fuel));
    env.add_function("raise_exception", |msg: String| -> std::result::Result<JValue, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {msg}")))
    });
    env.add_function("strftime_now", strftime_now);
    limits::install(&mut env, budget);
    let b = budget.clone();
    env.add_filter("tojson", move |v: JValue, kwargs: minijinja::value::Kwargs| tojson(&b, v, kwargs));
    env
}

fn template_err(e: minijinja::Error) -> Error {
    let mut s = e.to_string();
    if e.kind() == ErrorKind::OutOfFuel {
        s.push_str(" (TemplateLimits::fuel)");
    }
    let mut src = std::error::Error::source(&e);
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    Error::Template(s)
}

impl ChatTemplate {
    /// A template from Jinja source, with the BOS/EOS token texts it may use. Parse
    /// errors are reported here.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        ChatTemplate::new_with_limits(source, bos_token, eos_token, TemplateLimits::default())
    }

    /// [`ChatTemplate::new`] with the limits to render (and to check the source) under.
    pub fn new_with_limits(
        source: &str,
        bos_token: &str,
        eos_token: &str,
        limits: TemplateLimits,
    ) -> Result<ChatTemplate> {
        let budget = Budget::new(&limits);
        limited(&budget, || limits::compile(source, &budget).map(|_| ()))?;
        Ok(ChatTemplate {
            source: source.to_string(),
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
            strip_bos: false,
            strip_eos: false,
            limits,
        })
    }

    /// This template with other limits for [`render`](Self::render).
    pub fn with_limits(mut self, limits: TemplateLimits) -> ChatTemplate {
        self.limits = limits;
        self
    }

    /// The limits [`render`](Self::render) uses.
    pub fn limits(&self) -> &TemplateLimits {
        &self.limits
    }

    /// A named built-in template (see [`BUILTIN`]).
    pub fn builtin(name: &str) -> Result<ChatTemplate> {
        let src = BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, s)| *s).ok_or_else(|| {
            Error::Template(format!("unknown built-in template '{name}' (known: {})", builtin_names().join(", ")))
        })?;
        ChatTemplate::new(src, "", "")
    }

    /// The file's `tokenizer.chat_template`, or `None` when it has none. BOS/EOS texts
    /// come from the file's vocabulary; like llama.cpp, a leading BOS / trailing EOS
    /// text is removed from the rendering when the tokenizer adds them itself.
    pub fn from_gguf(md: &gguf_format::Metadata) -> Result<Option<ChatTemplate>> {
        if md.get("tokenizer.chat_template").is_none() {
            return Ok(None);
        }
        match Tokenizer::from_gguf(md) {
            Ok(t) => ChatTemplate::from_gguf_with(md, &t),
            Err(_) => ChatTemplate::from_parts(md, None),
        }
    }

    /// [`ChatTemplate::from_gguf`] with the file's tokenizer already built (building one
    /// is the costly part of loading a vocabulary; callers that have it pass it).
    pub fn from_gguf_with(md: &gguf_format::Metadata, tok: &Tokenizer) -> Result<Option<ChatTemplate>> {
        ChatTemplate::from_parts(md, Some(tok))
    }

    fn from_parts(md: &gguf_format::Metadata, tok: Option<&Tokenizer>) -> Result<Option<ChatTemplate>> {
        let Some(v) = md.get("tokenizer.chat_template") else { return Ok(None) };
        let src = v.as_str().ok_or_else(|| Error::BadMetadata {
            key: "tokenizer.chat_template".into(),
            message: "expected a UTF-8 string".into(),
        })?;
        let (bos, eos, add_bos, add_eos) = match tok {
            Some(t) => {
                let piece = |id: Option<u32>| {
                    id.and_then(|i| t.token_to_piece(i, true).ok())
                        .map(|p| String::from_utf8_lossy(&p).into_owned())
                        .unwrap_or_default()
                };
                (piece(t.bos()), piece(t.eos()), t.add_bos(), t.add_eos())
            }
            None => (String::new(), String::new(), false, false),
        };
        let mut t = ChatTemplate::new(src, &bos, &eos)?;
        t.strip_bos = add_bos;
        t.strip_eos = add_eos;
        Ok(Some(t))
    }

    /// The Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders a conversation. `tools` is a JSON array of tool definitions. Rendering
    /// runs under the template's [`limits`](Self::limits).
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool, tools: Option<&Json>) -> Result<String> {
        self.render_with_limits(messages, add_generation_prompt, tools, &self.limits)
    }

    /// [`render`](Self::render) under the given limits.
    pub fn render_with_limits(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        tools: Option<&Json>,
        limits: &TemplateLimits,
    ) -> Result<String> {
        let msgs: Vec<Json> = messages.iter().map(Message::to_json).collect();
        let mut ctx = Map::new();
        ctx.insert("messages".into(), Json::Array(msgs));
        ctx.insert("bos_token".into(), Json::String(self.bos_token.clone()));
        ctx.insert("eos_token".into(), Json::String(self.eos_token.clone()));
        ctx.insert("enable_thinking".into(), Json::Bool(true));
        if let Some(t) = tools {
            ctx.insert("tools".into(), t.clone());
        }
        if add_generation_prompt {
            ctx.insert("add_generation_prompt".into(), Json::Bool(true));
        }
        let budget = Budget::new(limits);
        let root = JValue::from_serialize(Json::Object(ctx));
        let mut out = limited(&budget, || {
            let compiled = limits::compile(&self.source, &budget)?;
            let env = env(&budget);
            let mut out = String::new();
            let vm = minijinja::machinery::Vm::new(&env);
            vm.eval(
                &compiled.root,
                root,
                &compiled.blocks,
                &mut minijinja::machinery::make_string_output(&mut out),
                minijinja::AutoEscape::None,
            )?;
            Ok(out)
        })?;
        if out.len() > limits.max_output {
            return Err(Error::Template(format!(
                "output exceeds {} (TemplateLimits::max_output)",
                limits::human(limits.max_output)
            )));
        }
        if self.strip_bos && !self.bos_token.is_empty() && out.starts_with(&self.bos_token) {
            out.drain(..self.bos_token.len());
        }
        if self.strip_eos && !self.eos_token.is_empty() && out.ends_with(&self.eos_token) {
            out.truncate(out.len() - self.eos_token.len());
        }
        Ok(out)
    }
}

/// Runs `f` (compiling and rendering) on a thread with a [`limits::STACK`] stack, after
/// the source checks; a panic in minijinja is an error, not a crash of the caller.
fn limited<T: Send>(budget: &Budget, f: impl FnOnce() -> std::result::Result<T, minijinja::Error> + Send) -> Result<T> {
    let r = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("chat-template".into())
            .stack_size(limits::STACK)
            .spawn_scoped(s, f)
            .map_err(|e| Error::Template(format!("cannot start the rendering thread: {e}")))?
            .join()
            .map_err(|p| {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Error::Template(format!("the template engine panicked: {msg}"))
            })
    })?;
    let out = r.map_err(template_err)?;
    // A template that spent its time in one native step is still over time.
    budget.tick().map_err(template_err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_builtin() {
        let t = ChatTemplate::builtin("chatml").unwrap();
        let m = [Message::new("system", "S"), Message::new("user", "hi")];
        assert_eq!(
            t.render(&m, true, None).unwrap(),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn gemma_builtin_merges_system() {
        let t = ChatTemplate::builtin("gemma").unwrap();
        let m = [Message::new("system", " S "), Message::new("user", "hi"), Message::new("assistant", "yo")];
        assert_eq!(
            t.render(&m, false, None).unwrap(),
            "<start_of_turn>user\nS\n\nhi<end_of_turn>\n<start_of_turn>model\nyo<end_of_turn>\n"
        );
    }

    #[test]
    fn raising_template_is_a_clear_error() {
        let t = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "").unwrap();
        let e = t.render(&[], false, None).unwrap_err().to_string();
        assert!(e.contains("no system role"), "{e}");
        assert!(ChatTemplate::new("{% for %}", "", "").is_err());
        assert!(ChatTemplate::builtin("nope").unwrap_err().to_string().contains("chatml"));
    }

    #[test]
    fn python_methods_tojson_and_tools() {
        let t = ChatTemplate::new(
            "{{ messages[0].content.strip().upper() }}|{{ tools | tojson }}|{{ messages[0].tool_calls[0].function.arguments | tojson }}",
            "",
            "",
        )
        .unwrap();
        let m = Message::from_json(&serde_json::json!({"role": "assistant", "content": " x ", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": "é\n"}}}]})).unwrap();
        let tools = serde_json::json!([{"type": "function", "function": {"name": "f"}}]);
        let out = t.render(&[m], false, Some(&tools)).unwrap();
        assert_eq!(out, "X|[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]|{\"a\": 1, \"b\": \"é\\n\"}");
    }

    #[test]
    fn strftime_formats() {
        // 2024-07-26 16:34:56 UTC was a Friday
        assert_eq!(strftime(1722011696, "%d %b %Y %H:%M:%S %A %-d"), "26 Jul 2024 16:34:56 Friday 26");
    }
}
