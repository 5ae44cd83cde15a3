"""LiteLLM Proxy's key management API, on the admin (LiteLLM master) key.

    POST /key/generate  {key_alias?, key?, max_budget?, budget_duration?, duration?, models?,
                         metadata?, team_id?, user_id?, spend?} → the key, once, and its fields
    GET  /key/info      ?key=<key, token or key id> → {"key", "info": {...}}
    POST /key/update    {key, ...the fields of generate} → the key's fields after the change
    POST /key/delete    {keys?: [...], key_aliases?: [...]} → {"deleted_keys": [...]}
    GET  /key/list      ?page, size, user_id, team_id, key_alias, return_full_object

Field names and shapes are LiteLLM Proxy's, so its users' scripts keep working. A team is a
tenant (``team_id``: its id or name; unknown → 400 naming ``team_id``); without one, a key
gets a tenant of its own (gateway/store/key_admin.py) and answers ``team_id: null``.
``token`` is the key's keyed hash; a key's own calls may read ``/key/info`` about itself, as
in LiteLLM. ``rpm_limit``, ``tpm_limit`` and ``max_parallel_requests`` are the key's own
limits, enforced on top of its team's (0 blocks, as in LiteLLM). LiteLLM fields Tollgate does
not enforce (``aliases``, ``soft_budget``, ...) are refused with a 400 naming them when set, and ignored when empty (the
null/{} defaults LiteLLM's clients send), so no limit is silently dropped.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from gateway.admin.api import MAX_BUDGET_USD, OpenAIErrorRoute, Text, request_store, require_admin
from gateway.auth import authenticate, bearer_key, is_admin_key, may_read_metrics
from gateway.errors import GatewayError, invalid
from gateway.store.durations import validate_duration
from gateway.store.errors import NotFound
from gateway.store.key_admin import (
    LIMIT_FIELDS,
    AliasTaken,
    AmbiguousAlias,
    KeyDetails,
    KeyFields,
    UnknownTeam,
)
from gateway.store.key_store import KeyStore

Duration = Annotated[str, AfterValidator(validate_duration)]
# strict: ``true`` is not 1.0 (an int is still a number of dollars)
Budget = Annotated[float, Field(strict=True, ge=0, le=MAX_BUDGET_USD, allow_inf_nan=False)]
Models = list[Annotated[Text, Field(min_length=1, max_length=200)]]
Limit = Annotated[int, Field(strict=True, ge=0, le=2**62)]  # 0 blocks, as in LiteLLM
SHORT = 200  # the longest alias, user id or team name api_keys/tenants store


def _positive(text: str) -> str:
    """A budget period of no length would start a new period at every request: no limit."""
    if int("".join(c for c in text if c.isdigit())) <= 0:
        raise ValueError(f"budget_duration {text!r} must be longer than 0 (e.g. \"30d\")")
    return text


class KeyBody(BaseModel):
    """The fields /key/generate and /key/update share (LiteLLM's GenerateKeyRequest)."""

    model_config = ConfigDict(extra="allow")
    key_alias: Text | None = Field(default=None, max_length=SHORT)
    max_budget: Budget | None = None
    budget_duration: Annotated[Duration, AfterValidator(_positive)] | None = None
    duration: Duration | None = None
    models: Models | None = None
    metadata: dict[str, Any] | None = None
    team_id: Text | None = Field(default=None, max_length=SHORT)
    user_id: Text | None = Field(default=None, max_length=SHORT)
    spend: Budget | None = None
    rpm_limit: Limit | None = None  # enforced per key, on top of its team's (guards.py)
    tpm_limit: Limit | None = None
    max_parallel_requests: Limit | None = None

    @model_validator(mode="after")
    def _only_enforced(self) -> KeyBody:
        """A LiteLLM field Tollgate would not enforce is refused when set (module docstring)."""
        for name, value in (self.model_extra or {}).items():
            if value not in (None, {}, [], "", 0, False) and name not in ("key_name",):
                raise ValueError(f"{name!r} is not supported by Tollgate's key API; set "
                                 "limits on the tenant instead (admin API policy)")
        return self

    def fields(self, *, generate: bool) -> KeyFields:
        """The fields sent (on generate, the rest as LiteLLM's defaults: none)."""
        names = ("key_alias", "max_budget", "budget_duration", "duration", "models",
                 "metadata", "user_id", "spend", *LIMIT_FIELDS)
        sent = self.model_fields_set
        return KeyFields(**{n: getattr(self, n) for n in names
                            if n in sent and (not generate or getattr(self, n) is not None)})


class GenerateKey(KeyBody):
    key: Text | None = Field(default=None, max_length=SHORT)


class UpdateKey(KeyBody):
    key: Text = Field(min_length=1, max_length=SHORT)


class DeleteKeys(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keys: list[Text] | None = None
    key_aliases: list[Text] | None = None


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when is not None else None


def key_object(d: KeyDetails) -> dict[str, Any]:
    """A key in LiteLLM's field names (plus Tollgate's own ids under ``tollgate``)."""
    return {
        "token": d.token, "key_name": d.prefix + "...", "key_alias": d.key_alias,
        "spend": d.spend_usd, "max_budget": d.max_budget_usd,
        "budget_duration": d.budget_duration, "budget_reset_at": _iso(d.budget_reset_at),
        "expires": _iso(d.expires), "models": d.models, "metadata": d.metadata,
        "team_id": None if d.own_tenant else d.tenant_id, "user_id": d.user_id,
        "created_at": _iso(d.created_at), "blocked": d.revoked_at is not None,
        **(d.limits or dict.fromkeys(LIMIT_FIELDS)),
        "tollgate": {"key_id": d.id, "tenant_id": d.tenant_id, "tenant_name": d.tenant_name,
                     "reserved_usd": d.reserved_usd},
    }


def _keys(request: Request) -> KeyStore:
    return request_store(request).key_admin


async def _find(request: Request, ident: str) -> str:
    try:
        return await _keys(request).find(ident)
    except NotFound as e:
        raise GatewayError(404, f"Key not found: {e}", code="key_not_found",
                           param="key") from None


def _team_error(e: UnknownTeam) -> GatewayError:
    return invalid(str(e), "team_id", code="team_not_found")


async def _caller_may_read(request: Request, key: str | None) -> str:
    """The key /key/info reads: any, for the admin key; for another caller, its own key."""
    ctx = getattr(request.app.state, "ctx", None)
    given = bearer_key(request)
    settings = ctx.settings if ctx is not None else None
    if ctx is None or (given is not None and is_admin_key(settings, given)):
        await require_admin(request)
        if key is None:
            raise invalid("key is required", "key")
        return key
    tenant = await authenticate(ctx, request)
    if key is not None:
        try:
            own = await _find(request, key) == tenant.key_id
        except GatewayError:  # no such key: the same 403, so a caller cannot probe for keys
            own = False
        if not own:
            raise GatewayError(403, "A key may read only its own info; use the master key.",
                               "permission_error", code="forbidden")
    return key or str(given)


def _chosen_key(request: Request, key: str | None) -> None:
    """A chosen ``key`` equal to the master key (or the metrics token) would be a tenant's key
    and the operator's at once: refused."""
    ctx = getattr(request.app.state, "ctx", None)
    if key is not None and ctx is not None and may_read_metrics(ctx.settings, key):
        raise invalid("key must not be the master key or the metrics token", "key",
                      code="invalid_key")


def _alias_error(e: AliasTaken | AmbiguousAlias) -> GatewayError:
    """LiteLLM answers a duplicate alias with a 400 too."""
    param = "key_alias" if isinstance(e, AliasTaken) else "key_aliases"
    return invalid(str(e), param, code="key_alias_taken" if isinstance(e, AliasTaken)
                   else "key_alias_ambiguous")


def build_router() -> APIRouter:
    """The /key/* router (stateless: the store comes from the hosting app)."""
    admin = [Depends(require_admin)]
    r = APIRouter(prefix="/key", tags=["keys"], route_class=OpenAIErrorRoute)

    @r.post("/generate", dependencies=admin)
    async def generate(body: GenerateKey, request: Request) -> dict[str, Any]:
        _chosen_key(request, body.key)
        try:
            key, d = await _keys(request).generate(body.fields(generate=True), body.team_id,
                                                   body.key)
        except UnknownTeam as e:
            raise _team_error(e) from None
        except AliasTaken as e:
            raise _alias_error(e) from None
        return {**key_object(d), "key": key, "token_id": d.token, "duration": body.duration}

    @r.get("/info")
    async def info(request: Request, key: Annotated[str | None, Query()] = None
                   ) -> dict[str, Any]:
        ident = await _caller_may_read(request, key)
        d = await _keys(request).info(await _find(request, ident))
        return {"key": ident, "info": key_object(d)}

    @r.post("/update", dependencies=admin)
    async def update(body: UpdateKey, request: Request) -> dict[str, Any]:
        kid = await _find(request, body.key)
        try:
            d = await _keys(request).update(kid, body.fields(generate=False),
                                            body.team_id if "team_id" in
                                            body.model_fields_set else None)
        except UnknownTeam as e:
            raise _team_error(e) from None
        except AliasTaken as e:
            raise _alias_error(e) from None
        return {**key_object(d), "key": body.key}

    @r.post("/delete", dependencies=admin)
    async def delete(body: DeleteKeys, request: Request) -> dict[str, Any]:
        if not body.keys and not body.key_aliases:
            raise invalid("send keys or key_aliases to delete", "keys")
        ids = [await _find(request, k) for k in body.keys or ()]
        try:
            gone = await _keys(request).delete(ids, list(body.key_aliases or ()))
        except AmbiguousAlias as e:
            raise _alias_error(e) from None
        except NotFound as e:
            raise GatewayError(404, f"Key not found: {e}", code="key_not_found") from None
        return {"deleted_keys": [*(body.keys or ()), *(body.key_aliases or ())],
                "tollgate": {"key_ids": gone}}

    @r.get("/list", dependencies=admin)
    async def list_keys(request: Request, page: Annotated[int, Query(ge=1)] = 1,
                        size: Annotated[int, Query(ge=1, le=100)] = 10,
                        user_id: str | None = None, team_id: str | None = None,
                        key_alias: str | None = None, return_full_object: bool = False
                        ) -> dict[str, Any]:
        try:
            rows, total = await _keys(request).list(user_id=user_id, team=team_id,
                                                    key_alias=key_alias, page=page, size=size)
        except UnknownTeam as e:
            raise _team_error(e) from None
        keys = [key_object(d) if return_full_object else d.token for d in rows]
        return {"keys": keys, "total_count": total, "current_page": page,
                "total_pages": max(1, -(-total // size))}

    return r
