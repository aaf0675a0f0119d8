"""Our server next to llama-server on the same model: same tokens, same templates, same greedy text,
same response shapes. Needs both binaries (GGUF_BIN / LLAMA_SERVER_BIN, or their defaults)."""

from __future__ import annotations

import json

import pytest

import harness
from conftest import _LIVE
from harness import Server

LLAMA_BIN = harness.server_bin("llama")
GGUF_BIN = harness.server_bin("gguf")

pytestmark = pytest.mark.skipif(
    not (LLAMA_BIN.exists() and GGUF_BIN.exists() and harness.model_path().exists()),
    reason=f"needs both servers and the model: {LLAMA_BIN}, {GGUF_BIN}, {harness.model_path()}",
)


@pytest.fixture(scope="module")
def pair(log_dir):
    servers = {}
    try:
        for kind, binary in (("llama", LLAMA_BIN), ("gguf", GGUF_BIN)):
            servers[kind] = Server(kind=kind, binary=binary, np=1, ctx=2048, log_dir=log_dir)
            _LIVE.append(servers[kind])
            servers[kind].start()
        yield servers
    finally:
        for s in servers.values():
            s.stop()
            _LIVE.remove(s)


TOKENIZE = [
    "Hello world", "hello  world", "  leading spaces", "trailing spaces   ", "tabs\tand\nnewlines\r\n",
    "\n\n\n", "", "a", "héllo wörld — ünïcode façade", "emoji 🦙🚀👍🏽 and ZWJ 👨‍👩‍👧", "中文和日本語のテキスト",
    "Ελληνικά και русский", "numbers 1234567890 3.14159 1e-9", "code: def f(x):\n    return x**2",
    "<|im_start|>user\nhi<|im_end|>", "<|endoftext|>", "<|im_start|><|im_end|>text", "don't can't I'm we'll",
    "URL https://example.com/a?b=c&d=e", "mixed   \t  whitespace \u00a0nbsp",
]


@pytest.mark.parametrize("parse_special", [True, False])
def test_tokenize_identical(pair, parse_special):
    diffs = []
    for text in TOKENIZE:
        for add_special in (True, False):
            body = {"content": text, "add_special": add_special, "parse_special": parse_special, "with_pieces": True}
            a = pair["llama"].post_json("/tokenize", body)["tokens"]
            b = pair["gguf"].post_json("/tokenize", body)["tokens"]
            if a != b:
                diffs.append(f"{text!r} add_special={add_special}:\n  llama {a}\n  gguf  {b}")
    assert not diffs, "\n".join(diffs)


def test_detokenize_identical(pair):
    for text in TOKENIZE:
        toks = pair["llama"].post_json("/tokenize", {"content": text})["tokens"]
        a = pair["llama"].post_json("/detokenize", {"tokens": toks})
        b = pair["gguf"].post_json("/detokenize", {"tokens": toks})
        assert a == b, text


CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi! How can I help?"},
     {"role": "user", "content": "Tell me a joke."}],
    [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Good morning"},
     {"role": "assistant", "content": "Bonjour"}, {"role": "user", "content": "And good night?"}],
    [{"role": "user", "content": "unicode: héllo 🦙\nnew line\ttab"}, {"role": "assistant", "content": "ok"}],
]


@pytest.mark.parametrize("i", range(len(CONVERSATIONS)))
def test_apply_template_identical(pair, i):
    a = pair["llama"].post_json("/apply-template", {"messages": CONVERSATIONS[i]})
    b = pair["gguf"].post_json("/apply-template", {"messages": CONVERSATIONS[i]})
    assert a["prompt"] == b["prompt"]


GREEDY = [
    "Once upon a time", "The capital of France is", "def fibonacci(n):", "1, 2, 3, 4,", "The recipe for pancakes:",
    "Q: What is the boiling point of water?\nA:", "In 1492,", "My favourite colour is",
    "<|im_start|>user\nName a fruit.<|im_end|>\n<|im_start|>assistant\n", "Translate to German: good morning ->",
]


def test_greedy_completion_identical(pair):
    diffs = []
    for p in GREEDY:
        body = {"prompt": p, "n_predict": 32, "temperature": 0, "cache_prompt": False}
        a = pair["llama"].post_json("/completion", body)
        b = pair["gguf"].post_json("/completion", body)
        if (a["content"], a["tokens_predicted"], a["stop_type"]) != (b["content"], b["tokens_predicted"], b["stop_type"]):
            diffs.append(f"{p!r}:\n  llama {a['content']!r} ({a['stop_type']}, tokens_predicted {a['tokens_predicted']})"
                         f"\n  gguf  {b['content']!r} ({b['stop_type']}, tokens_predicted {b['tokens_predicted']})")
    assert not diffs, f"{len(diffs)}/{len(GREEDY)} differ:\n" + "\n".join(diffs)


