"""Hostile-tenant report: every abuse of a multi-tenant gateway we know of, replayed against two
`tollgate serve` replicas sharing PostgreSQL and Redis, plus a property-based fuzz.

    python -m bench.serving.hostile            # full size (a few minutes)
    python -m bench.serving.hostile --small    # fewer fuzz examples

Scenarios (each also runs on its own in tests/gateway/reliability/test_hostile.py):
1. overspend: concurrent requests over both replicas with CJK and emoji text, a
   ``detail: high`` image, functions and a response_format schema, to an upstream that bills
   the most any tokenizer could (one token per UTF-8 byte, 1,600 tokens per image), against a
   $0.50 budget; overspend = max(0, spent + overrun − budget), overrun being what a provider
   billed past a reservation.
2. client faults: untyped content parts, NaN temperature, tools that are not objects, a text
   part without text, n = 10**16, deep JSON; every one must be a 4xx and no circuit breaker
   may open (``tollgate_circuit_transitions{state="open"}`` summed over the replicas).
3. loop stall: /health polled every 20 ms on one replica while a routed request with an
   image URL (``detail: high``, pointing at a server that accepts and never answers) and an
   8 MB routed prompt are in flight; the stall is the slowest /health minus the median
   before.
4. fuzz: schemathesis over the app's OpenAPI schema, and hypothesis-generated bodies (any
   JSON, NaN, deep nesting, wrong types in every field) for /v1/chat/completions and
   /v1/feedback: the count of 5xx answers.
5. lost rows: requests with NUL in the prompt (``log_prompts`` on) and in a 404's model name,
   and every request of the scenarios above: request ids without a log row.
6. metrics: /metrics without a key and with a tenant key, on each replica: answers that
   were not 401.
Also replayed and printed: 200 feedbacks on one request (one observation stays), an 8 MB
comment, NUL in a comment, wrong tenant and admin keys from one address (throttled; the
admin key from another address still works), the dashboard cookie.
The last line: ``overspend_usd=… breakers_opened_by_client=… loop_stall_ms=… fuzz_5xx=…
lost_rows=… metrics_open=…``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from bench.serving.cluster import run_fuzz
from bench.serving.probes import Blackhole, Recorder, metric_sum, scrape_metrics
from bench.serving.replica_env import ADMIN_KEY, MSG, Env, start_env, stop_env
from gateway.learning import tables as ldb
from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream

CJK = "漢字かな交じり文😀" * 400
FULL = {"fuzz_examples": 300, "schema_examples": 20}
SMALL = {"fuzz_examples": 60, "schema_examples": 5}


def _chat(env: Env, i: int) -> str:
    return env.replicas[i % len(env.replicas)].base_url + "/v1/chat/completions"


def _hostile_messages(url: str) -> list[dict]:
    return [{"role": "user", "content": [
        {"type": "text", "text": CJK},
        {"type": "image_url", "image_url": {"url": url, "detail": "high"}}]}]


# -- scenarios ---------------------------------------------------------------------------------
def overspend_scenario(env: Env, rec: Recorder, hole: Blackhole) -> dict[str, Any]:
    budget = 0.5
    key, tid = env.tenant(budget_usd=budget)
    extra = {"functions": [{"name": "lookup", "parameters": {"type": "object", "properties": {
        "q": {"type": "string", "description": "検索語" * 200}}}}],
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": {"type": "object", "description": "答え" * 300}}}}
    body = {"model": "pricey", "messages": _hostile_messages(hole.url), "max_tokens": 16,
            **extra}
    with ThreadPoolExecutor(10) as pool:
        codes = list(pool.map(lambda i: rec.post(_chat(env, i), key, json=body).status_code,
                              range(10)))
    info = env.settled(tid)
    overspend = max(0.0, info["spent_usd"] + info["overrun_usd"] - budget)
    return {"codes": {c: codes.count(c) for c in set(codes)}, "budget_usd": budget,
            "spent_usd": info["spent_usd"], "overrun_usd": info["overrun_usd"],
            "overspend_usd": round(overspend, 9), "image_fetches": hole.accepted}


CLIENT_FAULTS: list[tuple[str, bytes]] = [
    ("untyped_part", json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": [1]}]}).encode()),
    ("nan_temperature", (b'{"model": "auto", "messages": [{"role": "user", "content": "x"}],'
                        b' "temperature": NaN}')),
    ("tools_not_objects", json.dumps({"model": "auto", "messages": MSG,
                                      "tools": [1]}).encode()),
    ("text_part_without_text", json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": [{"type": "text"}]}]}).encode()),
    ("huge_n", json.dumps({"model": "auto", "messages": MSG, "n": 10**16,
                           "max_tokens": 1}).encode()),
    ("deep_json", b'{"model": "auto", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("nan_cost_weight", (b'{"model": "auto", "messages": [{"role": "user", "content": "x"}],'
                        b' "tollgate": {"cost_weight": NaN}}')),
    ("both_caps_huge", json.dumps({"model": "auto", "messages": MSG, "max_tokens": 4,
                                   "max_completion_tokens": 10**12}).encode()),
]


def client_faults_scenario(env: Env, rec: Recorder, rounds: int = 3) -> dict[str, Any]:
    key, _ = env.tenant()
    statuses: dict[str, list[int]] = {}
    for i in range(rounds * len(env.replicas)):
        for name, body in CLIENT_FAULTS:
            statuses.setdefault(name, []).append(
                rec.post(_chat(env, i), key, content=body).status_code)
    other, _ = env.tenant()
    after = rec.post(_chat(env, 0), other, json={"model": "auto", "messages": MSG}).status_code
    return {"statuses": {k: sorted(set(v)) for k, v in statuses.items()},
            "not_4xx": sum(1 for v in statuses.values() for s in v if not 400 <= s < 500),
            "next_tenant_status": after}


# Polls /health from its own interpreter: in this process the fake upstreams' threads parse
# the 8 MB prompt, and their hold on this process's GIL would count as the replica's stall.
POLLER = """
import sys, time, httpx
url, seconds = sys.argv[1], float(sys.argv[2])
end = time.monotonic() + seconds
with httpx.Client(timeout=30) as c:
    while time.monotonic() < end:
        t = time.monotonic()
        c.get(url)
        print(t, (time.monotonic() - t) * 1000, flush=True)
        time.sleep(0.02)
