//! Shared by the tests and `examples/mask_bench.rs`: a deterministic pseudo-random
//! sampler driving a constraint, and the model files of the cache.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gguf_grammar::{Constraint, Spec, Vocab};

/// splitmix64.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// One generation.
pub struct Run {
    /// Sampled tokens (EOS excluded).
    pub tokens: Vec<u32>,
    /// The text of `tokens`.
    pub text: String,
    /// Duration of each `apply`.
    pub mask_times: Vec<Duration>,
    /// Whether the constraint finished (EOS sampled or nothing else possible).
    pub finished: bool,
    /// Whether EOS was sampled.
    pub eos: bool,
}

/// Random logits each step, the mask applied, the argmax taken, until EOS, a finished
/// constraint, or `max_tokens`. Checks along the way that a masked argmax is never
/// `-inf`, that EOS is only allowed when the grammar can end and that `accept` takes the
/// token.
pub fn drive(vocab: &Arc<Vocab>, spec: &Spec, seed: u64, max_tokens: usize) -> Run {
    drive_with(vocab, spec, seed, max_tokens, 0.0)
}

/// [`drive`] with `eos_bias` added to the EOS logits (random logits are in [0, 1), so a
/// bias near 1 ends the text at most places where it can end).
pub fn drive_with(vocab: &Arc<Vocab>, spec: &Spec, seed: u64, max_tokens: usize, eos_bias: f32) -> Run {
    let mut c = Constraint::new(vocab, spec).unwrap_or_else(|e| panic!("compiling {spec:?}: {e}"));
    let mut rng = Rng(seed);
    let mut logits = vec![0f32; vocab.n_vocab()];
    let mut run = Run { tokens: Vec::new(), text: String::new(), mask_times: Vec::new(), finished: false, eos: false };
    while run.tokens.len() < max_tokens {
        for l in logits.iter_mut() {
            *l = rng.next_f32();
        }
        for &e in vocab.eos() {
            logits[e as usize] += eos_bias;
        }
        let t0 = Instant::now();
        c.apply(&mut logits).unwrap_or_else(|e| panic!("apply after {:?}: {e}", vocab.decode(&run.tokens)));
        run.mask_times.push(t0.elapsed());
        let (tok, best) =
            logits.iter().enumerate().fold((0, f32::NEG_INFINITY), |acc, (i, &l)| if l > acc.1 { (i, l) } else { acc });
        assert!(
            best > f32::NEG_INFINITY,
            "every token masked after {:?}",
            String::from_utf8_lossy(&vocab.decode(&run.tokens))
        );
        let tok = tok as u32;
        let eos_allowed = vocab.eos().iter().any(|&e| logits[e as usize] > f32::NEG_INFINITY);
        assert_eq!(eos_allowed, c.can_end().unwrap());
        c.accept(tok).unwrap_or_else(|e| panic!("accept of an allowed token: {e}"));
        if vocab.is_eos(tok) {
            run.eos = true;
            assert!(c.is_finished(), "EOS accepted but the constraint is not finished");
            break;
        }
        run.tokens.push(tok);
        if c.is_finished() {
            break;
        }
    }
    run.finished = c.is_finished();
    run.text = String::from_utf8(vocab.decode(&run.tokens)).expect("grammar output is UTF-8");
    run
}

/// `~/.cache/gguf-engine` (or `$GGUF_CACHE`, `$XDG_CACHE_HOME/gguf-engine`), as `gguf fetch` uses.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("GGUF_CACHE").filter(|s| !s.is_empty()) {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|s| !s.is_empty()) {
        return Some(PathBuf::from(d).join("gguf-engine"));
    }
    std::env::var_os("HOME").filter(|s| !s.is_empty()).map(|h| PathBuf::from(h).join(".cache").join("gguf-engine"))
}

