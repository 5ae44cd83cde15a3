"""Budget overrun, dashboard sessions, one feedback per request and tenant.

``tenants.overrun_nusd``: cost a provider reported past a reservation, held apart from
``spent`` until an operator acts (gateway/store/ledger.py). ``dashboard_sessions``: the
server side of a dashboard login, so the cookie carries a signed session id, not a key.
``uq_observations_feedback``: a tenant's later feedback on a request replaces its earlier one
(gateway/learning/tables.py); earlier duplicates are reduced to the newest first.

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


    op.execute(
        "DELETE FROM observations WHERE source = 'feedback' AND request_id IS NOT NULL "
        "AND id NOT IN (SELECT max_id FROM (SELECT MAX(id) AS max_id FROM observations "
        "WHERE source = 'feedback' AND request_id IS NOT NULL "
        "GROUP BY request_id, tenant_id) AS newest)")
    op.create_index("uq_observations_feedback", "observations", ["request_id", "tenant_id"],
                    unique=True, postgresql_where=sa.text(FEEDBACK),
                    sqlite_where=sa.text(FEEDBACK))


FEEDBACK = "source = 'feedback' AND request_id IS NOT NULL"


def downgrade() -> None:
    op.drop_index("uq_observations_feedback", "observations")
    op.drop_index("ix_dashboard_sessions_expires_at_s", "dashboard_sessions")
    op.drop_table("dashboard_sessions")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("overrun_nusd")
