"""LiteLLM's spend logs read from Tollgate's request log (synchronous; `LiteLLMAdmin` runs it
in the store's threads): one row per request with its key's token (``api_key``, the key's
keyed hash), its user, its session, its team and what it cost; newest first.

Every read is bounded (issue 48, item 8): a page of at most ``PAGE_MAX`` rows, only the
columns the answer needs (never the routing decision's JSON or a prompt), and a day summary
aggregated by the database (at most ``GROUPS_MAX`` day × user × model × key groups), so
one call neither builds a 175 MB answer nor holds a worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.sql.elements import ColumnElement

from gateway.store.key_admin import MASTER_TENANT
from gateway.store.models import api_keys, request_logs, tenants

PAGE_MAX = 1000  # rows per page of /spend/logs
GROUPS_MAX = 10_000  # day × user × model × key groups of a summary


@dataclass(frozen=True)
class SpendFilter:
    """What /spend/logs filters by (None: not by it); ``end`` is excluded."""

    key_hash: str | None = None
    user_id: str | None = None
    team_id: str | None = None
    request_id: str | None = None
    session_id: str | None = None
    start: datetime | None = None
    end: datetime | None = None


def _user() -> ColumnElement[Any]:
    """The row's user: recorded on it (migration 0008), else its key's (older rows)."""
    return func.coalesce(request_logs.c.user_id, api_keys.c.user_id)


def _joined() -> Any:
    return (request_logs.outerjoin(api_keys, api_keys.c.id == request_logs.c.key_id)
            .outerjoin(tenants, tenants.c.id == request_logs.c.tenant_id))


def _where(q: Any, f: SpendFilter) -> Any:
    if f.key_hash is not None:
        q = q.where(api_keys.c.key_hash == f.key_hash)
    if f.user_id is not None:
        q = q.where(_user() == f.user_id)
    if f.team_id is not None:  # by id or alias (a deleted team's too)
        q = q.where((request_logs.c.tenant_id == f.team_id) | (tenants.c.name == f.team_id))
    if f.request_id is not None:
        q = q.where(request_logs.c.id == f.request_id)
    if f.session_id is not None:
        q = q.where(request_logs.c.session_id == f.session_id)
    if f.start is not None:
        q = q.where(request_logs.c.created_at >= f.start)
    if f.end is not None:
        q = q.where(request_logs.c.created_at < f.end)
    return q


def spend_rows(engine: Engine, f: SpendFilter, page: int = 1, page_size: int = PAGE_MAX
               ) -> tuple[list[dict[str, Any]], bool]:
    """The page ``page`` (from 1) of request-log rows that match ``f``, as LiteLLM's
    spend-log fields, and whether more rows follow."""
    size = max(1, min(page_size, PAGE_MAX))
    t = request_logs.c
    q = (select(t.id, t.tenant_id, t.created_at, t.route, t.chosen_model, t.prompt_tokens,
                t.completion_tokens, t.cost_usd, t.reserved_usd, t.latency_ms, t.status,
                t.error, t.reason, t.session_id, t.tags, t.key_id,
                _user().label("user_id"), api_keys.c.key_hash, tenants.c.own_key_id,
                tenants.c.name.label("tenant_name"))
         .select_from(_joined()))
    q = _where(q, f).order_by(t.created_at.desc(), t.id.desc())
    q = q.offset((page - 1) * size).limit(size + 1)
    with engine.connect() as conn:
        rows = [_row(r) for r in conn.execute(q)]
    return rows[:size], len(rows) > size


def _day(engine: Engine) -> ColumnElement[Any]:
    """A row's UTC day as YYYY-MM-DD, in the database's own words."""
    at = request_logs.c.created_at
    if engine.dialect.name == "postgresql":
        return func.to_char(func.timezone("UTC", at), "YYYY-MM-DD")
    return func.strftime("%Y-%m-%d", at)  # SQLite stores naive UTC (gateway/store/types.py)


def spend_groups(engine: Engine, f: SpendFilter) -> tuple[list[dict[str, Any]], bool]:
    """The spend per day, user, model and key token of the rows that match ``f``, summed by
    the database; and whether there were more than ``GROUPS_MAX`` groups."""
    day = _day(engine).label("day")
    user = func.coalesce(_user(), "").label("user")
    model = func.coalesce(request_logs.c.chosen_model, "").label("model")
    key = func.coalesce(api_keys.c.key_hash, "").label("api_key")
    spend = func.coalesce(func.sum(request_logs.c.cost_usd), 0.0).label("spend")
    q = _where(select(day, user, model, key, spend).select_from(_joined()), f)
    q = q.group_by(day, user, model, key).order_by(day).limit(GROUPS_MAX + 1)
    with engine.connect() as conn:
        groups = [{"day": r.day, "user": r.user, "model": r.model, "api_key": r.api_key,
                   "spend": float(r.spend or 0.0)} for r in conn.execute(q)]
    return groups[:GROUPS_MAX], len(groups) > GROUPS_MAX


def _row(r: Any) -> dict[str, Any]:
    prompt, completion = r.prompt_tokens or 0, r.completion_tokens or 0
    end = r.created_at + timedelta(milliseconds=r.latency_ms or 0)
    embedding = r.reason == "embeddings"
    return {
        "request_id": r.id,
        "call_type": "aembedding" if embedding else "acompletion",
        "api_key": r.key_hash or "",
        "spend": float(r.cost_usd or 0.0),
        "total_tokens": prompt + completion,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "startTime": r.created_at.isoformat(),
        "endTime": end.isoformat(),
        "model": r.chosen_model or "",
        "model_group": r.route or r.chosen_model or "",
        "user": r.user_id or "",
        "team_id": (None if r.own_key_id is not None or r.tenant_name == MASTER_TENANT
                    else r.tenant_id),
        "session_id": r.session_id,
        "metadata": {"status": r.status, "error": r.error, "route": r.route,
                     "reserved_usd": r.reserved_usd, "tenant_name": r.tenant_name,
                     "session_id": r.session_id, "key_id": r.key_id},
        "cache_hit": "False",
        "request_tags": list(r.tags or []),
        "messages": {},
        "response": {},
    }
