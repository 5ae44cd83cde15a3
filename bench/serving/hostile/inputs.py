"""Issue 35's input bounds, replayed over both replicas: files read by reference, providers'
miscounts, embeddings' limits, and a request with 15,000 tools against the event loop.

- file refs: chat ``file`` parts (``file_id``) and Responses ``input_file`` (``file_url``)
  to a backend that bills 100,000 prompt tokens per file and declares no ``max_file_tokens``:
  file_ref_unbounded = those answered (each should be a 400 naming ``max_file_tokens``).
- overrun lockouts: three $5-$100 tenants meet a provider's miscount (an embedding backend
  counting 4 special tokens per input on 1-byte inputs; a stream without usage whose text our
  count puts past its cap; a chat backend billing 3 tokens per byte and writing past the
  cap), then ask again: overrun_lockouts = tenants refused (429) on the next request (a
  backend held out past 10× its bound answers 503: that is the backend, not the tenant).
- embeddings' TPM: tokens_per_minute 200, 20 concurrent embeddings the backend counts 12
  tokens each: emb_tpm_overadmit = answered tokens / limit.
- embeddings' rows: usage reported as 10^7, 3×10^9 and 10^20 tokens: emb_lost_rows = request
  ids without a log row, plus reservations left held after settling.
- tools stall: /health polled every 20 ms on one replica while two requests with 15,000
  tools (~4 MB) are in flight: tools_loop_stall_ms = slowest /health − median before
  (stall.py); past 128 tools or ``max_tool_values`` they are a 400 before anything walks them.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.serving.probes import Recorder
from bench.serving.replica_env import Env
from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream

FILE_TOKENS = 100_000
LIARS = {"emb-liar-7": 10**7, "emb-liar-9": 3 * 10**9, "emb-liar-20": 10**20}
TPM = 200


def inputs_upstream() -> FakeUpstream:
    """Backends that bill as providers do past the request's bytes."""
    backends = [
        FakeBackend("doc-reader", reply="ok", input_per_m=10.0, output_per_m=10.0,
                    file_tokens=FILE_TOKENS),
        FakeBackend("miscount", reply=" ".join(["word"] * 40), input_per_m=10.0,
                    output_per_m=10.0),
        # keeps to a small cap but sends no usage: our count of its text passes the cap
        FakeBackend("quiet", reply="Hello there, friend", input_per_m=10.0, output_per_m=10.0,
                    mode="no_usage"),
        FakeBackend("emb-bge", reply="", input_per_m=20.0, output_per_m=0.0, framing_tokens=4),
        *(FakeBackend(n, reply="", input_per_m=20.0, output_per_m=0.0, reported_tokens=t)
          for n, t in LIARS.items())]
    # chat backends here bill 3 tokens per byte of text: past any byte bound
    return FakeUpstream(backends, count_tokens=lambda t: 3 * len(t.encode())).start()


def inputs_models(up: FakeUpstream) -> list[dict]:
    models = [up.model_entry("doc-reader", timeout=30),
              up.model_entry("miscount", timeout=30, max_output_tokens=64),
              up.model_entry("quiet", timeout=30, max_output_tokens=64)]
    return models + [up.model_entry(n, mode="embedding", timeout=30)
                     for n in ("emb-bge", *LIARS)]


def _url(env: Env, i: int, path: str) -> str:
    return env.replicas[i % len(env.replicas)].base_url + path


def file_ref_scenario(env: Env, rec: Recorder, n: int = 10) -> dict[str, Any]:
    key, tid = env.tenant(budget_usd=0.05)
    chat = {"model": "doc-reader", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Summarise it."},
        {"type": "file", "file": {"file_id": "file-6F2ksmvXxt4VdoqmHRw6kL"}}]}]}
    resp = {"model": "doc-reader", "max_output_tokens": 16, "input": [{"role": "user",
            "content": [{"type": "input_text", "text": "Summarise it."},
                        {"type": "input_file", "file_url": "https://example.com/r.pdf"}]}]}
    with ThreadPoolExecutor(8) as pool:
        rs = list(pool.map(lambda i: rec.post(_url(env, i, "/v1/chat/completions"), key,
                                              json=chat), range(n)))
        rs += list(pool.map(lambda i: rec.post(_url(env, i, "/v1/responses"), key,
                                               json=resp), range(n)))
    codes = [r.status_code for r in rs]
    named = sum("max_file_tokens" in r.text for r in rs if r.status_code == 400)
    return {"codes": {c: codes.count(c) for c in set(codes)}, "refusals_naming_the_fix": named,
            "spent_usd": env.settled(tid)["spent_usd"],
            "file_ref_unbounded": sum(c == 200 for c in codes)}