def keys_missing(ref, ours, path=""):
    """Keys of `ref` (recursively into dicts) that `ours` lacks."""
    out = []
    for k, v in ref.items():
        if k not in ours:
            out.append(path + k)
        elif isinstance(v, dict) and isinstance(ours[k], dict):
            out += keys_missing(v, ours[k], path + k + ".")
    return out


# fields llama-server returns that are about its own internals; ours need not have them
LLAMA_ONLY = {"system_fingerprint"}


@pytest.mark.parametrize(
    "path,body",
    [
        ("/completion", {"prompt": "Hello", "n_predict": 4}),
        ("/v1/completions", {"prompt": "Hello", "max_tokens": 4}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    ],
)
def test_same_top_level_fields(pair, path, body):
    a = pair["llama"].post_json(path, body)
    b = pair["gguf"].post_json(path, body)
    missing = set(a) - set(b) - LLAMA_ONLY
    assert not missing, f"{path}: gguf lacks {sorted(missing)} (has {sorted(b)})"
    if "choices" in a:
        m = keys_missing(a["choices"][0], b["choices"][0])
        assert not m, f"{path}: choices[0] lacks {m}"
        m = keys_missing(a["usage"], b["usage"])
        assert not m, f"{path}: usage lacks {m}"


def event_shape(server, path, body):
    """The kinds of SSE events in order, consecutive repeats folded: role, content, finish, usage, [DONE]."""
    shape = []
    with server.post(path, dict(body, stream=True), stream=True) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for data in harness.sse_data(r.iter_lines()):
            if data == "[DONE]":
                kind = "[DONE]"
            else:
                d = json.loads(data)
                if not d.get("choices"):
                    kind = "usage" if d.get("usage") else "empty"
                else:
                    c = d["choices"][0]
                    delta = c.get("delta", {})
                    if c.get("finish_reason"):
                        kind = "finish"
                    elif "role" in delta:
                        kind = "role"
                    elif delta.get("content") or c.get("text"):
                        kind = "content"
                    else:
                        kind = "other"
            if not shape or shape[-1] != kind:
                shape.append(kind)
    return shape


@pytest.mark.parametrize("usage", [False, True])
def test_same_sse_shape(pair, usage):
    body = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8, "temperature": 0}
    if usage:
        body["stream_options"] = {"include_usage": True}
    a = event_shape(pair["llama"], "/v1/chat/completions", body)
    b = event_shape(pair["gguf"], "/v1/chat/completions", body)
    assert a[0] == "role" and a[-1] == "[DONE]"
    assert a == b
    c = event_shape(pair["llama"], "/v1/completions", {"prompt": "Red, green,", "max_tokens": 6, "temperature": 0})
    d = event_shape(pair["gguf"], "/v1/completions", {"prompt": "Red, green,", "max_tokens": 6, "temperature": 0})
    assert c == d


def test_cache_reuse_counts_what_llama_server_counts(log_dir):
    """--cache-reuse 8 at -np 1: a prompt that drops a middle chunk of the previous one reuses the same
    cells on both servers (timings.cache_n / prompt_n); the continuation after the shift is compared
    and reported, not required identical (llama-server attends shifted cells in cell order)."""
    head = "You are a helpful assistant who answers briefly. " * 2
    dropped = "This paragraph is only in the first request: " + "one two three four five. " * 4
    kept = "The user is planning a trip to Italy and wants to know about trains and food. " * 2
    prompts = [f"{head}\n{dropped}\n{kept}\nQ: Rome?\nA:", f"{head}\n{kept}\nQ: Milan?\nA:"]
    out = {}
    for kind, binary in (("llama", LLAMA_BIN), ("gguf", GGUF_BIN)):
        s = Server(kind=kind, binary=binary, np=1, ctx=2048, extra=["--cache-reuse", "8"], log_dir=log_dir)
        _LIVE.append(s)
        s.start()
        try:
            rs = [s.post_json("/completion", {"prompt": p, "n_predict": 8, "temperature": 0, "cache_prompt": True})
                  for p in prompts]
            out[kind] = [(r["timings"]["cache_n"], r["timings"]["prompt_n"], r["content"]) for r in rs]
        finally:
            s.stop()
            _LIVE.remove(s)
    (la, lb), (ga, gb) = out["llama"], out["gguf"]
    assert la[:2] == ga[:2] == (0, la[1]), out
    assert lb[:2] == gb[:2], out
    assert lb[0] > 2 * len(head.split()), f"nothing beyond the prefix was reused: {out}"
    print(f"after the shift: llama {lb[2]!r} / gguf {gb[2]!r}: {'same' if lb[2] == gb[2] else 'different'} text")
