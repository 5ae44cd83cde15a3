"""LiteLLM's spend logs read from Tollgate's request log (synchronous; `LiteLLMAdmin` runs it
in the store's threads): one row per request with its key's token (``api_key``, the key's
keyed hash), its key's user, its team and what it cost; newest first, at most ``CAP`` rows
(LiteLLM's cap on /spend/logs)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select

from gateway.store.key_admin import MASTER_TENANT
from gateway.store.models import api_keys, request_logs, tenants

CAP = 10_000


@dataclass(frozen=True)
class SpendFilter:
    """What /spend/logs filters by (None: not by it); ``end`` is excluded."""

    key_hash: str | None = None
    user_id: str | None = None
    team_id: str | None = None
    request_id: str | None = None
    start: datetime | None = None
    end: datetime | None = None


def spend_rows(engine: Engine, f: SpendFilter) -> list[dict[str, Any]]:
    """The request-log rows that match ``f``, as LiteLLM's spend-log fields."""
    q = (select(request_logs, api_keys.c.key_hash, api_keys.c.user_id,
                tenants.c.own_key_id, tenants.c.name.label("tenant_name"))
         .select_from(request_logs
                      .outerjoin(api_keys, api_keys.c.id == request_logs.c.key_id)
                      .outerjoin(tenants, tenants.c.id == request_logs.c.tenant_id)))
    if f.key_hash is not None:
        q = q.where(api_keys.c.key_hash == f.key_hash)
    if f.user_id is not None:
        q = q.where(api_keys.c.user_id == f.user_id)
    if f.team_id is not None:  # by id or alias (a deleted team's too)
        q = q.where((request_logs.c.tenant_id == f.team_id) | (tenants.c.name == f.team_id))
    if f.request_id is not None:
        q = q.where(request_logs.c.id == f.request_id)
    if f.start is not None:
        q = q.where(request_logs.c.created_at >= f.start)
    if f.end is not None:
        q = q.where(request_logs.c.created_at < f.end)
    q = q.order_by(request_logs.c.created_at.desc()).limit(CAP)
    with engine.connect() as conn:
        return [_row(r) for r in conn.execute(q)]


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
        "metadata": {"status": r.status, "error": r.error, "route": r.route,
                     "reserved_usd": r.reserved_usd, "tenant_name": r.tenant_name},
        "cache_hit": "False",
        "request_tags": [],
        "messages": {},
        "response": {},
    }
