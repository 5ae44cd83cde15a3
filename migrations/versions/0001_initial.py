"""Initial schema: tenants with their budget ledger, API keys, open reservations, settings,
request logs.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gateway.store.types import JSONType, UTCDateTime

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("disabled_at", UTCDateTime(), nullable=True),
        sa.Column("budget_nusd", sa.BigInteger(), nullable=True),
        sa.Column("period", sa.String(16), nullable=False, server_default="total"),
        sa.Column("period_start_s", sa.BigInteger(), nullable=False),
        sa.Column("spent_nusd", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("reserved_nusd", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("policy", JSONType, nullable=False),
        sa.UniqueConstraint("name", name="uq_tenants_name"),
        sa.CheckConstraint("period IN ('daily', 'weekly', 'monthly', 'total')",
                           name="ck_tenants_period"),
        sa.CheckConstraint("budget_nusd IS NULL OR budget_nusd >= 0",
                           name="ck_tenants_budget_nonneg"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id", name="fk_api_keys_tenant"),
                  nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"])
    op.create_table(
        "budget_reservations",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36),
                  sa.ForeignKey("tenants.id", name="fk_budget_reservations_tenant"),
                  nullable=False),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("amount_nusd", sa.BigInteger(), nullable=False),
        sa.Column("created_at_s", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_budget_reservations_tenant_id", "budget_reservations", ["tenant_id"])
    op.create_index("ix_budget_reservations_created_at_s", "budget_reservations",
                    ["created_at_s"])
    op.create_table(
        "settings",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.create_table(
        "request_logs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(36), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("route", sa.String(200), nullable=True),
        sa.Column("lam", sa.Float(), nullable=True),
        sa.Column("router_version", sa.String(200), nullable=True),
        sa.Column("candidates", JSONType, nullable=True),
        sa.Column("equivalent", JSONType, nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("chosen_model", sa.String(200), nullable=True),
        sa.Column("attempts", JSONType, nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("reserved_usd", sa.Float(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("ttft_ms", sa.Float(), nullable=True),
        sa.Column("stream", sa.Boolean(), nullable=True),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("prompt_text", sa.Text(), nullable=True),
    )
    op.create_index("ix_request_logs_created_at", "request_logs", ["created_at"])
    op.create_index("ix_request_logs_tenant_created", "request_logs",
                    ["tenant_id", "created_at"])


def downgrade() -> None:
    op.drop_table("request_logs")
    op.drop_table("settings")
    op.drop_table("budget_reservations")
    op.drop_table("api_keys")
    op.drop_table("tenants")
