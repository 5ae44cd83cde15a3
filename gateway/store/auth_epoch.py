"""The revocation epoch: one counter in ``settings`` that every change making a key stop
working, or a tenant's limits change, increments in the same transaction (revoking a key,
disabling a tenant, updating a tenant). Replicas read it with each authentication and trust a
cached key only while the epoch has not moved since it was validated (gateway/store/store.py),
so a revocation holds on every replica from the moment it commits."""

from __future__ import annotations

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from gateway.store.models import settings

EPOCH_SETTING = "auth_epoch"


def read(conn: Connection) -> int:
    value = conn.execute(select(settings.c.value)
                         .where(settings.c.key == EPOCH_SETTING)).scalar_one_or_none()
    return int(value) if value is not None else 0


def bump(conn: Connection) -> None:
    """Increment the epoch inside the caller's transaction (row-locked on PostgreSQL)."""
    current = conn.execute(select(settings.c.value).where(settings.c.key == EPOCH_SETTING)
                           .with_for_update()).scalar_one_or_none()
    if current is None:
        try:
            with conn.begin_nested():
                conn.execute(insert(settings).values(key=EPOCH_SETTING, value="1"))
            return
        except IntegrityError:  # another transaction created it first: increment theirs
            current = conn.execute(select(settings.c.value).where(
                settings.c.key == EPOCH_SETTING).with_for_update()).scalar_one()
    conn.execute(update(settings).where(settings.c.key == EPOCH_SETTING)
                 .values(value=str(int(current) + 1)))
