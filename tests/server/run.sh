#!/usr/bin/env bash
# Run the HTTP server suite against one server.
#
#   tests/server/run.sh                                   # gguf serve (target/release/gguf, else target/debug/gguf)
#   SERVER_KIND=llama SERVER_BIN=/path/to/llama-server tests/server/run.sh
#   SLOW=1 tests/server/run.sh                            # include the slow tests
#   tests/server/run.sh -x -k stream                      # extra arguments go to pytest
#
# Environment (passed through): SERVER_KIND (gguf|llama), SERVER_BIN, MODEL, THREADS,
# GGUF_BIN and LLAMA_SERVER_BIN (test_compare.py), REQUEST_TIMEOUT, STARTUP_TIMEOUT,
# GGUF_FULL_QUEUE_ARGS / GGUF_FULL_QUEUE_CLIENTS (test_faults.py::test_full_queue_503).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python3}"

if ! "$PY" -c 'import openai, pytest, jsonschema, requests, httpx' 2>/dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check openai pytest jsonschema requests httpx
fi
command -v curl >/dev/null || echo "note: curl not found; test_curl.py and the 413 test will be skipped" >&2

marker=(-m "not slow")
if [[ "${SLOW:-0}" == "1" ]]; then
    marker=()
fi

# paths given relative to the caller's directory keep working after the cd below
for v in SERVER_BIN GGUF_BIN LLAMA_SERVER_BIN MODEL; do
    if [[ -n "${!v:-}" && "${!v}" != /* && -e "${!v}" ]]; then
        export "$v=$(cd "$(dirname "${!v}")" && pwd)/$(basename "${!v}")"
    fi
done

cd "$here"
exec "$PY" -m pytest "${marker[@]}" "$@"
