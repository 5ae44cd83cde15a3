"""One tenant against the others: the dashboard summary called 12 at once over a large log
(the serving replica's memory, another tenant's chat latency), a tokens-per-minute limit under
a concurrent burst, and failures a request causes by its own content (a stream litellm cuts
as repeating, a generation longer than the backend's timeout) that must not open a backend's
breaker for everyone."""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from bench.serving.hostile.common import (
    HELLO_300,
    LONG_GENERATION,
    chat_url,
    engine_of,
    opened_breakers,
)
from bench.serving.probes import Recorder, scrape_metrics
from bench.serving.replica_env import ADMIN_KEY, MSG, Env
from gateway.store.models import request_logs


def _fill_log(env: Env, tenant_id: str, rows: int, batch: int = 5_000) -> None:
    """``rows`` log rows in the last hour, as a $0 tenant's refused requests leave them
    (with a 2 kB logged prompt each: log_prompts is on)."""
    now = datetime.now(UTC)
    engine = engine_of(env)
    try:
        for start in range(0, rows, batch):
            with engine.begin() as conn:
                conn.execute(sa.insert(request_logs), [{
                    "id": f"tg-fill-{uuid.uuid4().hex}", "tenant_id": tenant_id,
                    "created_at": now - timedelta(seconds=3500 * i / rows), "route": "auto",
                    "status": 402 if i % 3 else 200, "chosen_model": "fake-cheap",
                    "cost_usd": 0.0, "prompt_tokens": 12, "completion_tokens": 0,
                    "latency_ms": float(i % 50), "attempts": [], "candidates": [],
                    "reason": "budget", "prompt_text": "p" * 2000}
                    for i in range(start, min(rows, start + batch))])
    finally:
        engine.dispose()


def _rss_mb(pid: int, field: str = "VmRSS") -> float:
    """The RSS of ``pid`` and of its child processes (the dashboard's summary worker)."""
    total = 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                total += int(line.split()[1]) / 1024
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return total
    return total + sum(_rss_mb(int(c), field) for c in children)


class _RssWatch:
    """The largest RSS of a process, sampled every 10 ms (its own peak counter, VmHWM,
    keeps what earlier scenarios reached)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, _rss_mb(pid), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, _rss_mb(self.pid))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


def _chat_ms(url: str, key: str) -> float:
    t = time.perf_counter()
    httpx.post(url, json={"model": "fake-cheap", "messages": MSG, "max_tokens": 8},
               headers={"authorization": f"Bearer {key}"}, timeout=120)
    return (time.perf_counter() - t) * 1000


def dashboard_scenario(env: Env, rows: int = 50_000, calls: int = 12) -> dict[str, Any]:
    """``calls`` concurrent admin summaries over ``rows`` log rows on one replica:
    dashboard_peak_mb = its peak RSS during them − its RSS before (its child processes
    included: the summary's worker); another tenant's chat p50 on that replica before and
    during."""
    _, free_tid = env.tenant(budget_usd=0.0)
    _fill_log(env, free_tid, rows)
    replica = env.replicas[0]
    url, summary = chat_url(env, 0), replica.base_url + "/dashboard/api/summary?window=24h"
    other, _ = env.tenant()
    before_ms = [_chat_ms(url, other) for _ in range(20)]
    rss_before = _rss_mb(replica.proc.pid)
    watch = _RssWatch(replica.proc.pid)
    with ThreadPoolExecutor(calls) as pool:
        futures = [pool.submit(httpx.get, summary, timeout=600,
                               headers={"authorization": f"Bearer {ADMIN_KEY}"})
                   for _ in range(calls)]
        during_ms = []
        while not all(f.done() for f in futures):
            during_ms.append(_chat_ms(url, other))
        codes = [f.result().status_code for f in futures]
    peak = watch.stop()
    return {"rows": rows, "codes": {c: codes.count(c) for c in set(codes)},
            "rss_before_mb": round(rss_before, 1), "rss_peak_mb": round(peak, 1),
            "chat_p50_ms_before": round(statistics.median(before_ms), 1),
            "chat_p50_ms_during": round(statistics.median(during_ms or [0.0]), 1),
            "dashboard_peak_mb": round(peak - rss_before, 1)}


def tpm_scenario(env: Env, rec: Recorder, limit: int = 1_000, n: int = 20) -> dict[str, Any]:
    """n concurrent requests (~170 tokens each) from a tenant with tokens_per_minute =
    ``limit``, inside one calendar minute: tpm_overadmit = tokens of the answered / limit."""
    key, _ = env.tenant(policy={"tokens_per_minute": limit})
    second = time.time() % 60
    if second > 40:  # the limit's windows are calendar minutes: start inside a fresh one
        time.sleep(61 - second)
    body = {"model": "fake-cheap", "max_tokens": 50,
            "messages": [{"role": "user", "content": "count " * 120}]}
    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(lambda i: rec.post(chat_url(env, i), key, json=body),
                                range(n)))
    tokens = sum(r.json()["usage"]["total_tokens"] for r in answers if r.status_code == 200)
    codes = [r.status_code for r in answers]
    return {"codes": {c: codes.count(c) for c in set(codes)}, "admitted_tokens": tokens,
            "tpm_overadmit": round(tokens / limit, 3)}


def breaker_scenario(env: Env, rec: Recorder, n: int = 6) -> dict[str, Any]:
    """n streams asked to repeat " hello" 300 times and n generations longer than the echo
    backend's timeout, all from one tenant on one replica (a breaker opens after 5
    failures); then another tenant's short request to the same backend."""
    base = env.replicas[0].base_url
    key, _ = env.tenant(budget_usd=5.0)
    opened_before = opened_breakers(scrape_metrics(base), skip=())
    repeat = {"model": "echo", "stream": True, "max_tokens": 1024,
              "messages": [{"role": "user", "content": HELLO_300}]}
    long = {"model": "echo", "max_tokens": LONG_GENERATION,
            "messages": [{"role": "user", "content": "Write the longest essay you can."}]}
    codes: dict[str, list[int]] = {"repeat": [], "long": []}
    hellos = []
    for _ in range(n):
        r = rec.post(chat_url(env, 0), key, json=repeat)
        codes["repeat"].append(r.status_code)
        hellos.append(r.text.count("hello"))
        codes["long"].append(rec.post(chat_url(env, 0), key, json=long).status_code)
    other, _ = env.tenant()
    after = rec.post(chat_url(env, 0), other, json={"model": "echo", "messages": MSG,
                                                    "max_tokens": 16})
    return {"codes": {k: sorted(set(v)) for k, v in codes.items()},
            "hellos_streamed": sorted(set(hellos)),
            "other_tenant_status": after.status_code,
            "opened_here": opened_breakers(scrape_metrics(base), skip=()) - opened_before}
