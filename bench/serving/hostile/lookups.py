"""Tenant-reachable reads that once tied up a replica (issue 48, items 7 and 8).

- routing polls: ``loops`` threads of one $0 tenant ask ``GET /v1/routing/{id}`` for ids
  nobody made, for ``seconds``, on one replica; another tenant's chat p50 there before and
  during: routing_poll_neighbour_p50_ratio = during / before (target ≤ 2). Each unknown id
  once polled the database every 50 ms for 2 s with no limit (150 loops: p50 26 → 504-780 ms).
- spend logs: ``rows`` log rows with a 2 kB prompt and a routing decision each, then the
  admin's ``/spend/logs?end_date=9999-12-30`` (once: 175 MB, 18 s on one worker),
  ``end_date=9999-12-31`` (once: a 500) and a year summarised, with /health polled from its
  own interpreter: spend_logs_stall_ms = the worst /health during them − its median before
  (target < 1000). The calls' codes, seconds and answer sizes are printed beside it.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import sqlalchemy as sa

from bench.serving.hostile.common import chat_url, engine_of
from bench.serving.hostile.neighbours import _chat_ms
from bench.serving.hostile.stall import polled_while
from bench.serving.replica_env import ADMIN_KEY, Env
from gateway.store.models import request_logs

LAST_LINE = ("routing_poll_neighbour_p50_ratio", "spend_logs_stall_ms")


# The loops run in their own interpreter: 150 client threads in this process would hold its
# GIL and count as the neighbour's latency.
LOOPS = """
import sys, threading, time, uuid, httpx
base, key, n, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
end, codes, lock = time.monotonic() + seconds, [], threading.Lock()
def loop():
    with httpx.Client(timeout=60) as c:
        while time.monotonic() < end:
            r = c.get(base + "/v1/routing/tg-" + uuid.uuid4().hex,
                      headers={"authorization": "Bearer " + key})
            with lock:
                codes.append(r.status_code)
threads = [threading.Thread(target=loop) for _ in range(n)]
[t.start() for t in threads]
[t.join() for t in threads]
print(" ".join(map(str, codes)))
"""


def routing_poll_scenario(env: Env, loops: int = 150, seconds: float = 10.0
                          ) -> dict[str, Any]:
    base = env.replicas[0].base_url
    poller, _ = env.tenant(budget_usd=0.0)
    other, _ = env.tenant()
    url = chat_url(env, 0)
    before = [_chat_ms(url, other) for _ in range(20)]
    child = subprocess.Popen([sys.executable, "-c", LOOPS, base, poller, str(loops),
                              str(seconds)], stdout=subprocess.PIPE, text=True)
    time.sleep(1.5)  # the loops are running
    during, end = [], time.monotonic() + seconds - 2.5
    while time.monotonic() < end:
        during.append(_chat_ms(url, other))
    out, _ = child.communicate(timeout=300)
    codes = [int(c) for c in out.split()]
    p50_before, p50_during = statistics.median(before), statistics.median(during)
    return {"loops": loops, "lookups": len(codes),
            "codes": {c: codes.count(c) for c in set(codes)},
            "chat_p50_ms_before": round(p50_before, 1),
            "chat_p50_ms_during": round(p50_during, 1),
            "routing_poll_neighbour_p50_ratio": round(p50_during / p50_before, 2)}


def _fill(env: Env, tenant_id: str, rows: int, batch: int = 5_000) -> None:
    """``rows`` log rows over the last day, each with a 2 kB prompt and a decision."""
    now = datetime.now(UTC)
    decision = [{"model": f"m{i}", "similarity": 0.5, "quality": 0.7, "cost": 0.1,
                 "cost_usd": 1e-5, "score": 0.6, "backend": f"b{i}"} for i in range(4)]
    engine = engine_of(env)
    try:
        for start in range(0, rows, batch):
            with engine.begin() as conn:
                conn.execute(sa.insert(request_logs), [{
                    "id": f"tg-spend-{uuid.uuid4().hex}", "tenant_id": tenant_id,
                    "created_at": now - timedelta(seconds=86_000 * i / rows), "route": "auto",
                    "status": 200, "chosen_model": "fake-cheap", "cost_usd": 1e-6,
                    "prompt_tokens": 12, "completion_tokens": 3, "latency_ms": 5.0,
                    "attempts": [{"model": "fake-cheap", "status": 200}],
                    "candidates": decision, "reason": "cheapest", "prompt_text": "p" * 2000}
                    for i in range(start, min(rows, start + batch))])
    finally:
        engine.dispose()


def spend_logs_scenario(env: Env, rows: int = 50_000) -> dict[str, Any]:
    _, tid = env.tenant(budget_usd=0.0)
    _fill(env, tid, rows)
    base = env.replicas[0].base_url
    today = date.today()
    asks = [{"end_date": "9999-12-30"}, {"end_date": "9999-12-31"},
            {"start_date": str(today - timedelta(days=365)), "end_date": str(today)},
            {"team_id": tid, "summarize": "false"}]
    calls: list[dict[str, Any]] = []

    def send() -> list[int]:
        def one(params: dict[str, str]) -> httpx.Response:
            t = time.perf_counter()
            r = httpx.get(base + "/spend/logs", params=params, timeout=600,
                          headers={"authorization": f"Bearer {ADMIN_KEY}"})
            calls.append({"params": params, "status": r.status_code,
                          "s": round(time.perf_counter() - t, 2), "bytes": len(r.content)})
            return r

        with ThreadPoolExecutor(len(asks)) as pool:
            return [r.status_code for r in pool.map(one, asks)]

    p = polled_while(base + "/health", 300, send)
    return {"rows": rows, "calls": calls, "health_baseline_ms": round(p.baseline_ms, 1),
            "health_max_ms": round(p.max_ms, 1), "spend_logs_stall_ms": p.stall_ms}


def scenarios(env: Env) -> list[tuple[str, Any]]:
    return [("routing polls", lambda: routing_poll_scenario(env)),
            ("spend logs", lambda: spend_logs_scenario(env))]
