"""The dashboard's arithmetic on hand-computable rows, aggregated by a real database (SQLite and
PostgreSQL): buckets, spend against budget rebuilt from the ledger, the saving against the
strongest backend, percentiles and rates."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gateway.pricing import Price
from gateway.review.dashboard.summary import bucket_width
from tests.gateway.review.log_db import summary_of

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


@dataclass
class T:
    id: str
    name: str
    budget_usd: float | None
    spent_usd: float
    period: str
    period_start: datetime


def row(i: int, minutes_ago: float, model: str | None, status: int, cost: float,
        pt: int = 100, ct: int = 50, attempts: int = 1, fb: list[float] | None = None,
        tenant: str = "a") -> dict:
    return {"id": f"r{i}", "created_at": NOW - timedelta(minutes=minutes_ago),
            "tenant_id": tenant, "route": "auto", "chosen_model": model, "status": status,
            "cost_usd": cost, "prompt_tokens": pt, "completion_tokens": ct,
            "latency_ms": 100.0 * (i + 1), "ttft_ms": None,
            "attempts": [{"model": model, "status": 200}] * attempts,
            "feedback": [{"score": s} for s in fb or []], "router_version": "v1"}


def test_bucket_width_is_round_and_bounded() -> None:
    assert bucket_width(60) == 5          # 12 buckets of 5 s
    assert bucket_width(3600) == 300      # 12 of 5 min
    assert bucket_width(86400) == 3600    # 24 of 1 h
    for span in (10, 999, 40_000, 10 * 86400, 400 * 86400):
        assert span / bucket_width(span) <= 30


def test_summary_numbers(log_engine) -> None:
    prices = {"cheap": Price(1e-6, 2e-6), "strong": Price(10e-6, 30e-6)}
    rows = [
        row(0, 50, "cheap", 200, 0.0002, fb=[1.0, 0.0]),
        row(1, 40, "cheap", 200, 0.0002, attempts=2),
        row(2, 30, "strong", 200, 0.0025, fb=[1.0]),
        row(3, 20, None, 502, 0.0, attempts=2),
    ]
    tenant = T("a", "acme", 0.01, spent_usd=0.0029, period="monthly",
               period_start=NOW - timedelta(days=3))
    s = summary_of(log_engine, rows, now=NOW, window_start=NOW - timedelta(hours=1),
                   tenants=[tenant], prices=prices, names={"a": "acme"})
    assert s["bucket_seconds"] == 300
    spend = s["spend"][0]["spend"]
    # S(t) = spent_now − Σ cost after t: 0.0029 at the end, 0.0029 − 0.0027 after the first
    assert spend[-1] == pytest.approx(0.0029)
    assert spend[0] == pytest.approx(0.0029 - 0.0002 - 0.0025)
    assert s["model_mix"]["totals"] == {"cheap": 2, "strong": 1}
    sv = s["saving"]  # routed rows only, against the strongest on a route with no promise
    assert sv["strongest"] == "strong" and sv["routes"] == ["auto"]
    strong_each = 100 * 10e-6 + 50 * 30e-6
    assert sv["comparator_usd"] == pytest.approx(3 * strong_each)
    assert sv["saving_usd"] == pytest.approx(3 * strong_each - 0.0029)
    assert sv["cumulative_actual"][-1] == pytest.approx(0.0029)
    assert sv["cumulative_comparator"][-1] == pytest.approx(3 * strong_each)
    o = s["rates"]["overall"]
    assert (o["requests"], o["errors"], o["fallbacks"]) == (4, 1, 2)
    assert o["error_rate"] == 0.25 and o["fallback_rate"] == 0.5
    assert s["latency"]["total_ms"]["p50"] == pytest.approx(np.percentile([100, 200, 300, 400],
                                                                          50))
    fb = s["feedback"]
    assert (fb["answered"], fb["with_feedback"], fb["events"]) == (3, 2, 3)
    assert fb["mean_score"] == pytest.approx((0.5 + 1.0) / 2)  # per request, then averaged


def test_spend_before_the_period_start_is_not_drawn(log_engine) -> None:
    tenant = T("a", "acme", 1.0, spent_usd=0.0, period="daily",
               period_start=NOW - timedelta(minutes=10))
    s = summary_of(log_engine, [row(0, 50, "cheap", 200, 0.001)], now=NOW,
                   window_start=NOW - timedelta(hours=1), tenants=[tenant],
                   prices={"cheap": Price(1e-6, 2e-6)}, names={})
    series = s["spend"][0]["spend"]
    assert series[0] is None and series[-1] == 0.0


def test_budget_bars_and_errors_split_by_who_caused_them(log_engine) -> None:
    rows = [row(0, 50, "cheap", 200, 0.001), row(1, 40, None, 429, 0.0),
            row(2, 30, None, 400, 0.0), row(3, 20, None, 502, 0.0),
            row(4, 10, None, 401, 0.0, tenant="b")]
    tenants = [T("a", "acme", 0.01, spent_usd=0.0025, period="monthly",
                 period_start=NOW.replace(day=1, hour=0)),
               T("b", "beta", 2.0, spent_usd=1.5, period="weekly",
                 period_start=NOW - timedelta(days=NOW.weekday(), hours=12)),
               T("c", "nolimit", None, spent_usd=3.0, period="total",
                 period_start=datetime(1970, 1, 1, tzinfo=UTC)),
               T("d", "forever", 4.0, spent_usd=1.0, period="total",
                 period_start=datetime(1970, 1, 1, tzinfo=UTC))]
    s = summary_of(log_engine, rows, now=NOW, window_start=NOW - timedelta(hours=1),
                   tenants=tenants, prices={"cheap": Price(1e-6, 2e-6)}, names={})
    bars = {b["tenant"]: b for b in s["budgets"]}
    assert list(bars) == ["beta", "acme", "forever"]  # fullest first; no budget, no bar
    assert bars["acme"]["percent_used"] == pytest.approx(25.0)
    assert bars["acme"]["period_end"] == "2026-12-01T00:00:00+00:00"  # next month's first
    assert bars["beta"]["percent_used"] == pytest.approx(75.0)
    assert bars["beta"]["period_end"] == "2026-12-07T00:00:00+00:00"  # NOW is a Monday
    assert bars["forever"]["period_end"] is None
    o = s["rates"]["overall"]
    assert (o["errors"], o["client_errors"], o["upstream_errors"]) == (4, 3, 1)
    assert o["client_error_rate"] == pytest.approx(0.6)
    assert o["upstream_error_rate"] == pytest.approx(0.2)
    assert sum(x or 0 for x in s["rates"]["upstream_error_rate"]) == pytest.approx(1.0)
