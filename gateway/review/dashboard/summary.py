"""The dashboard's numbers, computed from request-log rows (pure functions, no I/O).

Time series share one bucketing: the span from the first row in the window to now is cut
into about ``TARGET_BUCKETS`` buckets of a round width, so a short run and a month both read.

- Spend against budget (per tenant): spend in the current budget period up to the end of
  bucket t, S(t) = spent_now − Σ cost of the tenant's rows after t (t ≥ period start), beside
  the budget of the period. The ledger gives spent_now, so S(now) is exactly the ledger.
- Estimated saving against always using the strongest backend s (the dearest in the pool by
  p_in + p_out): for each answered request, ĉ_s = n_prompt·p_in,s + n_completion·p_out,s with
  the request's own token counts (an estimate: s would have answered at its own length);
  saving = Σ ĉ_s − Σ c, share = 1 − Σ c / Σ ĉ_s. Never alone: beside it the quality change
  against s, and per route (``route_savings``) the saving against the route's reference
  beside its estimated and measured quality change (savings.py).
- Latency percentiles: p50, p90, p95, p99 of total latency and of time to first token
  (streams), linear interpolation between order statistics (numpy's default).
- Budget bars (per tenant with a budget): percent used = 100 · spent / budget in the current
  period, and when the period ends (the spend restarts); a `total` budget never ends.
- Error rate: share of requests with status ≥ 400, split into client errors (4xx: the
  request, its key, its budget or rate limit) and upstream failures (5xx: every upstream
  attempt failed, or the gateway did); fallback rate: share with more than one attempt;
  feedback coverage: share of answered requests with at least one feedback event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from gateway.review.dashboard.savings import overall_saving, route_savings
from gateway.store.periods import period_end

TARGET_BUCKETS = 30
BUCKET_WIDTHS_S = (5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400)
PERCENTILES = (50, 90, 95, 99)


def bucket_width(span_s: float) -> int:
    """The smallest round width giving at most ``TARGET_BUCKETS`` buckets over the span."""
    for w in BUCKET_WIDTHS_S:
        if span_s / w <= TARGET_BUCKETS:
            return w
    return BUCKET_WIDTHS_S[-1] * int(np.ceil(span_s / BUCKET_WIDTHS_S[-1] / TARGET_BUCKETS))


def frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The columns the charts need, one row per request."""
    cols = ["id", "created_at", "tenant_id", "route", "chosen_model", "status", "cost_usd",
            "prompt_tokens", "completion_tokens", "latency_ms", "ttft_ms", "n_attempts",
            "n_feedback", "feedback_mean", "router_version"]
    recs = []
    for r in rows:
        fb = [float(f["score"]) for f in r.get("feedback") or [] if f.get("score") is not None]
        recs.append({
            "id": r["id"], "created_at": r["created_at"], "tenant_id": r.get("tenant_id"),
            "route": r.get("route") or "passthrough", "chosen_model": r.get("chosen_model"),
            "status": r.get("status"), "cost_usd": r.get("cost_usd") or 0.0,
            "prompt_tokens": r.get("prompt_tokens") or 0,
            "completion_tokens": r.get("completion_tokens") or 0,
            "latency_ms": r.get("latency_ms"), "ttft_ms": r.get("ttft_ms"),
            "n_attempts": len(r.get("attempts") or []),
            "n_feedback": len(r.get("feedback") or []),
            "feedback_mean": float(np.mean(fb)) if fb else None,
            "router_version": r.get("router_version"),
        })
    df = pd.DataFrame.from_records(recs, columns=cols)
    df["created_at"] = pd.to_datetime(df["created_at"], utc=True)
    for c in ("latency_ms", "ttft_ms", "feedback_mean", "cost_usd", "status"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


def _percentiles(values: pd.Series) -> dict[str, float | None]:
    v = values.dropna().to_numpy(dtype=float)
    if v.size == 0:
        return {f"p{p}": None for p in PERCENTILES}
    return {f"p{p}": float(np.percentile(v, p)) for p in PERCENTILES}


def _none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and not np.isfinite(x)) else float(x)


