"""Fixtures: the server under test is chosen by SERVER_KIND / SERVER_BIN / MODEL (see harness.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from harness import Server  # noqa: E402

KIND = harness.server_kind()
IS_LLAMA = KIND == "llama"
IS_GGUF = KIND == "gguf"

# Every Server started through the `start_server` fixture or the shared ones; their log
# tails are attached to the report of a failing test.
_LIVE: list[Server] = []


def pytest_report_header(config):
    return [
        f"server: SERVER_KIND={KIND} SERVER_BIN={harness.server_bin()}",
        f"model: {harness.model_path()}  threads={harness.default_threads()}  load average: {harness.loadavg()}",
    ]


def pytest_collection_modifyitems(config, items):
    problems = []
    if not harness.model_path().exists():
        problems.append(f"model not found: {harness.model_path()} (set MODEL=...)")
    if not harness.server_bin().exists():
        problems.append(
            f"server binary not found: {harness.server_bin()} "
            f"(SERVER_KIND={KIND}; set SERVER_BIN=..., or build target/release/gguf)"
        )
    if problems:
        skip = pytest.mark.skip(reason="; ".join(problems))
        for item in items:
            # test_compare.py decides for itself (it needs both binaries, not SERVER_BIN).
            if "test_compare" not in item.nodeid:
                item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and _LIVE:
        for s in list(_LIVE)[-4:]:
            rep.sections.append((f"{s.kind} server log tail ({s.log_path})", s.log_tail(40)))


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("server-logs")


@pytest.fixture
def start_server(log_dir):
    """Factory: start_server(np=.., ctx=.., extra=[..]) -> started Server, stopped at teardown."""
    started: list[Server] = []

    def _start(**kw) -> Server:
        kw.setdefault("log_dir", log_dir)
        s = Server(**kw)
        _LIVE.append(s)
        started.append(s)
        s.start()
        return s

    yield _start
    for s in started:
        s.stop()
        _LIVE.remove(s)


def _shared(log_dir, **kw):
    s = Server(log_dir=log_dir, **kw)
    _LIVE.append(s)
    s.start()
    return s


@pytest.fixture(scope="module")
def server(log_dir):
    """The shared server: -np 2 -c 2048 --metrics."""
    s = _shared(log_dir, np=2, ctx=2048, extra=["--metrics"])
    yield s
    s.stop()
    _LIVE.remove(s)


@pytest.fixture(scope="module")
def model_id(server):
    return server.model_id()


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(
        base_url=server.url + "/v1",
        api_key="sk-no-key-required",
        max_retries=0,
        timeout=harness.REQUEST_TIMEOUT,
    )
