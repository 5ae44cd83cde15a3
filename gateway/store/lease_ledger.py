"""The database side of a budget lease (gateway/store/leases.py): booked, drawn down, swept.

A lease IS a reservation (``budget_reservations``, ledger.py): booked with the same conditional
UPDATE on the tenant's (and the budgeted key's) row, so

    spent + Σ open reservations (leases included) <= budget                      (L1)

holds exactly as it does for one request's reservation, on any number of replicas. Its id
carries ``LEASE_MARK`` after the replica's tag, so the sweep finds it. What differs:

- ``adjust`` moves what requests drawn from the lease were charged into ``spent`` and gives
  back part of the lease, in one transaction (reservation row first, then tenant, then key:
  the order every settlement locks in), and refreshes the row's ``created_at_s``: the lease's
  heartbeat. Both sides of (L1) drop by the same amount, so it keeps holding.
- ``ledger.settle`` closes it (charged at what its requests were charged, the rest released).
- ``expire_leases``: a lease whose heartbeat is older than the sweeping replica's cutoff
  (leases.py: half of ``ttl_s``; its replica was killed) is released by any replica's sweep, charged what is provably owed (reclaim.py: a lease has no
  request log row, so nothing): what its requests spent since the last heartbeat is the
  operator's, as for a killed replica's in-flight requests.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import Engine, and_, bindparam, case, update

from gateway.store.ledger import period_param, period_starts, rollover_values, spent_plus
from gateway.store.models import api_keys, reservations, tenants
from gateway.store.reclaim import reclaim_matching

log = logging.getLogger(__name__)

LEASE_MARK = "lease-"  # after the replica's tag in a lease's reservation id

_GONE = period_param("gone")  # charged + released: what leaves the reservation
_CHARGED = period_param("charged")
ADJUST_RESERVATION = (
    update(reservations)
    .where(reservations.c.id == bindparam("p_lease"), reservations.c.amount_nusd >= _GONE)
    .values(amount_nusd=reservations.c.amount_nusd - _GONE,
            key_held_nusd=case((reservations.c.key_held_nusd >= _GONE,
                                reservations.c.key_held_nusd - _GONE), else_=0),
            created_at_s=period_param("now"))
    .returning(reservations.c.tenant_id, reservations.c.key_id)
)
ADJUST_TENANT = (
    update(tenants).where(tenants.c.id == bindparam("p_tenant"))
    .values(reserved_nusd=tenants.c.reserved_nusd - _GONE,
            **rollover_values(spent_plus(_CHARGED)))
)
ADJUST_KEY = (
    update(api_keys).where(api_keys.c.id == bindparam("p_key"))
    .values(reserved_nusd=api_keys.c.reserved_nusd - period_param("key_gone"),
            spent_nusd=api_keys.c.spent_nusd + _CHARGED)
)


def adjust(engine: Engine, lease_id: str, charged_nusd: int, released_nusd: int,
           now: datetime, *, keyed: bool) -> bool:
    """Charge ``charged_nusd`` of the lease into spent, release ``released_nusd`` of it, and
    refresh its heartbeat, atomically; False when the lease is gone (swept) or holds less.
    ``keyed``: the lease holds its key's own budget too (booked with ``key_held = amount``)."""
    if charged_nusd < 0 or released_nusd < 0:
        raise ValueError("a lease adjustment cannot be negative")
    gone = charged_nusd + released_nusd
    params = {**period_starts(now), "p_lease": lease_id, "p_gone": gone,
              "p_charged": charged_nusd, "p_now": int(now.timestamp())}
    with engine.begin() as conn:
        row = conn.execute(ADJUST_RESERVATION, params).first()
        if row is None:
            return False
        conn.execute(ADJUST_TENANT, {**params, "p_tenant": row.tenant_id})
        if row.key_id is not None:
            conn.execute(ADJUST_KEY, {**params, "p_key": row.key_id,
                                      "p_key_gone": gone if keyed else 0})
    return True


def expire_leases(engine: Engine, older_than_s: int, now: datetime, limit: int = 500,
                  keep: list[str] | None = None) -> int:
    """Release leases whose heartbeat is older than ``older_than_s`` (their replica died),
    except ``keep`` (the sweeping replica's own, whose heartbeat a busy database delayed):
    any replica may run it. Returns how many."""
    where = and_(reservations.c.id.contains(LEASE_MARK, autoescape=True),
                 reservations.c.created_at_s < older_than_s)
    if keep:
        where = and_(where, reservations.c.id.not_in(keep))
    n = reclaim_matching(engine, where, now, limit)
    if n:
        log.warning("returned %d budget leases whose replica stopped refreshing them", n)
    return n
