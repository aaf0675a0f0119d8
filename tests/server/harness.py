"""Start, probe and stop an HTTP inference server that takes llama-server's flags.

Used by the pytest suite (conftest.py) and by load.py. Nothing here talks to any
address but 127.0.0.1.

SERVER_KIND=llama  ->  $SERVER_BIN -m MODEL --host 127.0.0.1 --port P -np N -c C -t T [extra]
SERVER_KIND=gguf   ->  $SERVER_BIN serve -m MODEL --host 127.0.0.1 --port P -np N -c C -t T [extra]
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional, Sequence

import requests

HOST = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.path.expanduser("~/.cache/gguf-engine"))
MODELS_DIR = CACHE / "models"
DEFAULT_MODEL = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_LLAMA_BIN = CACHE / "llama.cpp-build" / "bin" / "llama-server"

# Per-request ceiling: a hung server fails a test instead of stalling the run.
REQUEST_TIMEOUT = float(os.environ.get("REQUEST_TIMEOUT", "120"))
STARTUP_TIMEOUT = float(os.environ.get("STARTUP_TIMEOUT", "120"))


def default_gguf_bin() -> Path:
    rel = REPO_ROOT / "target" / "release" / "gguf"
    if rel.exists():
        return rel
    return REPO_ROOT / "target" / "debug" / "gguf"


def server_kind() -> str:
    kind = os.environ.get("SERVER_KIND", "gguf").strip().lower()
    if kind not in ("llama", "gguf"):
        raise ValueError(f"SERVER_KIND must be 'llama' or 'gguf', not {kind!r}")
    return kind


def server_bin(kind: Optional[str] = None) -> Path:
    kind = kind or server_kind()
    env = os.environ.get("SERVER_BIN")
    if env and kind == server_kind():
        return Path(os.path.expanduser(env))
    if kind == "llama":
        return Path(os.path.expanduser(os.environ.get("LLAMA_SERVER_BIN", str(DEFAULT_LLAMA_BIN))))
    return Path(os.path.expanduser(os.environ.get("GGUF_BIN", str(default_gguf_bin()))))


def model_path() -> Path:
    return Path(os.path.expanduser(os.environ.get("MODEL", str(DEFAULT_MODEL))))


def default_threads() -> int:
    return int(os.environ.get("THREADS", "2"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class ServerError(RuntimeError):
    pass


class Server:
    """One server process. `extra` is appended after the common flags."""

    def __init__(
        self,
        kind: Optional[str] = None,
        binary: Optional[os.PathLike] = None,
        model: Optional[os.PathLike] = None,
        np: int = 2,
        ctx: int = 2048,
        threads: Optional[int] = None,
        extra: Sequence[str] = (),
        log_dir: Optional[os.PathLike] = None,
    ):
        self.kind = kind or server_kind()
        self.binary = Path(binary) if binary else server_bin(self.kind)
        self.model = Path(model) if model else model_path()
        self.np = np
        self.ctx = ctx
        self.threads = threads if threads is not None else default_threads()
        self.extra = [str(x) for x in extra]
        self.port: Optional[int] = None
        self.proc: Optional[subprocess.Popen] = None
        self.returncode: Optional[int] = None
        log_dir = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "gguf-server-tests"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{self.kind}-{os.getpid()}-{int(time.time() * 1000)}.log"
        self._log_file = None

    # -- lifecycle ---------------------------------------------------------

    def argv(self, port: int) -> list[str]:
        common = [
            "-m", str(self.model),
            "--host", HOST,
            "--port", str(port),
            "-np", str(self.np),
            "-c", str(self.ctx),
            "-t", str(self.threads),
            *self.extra,
        ]
        if self.kind == "gguf":
            return [str(self.binary), "serve", *common]
        return [str(self.binary), *common]

    @property
    def url(self) -> str:
        assert self.port is not None, "server not started"
        return f"http://{HOST}:{self.port}"

    def start(self, timeout: float = STARTUP_TIMEOUT) -> "Server":
        if not self.binary.exists():
            raise ServerError(f"server binary not found: {self.binary}")
        last_err: Optional[Exception] = None
        for _attempt in range(3):  # a port taken between free_port() and bind: retry
            self.port = free_port()
            self._log_file = open(self.log_path, "ab")
            self._log_file.write(f"# {' '.join(self.argv(self.port))}\n".encode())
            self._log_file.flush()
            self.proc = subprocess.Popen(
                self.argv(self.port),
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                self._wait_healthy(timeout)
                return self
            except ServerError as e:
                last_err = e
                in_use = "address already in use" in self.log_tail(20).lower()
                self.stop()
                if not in_use:
                    break
        raise ServerError(f"{last_err}\n--- server log tail ---\n{self.log_tail()}")

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"server exited with code {self.proc.returncode} during startup")
            try:
                r = requests.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise ServerError(f"server not healthy after {timeout:.0f}s")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout: float = 10.0) -> tuple[Optional[int], float]:
        """SIGTERM, wait up to `timeout`; returns (exit code or None if it had to be killed, seconds)."""
        if self.proc is None:
            return self.returncode, 0.0
        t0 = time.monotonic()
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return None, time.monotonic() - t0
        return self.proc.returncode, time.monotonic() - t0

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        """SIGTERM, then SIGKILL after `timeout` seconds. Returns the exit code."""
        if self.proc is None:
            return self.returncode
        code, _ = self.terminate(timeout)
        if code is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait(timeout=10)
        self.returncode = self.proc.returncode
        self.proc = None
        if self._log_file:
            self._log_file.close()
            self._log_file = None
        return self.returncode

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # -- HTTP helpers --------------------------------------------------------

    def get(self, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", REQUEST_TIMEOUT)
        return requests.get(self.url + path, **kw)

    def post(self, path: str, body=None, **kw) -> requests.Response:
        kw.setdefault("timeout", REQUEST_TIMEOUT)
        if body is not None:
            kw["json"] = body
        return requests.post(self.url + path, **kw)

    def post_json(self, path: str, body, expect: int = 200, **kw) -> dict:
        r = self.post(path, body, **kw)
        assert r.status_code == expect, f"POST {path} -> {r.status_code}: {r.text[:500]}"
        return r.json()

    def stream(self, path: str, body, **kw) -> Iterator[dict]:
        """POST with stream=true and yield each `data:` event parsed as JSON (stops at [DONE])."""
        kw.setdefault("timeout", REQUEST_TIMEOUT)
        body = dict(body, stream=True)
        with requests.post(self.url + path, json=body, stream=True, **kw) as r:
            assert r.status_code == 200, f"POST {path} (stream) -> {r.status_code}: {r.text[:500]}"
            for data in sse_data(r.iter_lines(decode_unicode=False)):
                if data == "[DONE]":
                    return
                yield json.loads(data)

    def model_id(self) -> str:
        r = self.get("/v1/models")
        r.raise_for_status()
        return r.json()["data"][0]["id"]

    def metrics(self) -> dict[str, float]:
        r = self.get("/metrics")
        assert r.status_code == 200, f"/metrics -> {r.status_code}: {r.text[:300]}"
        return parse_prometheus(r.text)

    def slots(self) -> list[dict]:
        r = self.get("/slots")
        assert r.status_code == 200, f"/slots -> {r.status_code}: {r.text[:300]}"
        return r.json()

    def wait_slots_idle(self, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        slots = self.slots()
        while time.monotonic() < deadline:
            slots = self.slots()
            if all(not s.get("is_processing") for s in slots):
                return slots
            time.sleep(0.1)
        return slots


def sse_data(lines) -> Iterator[str]:
    """Yield the payload of each `data:` line of an SSE byte-line iterator."""
    for raw in lines:
        if not raw:
            continue
        line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        if line.startswith("data:"):
            yield line[5:].strip()
        elif line.startswith("error:"):
            raise ServerError(f"SSE error event: {line}")


def parse_prometheus(text: str) -> dict[str, float]:
    """Unlabelled samples only: {'llamacpp:prompt_tokens_total': 12.0, ...}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 2 or "{" in parts[0]:
            continue
        try:
            out[parts[0]] = float(parts[1])
        except ValueError:
            pass
    return out


def loadavg() -> str:
    try:
        a, b, c = os.getloadavg()
        return f"{a:.2f} {b:.2f} {c:.2f}"
    except OSError:
        return "?"
