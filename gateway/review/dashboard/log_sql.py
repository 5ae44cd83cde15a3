"""The dashboard's reads of the request log, aggregated by the database (SQLAlchemy Core,
the same statements on SQLite and PostgreSQL).

A summary call never holds the window's rows: counts, sums and the bucket series are
GROUP BYs, percentiles are read as the two order statistics around each rank (window
functions), and the per-request comparisons the savings need are read in keyset pages of
``PAGE_ROWS`` rows (``answered_pages``). What a call holds is therefore bounded by the
number of buckets × statuses × models (and tenants, for the spend) plus one page, however
many rows the window has.

Bucket b of a row: b = ⌊(t − origin) / width⌋ with t its epoch second (``bucket_of``).
Percentile p of n ordered values v₀..vₙ₋₁ (numpy's default, linear): k = (n − 1)·p / 100,
v = v_⌊k⌋ + (k − ⌊k⌋)·(v_⌊k⌋₊₁ − v_⌊k⌋) (``percentile_points`` reads v_⌊k⌋ and v_⌊k⌋₊₁).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine

from gateway.review.dashboard.queries import FeedbackSource, row_dict
from gateway.store.models import request_logs

PAGE_ROWS = 500  # rows per page of the per-request fold: what one summary call holds
rl = request_logs


@dataclass(frozen=True)
class LogWindow:
    """The request-log rows one view covers: its tenants (None: all) since ``start``."""

    scope: tuple[str, ...] | None
    start: datetime

    def where(self) -> list[Any]:
        clauses = [rl.c.created_at >= self.start]
        if self.scope is not None:
            clauses.append(rl.c.tenant_id.in_(list(self.scope)))
        return clauses


def epoch_seconds(dialect: str, column: Any) -> Any:
    """Whole epoch seconds of a timestamp column (⌊t⌋), as an integer expression."""
    if dialect == "sqlite":  # stored as naive UTC text; strftime('%s') reads it as UTC
        return sa.cast(sa.func.strftime("%s", column), sa.BigInteger)
    return sa.cast(sa.func.floor(sa.extract("epoch", column)), sa.BigInteger)


def bucket_of(dialect: str, origin_s: int, width_s: int) -> Any:
    """b = ⌊(t − origin) / width⌋; integer division (t ≥ origin in the window)."""
    return (epoch_seconds(dialect, rl.c.created_at) - origin_s) // width_s


def attempt_count(dialect: str) -> Any:
    """The number of attempts a row logged (its ``attempts`` JSON array; 0 when absent)."""
    if dialect == "postgresql":
        col = rl.c.attempts
        return sa.case((sa.func.jsonb_typeof(col) == "array", sa.func.jsonb_array_length(col)),
                       else_=0)
    return sa.func.coalesce(sa.func.json_array_length(rl.c.attempts), 0)


def first_row_time(conn: sa.Connection, w: LogWindow) -> datetime | None:
    return conn.execute(sa.select(sa.func.min(rl.c.created_at)).where(*w.where())).scalar()


@dataclass(frozen=True)
class StatusGroup:
    """The rows of one bucket with one status, model and fallback flag."""

    bucket: int
    status: int | None
    model: str | None
    fallback: bool
    n: int
    cost_usd: float
    prompt_tokens: int
    completion_tokens: int


def status_groups(conn: sa.Connection, w: LogWindow, bucket: Any) -> list[StatusGroup]:
    """Counts and sums per (bucket, status, chosen model, fell back): the volume, error,
    fallback, model-mix and saving series are all sums of these."""
    fell_back = sa.case((attempt_count(conn.dialect.name) > 1, 1), else_=0)
    rows = sa.select(bucket.label("b"), rl.c.status, rl.c.chosen_model,
                     fell_back.label("fb"), sa.func.coalesce(rl.c.cost_usd, 0.0).label("c"),
                     sa.func.coalesce(rl.c.prompt_tokens, 0).label("pt"),
                     sa.func.coalesce(rl.c.completion_tokens, 0).label("ct"),
                     ).where(*w.where()).subquery()
    keys = (rows.c.b, rows.c.status, rows.c.chosen_model, rows.c.fb)
    q = sa.select(*keys, sa.func.count(), sa.func.sum(rows.c.c), sa.func.sum(rows.c.pt),
                  sa.func.sum(rows.c.ct)).group_by(*keys)
    return [StatusGroup(int(r[0]), r[1], r[2], bool(r[3]), int(r[4]), float(r[5] or 0.0),
                        int(r[6] or 0), int(r[7] or 0)) for r in conn.execute(q)]


def tenant_spend(conn: sa.Connection, w: LogWindow, bucket: Any
                 ) -> dict[tuple[str | None, int], float]:
    """(tenant id, bucket) -> Σ cost of its rows in that bucket."""
    rows = sa.select(rl.c.tenant_id, bucket.label("b"),
                     sa.func.coalesce(rl.c.cost_usd, 0.0).label("c")).where(*w.where()
                                                                           ).subquery()
    q = (sa.select(rows.c.tenant_id, rows.c.b, sa.func.sum(rows.c.c))
         .group_by(rows.c.tenant_id, rows.c.b))
    return {(t, int(b)): float(c or 0.0) for t, b, c in conn.execute(q)}


def percentile_points(conn: sa.Connection, w: LogWindow, column: Any,
                      percentiles: Sequence[int], bucket: Any = None
                      ) -> dict[int | None, dict[int, float | None]]:
    """Percentiles of ``column`` over the window (key None) or per bucket (key b), read
    as the order statistics v_⌊k⌋ and v_⌊k⌋₊₁ around each rank: at most 2 rows per
    percentile per group leave the database."""
    part = [bucket] if bucket is not None else []
    rn = sa.func.row_number().over(partition_by=part or None, order_by=column)
    n = sa.func.count(column).over(partition_by=part or None)
    g = bucket if bucket is not None else sa.literal(0)
    inner = (sa.select(g.label("g"), column.label("v"), rn.label("rn"), n.label("n"))
             .where(*w.where(), column.is_not(None)).subquery())
    wanted = []
    for p in percentiles:  # 0-based ranks ⌊(n − 1)·p / 100⌋ and the next one
        lo = (inner.c.n - 1) * p // 100
        wanted += [inner.c.rn - 1 == lo, inner.c.rn - 2 == lo]
    q = sa.select(inner.c.g, inner.c.rn, inner.c.n, inner.c.v).where(sa.or_(*wanted))
    values: dict[Any, dict[int, float]] = {}
    sizes: dict[Any, int] = {}
    for g_, r, n_, v in conn.execute(q):
        values.setdefault(g_, {})[int(r) - 1] = float(v)
        sizes[g_] = int(n_)
    out: dict[int | None, dict[int, float | None]] = {}
    for g_, by_rank in values.items():
        key = int(g_) if bucket is not None else None
        out[key] = {p: _interpolate(by_rank, sizes[g_], p) for p in percentiles}
    return out


def _interpolate(by_rank: dict[int, float], n: int, p: int) -> float | None:
    k = (n - 1) * p / 100
    lo = math.floor(k)
    if lo not in by_rank:
        return None
    hi = by_rank.get(lo + 1, by_rank[lo])
    return by_rank[lo] + (k - lo) * (hi - by_rank[lo])


@dataclass(frozen=True)
class FeedbackTally:
    """Answered rows of one model that have feedback: how many, their feedback events, and
    Σ (and count) of each row's mean score (rows whose feedback carries no score: none)."""

    with_feedback: int = 0
    events: int = 0
    score_sum: float = 0.0
    scored: int = 0