"""


def loop_stall_scenario(env: Env, rec: Recorder, hole: Blackhole,
                        prompt_bytes: int = 8_000_000) -> dict[str, Any]:
    base = env.replicas[0].base_url
    key, _ = env.tenant()
    poller = subprocess.Popen([sys.executable, "-c", POLLER, base + "/health", "120"],
                              stdout=subprocess.PIPE, text=True)
    time.sleep(3.0)
    started = time.monotonic()
    big = {"model": "auto", "messages": [{"role": "user", "content": "word " *
                                          (prompt_bytes // 5)}], "max_tokens": 8}
    image = {"model": "auto", "messages": _hostile_messages(hole.url), "max_tokens": 8}
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(rec.post, base + "/v1/chat/completions", key, json=b)
                   for b in (image, big)]
        codes = [f.result().status_code for f in futures]
    ended = time.monotonic()
    time.sleep(0.3)
    poller.terminate()
    out, _ = poller.communicate()
    latencies = [(float(t), float(ms)) for t, ms in (line.split() for line in out.splitlines())]
    before = [ms for t, ms in latencies if t < started]
    during = [ms for t, ms in latencies if started <= t <= ended]
    baseline = statistics.median(before) if before else 0.0
    return {"codes": codes, "in_flight_s": round(ended - started, 2),
            "health_baseline_ms": round(baseline, 1),
            "health_max_ms": round(max(during, default=0.0), 1), "polls": len(during),
            "loop_stall_ms": round(max(0.0, max(during, default=0.0) - baseline), 1),
            "image_fetches": hole.accepted}


def lost_rows_scenario(env: Env, rec: Recorder) -> dict[str, Any]:
    key, _ = env.tenant()
    codes = []
    for i in range(len(env.replicas) * 2):
        codes.append(rec.post(_chat(env, i), key, json={"model": "fake-cheap", "messages": [
            {"role": "user", "content": "a NUL \x00 in the prompt"}]}).status_code)
        codes.append(rec.post(_chat(env, i), key, json={"model": "no\x00such",
                                                        "messages": MSG}).status_code)
    return {"codes": sorted(set(codes))}


def metrics_scenario(env: Env) -> dict[str, Any]:
    key, _ = env.tenant()
    open_ = 0
    for r in env.replicas:
        for headers in ({}, {"authorization": f"Bearer {key}"}):
            open_ += httpx.get(r.base_url + "/metrics", headers=headers,
                               timeout=60).status_code != 401
    return {"metrics_open": open_}


def feedback_scenario(env: Env, rec: Recorder) -> dict[str, Any]:
    key, _ = env.tenant()
    r = rec.post(_chat(env, 0), key, json={"model": "auto", "messages": MSG})
    rid = r.headers["x-tollgate-request-id"]
    urls = [rep.base_url + "/v1/feedback" for rep in env.replicas]
    codes = [rec.post(urls[i % len(urls)], key, json={"request_id": rid, "score": 0.5})
             .status_code for i in range(200)]
    engine = sa.create_engine(env.db_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        n = conn.execute(sa.select(sa.func.count()).select_from(ldb.observations_t)
                         .where(ldb.observations_t.c.request_id == rid)).scalar_one()
    engine.dispose()
    big = rec.post(urls[0], key, json={"request_id": rid, "score": 1, "comment": "x" * 8_000_000})
    nul = rec.post(urls[0], key, json={"request_id": rid, "score": 1, "comment": "a\x00b"})
    t = time.perf_counter()
    unknown = rec.post(urls[0], key, json={"request_id": "tg-" + "0" * 32, "score": 1})
    return {"feedback_codes": sorted(set(codes)), "observations": n,
            "8mb_comment": big.status_code, "nul_comment": nul.status_code,
            "unknown_id": unknown.status_code,
            "unknown_id_wait_s": round(time.perf_counter() - t, 2)}


def login_scenario(env: Env) -> dict[str, Any]:
    """Wrong tenant keys, then wrong admin keys, from this address on one replica (429 past
    20); the admin key from another loopback address (127.0.0.2) is still answered."""
    base = env.replicas[0].base_url
    key, _ = env.tenant()  # before the guesses: the admin key is refused here after them
    codes = [httpx.post(base + "/v1/chat/completions", json={"model": "auto", "messages": MSG},
                        headers={"authorization": f"Bearer sk-tg-guess{i}"},
                        timeout=30).status_code for i in range(25)]
    admin_codes = [httpx.get(base + "/admin/tenants", timeout=30,
                             headers={"authorization": f"Bearer {guess}"}).status_code
                   for guess in ("admin-guess", ADMIN_KEY)]
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"),
                      timeout=30) as other:
        elsewhere = other.get(base + "/admin/tenants",
                              headers={"authorization": f"Bearer {ADMIN_KEY}"}).status_code
    login = httpx.post(env.replicas[-1].base_url + "/dashboard/login", data={"key": key},
                       timeout=30)
    cookie = login.cookies.get("tollgate_dashboard", "")
    return {"wrong_key_codes": {c: codes.count(c) for c in set(codes)},
            "admin_key_codes_after": admin_codes, "admin_key_elsewhere": elsewhere,
            "cookie_is_not_the_key": bool(cookie) and key not in cookie}


def fuzz_scenario(env: Env, rec: Recorder, examples: int, schema_examples: int
                  ) -> dict[str, Any]:
    """Hypothesis bodies for chat and feedback, then schemathesis over the OpenAPI schema."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    key, _ = env.tenant(budget_usd=20.0)
    first = rec.post(_chat(env, 0), key, json={"model": "auto", "messages": MSG})
    rid = first.headers.get("x-tollgate-request-id", "tg-x")
    scalar = (st.none() | st.booleans() | st.integers(min_value=-(10**20), max_value=10**20)
              | st.floats() | st.text(max_size=20))
    anything = st.recursive(scalar, lambda c: st.lists(c, max_size=3)
                            | st.dictionaries(st.text(max_size=8), c, max_size=3),
                            max_leaves=12)
    part = st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "input_audio", "file", "refusal", "x"])},
        optional={"text": anything, "image_url": st.fixed_dictionaries(
            {"url": st.just("http://127.0.0.1:9/x.png")},
            optional={"detail": st.sampled_from(["low", "high", "auto", "max"])}) | anything})
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", "wizard"])},
        optional={"content": st.text(max_size=50) | st.lists(part, max_size=3) | anything,
                  "name": anything, "tool_call_id": anything, "tool_calls": anything})
    params = ["temperature", "top_p", "n", "max_tokens", "max_completion_tokens", "stop",
              "tools", "tool_choice", "functions", "response_format", "logit_bias", "seed",
              "presence_penalty", "logprobs", "top_logprobs", "user", "metadata", "stream",
              "stream_options", "tollgate"]
    small_int = st.integers(min_value=-2, max_value=40)
    chat_body = st.fixed_dictionaries(
        {"model": st.sampled_from(["auto", "cheap", "fake-cheap"]) | anything,
         "messages": st.lists(message, min_size=1, max_size=3) | anything},
        optional={p: small_int | anything for p in params})
    feedback_body = st.fixed_dictionaries(
        {}, optional={"request_id": st.just(rid) | anything, "score": anything,
                      "correct": anything, "comment": anything})
    wrap = st.integers(min_value=0, max_value=3)
    count = {"chat": 0, "feedback": 0}

    def encode(body: Any, depth: int) -> bytes:
        raw = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
        return b'{"x": ' * depth * 40 + raw + b"}" * depth * 40 if depth == 3 else raw

    cfg = settings(max_examples=examples, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck))

    @cfg
    @given(body=chat_body, depth=wrap)
    def chat_fuzz(body: Any, depth: int) -> None:
        count["chat"] += 1
        rec.post(_chat(env, count["chat"]), key, content=encode(body, depth), timeout=60)

    @cfg
    @given(body=feedback_body, depth=wrap)
    def feedback_fuzz(body: Any, depth: int) -> None:
        count["feedback"] += 1
        url = env.replicas[count["feedback"] % len(env.replicas)].base_url + "/v1/feedback"
        rec.post(url, key, content=encode(body, depth), timeout=60)

    before = len(rec.server_errors)
    chat_fuzz()
    feedback_fuzz()
    hypothesis_5xx = len(rec.server_errors) - before
    schema = run_fuzz(env.replicas[0].base_url, key, ADMIN_KEY, max_examples=schema_examples)
    return {"hypothesis_cases": dict(count), "hypothesis_5xx": hypothesis_5xx,
            "schemathesis_cases": schema["cases"], "schemathesis_5xx": schema["server_errors"],
            "fuzz_5xx": hypothesis_5xx + schema["server_errors"],
            "failures": rec.server_errors[before:before + 3] + schema["failures"][:3]}


