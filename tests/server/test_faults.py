"""Bad input, authentication, limits, disconnecting clients and shutdown."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import openai
import pytest

import harness
from conftest import IS_GGUF, IS_LLAMA


def check_error(r, status):
    """An OpenAI-style error object: {"error": {"code", "message", "type"}}."""
    assert r.status_code in (status if isinstance(status, tuple) else (status,)), f"{r.status_code}: {r.text[:300]}"
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers
    err = r.json()["error"]
    assert {"code", "message", "type"} <= err.keys(), err
    assert err["code"] == r.status_code
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    return err


# llama-server answers a body that is not JSON with 500 / "server_error" (its JSON parser throws
# outside the request validation). That is a reference bug; ours must say 400 / invalid_request_error.
MALFORMED_STATUS = (400, 500) if IS_LLAMA else (400,)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/completion", "/tokenize"])
@pytest.mark.parametrize("body", [b'{"messages": [}', b'{"prompt": ', b"nonsense", b""])
def test_malformed_json(server, path, body):
    r = server.post(path, data=body, headers={"Content-Type": "application/json"})
    err = check_error(r, MALFORMED_STATUS)
    if r.status_code == 400:
        assert err["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "path,body",
    [
        ("/v1/chat/completions", {"messages": "hi"}),
        ("/v1/chat/completions", {}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": "abc"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
        ("/v1/completions", {"prompt": {"nested": {"deep": 1}}, "max_tokens": 1}),
        ("/completion", {"prompt": 123.5, "n_predict": 1}),
        ("/completion", {"n_predict": 1}),
        ("/completion", {"prompt": "x", "n_predict": "many"}),
    ],
)
def test_wrong_field_types(server, path, body):
    err = check_error(server.post(path, body), 400)
    assert err["type"] == "invalid_request_error"


def test_prompt_longer_than_context(server):
    """llama-server: 400, type exceed_context_size_error, with n_prompt_tokens and n_ctx (per slot)."""
    n_ctx = server.ctx // server.np
    long = "hello world " * (n_ctx + 100)
    for path, body in [
        ("/completion", {"prompt": long, "n_predict": 4}),
        ("/v1/completions", {"prompt": long, "max_tokens": 4}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": long}], "max_tokens": 4}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": long}], "max_tokens": 4, "stream": True}),
    ]:
        r = server.post(path, body)
        err = check_error(r, 400)
        assert err["type"] == "exceed_context_size_error", err
        assert err["n_ctx"] == n_ctx
        assert err["n_prompt_tokens"] > n_ctx
    # and the server is still fine
    assert server.post_json("/completion", {"prompt": "Once upon a time", "n_predict": 2, "temperature": 0})["tokens_predicted"] == 2


def test_openai_client_context_error(client, model_id, server):
    long = "hello world " * (server.ctx // server.np + 100)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": long}], max_tokens=4)
    assert e.value.status_code == 400


def test_max_tokens_beyond_context(start_server):
    """llama-server (no --context-shift) generates until the slot is full: 200, finish_reason=length,
    prompt + completion == n_ctx of the slot (llama-server pads -c to a multiple of 256; read it from /slots)."""
    s = start_server(np=1, ctx=256)
    n_ctx = s.slots()[0]["n_ctx"]
    d = s.post_json("/v1/completions", {"prompt": "Count: 1, 2, 3,", "max_tokens": 100000, "temperature": 0})
    assert d["choices"][0]["finish_reason"] == "length"
    u = d["usage"]
    assert u["prompt_tokens"] + u["completion_tokens"] == u["total_tokens"]
    assert n_ctx - 2 <= u["total_tokens"] <= n_ctx, (u, n_ctx)


KEY = "sk-test-key-123"


def test_api_key(start_server):
    s = start_server(np=1, ctx=512, extra=["--api-key", KEY])
    body = {"prompt": "Hello", "n_predict": 2}
    # missing / wrong key
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {KEY}x"}):
        for path in ("/completion", "/v1/chat/completions"):
            b = body if path == "/completion" else {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            err = check_error(s.post(path, b, headers=headers), 401)
            assert err["type"] == "authentication_error"
        check_error(s.get("/v1/models", headers=headers), 401)
        check_error(s.get("/props", headers=headers), 401)
    # right key
    ok = {"Authorization": f"Bearer {KEY}"}
    assert s.post("/completion", body, headers=ok).status_code == 200
    assert s.get("/v1/models", headers=ok).status_code == 200
    # /health (and /v1/health) are exempt, like llama-server's public endpoints
    assert s.get("/health").status_code == 200
    assert s.get("/v1/health").status_code == 200
    # through the openai client
    good = openai.OpenAI(base_url=s.url + "/v1", api_key=KEY, max_retries=0, timeout=60)
    bad = openai.OpenAI(base_url=s.url + "/v1", api_key="nope", max_retries=0, timeout=60)
    mid = good.models.list().data[0].id
    r = good.chat.completions.create(model=mid, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert r.choices[0].message.content is not None
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model=mid, messages=[{"role": "user", "content": "hi"}], max_tokens=2)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_oversize_body(server):
    """A 110 MiB body -> 413. llama-server has this too: cpp-httplib's CPPHTTPLIB_PAYLOAD_MAX_LENGTH
    (100 MiB) answers 413 with an empty body and closes the connection, so only the status is checked
    (a JSON error body is allowed). Our server may use a smaller limit; anything over 100 MiB must fail."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        f.write(b'{"prompt":"')
        chunk = b"a" * (1 << 20)
        for _ in range(110):
            f.write(chunk)
        f.write(b'","n_predict":1}')
        f.flush()
        p = subprocess.run(
            ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "60",
             "-H", "Content-Type: application/json", "--data-binary", f"@{f.name}", server.url + "/completion"],
            capture_output=True, timeout=90,
        )
    assert p.stdout.decode().strip() == "413", (p.stdout, p.stderr)
    assert server.get("/health").status_code == 200


