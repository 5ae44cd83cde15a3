"""The ``budget.leases`` settings (config.yaml), here so the store can take them (it sits
below gateway/config in the layers)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LeaseSettings(BaseModel):
    """Budget leases (gateway/store/leases.py): off unless ``enabled``. ``max_age_s`` is how
    long a lease takes new requests: the bound on how late a replica sees a budget an admin
    lowered (and the setting that trades lease size, i.e. ledger writes per request, against
    that). ``ttl_s``: a lease whose replica stopped refreshing it (SIGKILL) is returned by
    any replica's sweep within this long (stale at half of it)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = False
    max_age_s: float = Field(default=2.0, gt=0.0, le=300.0)
    ttl_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    idle_s: float = Field(default=0.5, gt=0.0)  # no new request this long: returned
    # a lease's size: the requests it is expected to serve over max_age_s at the tenant's
    # recent rate, capped at this many requests and this share of the budget's free room
    max_requests: int = Field(default=1000, ge=1)
    max_room_share: float = Field(default=0.25, gt=0.0, le=1.0)