/// The vocabulary of the cached model `file`, or None (with a note on stderr) when the
/// file is absent.
pub fn model_vocab(file: &str) -> Option<Arc<Vocab>> {
    let path = cache_dir()?.join("models").join(file);
    if !path.exists() {
        eprintln!("skipping: {} not found (run `gguf fetch`)", path.display());
        return None;
    }
    let f = gguf_format::SplitGguf::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let tok = Arc::new(gguf_tokenizer::Tokenizer::from_gguf(f.metadata()).expect("tokenizer"));
    Some(Arc::new(Vocab::from_shared_tokenizer(tok).expect("vocab")))
}

/// llama.cpp's `grammars/` folder in the cache, if present.
pub fn llama_cpp_grammars() -> Option<PathBuf> {
    let d = cache_dir()?.join("llama.cpp-src").join("grammars");
    if d.is_dir() {
        Some(d)
    } else {
        eprintln!("skipping: {} not found", d.display());
        None
    }
}

/// The schemas of the JSON tests and the bench: nested objects, arrays, enums, numbers,
/// required/optional fields (with `$ref`). Numbers are bounded: a random sampler
/// happily writes `8e612`, valid JSON that serde_json cannot hold.
pub fn schemas() -> Vec<(&'static str, serde_json::Value)> {
    use serde_json::json;
    let name = json!({"type": "string", "minLength": 1, "maxLength": 12});
    vec![
        (
            "nested",
            json!({
                "type": "object",
                "properties": {
                    "name": name,
                    "address": {
                        "type": "object",
                        "properties": {
                            "street": {"type": "string", "maxLength": 20},
                            "city": name,
                            "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                            "geo": {
                                "type": "object",
                                "properties": {
                                    "lat": {"type": "number", "minimum": -90, "maximum": 90},
                                    "lon": {"type": "number", "minimum": -180, "maximum": 180}
                                },
                                "required": ["lat", "lon"],
                                "additionalProperties": false
                            }
                        },
                        "required": ["street", "city", "zip", "geo"],
                        "additionalProperties": false
                    }
                },
                "required": ["name", "address"],
                "additionalProperties": false
            }),
        ),
        (
            "arrays",
            json!({
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 4},
                    "matrix": {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
                        "minItems": 1,
                        "maxItems": 3
                    },
                    "flags": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 2}
                },
                "required": ["tags", "matrix", "flags"],
                "additionalProperties": false
            }),
        ),
        (
            "enums",
            json!({
                "type": "object",
                "properties": {
                    "color": {"enum": ["red", "green", "blue"]},
                    "size": {"enum": [1, 2, 3, "XL"]},
                    "kind": {"const": "widget"},
                    "maybe": {"enum": [null, false, "x y"]},
                    "unit": {"type": "string", "enum": ["cm", "in"]}
                },
                "required": ["color", "size", "kind", "maybe", "unit"],
                "additionalProperties": false
            }),
        ),
        (
            "numbers",
            json!({
                "type": "object",
                "properties": {
                    "small": {"type": "integer", "minimum": -100, "maximum": 100},
                    "positive": {"type": "integer", "exclusiveMinimum": 0},
                    "ratio": {"type": "number", "minimum": 0, "maximum": 1},
                    "wide": {"type": "number", "minimum": -1e9, "maximum": 1e9},
                    "big": {"type": "integer", "minimum": 1000000}
                },
                "required": ["small", "positive", "ratio", "wide", "big"],
                "additionalProperties": false
            }),
        ),
        (
            "required",
            json!({
                "$defs": {
                    "point": {
                        "type": "object",
                        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                        "required": ["x", "y"],
                        "additionalProperties": false
                    }
                },
                "type": "object",
                "properties": {
                    "id": {"type": "integer", "minimum": 0},
                    "label": name,
                    "email": {"type": "string", "maxLength": 16},
                    "age": {"type": "integer", "minimum": 0, "maximum": 150},
                    "origin": {"$ref": "#/$defs/point"},
                    "path": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 3}
                },
                "required": ["id", "label", "origin"],
                "additionalProperties": false
            }),
        ),
    ]
}

/// Nearest-rank percentile of sorted durations, in microseconds.
pub fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[idx.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e6
}
