"""Dashboard sessions: a login is a row, the cookie carries its id signed, logout deletes it.

The cookie is ``<id>.<HMAC-SHA256(server secret, id)>``: a forged or altered cookie is
refused before any query, and a stolen database alone cannot mint one. The key the user
logged in with is never stored in the cookie; a tenant session remembers the key's id, so
revoking that key (or disabling the tenant) ends the session at the next page. Shared by
every replica through the database. Synchronous: run in a worker thread.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import Engine, delete, insert, select

from gateway.store.models import api_keys, dashboard_sessions, tenants


@dataclass(frozen=True)
class Session:
    """Who a live session belongs to: the admin, or a tenant (id and name)."""

    admin: bool
    tenant_id: str | None = None
    tenant_name: str | None = None
    key_id: str | None = None  # the key it was opened with
    user_id: str | None = None  # that key's LiteLLM user


def _signature(secret: bytes, sid: str) -> str:
    return hmac.new(secret, b"dashboard-session:" + sid.encode(), hashlib.sha256).hexdigest()


def _verified_id(secret: bytes, cookie: str) -> str | None:
    sid, _, sig = cookie.partition(".")
    if not sid or not sig or len(cookie) > 200:
        return None
    return sid if hmac.compare_digest(sig, _signature(secret, sid)) else None


def open_session(engine: Engine, secret: bytes, *, admin: bool, key_id: str | None,
                 now_s: int, ttl_s: int) -> str:
    """A new session; returns the cookie value. Expired sessions are purged here."""
    sid = secrets.token_urlsafe(32)
    with engine.begin() as conn:
        conn.execute(delete(dashboard_sessions).where(dashboard_sessions.c.expires_at_s < now_s))
        conn.execute(insert(dashboard_sessions).values(
            id=sid, admin=admin, key_id=key_id, created_at_s=now_s, expires_at_s=now_s + ttl_s))
    return f"{sid}.{_signature(secret, sid)}"


def find_session(engine: Engine, secret: bytes, cookie: str, now_s: int) -> Session | None:
    """The live session the cookie names, or None (forged, expired, logged out, key revoked,
    tenant disabled)."""
    sid = _verified_id(secret, cookie)
    if sid is None:
        return None
    s = dashboard_sessions.c
    with engine.connect() as conn:
        row = conn.execute(
            select(s.admin, tenants.c.id, tenants.c.name, api_keys.c.id.label("key_id"),
                   api_keys.c.user_id)
            .select_from(dashboard_sessions
                         .outerjoin(api_keys, (api_keys.c.id == s.key_id)
                                    & api_keys.c.revoked_at.is_(None))
                         .outerjoin(tenants, (tenants.c.id == api_keys.c.tenant_id)
                                    & tenants.c.disabled_at.is_(None)))
            .where(s.id == sid, s.expires_at_s > now_s)).first()
    if row is None:
        return None
    if row.admin:
        return Session(admin=True)
    if row.id is None:
        return None
    return Session(admin=False, tenant_id=row.id, tenant_name=row.name, key_id=row.key_id,
                   user_id=row.user_id)


def close_session(engine: Engine, secret: bytes, cookie: str) -> None:
    """Log out: the session row is deleted, so the cookie is dead on every replica."""
    sid = _verified_id(secret, cookie)
    if sid is not None:
        with engine.begin() as conn:
            conn.execute(delete(dashboard_sessions).where(dashboard_sessions.c.id == sid))
