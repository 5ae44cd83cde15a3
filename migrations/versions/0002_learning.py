"""The learning loop: prompts (text or only Φ(x)), served requests, observations, router
versions, the exploration-budget ledger and retraining leases (gateway/learning/tables.py).

Revision ID: 0002_learning
Revises: 0001_initial
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gateway.store.types import JSONType, UTCDateTime

revision: str = "0002_learning"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "learning_prompts",
        sa.Column("prompt_key", sa.String(64), primary_key=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("embedding", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "learning_requests",
        sa.Column("request_id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(36), nullable=True),
        sa.Column("prompt_key", sa.String(64), nullable=False),
        sa.Column("route", sa.String(200), nullable=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("backend", sa.String(200), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_learning_requests_tenant_id", "learning_requests", ["tenant_id"])
    op.create_table(
        "observations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("prompt_key", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("quality", sa.Float(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("sample", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("tenant_id", sa.String(36), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("quality >= 0 AND quality <= 1", name="ck_observations_quality"),
    )
    op.create_index("ix_observations_prompt_key", "observations", ["prompt_key"])
    op.create_index("ix_observations_request_id", "observations", ["request_id"])
    op.create_index("ix_observations_created_at", "observations", ["created_at"])
    op.create_table(
        "router_versions",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("version", sa.String(200), nullable=False),
        sa.Column("parent", sa.String(200), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("n_observations", sa.Integer(), nullable=False),
        sa.Column("max_observation_id", sa.Integer(), nullable=False),
        sa.Column("metrics", JSONType, nullable=True),
        sa.Column("artifact", sa.LargeBinary(), nullable=False),
        sa.UniqueConstraint("version", name="uq_router_versions_version"),
    )
    op.create_table(
        "exploration_ledger",
        sa.Column("period_start_s", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("budget_nusd", sa.BigInteger(), nullable=False),
        sa.Column("spent_nusd", sa.BigInteger(), nullable=False),
        sa.Column("reserved_nusd", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "spent_nusd + reserved_nusd <= budget_nusd", name="ck_exploration_within_budget"
        ),
    )
    op.create_table(
        "learning_leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("expires_at_s", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("learning_leases")
    op.drop_table("exploration_ledger")
    op.drop_table("router_versions")
    op.drop_index("ix_observations_created_at", "observations")
    op.drop_index("ix_observations_request_id", "observations")
    op.drop_index("ix_observations_prompt_key", "observations")
    op.drop_table("observations")
    op.drop_index("ix_learning_requests_tenant_id", "learning_requests")
    op.drop_table("learning_requests")
    op.drop_table("learning_prompts")
