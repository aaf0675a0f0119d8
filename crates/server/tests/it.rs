//! `gguf serve` end to end on a tiny random model with a byte-level tokenizer (written by
//! the project's writer, so CI needs no download): every endpoint's shape, batching that
//! does not change any sequence's tokens, and each kind of bad input or fault.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gguf_models::synthetic::{write, Tiny};
use serde_json::{json, Value};

struct Srv {
    handle: Option<gguf_server::Handle>,
    base: String,
    _dir: tempfile::TempDir,
}

fn model(dir: &tempfile::TempDir) -> PathBuf {
    let mut t = Tiny::new("llama");
    t.tokenizer = true;
    t.n_vocab = 257;
    let p = dir.path().join("tiny.gguf");
    write(&t, &p, None, &[]).unwrap();
    p
}

fn start(f: impl FnOnce(&mut gguf_server::Config)) -> Srv {
    start_with(model, f)
}

fn start_with(make: impl FnOnce(&tempfile::TempDir) -> PathBuf, f: impl FnOnce(&mut gguf_server::Config)) -> Srv {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = gguf_server::Config {
        model: make(&dir),
        port: 0,
        n_parallel: 4,
        n_ctx: 1024,
        n_threads: 2,
        announce: false,
        metrics: true,
        ..Default::default()
    };
    f(&mut cfg);
    let handle = gguf_server::spawn(cfg, None).unwrap();
    let base = format!("http://{}", handle.addr);
    let t0 = Instant::now();
    loop {
        match ureq::get(&format!("{base}/health")).call() {
            Ok(r) if r.status() == 200 => break,
            _ if t0.elapsed() > Duration::from_secs(30) => panic!("the server did not become ready"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    Srv { handle: Some(handle), base, _dir: dir }
}

impl Srv {
    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, &body.to_string(), &[])
    }

    fn post_raw(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> (u16, Value) {
        let mut req = ureq::post(&format!("{}{path}", self.base)).set("Content-Type", "application/json");
        for (k, v) in headers {
            req = req.set(k, v);
        }
        let res = match req.send_string(body) {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{path}: {e}"),
        };
        let code = res.status();
        let text = res.into_string().unwrap();
        (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    fn get(&self, path: &str) -> (u16, String) {
        match ureq::get(&format!("{}{path}", self.base)).call() {
            Ok(r) => (r.status(), r.into_string().unwrap()),
            Err(ureq::Error::Status(c, r)) => (c, r.into_string().unwrap()),
            Err(e) => panic!("{path}: {e}"),
        }
    }

    /// The `data:` payloads of a streamed response.
    fn stream(&self, path: &str, body: &Value) -> Vec<String> {
        let res = ureq::post(&format!("{}{path}", self.base)).send_string(&body.to_string()).unwrap();
        assert_eq!(res.header("content-type"), Some("text/event-stream"));
        let r = BufReader::new(res.into_reader());
        r.lines().map_while(Result::ok).filter_map(|l| l.strip_prefix("data: ").map(str::to_string)).collect()
    }

    fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("llamacpp:{name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in {text}"))
    }

    /// No request running or waiting (and `/slots` agrees).
    fn idle(&self) -> bool {
        if self.metric("requests_processing") != 0.0 || self.metric("requests_deferred") != 0.0 {
            return false;
        }
        let (_, s) = self.get("/slots");
        let v: Value = serde_json::from_str(&s).unwrap();
        v.as_array().unwrap().iter().all(|s| s["is_processing"] == false)
    }

    fn wait_idle(&self) {
        let t0 = Instant::now();
        while !self.idle() {
            assert!(t0.elapsed() < Duration::from_secs(10), "slots still busy after 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Srv {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.stop().unwrap();
        }
    }
}

fn greedy(prompt: &str, n: usize) -> Value {
    json!({"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": true})
}

#[test]
fn endpoints_answer_in_llama_server_and_openai_shapes() {
    let s = start(|_| {});
    let (code, models) = s.get("/v1/models");
    assert_eq!(code, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "tiny.gguf");

    let (code, t) = s.post("/tokenize", &json!({"content": "hello", "with_pieces": true}));
    assert_eq!(code, 200);
    assert_eq!(t["tokens"].as_array().unwrap().len(), 5, "{t}");
    assert_eq!(t["tokens"][0]["piece"], "h");
    let (_, t) = s.post("/tokenize", &json!({"content": "hello"}));
    let (_, d) = s.post("/detokenize", &json!({"tokens": t["tokens"]}));
    assert_eq!(d["content"], "hello");
    let (_, p) = s.post("/apply-template", &json!({"messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(p["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    // a final assistant message is a prefill, left open
    let (_, p) = s.post(
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure,"}]}),
    );
    assert_eq!(p["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nSure,");

    // /completion
    let (code, c) = s.post(
        "/completion",
        &json!({"prompt": "abc", "n_predict": 6, "temperature": 0, "ignore_eos": true, "n_probs": 3}),
    );
    assert_eq!(code, 200, "{c}");
    for k in [
        "content",
        "tokens",
        "id_slot",
        "stop",
        "model",
        "tokens_predicted",
        "tokens_evaluated",
        "generation_settings",
        "prompt",
        "stop_type",
        "stopping_word",
        "tokens_cached",
        "timings",
        "truncated",
    ] {
        assert!(c.get(k).is_some(), "/completion has no {k}: {c}");
    }
    assert_eq!(c["tokens_predicted"], 6);
    assert_eq!(c["tokens_evaluated"], 3);
    assert_eq!(c["stop_type"], "limit");
    let probs = c["completion_probabilities"].as_array().unwrap();
    assert_eq!(probs.len(), 6);
    let top = probs[0]["top_logprobs"].as_array().unwrap();
    assert_eq!(top.len(), 3);
    assert!(top[0]["logprob"].as_f64().unwrap() >= top[1]["logprob"].as_f64().unwrap());
    assert!(top[0]["logprob"].as_f64().unwrap() <= 0.0);
    // greedy: the chosen token is the most likely one
    assert_eq!(probs[0]["id"], top[0]["id"]);

    // the stream carries the same tokens
    let ev = s.stream(
        "/completion",
        &json!({"prompt": "abc", "n_predict": 6, "temperature": 0, "ignore_eos": true, "stream": true}),
    );
    let parts: Vec<Value> = ev.iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let last = parts.last().unwrap();
    assert_eq!(last["stop"], true);
    let text: String = parts.iter().map(|p| p["content"].as_str().unwrap_or_default()).collect();
    assert_eq!(text, c["content"].as_str().unwrap());

    // chat, non-stream and stream
    let req = json!({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0, "seed": 1});
    let (code, r) = s.post("/v1/chat/completions", &req);
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["object"], "chat.completion");
    assert!(r["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(r["choices"][0]["message"]["role"], "assistant");
    let u = &r["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    sreq["stream_options"] = json!({"include_usage": true});
    let ev = s.stream("/v1/chat/completions", &sreq);
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = ev[..ev.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], r["choices"][0]["finish_reason"]);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"], r["usage"]);
    let streamed: String =
        chunks.iter().filter_map(|c| c["choices"].get(0)?["delta"]["content"].as_str().map(str::to_string)).collect();
    assert_eq!(Value::String(streamed), r["choices"][0]["message"]["content"].clone());

    // /v1/completions with logprobs
    let (code, r) =
        s.post("/v1/completions", &json!({"prompt": "xy", "max_tokens": 4, "temperature": 0, "logprobs": 2}));
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["object"], "text_completion");
    assert_eq!(
        r["choices"][0]["logprobs"]["content"].as_array().unwrap().len(),
        r["usage"]["completion_tokens"].as_u64().unwrap() as usize
    );

    let (code, props) = s.get("/props");
    assert_eq!(code, 200);
    let props: Value = serde_json::from_str(&props).unwrap();
    assert_eq!(props["total_slots"], 4);
    assert_eq!(props["default_generation_settings"]["n_ctx"], 256);
}

#[test]
fn stop_strings_end_the_text_before_them() {
    let s = start(|_| {});
    let (_, full) = s.post("/completion", &greedy("q", 24));
    let text = full["content"].as_str().unwrap().to_string();
    // a stop string from the middle of the greedy text: the output ends just before it
    let cut = text.char_indices().nth(10).map(|(i, _)| i).unwrap();
    let stop: String = text[cut..].chars().take(2).collect();
    let first = text.find(&stop).unwrap();
    let mut req = greedy("q", 24);
    req["stop"] = json!([stop]);
    let (_, r) = s.post("/completion", &req);
    assert_eq!(r["content"].as_str().unwrap(), &text[..first]);
    assert_eq!(r["stop_type"], "word");
    assert_eq!(r["stopping_word"], stop);
    req["stream"] = json!(true);
    let ev = s.stream("/completion", &req);
    let streamed: String = ev
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap()["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(streamed, &text[..first]);
}

/// 12 requests of different lengths at once on 4 slots give exactly the tokens each gets
/// alone; `/metrics` counts what was sent.
#[test]
fn concurrent_requests_get_the_tokens_they_get_alone() {
    let s = start(|c| c.n_ubatch = 16);
    let prompts: Vec<(String, usize)> =
        (0..12).map(|i| (format!("prompt {i}: {}", "xyz".repeat(i * 3)), 5 + (i * 7) % 20)).collect();
    let alone: Vec<Value> =
        prompts.iter().map(|(p, n)| s.post("/completion", &greedy(p, *n)).1["tokens"].clone()).collect();
    let before = s.metric("tokens_predicted_total");
    let together: Vec<Value> = std::thread::scope(|sc| {
        let hs: Vec<_> = prompts
            .iter()
            .map(|(p, n)| sc.spawn(|| s.post("/completion", &greedy(p, *n)).1["tokens"].clone()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mismatches = alone.iter().zip(&together).filter(|(a, b)| a != b).count();
    assert_eq!(mismatches, 0, "batched responses differ from the same requests alone");
    let sent: usize = prompts.iter().map(|(_, n)| n).sum();
    assert_eq!(s.metric("tokens_predicted_total") - before, sent as f64);
    assert!(s.metric("n_busy_slots_per_decode") > 1.0, "the requests never shared a pass");
    assert_eq!(s.metric("requests_total"), 24.0);
}

#[test]
fn bad_requests_get_openai_errors() {
    let s = start(|c| {
        c.max_body = 4096;
        c.n_parallel = 1;
        c.n_ctx = 64;
    });
    let check = |(code, v): (u16, Value), want: u16, ty: &str| {
        assert_eq!(code, want, "{v}");
        assert_eq!(v["error"]["type"], ty, "{v}");
        assert_eq!(v["error"]["code"], want);
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
    };
    check(s.post_raw("/v1/chat/completions", "{not json", &[]), 400, "invalid_request_error");
    check(s.post_raw("/completion", "[1, 2]", &[]), 400, "invalid_request_error");
    check(s.post("/completion", &json!({"prompt": "a", "temperature": "hot"})), 400, "invalid_request_error");
    check(s.post("/completion", &json!({"prompt": 5})), 400, "invalid_request_error");
    check(s.post("/v1/chat/completions", &json!({"messages": "hi"})), 400, "invalid_request_error");
    check(s.post("/completion", &json!({"prompt": [999999]})), 400, "invalid_request_error");
    let (code, v) = s.post("/completion", &json!({"prompt": "x".repeat(100)}));
    check((code, v.clone()), 400, "exceed_context_size_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("context size"), "{v}");
    assert_eq!(v["error"]["n_prompt_tokens"], 100);
    assert_eq!(v["error"]["n_ctx"], 64);
    check(
        s.post("/completion", &json!({"prompt": "a", "grammar": "root ::= undefined"})),
        400,
        "invalid_request_error",
    );
    check(
        s.post("/completion", &json!({"prompt": "a", "json_schema": {"type": "nonsense"}})),
        400,
        "invalid_request_error",
    );
    check(
        s.post_raw("/completion", &format!("{{\"prompt\": \"{}\"}}", "y".repeat(5000)), &[]),
        413,
        "invalid_request_error",
    );
    check(s.post("/nope", &json!({})), 404, "not_found_error");
    // max_tokens beyond the context: stops at the context
    let (code, v) =
        s.post("/completion", &json!({"prompt": "abc", "n_predict": 1000, "temperature": 0, "ignore_eos": true}));
    assert_eq!(code, 200);
    assert_eq!(v["stop_type"], "limit");
    assert_eq!(v["truncated"], true);
    assert_eq!(v["tokens_predicted"].as_u64().unwrap() + v["tokens_evaluated"].as_u64().unwrap(), 64);
}

/// `response_format` json_schema and a GBNF `grammar` constrain what a random model writes.
#[test]
fn grammars_and_json_schemas_constrain_the_output() {
    let s = start(|_| {});
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "n": {"type": "integer", "minimum": 0, "maximum": 99},
            "kind": {"enum": ["a", "b"]},
        },
        "required": ["name", "n", "kind"],
        "additionalProperties": false,
    });
    for seed in 0..5 {
        let (code, r) = s.post(
            "/v1/chat/completions",
            &json!({
                "messages": [{"role": "user", "content": "json please"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
                "temperature": 1.0, "seed": seed, "max_tokens": 200,
            }),
        );
        assert_eq!(code, 200, "{r}");
        let text = r["choices"][0]["message"]["content"].as_str().unwrap();
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text:?}"));
        assert!(v["name"].as_str().unwrap().chars().count() <= 8, "{v}");
        assert!(v["n"].as_u64().unwrap() <= 99, "{v}");
        assert!(v["kind"] == "a" || v["kind"] == "b", "{v}");
        assert_eq!(v.as_object().unwrap().len(), 3, "{v}");
    }
    let (code, r) = s.post(
        "/completion",
        &json!({"prompt": "x", "grammar": "root ::= [0-9]{3} \"!\"", "temperature": 1.0, "seed": 2}),
    );
    assert_eq!(code, 200, "{r}");
    let t = r["content"].as_str().unwrap();
    assert!(t.len() == 4 && t[..3].bytes().all(|b| b.is_ascii_digit()) && t.ends_with('!'), "{t:?}");
    assert_eq!(r["stop_type"], "eos");
}

#[test]
fn api_keys_guard_everything_but_health() {
    let s = start(|c| c.api_keys = vec!["sekrit".into()]);
    assert_eq!(s.get("/health").0, 200);
    assert_eq!(s.get("/v1/models").0, 401);
    let (code, v) = s.post("/completion", &greedy("a", 2));
    assert_eq!(code, 401);
    assert_eq!(v["error"]["type"], "authentication_error");
    assert_eq!(s.post_raw("/completion", &greedy("a", 2).to_string(), &[("Authorization", "Bearer wrong")]).0, 401);
    let r = s.post_raw("/completion", &greedy("a", 2).to_string(), &[("Authorization", "Bearer sekrit")]);
    assert_eq!(r.0, 200, "{}", r.1);
    assert_eq!(s.post_raw("/tokenize", "{\"content\": \"a\"}", &[("X-Api-Key", "sekrit")]).0, 200);
}

/// A raw connection that sends a streaming request and reads a little of the answer.
fn open_stream(base: &str, body: &Value) -> std::net::TcpStream {
    let addr = base.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    let b = body.to_string();
    write!(
        c,
        "POST /completion HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
        b.len()
    )
    .unwrap();
    let mut buf = [0u8; 512];
    let n = c.read(&mut buf).unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    c
}

#[test]
fn a_full_queue_answers_503_and_dropped_clients_free_their_slots() {
    let s = start(|c| {
        c.n_parallel = 2;
        c.queue_size = 1;
    });
    let long = json!({"prompt": "go", "n_predict": 100000, "temperature": 0, "ignore_eos": true, "stream": true});
    // two streams take both slots, a third waits in the queue, a fourth is refused
    let a = open_stream(&s.base, &long);
    let b = open_stream(&s.base, &long);
    let t0 = Instant::now();
    while s.idle() || s.metric("requests_processing") < 2.0 {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
    }
    let waiting = std::thread::spawn({
        let base = s.base.clone();
        move || {
            ureq::post(&format!("{base}/completion")).send_string(&greedy("w", 3).to_string()).map(|r| r.status()).ok()
        }
    });
    let t0 = Instant::now();
    while s.metric("requests_deferred") < 1.0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the third request never queued");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, v) = s.post("/completion", &greedy("x", 3));
    assert_eq!(code, 503, "{v}");
    assert_eq!(v["error"]["type"], "unavailable_error");
    // the clients go away: their slots are freed, the queued request runs
    drop(a);
    drop(b);
    assert_eq!(waiting.join().unwrap(), Some(200));
    s.wait_idle();
    // 20 clients that read a little and drop: every slot comes back
    for _ in 0..10 {
        let c1 = open_stream(&s.base, &long);
        let c2 = open_stream(&s.base, &long);
        drop((c1, c2));
        s.wait_idle();
    }
    assert_eq!(s.post("/completion", &greedy("after", 3)).0, 200);
    assert_eq!(s.metric("requests_processing"), 0.0);
}

#[test]
fn shutdown_ends_running_streams_cleanly() {
    let mut s = start(|_| {});
    let long = json!({"prompt": "go", "n_predict": 100000, "temperature": 0, "ignore_eos": true, "stream": true});
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let url = format!("{}/completion", s.base);
            let body = long.to_string();
            std::thread::spawn(move || {
                let res = ureq::post(&url).send_string(&body).unwrap();
                let lines: Vec<String> = BufReader::new(res.into_reader()).lines().map_while(Result::ok).collect();
                lines.iter().rev().find_map(|l| l.strip_prefix("data: ").map(str::to_string)).unwrap_or_default()
            })
        })
        .collect();
    let t0 = Instant::now();
    while s.metric("requests_processing") < 3.0 {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
    }
    let t0 = Instant::now();
    s.handle.take().unwrap().stop().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10), "shutdown took {:?}", t0.elapsed());
    for r in readers {
        let last: Value = serde_json::from_str(&r.join().unwrap()).unwrap();
        assert_eq!(last["stop"], true, "{last}");
        assert_eq!(last["stop_type"], "limit");
    }
}

/// `--timeout`: a generation that runs past its time limit ends with what it has
/// (`stop_type` "limit"), and the slot is free again.
#[test]
fn the_request_time_limit_ends_long_generations() {
    let s = start(|c| {
        c.timeout_s = 1;
        c.n_parallel = 1;
        c.n_ctx = 100_000;
    });
    let t0 = Instant::now();
    let (code, r) =
        s.post("/completion", &json!({"prompt": "go", "n_predict": 90000, "temperature": 0, "ignore_eos": true}));
    let dt = t0.elapsed();
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["stop_type"], "limit");
    assert!(r["tokens_predicted"].as_u64().unwrap() < 90000);
    assert!(dt < Duration::from_secs(5), "took {dt:?}");
    s.wait_idle();
}

/// A file that is not a model: `/health` says why with 503, and the server stops with
/// the error (as llama-server exits) instead of serving nothing forever.
#[test]
fn a_model_that_fails_to_load_stops_the_server_with_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"definitely not gguf").unwrap();
    let cfg = gguf_server::Config { model: bad, port: 0, announce: false, ..Default::default() };
    let h = gguf_server::spawn(cfg, None).unwrap();
    let url = format!("http://{}/health", h.addr);
    let t0 = Instant::now();
    loop {
        match ureq::get(&url).call() {
            Err(ureq::Error::Status(503, r)) => {
                let body = r.into_string().unwrap();
                if body.contains("failed to load") {
                    break;
                }
            }
            Err(ureq::Error::Transport(_)) => break, // already stopped
            _ => {}
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "never reported the failure");
        std::thread::sleep(Duration::from_millis(10));
    }
    let err = h.stop().unwrap_err().to_string();
    assert!(err.contains("bad.gguf") && err.contains("GGUF"), "{err}");
}

/// llama-server's sampling fields: the chain order (`samplers` as names or letters), the
/// new samplers, both `logit_bias` forms, and a 400 for a field of the wrong type or out
/// of its hard range.
#[test]
fn sampling_fields_shape_the_chain() {
    let s = start(|c| c.n_parallel = 1);
    let content = |extra: Value| {
        let mut body = json!({"prompt": "abc", "n_predict": 8, "ignore_eos": true, "seed": 5});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (code, v) = s.post("/completion", &body);
        assert_eq!(code, 200, "{v}");
        v["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect::<Vec<u64>>()
    };
    let greedy = content(json!({"temperature": 0}));
    assert_eq!(content(json!({"samplers": ["top_k"], "top_k": 1, "temperature": 3})), greedy);
    assert_eq!(content(json!({"samplers": "k", "top_k": 1, "temperature": 3})), greedy);
    let hot = json!({"temperature": 2, "top_k": 0, "top_p": 1, "min_p": 0});
    let plain = content(hot.clone());
    assert_eq!(content(hot.clone()), plain, "a seed fixes the draws");
    for extra in [
        json!({"mirostat": 2, "mirostat_tau": 3, "mirostat_eta": 0.2}),
        json!({"typical_p": 0.3}),
        json!({"top_n_sigma": 0.5}),
        json!({"xtc_probability": 1, "xtc_threshold": 0.001}),
        json!({"dynatemp_range": 1.9, "dynatemp_exponent": 2}),
        json!({"samplers": ["adaptive_p"], "adaptive_target": 0.1}),
        json!({"dry_multiplier": 50, "dry_allowed_length": 0, "dry_sequence_breakers": ["\n"]}),
    ] {
        let mut body = hot.clone();
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        assert_ne!(content(body), plain, "{extra} changed nothing");
    }
    // the greedy first token, banned in either logit_bias form, is never chosen
    let first = greedy[0];
    for bias in [json!([[first, false]]), json!({ first.to_string(): false })] {
        let t = content(json!({"temperature": 0, "logit_bias": bias}));
        assert!(!t.contains(&first), "{bias}: {t:?}");
    }
    for bad in [
        json!({"mirostat": "two"}),
        json!({"dry_sequence_breakers": []}),
        json!({"dry_sequence_breakers": [1]}),
        json!({"samplers": 5}),
        json!({"samplers": [1]}),
        json!({"min_keep": -1}),
        json!({"dry_penalty_last_n": -1}),
        json!({"adaptive_decay": 2}),
        json!({"xtc_probability": "high"}),
    ] {
        let mut body = json!({"prompt": "abc", "n_predict": 1});
        body.as_object_mut().unwrap().extend(bad.as_object().unwrap().clone());
        let (code, v) = s.post("/completion", &body);
        assert_eq!(code, 400, "{bad}: {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    }
}

#[test]
fn cache_reuse_shifts_a_chunk_that_moved_up_in_the_prompt() {
    let timings = |v: &Value| (v["timings"]["cache_n"].as_u64().unwrap(), v["timings"]["prompt_n"].as_u64().unwrap());
    let n_tokens = |s: &Srv, text: &str| {
        s.post("/tokenize", &json!({"content": text})).1["tokens"].as_array().unwrap().len() as u64
    };
    let head = "You are a helpful assistant. ";
    let dropped = "Earlier turns of the conversation went here. ";
    let kept = "The question that stays in the prompt is this one, and it is long enough. ";
    let first = format!("{head}{dropped}{kept}");
    let second = format!("{head}{kept}And one more line.");
    for reuse in [0usize, 8] {
        let s = start(|c| {
            c.n_parallel = 1;
            c.cache_reuse = reuse;
        });
        let (code, a) = s.post("/completion", &greedy(&first, 4));
        assert_eq!(code, 200, "{a}");
        assert_eq!(timings(&a).0, 0);
        let (code, b) = s.post("/completion", &greedy(&second, 4));
        assert_eq!(code, 200, "{b}");
        let (cache_n, prompt_n) = timings(&b);
        assert_eq!(cache_n + prompt_n, n_tokens(&s, &second));
        if reuse == 0 {
            // prefix reuse in whole -ub (512) chunks: nothing of a short prompt
            assert_eq!(cache_n, 0);
        } else {
            // the common prefix (BOS + head) and the shifted chunk (kept)
            let want = n_tokens(&s, &format!("{head}{kept}"));
            assert_eq!(cache_n, want, "{b}");
            assert_eq!(b["tokens_predicted"], 4);
            assert_eq!(s.metric("prompt_tokens_cached_total"), want as f64);
            // per request: n_cache_reuse 0 turns it off
            let mut body = greedy(&first, 4);
            body["n_cache_reuse"] = json!(0);
            assert_eq!(timings(&s.post("/completion", &body).1).0, 0);
        }
    }
}

#[test]
fn tool_choice_required_forces_a_call_of_an_offered_tool() {
    let s = start(|c| c.n_parallel = 1);
    let tool = |name: &str, cities: &[&str]| {
        json!({"type": "function", "function": {"name": name, "parameters": {
            "type": "object",
            "properties": {"city": {"enum": cities}},
            "required": ["city"],
            "additionalProperties": false,
        }}})
    };
    let tools = json!([tool("get_weather", &["Paris", "Rome"]), tool("get_time", &["Oslo"])]);
    let ask = |choice: Value, parallel: bool| {
        s.post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "weather?"}], "tools": tools, "tool_choice": choice,
                    "parallel_tool_calls": parallel, "max_tokens": 600, "temperature": 0}),
        )
    };
    for (choice, names) in [
        (json!("required"), vec!["get_weather", "get_time"]),
        (json!({"type": "function", "function": {"name": "get_time"}}), vec!["get_time"]),
    ] {
        let (code, r) = ask(choice.clone(), false);
        assert_eq!(code, 200, "{r}");
        let c = &r["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{choice}: {r}");
        let calls = c["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{r}");
        let name = calls[0]["function"]["name"].as_str().unwrap();
        assert!(names.contains(&name), "{choice}: called {name}");
        let args: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        let city = args["city"].as_str().unwrap();
        let allowed = if name == "get_time" { vec!["Oslo"] } else { vec!["Paris", "Rome"] };
        assert!(allowed.contains(&city), "{name}({city})");
    }
    let (code, r) = ask(json!({"type": "function", "function": {"name": "nope"}}), false);
    assert_eq!(code, 400, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("nope"), "{r}");
    let (code, r) = ask(json!("sometimes"), false);
    assert_eq!(code, 400, "{r}");
    let (code, r) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": "required",
                "response_format": {"type": "json_object"}}),
    );
    assert_eq!(code, 400, "{r}");
}

