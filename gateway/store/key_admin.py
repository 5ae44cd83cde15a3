"""LiteLLM's key fields on Tollgate's keys: generate, read, update, delete and list keys with a
budget, a reset period, an expiry, a model list, metadata, a user and a team (synchronous; the
async `KeyStore` of gateway/store/key_store.py runs these in the store's threads).

A team is a tenant (``team_id``: its id or name). A key generated without one gets a tenant of
its own, named ``key-<key id>``, with no budget of its own: the key's ``max_budget`` is then
the only limit; deleting the key disables that tenant too. Every change that could make a key
stop working or narrow what it may do bumps the revocation epoch in its transaction
(gateway/store/auth_epoch.py), so no replica serves the old key from its cache afterwards.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Row, func, insert, select, update
from sqlalchemy.exc import IntegrityError

import gateway.store.auth_epoch as auth_epoch  # noqa: PLR0402 - not through __init__ (a cycle)
import gateway.store.keys as keylib
from gateway.store.durations import after
from gateway.store.errors import Conflict, NotFound
from gateway.store.key_ledger import effective_key_spent
from gateway.store.models import api_keys, tenants
from gateway.store.money import usd_to_nusd
from gateway.store.periods import period_start_s
from gateway.store.policy import TenantPolicy
from gateway.store.records import Tenant

OWN_TENANT_PREFIX = "key-"
MASTER_TENANT = "master-key"  # the tenant the admin (master) key's own calls are booked to
UNSET: Any = object()  # a field the caller leaves as it is (None means "none" / "unlimited")


class UnknownTeam(NotFound):
    """``team_id`` names no live tenant."""


class AliasTaken(Conflict):
    """Another live key of the same tenant has this ``key_alias`` (aliases are unique per
    tenant, so a delete by alias names one key)."""


class AmbiguousAlias(Conflict):
    """A delete by ``key_aliases`` names an alias more than one live key has (keys made
    before aliases were unique, or of different tenants): deleting them all is refused."""


@dataclass(frozen=True)
class KeyDetails:
    """One key with LiteLLM's fields; ``token`` is the key's keyed hash (LiteLLM's "token")."""

    id: str
    token: str
    prefix: str
    key_alias: str | None
    tenant_id: str
    tenant_name: str
    own_tenant: bool
    user_id: str | None
    models: list[str]
    metadata: dict[str, Any]
    max_budget_usd: float | None
    spend_usd: float
    reserved_usd: float
    budget_duration: str | None
    budget_reset_at: datetime | None
    expires: datetime | None
    created_at: datetime
    revoked_at: datetime | None
    limits: dict[str, int | None] | None = None  # LIMIT_FIELDS (gateway/reliability/guards.py)


LIMIT_FIELDS = ("rpm_limit", "tpm_limit", "max_parallel_requests")  # api_keys columns too


@dataclass(frozen=True)
class KeyFields:
    """What ``generate`` and ``update`` set; ``UNSET`` leaves a field as it is."""

    key_alias: Any = UNSET
    max_budget: Any = UNSET
    budget_duration: Any = UNSET
    duration: Any = UNSET
    models: Any = UNSET
    metadata: Any = UNSET
    user_id: Any = UNSET
    spend: Any = UNSET
    rpm_limit: Any = UNSET
    tpm_limit: Any = UNSET
    max_parallel_requests: Any = UNSET


def _values(fields: KeyFields, now: datetime) -> dict[str, Any]:
    """The api_keys columns ``fields`` sets."""
    out: dict[str, Any] = {}
    if fields.key_alias is not UNSET:
        out["name"] = fields.key_alias
    if fields.max_budget is not UNSET:
        out["budget_nusd"] = None if fields.max_budget is None else usd_to_nusd(fields.max_budget)
    if fields.budget_duration is not UNSET:  # a new period starts now
        out["budget_duration"] = fields.budget_duration
        out["budget_reset_at_s"] = (None if fields.budget_duration is None else
                                    int(after(fields.budget_duration, now).timestamp()))
    if fields.duration is not UNSET:
        out["expires_at"] = None if fields.duration is None else after(fields.duration, now)
    if fields.models is not UNSET:
        out["models"] = list(fields.models) if fields.models else None  # [] = all, as LiteLLM
    if fields.metadata is not UNSET:
        out["key_metadata"] = fields.metadata
    if fields.user_id is not UNSET:
        out["user_id"] = fields.user_id
    if fields.spend is not UNSET:
        out["spent_nusd"] = usd_to_nusd(fields.spend)
    for name in LIMIT_FIELDS:
        if (value := getattr(fields, name)) is not UNSET:
            out[name] = value
    return out


def _query():
    return (select(api_keys, tenants.c.name.label("tenant_name"), tenants.c.own_key_id)
            .join(tenants, tenants.c.id == api_keys.c.tenant_id))


def _details(row: Row, now: datetime) -> KeyDetails:
    now_s = int(now.timestamp())
    reset = row.budget_reset_at_s
    if reset is not None and reset <= now_s and row.budget_duration:  # as the next booking
        reset = int(after(row.budget_duration, now).timestamp())
    return KeyDetails(
        id=row.id, token=row.key_hash, prefix=row.prefix, key_alias=row.name,
        tenant_id=row.tenant_id, tenant_name=row.tenant_name,
        own_tenant=row.own_key_id == row.id, user_id=row.user_id, models=list(row.models or []),
        metadata=dict(row.key_metadata or {}),
        max_budget_usd=None if row.budget_nusd is None else row.budget_nusd / 1e9,
        spend_usd=effective_key_spent(row.spent_nusd, row.budget_reset_at_s, now_s) / 1e9,
        reserved_usd=row.reserved_nusd / 1e9, budget_duration=row.budget_duration,
        budget_reset_at=None if reset is None else datetime.fromtimestamp(reset, now.tzinfo),
        expires=row.expires_at, created_at=row.created_at, revoked_at=row.revoked_at,
        limits={name: getattr(row, name) for name in LIMIT_FIELDS})


def _tenant_id(conn: Connection, team: str) -> str:
    tid = conn.execute(select(tenants.c.id).where(
        ((tenants.c.id == team) | (tenants.c.name == team)),
        tenants.c.disabled_at.is_(None))).scalar()
    if tid is None:
        raise UnknownTeam(f"team_id {team!r} is not a tenant (use a tenant's id or name; "
                       "`tollgate tenants list` shows them)")
    return str(tid)


def _own_tenant(conn: Connection, key_id: str, now: datetime) -> str:
    tid = uuid.uuid4().hex
    conn.execute(insert(tenants).values(
        id=tid, name=OWN_TENANT_PREFIX + key_id, created_at=now, budget_nusd=None,
        period="total", period_start_s=period_start_s("total", now), spent_nusd=0,
        reserved_nusd=0, overrun_nusd=0, policy={}, own_key_id=key_id))
    return tid


def _alias_free(conn: Connection, tenant_id: str, alias: Any, key_id: str) -> None:
    """AliasTaken when another live key of ``tenant_id`` has ``alias``. Checked in the
    change's transaction (no unique index: databases made before this rule may hold
    duplicates; a delete by an alias two keys share is refused instead, ``delete_keys``)."""
    if alias is UNSET or alias is None:
        return
    taken = conn.execute(select(api_keys.c.id).where(
        api_keys.c.tenant_id == tenant_id, api_keys.c.name == alias,
        api_keys.c.revoked_at.is_(None), api_keys.c.id != key_id).limit(1)).first()
    if taken is not None:
        raise AliasTaken(f"key_alias {alias!r} is already used by another key of this team; "
                         "key aliases are unique per team")


def generate(engine: Engine, secret: bytes, now: datetime, fields: KeyFields,
             team: str | None = None, key: str | None = None) -> tuple[str, KeyDetails]:
    """A new key (``key`` if the caller chose it, as LiteLLM allows) in ``team``'s tenant or a
    tenant of its own; the plaintext is returned here and never again."""
    key = keylib.check_chosen_key(key) if key is not None else keylib.generate_key()
    kid = "key_" + uuid.uuid4().hex[:16]
    try:
        with engine.begin() as conn:
            tid = _tenant_id(conn, team) if team is not None else _own_tenant(conn, kid, now)
            _alias_free(conn, tid, fields.key_alias, kid)
            # ``spend`` (LiteLLM's starting spend) replaces the 0 default
            conn.execute(insert(api_keys).values({
                "id": kid, "tenant_id": tid, "key_hash": keylib.hash_key(secret, key),
                "prefix": keylib.display_prefix(key), "created_at": now, "spent_nusd": 0,
                "reserved_nusd": 0, **_values(fields, now)}))
    except IntegrityError as exc:
        raise Conflict("that key already exists") from exc
    return key, info(engine, kid, now)


def find(engine: Engine, secret: bytes, ident: str) -> str:
    """The id of the live key ``ident`` names: the key itself, its token (keyed hash) or id."""
    with engine.connect() as conn:
        kid = conn.execute(select(api_keys.c.id).where(
            (api_keys.c.id == ident) | (api_keys.c.key_hash == ident)
            | (api_keys.c.key_hash == keylib.hash_key(secret, ident)),
            api_keys.c.revoked_at.is_(None))).scalar()
    if kid is None:
        raise NotFound("no such key (it does not exist or was deleted)")
    return str(kid)


def info(engine: Engine, key_id: str, now: datetime) -> KeyDetails:
    with engine.connect() as conn:
        row = conn.execute(_query().where(api_keys.c.id == key_id)).first()
    if row is None:
        raise NotFound(f"no key {key_id!r}")
    return _details(row, now)


def update_key(engine: Engine, key_id: str, now: datetime, fields: KeyFields,
               team: str | None = None) -> KeyDetails:
    """Change the fields set (and the tenant, for a ``team``); every replica re-reads the key
    at its next request (the revocation epoch moves in this transaction)."""
    with engine.begin() as conn:
        values = _values(fields, now)
        if team is not None:
            values["tenant_id"] = _tenant_id(conn, team)
        if "name" in values or team is not None:
            alias = values.get("name", UNSET)
            if alias is UNSET:
                alias = conn.execute(select(api_keys.c.name)
                                     .where(api_keys.c.id == key_id)).scalar()
            tid = values.get("tenant_id") or conn.execute(
                select(api_keys.c.tenant_id).where(api_keys.c.id == key_id)).scalar()
            if tid is not None:
                _alias_free(conn, tid, alias, key_id)
        if conn.execute(update(api_keys).where(api_keys.c.id == key_id,
                                               api_keys.c.revoked_at.is_(None))
                        .values(**(values or {"id": api_keys.c.id}))).rowcount != 1:
            raise NotFound(f"no key {key_id!r}")
        auth_epoch.bump(conn)
    return info(engine, key_id, now)


def delete_keys(engine: Engine, key_ids: list[str], aliases: list[str], now: datetime
                ) -> list[str]:
    """Revoke the keys named (by id, or every live key with one of ``aliases``) and disable
    the tenants made for them alone; the ids revoked. History stays (request logs)."""
    with engine.begin() as conn:
        for alias in aliases:
            n = conn.execute(select(func.count()).select_from(api_keys).where(
                api_keys.c.name == alias, api_keys.c.revoked_at.is_(None))).scalar()
            if (n or 0) > 1:
                raise AmbiguousAlias(f"{n} live keys have the alias {alias!r}; delete them "
                                     "by key (or token) instead")
        rows = conn.execute(select(api_keys.c.id).where(
            api_keys.c.revoked_at.is_(None),
            api_keys.c.id.in_(key_ids) | api_keys.c.name.in_(aliases))).scalars().all()
        if not rows:
            raise NotFound("no such key (it does not exist or was deleted)")
        conn.execute(update(api_keys).where(api_keys.c.id.in_(rows)).values(revoked_at=now))
        conn.execute(update(tenants).where(tenants.c.own_key_id.in_(rows),
                                           tenants.c.disabled_at.is_(None))
                     .values(disabled_at=now))
        auth_epoch.bump(conn)
    return [str(r) for r in rows]


def list_keys(engine: Engine, now: datetime, *, user_id: str | None = None,
              team: str | None = None, key_alias: str | None = None, page: int = 1,
              size: int = 10) -> tuple[list[KeyDetails], int]:
    """A page of live keys (oldest first) and how many there are in all."""
    where = [api_keys.c.revoked_at.is_(None)]
    if user_id is not None:
        where.append(api_keys.c.user_id == user_id)
    if key_alias is not None:
        where.append(api_keys.c.name == key_alias)
    with engine.connect() as conn:
        if team is not None:
            where.append(api_keys.c.tenant_id == _tenant_id(conn, team))
        total = conn.execute(select(func.count()).select_from(api_keys).where(*where)).scalar()
        rows = conn.execute(_query().where(*where)
                            .order_by(api_keys.c.created_at, api_keys.c.id)
                            .offset((page - 1) * size).limit(size)).all()
    return [_details(r, now) for r in rows], int(total or 0)


def master_tenant(engine: Engine, now: datetime) -> Tenant | None:
    """The tenant the master key's own API calls are booked to, made on first use (no budget;
    an operator may give it one like any tenant's, or disable it: then None)."""
    query = select(tenants).where(tenants.c.name == MASTER_TENANT)
    with engine.connect() as conn:
        row = conn.execute(query).first()
    if row is None:
        try:
            with engine.begin() as conn:
                conn.execute(insert(tenants).values(
                    id=uuid.uuid4().hex, name=MASTER_TENANT, created_at=now, budget_nusd=None,
                    period="total", period_start_s=0, spent_nusd=0, reserved_nusd=0,
                    overrun_nusd=0, policy={}))
        except IntegrityError:
            pass  # another replica made it first
        with engine.connect() as conn:
            row = conn.execute(query).first()
    if row is None or row.disabled_at is not None:
        return None
    return Tenant(id=row.id, name=row.name, period=row.period,
                  budget_usd=None if row.budget_nusd is None else row.budget_nusd / 1e9,
                  policy=TenantPolicy.from_stored(row.policy, MASTER_TENANT))