def overrun_lockout_scenario(env: Env, up: FakeUpstream, rec: Recorder) -> dict[str, Any]:
    """Each case: the miscounting request(s), then a plain one; a 429 there is a lockout."""
    chat = "/v1/chat/completions"
    cases: dict[str, Any] = {}
    key, tid = env.tenant(budget_usd=100.0)
    firsts = [rec.post(_url(env, i, "/v1/embeddings"), key,
                       json={"model": "emb-bge", "input": "a"}).status_code for i in range(4)]
    cases["embedding framing"] = (key, tid, firsts, "/v1/embeddings",
                                  {"model": "emb-bge", "input": "a"})
    key, tid = env.tenant(budget_usd=5.0)
    quiet = {"model": "quiet", "max_tokens": 2, "stream": True,
             "stream_options": {"include_usage": True},
             "messages": [{"role": "user", "content": "hi"}]}
    firsts = [rec.post(_url(env, i, chat), key, json=quiet).status_code for i in range(2)]
    cases["no usage"] = (key, tid, firsts, chat, quiet)
    key, tid = env.tenant(budget_usd=5.0)
    body = {"model": "miscount", "max_tokens": 64,
            "messages": [{"role": "user", "content": "Summarise the report, please. " * 8}]}
    firsts = [rec.post(_url(env, i, chat), key, json=body).status_code for i in range(2)]
    cases["miscount"] = (key, tid, firsts, chat, body)
    out: dict[str, Any] = {}
    lockouts = 0
    for name, (key, tid, firsts, path, again) in cases.items():
        env.settled(tid)
        codes = [rec.post(_url(env, i, path), key, json=again).status_code for i in range(2)]
        lockouts += any(c == 429 for c in codes)
        out[name] = {"first": firsts, "again": codes,
                     "tenant_overrun_usd": env.ledger(tid)["overrun_usd"]}
    return {**out, "overrun_lockouts": lockouts}


def emb_tpm_scenario(env: Env, rec: Recorder, n: int = 20) -> dict[str, Any]:
    key, _ = env.tenant(policy={"tokens_per_minute": TPM})
    if time.time() % 60 > 50:  # a burst must not straddle a window boundary
        time.sleep(60.5 - time.time() % 60)
    body = {"model": "emb-bge", "input": "word " * 8}  # the backend counts 8 + 4 tokens

    def one(i: int) -> int:
        r = rec.post(_url(env, i, "/v1/embeddings"), key, json=body)
        return int(r.json()["usage"]["prompt_tokens"]) if r.status_code == 200 else 0

    with ThreadPoolExecutor(n) as pool:
        used = list(pool.map(one, range(n)))
    return {"answered": sum(u > 0 for u in used), "tokens": sum(used),
            "emb_tpm_overadmit": round(sum(used) / TPM, 3)}


def emb_rows_scenario(env: Env, rec: Recorder) -> dict[str, Any]:
    key, tid = env.tenant(budget_usd=5.0)
    ids, codes = [], []
    for i, name in enumerate(LIARS):
        r = rec.post(_url(env, i, "/v1/embeddings"), key, json={"model": name, "input": "hello"})
        ids.append(r.headers.get("x-tollgate-request-id", ""))
        codes.append(r.status_code)
    info = env.settled(tid)
    missing = env.missing_rows([i for i in ids if i])
    return {"codes": codes, "spent_usd": info["spent_usd"], "reserved_usd": info["reserved_usd"],
            "emb_lost_rows": missing + int(info["reserved_usd"] > 0)}


def tools_stall_scenario(env: Env, rec: Recorder, tools: int = 15_000) -> dict[str, Any]:
    from bench.serving.hostile.stall import polled_while  # (common.py imports this module)

    base = env.replicas[0].base_url
    key, _ = env.tenant()
    fns = [{"type": "function", "function": {
        "name": f"lookup_{i}_{uuid.uuid4().hex[:6]}", "description": "Looks a record up " * 8,
        "parameters": {"type": "object", "properties": {"q": {"type": "string"},
                                                        "limit": {"type": "integer"}}}}}
           for i in range(tools)]
    body = {"model": "fake-cheap", "max_tokens": 8, "tools": fns,
            "messages": [{"role": "user", "content": "hi"}]}
    p = polled_while(base + "/health", 60, lambda: [
        rec.post(base + "/v1/chat/completions", key, json=body).status_code for _ in range(2)])
    return {"codes": p.codes, "in_flight_s": round(p.in_flight_s, 2), "polls": p.polls,
            "health_max_ms": round(p.max_ms, 1), "tools_loop_stall_ms": p.stall_ms}
