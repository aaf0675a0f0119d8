"""Tool calls through the server on qwen2.5-coder-0.5b (the Hermes <tool_call> format of its chat
template): `tool_choice` "required" and a named function are enforced by a grammar, so even a prompt
the model would answer in prose gets a call of an offered tool, with arguments following the tool's
schema. Runs against the server under test (SERVER_KIND; llama-server needs --jinja for tools).
`--cache-reuse` is checked here too: a prompt that drops a middle chunk of the previous one reuses
the later chunk's cells (timings.cache_n), on both servers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest
import requests

import harness
from conftest import IS_LLAMA

QWEN = Path(os.path.expanduser(os.environ.get("TOOLS_MODEL", str(harness.MODELS_DIR / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))))

pytestmark = pytest.mark.skipif(not QWEN.exists(), reason=f"needs {QWEN}")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    },
}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}


@pytest.fixture(scope="module")
def qwen(log_dir):
    from conftest import _LIVE

    s = harness.Server(model=QWEN, np=1, ctx=2048, extra=["--jinja", "--cache-reuse", "16"], log_dir=log_dir)
    _LIVE.append(s)
    s.start()
    yield s
    s.stop()
    _LIVE.remove(s)


def chat(server, content, **kw):
    body = {"messages": [{"role": "user", "content": content}], "tools": [WEATHER, TIME], "temperature": 0,
            "max_tokens": 96, **kw}
    r = requests.post(server.url + "/v1/chat/completions", json=body, timeout=harness.REQUEST_TIMEOUT)
    return r.status_code, r.json()


def calls_of(resp):
    import openai.types.chat as oc

    oc.ChatCompletion.model_validate(resp)
    choice = resp["choices"][0]
    assert choice["finish_reason"] == "tool_calls", resp
    calls = choice["message"]["tool_calls"]
    assert calls, resp
    for c in calls:
        args = json.loads(c["function"]["arguments"])
        jsonschema.validate(args, SCHEMAS[c["function"]["name"]])
    return calls


# prompts a 0.5B model answers in prose when it may
PROSE = ["Write a haiku about autumn.", "What is 2 + 2?", "Say hello to my friend Bob."]


@pytest.mark.parametrize("prompt", PROSE)
def test_required_forces_a_tool_call(qwen, prompt):
    code, resp = chat(qwen, prompt, tool_choice="required")
    assert code == 200, resp
    calls = calls_of(resp)
    assert len(calls) == 1
    assert calls[0]["function"]["name"] in SCHEMAS


def test_a_named_function_is_the_one_called(qwen):
    for name in SCHEMAS:
        code, resp = chat(qwen, "What's the weather like in Paris?",
                          tool_choice={"type": "function", "function": {"name": name}})
        assert code == 200, resp
        assert [c["function"]["name"] for c in calls_of(resp)] == [name]


def test_cache_reuse_shifts_the_kept_chunk(qwen):
    system = "You are a careful assistant. Answer in one short sentence. " * 3
    dropped = "Here is some context that the next request leaves out: " + "alpha beta gamma delta. " * 6
    kept = "The part that stays: the user likes concise answers about geography and history. " * 2
    first = f"{system}\n{dropped}\n{kept}\nQuestion: where is Rome?"
    second = f"{system}\n{kept}\nQuestion: where is Oslo?"
    toks = lambda text: len(requests.post(qwen.url + "/tokenize", json={"content": text}, timeout=30).json()["tokens"])

    def complete(prompt):
        r = requests.post(qwen.url + "/completion", json={"prompt": prompt, "n_predict": 8, "temperature": 0,
                                                          "cache_prompt": True}, timeout=harness.REQUEST_TIMEOUT)
        assert r.status_code == 200, r.text
        return r.json()

    complete(first)
    r = complete(second)
    t = r["timings"]
    assert t["cache_n"] + t["prompt_n"] == toks(second)
    # the shared prefix plus most of the kept chunk came from the cache, not just the prefix
    prefix = toks(f"{system}\n")
    assert t["cache_n"] > prefix + toks(kept) // 2, (t, prefix)
