"""Reading the request log back: filters, single rows, and the feedback attached to them.

Shared by the explanation API, ``tollgate logs`` and the dashboard, so all three agree on what
"the requests of tenant T in the last hour with feedback" means. Queries are synchronous
SQLAlchemy Core on the store's engine (callers on the event loop run them in a thread).

Feedback lives in the learning loop's ``observations`` table (rows with
``source = 'feedback'``, quality in [0, 1], one row per feedback event). It is read by
reflection when that table exists, so the review side works before and after it lands.
The outcomes of that table on a window's prompts are read by judged_outcomes.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine

from gateway.store.models import api_keys, request_logs, tenants
from gateway.store.periods import utcnow

# (table, score column, source value that marks a client's feedback or None)
FEEDBACK_TABLES = (("observations", "quality", "feedback"), ("feedback", "score", None))
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(value: str | datetime | None, now: datetime | None = None) -> datetime | None:
    """A point in time from ISO 8601 ("2026-11-30T10:00") or an age ("15m", "2h", "7d")."""
    if value is None or isinstance(value, datetime):
        return value
    now = now or utcnow()
    m = _DURATION.match(value)
    if m:
        return now - timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])
    try:
        t = datetime.fromisoformat(value.strip())
    except ValueError as e:
        raise ValueError(f"{value!r} is neither a time (ISO 8601) nor an age like 15m, 2h, 7d"
                         ) from e
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def parse_duration(value: str) -> timedelta:
    m = _DURATION.match(value)
    if not m:
        raise ValueError(f"{value!r} is not a duration like 15m, 2h, 7d")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


@dataclass(frozen=True)
class LogFilter:
    """Which request-log rows to read. ``None`` fields do not filter.

    status: an exact code ("200"), a class ("4xx", "5xx"), "ok" (< 400) or "error" (≥ 400).
    feedback: "with" / "without" (any feedback row), "positive" / "negative" (mean score
    ≥ 0.5 / < 0.5).
    """

    tenant_ids: tuple[str, ...] | None = None
    key_ids: tuple[str, ...] | None = None  # the keys that made them (resolve_keys)
    user_id: str | None = None  # the developer (its row's user, migration 0008)
    session_id: str | None = None  # one conversation
    route: str | None = None
    model: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    feedback: str | None = None
    router_version: str | None = None
    after_id: tuple[datetime, str] | None = None  # (created_at, id) cursor for --follow
    limit: int | None = 100
    offset: int = 0  # rows skipped (a page of the dashboard's table)
    newest_first: bool = True


def _status_clause(status: str) -> Any:
    s = status.strip().lower()
    col = request_logs.c.status
    if s == "ok":
        return col < 400
    if s == "error":
        return col >= 400
    if re.fullmatch(r"[1-5]xx", s):
        base = int(s[0]) * 100
        return sa.and_(col >= base, col < base + 100)
    if s.isdigit():
        return col == int(s)
    raise ValueError(f"status {status!r}: give a code (200), a class (4xx), ok or error")


class FeedbackSource:
    """The learning loop's feedback table, if it exists on this database."""

    def __init__(self, engine: Engine) -> None:
        self.table: sa.Table | None = None
        self.score_column: str | None = None
        self.source: str | None = None
        names = set(sa.inspect(engine).get_table_names())
        for name, score, source in FEEDBACK_TABLES:
            if name in names:
                t = sa.Table(name, sa.MetaData(), autoload_with=engine)
                if "request_id" in t.c and score in t.c:
                    self.table, self.score_column = t, score
                    self.source = source if source is not None and "source" in t.c else None
                    break

    def mine(self) -> Any:
        """Only the rows that are feedback (not shadow or judge observations)."""
        assert self.table is not None
        return sa.true() if self.source is None else self.table.c.source == self.source

    @property
    def available(self) -> bool:
        return self.table is not None

    def score(self) -> Any:
        assert self.table is not None
        if self.score_column is None:
            return sa.null()
        return sa.cast(self.table.c[self.score_column], sa.Float)

    def for_requests(self, conn: sa.Connection, ids: Sequence[str]) -> dict[str, list[dict]]:
        """request id -> its feedback rows (oldest first)."""
        if self.table is None or not ids:
            return {}
        t = self.table
        order = [t.c[c] for c in ("created_at", "id") if c in t.c]
        out: dict[str, list[dict]] = {}
        for i in range(0, len(ids), 500):
            q = (sa.select(t).where(t.c.request_id.in_(list(ids[i:i + 500])), self.mine())
                 .order_by(*order))
            for r in conn.execute(q).mappings():
                item = {k: _jsonable(v) for k, v in r.items() if k != "embedding"}
                if self.score_column is not None and r[self.score_column] is not None:
                    item["score"] = float(r[self.score_column])
                out.setdefault(r["request_id"], []).append(item)
        return out

    def clause(self, mode: str) -> Any:
        """A WHERE clause on request_logs for the ``feedback`` filter."""
        mode = mode.lower()
        if mode not in ("with", "without", "positive", "negative"):
            raise ValueError(f"feedback {mode!r}: one of with, without, positive, negative")
        if self.table is None:  # no feedback table yet: nobody has feedback
            return sa.true() if mode == "without" else sa.false()
        t = self.table
        if mode in ("with", "without"):
            has = sa.exists().where(t.c.request_id == request_logs.c.id, self.mine())
            return has if mode == "with" else ~has
        mean = (
            sa.select(sa.func.avg(self.score()))
            .where(t.c.request_id == request_logs.c.id, self.mine())
            .scalar_subquery()
        )
        return mean >= 0.5 if mode == "positive" else mean < 0.5


