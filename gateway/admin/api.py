"""The admin API: tenants, keys and budgets, behind the admin key.

Mounted by the app as `app.include_router(admin_api.build_router())`. Every call needs
`Authorization: Bearer <TOLLGATE_ADMIN_KEY>` (or `X-Admin-Key`); without a configured admin
key the API refuses everything. Errors are OpenAI-shaped whatever app hosts the router: the
route class below turns validation and store errors into `{"error": {...}}` bodies itself.

    POST   /admin/tenants                 {name, budget_usd?, period?, policy?} → key, once
    GET    /admin/tenants                 ?include_disabled=true
    GET    /admin/tenants/{tenant}        id or name
    PATCH  /admin/tenants/{tenant}        {budget_usd?, period?, reset?, policy?}
    PUT    /admin/tenants/{tenant}/budget {budget_usd, period?, reset?}
    DELETE /admin/tenants/{tenant}        disable (its keys stop working; history stays)
    POST   /admin/tenants/{tenant}/keys   {name?} → key, once
    GET    /admin/keys                    ?tenant=
    DELETE /admin/keys/{key_id}           revoke

LiteLLM Proxy's key API (/key/generate, /key/info, /key/update, /key/delete, /key/list) is
served beside it, from gateway/admin/litellm_keys.py.

``policy`` is validated as a `gateway.store.policy.TenantPolicy`: a bad value is a 400 whose
``param`` names it (``policy.max_cost_usd``).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from fastapi.routing import APIRoute
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from sqlalchemy.exc import DataError

from gateway.auth import admin_key, bearer_key, checked_secret, client_address, is_admin_key
from gateway.errors import GatewayError, as_gateway_error, invalid
from gateway.seams import Store
from gateway.store.errors import Conflict, NotFound, StoreUnavailable
from gateway.store.policy import InvalidPolicy, TenantPolicy
from gateway.store.records import NewKey

if TYPE_CHECKING:
    from gateway.context import GatewayContext

Period = Literal["daily", "weekly", "monthly", "total"]
# Budgets are stored in integer nano-dollars (BIGINT): 1e9 USD keeps every sum far inside it.
MAX_BUDGET_USD = 1e9


def _storable(value: Any) -> Any:
    """Refuse (400) what PostgreSQL cannot store in text/jsonb: NUL characters, NaN and
    infinities (found by the schemathesis fuzz as 500s)."""
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("text must not contain NUL (\\u0000) characters")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("numbers must be finite")
    if isinstance(value, dict):
        for k, v in value.items():
            _storable(k)
            _storable(v)
    elif isinstance(value, list):
        for v in value:
            _storable(v)
    return value


Text = Annotated[str, AfterValidator(_storable)]
Policy = Annotated[dict[str, Any], AfterValidator(_storable)]


def policy_from_body(value: dict[str, Any] | None) -> TenantPolicy | None:
    """The body's policy, validated (400 naming the bad key)."""
    if value is None:
        return None
    try:
        return TenantPolicy.parse(value)
    except InvalidPolicy as exc:
        raise invalid(str(exc), exc.param, code="invalid_policy") from None


def _as_gateway_error(exc: Exception) -> GatewayError | None:
    """The OpenAI error for what an admin call raised (store errors get their status here)."""
    if (err := as_gateway_error(exc)) is not None:
        return err
    if isinstance(exc, NotFound):
        return GatewayError(404, str(exc), code="not_found")
    if isinstance(exc, Conflict):
        return GatewayError(409, str(exc), code="conflict")
    if isinstance(exc, StoreUnavailable):
        return GatewayError(503, str(exc), "server_error", code="database_unavailable")
    if isinstance(exc, InvalidPolicy):
        return invalid(str(exc), exc.param, code="invalid_policy")
    if isinstance(exc, ValueError):
        return invalid(str(exc))
    if isinstance(exc, DataError):  # a value the database cannot take (e.g. NUL in a path)
        return invalid("a value in the request cannot be stored: "
                       f"{type(getattr(exc, 'orig', exc)).__name__}", code="invalid_value")
    return None


class OpenAIErrorRoute(APIRoute):
    """Answers this router's errors as OpenAI error bodies, independent of the host app."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                err = _as_gateway_error(exc)
                if err is None:
                    raise
                return err.response()

        return route


def _host(request: Request) -> GatewayContext | None:
    """The hosting gateway's context; None in an app that hosts only this router (it then
    sets ``app.state.store``). ``app.state`` is Starlette's free-form namespace."""
    return getattr(request.app.state, "ctx", None)


def request_store(request: Request) -> Store:
    ctx = _host(request)
    store = ctx.store if ctx is not None else getattr(request.app.state, "store", None)
    if store is None:
        raise GatewayError(503, "the gateway has no store", "server_error")
    return store


