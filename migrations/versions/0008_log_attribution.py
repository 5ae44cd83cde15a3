"""Who and which conversation each logged request belongs to (issue 47, item 5).

``request_logs.user_id``: the calling key's LiteLLM ``user_id`` when the request was made (a
key later reassigned or deleted keeps its history). ``request_logs.session_id``: the client's
conversation id (``x-claude-code-session-id``, LiteLLM's ``x-litellm-session-id`` or
``metadata.session_id``). ``request_logs.tags``: LiteLLM's request ``tags``. ``users.max_budget_usd``:
LiteLLM's per-user ``max_budget`` (gateway/admin/users.py).

Revision ID: 0008_log_attribution
Revises: 0007_key_limits_teams_users
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gateway.store.types import JSONType

revision: str = "0008_log_attribution"
down_revision: str | None = "0007_key_limits_teams_users"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("request_logs") as batch:
        batch.add_column(sa.Column("user_id", sa.String(200), nullable=True))
        batch.add_column(sa.Column("session_id", sa.String(200), nullable=True))
        batch.add_column(sa.Column("tags", JSONType, nullable=True))
        batch.create_index("ix_request_logs_user_id", ["user_id"])
        batch.create_index("ix_request_logs_session_id", ["session_id"])
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("max_budget_usd", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("max_budget_usd")
    with op.batch_alter_table("request_logs") as batch:
        batch.drop_index("ix_request_logs_session_id")
        batch.drop_index("ix_request_logs_user_id")
        for name in ("tags", "session_id", "user_id"):
            batch.drop_column(name)
