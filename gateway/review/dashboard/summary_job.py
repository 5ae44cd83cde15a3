"""A dashboard summary computed in a process of its own.

A summary folds up to ``summary.FOLD_ROWS`` log rows in Python; on a thread of the serving
process that work holds the GIL the event loop needs, and another tenant's chat waited for
it (issue 35: 19 ms to 250 ms at p50 beside 12 summaries). So the serving process only
gathers what the summary needs from its own state (``job_for``: the pool's prices and
promises, the database URL, the prompt-key secret) and a worker process of the dashboard's
own (gateway/review/dashboard/guard.py) opens the database and computes it (``run_job``). An
in-memory SQLite database, which no other process can open, is summarised on a thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine


@dataclass(frozen=True)
class UnitPrice:
    """A backend's price per token, as the summary reads it (gateway.pricing.Price would
    bring litellm into the worker process)."""

    input_per_token: float
    output_per_token: float


@dataclass(frozen=True)
class SummaryJob:
    """Everything a summary reads besides the database, picklable."""

    url: str
    scope: tuple[str, ...] | None
    start: datetime
    now: datetime
    prices: Mapping[str, Any]
    promises: Mapping[str, Mapping[str, Any]]
    routes: Sequence[str]
    secret: bytes | None
    exploration_period: str | None  # the operator's exploration spend: the admin view only
    # each promising route's learning (learning_view.route_learning): the admin view only
    learning: Mapping[str, Mapping[str, Any]] | None = None


def job_for(ctx: Any, scope: tuple[str, ...] | None, start: datetime, now: datetime
            ) -> SummaryJob:
    from gateway.review.dashboard.learning_view import route_learning

    pool = ctx.pool.current
    return SummaryJob(
        url=ctx.store.engine.url.render_as_string(hide_password=False), scope=scope,
        start=start, now=now,
        prices={n: UnitPrice(p.input_per_token, p.output_per_token)
                for n, p in pool.prices.items()},
        promises={name: {"reference": p.reference, "max_drop": p.max_drop}
                  for name, p in pool.promises.items()},
        routes=list(pool.routes), secret=ctx.store.prompt_secret,
        exploration_period=(ctx.settings.retraining.exploration.period
                            if scope is None else None),
        learning=route_learning(pool) if scope is None else None)


def shareable(engine: Engine) -> bool:
    """Whether another process can open this engine's database."""
    return not (engine.dialect.name == "sqlite"
                and engine.url.database in (None, "", ":memory:"))


def run_job(job: SummaryJob, engine: Engine | None = None) -> dict[str, Any]:
    """The summary of ``job`` on ``engine`` (default: one opened on ``job.url`` and closed)."""
    from gateway.learning.exploration_ledger import current_spending, shares
    from gateway.review.dashboard.learning_view import judged_by_route, learning_rows
    from gateway.review.dashboard.log_sql import LogWindow
    from gateway.review.dashboard.summary import View, summarise
    from gateway.store.engine import make_engine
    from gateway.store.tenants import list_tenants

    own = engine is None
    engine = make_engine(job.url) if engine is None else engine
    try:
        tenants = [t for t in list_tenants(engine, job.now)
                   if job.scope is None or t.id in job.scope]
        view = View(tenants=tenants, prices=job.prices, names={t.id: t.name for t in tenants},
                    promises=job.promises, routes=job.routes)
        data = summarise(engine, LogWindow(job.scope, job.start), job.now, view,
                         secret=job.secret)
        data["tenants"] = [{"id": t.id, "name": t.name} for t in tenants]
        if job.exploration_period is not None:
            data["exploration"] = current_spending(engine, job.exploration_period, job.now)
        if job.learning is not None:
            data["learning"] = learning_rows(job.learning, judged_by_route(engine),
                                             shares(engine), data.get("route_savings") or [])
        return data
    finally:
        if own:
            engine.dispose()
