"""LiteLLM's teams on Tollgate's tenants (synchronous; `LiteLLMAdmin` runs these in the store's
threads): a team is a tenant whose id is the ``team_id`` and whose name is the ``team_alias``.

A team's ``max_budget`` is the tenant's hard budget, its ``budget_duration`` the tenant's
period (only the durations a period is: ``1d``/``24h`` daily, ``7d``/``1w`` weekly, ``1mo``
monthly; none is a total budget), its ``models`` the policy's ``allowed_models``, its
``rpm_limit`` / ``tpm_limit`` / ``max_parallel_requests`` the policy's rate limits
(gateway/reliability/guards.py), its ``metadata`` ``tenants.team_metadata``. Tenants made for
one key (no ``team_id`` at /key/generate) and the master key's tenant are not teams.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

import gateway.store.auth_epoch as auth_epoch  # noqa: PLR0402 - not through __init__ (a cycle)
import gateway.store.tenants as admin
from gateway.store.errors import Conflict, NotFound
from gateway.store.key_admin import MASTER_TENANT
from gateway.store.models import api_keys, tenants
from gateway.store.money import usd_to_nusd
from gateway.store.periods import period_end, period_start_s
from gateway.store.policy import TenantPolicy
from gateway.store.records import TenantInfo

# LiteLLM budget_duration → tenant period (the durations that are one)
PERIODS = {"1d": "daily", "24h": "daily", "7d": "weekly", "1w": "weekly", "1mo": "monthly"}
DURATIONS = {"daily": "1d", "weekly": "7d", "monthly": "1mo", "total": None}
LIMITS = {"rpm_limit": "requests_per_minute", "tpm_limit": "tokens_per_minute",
          "max_parallel_requests": "max_parallel_requests"}


def period_of(budget_duration: str | None) -> str:
    """The tenant period of a LiteLLM ``budget_duration``; ValueError for one that is none."""
    if budget_duration is None:
        return "total"
    if budget_duration not in PERIODS:
        raise ValueError(f"budget_duration {budget_duration!r}: a team's budget resets by "
                         f"calendar period here; use one of {', '.join(PERIODS)} (or none)")
    return PERIODS[budget_duration]


@dataclass(frozen=True)
class Team:
    """A tenant in LiteLLM's team terms (``info``: its ledger)."""

    info: TenantInfo
    metadata: dict[str, Any]
    budget_reset_at: datetime | None

    @property
    def team_id(self) -> str:
        return self.info.id


def _team(engine: Engine, tenant_id: str, now: datetime) -> Team:
    info = admin.get_tenant(engine, tenant_id, now)
    with engine.connect() as conn:
        meta = conn.execute(select(tenants.c.team_metadata)
                            .where(tenants.c.id == tenant_id)).scalar()
    return Team(info, dict(meta or {}), period_end(info.period, now))


def _is_team():
    return (tenants.c.own_key_id.is_(None), tenants.c.name != MASTER_TENANT)


def team_id_of(engine: Engine, team: str, *, live: bool = True) -> str:
    """The tenant id of team ``team`` (its id or alias); NotFound otherwise."""
    where = [(tenants.c.id == team) | (tenants.c.name == team), *_is_team()]
    if live:
        where.append(tenants.c.disabled_at.is_(None))
    with engine.connect() as conn:
        tid = conn.execute(select(tenants.c.id).where(*where)).scalar()
    if tid is None:
        raise NotFound(f"Team not found, passed team_id={team}")
    return str(tid)


def new_team(engine: Engine, now: datetime, *, team_id: str | None, alias: str | None,
             budget_usd: float | None, period: str, policy: TenantPolicy,
             metadata: dict[str, Any] | None) -> Team:
    tid = team_id or str(uuid.uuid4())
    try:
        with engine.begin() as conn:
            conn.execute(insert(tenants).values(
                id=tid, name=alias or tid, created_at=now,
                budget_nusd=None if budget_usd is None else usd_to_nusd(budget_usd),
                period=period, period_start_s=period_start_s(period, now), spent_nusd=0,
                reserved_nusd=0, overrun_nusd=0, policy=policy.to_dict(),
                team_metadata=metadata))
    except IntegrityError as exc:
        raise Conflict(f"a team with team_id {tid!r} or team_alias {alias or tid!r} "
                       "already exists") from exc
    return _team(engine, tid, now)


def get_team(engine: Engine, team: str, now: datetime) -> Team:
    return _team(engine, team_id_of(engine, team), now)


def list_teams(engine: Engine, now: datetime, ids: list[str] | None = None) -> list[Team]:
    where = [tenants.c.disabled_at.is_(None), *_is_team()]
    if ids is not None:
        where.append(tenants.c.id.in_(ids))
    with engine.connect() as conn:
        rows = conn.execute(select(tenants.c.id).where(*where)
                            .order_by(tenants.c.name)).scalars().all()
    return [_team(engine, str(t), now) for t in rows]


def rename_team(engine: Engine, tenant_id: str, now: datetime, *, alias: Any = None,
                metadata: Any = None) -> Team:
    """Set the alias and/or metadata (None leaves each as it is)."""
    values: dict[str, Any] = {}
    if alias is not None:
        values["name"] = alias
    if metadata is not None:
        values["team_metadata"] = metadata
    if values:
        try:
            with engine.begin() as conn:
                conn.execute(update(tenants).where(tenants.c.id == tenant_id).values(**values))
        except IntegrityError as exc:
            raise Conflict(f"a team with team_alias {alias!r} already exists") from exc
    return _team(engine, tenant_id, now)


def delete_teams(engine: Engine, tenant_ids: list[str], now: datetime) -> None:
    """Disable the teams' tenants and revoke their keys, in one transaction (history stays)."""
    with engine.begin() as conn:
        conn.execute(update(tenants).where(tenants.c.id.in_(tenant_ids))
                     .values(disabled_at=now))
        conn.execute(update(api_keys).where(api_keys.c.tenant_id.in_(tenant_ids),
                                            api_keys.c.revoked_at.is_(None))
                     .values(revoked_at=now))
        auth_epoch.bump(conn)
