"""llama-server's native endpoints: /completion, /tokenize, /detokenize, /apply-template, /props, /slots,
/metrics, /health. Field names follow the reference (tools/server/server-task.cpp, server-context.cpp)."""

from __future__ import annotations

import json
import time

import pytest

import harness
from harness import sse_data

HI = [{"role": "user", "content": "Say hi"}]
# the fields that both servers must have on a final /completion result
COMPLETION_FIELDS = {
    "content", "tokens_predicted", "tokens_evaluated", "stop", "stop_type", "stopping_word",
    "timings", "generation_settings", "model", "truncated",
}
TIMINGS_FIELDS = {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second"}


def test_health(server):
    r = server.get("/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}
    assert server.get("/v1/health").status_code == 200


def n_tokens(server, text, add_special=True):
    return len(server.post_json("/tokenize", {"content": text, "add_special": add_special})["tokens"])


def test_completion_fields(server):
    prompt = "Once upon a time"
    d = server.post_json("/completion", {"prompt": prompt, "n_predict": 8, "temperature": 0, "cache_prompt": False})
    missing = COMPLETION_FIELDS - d.keys()
    assert not missing, f"missing fields: {missing}"
    assert isinstance(d["content"], str) and d["content"]
    assert d["stop"] is True
    assert d["tokens_predicted"] == 8
    assert d["stop_type"] == "limit"
    assert d["stopping_word"] == ""
    assert d["truncated"] is False
    assert d["tokens_evaluated"] == n_tokens(server, prompt)
    t = d["timings"]
    assert TIMINGS_FIELDS <= t.keys(), t
    assert t["predicted_n"] == 8
    assert t["prompt_n"] == d["tokens_evaluated"]
    assert t["prompt_ms"] >= 0 and t["predicted_ms"] > 0
    gs = d["generation_settings"]
    assert gs["n_predict"] == 8
    assert gs["temperature"] == 0
    assert gs["stream"] is False


def test_completion_stop_types(server):
    d = server.post_json("/completion", {"prompt": "1, 2, 3, 4,", "n_predict": 24, "temperature": 0, "stop": [" 7"]})
    assert d["stop_type"] == "word"
    assert d["stopping_word"] == " 7"
    assert "7" not in d["content"]

    prompt = server.post_json("/apply-template", {"messages": HI})["prompt"]
    d = server.post_json("/completion", {"prompt": prompt, "n_predict": 64, "temperature": 0})
    assert d["stop_type"] == "eos", d
    assert d["tokens_predicted"] < 64


def test_completion_stream(server):
    body = {"prompt": "The best thing about summer is", "n_predict": 10, "temperature": 0, "cache_prompt": False}
    full = server.post_json("/completion", body)
    events = list(server.stream("/completion", body))
    assert len(events) >= 2
    for e in events[:-1]:
        assert e["stop"] is False
        assert isinstance(e["content"], str)
    last = events[-1]
    assert last["stop"] is True
    assert COMPLETION_FIELDS <= last.keys(), COMPLETION_FIELDS - last.keys()
    assert "".join(e["content"] for e in events) == full["content"]
    assert last["tokens_predicted"] == full["tokens_predicted"] == 10
    assert last["generation_settings"]["stream"] is True
    # one token per event before the final one (llama-server: no partial-UTF-8 held back for ASCII text)
    assert len(events) - 1 <= 10


def test_completion_prompt_tokens(server):
    """A prompt given as token ids gives the same result as the text."""
    text = "The quick brown fox"
    toks = server.post_json("/tokenize", {"content": text})["tokens"]
    a = server.post_json("/completion", {"prompt": text, "n_predict": 6, "temperature": 0})
    b = server.post_json("/completion", {"prompt": toks, "n_predict": 6, "temperature": 0})
    assert a["content"] == b["content"]
    assert a["tokens_evaluated"] == b["tokens_evaluated"] == len(toks)


TEXTS = ["Hello world", "  leading and   multiple   spaces", "héllo wörld — ünïcode", "emoji 🦙🚀 and 中文",
         "tabs\tand\nnewlines\n\n", "1234567890", ""]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_detokenize_roundtrip(server, text):
    toks = server.post_json("/tokenize", {"content": text, "add_special": False})["tokens"]
    assert all(isinstance(t, int) for t in toks)
    assert (len(toks) == 0) == (text == "")
    back = server.post_json("/detokenize", {"tokens": toks})["content"]
    assert back == text


def test_tokenize_with_pieces(server):
    text = "héllo 🦙 world"
    plain = server.post_json("/tokenize", {"content": text})["tokens"]
    d = server.post_json("/tokenize", {"content": text, "with_pieces": True})["tokens"]
    assert [t["id"] for t in d] == plain
    raw = b""
    for t in d:
        # a piece that is not valid UTF-8 on its own comes as a list of byte values
        p = t["piece"]
        assert isinstance(p, (str, list))
        raw += p.encode() if isinstance(p, str) else bytes(p)
    assert raw.decode() == text


def test_tokenize_add_special(server):
    props = server.get("/props").json()
    text = "Hello world"
    plain = server.post_json("/tokenize", {"content": text, "add_special": False, "with_pieces": True})["tokens"]
    special = server.post_json("/tokenize", {"content": text, "add_special": True, "with_pieces": True})["tokens"]
    assert special[len(special) - len(plain):] == plain
    extra = special[: len(special) - len(plain)]
    assert len(extra) <= 1
    if extra:
        assert extra[0]["piece"] == props["bos_token"]


def test_tokenize_bos_model(start_server):
    """With a model that adds BOS (gemma-3), add_special=true prepends it and false does not."""
    gemma = harness.MODELS_DIR / "gemma-3-270m-q4_k_m.gguf"
    if not gemma.exists():
        pytest.skip(f"{gemma} missing")
    s = start_server(model=gemma, np=1, ctx=512)
    bos = s.get("/props").json()["bos_token"]
    a = s.post_json("/tokenize", {"content": "Hello", "add_special": True, "with_pieces": True})["tokens"]
    b = s.post_json("/tokenize", {"content": "Hello", "add_special": False, "with_pieces": True})["tokens"]
    assert a[0]["piece"] == bos
    assert a[1:] == b
    assert b and b[0]["piece"] != bos


def test_tokenize_parse_special(server):
    text = "<|im_start|>user"
    on = server.post_json("/tokenize", {"content": text, "parse_special": True, "with_pieces": True})["tokens"]
    off = server.post_json("/tokenize", {"content": text, "parse_special": False, "with_pieces": True})["tokens"]
    assert on[0]["piece"] == "<|im_start|>"
    assert len(off) > len(on)
    assert "".join(t["piece"] for t in off) == text
    # parse_special defaults to true
    dflt = server.post_json("/tokenize", {"content": text})["tokens"]
    assert dflt == [t["id"] for t in on]


def test_apply_template(server):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    d = server.post_json("/apply-template", {"messages": msgs})
    p = d["prompt"]
    assert isinstance(p, str)
    assert "Be brief." in p and "hi" in p
    assert p.index("Be brief.") < p.index("hi")
    # SmolLM2 (ChatML): the generation prompt is appended
    if "<|im_start|>" in p:
        assert p.endswith("<|im_start|>assistant\n")
    # the templated prompt gives the same greedy output as the chat endpoint
    a = server.post_json("/completion", {"prompt": p, "n_predict": 8, "temperature": 0})["content"]
    b = server.post_json("/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": 0})
    assert b["choices"][0]["message"]["content"] == a


def test_props(server):
    d = server.get("/props").json()
    assert d["total_slots"] == server.np
    assert isinstance(d["chat_template"], str) and d["chat_template"]
    assert isinstance(d["default_generation_settings"], dict)
    assert d["default_generation_settings"]["n_ctx"] == server.ctx // server.np
    assert isinstance(d["bos_token"], str) and isinstance(d["eos_token"], str)
    assert "model_path" in d
    assert "build_info" in d


def test_slots(server):
    slots = server.wait_slots_idle()
    assert len(slots) == server.np
    assert sorted(s["id"] for s in slots) == list(range(server.np))
    for s in slots:
        assert s["n_ctx"] == server.ctx // server.np
        assert s["is_processing"] is False


METRIC_NAMES = [
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_seconds_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:tokens_predicted_seconds_total",
    "llamacpp:n_decode_total",
    "llamacpp:prompt_tokens_seconds",
    "llamacpp:predicted_tokens_seconds",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
]


def test_metrics(server):
    r = server.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    for name in METRIC_NAMES:
        assert f"# TYPE {name} " in text, name
    before = harness.parse_prometheus(text)
    assert before["llamacpp:requests_processing"] == 0
    d = server.post_json("/completion", {"prompt": "Metrics are", "n_predict": 5, "temperature": 0, "cache_prompt": False})
    after = server.metrics()
    assert after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] == d["tokens_predicted"]
    assert after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"] == d["tokens_evaluated"]
    assert after["llamacpp:n_decode_total"] > before["llamacpp:n_decode_total"]


def test_metrics_requests_processing(server):
    body = {"prompt": "Write a long essay about rivers.", "n_predict": 200, "temperature": 0, "stream": True}
    seen = None
    with server.post("/completion", body, stream=True) as r:
        assert r.status_code == 200
        for i, _ in enumerate(sse_data(r.iter_lines())):
            if i == 2:
                seen = server.metrics()["llamacpp:requests_processing"]
                break
    assert seen is not None and seen >= 1
    server.wait_slots_idle()
    deadline = time.monotonic() + 10
    while server.metrics()["llamacpp:requests_processing"] != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.metrics()["llamacpp:requests_processing"] == 0


def test_metrics_disabled(start_server):
    """Without --metrics, llama-server answers 501 with an error object."""
    s = start_server(np=1, ctx=512)
    r = s.get("/metrics")
    assert r.status_code == 501
    assert r.json()["error"]["type"] == "not_supported_error"


def test_models_native(server):
    d = server.get("/v1/models").json()
    assert d["object"] == "list"
    assert len(d["data"]) == 1
    m = d["data"][0]
    assert m["object"] == "model"
    assert isinstance(m["id"], str) and m["id"]
