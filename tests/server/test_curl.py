"""The same calls through `curl` subprocesses: status codes, headers and SSE framing on the wire."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")


class CurlResult:
    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


def curl(url: str, body=None, method=None, headers=(), stream=False, max_time=120) -> CurlResult:
    args = ["curl", "-sS", "-i", "--max-time", str(max_time)]
    if stream:
        args.append("-N")
    if method:
        args += ["-X", method]
    for h in headers:
        args += ["-H", h]
    data = None
    if body is not None:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        data = data.encode() if isinstance(data, str) else data
        args += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    args.append(url)
    p = subprocess.run(args, input=data, capture_output=True, timeout=max_time + 10)
    assert p.returncode == 0, f"curl exit {p.returncode}: {p.stderr.decode(errors='replace')}"
    out = p.stdout
    while True:
        head, sep, rest = out.partition(b"\r\n\r\n")
        assert sep, f"no header terminator in curl output: {out[:300]!r}"
        status = int(head.split(b"\r\n", 1)[0].split()[1])
        out = rest
        if status != 100:
            break
    hdrs = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.decode("latin-1").partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return CurlResult(status, hdrs, out)


def sse_events(body: bytes) -> list[str]:
    """Split an SSE body into events; each must be exactly one `data: ...` line."""
    text = body.decode("utf-8")
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-80:]!r}"
    events = [e for e in text.split("\n\n") if e.strip()]
    out = []
    for ev in events:
        lines = ev.strip("\n").split("\n")
        assert len(lines) == 1, f"multi-line event: {ev!r}"
        assert lines[0].startswith("data: "), f"not a data event: {ev!r}"
        out.append(lines[0][len("data: "):])
    return out


CHAT = {"messages": [{"role": "user", "content": "Name three fruits."}], "max_tokens": 12, "temperature": 0}


def test_health(server):
    r = curl(server.url + "/health")
    assert r.status == 200
    assert r.content_type.startswith("application/json")
    assert r.json()["status"] == "ok"


def test_chat_non_stream(server):
    r = curl(server.url + "/v1/chat/completions", CHAT)
    assert r.status == 200
    assert r.content_type.startswith("application/json")
    d = r.json()
    assert d["object"] == "chat.completion"
    assert isinstance(d["choices"][0]["message"]["content"], str)


def test_chat_stream_framing(server):
    full = curl(server.url + "/v1/chat/completions", CHAT).json()
    r = curl(server.url + "/v1/chat/completions", dict(CHAT, stream=True), stream=True)
    assert r.status == 200
    assert r.content_type.startswith("text/event-stream")
    events = sse_events(r.body)
    assert events[-1] == "[DONE]"
    assert events.count("[DONE]") == 1
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == full["choices"][0]["message"]["content"]


def test_completions_stream_framing(server):
    body = {"prompt": "Roses are red,", "max_tokens": 8, "temperature": 0}
    full = curl(server.url + "/v1/completions", body).json()
    r = curl(server.url + "/v1/completions", dict(body, stream=True), stream=True)
    assert r.status == 200
    assert r.content_type.startswith("text/event-stream")
    events = sse_events(r.body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == full["choices"][0]["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_native_completion_stream_framing(server):
    """llama-server's /completion stream: data events, the last has stop=true (no [DONE] there)."""
    r = curl(server.url + "/completion", {"prompt": "Roses are red,", "n_predict": 6, "temperature": 0, "stream": True},
             stream=True)
    assert r.status == 200
    assert r.content_type.startswith("text/event-stream")
    events = [e for e in sse_events(r.body) if e != "[DONE]"]
    chunks = [json.loads(e) for e in events]
    assert chunks[-1]["stop"] is True
    assert all(c["stop"] is False for c in chunks[:-1])


def test_not_found(server):
    r = curl(server.url + "/no/such/endpoint")
    assert r.status == 404
    assert "error" in r.json()


def test_wrong_method(server):
    # llama-server answers 404 to a GET on a POST route; 405 is accepted as well
    r = curl(server.url + "/v1/chat/completions")
    assert r.status in (404, 405)


def test_bad_json_status(server):
    r = curl(server.url + "/v1/chat/completions", b"{not json")
    assert 400 <= r.status < 600
    assert r.content_type.startswith("application/json")
    assert "error" in r.json()
