//! Requests in and responses out, in llama-server's and OpenAI's shapes.

use serde_json::{json, Map, Value};

use crate::engine::{Summary, TokenProbs};
use crate::Error;

/// A request body's JSON object, with typed getters that name a field of the wrong type.
pub struct Body<'a>(pub &'a Map<String, Value>);

fn bad(key: &str, want: &str, got: &Value) -> Error {
    Error::Invalid(format!("\"{key}\" must be {want}, got {got}"))
}

impl Body<'_> {
    /// The field, unless absent or null.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }
    /// A number field.
    pub fn f32(&self, key: &str) -> Result<Option<f32>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(|x| Some(x as f32)).ok_or_else(|| bad(key, "a number", v)),
        }
    }
    /// An integer field (negative allowed).
    pub fn i64(&self, key: &str) -> Result<Option<i64>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match (v.as_i64(), v.as_f64()) {
                (Some(i), _) => Ok(Some(i)),
                (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9e15 => Ok(Some(f as i64)),
                _ => Err(bad(key, "an integer", v)),
            },
        }
    }
    /// A non-negative integer field.
    pub fn usize(&self, key: &str) -> Result<Option<usize>, Error> {
        match self.i64(key)? {
            Some(i) if i < 0 => Err(Error::Invalid(format!("\"{key}\" must not be negative, got {i}"))),
            Some(i) => Ok(Some(i as usize)),
            None => Ok(None),
        }
    }
    /// A boolean field.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| bad(key, "a boolean", v)),
        }
    }
    /// A string field.
    pub fn str(&self, key: &str) -> Result<Option<&str>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| bad(key, "a string", v)),
        }
    }
    /// `stop`: a string or a list of strings.
    pub fn strings(&self, key: &str) -> Result<Vec<String>, Error> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_str().map(str::to_string).ok_or_else(|| bad(key, "a string or a list of strings", x)))
                .collect(),
            Some(v) => Err(bad(key, "a string or a list of strings", v)),
        }
    }
}

/// Parses a request body: a JSON object, or a 400 naming what is wrong.
pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, Error> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(Error::Invalid(format!("the request body must be a JSON object, got {}", kind(&other)))),
        Err(e) => Err(Error::Invalid(format!("the request body is not valid JSON: {e}"))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// llama-server's `timings` object.
pub fn timings(s: &Summary) -> Value {
    let n_prompt = (s.n_prompt - s.n_cached) as f64;
    let per = |ms: f64, n: f64| if n > 0.0 { ms / n } else { 0.0 };
    let tps = |ms: f64, n: f64| if ms > 0.0 { 1e3 * n / ms } else { 0.0 };
    let n_gen = s.n_decoded as f64;
    json!({
        "cache_n": s.n_cached,
        "prompt_n": s.n_prompt - s.n_cached,
        "prompt_ms": s.prompt_ms,
        "prompt_per_token_ms": per(s.prompt_ms, n_prompt),
        "prompt_per_second": tps(s.prompt_ms, n_prompt),
        "predicted_n": s.n_decoded,
        "predicted_ms": s.gen_ms,
        "predicted_per_token_ms": per(s.gen_ms, n_gen),
        "predicted_per_second": tps(s.gen_ms, n_gen),
    })
}

/// OpenAI's `usage` (with llama-server's `prompt_tokens_details`).
pub fn usage(s: &Summary) -> Value {
    json!({
        "completion_tokens": s.n_decoded,
        "prompt_tokens": s.n_prompt,
        "total_tokens": s.n_decoded + s.n_prompt,
        "prompt_tokens_details": {"cached_tokens": s.n_cached},
    })
}

/// Text of a token's bytes as llama-server sends it: cut at the last complete UTF-8.
fn valid_prefix(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(e) => String::from_utf8_lossy(&b[..e.valid_up_to()]).into_owned(),
    }
}

/// One token's entry of `logprobs.content` / `completion_probabilities`.
pub fn prob_entry(id: u32, bytes: &[u8], p: &TokenProbs) -> Value {
    let top: Vec<Value> =
        p.top.iter().map(|(t, b, lp)| json!({"id": t, "token": valid_prefix(b), "bytes": b, "logprob": lp})).collect();
    json!({"id": id, "token": valid_prefix(bytes), "bytes": bytes, "logprob": p.logprob, "top_logprobs": top})
}

/// A JSON schema whose whitespace between tokens is what llama.cpp's
/// json-schema-to-grammar allows (`space ::= | " " | "\n"{1,2} [ \t]{0,20}`): bounded, so a
/// model cannot pad forever. A schema with its own `x-guidance` options keeps them.
pub fn bounded_json_whitespace(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance").or_insert_with(|| json!({"whitespace_pattern": "(\\x20|\\x0A{1,2}[\\x20\\x09]{0,20})"}));
    }
    schema
}

/// Unix time in seconds.
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A random id suffix like llama-server's (`chatcmpl-<32 alphanumerics>`).
pub fn random_id(prefix: &str) -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = rand::thread_rng();
    let s: String = (0..32).map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char).collect();
    format!("{prefix}{s}")
}

/// OpenAI message `content`: a string, or a list of `{"type": "text", "text"}` parts.
pub fn message_text(v: &Value) -> Result<Value, Error> {
    let Some(o) = v.as_object() else {
        return Err(Error::Invalid(format!("each message must be an object, got {v}")));
    };
    let mut o = o.clone();
    if let Some(Value::Array(parts)) = o.get("content") {
        let mut text = String::new();
        for p in parts {
            match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                (Some("text"), Some(t)) => text.push_str(t),
                _ => return Err(Error::Invalid(format!("unsupported message content part: {p}"))),
            }
        }
        o.insert("content".into(), Value::String(text));
    }
    if !o.get("role").is_some_and(Value::is_string) {
        return Err(Error::Invalid("each message needs a string \"role\"".into()));
    }
    Ok(Value::Object(o))
}
