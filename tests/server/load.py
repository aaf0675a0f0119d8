#!/usr/bin/env python3
"""Load script (not a test): aggregate streaming generation speed of llama-server and `gguf serve`.

Starts one server at a time (same model, -np, -c, -t), runs 1, 4, 8 ... concurrent streaming clients
against POST /completion (greedy, fixed n_predict, "ignore_eos": true so every stream has the same
length), in rounds interleaved A B A B, and prints the median aggregate tokens/s per server, the ratio
gguf/llama, and each server's aggregate-at-most-streams over single-stream ratio.

  python3 tests/server/load.py --rounds 2 --streams 1,4,8 --n-predict 96

Only 127.0.0.1 is contacted; every request has a timeout and the number of requests is fixed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from harness import Server  # noqa: E402

PROMPTS = [
    "Write a story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a steam engine works to a ten year old.",
    "Describe the city of Venice at dawn.",
    "List the steps to build a wooden bookshelf.",
    "Tell me about the migration of monarch butterflies.",
    "Write a letter from a sailor to his family.",
    "Explain the rules of cricket.",
    "Describe a walk through a rainforest.",
    "Write a poem about the northern lights.",
    "Explain how bread rises.",
    "Tell the history of the printing press.",
    "Describe life on a space station.",
    "Write a dialogue between a cat and a dog.",
    "Explain why the ocean is salty.",
    "Describe a medieval market day.",
    "Write a recipe for vegetable soup and explain each step.",
]

MAX_STREAMS = 8


def one_stream(url: str, prompt: str, n_predict: int, out: list, idx: int, timeout: float) -> None:
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "ignore_eos": True,
            "cache_prompt": False, "stream": True}
    t0 = time.monotonic()
    ttft = None
    n_events = 0
    predicted = None
    try:
        with requests.post(url + "/completion", json=body, stream=True, timeout=timeout) as r:
            r.raise_for_status()
            for data in harness.sse_data(r.iter_lines()):
                if data == "[DONE]":
                    break
                d = json.loads(data)
                if ttft is None:
                    ttft = time.monotonic() - t0
                if d.get("stop"):
                    predicted = d.get("tokens_predicted")
                elif d.get("content") or d.get("tokens"):
                    n_events += 1
        out[idx] = {"tokens": predicted if predicted is not None else n_events, "ttft": ttft,
                    "secs": time.monotonic() - t0, "error": None}
    except Exception as e:  # noqa: BLE001
        out[idx] = {"tokens": 0, "ttft": None, "secs": time.monotonic() - t0, "error": repr(e)}


def run_batch(url: str, streams: int, n_predict: int, offset: int, timeout: float) -> dict:
    out: list = [None] * streams
    threads = [
        threading.Thread(target=one_stream,
                         args=(url, PROMPTS[(offset + i) % len(PROMPTS)], n_predict, out, i, timeout))
        for i in range(streams)
    ]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    wall = time.monotonic() - t0
    errors = [o["error"] for o in out if o is None or o["error"]]
    tokens = sum(o["tokens"] for o in out if o)
    short = sum(1 for o in out if o and not o["error"] and o["tokens"] != n_predict)
    ttfts = [o["ttft"] for o in out if o and o["ttft"] is not None]
    return {"tok_s": tokens / wall if wall > 0 else 0.0, "wall": wall, "tokens": tokens, "errors": errors,
            "short": short, "ttft": statistics.median(ttfts) if ttfts else float("nan")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(harness.model_path()))
    ap.add_argument("--np", type=int, default=8, help="server slots (-np)")
    ap.add_argument("--ctx", type=int, default=4096, help="total context (-c)")
    ap.add_argument("--threads", type=int, default=harness.default_threads(), help="-t")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--streams", default="1,4,8", help="comma-separated concurrent stream counts (at most 8)")
    ap.add_argument("--n-predict", type=int, default=96, help="tokens per stream (64..128 suggested)")
    ap.add_argument("--kinds", default="llama,gguf", help="which servers, in round order")
    ap.add_argument("--llama-bin", default=str(harness.server_bin("llama")))
    ap.add_argument("--gguf-bin", default=str(harness.server_bin("gguf")))
    ap.add_argument("--timeout", type=float, default=300, help="per-request timeout, seconds")
    args = ap.parse_args()

    streams = [int(x) for x in args.streams.split(",") if x.strip()]
    if not streams or max(streams) > MAX_STREAMS or min(streams) < 1:
        ap.error(f"--streams must be between 1 and {MAX_STREAMS}")
    if max(streams) > args.np:
        print(f"note: {max(streams)} streams on -np {args.np}: some requests will queue", file=sys.stderr)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bins = {"llama": Path(args.llama_bin), "gguf": Path(args.gguf_bin)}
    for k in kinds:
        if k not in bins:
            ap.error(f"unknown kind {k}")
        if not bins[k].exists():
            print(f"missing {k} binary: {bins[k]}", file=sys.stderr)
            return 2
    if not Path(args.model).exists():
        print(f"missing model: {args.model}", file=sys.stderr)
        return 2

    print(f"model {args.model}  -np {args.np} -c {args.ctx} -t {args.threads}  n_predict {args.n_predict}  "
          f"rounds {args.rounds}  streams {streams}")
    print(f"load average at start: {harness.loadavg()}")
    results: dict = {k: {n: [] for n in streams} for k in kinds}
    problems = []
    for rnd in range(args.rounds):
        for kind in kinds:
            s = Server(kind=kind, binary=bins[kind], model=args.model, np=args.np, ctx=args.ctx,
                       threads=args.threads)
            s.start()
            try:
                run_batch(s.url, 1, 8, 0, args.timeout)  # warm-up
                for n in streams:
                    r = run_batch(s.url, n, args.n_predict, rnd * MAX_STREAMS, args.timeout)
                    ok = not r["errors"] and not r["short"] and s.alive()
                    if ok:  # a failed batch is reported below and left out of the medians
                        results[kind][n].append(r["tok_s"])
                    print(f"round {rnd + 1} {kind:5s} streams {n}: {r['tok_s']:8.1f} tok/s  "
                          f"({r['tokens']} tokens in {r['wall']:.2f}s, median TTFT {r['ttft'] * 1000:.0f} ms)  "
                          f"load {harness.loadavg()}", flush=True)
                    if not s.alive():
                        problems.append(f"{kind} streams {n}: the server exited (code {s.proc.returncode}) "
                                        f"during the batch; log {s.log_path}")
                    if r["errors"]:
                        problems.append(f"{kind} streams {n}: {len(r['errors'])} failed: {r['errors'][:3]}; "
                                        f"log {s.log_path}")
                    if r["short"]:
                        problems.append(f"{kind} streams {n}: {r['short']} streams ended before n_predict "
                                        f"(ignore_eos not honoured?)")
            finally:
                s.stop()

    med = {k: {n: (statistics.median(v) if v else 0.0) for n, v in results[k].items()} for k in kinds}
    print()
    header = ["streams"] + [f"{k} tok/s" for k in kinds]
    both = "llama" in kinds and "gguf" in kinds
    if both:
        header.append("gguf/llama")
    rows = []
    for n in streams:
        row = [str(n)] + [f"{med[k][n]:.1f}" for k in kinds]
        if both:
            row.append(f"{med['gguf'][n] / med['llama'][n]:.2f}" if med["llama"][n] else "-")
        rows.append(row)
    lo, hi = min(streams), max(streams)
    if hi != lo:
        row = [f"{hi}/{lo} scaling"] + [f"{med[k][hi] / med[k][lo]:.2f}x" if med[k][lo] else "-" for k in kinds]
        if both:
            row.append("")
        rows.append(row)
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    fmt = " | ".join(f"{{:>{w}}}" for w in widths)
    print(fmt.format(*header))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(fmt.format(*r))
    print(f"\n(median over the {args.rounds} rounds' good batches; aggregate = generated tokens / wall time of the batch, "
          f"prompt processing included)")
    print(f"load average at end: {harness.loadavg()}")
    for p in problems:
        print("problem:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