@dataclass(frozen=True)
class _Buckets:
    width: int  # seconds
    origin: pd.Timestamp
    n: int
    ends: list[pd.Timestamp]
    labels: list[str]


def _buckets(df: pd.DataFrame, now: datetime, window_start: datetime) -> _Buckets:
    """Round-width buckets from the first row in the window (or the window's start) to now."""
    first = df["created_at"].min() if len(df) else pd.Timestamp(now)
    start = max(pd.Timestamp(window_start), first)
    width = bucket_width(max(1.0, (pd.Timestamp(now) - start).total_seconds()))
    origin = pd.Timestamp(start).floor(f"{width}s")
    n_buckets = int(np.floor((pd.Timestamp(now) - origin).total_seconds() / width)) + 1
    edges = [origin + pd.Timedelta(seconds=width * i) for i in range(n_buckets)]
    ends = [e + pd.Timedelta(seconds=width) for e in edges]
    return _Buckets(width, origin, n_buckets, ends, [e.isoformat() for e in edges])


def summarise(
    rows: Sequence[Mapping[str, Any]],
    *,
    now: datetime,
    window_start: datetime,
    tenants: Sequence[Any],
    prices: Mapping[str, Any],
    names: Mapping[str, str],
    outcomes: Mapping[str, Mapping[str, float]] | None = None,
    promises: Mapping[str, Mapping[str, Any]] | None = None,
    routes: Sequence[str] = (),
) -> dict[str, Any]:
    """Every chart and card of the dashboard as JSON-ready lists.

    ``tenants``: TenantInfo-like records (id, name, budget_usd, spent_usd, period_start);
    ``prices``: backend -> Price (input_per_token, output_per_token); ``outcomes``: request
    id -> router model -> mean observed quality on its prompt (queries.judged_outcomes);
    ``promises``: route -> {reference, max_drop}; ``routes``: the configured routes."""
    df = frame(rows)
    bk = _buckets(df, now, window_start)
    idx = ((df["created_at"] - bk.origin).dt.total_seconds() // bk.width).astype(int) if len(
        df) else pd.Series([], dtype=int)
    df = df.assign(bucket=idx)
    answered = df[df["status"] == 200]
    answered_rows = [r for r in rows if r.get("status") == 200]
    outcomes = outcomes or {}
    mix = _model_mix(answered, bk.n)
    latency, rates = _latency_and_rates(df, bk.n)
    return {
        "now": pd.Timestamp(now).isoformat(),
        "window_start": pd.Timestamp(window_start).isoformat(),
        "bucket_seconds": bk.width,
        "buckets": bk.labels,
        "tenant_names": dict(names),
        "spend": _spend(df, tenants, bk),
        "budgets": budget_bars(tenants, now),
        "model_mix": mix,
        "saving": overall_saving(answered, answered_rows, prices, outcomes, bk.n),
        "route_savings": route_savings(answered_rows, prices, outcomes, promises or {},
                                       routes),
        "latency": latency,
        "rates": rates,
        "feedback": _feedback(answered, mix["models"]),
    }


def _spend(df: pd.DataFrame, tenants: Sequence[Any], bk: _Buckets) -> list[dict[str, Any]]:
    """Each tenant's spend in its budget period up to the end of each bucket, S(t)."""
    # rows at or after the end of bucket b are exactly the rows of buckets > b
    per_bucket = df.groupby(["tenant_id", "bucket"])["cost_usd"].sum()
    spend = []
    for t in tenants:
        costs = np.zeros(bk.n)
        if t.id in per_bucket.index.get_level_values(0):
            mine = per_bucket.loc[t.id]
            costs[mine.index.to_numpy(dtype=int)] = mine.to_numpy(dtype=float)
        later = np.concatenate([np.cumsum(costs[::-1])[::-1][1:], [0.0]])
        series: list[float | None] = [
            None if pd.Timestamp(t.period_start) > end
            else max(0.0, float(t.spent_usd) - float(later[b]))
            for b, end in enumerate(bk.ends)
        ]
        spend.append({"tenant_id": t.id, "tenant": t.name, "budget_usd": t.budget_usd,
                      "period": t.period, "spent_usd": t.spent_usd, "spend": series})
    return spend


