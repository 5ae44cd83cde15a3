"""The database schema as SQLAlchemy 2.0 declarative models.

The schema itself is created and changed only by Alembic (`migrations/`); these classes
mirror the head revision and are what the code queries. Money columns are integers in
nano-dollars (1e-9 USD): exact on both databases, so `spent + reserved + x <= budget` never
passes or fails by a floating-point rounding.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from gateway.store.types import JSONType, UTCDateTime

PERIODS = ("daily", "weekly", "monthly", "total")


class Base(DeclarativeBase):
    pass


class TenantRow(Base):
    """A tenant and its budget ledger (one row, updated atomically)."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    disabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # NULL budget = unlimited (spend is still tracked).
    budget_nusd: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    period: Mapped[str] = mapped_column(String(16), default="total")
    # Start of the current period, epoch seconds UTC; rollover is a conditional update on it.
    period_start_s: Mapped[int] = mapped_column(BigInteger)
    spent_nusd: Mapped[int] = mapped_column(BigInteger, default=0)
    reserved_nusd: Mapped[int] = mapped_column(BigInteger, default=0)
    # Cost a provider reported past a reservation, held apart from spent until an operator
    # acts (gateway/store/ledger.py); non-zero refuses a budgeted tenant's reservations.
    overrun_nusd: Mapped[int] = mapped_column(BigInteger, default=0)
    policy: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # the key this tenant was made for (a LiteLLM key generated without a team_id)
    own_key_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    # a LiteLLM team's metadata (/team/new, gateway/admin/teams.py)
    team_metadata: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)


class UserRow(Base):
    """A LiteLLM internal user (/user/*, gateway/admin/users.py): it owns keys
    (``api_keys.user_id``); its spend is what its keys' requests cost."""

    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    user_email: Mapped[str | None] = mapped_column(String(320), nullable=True)
    user_alias: Mapped[str | None] = mapped_column(String(200), nullable=True)
    user_role: Mapped[str | None] = mapped_column(String(64), nullable=True)
    models: Mapped[list[str] | None] = mapped_column(JSONType, nullable=True)
    teams: Mapped[list[str] | None] = mapped_column(JSONType, nullable=True)
    user_metadata: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # LiteLLM's per-user max_budget (USD; NULL = none), over the user's team-less keys
    max_budget_usd: Mapped[float | None] = mapped_column(Float, nullable=True)


class ApiKeyRow(Base):
    """An API key, stored only as HMAC-SHA256(server secret, key)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # LiteLLM's key fields (gateway/store/key_admin.py). The key's own budget ledger, booked
    # with its tenant's (gateway/store/key_ledger.py); NULL budget = the tenant's alone.
    budget_nusd: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    spent_nusd: Mapped[int] = mapped_column(BigInteger, default=0)
    reserved_nusd: Mapped[int] = mapped_column(BigInteger, default=0)
    budget_duration: Mapped[str | None] = mapped_column(String(32), nullable=True)
    budget_reset_at_s: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    models: Mapped[list[str] | None] = mapped_column(JSONType, nullable=True)
    key_metadata: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    user_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # LiteLLM's per-key rate limits (gateway/reliability/guards.py); NULL = none, 0 = blocked
    rpm_limit: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    tpm_limit: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    max_parallel_requests: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class ReservationRow(Base):
    """An open budget reservation; deleted when settled (so settling twice finds nothing)."""

    __tablename__ = "budget_reservations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    request_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    amount_nusd: Mapped[int] = mapped_column(BigInteger)
    created_at_s: Mapped[int] = mapped_column(BigInteger, index=True)
    key_id: Mapped[str | None] = mapped_column(String(40), nullable=True)  # its spend's key
    key_held_nusd: Mapped[int] = mapped_column(BigInteger, default=0)  # of the key's budget


class OutageChargeRow(Base):
    """A journal entry of the outage spool that has been charged (gateway/reliability/outage.py): its id,
    written in the transaction that adds its cost to ``spent``, so a replay charges it once."""

    __tablename__ = "outage_charges"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(36))
    amount_nusd: Mapped[int] = mapped_column(BigInteger)
    charged_at_s: Mapped[int] = mapped_column(BigInteger)


class DashboardSessionRow(Base):
    """A dashboard login: the cookie carries only this row's id (signed); logout deletes it.

    A tenant session keeps the key it was opened with (``key_id``), so revoking that key or
    disabling the tenant ends the session at the next page."""

    __tablename__ = "dashboard_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    key_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    created_at_s: Mapped[int] = mapped_column(BigInteger)
    expires_at_s: Mapped[int] = mapped_column(BigInteger, index=True)


class SettingRow(Base):
    """Server-wide settings, e.g. the generated key-hashing secret."""

    __tablename__ = "settings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class RequestLogRow(Base):
    """One row per request: the routing decision, every attempt, tokens, cost, timing."""

    __tablename__ = "request_logs"
    __table_args__ = (Index("ix_request_logs_tenant_created", "tenant_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    key_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    # who and which conversation (gateway/serving/record/attribution.py, migration 0008)
    user_id: Mapped[str | None] = mapped_column(String(200), nullable=True, index=True)
    session_id: Mapped[str | None] = mapped_column(String(200), nullable=True, index=True)
    tags: Mapped[Any] = mapped_column(JSONType, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    route: Mapped[str | None] = mapped_column(String(200), nullable=True)
    lam: Mapped[float | None] = mapped_column(Float, nullable=True)
    router_version: Mapped[str | None] = mapped_column(String(200), nullable=True)
    candidates: Mapped[Any] = mapped_column(JSONType, nullable=True)
    equivalent: Mapped[Any] = mapped_column(JSONType, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    chosen_model: Mapped[str | None] = mapped_column(String(200), nullable=True)
    attempts: Mapped[Any] = mapped_column(JSONType, nullable=True)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    completion_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cost_usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    reserved_usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    ttft_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    stream: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    prompt_text: Mapped[str | None] = mapped_column(Text, nullable=True)


tenants = TenantRow.__table__
api_keys = ApiKeyRow.__table__
reservations = ReservationRow.__table__
outage_charges = OutageChargeRow.__table__
settings = SettingRow.__table__
dashboard_sessions = DashboardSessionRow.__table__
request_logs = RequestLogRow.__table__
users = UserRow.__table__
