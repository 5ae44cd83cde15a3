"""Reservations whose process died before settling: released, charged what is provably owed.

Abandoned reservations are released when older than the store's ``reservation_ttl_s``
(``expire_reservations``) or, for a process with an identity (a slot it holds,
gateway/store/replica_slot.py, or a configured ``replica_id``), when it starts again
(``reclaim_replica``); gateway/store/ledger.py describes what they are charged.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime

from sqlalchemy import ColumnElement, Engine, and_, select

from gateway.store.ledger import settle
from gateway.store.models import request_logs, reservations
from gateway.store.replica_slot import ReplicaSlot, claim_slot

__all__ = ["claim_slot", "expire_reservations", "reclaim_replica", "release_slot", "replica_tag",
           "tag_for"]

log = logging.getLogger(__name__)

REPLICA_TAG_LEN = 8


def replica_tag(replica_id: str) -> str:
    """The prefix of the reservation ids a replica books: 8 hex digits of its name, then
    ``-`` (a plain id is 32 hex digits, so it never has one)."""
    return hashlib.sha256(replica_id.encode()).hexdigest()[:REPLICA_TAG_LEN] + "-"


def tag_for(slot: ReplicaSlot | None, replica_id: str | None) -> str:
    """The tag of a process holding ``slot`` (else named ``replica_id``); "" with neither."""
    name = slot.name if slot is not None else replica_id
    return replica_tag(name) if name else ""


def release_slot(slot: ReplicaSlot | None) -> None:
    """Let the slot go at a clean shutdown (a crash lets it go too)."""
    if slot is not None:
        slot.release()


def expire_reservations(engine: Engine, older_than_s: int, now: datetime,
                        limit: int = 500) -> int:
    """Release reservations left open since before `older_than_s` (abandoned: the process
    that booked them died before settling), charging what they provably owe (``_reclaim``).
    Safe to run on every replica at once."""
    n = _reclaim(engine, reservations.c.created_at_s < older_than_s, now, limit)
    if n:
        log.warning("released %d budget reservations older than the reservation TTL", n)
    return n


def reclaim_replica(engine: Engine, tag: str, started_s: int, now: datetime,
                    limit: int = 5000) -> int:
    """Release the reservations a replica's earlier run left open: ids starting with its
    ``tag`` booked before this run started at ``started_s`` (a replica's name is unique among
    the live ones, so their process is gone), charging what they provably owe."""
    n = _reclaim(engine, and_(reservations.c.id.startswith(tag, autoescape=True),
                              reservations.c.created_at_s < started_s), now, limit)
    if n:
        log.warning("released %d budget reservations this replica's previous run left open", n)
    return n


def _reclaim(engine: Engine, where: ColumnElement[bool], now: datetime, limit: int) -> int:
    """Settle the open reservations matching ``where`` at what is provably owed: the cost in
    the request's log row when it was written (the request finished, its settlement was
    lost), spread over its reservations in booking order; nothing otherwise (nothing shows
    that the upstream was ever called: the operator, not the tenant, carries that risk)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(reservations.c.id, reservations.c.amount_nusd, reservations.c.request_id,
                   request_logs.c.cost_usd)
            .select_from(reservations.outerjoin(
                request_logs, request_logs.c.id == reservations.c.request_id))
            .where(where)
            .order_by(reservations.c.created_at_s, reservations.c.id).limit(limit)
        ).all()
    owed: dict[str, int] = {}
    done = 0
    for rid, amount, request_id, cost in rows:
        key = request_id or rid
        if key not in owed:
            owed[key] = max(0, round((cost or 0.0) * 1e9))
        charge = min(amount, owed[key])
        owed[key] -= charge
        if settle(engine, rid, amount, charge, now).applied:
            done += 1
    return done


reclaim_matching = _reclaim  # for leases (gateway/store/lease_ledger.py): same charging rule
