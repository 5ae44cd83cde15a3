"""Who is calling: one place that reads keys from a request and checks them.

Three kinds of caller share it: a tenant calling the API (its key → the tenant, through the
store), an operator with the admin key (``admin_key`` in config.yaml or
``TOLLGATE_ADMIN_KEY``), and someone looking at the review surfaces, who may be either
(``Principal``). Keys are compared in constant time; failures are OpenAI error bodies.

Failed key lookups are throttled per client address (``FailedLogins``, one per gateway on
``ctx.failed_logins``): past ``max_failures`` wrong keys in ``window_s`` an address gets 429
with ``Retry-After`` instead of a lookup, so guessing keys costs the guesser, not the
database; a key the store holds as live in its cache is still checked, and works, from that
address (tenants behind the same NAT or proxy as a guesser are not locked out). The address
is the connection's peer unless the peer is a proxy named in ``forwarded_allow_ips``
(gateway.reliability.edge): a client cannot pick it with X-Forwarded-For. Counted per replica (in
memory); a missing key is not a guess and is not counted.

Wrong operator secrets (the admin key on the admin API, the dashboard login and the review
surfaces; the metrics token on /metrics) count in the same throttle. An address over its limit
gets 429 even for the right admin key or token: each is one secret an operator chose, and
answering it at a throttled address would let a guesser go on; the operator is unaffected
from any other address.
"""

from __future__ import annotations

import hmac
import math
import os
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import Request

from gateway.config import Settings
from gateway.context import GatewayContext
from gateway.errors import GatewayError, store_unavailable, unauthorized
from gateway.store.records import Tenant

NO_KEY = "You didn't provide an API key (Authorization: Bearer <key>, or x-api-key)."


class FailedLogins:
    """Wrong keys per client address in a sliding window; bounded in addresses tracked."""

    def __init__(self, max_failures: int = 20, window_s: float = 60.0,
                 max_addresses: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures, self.window_s = max_failures, window_s
        self._max_addresses, self._clock = max_addresses, clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, address: str) -> deque[float]:
        times = self._seen.get(address)
        if times is None:
            return deque()
        cutoff = self._clock() - self.window_s
        while times and times[0] <= cutoff:
            times.popleft()
        if not times:
            del self._seen[address]
        return times

    def refusal(self, address: str) -> GatewayError | None:
        """429 with ``Retry-After`` while ``address`` is over its limit, else None."""
        times = self._recent(address)
        if len(times) < self.max_failures:
            return None
        wait = max(1, math.ceil(times[0] + self.window_s - self._clock()))
        return GatewayError(429, "Too many requests with a wrong API key from this address. "
                            f"Try again in {wait}s.", "rate_limit_error",
                            code="too_many_failed_logins", headers={"retry-after": str(wait)})

    def failed(self, address: str) -> None:
        times = self._recent(address)
        times.append(self._clock())
        self._seen[address] = times
        self._seen.move_to_end(address)
        while len(self._seen) > self._max_addresses:
            self._seen.popitem(last=False)


def _throttle(ctx: GatewayContext | None) -> FailedLogins | None:
    return ctx.failed_logins if ctx is not None else None


def refused(ctx: GatewayContext | None, address: str | None) -> GatewayError | None:
    """The 429 for ``address`` while it is over its wrong-key limit, else None."""
    throttle = _throttle(ctx)
    if throttle is None or address is None:
        return None
    return throttle.refusal(address)


def count_wrong_key(ctx: GatewayContext | None, address: str | None) -> None:
    throttle = _throttle(ctx)
    if throttle is not None and address is not None:
        throttle.failed(address)


