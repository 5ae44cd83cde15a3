"""The dashboard API cannot take the process from the other tenants (issue 24: 12 concurrent
summaries took a gateway from 1.1 to 7.4 GB and another tenant's chat p50 from 17 ms to
1.39 s): a principal's calls per minute are limited, a process runs a few dashboard queries at
once and refuses the rest (429, OpenAI's error body, Retry-After) while another tenant's chat
still answers, and a summary's memory does not grow with the log."""

from __future__ import annotations

import os
import signal
import threading
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import sqlalchemy as sa

from gateway.config import settings_from_dict
from gateway.pricing import Price
from gateway.review.dashboard.guard import DashboardGuard
from gateway.review.dashboard.log_sql import LogWindow
from gateway.review.dashboard.summary import View, summarise
from tests.gateway.conftest import ADMIN_KEY, Gateway, _pg_database, run_gateway
from tests.gateway.review.conftest import review_config
from tests.gateway.review.log_db import load

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
PER_MINUTE, SLOTS = 5, 2


@pytest.fixture(scope="module")
def guarded(upstream, test_router, encoder, tmp_path_factory) -> Iterator[Gateway]:
    """A gateway on PostgreSQL with a small dashboard allowance: 5 calls a minute, 2 queries
    at once."""
    for url in _pg_database():
        settings = settings_from_dict(review_config(
            upstream, tmp_path_factory.mktemp("guard"), database_url=url,
            dashboard_requests_per_minute=PER_MINUTE, dashboard_max_concurrent=SLOTS))
        yield from run_gateway(settings, test_router, encoder)


def _get(gw: Gateway, key: str, path: str = "summary", window: str | None = None
         ) -> httpx.Response:
    query = f"?window={window}" if window else ""
    return httpx.get(gw.base_url + "/dashboard/api/" + path + query, timeout=None,
                     headers={"authorization": f"Bearer {key}"})


def _is_openai_429(r: httpx.Response, code: str) -> None:
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) >= 1
    err = r.json()["error"]
    assert (err["type"], err["code"]) == ("rate_limit_error", code) and err["message"]


@pytest.mark.postgres
def test_calls_past_the_per_minute_limit_are_429_for_that_principal_only(guarded) -> None:
    key, _ = guarded.tenant()
    other, _ = guarded.tenant()
    codes = []
    # fixed calendar minutes: if one ends during the loop the count starts again, so the
    # first refusal comes after PER_MINUTE answers and within two windows' worth of calls
    for _ in range(2 * PER_MINUTE + 1):
        r = _get(guarded, key, "routers")
        codes.append(r.status_code)
        if r.status_code == 429:
            _is_openai_429(r, "rate_limit_exceeded")
            break
    assert codes[-1] == 429 and codes.count(200) >= PER_MINUTE, codes
    assert _get(guarded, other, "routers").status_code == 200  # another principal's count


@pytest.mark.postgres
def test_queries_past_the_slots_are_refused_and_another_tenants_chat_answers(guarded) -> None:
    """Two summaries of different windows hold both slots (each waits on a lock of the log
    this test holds); a third view is refused at once; a summary of a held view joins its
    computation instead of taking a slot; another tenant's chat answers meanwhile. Nothing
    here depends on timing: the slots are seen taken in the guard's own count."""
    chat_key, _ = guarded.tenant(budget_usd=1.0)
    client = guarded.client(chat_key)
    client.chat.completions.create(model="fake-cheap", messages=[{"role": "user",
                                                                  "content": "warm up"}])
    guard = _guard(guarded)
    with guarded.engine.connect() as lock:
        lock.begin()  # every read of the log now waits for this transaction
        lock.execute(sa.text("LOCK TABLE request_logs IN ACCESS EXCLUSIVE MODE"))
        results: dict[str, httpx.Response] = {}
        views = ("1h", "6h")[:SLOTS]
        held = [threading.Thread(target=lambda w=w: results.__setitem__(
            w, _get(guarded, ADMIN_KEY, window=w))) for w in views]
        for t in held:
            t.start()
        while guard.running < SLOTS:  # both computations have their slot (no timeout:
            time.sleep(0.05)  # the slot count is the event loop's own)
        _is_openai_429(_get(guarded, ADMIN_KEY, window="24h"), "dashboard_busy")
        joined = threading.Thread(target=lambda: results.__setitem__(
            "again", _get(guarded, ADMIN_KEY, window="1h")))
        joined.start()
        answer = client.chat.completions.create(
            model="fake-cheap", messages=[{"role": "user", "content": "still served?"}])
        assert answer.choices[0].message.content
        assert guard.running == SLOTS  # the joined call took no slot
        lock.rollback()
    for t in [*held, joined]:
        t.join()
    assert {w: r.status_code for w, r in results.items()} == {
        **dict.fromkeys(views, 200), "again": 200}
    assert results["again"].json()["now"] == results["1h"].json()["now"]  # one computation


