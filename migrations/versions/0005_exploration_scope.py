"""The exploration ledger gets a scope: one row per (period, scope).

Scope ``''`` is the global exploration budget (every existing row); ``reference:<route>`` is a
route's daily cap on shadowing its reference (``retraining.exploration.reference_budget_usd``,
gateway/learning/exploration_ledger.py). The primary key becomes (period_start_s, scope).
SQLite alters the table in batch mode (copy and move, the CHECK constraint kept); PostgreSQL
in place.

Revision ID: 0005_exploration_scope
Revises: 0004_overrun_sessions
Create Date: 2026-12-02
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations

revision: str = "0005_exploration_scope"
down_revision: str | None = "0004_overrun_sessions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "exploration_ledger"
PK = "pk_exploration_ledger"


@contextmanager
def _batch() -> Iterator[tuple[BatchOperations, str | None]]:
    """A batch on the ledger, and its primary key's current name: PostgreSQL's is dropped by
    name; SQLite's (unnamed) is replaced in the copy by ``create_primary_key``, where
    SQLAlchemy warns that the reflected column still carries its old primary-key flag: the
    new key wins, as the warning says, so it is silenced."""
    old = sa.inspect(op.get_bind()).get_pk_constraint(TABLE).get("name")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*_alembic_tmp_exploration_ledger.*",
                                category=sa.exc.SAWarning)
        with op.batch_alter_table(TABLE) as batch:
            yield batch, old


def upgrade() -> None:
    with _batch() as (batch, old):
        batch.add_column(sa.Column("scope", sa.String(200), nullable=False,
                                   server_default=""))
        if old:
            batch.drop_constraint(old, type_="primary")
        batch.create_primary_key(PK, ["period_start_s", "scope"])


def downgrade() -> None:
    op.execute(sa.text(f"DELETE FROM {TABLE} WHERE scope <> ''"))
    with _batch() as (batch, old):
        if old:
            batch.drop_constraint(old, type_="primary")
        batch.create_primary_key(f"{TABLE}_pkey", ["period_start_s"])
        batch.drop_column("scope")