#[test]
fn a_unified_kv_cache_lets_one_slot_use_the_whole_context() {
    let slots = |s: &Srv| -> Vec<Value> { serde_json::from_str(&s.get("/slots").1).unwrap() };
    // 40 bytes (+ BOS) of prompt: more than a slot's share of 64 cells over 2 slots
    let long = "0123456789".repeat(4);
    let split = start(|c| {
        c.n_parallel = 2;
        c.n_ctx = 64;
    });
    assert_eq!(slots(&split)[0]["n_ctx"], 32);
    assert_eq!(split.post("/completion", &greedy(&long, 4)).0, 400);

    let s = start(|c| {
        c.n_parallel = 2;
        c.n_ctx = 64;
        c.kv_unified = true;
    });
    assert_eq!(slots(&s)[0]["n_ctx"], 64);
    let (code, a) = s.post("/completion", &greedy(&long, 8));
    assert_eq!(code, 200, "{a}");
    let first = a["id_slot"].as_u64().unwrap() as usize;
    assert!(slots(&s)[first]["n_past"].as_u64().unwrap() >= 41);
    // a different prompt goes to the other slot; the idle one's cells make room for it
    let other = "abcdefghij".repeat(3);
    let mut body = greedy(&other, 8);
    body["id_slot"] = json!(1 - first);
    let (code, b) = s.post("/completion", &body);
    assert_eq!(code, 200, "{b}");
    assert_eq!(b["tokens_predicted"], 8);
    let after = slots(&s);
    assert_eq!(after[first]["n_past"], 0, "the idle slot was purged: {after:?}");
    assert!(after[1 - first]["n_past"].as_u64().unwrap() >= 31);
}

