"""Who is looking: the admin (sees every tenant) or one tenant (sees only its own requests).

The same key that calls the API opens the review surfaces: the admin key
(``TOLLGATE_ADMIN_KEY``) or a tenant's API key, checked through the store like any request.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from gateway.context import GatewayContext, call
from gateway.errors import GatewayError, store_unavailable, unauthorized

COOKIE = "tollgate_dashboard"


@dataclass(frozen=True)
class Principal:
    admin: bool
    tenant_id: str | None = None
    tenant_name: str | None = None

    def can_see(self, tenant_id: str | None) -> bool:
        return self.admin or (tenant_id is not None and tenant_id == self.tenant_id)

    @property
    def label(self) -> str:
        return "admin" if self.admin else f"tenant {self.tenant_name or self.tenant_id}"


def admin_key(ctx: GatewayContext) -> str | None:
    return ctx.settings.admin_key or os.environ.get("TOLLGATE_ADMIN_KEY") or None


async def principal_for_key(ctx: GatewayContext, key: str | None) -> Principal | None:
    """The admin for the admin key, the tenant for a live tenant key, else None."""
    if not key:
        return None
    expected = admin_key(ctx)
    if expected and hmac.compare_digest(key.encode(), expected.encode()):
        return Principal(admin=True)
    from gateway.store.errors import StoreUnavailable

    try:
        tenant: Any = await call(ctx.store.authenticate, key)
    except StoreUnavailable as e:
        raise store_unavailable() from e
    if tenant is None:
        return None
    return Principal(admin=False, tenant_id=tenant.id, tenant_name=getattr(tenant, "name", None))


def bearer_key(request: Request) -> str | None:
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    return key.strip() or None if scheme.lower() == "bearer" else None


async def require_principal(request: Request, *, cookie: bool = False) -> Principal:
    """The caller from ``Authorization: Bearer`` (or, for the dashboard, its login cookie);
    401 in OpenAI's error format otherwise."""
    ctx: GatewayContext = request.app.state.ctx
    key = bearer_key(request)
    if key is None and cookie:
        key = request.cookies.get(COOKIE)
    if key is None:
        raise unauthorized("You didn't provide an API key (Authorization: Bearer <key>).")
    p = await principal_for_key(ctx, key)
    if p is None:
        raise unauthorized()
    return p


def not_found(request_id: str) -> GatewayError:
    """Unknown id and another tenant's id look the same, so ids cannot be probed."""
    return GatewayError(404, f"No request {request_id!r} found for this key.",
                        "invalid_request_error", code="request_not_found", param="request_id")
