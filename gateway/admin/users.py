"""LiteLLM Proxy's internal-user API, on the admin (LiteLLM master) key: a user owns keys.

    POST /user/new     {user_id?, user_email?, user_alias?, user_role?, models?, teams?,
                        metadata?, auto_create_key?, team_id?, key_alias?, duration?}
                       → the user and, unless auto_create_key is false, its first key (once)
    GET  /user/info    ?user_id= → {"user_id", "user_info", "keys", "teams"}
    POST /user/update  {user_id | user_email, ...} → {"user_id", "data": the user}
    POST /user/delete  {user_ids: [...]} → {"deleted_users": [...]}; their keys stop at once

Fields and status codes are LiteLLM's (litellm/proxy/management_endpoints/
internal_user_endpoints.py): an unknown user is a 404, a user_id taken a 400. A user's
``spend`` is what its keys' requests cost (gateway/store/users.py). ``max_budget`` is
LiteLLM's personal budget, which caps the user's keys made without a team
(docs.litellm.ai/docs/proxy/key_budgets: "the owner's personal budget when the key has no
team"): stored on the user and answered back, and /user/new's own first key, when it has no
team, gets it as its max_budget, enforced by that key's ledger (gateway/store/key_ledger.py);
it is not summed over several team-less keys of one user. Other per-user limits
(``tpm_limit``, ...) are not enforced per user here: set them on the user's keys or team;
sent non-empty they are a 400 naming the field, never dropped silently.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.admin.api import OpenAIErrorRoute, Text, request_store, require_admin
from gateway.admin.litellm_fields import SHORT, LiteLLMBody, Models, iso, not_found, required
from gateway.admin.litellm_keys import Budget, Duration, key_object
from gateway.admin.teams import team_object
from gateway.errors import invalid
from gateway.store.errors import Conflict, NotFound
from gateway.store.key_admin import KeyFields
from gateway.store.litellm_admin import LiteLLMAdmin
from gateway.store.users import User

Role = Literal["proxy_admin", "proxy_admin_viewer", "internal_user", "internal_user_viewer"]
MAX_USER_KEYS = 1000  # keys answered by /user/info


class TeamRef(BaseModel):
    """LiteLLM's ``{"team_id", "max_budget_in_team"?, "user_role"?}`` form of a team."""

    model_config = ConfigDict(extra="ignore")
    team_id: Text = Field(min_length=1, max_length=SHORT)


class UserBody(LiteLLMBody):
    TOLERATED = frozenset({"send_invite_email", "sso_user_id", "organizations"})
    user_email: Text | None = Field(default=None, max_length=320)
    user_alias: Text | None = Field(default=None, max_length=SHORT)
    user_role: Role | None = None
    models: Models | None = None
    teams: list[Text | TeamRef] | None = None
    metadata: dict[str, Any] | None = None
    max_budget: Budget | None = None

    def team_names(self) -> list[str]:
        return [t if isinstance(t, str) else t.team_id for t in self.teams or ()]


class NewUser(UserBody):
    user_id: Text | None = Field(default=None, min_length=1, max_length=SHORT)
    auto_create_key: bool = True
    team_id: Text | None = Field(default=None, max_length=SHORT)  # of the key it makes
    key_alias: Text | None = Field(default=None, max_length=SHORT)
    duration: Duration | None = None


class UpdateUser(UserBody):
    user_id: Text | None = Field(default=None, min_length=1, max_length=SHORT)

    @model_validator(mode="after")
    def _named(self) -> UpdateUser:
        if self.user_id is None and self.user_email is None:
            raise ValueError("Either user id or user email must be provided")
        return self


class DeleteUsers(LiteLLMBody):
    user_ids: list[Text] = Field(min_length=1)


def user_object(u: User) -> dict[str, Any]:
    return {"user_id": u.user_id, "user_email": u.user_email, "user_alias": u.user_alias,
            "user_role": u.user_role, "teams": u.teams, "models": u.models,
            "metadata": u.metadata, "spend": u.spend_usd, "max_budget": u.max_budget_usd,
            "tpm_limit": None, "rpm_limit": None, "max_parallel_requests": None,
            "budget_duration": None, "created_at": iso(u.created_at)}


def _admin(request: Request) -> LiteLLMAdmin:
    return request_store(request).litellm_admin


async def _fields(request: Request, body: UserBody) -> dict[str, Any]:
    """The user columns sent, teams resolved to tenant ids (400 for an unknown team)."""
    names = ("user_email", "user_alias", "user_role", "models", "metadata", "max_budget")
    out = {n: getattr(body, n) for n in names if n in body.model_fields_set}
    if "teams" in body.model_fields_set:
        try:
            out["teams"] = [await _admin(request).team_id(t) for t in body.team_names()]
        except NotFound as e:
            raise invalid(str(e), "teams", code="team_not_found") from None
    return out


async def _user_id(request: Request, user_id: str | None, email: str | None = None) -> str:
    try:
        return await _admin(request).find_user(user_id, email)
    except NotFound as e:
        raise not_found(str(e), "user_id") from None


def build_router() -> APIRouter:
    admin = [Depends(require_admin)]
    r = APIRouter(prefix="/user", tags=["users"], route_class=OpenAIErrorRoute)

    @r.post("/new", dependencies=admin)
    async def new_user(body: NewUser, request: Request) -> dict[str, Any]:
        fields = await _fields(request, body)
        if body.auto_create_key and body.team_id is not None:  # before anything is made
            try:
                await _admin(request).team_id(body.team_id)
            except NotFound as e:
                raise invalid(str(e), "team_id", code="team_not_found") from None
        try:
            user = await _admin(request).new_user(body.user_id, fields)
        except Conflict as e:
            raise invalid(str(e), "user_id", code="user_exists") from None
        out: dict[str, Any] = {"key": None}
        if body.auto_create_key:
            key_fields = KeyFields(user_id=user.user_id, **{
                n: getattr(body, n) for n in ("key_alias", "duration", "models")
                if getattr(body, n) is not None}, **(
                {"max_budget": body.max_budget}
                if body.max_budget is not None and body.team_id is None else {}))
            key, d = await request_store(request).key_admin.generate(key_fields, body.team_id)
            out = {**key_object(d), "key": key, "token_id": d.token}
        return {**out, **user_object(user)}

    @r.get("/info", dependencies=admin)
    async def user_info(request: Request, user_id: str | None = None) -> dict[str, Any]:
        uid = await _user_id(request, required(user_id, "user_id"))
        user = await _admin(request).user(uid)
        keys, _ = await request_store(request).key_admin.list(user_id=uid, size=MAX_USER_KEYS)
        teams = await _admin(request).teams(user.teams) if user.teams else []
        return {"user_id": uid, "user_info": user_object(user),
                "keys": [key_object(k) for k in keys], "teams": [team_object(t) for t in teams]}

    @r.post("/update", dependencies=admin)
    async def update_user(body: UpdateUser, request: Request) -> dict[str, Any]:
        uid = await _user_id(request, body.user_id,
                             body.user_email if body.user_id is None else None)
        fields = await _fields(request, body)
        if body.user_id is None:
            fields.pop("user_email", None)  # it named the user
        user = await _admin(request).update_user(uid, fields)
        return {"user_id": uid, "data": user_object(user)}

    @r.post("/delete", dependencies=admin)
    async def delete_users(body: DeleteUsers, request: Request) -> dict[str, Any]:
        try:
            gone = await _admin(request).delete_users(list(body.user_ids))
        except NotFound as e:
            raise not_found(str(e), "user_ids") from None
        return {"deleted_users": gone}

    return r