// ---- embeddings and reranking (an encoder model) ----

/// A tiny bert with a WordPiece vocabulary (pooling mean, two classifier labels).
fn bert(dir: &tempfile::TempDir) -> PathBuf {
    let mut t = Tiny::new("bert").with_tokenizer();
    t.n_head_kv = t.n_head;
    let p = dir.path().join("bert.gguf");
    write(&t, &p, None, &[]).unwrap();
    p
}

/// What the encoder itself gives for `text` (tokenized as the server does), normalized
/// by `norm`, or raw with `norm` None.
fn direct(srv: &Srv, seqs: &[Vec<u32>], pooling: gguf_models::Pooling) -> Vec<Vec<f32>> {
    let p = srv._dir.path().join("bert.gguf");
    let (_f, model) = gguf_models::load(&p).unwrap();
    let enc = model.encoder().unwrap();
    let seqs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    enc.embed(&gguf_models::Pool::new(1), &seqs, pooling).unwrap()
}

fn bert_tokens(srv: &Srv, text: &str) -> Vec<u32> {
    let p = srv._dir.path().join("bert.gguf");
    let f = gguf_format::GgufFile::open(&p).unwrap();
    let tok = gguf_tokenizer::Tokenizer::from_gguf(f.metadata()).unwrap();
    tok.encode(text, true, true).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

#[test]
fn embeddings_are_the_encoders_vectors_normalized() {
    let s = start_with(bert, |_| {});
    let inputs = ["hello world", "abc 12", "hello world"];
    let (code, v) = s.post("/v1/embeddings", &json!({"input": inputs, "model": "m"}));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "m");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    let toks: Vec<Vec<u32>> = inputs.iter().map(|t| bert_tokens(&s, t)).collect();
    let want = direct(&s, &toks, gguf_models::Pooling::Mean);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"], i);
        assert_eq!(d["object"], "embedding");
        let got = floats(&d["embedding"]);
        let mut n = vec![0f32; want[i].len()];
        gguf_models::normalize_embedding(&want[i], &mut n, 2);
        assert_eq!(got, n, "input {i}: the encoder's vector, Euclidean-normalized");
    }
    assert_eq!(v["usage"]["prompt_tokens"], toks.iter().map(Vec::len).sum::<usize>());
    assert_ne!(data[0]["embedding"], data[1]["embedding"]);
    // base64: the same floats' little-endian bytes
    let (_, b) = s.post("/v1/embeddings", &json!({"input": "abc 12", "encoding_format": "base64"}));
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(b["data"][0]["embedding"].as_str().unwrap()).unwrap();
    let from_b64: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(from_b64, floats(&data[1]["embedding"]));
    // llama-server's own shape: a list of {index, embedding: [vector]}; embd_normalize -1 = raw
    let (code, e) = s.post("/embedding", &json!({"content": "abc 12", "embd_normalize": -1}));
    assert_eq!(code, 200, "{e}");
    assert_eq!(e[0]["index"], 0);
    assert_eq!(floats(&e[0]["embedding"][0]), want[1]);
    // token ids are taken as given
    let (_, t) = s.post("/embeddings", &json!({"content": toks[1]}));
    assert_eq!(t[0]["embedding"][0], data[1]["embedding"]);
    // bad input, named; generation refused
    for (body, want) in [
        (json!({}), "\"input\" or \"content\" must be provided"),
        (json!({"input": []}), "cannot be empty"),
        (json!({"input": "x", "encoding_format": "hex"}), "float or base64"),
        (json!({"input": [1, 99999]}), "invalid token id 99999"),
        (json!({"input": "abc ".repeat(100)}), "longer than the model's context"),
    ] {
        let (code, e) = s.post("/v1/embeddings", &body);
        assert_eq!(code, 400, "{body}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(want), "{body}: {e}");
    }
    let (code, e) = s.post("/v1/chat/completions", &json!({"messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(code, 501, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("embedding model"), "{e}");
    let (code, _) = s.post("/rerank", &json!({"query": "a", "documents": ["b"]}));
    assert_eq!(code, 501, "a mean-pooling model does not rerank");
}

#[test]
fn embeddings_per_token_with_pooling_none() {
    let s = start_with(bert, |c| c.pooling = Some("none".into()));
    let (code, e) = s.post("/v1/embeddings", &json!({"input": "hello"}));
    assert_eq!(code, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("not OAI compatible"), "{e}");
    let (code, e) = s.post("/embedding", &json!({"content": "hello world"}));
    assert_eq!(code, 200, "{e}");
    let toks = bert_tokens(&s, "hello world");
    let rows = e[0]["embedding"].as_array().unwrap();
    assert_eq!(rows.len(), toks.len(), "one unnormalized vector per token");
    let want = direct(&s, &[toks], gguf_models::Pooling::None);
    let got: Vec<f32> = rows.iter().flat_map(floats).collect();
    assert_eq!(got, want[0]);
}

#[test]
fn rerank_scores_query_document_pairs() {
    let s = start_with(bert, |c| c.pooling = Some("rank".into()));
    let docs = ["hello world", "abc", "xyz 1"];
    let (code, v) = s.post("/rerank", &json!({"query": "hello", "documents": docs, "top_n": 2}));
    assert_eq!(code, 200, "{v}");
    let res = v["results"].as_array().unwrap();
    assert_eq!(res.len(), 2);
    // each pair: [CLS] query [SEP] document [SEP] (WordPiece: add BOS and SEP, no EOS)
    let p = s._dir.path().join("bert.gguf");
    let f = gguf_format::GgufFile::open(&p).unwrap();
    let tok = gguf_tokenizer::Tokenizer::from_gguf(f.metadata()).unwrap();
    let pairs: Vec<Vec<u32>> =
        docs.iter().map(|d| gguf_server::embed::rerank_tokens(&tok, None, "hello", d).unwrap()).collect();
    let q = tok.encode("hello", true, true).unwrap();
    assert_eq!(pairs[1][..q.len()], q[..], "[CLS] query [SEP] first");
    let scores: Vec<f32> = direct(&s, &pairs, gguf_models::Pooling::Rank).iter().map(|v| v[0]).collect();
    let mut order: Vec<usize> = (0..3).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    for (r, &i) in res.iter().zip(&order) {
        assert_eq!(r["index"], i);
        assert_eq!(r["relevance_score"].as_f64().unwrap() as f32, scores[i]);
    }
    assert_eq!(v["usage"]["prompt_tokens"], pairs.iter().map(Vec::len).sum::<usize>());
    // TEI's shape: `texts`, `score`, `return_text`
    let (_, t) = s.post("/v1/rerank", &json!({"query": "hello", "texts": docs, "return_text": true}));
    let t = t.as_array().unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(t[0]["text"], docs[order[0]]);
    assert_eq!(t[0]["score"].as_f64().unwrap() as f32, scores[order[0]]);
    for (body, want) in [
        (json!({"documents": ["a"]}), "\"query\" must be provided"),
        (json!({"query": 1, "documents": ["a"]}), "\"query\" must be a string"),
        (json!({"query": "a", "documents": []}), "non-empty"),
    ] {
        let (code, e) = s.post("/rerank", &body);
        assert_eq!(code, 400, "{body}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(want), "{body}: {e}");
    }
}

#[test]
fn a_generative_model_refuses_embeddings() {
    let s = start(|_| {});
    let (code, e) = s.post("/v1/embeddings", &json!({"input": "hello"}));
    assert_eq!(code, 501, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("does not support embeddings"), "{e}");
    let (code, _) = s.post("/rerank", &json!({"query": "a", "documents": ["b"]}));
    assert_eq!(code, 501);
}
