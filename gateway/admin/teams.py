"""LiteLLM Proxy's team API, on the admin (LiteLLM master) key: a team is a tenant.

    POST /team/new     {team_id?, team_alias?, max_budget?, budget_duration?, models?,
                        metadata?, tpm_limit?, rpm_limit?, max_parallel_requests?} → the team
    POST /team/update  {team_id, ...the same fields} → {"team_id", "data": the team}
    POST /team/delete  {team_ids: [...]} → {"deleted_teams": [...]}; its keys stop at once
    GET  /team/info    ?team_id= → {"team_id", "team_info", "keys", "team_memberships"}
    GET  /team/list    ?user_id= → [teams]

Fields and status codes are LiteLLM's (litellm/proxy/management_endpoints/team_endpoints.py):
an unknown team is a 404, a team_id or alias already taken a 400. How each field maps onto a
tenant is gateway/store/teams.py's; the limits are enforced across replicas
(gateway/reliability/guards.py), the budget is the tenant's hard budget. A LiteLLM field
Tollgate would not enforce (``members_with_roles``, ``soft_budget``, ...) is a 400 naming it
when set, ignored when empty.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import Field, field_validator

from gateway.admin.api import OpenAIErrorRoute, Text, policy_from_body, request_store, require_admin
from gateway.admin.litellm_fields import (
    SHORT,
    Budget,
    Limit,
    LiteLLMBody,
    Models,
    iso,
    not_found,
    required,
)
from gateway.admin.litellm_keys import key_object
from gateway.errors import GatewayError, invalid
from gateway.store.errors import Conflict, NotFound
from gateway.store.litellm_admin import LiteLLMAdmin
from gateway.store.teams import DURATIONS, LIMITS, Team, period_of

MAX_TEAM_KEYS = 1000  # keys answered by /team/info


class TeamBody(LiteLLMBody):
    """LiteLLM's TeamBase fields Tollgate keeps."""

    TOLERATED = frozenset({"organization_id"})
    team_alias: Text | None = Field(default=None, min_length=1, max_length=SHORT)
    max_budget: Budget | None = None
    budget_duration: Text | None = None
    models: Models | None = None
    metadata: dict[str, Any] | None = None
    tpm_limit: Limit | None = None
    rpm_limit: Limit | None = None
    max_parallel_requests: Limit | None = None

    @field_validator("budget_duration")
    @classmethod
    def _a_period(cls, v: str | None) -> str | None:
        period_of(v)  # ValueError naming the durations a period is
        return v

    def policy(self, base: dict[str, Any]) -> dict[str, Any]:
        """``base`` (a tenant policy) with the sent models and limits."""
        out = dict(base)
        sent = self.model_fields_set
        if "models" in sent:
            out.pop("allowed_models", None)
            if self.models:
                out["allowed_models"] = list(self.models)
        for field, key in LIMITS.items():
            if field in sent:
                out.pop(key, None)
                if getattr(self, field) is not None:
                    out[key] = getattr(self, field)
        return out


class NewTeam(TeamBody):
    team_id: Text | None = Field(default=None, min_length=1, max_length=36)


class UpdateTeam(TeamBody):
    team_id: Text = Field(min_length=1, max_length=SHORT)


class DeleteTeams(LiteLLMBody):
    team_ids: list[Text] = Field(min_length=1)


def team_object(t: Team) -> dict[str, Any]:
    """A team in LiteLLM's field names (plus Tollgate's own under ``tollgate``)."""
    i, p = t.info, t.info.policy
    return {
        "team_id": i.id, "team_alias": None if i.name == i.id else i.name,
        "max_budget": i.budget_usd, "spend": i.spent_usd,
        "budget_duration": DURATIONS[i.period], "budget_reset_at": iso(t.budget_reset_at),
        "models": list(p.allowed_models or []), "tpm_limit": p.tokens_per_minute,
        "rpm_limit": p.requests_per_minute, "max_parallel_requests": p.max_parallel_requests,
        "metadata": t.metadata, "blocked": i.disabled_at is not None,
        "created_at": iso(i.created_at), "admins": [], "members": [], "members_with_roles": [],
        "organization_id": None,
        "tollgate": {"tenant_name": i.name, "period": i.period, "reserved_usd": i.reserved_usd,
                     "policy": p.to_dict()},
    }


def _admin(request: Request) -> LiteLLMAdmin:
    return request_store(request).litellm_admin


async def _team_id(request: Request, team: str) -> str:
    try:
        return await _admin(request).team_id(team)
    except NotFound as e:
        raise not_found(str(e), "team_id") from None


def _taken(e: Conflict) -> GatewayError:
    return invalid(str(e), "team_id", code="team_exists")


def build_router() -> APIRouter:
    admin = [Depends(require_admin)]
    r = APIRouter(prefix="/team", tags=["teams"], route_class=OpenAIErrorRoute)

    @r.post("/new", dependencies=admin)
    async def new_team(body: NewTeam, request: Request) -> dict[str, Any]:
        policy = policy_from_body(body.policy({}))
        try:
            team = await _admin(request).new_team(
                team_id=body.team_id, alias=body.team_alias, budget_usd=body.max_budget,
                period=period_of(body.budget_duration), policy=policy,
                metadata=body.metadata)
        except Conflict as e:
            raise _taken(e) from None
        return team_object(team)

    @r.post("/update", dependencies=admin)
    async def update_team(body: UpdateTeam, request: Request) -> dict[str, Any]:
        tid = await _team_id(request, body.team_id)
        current = await _admin(request).team(tid)
        sent = body.model_fields_set
        ledger: dict[str, Any] = {}
        if "max_budget" in sent:
            ledger["budget_usd"] = body.max_budget
        if "budget_duration" in sent:
            ledger["period"] = period_of(body.budget_duration)
        changed = body.policy(current.info.policy.to_dict())
        policy = policy_from_body(changed) if changed != current.info.policy.to_dict() else None
        try:
            team = await _admin(request).update_team(
                tid, ledger, policy, body.team_alias if "team_alias" in sent else None,
                body.metadata if "metadata" in sent else None)
        except Conflict as e:
            raise _taken(e) from None
        return {"team_id": tid, "data": team_object(team)}

    @r.post("/delete", dependencies=admin)
    async def delete_teams(body: DeleteTeams, request: Request) -> dict[str, Any]:
        ids = [await _team_id(request, t) for t in body.team_ids]  # all exist, or none goes
        await _admin(request).delete_teams(ids)
        return {"deleted_teams": list(body.team_ids)}

    @r.get("/info", dependencies=admin)
    async def team_info(request: Request, team_id: str | None = None) -> dict[str, Any]:
        tid = await _team_id(request, required(team_id, "team_id"))
        team = await _admin(request).team(tid)
        keys, _ = await request_store(request).key_admin.list(team=tid, size=MAX_TEAM_KEYS)
        return {"team_id": tid, "team_info": team_object(team),
                "keys": [key_object(k) for k in keys], "team_memberships": []}

    @r.get("/list", dependencies=admin)
    async def list_teams(request: Request,
                         user_id: Annotated[str | None, Query()] = None) -> list[dict[str, Any]]:
        ids = None
        if user_id is not None:
            try:
                ids = (await _admin(request).user(
                    await _admin(request).find_user(user_id))).teams
            except NotFound as e:
                raise not_found(str(e), "user_id") from None
        return [team_object(t) for t in await _admin(request).teams(ids)]

    return r