def start_hostile_env(workdir: Path) -> tuple[Env, FakeUpstream]:
    """bench/serving/reliability.py's two replicas plus an upstream that bills a byte per token."""
    harsh = FakeUpstream([FakeBackend("pricey", reply="ok", input_per_m=10.0,
                                      output_per_m=10.0, image_tokens=1600)],
                         count_tokens=lambda text: len(text.encode("utf-8"))).start()
    env = start_env(workdir, extra_models=[harsh.model_entry("pricey", timeout=30,
                                                             max_output_tokens=64)],
                    log_prompts=True)
    return env, harsh


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", action="store_true", help="fewer fuzz examples")
    a = p.parse_args(argv)
    sizes = SMALL if a.small else FULL
    rec, hole = Recorder(), Blackhole()
    with tempfile.TemporaryDirectory(prefix="tollgate-hostile-") as tmp:
        t0 = time.monotonic()
        env, harsh = start_hostile_env(Path(tmp))
        print(f"started 2 upstreams, PostgreSQL, Redis and {len(env.replicas)} replicas in "
              f"{time.monotonic() - t0:.1f}s", flush=True)
        try:
            spend = overspend_scenario(env, rec, hole)
            print("overspend:", spend, flush=True)
            faults = client_faults_scenario(env, rec)
            print("client faults:", faults, flush=True)
            stall = loop_stall_scenario(env, rec, hole)
            print("loop stall:", stall, flush=True)
            rows = lost_rows_scenario(env, rec)
            print("NUL rows:", rows, flush=True)
            feedback = feedback_scenario(env, rec)
            print("feedback:", feedback, flush=True)
            metrics = metrics_scenario(env)
            print("metrics:", metrics, flush=True)
            fuzz = fuzz_scenario(env, rec, sizes["fuzz_examples"], sizes["schema_examples"])
            print("fuzz:", fuzz, flush=True)
            opened = sum(metric_sum(scrape_metrics(r.base_url),
                                    "tollgate_circuit_transitions_total", 'state="open"')
                         for r in env.replicas)
            # last: it throttles this machine's address on one replica for a minute
            print("logins:", login_scenario(env), flush=True)
            lost = env.missing_rows(rec.ids)
            print(f"requests with ids: {len(rec.ids)}, 5xx seen: {len(rec.server_errors)}",
                  flush=True)
        finally:
            stop_env(env)
            harsh.stop()
    print(f"overspend_usd={spend['overspend_usd']} breakers_opened_by_client={int(opened)} "
          f"loop_stall_ms={stall['loop_stall_ms']} fuzz_5xx={fuzz['fuzz_5xx']} "
          f"lost_rows={lost} metrics_open={metrics['metrics_open']}")


if __name__ == "__main__":
    main()
