"""Who is calling: one place that reads keys from a request and checks them.

Three kinds of caller share it: a tenant calling the API (its key → the tenant, through the
store), an operator with the admin key (``admin_key`` in config.yaml or
``TOLLGATE_ADMIN_KEY``), and someone looking at the review surfaces, who may be either
(``Principal``). Keys are compared in constant time; failures are OpenAI error bodies.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from gateway.config import Settings
from gateway.context import GatewayContext, call
from gateway.errors import store_unavailable, unauthorized

NO_KEY = "You didn't provide an API key (Authorization: Bearer <key>, or x-api-key)."


def bearer_key(request: Request) -> str | None:
    """The key of ``Authorization: Bearer <key>``, else of ``x-api-key`` (the header
    Anthropic-style clients send; LiteLLM Proxy takes both), or None."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and key.strip():
        return key.strip()
    return request.headers.get("x-api-key", "").strip() or None


def admin_key(settings: Settings | None) -> str | None:
    """The configured admin key; None means the admin surfaces are off."""
    return getattr(settings, "admin_key", None) or os.environ.get("TOLLGATE_ADMIN_KEY") or None


def is_admin_key(settings: Settings | None, key: str | None) -> bool:
    expected = admin_key(settings)
    return bool(key and expected and hmac.compare_digest(key.encode(), expected.encode()))


async def tenant_for_key(ctx: GatewayContext, key: str) -> Any:
    """The live tenant owning ``key``, or None; 503 when the store cannot answer."""
    from gateway.store.errors import StoreUnavailable

    try:
        return await call(ctx.store.authenticate, key)
    except StoreUnavailable as e:
        raise store_unavailable() from e


async def authenticate(ctx: GatewayContext, request: Request) -> Any:
    """Bearer key → tenant; 401 on a missing or unknown key, 503 when the store is down."""
    return await _known(bearer_key(request), lambda key: tenant_for_key(ctx, key))


async def _known(key: str | None, find: Callable[[str], Awaitable[Any]]) -> Any:
    """What ``find`` knows ``key`` as; 401 for a missing key or one it does not know."""
    if key is None:
        raise unauthorized(NO_KEY)
    found = await find(key)
    if found is None:
        raise unauthorized()
    return found


@dataclass(frozen=True)
class Principal:
    """Someone reading the review surfaces: the admin (every tenant) or one tenant."""

    admin: bool
    tenant_id: str | None = None
    tenant_name: str | None = None

    def can_see(self, tenant_id: str | None) -> bool:
        return self.admin or (tenant_id is not None and tenant_id == self.tenant_id)

    @property
    def label(self) -> str:
        return "admin" if self.admin else f"tenant {self.tenant_name or self.tenant_id}"


async def principal_for_key(ctx: GatewayContext, key: str | None) -> Principal | None:
    """The admin for the admin key, the tenant for a live tenant key, else None."""
    if not key:
        return None
    if is_admin_key(ctx.settings, key):
        return Principal(admin=True)
    tenant = await tenant_for_key(ctx, key)
    if tenant is None:
        return None
    return Principal(admin=False, tenant_id=tenant.id, tenant_name=getattr(tenant, "name", None))


async def require_principal(request: Request, *, cookie_key: str | None = None) -> Principal:
    """The caller from ``Authorization: Bearer`` (or a key the dashboard's login cookie
    carries); 401 in OpenAI's error format otherwise."""
    ctx: GatewayContext = request.app.state.ctx
    return await _known(bearer_key(request) or cookie_key,
                        lambda key: principal_for_key(ctx, key))