def _jsonable(v: Any) -> Any:
    if isinstance(v, datetime):
        return (v if v.tzinfo else v.replace(tzinfo=UTC)).isoformat()
    return v


def row_dict(r: Any) -> dict[str, Any]:
    d = dict(r)
    ts = d.get("created_at")
    if isinstance(ts, datetime) and ts.tzinfo is None:
        d["created_at"] = ts.replace(tzinfo=UTC)
    return d


def select_logs(engine: Engine, f: LogFilter, *, with_feedback: bool = True,
                skip: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Rows matching ``f``; each with ``feedback`` (a list) when ``with_feedback``; the
    columns named in ``skip`` are not read."""
    q = sa.select(*[c for c in request_logs.c if c.name not in skip])
    if f.tenant_ids is not None:
        q = q.where(request_logs.c.tenant_id.in_(list(f.tenant_ids)))
    if f.key_ids is not None:
        q = q.where(request_logs.c.key_id.in_(list(f.key_ids)))
    if f.user_id is not None:
        q = q.where(request_logs.c.user_id == f.user_id)
    if f.session_id is not None:
        q = q.where(request_logs.c.session_id == f.session_id)
    if f.route is not None:
        q = q.where(request_logs.c.route.is_(None) if f.route in ("", "passthrough")
                    else request_logs.c.route == f.route)
    if f.model is not None:
        q = q.where(request_logs.c.chosen_model == f.model)
    if f.status is not None:
        q = q.where(_status_clause(f.status))
    if f.since is not None:
        q = q.where(request_logs.c.created_at >= f.since)
    if f.until is not None:
        q = q.where(request_logs.c.created_at < f.until)
    if f.router_version is not None:
        q = q.where(request_logs.c.router_version == f.router_version)
    if f.after_id is not None:
        ts, rid = f.after_id
        q = q.where(sa.or_(request_logs.c.created_at > ts,
                           sa.and_(request_logs.c.created_at == ts, request_logs.c.id > rid)))
    with engine.connect() as conn:
        fb = FeedbackSource(engine) if (with_feedback or f.feedback) else None
        if f.feedback is not None:
            assert fb is not None
            q = q.where(fb.clause(f.feedback))
        if f.newest_first:
            q = q.order_by(request_logs.c.created_at.desc(), request_logs.c.id.desc())
        else:
            q = q.order_by(request_logs.c.created_at, request_logs.c.id)
        if f.limit is not None:
            q = q.limit(f.limit)
        if f.offset:
            q = q.offset(f.offset)
        rows = [row_dict(r) for r in conn.execute(q).mappings()]
        if with_feedback and fb is not None:
            by_id = fb.for_requests(conn, [r["id"] for r in rows])
            for r in rows:
                r["feedback"] = by_id.get(r["id"], [])
    return rows


def fetch_log(engine: Engine, request_id: str) -> dict[str, Any] | None:
    """One request's row with its feedback, or None."""
    with engine.connect() as conn:
        r = conn.execute(
            sa.select(request_logs).where(request_logs.c.id == request_id)
        ).mappings().first()
        if r is None:
            return None
        row = row_dict(r)
        row["feedback"] = FeedbackSource(engine).for_requests(conn, [request_id]).get(
            request_id, [])
    return row


def tenant_names(engine: Engine, ids: Iterable[str] | None = None) -> dict[str, str]:
    """tenant id -> name."""
    q = sa.select(tenants.c.id, tenants.c.name)
    if ids is not None:
        q = q.where(tenants.c.id.in_(list(ids)))
    with engine.connect() as conn:
        return {r.id: r.name for r in conn.execute(q)}


def resolve_tenants(engine: Engine, names_or_ids: Iterable[str]) -> tuple[str, ...]:
    """Tenant ids for names or ids; ValueError naming the unknown ones."""
    wanted = list(names_or_ids)
    q = sa.select(tenants.c.id, tenants.c.name).where(
        sa.or_(tenants.c.id.in_(wanted), tenants.c.name.in_(wanted)))
    with engine.connect() as conn:
        found = list(conn.execute(q))
    known = {r.id for r in found} | {r.name for r in found}
    missing = [w for w in wanted if w not in known]
    if missing:
        raise ValueError(f"unknown tenant(s): {', '.join(missing)}")
    return tuple(sorted({r.id for r in found}))


def resolve_keys(engine: Engine, refs: Iterable[str]) -> tuple[str, ...]:
    """Key ids for key ids, tokens (the keyed hash /key/generate answers) or aliases;
    ValueError naming the unknown ones."""
    wanted = list(refs)
    q = sa.select(api_keys.c.id, api_keys.c.key_hash, api_keys.c.name).where(sa.or_(
        api_keys.c.id.in_(wanted), api_keys.c.key_hash.in_(wanted),
        api_keys.c.name.in_(wanted)))
    with engine.connect() as conn:
        found = list(conn.execute(q))
    known = {v for r in found for v in (r.id, r.key_hash, r.name)}
    missing = [w for w in wanted if w not in known]
    if missing:
        raise ValueError(f"unknown key(s): {', '.join(missing)}")
    return tuple(sorted({r.id for r in found}))


def feedback_scores(row: dict[str, Any]) -> list[float]:
    return [float(f["score"]) for f in row.get("feedback") or [] if f.get("score") is not None]


def flat(row: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The scalar view of a row (CSV and the table)."""
    attempts = row.get("attempts") or []
    scores = feedback_scores(row)
    ts = row.get("created_at")
    return {
        "id": row["id"],
        "created_at": ts.isoformat() if isinstance(ts, datetime) else ts,
        "tenant_id": row.get("tenant_id"),
        "tenant": names.get(row.get("tenant_id") or "", row.get("tenant_id")),
        "route": row.get("route") or "passthrough",
        "lam": row.get("lam"),
        "router_version": row.get("router_version"),
        "chosen_model": row.get("chosen_model"),
        "status": row.get("status"),
        "prompt_tokens": row.get("prompt_tokens"),
        "completion_tokens": row.get("completion_tokens"),
        "cost_usd": row.get("cost_usd"),
        "reserved_usd": row.get("reserved_usd"),
        # reported past the reservation: the operator's, never charged (bound_factors.py)
        "overrun_usd": sum(float(a.get("overrun_usd") or 0) for a in attempts
                           if isinstance(a, dict)),
        "latency_ms": row.get("latency_ms"),
        "ttft_ms": row.get("ttft_ms"),
        "stream": row.get("stream"),
        "attempts": len(attempts),
        "fallbacks": " > ".join(f"{a.get('model')}:{a.get('status')}" for a in attempts[1:]),
        "equivalent": " ".join(row.get("equivalent") or []),
        "reason": row.get("reason"),
        "error": row.get("error"),
        "feedback_count": len(row.get("feedback") or []),
        "feedback_mean": sum(scores) / len(scores) if scores else None,
        "key_id": row.get("key_id"),
        "user_id": row.get("user_id"),
        "session_id": row.get("session_id"),
    }
