"""API keys get LiteLLM's key fields: a budget with its own ledger, a reset period, an expiry,
a model list, metadata and a user id (gateway/store/key_admin.py, the /key/* API).

``budget_nusd`` NULL = no key budget (the tenant's budget alone applies); ``spent_nusd`` and
``reserved_nusd`` are the key's side of the ledger (gateway/store/key_ledger.py), booked in the
same transaction as the tenant's. ``budget_duration`` is LiteLLM's string ("30d", "1mo");
``budget_reset_at_s`` when the key's spend next starts again (epoch seconds).
``tenants.own_key_id``: the key a tenant was made for (a key generated without a
``team_id``). ``budget_reservations.key_id``: the key whose spend a reservation settles into;
``key_held_nusd`` what it holds of that key's budget (0 for a key without one).

Revision ID: 0006_key_budgets
Revises: 0005_exploration_scope
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gateway.store.types import JSONType, UTCDateTime

revision: str = "0006_key_budgets"
down_revision: str | None = "0005_exploration_scope"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ZERO = "0"


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("budget_nusd", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("spent_nusd", sa.BigInteger(), nullable=False,
                                   server_default=ZERO))
        batch.add_column(sa.Column("reserved_nusd", sa.BigInteger(), nullable=False,
                                   server_default=ZERO))
        batch.add_column(sa.Column("budget_duration", sa.String(32), nullable=True))
        batch.add_column(sa.Column("budget_reset_at_s", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("expires_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("models", JSONType, nullable=True))
        batch.add_column(sa.Column("key_metadata", JSONType, nullable=True))
        batch.add_column(sa.Column("user_id", sa.String(200), nullable=True))
    with op.batch_alter_table("budget_reservations") as batch:
        batch.add_column(sa.Column("key_id", sa.String(40), nullable=True))
        batch.add_column(sa.Column("key_held_nusd", sa.BigInteger(), nullable=False,
                                   server_default=ZERO))
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("own_key_id", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("own_key_id")
    with op.batch_alter_table("budget_reservations") as batch:
        batch.drop_column("key_held_nusd")
        batch.drop_column("key_id")
    with op.batch_alter_table("api_keys") as batch:
        for name in ("user_id", "key_metadata", "models", "expires_at", "budget_reset_at_s",
                     "budget_duration", "reserved_nusd", "spent_nusd", "budget_nusd"):
            batch.drop_column(name)
