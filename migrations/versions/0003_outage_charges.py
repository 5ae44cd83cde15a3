"""Outage charges: the ids of outage-journal entries already charged, so that replaying the
journal again (after a crash or a database failure part-way through) charges nothing twice.

Revision ID: 0003_outage_charges
Revises: 0002_learning
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_outage_charges"
down_revision: str | None = "0002_learning"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "outage_charges",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36), nullable=False),
        sa.Column("amount_nusd", sa.BigInteger(), nullable=False),
        sa.Column("charged_at_s", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("outage_charges")
