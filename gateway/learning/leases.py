"""Named leases in ``learning_leases`` (``retrain``), so one replica at a time retrains."""

from __future__ import annotations

import time

from sqlalchemy import Engine, insert, update
from sqlalchemy.exc import IntegrityError

from gateway.learning.tables import leases_t


def acquire_lease(engine: Engine, name: str, holder: str, ttl_s: float) -> bool:
    """Take (or renew) the lease ``name`` for ``ttl_s`` seconds; False if another holds it.

    One conditional UPDATE (expired or ours), or an INSERT for a new name: the database
    serialises both, so two replicas never both hold it.
    """
    now = time.time()
    with engine.begin() as conn:
        res = conn.execute(
            update(leases_t)
            .where(
                leases_t.c.name == name,
                (leases_t.c.expires_at_s < now) | (leases_t.c.holder == holder),
            )
            .values(holder=holder, expires_at_s=now + ttl_s)
        )
        if res.rowcount == 1:
            return True
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(leases_t).values(name=name, holder=holder, expires_at_s=now + ttl_s)
            )
        return True
    except IntegrityError:
        return False


def release_lease(engine: Engine, name: str, holder: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            update(leases_t)
            .where(leases_t.c.name == name, leases_t.c.holder == holder)
            .values(expires_at_s=0.0)
        )