def open_stream(host, port, body, path="/v1/chat/completions", timeout=30):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    c.request("POST", path, json.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.status
    return c, r


def read_events(resp, n):
    got = 0
    while got < n:
        line = resp.fp.readline()
        if not line:
            break
        if line.startswith(b"data:"):
            got += 1
    return got


def _rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_clients_drop_mid_stream(server):
    """50 clients read 2 SSE events each and hang up; the slots must all be idle within 5 s and the
    server's memory must stay flat (a freed slot keeps nothing of its client)."""
    errors = []
    server.post_json("/completion", {"prompt": "warm up", "n_predict": 4, "temperature": 0})
    rss0 = _rss_kib(server.proc.pid)

    def one(i):
        try:
            body = {"messages": [{"role": "user", "content": f"Tell me a very long story, number {i}."}],
                    "max_tokens": 400, "temperature": 0.5, "seed": i}
            c, r = open_stream(harness.HOST, server.port, body, timeout=120)
            read_events(r, 2)
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    t0 = time.monotonic()
    slots = server.wait_slots_idle(timeout=5)
    busy = [s["id"] for s in slots if s.get("is_processing")]
    assert not busy, f"slots {busy} still processing {time.monotonic() - t0:.1f}s after all clients left"
    d = server.post_json("/completion", {"prompt": "Once upon a time", "n_predict": 4, "temperature": 0})
    assert d["tokens_predicted"] == 4
    m = server.metrics()
    assert m["llamacpp:requests_processing"] == 0
    grown = _rss_kib(server.proc.pid) - rss0
    print(f"RSS growth after 50 dropped clients: {grown} KiB")
    assert grown < 32 * 1024, f"RSS grew by {grown} KiB after 50 dropped clients"


def test_sigterm_during_streams(start_server):
    """SIGTERM while 8 streams are running.

    llama-server stops generating but keeps the open streams hanging (no [DONE]) until the clients go
    away, then exits with code 0; so here the clients give up after 6 s of silence and the exit must
    come within 15 s. Our server must close the streams itself and exit 0 within 10 s."""
    s = start_server(np=8, ctx=4096)
    results = {}
    ready = threading.Barrier(9, timeout=120)

    def one(i):
        body = {"messages": [{"role": "user", "content": f"Write a very long essay about topic {i}."}],
                "max_tokens": 1500, "temperature": 0.7, "seed": i}
        try:
            # generous while the streams start (a loaded machine), then 6 s of silence ends a client
            c, r = open_stream(harness.HOST, s.port, body, timeout=60)
            read_events(r, 3)
        except Exception as e:  # noqa: BLE001
            results[i] = f"setup-error {e!r}"
            ready.abort()
            return
        c.sock.settimeout(6)
        ready.wait()
        end = "eof"
        try:
            while True:
                line = r.fp.readline()
                if not line:
                    break
                if line.strip() == b"data: [DONE]":
                    end = "done"
        except (socket.timeout, TimeoutError):
            end = "client-timeout"
        except (ConnectionError, http.client.HTTPException, OSError):
            end = "reset"
        results[i] = end
        c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        pytest.fail(f"the 8 streams did not start: {results}")
    pid = s.proc.pid
    code, secs = s.terminate(timeout=15)
    for t in threads:
        t.join(timeout=20)
    print(f"SIGTERM: {s.kind} exit code {code} after {secs:.1f}s; streams ended: {results}")
    assert code is not None, f"{s.kind} (pid {pid}) still running 15 s after SIGTERM"
    assert code == 0, f"exit code {code}"
    if IS_GGUF:
        assert secs <= 10, f"exit took {secs:.1f}s"
        assert "client-timeout" not in results.values(), f"streams left hanging: {results}"


# gguf serve: --queue-size N (requests that may wait for a slot; beyond, 503)
FULL_QUEUE_ARGS = os.environ.get("GGUF_FULL_QUEUE_ARGS", "--queue-size 2").split()
FULL_QUEUE_CLIENTS = int(os.environ.get("GGUF_FULL_QUEUE_CLIENTS", "12"))


@pytest.mark.skipif(IS_LLAMA, reason="llama-server queues without bound; the 503 on a full queue is ours")
def test_full_queue_503(start_server):
    """-np 1 and a flood of concurrent requests: every answer is 200 or 503 (OpenAI error object), at
    least one 503 shows the queue limit works, and the server serves normally afterwards.
    GGUF_FULL_QUEUE_ARGS (default "--queue-size 2") makes the queue small."""
    s = start_server(np=1, ctx=1024, extra=FULL_QUEUE_ARGS)
    statuses, bodies = [], []
    lock = threading.Lock()

    def one(i):
        r = s.post("/completion", {"prompt": f"Item {i}:", "n_predict": 32, "temperature": 0}, timeout=120)
        with lock:
            statuses.append(r.status_code)
            if r.status_code != 200:
                bodies.append(r)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(FULL_QUEUE_CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert set(statuses) <= {200, 503}, statuses
    for r in bodies:
        check_error(r, 503)
    if 503 not in statuses:
        pytest.skip(f"no 503 with {FULL_QUEUE_CLIENTS} concurrent requests at -np 1 "
                    f"(set GGUF_FULL_QUEUE_ARGS to a small queue)")
    assert s.post_json("/completion", {"prompt": "Once upon a time", "n_predict": 2, "temperature": 0})["tokens_predicted"] == 2
