"""The dashboard's login session and the 404 that review surfaces share.

Who may look is decided in ``gateway.auth`` (the admin key or a tenant key). A login opens a
server session (gateway/store/sessions.py): the cookie carries its signed id, never the key,
and logout deletes the session, so a copied cookie dies with it on every replica.
"""

from __future__ import annotations

from fastapi import Request

from gateway.auth import (
    Principal,
    bearer_key,
    checked_tenant,
    client_address,
    is_admin_key,
    refused,
    require_principal,
)
from gateway.context import GatewayContext
from gateway.errors import GatewayError, unauthorized

COOKIE = "tollgate_dashboard"
SESSION_TTL_S = 8 * 3600


async def login_session(ctx: GatewayContext, request: Request, key: str) -> str | None:
    """Open a session for the admin key or a live tenant key: the cookie value, or None for
    a wrong key (counted against the caller's address; 429 when over its limit)."""
    if is_admin_key(ctx.settings, key):
        if (refusal := refused(ctx, client_address(request))) is not None:
            raise refusal
        return await ctx.store.open_session(admin=True, key_id=None, ttl_s=SESSION_TTL_S)
    tenant = await checked_tenant(ctx, key, client_address(request))
    if tenant is None:
        return None
    return await ctx.store.open_session(admin=False, key_id=tenant.key_id,
                                        ttl_s=SESSION_TTL_S)


async def session_principal(request: Request) -> Principal | None:
    """The principal of the request's session cookie, or None."""
    ctx: GatewayContext = request.app.state.ctx
    cookie = request.cookies.get(COOKIE)
    if not cookie:
        return None
    s = await ctx.store.find_session(cookie)
    if s is None:
        return None
    return Principal(admin=s.admin, tenant_id=s.tenant_id, tenant_name=s.tenant_name,
                     key_id=s.key_id, user_id=s.user_id)


async def dashboard_principal(request: Request) -> Principal:
    """The caller from ``Authorization: Bearer`` or the dashboard's session cookie."""
    if bearer_key(request) is not None:
        return await require_principal(request)
    who = await session_principal(request)
    if who is None:
        raise unauthorized("Log in to the dashboard (or send Authorization: Bearer <key>).")
    return who


def not_found(request_id: str) -> GatewayError:
    """Unknown id and another tenant's id look the same, so ids cannot be probed."""
    return GatewayError(404, f"No request {request_id!r} found for this key.",
                        "invalid_request_error", code="request_not_found", param="request_id")
