"""Plain records the store hands out (immutable; safe to cache and share across tasks)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gateway.store.money import nusd_to_usd, usd_to_nusd
from gateway.store.policy import EMPTY, TenantPolicy

# nusd_to_usd and usd_to_nusd live in gateway.store.money; named here for older importers.
__all__ = ["KeyInfo", "NewKey", "Reservation", "SettleResult", "Tenant", "TenantInfo",
           "TenantPolicy", "nusd_to_usd", "usd_to_nusd"]


@dataclass(frozen=True)
class Tenant:
    """What authentication yields: who is calling and under which policy."""

    id: str
    name: str
    budget_usd: float | None
    period: str
    policy: TenantPolicy = EMPTY
    key_id: str | None = None
    # the calling key's own limits (LiteLLM's key fields, gateway/store/key_admin.py)
    key_models: tuple[str, ...] | None = None  # None: every model the tenant may call
    key_expires_at: datetime | None = None
    key_budgeted: bool = False  # a key budget or reset period: its ledger takes part
    key_budget_duration: str | None = None
    key_rpm_limit: int | None = None  # LiteLLM's per-key limits (gateway/reliability/guards.py)
    key_tpm_limit: int | None = None
    key_max_parallel_requests: int | None = None
    key_budget_usd: float | None = None  # the calling key's own max_budget
    key_user_id: str | None = None  # LiteLLM's user_id of the calling key
    key_own_tenant: bool = False  # a key generated without a team (its tenant is its own)

    @property
    def principal(self) -> str:
        """Who this request's failures count as for the circuit breakers
        (gateway/reliability/circuit.py, C1): its tenant, however many keys it has, and its
        key's ``user_id`` when it has one (``tenant|user:u``); principals sharing either are
        one client (``circuit.principal_groups``), so one user's keys, team-less or in
        several teams, are one client, not many (issue 48.11)."""
        if self.key_user_id:
            return f"{self.id}|user:{self.key_user_id}"
        return self.id


@dataclass(frozen=True)
class TenantInfo:
    """The admin view of a tenant, with its ledger as of `now` (rollover applied)."""

    id: str
    name: str
    budget_usd: float | None
    period: str
    period_start: datetime
    spent_usd: float
    reserved_usd: float
    policy: TenantPolicy
    created_at: datetime
    disabled_at: datetime | None
    overrun_usd: float = 0.0  # provider charges past a reservation, awaiting an operator

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "budget_usd": self.budget_usd,
            "period": self.period, "period_start": self.period_start.isoformat(),
            "spent_usd": self.spent_usd, "reserved_usd": self.reserved_usd,
            "overrun_usd": self.overrun_usd,
            "policy": self.policy.to_dict(), "created_at": self.created_at.isoformat(),
            "disabled_at": self.disabled_at.isoformat() if self.disabled_at else None,
        }


@dataclass(frozen=True)
class KeyInfo:
    """An API key's metadata; the key itself is never stored."""

    id: str
    tenant_id: str
    tenant_name: str
    prefix: str
    name: str | None
    created_at: datetime
    revoked_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "tenant_id": self.tenant_id, "tenant_name": self.tenant_name,
            "prefix": self.prefix, "name": self.name, "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


@dataclass(frozen=True)
class NewKey:
    """A freshly created key: `api_key` is the only time the secret is ever visible."""

    info: KeyInfo
    api_key: str


@dataclass(frozen=True)
class Reservation:
    """Money held for one request until it is settled."""

    id: str
    tenant_id: str
    request_id: str | None
    amount_nusd: int
    created_at_s: int
    key_id: str | None = None  # the key whose spend it settles into (key_ledger.py)
    key_held_nusd: int = 0  # what it holds of that key's own budget

    @property
    def amount_usd(self) -> float:
        return self.amount_nusd / 1e9


@dataclass(frozen=True)
class SettleResult:
    """What a settlement did. `applied` is False when it had already been settled (or
    expired); `deferred` when the database was unreachable and the store will retry."""

    reservation_id: str
    reserved_usd: float
    actual_usd: float
    applied: bool
    deferred: bool = False

    @property
    def overrun_usd(self) -> float:
        """Spend beyond the reservation (should be 0: the HTTP side caps output tokens)."""
        return max(0.0, self.actual_usd - self.reserved_usd)
