"""LiteLLM's per-key rate limits, team metadata, internal users and the key of each logged
request (gateway/reliability/guards.py, gateway/admin/teams.py, users.py, spend_logs.py).

``api_keys.rpm_limit`` / ``tpm_limit`` / ``max_parallel_requests``: NULL = none, 0 = blocked
(LiteLLM's). ``tenants.team_metadata``: a team's ``metadata``. ``users``: LiteLLM's internal
users (a user owns keys through ``api_keys.user_id``). ``request_logs.key_id``: the key a
request came with, so /spend/logs filters by key and by its user.

Revision ID: 0007_key_limits_teams_users
Revises: 0006_key_budgets
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gateway.store.types import JSONType, UTCDateTime

revision: str = "0007_key_limits_teams_users"
down_revision: str | None = "0006_key_budgets"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("rpm_limit", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("tpm_limit", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("max_parallel_requests", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("team_metadata", JSONType, nullable=True))
    with op.batch_alter_table("request_logs") as batch:
        batch.add_column(sa.Column("key_id", sa.String(40), nullable=True))
        batch.create_index("ix_request_logs_key_id", ["key_id"])
    op.create_table(
        "users",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("user_email", sa.String(320), nullable=True),
        sa.Column("user_alias", sa.String(200), nullable=True),
        sa.Column("user_role", sa.String(64), nullable=True),
        sa.Column("models", JSONType, nullable=True),
        sa.Column("teams", JSONType, nullable=True),
        sa.Column("user_metadata", JSONType, nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("users")
    with op.batch_alter_table("request_logs") as batch:
        batch.drop_index("ix_request_logs_key_id")
        batch.drop_column("key_id")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("team_metadata")
    with op.batch_alter_table("api_keys") as batch:
        for name in ("max_parallel_requests", "tpm_limit", "rpm_limit"):
            batch.drop_column(name)
