"""Budget overrun and dashboard sessions.

``tenants.overrun_nusd``: cost a provider reported past a reservation, held apart from
``spent`` until an operator acts (gateway/store/ledger.py). ``dashboard_sessions``: the
server side of a dashboard login, so the cookie carries a signed session id, not a key.

Revision ID: 0004_overrun_sessions
Revises: 0003_outage_charges
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_overrun_sessions"
down_revision: str | None = "0003_outage_charges"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("overrun_nusd", sa.BigInteger(), nullable=False,
                                   server_default="0"))
    op.create_table(
        "dashboard_sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=True),
        sa.Column("created_at_s", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_s", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_dashboard_sessions_expires_at_s", "dashboard_sessions",
                    ["expires_at_s"])


def downgrade() -> None:
    op.drop_index("ix_dashboard_sessions_expires_at_s", "dashboard_sessions")
    op.drop_table("dashboard_sessions")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("overrun_nusd")
