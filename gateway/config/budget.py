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

from gateway.store.lease_settings import LeaseSettings


class BudgetSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lower_max_tokens: bool = True
    leases: LeaseSettings = Field(default_factory=LeaseSettings)