def checked_secret(ctx: GatewayContext | None, key: str, address: str | None,
                   accepts: Callable[[str], bool]) -> bool:
    """Whether ``accepts(key)`` (the admin key, the metrics token); a wrong key counts
    against ``address``; 429 for an address over its limit, before any comparison."""
    refusal = refused(ctx, address)
    if refusal is not None:
        raise refusal
    if accepts(key):
        return True
    count_wrong_key(ctx, address)
    return False


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def bearer_key(request: Request) -> str | None:
    """The key of ``Authorization: Bearer <key>``, else of ``x-api-key`` (the header
    Anthropic-style clients send; LiteLLM Proxy takes both), or None."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and key.strip():
        return key.strip()
    return request.headers.get("x-api-key", "").strip() or None


def admin_key(settings: Settings | None) -> str | None:
    """The configured admin key; None means the admin surfaces are off."""
    configured = settings.admin_key if settings is not None else None
    return configured or os.environ.get("TOLLGATE_ADMIN_KEY") or None


def is_admin_key(settings: Settings | None, key: str | None) -> bool:
    expected = admin_key(settings)
    return bool(key and expected and hmac.compare_digest(key.encode(), expected.encode()))


def may_read_metrics(settings: Settings | None, key: str | None) -> bool:
    """The admin key or the configured ``metrics_token``: /metrics lists every tenant's id,
    name, budget and spend, so it is for operators only."""
    token = settings.metrics_token if settings is not None else None
    return is_admin_key(settings, key) or bool(
        key and token and hmac.compare_digest(key.encode(), token.encode()))


async def tenant_for_key(ctx: GatewayContext, key: str) -> Tenant | None:
    """The live tenant owning ``key``, or None; 503 when the store cannot answer."""
    from gateway.store.errors import StoreUnavailable

    try:
        return await ctx.store.authenticate(key)
    except StoreUnavailable as e:
        raise store_unavailable() from e


async def checked_tenant(ctx: GatewayContext, key: str, address: str | None
                         ) -> Tenant | None:
    """``tenant_for_key`` with wrong keys counted against ``address`` (module docstring);
    429 for an address over its limit unless the key is cached as live."""
    refusal = refused(ctx, address)
    if refusal is not None:
        # a key this replica found live lately is checked (revoked since? the store knows at
        # once); any other key is refused without a lookup
        if ctx.store.cached_tenant(key) is None:
            raise refusal
        tenant = await tenant_for_key(ctx, key)
        if tenant is None:
            raise refusal
        return tenant
    tenant = await tenant_for_key(ctx, key)
    if tenant is None:
        count_wrong_key(ctx, address)
    return tenant


async def authenticate(ctx: GatewayContext, request: Request) -> Tenant:
    """Bearer key → tenant; 401 on a missing, unknown or expired key, 503 when the store is
    down, 429 for an address that sent too many wrong keys. The admin (LiteLLM master) key
    calls as its own tenant (``master_tenant``), as LiteLLM Proxy lets its master key call."""
    key, address = bearer_key(request), client_address(request)
    if key is not None and is_admin_key(ctx.settings, key):
        return await master_tenant(ctx, address)
    tenant = await _known(key, lambda key: checked_tenant(ctx, key, address))
    if (refusal := expired(tenant)) is not None:
        raise refusal
    return tenant


def expired(tenant: Tenant) -> GatewayError | None:
    """The 401 for a key past its expiry (LiteLLM's ``duration``), else None; in LiteLLM
    Proxy's wording (litellm/proxy/auth/user_api_key_auth.py)."""
    expires = tenant.key_expires_at
    if expires is None or (now := datetime.now(UTC)) < expires:
        return None
    return unauthorized(f"Authentication Error - Expired Key. Key Expiry time {expires} and "
                        f"current time {now}")


async def master_tenant(ctx: GatewayContext, address: str | None) -> Tenant:
    """The tenant the master key's calls are booked to (gateway/store/key_admin.py); 401 when
    an operator disabled it, 429 at an address over its wrong-key limit."""
    from gateway.store.errors import StoreUnavailable

    if (refusal := refused(ctx, address)) is not None:
        raise refusal
    try:
        tenant = await ctx.store.key_admin.master_tenant()
    except StoreUnavailable as e:
        raise store_unavailable() from e
    if tenant is None:
        raise unauthorized("The master key's tenant is disabled.")
    return tenant


ALL_MODELS = frozenset({"*", "all-proxy-models"})  # LiteLLM's names for "every model"


def may_use_model(tenant: Tenant, *names: str) -> bool:
    """Whether the calling key's ``models`` list lets it call a model asked for by any of
    ``names`` (the name sent, the name an alias resolves to): listed exactly, matched by a
    listed ``prefix*`` wildcard, or no list at all (every model the tenant may call)."""
    allowed = tenant.key_models
    if not allowed or ALL_MODELS.intersection(allowed):
        return True
    return any(name == entry or (entry.endswith("*") and name.startswith(entry[:-1]))
               for name in names for entry in allowed)


def require_model(tenant: Tenant, requested: str, resolved: str | None = None) -> None:
    """403 in LiteLLM's terms for a model outside the calling key's ``models``: a named
    backend, or a route (``auto``) itself, must be listed; a listed route then routes among
    every backend the tenant's policy allows."""
    if may_use_model(tenant, requested, resolved or requested):
        return
    raise key_model_denied(tenant.key_models, requested)


def key_model_denied(key_models: Sequence[str] | None, requested: str,
                     param: str = "model") -> GatewayError:
    """The 403 for a model outside the calling key's ``models`` (LiteLLM's words, LiteLLM's
    code): the key is good, the model is not its to use. Not a 401, which clients take as a
    bad key (Claude Code asks the developer to log in again): OpenAI's SDKs raise
    PermissionDeniedError on a 403, Anthropic's a ``permission_error``."""
    return GatewayError(403, f"key not allowed to access model. This key can only access "
                        f"models={list(key_models or ())}. Tried to access {requested}",
                        "permission_denied", code="key_model_access_denied",
                        param=param)


async def _known(key: str | None, find: Callable[[str], Awaitable[Any]]) -> Any:
    """What ``find`` knows ``key`` as; 401 for a missing key or one it does not know."""
    if key is None:
        raise unauthorized(NO_KEY)
    found = await find(key)
    if found is None:
        raise unauthorized()
    return found


# A LiteLLM user role that makes a key its team's admin for one request's own records
# (GET /v1/routing/{id}, POST /v1/feedback): LiteLLM's admin roles
# (litellm/proxy/_types.py LitellmUserRoles), here scoped to the key's own tenant.
TEAM_ADMIN_ROLES = frozenset({"proxy_admin", "proxy_admin_viewer"})


@dataclass(frozen=True)
class Principal:
    """Someone reading the review surfaces: the admin (every tenant) or one tenant's key."""

    admin: bool
    tenant_id: str | None = None
    tenant_name: str | None = None
    key_id: str | None = None  # the calling key (a tenant's)
    user_id: str | None = None  # its LiteLLM user
    tenant: Tenant | None = None  # the calling key's tenant record (rate limits)

    def can_see(self, tenant_id: str | None) -> bool:
        return self.admin or (tenant_id is not None and tenant_id == self.tenant_id)

    def made(self, tenant_id: str | None, key_id: str | None) -> bool:
        """Whether this key made a request of ``tenant_id`` with ``key_id`` (a row logged
        before keys were recorded, key_id None, is its tenant's)."""
        return self.admin or (self.can_see(tenant_id)
                              and (key_id is None or key_id == self.key_id))

    @property
    def label(self) -> str:
        return "admin" if self.admin else f"tenant {self.tenant_name or self.tenant_id}"


async def principal_for_key(ctx: GatewayContext, key: str | None,
                            address: str | None = None) -> Principal | None:
    """The admin for the admin key, the tenant for a live tenant key, else None; with the
    caller's ``address``, wrong keys are throttled as in ``authenticate`` (and the admin key
    is refused at an address over its limit, module docstring)."""
    if not key:
        return None
    if is_admin_key(ctx.settings, key):
        if (refusal := refused(ctx, address)) is not None:
            raise refusal
        return Principal(admin=True)
    tenant = await checked_tenant(ctx, key, address)
    if tenant is None or expired(tenant) is not None:
        return None
    return tenant_principal(tenant)


def tenant_principal(tenant: Tenant) -> Principal:
    return Principal(admin=False, tenant_id=tenant.id, tenant_name=tenant.name,
                     key_id=tenant.key_id, user_id=tenant.key_user_id, tenant=tenant)


async def may_act_on_request(ctx: GatewayContext, who: Principal, tenant_id: str | None,
                             key_id: str | None) -> bool:
    """Whether ``who`` may read or score one request (issue 47 item 5, issue 48 item 14): the
    key that made it, the admin key, or a key of the same tenant whose LiteLLM user has an
    admin role (``TEAM_ADMIN_ROLES``, its team's admin). Another key of the same team may not."""
    if who.made(tenant_id, key_id):
        return True
    if not who.can_see(tenant_id) or who.user_id is None:
        return False
    from gateway.store.errors import StoreUnavailable

    try:
        role = await ctx.store.litellm_admin.user_role(who.user_id)
    except StoreUnavailable as e:
        raise store_unavailable() from e
    return role in TEAM_ADMIN_ROLES


async def require_principal(request: Request) -> Principal:
    """The caller from ``Authorization: Bearer``; 401 in OpenAI's error format otherwise
    (the dashboard's session cookie is read in gateway/review/dashboard/access.py)."""
    ctx: GatewayContext = request.app.state.ctx
    return await _known(bearer_key(request),
                        lambda key: principal_for_key(ctx, key, client_address(request)))
