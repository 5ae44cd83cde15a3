"""Tenant and API-key administration (synchronous; the CLI calls it directly, the async
`Store` through a thread)."""

from __future__ import annotations

import enum
import hmac
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Row, insert, select, update
from sqlalchemy.exc import IntegrityError

import gateway.store.auth_epoch as auth_epoch  # noqa: PLR0402 - not through __init__ (a cycle)
import gateway.store.keys as keylib  # not ``from gateway.store``: no cycle through __init__
from gateway.store.errors import Conflict, NotFound
from gateway.store.ledger import effective_spent, set_budget
from gateway.store.models import api_keys, tenants
from gateway.store.money import nusd_to_usd, usd_to_nusd
from gateway.store.periods import period_start_s, validate_period
from gateway.store.policy import TenantPolicy
from gateway.store.records import KeyInfo, NewKey, Tenant, TenantInfo


def _tenant_info(row: Row, now: datetime) -> TenantInfo:
    start = max(row.period_start_s, period_start_s(row.period, now))
    return TenantInfo(
        id=row.id, name=row.name, budget_usd=nusd_to_usd(row.budget_nusd), period=row.period,
        period_start=datetime.fromtimestamp(start, tz=now.tzinfo),
        spent_usd=effective_spent(row.spent_nusd, row.period, row.period_start_s, now) / 1e9,
        reserved_usd=row.reserved_nusd / 1e9,
        policy=TenantPolicy.from_stored(row.policy, f"tenant {row.id}"),
        created_at=row.created_at, disabled_at=row.disabled_at,
        overrun_usd=row.overrun_nusd / 1e9,
    )


def resolve_tenant_id(engine: Engine, id_or_name: str) -> str:
    """Accept a tenant's id or its name (what a human types on the CLI)."""
    with engine.connect() as conn:
        tid = conn.execute(select(tenants.c.id).where(
            (tenants.c.id == id_or_name) | (tenants.c.name == id_or_name))).scalar()
    if tid is None:
        raise NotFound(f"no tenant {id_or_name!r}")
    return str(tid)


def create_key(engine: Engine, secret: bytes, tenant_id: str, now: datetime,
               name: str | None = None) -> NewKey:
    """Issue a key for the tenant; the plaintext is returned here and never again."""
    key = keylib.generate_key()
    kid = "key_" + uuid.uuid4().hex[:16]
    with engine.begin() as conn:
        tname = conn.execute(select(tenants.c.name).where(tenants.c.id == tenant_id)).scalar()
        if tname is None:
            raise NotFound(f"no tenant {tenant_id!r}")
        conn.execute(insert(api_keys).values(
            id=kid, tenant_id=tenant_id, key_hash=keylib.hash_key(secret, key),
            prefix=keylib.display_prefix(key), name=name, created_at=now))
    info = KeyInfo(kid, tenant_id, tname, keylib.display_prefix(key), name, now, None)
    return NewKey(info=info, api_key=key)


def create_tenant(engine: Engine, secret: bytes, name: str, now: datetime, *,
                  budget_usd: float | None = None, period: str = "total",
                  policy: TenantPolicy | Mapping[str, Any] | None = None
                  ) -> tuple[TenantInfo, NewKey]:
    """Create a tenant with its first API key (``policy`` validated: `InvalidPolicy`)."""
    validate_period(period)
    stored_policy = TenantPolicy.parse(policy).to_dict()
    if not name or len(name) > 200:
        raise ValueError("a tenant name must have 1 to 200 characters")
    budget = None if budget_usd is None else usd_to_nusd(budget_usd)
    if budget is not None and budget < 0:
        raise ValueError("a budget cannot be negative")
    tid = uuid.uuid4().hex
    try:
        with engine.begin() as conn:
            conn.execute(insert(tenants).values(
                id=tid, name=name, created_at=now, budget_nusd=budget, period=period,
                period_start_s=period_start_s(period, now), spent_nusd=0, reserved_nusd=0,
                overrun_nusd=0, policy=stored_policy))
    except IntegrityError as exc:
        raise Conflict(f"a tenant named {name!r} already exists") from exc
    new_key = create_key(engine, secret, tid, now, name="default")
    return get_tenant(engine, tid, now), new_key


def get_tenant(engine: Engine, tenant_id: str, now: datetime) -> TenantInfo:
    with engine.connect() as conn:
        row = conn.execute(select(tenants).where(tenants.c.id == tenant_id)).first()
    if row is None:
        raise NotFound(f"no tenant {tenant_id!r}")
    return _tenant_info(row, now)


def list_tenants(engine: Engine, now: datetime, include_disabled: bool = False
                 ) -> list[TenantInfo]:
    query = select(tenants).order_by(tenants.c.created_at, tenants.c.name)
    if not include_disabled:
        query = query.where(tenants.c.disabled_at.is_(None))
    with engine.connect() as conn:
        return [_tenant_info(r, now) for r in conn.execute(query)]


class Unchanged(enum.Enum):
    """Marks an argument the caller leaves as it is (None already means "unlimited")."""

    UNCHANGED = "unchanged"


UNCHANGED = Unchanged.UNCHANGED


