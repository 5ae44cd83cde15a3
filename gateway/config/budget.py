"""The ``budget:`` section of config.yaml: how a hold meets a client's output cap, and the
budget leases replicas reserve against (gateway/store/leases.py, docs/budgets.md).

``lower_max_tokens`` (issue 47.4): a client's ``max_tokens`` that the remaining budget does not
pay for is lowered to what it pays (the cap sent upstream, announced in the response header
``x-tollgate-output-cap``) instead of refused; a request whose full cap does not fit the free
room holds at most half of it, so parallel requests (Claude Code's subagents) start at once.
``false``: the client's cap is never lowered, the refusal says what the budget pays for.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LeaseSettings(BaseModel):
    """Budget leases (gateway/store/leases.py): off unless ``enabled``. ``max_age_s`` is how
    long a lease takes new requests: the bound on how late a replica sees a budget an admin
    lowered (and the setting that trades lease size, i.e. ledger writes per request, against
    that). ``ttl_s``: a lease whose replica stopped refreshing it (SIGKILL) is returned by
    any replica's sweep after this long."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = False
    max_age_s: float = Field(default=2.0, gt=0.0, le=300.0)
    ttl_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    idle_s: float = Field(default=0.5, gt=0.0)  # no new request this long: returned
    # a lease's size: the requests it is expected to serve over max_age_s at the tenant's
    # recent rate, capped at this many requests and this share of the budget's free room
    max_requests: int = Field(default=1000, ge=1)
    max_room_share: float = Field(default=0.25, gt=0.0, le=1.0)


class BudgetSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lower_max_tokens: bool = True
    leases: LeaseSettings = Field(default_factory=LeaseSettings)