def feedback_by_model(conn: sa.Connection, engine: Engine, w: LogWindow
                      ) -> dict[str | None, FeedbackTally]:
    """chosen model -> its answered rows' feedback, grouped in the database."""
    fb = FeedbackSource(engine)
    if not fb.available:
        return {}
    t = fb.table
    assert t is not None
    per_row = (sa.select(rl.c.chosen_model.label("m"), sa.func.count().label("n"),
                         sa.func.avg(fb.score()).label("mean"))
               .select_from(rl.join(t, t.c.request_id == rl.c.id))
               .where(*w.where(), rl.c.status == 200, fb.mine())
               .group_by(rl.c.id, rl.c.chosen_model).subquery())
    q = (sa.select(per_row.c.m, sa.func.count(), sa.func.sum(per_row.c.n),
                   sa.func.sum(per_row.c.mean), sa.func.count(per_row.c.mean))
         .group_by(per_row.c.m))
    return {m: FeedbackTally(int(k), int(e or 0), float(s or 0.0), int(c))
            for m, k, e, s, c in conn.execute(q)}


FOLD_COLUMNS = (rl.c.id, rl.c.created_at, rl.c.route, rl.c.chosen_model, rl.c.reason,
                rl.c.candidates, rl.c.cost_usd, rl.c.prompt_tokens, rl.c.completion_tokens)


def answered_pages(engine: Engine, w: LogWindow, limit: int, with_prompt: bool
                   ) -> Iterator[list[dict[str, Any]]]:
    """The window's answered rows, newest first, ``PAGE_ROWS`` at a time (a keyset cursor
    on (created_at, id)), at most ``limit`` in all; ``prompt_text`` only when asked (the
    judged outcomes key prompts by it)."""
    cols = FOLD_COLUMNS + ((rl.c.prompt_text,) if with_prompt else ())
    cursor: tuple[datetime, str] | None = None
    left = limit
    while left > 0:
        q = sa.select(*cols).where(*w.where(), rl.c.status == 200)
        if cursor is not None:
            ts, rid = cursor
            q = q.where(sa.or_(rl.c.created_at < ts,
                               sa.and_(rl.c.created_at == ts, rl.c.id < rid)))
        q = q.order_by(rl.c.created_at.desc(), rl.c.id.desc()).limit(min(PAGE_ROWS, left))
        with engine.connect() as conn:
            page = [row_dict(r) for r in conn.execute(q).mappings()]
        if not page:
            return
        yield page
        left -= len(page)
        cursor = (page[-1]["created_at"], page[-1]["id"])


def answered_count(conn: sa.Connection, w: LogWindow) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(rl)
                            .where(*w.where(), rl.c.status == 200)).scalar_one())