async def require_admin(request: Request) -> None:
    """The admin key, compared in constant time; wrong keys are throttled per client address
    with the wrong tenant keys (gateway/auth.py: 429 with Retry-After past the limit)."""
    ctx = _host(request)
    settings = ctx.settings if ctx is not None else None
    if not admin_key(settings):
        raise GatewayError(403, "The admin API is disabled: set TOLLGATE_ADMIN_KEY.",
                         "permission_error", code="admin_disabled")
    given = bearer_key(request) or request.headers.get("x-admin-key", "").strip()
    if not given:
        raise GatewayError(401, "Incorrect admin key provided.", code="invalid_api_key")
    if not checked_secret(ctx, given, client_address(request),
                          lambda key: is_admin_key(settings, key)):
        raise GatewayError(401, "Incorrect admin key provided.", code="invalid_api_key")


class TenantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Text = Field(min_length=1, max_length=200)
    budget_usd: float | None = Field(default=None, ge=0, le=MAX_BUDGET_USD, allow_inf_nan=False)
    period: Period = "total"
    policy: Policy | None = None


class TenantUpdate(BaseModel):
    """Only the fields sent change; `budget_usd: null` means unlimited."""

    model_config = ConfigDict(extra="forbid")
    budget_usd: float | None = Field(default=None, ge=0, le=MAX_BUDGET_USD, allow_inf_nan=False)
    period: Period | None = None
    reset: bool = False
    policy: Policy | None = None


class BudgetSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    budget_usd: float | None = Field(ge=0, le=MAX_BUDGET_USD, allow_inf_nan=False)
    period: Period | None = None
    reset: bool = False


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Text | None = Field(default=None, max_length=200)


def _new_key(new: NewKey) -> dict[str, Any]:
    return {"api_key": new.api_key, "key": new.info.to_dict()}


def build_router() -> APIRouter:
    """The /admin router (stateless: the store and key come from the hosting app); LiteLLM's
    /key/* is gateway/admin/litellm_keys.py's, mounted beside it."""
    r = APIRouter(prefix="/admin", tags=["admin"], route_class=OpenAIErrorRoute,
                  dependencies=[Depends(require_admin)])

    @r.post("/tenants", status_code=201)
    async def create_tenant(body: TenantCreate, request: Request) -> dict[str, Any]:
        info, key = await request_store(request).create_tenant(
            body.name, budget_usd=body.budget_usd, period=body.period,
            policy=policy_from_body(body.policy))
        return {"tenant": info.to_dict(), **_new_key(key)}

    @r.get("/tenants")
    async def list_tenants(request: Request, include_disabled: bool = False
                           ) -> dict[str, Any]:
        rows = await request_store(request).list_tenants(include_disabled)
        return {"object": "list", "data": [t.to_dict() for t in rows]}

    @r.get("/tenants/{tenant}")
    async def get_tenant(tenant: str, request: Request) -> dict[str, Any]:
        return (await request_store(request).get_tenant(tenant)).to_dict()

    @r.patch("/tenants/{tenant}")
    async def update_tenant(tenant: str, body: TenantUpdate, request: Request
                            ) -> dict[str, Any]:
        changes = body.model_dump(include=body.model_fields_set)
        if "policy" in changes:
            changes["policy"] = policy_from_body(changes["policy"])
        return (await request_store(request).update_tenant(tenant, **changes)).to_dict()

    @r.put("/tenants/{tenant}/budget")
    async def set_budget(tenant: str, body: BudgetSet, request: Request) -> dict[str, Any]:
        info = await request_store(request).update_tenant(
            tenant, budget_usd=body.budget_usd, period=body.period, reset=body.reset)
        return info.to_dict()

    @r.delete("/tenants/{tenant}")
    async def disable_tenant(tenant: str, request: Request) -> dict[str, Any]:
        return (await request_store(request).disable_tenant(tenant)).to_dict()

    @r.post("/tenants/{tenant}/keys", status_code=201)
    async def create_key(tenant: str, request: Request, body: KeyCreate | None = None
                         ) -> dict[str, Any]:
        return _new_key(await request_store(request).create_key(tenant, body.name if body else None))

    @r.get("/keys")
    async def list_keys(request: Request, tenant: str | None = None) -> dict[str, Any]:
        rows = await request_store(request).list_keys(tenant)
        return {"object": "list", "data": [k.to_dict() for k in rows]}

    @r.delete("/keys/{key_id}")
    async def revoke_key(key_id: str, request: Request) -> dict[str, Any]:
        return (await request_store(request).revoke_key(key_id)).to_dict()

    return r