@pytest.mark.postgres
def test_a_summary_is_computed_outside_the_serving_process(guarded) -> None:
    """The summary's Python work runs in the dashboard's worker process, not on a thread
    holding the GIL the serving event loop needs (summary_job.py)."""
    key, _ = guarded.tenant()
    assert _get(guarded, key, window="15m").status_code == 200
    pids = _guard(guarded).worker_pids()
    assert pids and os.getpid() not in pids
    for pid in pids:  # the worker dies (killed, out of memory): one clear 503, then a new one
        os.kill(pid, signal.SIGKILL)
    lost = _get(guarded, key, window="1h")
    assert lost.status_code == 503, lost.text
    assert lost.json()["error"]["code"] == "dashboard_unavailable"
    assert _get(guarded, key, window="6h").status_code == 200
    assert _guard(guarded).worker_pids() and _guard(guarded).worker_pids() != pids


def _guard(gw: Gateway) -> DashboardGuard:
    """The dashboard guard of the running app."""
    return gw.app.state.dashboard_guard


def _rows(n: int) -> list[dict]:
    return [{"id": f"r{i:06d}", "created_at": NOW - timedelta(seconds=3000 * i / n),
             "tenant_id": "a", "route": "auto", "chosen_model": ("cheap", "strong")[i % 2],
             "status": (200, 200, 200, 429)[i % 4], "cost_usd": 0.001, "prompt_tokens": 100,
             "completion_tokens": 50, "latency_ms": float(i % 997), "ttft_ms": None,
             "attempts": [{"model": "cheap", "status": 200}] * (1 + i % 3 // 2),
             "candidates": [{"model": "m-cheap", "backend": "cheap", "quality": 0.5}],
             "reason": "a = p − λc", "prompt_text": "x" * 2000, "router_version": "v1"}
            for i in range(n)]


def _peak_bytes(engine: sa.Engine, n: int) -> tuple[int, dict]:
    """The traced peak of one summary of ``n`` rows, and the summary."""
    load(engine, _rows(n))
    view = View(tenants=[], prices={"cheap": Price(1e-6, 2e-6), "strong": Price(1e-5, 3e-5)},
                names={}, promises={})
    tracemalloc.start()
    try:
        s = summarise(engine, LogWindow(None, NOW - timedelta(hours=1)), NOW, view,
                      judge=lambda page: {})
        return tracemalloc.get_traced_memory()[1], s
    finally:
        tracemalloc.stop()


def test_a_summary_holds_pages_not_the_log(log_engine) -> None:
    small, _ = _peak_bytes(log_engine, 600)
    big, s = _peak_bytes(log_engine, 6_000)
    # every figure still covers all 6,000 rows
    o = s["rates"]["overall"]
    assert (o["requests"], o["client_errors"], o["fallbacks"]) == (6_000, 1_500, 2_000)
    assert s["model_mix"]["totals"] == {"cheap": 3_000, "strong": 1_500}
    assert sum(r["requests"] for r in s["route_savings"]) == 4_500 and not s["truncated"]
    # ten times the rows (each with a 2 kB prompt): the peak grows by less than half, where
    # holding the rows (the pandas summary) grew it more than tenfold
    assert big < 1.5 * small, (small, big)
