"""16 concurrent greedy clients on -np 4 and -np 8: each answer must equal the same request sent alone.

llama-server does not promise that (its batched kernels and prompt-cache reuse change the numerics), so
for SERVER_KIND=llama mismatches are only reported; for our server the count must be 0."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

import harness
from conftest import IS_LLAMA

pytestmark = pytest.mark.slow

TOPICS = [
    "the capital of Japan", "how bees make honey", "why the sky is blue", "the rules of chess",
    "how to boil an egg", "the planet Mars", "the history of the bicycle", "what a volcano is",
    "how rainbows form", "the life of penguins", "how a compass works", "the Great Wall of China",
    "why leaves change color", "how to plant tomatoes", "what photosynthesis is", "the speed of light",
]
PROMPTS = [f"In two sentences, tell me about {t}." for t in TOPICS]
MAX_TOKENS = [16 + (i * 37) % 33 for i in range(len(PROMPTS))]  # 16..48, varied

# a request counter is not part of llama-server's /metrics; if ours has one of these, it is checked
REQUEST_COUNTERS = ["llamacpp:requests_total", "llamacpp:n_requests_total", "llamacpp:requests_finished_total"]


_ALONE: dict = {}


def ask(client, mid, i):
    r = client.chat.completions.create(
        model=mid, messages=[{"role": "user", "content": PROMPTS[i]}],
        max_tokens=MAX_TOKENS[i], temperature=0, seed=7,
    )
    return {
        "id": r.id,
        "text": r.choices[0].message.content,
        "finish": r.choices[0].finish_reason,
        "prompt_tokens": r.usage.prompt_tokens,
        "completion_tokens": r.usage.completion_tokens,
    }


def first_divergence(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((k for k in range(n) if a[k] != b[k]), n)


@pytest.mark.parametrize("np_", [4, 8])
def test_concurrent_equals_alone(start_server, np_):
    s = start_server(np=np_, ctx=2048, extra=["--metrics"])
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=harness.REQUEST_TIMEOUT)
    mid = s.model_id()

    # The lone answers are computed once (on the first server) and reused: a request that runs alone
    # must not depend on -np either.
    if "alone" not in _ALONE:
        _ALONE["alone"] = [ask(client, mid, i) for i in range(len(PROMPTS))]
    alone = _ALONE["alone"]

    before = s.metrics()
    with ThreadPoolExecutor(max_workers=len(PROMPTS)) as ex:
        together = list(ex.map(lambda i: ask(client, mid, i), range(len(PROMPTS))))
    # counters may be bumped just after the last byte of a response is sent: let them settle (<= 3 s)
    after = s.metrics()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        time.sleep(0.2)
        again = s.metrics()
        if again == after and again.get("llamacpp:requests_processing", 0) == 0:
            break
        after = again

    # nothing lost, nothing mixed up
    assert len(together) == len(PROMPTS)
    assert len({r["id"] for r in together}) == len(PROMPTS), "duplicate completion ids"
    for i, (a, t) in enumerate(zip(alone, together)):
        assert t["prompt_tokens"] == a["prompt_tokens"], f"prompt {i}: answer belongs to another prompt?"
        assert t["completion_tokens"] <= MAX_TOKENS[i]
        assert t["text"], f"prompt {i}: empty answer"

    mismatches = [
        (i, first_divergence(a["text"], t["text"]), a["text"], t["text"])
        for i, (a, t) in enumerate(zip(alone, together))
        if a["text"] != t["text"] or a["completion_tokens"] != t["completion_tokens"]
    ]
    report = "\n".join(f"  prompt {i}: diverges at char {k}\n    alone:    {a!r}\n    together: {t!r}"
                       for i, k, a, t in mismatches)
    print(f"\n-np {np_}: {len(mismatches)}/{len(PROMPTS)} concurrent answers differ from the lone ones"
          f" (load average {harness.loadavg()})" + (f"\n{report}" if report else ""))

    # /metrics counters match what was sent
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    sent_predicted = sum(r["completion_tokens"] for r in together)
    sent_prompt = sum(r["prompt_tokens"] for r in together)
    assert d["llamacpp:tokens_predicted_total"] == sent_predicted
    prompt_seen = d["llamacpp:prompt_tokens_total"] + d.get("llamacpp:prompt_tokens_cached_total", 0)
    assert prompt_seen == sent_prompt, (d, sent_prompt)
    for name in REQUEST_COUNTERS:
        if name in after:
            assert d[name] == len(PROMPTS), f"{name} grew by {d[name]}, sent {len(PROMPTS)}"
    assert after["llamacpp:requests_processing"] == 0

    slots = s.wait_slots_idle(timeout=5)
    assert len(slots) == np_ and all(not x["is_processing"] for x in slots)

    if not IS_LLAMA:
        assert not mismatches, f"{len(mismatches)} concurrent answers differ from the lone ones:\n{report}"
