"""The dashboard's numbers, from the database's aggregates of the request log (log_sql.py).

Time series share one bucketing: the span from the first row in the window to now is cut
into about ``TARGET_BUCKETS`` buckets of a round width, so a short run and a month both read.

- Spend against budget (per tenant): spend in the current budget period up to the end of
  bucket t, S(t) = spent_now − Σ cost of the tenant's rows after t (t ≥ period start), beside
  the budget of the period. The ledger gives spent_now, so S(now) is exactly the ledger.
- Estimated saving (the headline, savings.py ``SavingsFold.routed``): on routed traffic only
  (passthrough is the client's own choice of model), each route against its reference (the
  strongest backend on a route without a promise), saving = Σ c_comparator − Σ c, share =
  saving / Σ c_comparator, cumulative per bucket. Never alone: beside it the quality change
  over the same rows, and per route (``route_savings``) the same against each reference.
- Latency percentiles: p50, p90, p95, p99 of total latency and of time to first token
  (streams), linear interpolation between order statistics (numpy's default).
- Budget bars (per tenant with a budget): percent used = 100 · spent / budget in the current
  period, and when the period ends (the spend restarts); a `total` budget never ends.
- Error rate: share of requests with status ≥ 400, split into client errors (4xx: the
  request, its key, its budget or rate limit) and upstream failures (5xx: every upstream
  attempt failed, or the gateway did); fallback rate: share with more than one attempt;
  feedback coverage: share of answered requests with at least one feedback event.

Every figure but the per-request comparisons is a database aggregate over the whole window;
the comparisons (route savings, quality changes) fold the newest ``FOLD_ROWS`` answered rows,
a page at a time, and ``truncated`` says when the window had more.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import accumulate
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine

from gateway.review.dashboard import log_sql
from gateway.review.dashboard.judged_outcomes import OutcomeTables, judged_outcomes
from gateway.review.dashboard.log_sql import LogWindow, StatusGroup
from gateway.review.dashboard.savings import SavingsFold
from gateway.store.models import request_logs
from gateway.store.periods import period_end

TARGET_BUCKETS = 30
BUCKET_WIDTHS_S = (5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400)
PERCENTILES = (50, 90, 95, 99)
FOLD_ROWS = 20_000  # answered rows the per-request comparisons read, newest first
Judge = Callable[[Sequence[Mapping[str, Any]]], Mapping[str, Mapping[str, float]]]


def bucket_width(span_s: float) -> int:
    """The smallest round width giving at most ``TARGET_BUCKETS`` buckets over the span."""
    for w in BUCKET_WIDTHS_S:
        if span_s / w <= TARGET_BUCKETS:
            return w
    return BUCKET_WIDTHS_S[-1] * math.ceil(span_s / BUCKET_WIDTHS_S[-1] / TARGET_BUCKETS)


@dataclass(frozen=True)
class Buckets:
    width: int  # seconds
    origin_s: int  # epoch second of bucket 0's start (a multiple of width)
    n: int

    def start(self, b: int) -> datetime:
        return datetime.fromtimestamp(self.origin_s + self.width * b, tz=UTC)

    def clamp(self, b: int) -> int:
        """Rows stamped after now (a replica's clock ahead) count in the last bucket."""
        return min(max(b, 0), self.n - 1)


def buckets_for(first: datetime | None, now: datetime, window_start: datetime) -> Buckets:
    """Round-width buckets from the first row in the window (or the window's start) to now."""
    start = max(window_start, first) if first is not None else now
    width = bucket_width(max(1.0, (now - start).total_seconds()))
    origin_s = math.floor(start.timestamp() / width) * width
    n = math.floor((now.timestamp() - origin_s) / width) + 1
    return Buckets(width, origin_s, n)


@dataclass(frozen=True)
class View:
    """What the summary reads besides the log: the tenants in view (TenantInfo-like: id,
    name, budget_usd, spent_usd, period, period_start), the pool's prices (backend ->
    Price), tenant names, route promises (route -> {reference, max_drop}) and the
    configured routes."""

    tenants: Sequence[Any]
    prices: Mapping[str, Any]
    names: Mapping[str, str]
    promises: Mapping[str, Mapping[str, Any]]
    routes: Sequence[str] = ()


def summarise(engine: Engine, window: LogWindow, now: datetime, view: View, *,
              judge: Judge | None = None, secret: bytes | None = None,
              fold_rows: int = FOLD_ROWS) -> dict[str, Any]:
    """Every chart and card of the dashboard as JSON-ready lists. ``judge``: request rows ->
    request id -> router model -> mean observed quality on its prompt (default
    judged_outcomes.judged_outcomes with the store's ``secret``)."""
    dialect = engine.dialect.name
    with engine.connect() as conn:
        bk = buckets_for(log_sql.first_row_time(conn, window), now, window.start)
        bucket = log_sql.bucket_of(dialect, bk.origin_s, bk.width)
        groups = log_sql.status_groups(conn, window, bucket)
        spend = log_sql.tenant_spend(conn, window, bucket)
        latency = _latency(conn, window, bucket, bk)
        feedback = log_sql.feedback_by_model(conn, engine, window)
        answered = log_sql.answered_count(conn, window)
    fold = SavingsFold(view.prices, view.promises, view.routes,
                       bucket=lambda at: bk.clamp(_bucket_index(at, bk)), n_buckets=bk.n)
    _fold(engine, window, fold, judge, secret, fold_rows)
    mix = _model_mix(groups, bk)
    return {
        "now": now.isoformat(),
        "window_start": window.start.isoformat(),
        "bucket_seconds": bk.width,
        "buckets": [bk.start(b).isoformat() for b in range(bk.n)],
        "tenant_names": dict(view.names),
        "spend": _spend(spend, view.tenants, bk),
        "budgets": budget_bars(view.tenants, now),
        "model_mix": mix,
        "saving": fold.routed(),
        "route_savings": fold.route_savings(),
        "latency": latency,
        "rates": _rates(groups, bk),
        "feedback": _feedback(feedback, answered, mix["totals"]),
        "truncated": answered > fold_rows,
    }


def _fold(engine: Engine, window: LogWindow, fold: SavingsFold, judge: Judge | None,
          secret: bytes | None, limit: int) -> None:
    """The per-request comparisons, a page of answered rows at a time; the logged prompts
    (2 kB a row, hashed to find a row's outcomes) are read only when any outcome exists."""
    tables = OutcomeTables(engine) if judge is None else None
    with_prompt = tables is not None and tables.any_outcome(engine)
    for page in log_sql.answered_pages(engine, window, limit, with_prompt):
        seen = (judge(page) if judge is not None
                else judged_outcomes(engine, page, secret, tables) if with_prompt else {})
        fold.add(page, seen)


def _per_bucket(groups: Sequence[StatusGroup], bk: Buckets,
                keep: Callable[[StatusGroup], bool], value: Callable[[StatusGroup], float]
                ) -> list[float]:
    out = [0.0] * bk.n
    for g in groups:
        if keep(g):
            out[bk.clamp(g.bucket)] += value(g)
    return out


def _bucket_index(at: datetime | None, bk: Buckets) -> int:
    """The bucket of a row's ``created_at`` (naive: UTC, as SQLite returns it)."""
    if at is None:
        return bk.n - 1
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return math.floor((at.timestamp() - bk.origin_s) / bk.width)


def _spend(per_bucket: Mapping[tuple[str | None, int], float], tenants: Sequence[Any],
           bk: Buckets) -> list[dict[str, Any]]:
    """Each tenant's spend in its budget period up to the end of each bucket, S(t)."""
    by_tenant: dict[str | None, list[float]] = {}
    for (tid, b), c in per_bucket.items():
        by_tenant.setdefault(tid, [0.0] * bk.n)[bk.clamp(b)] += c
    spend = []
    for t in tenants:
        costs = by_tenant.get(t.id, [0.0] * bk.n)
        # rows at or after the end of bucket b are exactly the rows of buckets > b
        later = list(accumulate(reversed(costs)))[::-1][1:] + [0.0]
        series: list[float | None] = [
            None if t.period_start > bk.start(b + 1)
            else max(0.0, float(t.spent_usd) - later[b]) for b in range(bk.n)]
        spend.append({"tenant_id": t.id, "tenant": t.name, "budget_usd": t.budget_usd,
                      "period": t.period, "spent_usd": t.spent_usd, "spend": series})
    return spend


def _model_mix(groups: Sequence[StatusGroup], bk: Buckets) -> dict[str, Any]:
    answered = [g for g in groups if g.status == 200 and g.model is not None]
    models = sorted({g.model for g in answered if g.model is not None})
    series = {m: [0] * bk.n for m in models}
    for g in answered:
        series[g.model][bk.clamp(g.bucket)] += g.n  # type: ignore[index]
    return {"models": models, "series": series, "totals": {m: sum(series[m]) for m in models}}


def _latency(conn: sa.Connection, window: LogWindow, bucket: Any, bk: Buckets
             ) -> dict[str, Any]:
    col = request_logs.c
    total = log_sql.percentile_points(conn, window, col.latency_ms, PERCENTILES)
    ttft = log_sql.percentile_points(conn, window, col.ttft_ms, PERCENTILES)
    per_b = log_sql.percentile_points(conn, window, col.latency_ms, (50, 95), bucket)
    series = {f"p{p}": [(per_b.get(b) or {}).get(p) for b in range(bk.n)] for p in (50, 95)}
    return {"total_ms": _named(total.get(None, {})), "ttft_ms": _named(ttft.get(None, {})),
            "series": series}


def _named(points: Mapping[int, float | None]) -> dict[str, float | None]:
    return {f"p{p}": points.get(p) for p in PERCENTILES}


def _share(k: int, n: int) -> float | None:
    return k / n if n else None


def _rates(groups: Sequence[StatusGroup], bk: Buckets) -> dict[str, Any]:
    """Request volume, error (client 4xx, upstream 5xx) and fallback rates, per bucket and
    over the window."""
    kinds: dict[str, Callable[[StatusGroup], bool]] = {
        "requests": lambda g: True,
        "errors": lambda g: g.status is not None and g.status >= 400,
        "client_errors": lambda g: g.status is not None and 400 <= g.status < 500,
        "upstream_errors": lambda g: g.status is not None and g.status >= 500,
        "fallbacks": lambda g: g.fallback,
    }
    per = {k: [int(x) for x in _per_bucket(groups, bk, f, lambda g: g.n)]
           for k, f in kinds.items()}
    total = {k: sum(v) for k, v in per.items()}
    n_all = total["requests"]
    statuses: dict[str, int] = {}
    for g in groups:
        if g.status is not None:
            statuses[str(g.status)] = statuses.get(str(g.status), 0) + g.n
    vol = per["requests"]
    return {
        "requests": vol,
        "error_rate": [_share(e, n) for e, n in zip(per["errors"], vol, strict=True)],
        "client_error_rate": [_share(e, n) for e, n in zip(per["client_errors"], vol,
                                                            strict=True)],
        "upstream_error_rate": [_share(e, n) for e, n in zip(per["upstream_errors"], vol,
                                                              strict=True)],
        "fallback_rate": [_share(e, n) for e, n in zip(per["fallbacks"], vol, strict=True)],
        "overall": {
            **total,
            "client_error_rate": _share(total["client_errors"], n_all),
            "upstream_error_rate": _share(total["upstream_errors"], n_all),
            "error_rate": _share(total["errors"], n_all),
            "fallback_rate": _share(total["fallbacks"], n_all),
            "statuses": dict(sorted(statuses.items(), key=lambda kv: -kv[1])),
        },
    }


def _feedback(by_model: Mapping[str | None, log_sql.FeedbackTally], answered: int,
              answered_by_model: Mapping[str, int]) -> dict[str, Any]:
    """Feedback coverage: overall and per model."""
    per_model = []
    for m, n in answered_by_model.items():
        t = by_model.get(m, log_sql.FeedbackTally())
        per_model.append({
            "model": m, "answered": n, "with_feedback": t.with_feedback,
            "coverage": _share(t.with_feedback, n),
            "mean_score": t.score_sum / t.scored if t.scored else None,
        })
    every = list(by_model.values())
    with_fb = sum(t.with_feedback for t in every)
    scored = sum(t.scored for t in every)
    return {
        "answered": answered,
        "with_feedback": with_fb,
        "coverage": _share(with_fb, answered),
        "events": sum(t.events for t in every),
        "mean_score": sum(t.score_sum for t in every) / scored if scored else None,
        "per_model": per_model,
    }


def budget_bars(tenants: Sequence[Any], now: datetime) -> list[dict[str, Any]]:
    """One bar per tenant with a budget, fullest first."""
    bars = []
    for t in tenants:
        if t.budget_usd is None:
            continue
        budget, spent = float(t.budget_usd), float(t.spent_usd or 0.0)
        end = period_end(t.period, now)
        bars.append({"tenant_id": t.id, "tenant": t.name, "budget_usd": budget,
                     "spent_usd": spent, "period": t.period,
                     "percent_used": 100.0 * spent / budget if budget > 0 else 100.0,
                     "period_end": end.isoformat() if end else None})
    return sorted(bars, key=lambda b: -b["percent_used"])
