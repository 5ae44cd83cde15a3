"""The dashboard's per-key and per-developer view (issue 47, item 5): for each key (or each
LiteLLM user), its requests, what they were billed (the settled cost on the log rows: the
bill, never an estimate) and its budget, over a window.

Who sees what: the admin every key and user (or one tenant's); a tenant key its own key
(``by=key``) and its own user (``by=user``), never a teammate's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine

from gateway.store.models import api_keys, request_logs, users

MAX_GROUPS = 1000


@dataclass(frozen=True)
class SpendScope:
    since: datetime
    tenant_ids: tuple[str, ...] | None = None  # None: every tenant (the admin)
    key_id: str | None = None  # a tenant key: its own only
    user_id: str | None = None


def spend_by_key(engine: Engine, s: SpendScope) -> list[dict[str, Any]]:
    """Per key: requests, billed USD, its max_budget and lifetime spend, its user."""
    rl = request_logs.c
    q = (sa.select(rl.key_id, sa.func.count().label("requests"),
                   sa.func.coalesce(sa.func.sum(rl.cost_usd), 0.0).label("billed"),
                   api_keys.c.name, api_keys.c.user_id, api_keys.c.budget_nusd,
                   api_keys.c.spent_nusd)
         .select_from(request_logs.join(api_keys, api_keys.c.id == rl.key_id))
         .where(rl.created_at >= s.since)
         .group_by(rl.key_id, api_keys.c.name, api_keys.c.user_id, api_keys.c.budget_nusd,
                   api_keys.c.spent_nusd)
         .order_by(sa.desc("billed")).limit(MAX_GROUPS))
    if s.tenant_ids is not None:
        q = q.where(rl.tenant_id.in_(list(s.tenant_ids)))
    if s.key_id is not None:
        q = q.where(rl.key_id == s.key_id)
    with engine.connect() as conn:
        return [{"key_id": r.key_id, "key_alias": r.name, "user_id": r.user_id,
                 "requests": int(r.requests), "billed_usd": float(r.billed),
                 "max_budget_usd": None if r.budget_nusd is None else r.budget_nusd / 1e9,
                 "spend_usd": (r.spent_nusd or 0) / 1e9} for r in conn.execute(q)]


def spend_by_user(engine: Engine, s: SpendScope) -> list[dict[str, Any]]:
    """Per developer (the row's user): requests, billed USD, keys used, its max_budget."""
    rl = request_logs.c
    q = (sa.select(rl.user_id, sa.func.count().label("requests"),
                   sa.func.coalesce(sa.func.sum(rl.cost_usd), 0.0).label("billed"),
                   sa.func.count(sa.distinct(rl.key_id)).label("keys"),
                   users.c.max_budget_usd)
         .select_from(request_logs.outerjoin(users, users.c.id == rl.user_id))
         .where(rl.created_at >= s.since, rl.user_id.is_not(None))
         .group_by(rl.user_id, users.c.max_budget_usd)
         .order_by(sa.desc("billed")).limit(MAX_GROUPS))
    if s.tenant_ids is not None:
        q = q.where(rl.tenant_id.in_(list(s.tenant_ids)))
    if s.user_id is not None:
        q = q.where(rl.user_id == s.user_id)
    with engine.connect() as conn:
        return [{"user_id": r.user_id, "requests": int(r.requests),
                 "billed_usd": float(r.billed), "keys": int(r.keys),
                 "max_budget_usd": r.max_budget_usd} for r in conn.execute(q)]
