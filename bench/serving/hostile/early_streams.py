"""Issue 48.1: ``/v1/messages`` streams that end early, on an Anthropic-wire backend, over both
replicas.

- the client leaves after 90% of the stream (a backend streaming a word every 10 ms);
- the upstream ends the stream cleanly half way (no ``message_delta``, no ``message_stop``).

What the provider generated is what the fake upstream sent: its prompt count plus the words it
wrote before the stream ended (``StreamEnd.chunks``), at the backend's prices. What the tenant
paid is its settled spend. messages_abort_undercharge_multiple = Σ generated / Σ charged over
both cases (target ≤ 1: before the fix, ``message_start``'s ``output_tokens: 1`` was the bill,
and the issue measured 51-55x).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench.serving.probes import Recorder
from bench.serving.replica_env import Env
from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream
from gateway.sandbox.upstream_messages import chat_view
from gateway.sandbox.upstream_wire import count_prompt_tokens

WORDS = 200  # the answer's length, one token a word
PRICE = (3.0, 15.0)  # USD per 1M tokens in and out (Sonnet's)
LEAVER, CUT = "claude-leaver", "claude-cut"  # the client leaves / the upstream cuts
REQUESTS = 6  # per case, spread over the replicas


def early_upstream() -> FakeUpstream:
    reply = " ".join(f"w{i}" for i in range(WORDS))
    return FakeUpstream([
        FakeBackend(LEAVER, reply=reply, input_per_m=PRICE[0], output_per_m=PRICE[1],
                    chunk_delay_s=0.01),
        FakeBackend(CUT, reply=reply, input_per_m=PRICE[0], output_per_m=PRICE[1],
                    mode="end_mid_stream"),
    ]).start()


def early_models(up: FakeUpstream) -> list[dict]:
    """Anthropic-wire entries (``anthropic/NAME`` at the upstream's root)."""
    out = []
    for name in (LEAVER, CUT):
        entry = up.model_entry(name, timeout=30, max_output_tokens=1024)
        entry["litellm_params"].update(model=f"anthropic/{name}",
                                       api_base=up.base_url.removesuffix("/v1"))
        out.append(entry)
    return out


def _stream(url: str, key: str, model: str, leave_after: int | None, rec: Recorder) -> None:
    body = {"model": model, "max_tokens": 1024, "stream": True,
            "messages": [{"role": "user", "content": "count for me please"}]}
    with httpx.stream("POST", url + "/v1/messages", json=body, timeout=60,
                      headers={"x-api-key": key, "anthropic-version": "2023-06-01"}) as r:
        rid = r.headers.get("x-tollgate-request-id")
        if rid:
            rec.ids.append(rid)
        deltas = 0
        for line in r.iter_lines():
            if line == "event: content_block_delta":
                deltas += 1
                if leave_after is not None and deltas >= leave_after:
                    break  # the client leaves: the connection is closed here


def _generated(up: FakeUpstream, model: str, n: int, timeout_s: float = 30) -> float:
    """USD the provider generated for the last ``n`` streams of ``model``."""
    deadline = time.monotonic() + timeout_s
    while True:
        ends = [e for e in up.streams if e.model == model]
        if len(ends) >= n or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    prompts = [count_prompt_tokens(chat_view(b)) for b in up.requests_for(model)[-n:]]
    words = [e.chunks for e in ends[-n:]]
    return (sum(prompts) * PRICE[0] + sum(words) * PRICE[1]) / 1e6


def early_stream_scenario(env: Env, up: FakeUpstream, rec: Recorder) -> dict[str, Any]:
    out: dict[str, Any] = {}
    generated = charged = 0.0
    for name, model, leave in (("client_left", LEAVER, int(WORDS * 0.9)),
                               ("upstream_cut", CUT, None)):
        key, tid = env.tenant(budget_usd=1.0)
        with ThreadPoolExecutor(REQUESTS) as pool:
            list(pool.map(lambda i, m=model, k=key, lv=leave: _stream(
                env.replicas[i % len(env.replicas)].base_url, k, m, lv, rec), range(REQUESTS)))
        spent = env.settled(tid)["spent_usd"]
        made = _generated(up, model, REQUESTS)
        generated, charged = generated + made, charged + spent
        out[name] = {"generated_usd": round(made, 6), "charged_usd": round(spent, 6)}
    multiple = generated / charged if charged > 0 else float("inf")
    return {**out, "messages_abort_undercharge_multiple": round(multiple, 3)}