def update_tenant(engine: Engine, tenant_id: str, now: datetime, *,
                  budget_usd: float | None | Unchanged = UNCHANGED,
                  period: str | None = None, reset: bool = False,
                  policy: TenantPolicy | Mapping[str, Any] | None = None) -> TenantInfo:
    """Change budget/period (see `ledger.set_budget`) and/or replace the policy (validated
    first: a bad policy changes nothing)."""
    stored_policy = None if policy is None else TenantPolicy.parse(policy).to_dict()
    if budget_usd is not UNCHANGED or period is not None or reset:
        if budget_usd is UNCHANGED:
            budget_nusd = _current_budget(engine, tenant_id)
        else:
            budget_nusd = None if budget_usd is None else usd_to_nusd(budget_usd)
        set_budget(engine, tenant_id, budget_nusd, period, now, reset=reset)
    with engine.begin() as conn:
        if conn.execute(update(tenants).where(tenants.c.id == tenant_id).values(
                **({"policy": stored_policy} if stored_policy is not None else
                   {"id": tenants.c.id}))).rowcount != 1:
            raise NotFound(f"no tenant {tenant_id!r}")
        auth_epoch.bump(conn)  # every replica re-reads the tenant (budget, policy) at once
    return get_tenant(engine, tenant_id, now)


def _current_budget(engine: Engine, tenant_id: str) -> int | None:
    with engine.connect() as conn:
        row = conn.execute(select(tenants.c.budget_nusd)
                           .where(tenants.c.id == tenant_id)).first()
    if row is None:
        raise NotFound(f"no tenant {tenant_id!r}")
    return row.budget_nusd


def disable_tenant(engine: Engine, tenant_id: str, now: datetime) -> TenantInfo:
    """Disable a tenant: its keys stop authenticating; its history stays."""
    with engine.begin() as conn:
        if conn.execute(update(tenants).where(tenants.c.id == tenant_id)
                        .values(disabled_at=now)).rowcount != 1:
            raise NotFound(f"no tenant {tenant_id!r}")
        auth_epoch.bump(conn)  # after the write: serialised with other writers on SQLite too
    return get_tenant(engine, tenant_id, now)


def _key_query():
    return (select(api_keys, tenants.c.name.label("tenant_name"))
            .join(tenants, tenants.c.id == api_keys.c.tenant_id))


def _key_info(row: Row) -> KeyInfo:
    return KeyInfo(row.id, row.tenant_id, row.tenant_name, row.prefix, row.name,
                   row.created_at, row.revoked_at)


def list_keys(engine: Engine, tenant_id: str | None = None,
              include_revoked: bool = True) -> list[KeyInfo]:
    query = _key_query().order_by(api_keys.c.created_at, api_keys.c.id)
    if tenant_id is not None:
        query = query.where(api_keys.c.tenant_id == tenant_id)
    if not include_revoked:
        query = query.where(api_keys.c.revoked_at.is_(None))
    with engine.connect() as conn:
        return [_key_info(r) for r in conn.execute(query)]


def revoke_key(engine: Engine, key_id: str, now: datetime) -> KeyInfo:
    """Revoke a key (idempotent: revoking twice keeps the first time)."""
    with engine.begin() as conn:
        conn.execute(update(api_keys).where(api_keys.c.id == key_id,
                                            api_keys.c.revoked_at.is_(None))
                     .values(revoked_at=now))
        auth_epoch.bump(conn)  # in the revocation's transaction: no replica misses it
        row = conn.execute(_key_query().where(api_keys.c.id == key_id)).first()
    if row is None:
        raise NotFound(f"no key {key_id!r}")
    return _key_info(row)


def lookup_key(engine: Engine, digest: str) -> Tenant | None:
    """The tenant whose key hashes to `digest`, or None (unknown, revoked, tenant disabled)."""
    return lookup_key_at(engine, digest)[1]


def read_epoch(engine: Engine) -> int:
    with engine.connect() as conn:
        return auth_epoch.read(conn)


def lookup_key_at(engine: Engine, digest: str) -> tuple[int, Tenant | None]:
    """(the revocation epoch, ``lookup_key``): the epoch is read first, so the answer holds
    at least as of that epoch (a revocation after it moves the epoch on)."""
    with engine.connect() as conn:
        epoch = auth_epoch.read(conn)
        row = conn.execute(
            select(api_keys.c.id, api_keys.c.key_hash, tenants.c.id.label("tenant_id"),
                   tenants.c.name, tenants.c.budget_nusd, tenants.c.period, tenants.c.policy,
                   api_keys.c.models, api_keys.c.expires_at,
                   api_keys.c.budget_nusd.label("key_budget_nusd"),
                   api_keys.c.budget_duration, api_keys.c.rpm_limit, api_keys.c.tpm_limit,
                   api_keys.c.max_parallel_requests, api_keys.c.user_id, tenants.c.own_key_id)
            .join(tenants, tenants.c.id == api_keys.c.tenant_id)
            .where(api_keys.c.key_hash == digest, api_keys.c.revoked_at.is_(None),
                   tenants.c.disabled_at.is_(None))
        ).first()
    # The index lookup already matched; compare again in constant time as a second guard.
    if row is None or not hmac.compare_digest(row.key_hash, digest):
        return epoch, None
    return epoch, Tenant(
        id=row.tenant_id, name=row.name, budget_usd=nusd_to_usd(row.budget_nusd),
        period=row.period, key_id=row.id,
        policy=TenantPolicy.from_stored(row.policy, f"tenant {row.tenant_id}"),
        key_models=None if row.models is None else tuple(str(m) for m in row.models),
        key_expires_at=row.expires_at,
        key_budgeted=row.key_budget_nusd is not None or row.budget_duration is not None,
        key_budget_duration=row.budget_duration, key_rpm_limit=row.rpm_limit,
        key_tpm_limit=row.tpm_limit, key_max_parallel_requests=row.max_parallel_requests,
        key_user_id=row.user_id, key_budget_usd=nusd_to_usd(row.key_budget_nusd),
        key_own_tenant=row.own_key_id == row.id)
