"""A real request-log database for the dashboard's arithmetic: hand-written rows go into
SQLite or PostgreSQL (the store's own tables, plus a plain ``feedback`` table of scores, one
of the feedback sources queries.FeedbackSource reads), and the summary is read back from it
as the dashboard computes it (database aggregates and a paged fold)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gateway.review.dashboard.log_sql import LogWindow
from gateway.review.dashboard.summary import View, summarise
from gateway.store.models import Base, request_logs


def create_log_tables(engine: sa.Engine) -> None:
    Base.metadata.create_all(engine, tables=[request_logs])  # not the learning tables
    FEEDBACK.create(engine)


FEEDBACK = sa.Table("feedback", sa.MetaData(),
                    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                    sa.Column("request_id", sa.String(64), index=True),
                    sa.Column("score", sa.Float, nullable=True))


def load(engine: sa.Engine, rows: Sequence[Mapping[str, Any]]) -> None:
    """Replace the log with ``rows`` (request_logs columns; ``feedback``: a list of
    {"score": s} events, each one row of the feedback table)."""
    cols = {c.name for c in request_logs.c}
    with engine.begin() as conn:
        conn.execute(sa.delete(FEEDBACK))
        conn.execute(sa.delete(request_logs))
        if rows:
            conn.execute(sa.insert(request_logs),
                         [{k: v for k, v in r.items() if k in cols} for r in rows])
        events = [{"request_id": r["id"], "score": f.get("score")}
                  for r in rows for f in r.get("feedback") or []]
        if events:
            conn.execute(sa.insert(FEEDBACK), events)


def summary_of(engine: sa.Engine, rows: Sequence[Mapping[str, Any]], *, now: datetime,
               window_start: datetime, tenants: Sequence[Any], prices: Mapping[str, Any],
               names: Mapping[str, str], outcomes: Mapping[str, Any] | None = None,
               promises: Mapping[str, Any] | None = None, routes: Sequence[str] = (),
               fold_rows: int | None = None) -> dict[str, Any]:
    """The dashboard's summary of ``rows`` (``outcomes``: the judged outcomes, as
    judged_outcomes.py would give them)."""
    load(engine, rows)
    view = View(tenants=tenants, prices=prices, names=names, promises=promises or {},
                routes=routes)
    kw = {} if fold_rows is None else {"fold_rows": fold_rows}
    return summarise(engine, LogWindow(None, window_start), now, view,
                     judge=lambda page: outcomes or {}, **kw)