def _model_mix(answered: pd.DataFrame, n_buckets: int) -> dict[str, Any]:
    models = sorted(m for m in answered["chosen_model"].dropna().unique())
    counts = answered.groupby(["bucket", "chosen_model"]).size()
    mix = {m: [int(counts.get((b, m), 0)) for b in range(n_buckets)] for m in models}
    totals = answered["chosen_model"].value_counts()
    return {"models": models, "series": mix,
            "totals": {m: int(totals.get(m, 0)) for m in models}}


def _latency_and_rates(df: pd.DataFrame, n_buckets: int) -> tuple[dict, dict]:
    """Latency percentiles, and request volume, error (client 4xx, upstream 5xx) and
    fallback rates, per bucket and over the window."""
    by_b = df.groupby("bucket")
    lat_series: dict[str, list] = {f"p{p}": [] for p in (50, 95)}
    err, client_err, upstream_err, fb_rate, volume = [], [], [], [], []
    client = (df["status"] >= 400) & (df["status"] < 500)
    upstream = df["status"] >= 500
    for b in range(n_buckets):
        g = by_b.get_group(b) if b in by_b.groups else df.iloc[0:0]
        pct = _percentiles(g["latency_ms"])
        lat_series["p50"].append(pct["p50"])
        lat_series["p95"].append(pct["p95"])
        n = len(g)
        volume.append(n)
        err.append(float((g["status"] >= 400).mean()) if n else None)
        client_err.append(float(client[g.index].mean()) if n else None)
        upstream_err.append(float(upstream[g.index].mean()) if n else None)
        fb_rate.append(float((g["n_attempts"] > 1).mean()) if n else None)
    n_all = len(df)
    latency = {
        "total_ms": _percentiles(df["latency_ms"]),
        "ttft_ms": _percentiles(df["ttft_ms"]),
        "series": lat_series,
    }
    rates = {
        "requests": volume,
        "error_rate": err,
        "client_error_rate": client_err,
        "upstream_error_rate": upstream_err,
        "fallback_rate": fb_rate,
        "overall": {
            "requests": n_all,
            "errors": int((df["status"] >= 400).sum()),
            "fallbacks": int((df["n_attempts"] > 1).sum()),
            "client_errors": int(client.sum()),
            "upstream_errors": int(upstream.sum()),
            "client_error_rate": _none(float(client.mean())) if n_all else None,
            "upstream_error_rate": _none(float(upstream.mean())) if n_all else None,
            "error_rate": _none(float((df["status"] >= 400).mean())) if n_all else None,
            "fallback_rate": _none(float((df["n_attempts"] > 1).mean())) if n_all else None,
            "statuses": {str(int(k)): int(v)
                         for k, v in df["status"].dropna().value_counts().items()},
        },
    }
    return latency, rates


def _feedback(answered: pd.DataFrame, models: list[str]) -> dict[str, Any]:
    """Feedback coverage: overall and per model."""
    with_fb = answered[answered["n_feedback"] > 0]
    per_model = []
    for m in models:
        g = answered[answered["chosen_model"] == m]
        gf = g[g["n_feedback"] > 0]
        per_model.append({
            "model": m, "answered": len(g), "with_feedback": len(gf),
            "coverage": len(gf) / len(g) if len(g) else None,
            "mean_score": _none(float(gf["feedback_mean"].mean())) if len(gf) else None,
        })
    return {
        "answered": len(answered),
        "with_feedback": len(with_fb),
        "coverage": len(with_fb) / len(answered) if len(answered) else None,
        "events": int(answered["n_feedback"].sum()),
        "mean_score": _none(float(with_fb["feedback_mean"].mean())) if len(with_fb) else None,
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

