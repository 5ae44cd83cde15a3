"""LiteLLM's internal users (synchronous; `LiteLLMAdmin` runs these in the store's threads).

A user owns keys (``api_keys.user_id``, set by /key/generate or made by /user/new); its
spend is what its keys' requests cost, summed from the request log (``request_logs.key_id``),
deleted keys included. ``teams`` lists the teams (tenant ids) it belongs to.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

import gateway.store.auth_epoch as auth_epoch  # noqa: PLR0402 - not through __init__ (a cycle)
from gateway.store.errors import Conflict, NotFound
from gateway.store.models import api_keys, request_logs, users

FIELDS = ("user_email", "user_alias", "user_role", "models", "teams", "metadata", "max_budget")


@dataclass(frozen=True)
class User:
    user_id: str
    user_email: str | None
    user_alias: str | None
    user_role: str | None
    models: list[str]
    teams: list[str]
    metadata: dict[str, Any]
    spend_usd: float
    created_at: datetime
    max_budget_usd: float | None = None  # LiteLLM's max_budget


COLUMNS = {"metadata": "user_metadata", "max_budget": "max_budget_usd"}


def _columns(fields: dict[str, Any]) -> dict[str, Any]:
    return {COLUMNS.get(k, k): v for k, v in fields.items()}


def _known_since(conn: Any, user_id: str) -> datetime | None:
    """When a user no /user/new made was first named by a live key (its first one's
    creation); None when no live key names it (a deleted user's keys are revoked)."""
    return conn.execute(select(func.min(api_keys.c.created_at))
                        .where(api_keys.c.user_id == user_id,
                               api_keys.c.revoked_at.is_(None))).scalar()


def _user(engine: Engine, user_id: str) -> User:
    """The user; one that only live keys name (``/key/generate`` with a new ``user_id``, as
    LiteLLM allows) is found too, with no fields of its own."""
    with engine.connect() as conn:
        row = conn.execute(select(users).where(users.c.id == user_id)).first()
        since = _known_since(conn, user_id) if row is None else row.created_at
        if since is None:
            raise NotFound(f"User not found, passed user_id={user_id}")
        spend = conn.execute(
            select(func.coalesce(func.sum(request_logs.c.cost_usd), 0.0))
            .select_from(request_logs.outerjoin(api_keys,
                                                api_keys.c.id == request_logs.c.key_id))
            .where(func.coalesce(request_logs.c.user_id, api_keys.c.user_id) == user_id)
        ).scalar()
    if row is None:
        return User(user_id, None, None, None, [], [], {}, float(spend or 0.0), since)
    return User(row.id, row.user_email, row.user_alias, row.user_role, list(row.models or []),
                list(row.teams or []), dict(row.user_metadata or {}), float(spend or 0.0),
                row.created_at, row.max_budget_usd)


def new_user(engine: Engine, now: datetime, user_id: str | None, fields: dict[str, Any]
             ) -> User:
    uid = user_id or str(uuid.uuid4())
    try:
        with engine.begin() as conn:
            conn.execute(insert(users).values(id=uid, created_at=now, **_columns(fields)))
    except IntegrityError as exc:
        raise Conflict(f"user_id {uid!r} already exists") from exc
    return _user(engine, uid)


def find_user(engine: Engine, user_id: str | None, user_email: str | None) -> str:
    """The id of the user with ``user_id`` (one only live keys name included), else the one
    with ``user_email``."""
    where = users.c.id == user_id if user_id is not None else users.c.user_email == user_email
    with engine.connect() as conn:
        uid = conn.execute(select(users.c.id).where(where)).scalar()
        if uid is None and user_id is not None and _known_since(conn, user_id) is not None:
            uid = user_id
    if uid is None:
        raise NotFound(f"User not found, passed user_id={user_id or user_email}")
    return str(uid)


def get_user(engine: Engine, user_id: str) -> User:
    return _user(engine, user_id)


def update_user(engine: Engine, user_id: str, fields: dict[str, Any]) -> User:
    """Set ``fields``; a user only keys named so far gets its row here."""
    if fields:
        with engine.begin() as conn:
            done = conn.execute(update(users).where(users.c.id == user_id)
                                .values(**_columns(fields))).rowcount
            if not done:
                conn.execute(insert(users).values(id=user_id, created_at=datetime.now(UTC),
                                                  **_columns(fields)))
    return _user(engine, user_id)


def delete_users(engine: Engine, user_ids: list[str], now: datetime) -> list[str]:
    """Delete the users and revoke their keys (their request history stays)."""
    with engine.begin() as conn:
        found = conn.execute(select(users.c.id).where(users.c.id.in_(user_ids))).scalars().all()
        missing = sorted(set(user_ids) - set(found))
        if missing:
            raise NotFound(f"User not found, passed user_id={missing[0]}")
        conn.execute(update(api_keys).where(api_keys.c.user_id.in_(user_ids),
                                            api_keys.c.revoked_at.is_(None))
                     .values(revoked_at=now))
        conn.execute(delete(users).where(users.c.id.in_(user_ids)))
        auth_epoch.bump(conn)
    return list(user_ids)


def user_role(engine: Engine, user_id: str) -> str | None:
    """The user's LiteLLM ``user_role`` (None: no such user, or none set)."""
    with engine.connect() as conn:
        return conn.execute(select(users.c.user_role).where(users.c.id == user_id)).scalar()


def user_teams(engine: Engine, user_id: str) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(select(users.c.teams).where(users.c.id == user_id))
                    .scalar() or [])
