"""The budget ledger: reserve, settle, expire, re-budget (synchronous; run in a thread).

Invariant, per tenant and period: spent + reserved <= budget after every reservation.
`reserve` checks and books in ONE conditional UPDATE,

    UPDATE tenants SET reserved = reserved + x, <rollover>
    WHERE id = :t AND (budget IS NULL OR spent' + reserved + x <= budget)

where spent' is 0 when the stored period start is older than the current period's start and
`spent` otherwise. The database serialises updates of one row (SQLite: one writer; PostgreSQL:
row lock, then the WHERE is re-checked on the newest row version), so no interleaving of
requests, processes or replicas can book past the budget. Rollover is part of the same
update: it is a conditional write on `period_start_s`, so the first writer of a new period
re-baselines `spent` and every later one (on any replica) sees the new start and leaves it.
Reservations in flight carry over a rollover; their settlement lands in the period in which it
happens. Money is integer nano-dollars, exact on both databases.

Overrun: a reservation is a bound on the request's cost (gateway/pricing.py), so settlement
never needs more. If a provider reports more anyway, the tenant is charged at most the
reservation: `settle` adds min(actual, reserved) to `spent` (and to the key's), so
`spent + reserved <= budget` holds by construction and a provider's miscount never refuses a
tenant. The excess is the operator's: returned in the ``SettleResult`` (``overrun_usd``) and
counted on the HTTP side (``tollgate_overrun_usd{backend}``,
gateway/serving/budget/bound_factors.py), never booked against the tenant. The amount sent to the
database is clamped to the reservation first, so no reported number, however large, fails a
settlement. (``overrun`` on a tenant row is what older versions booked; `set_budget` still moves it
into `spent`.)

What a request is charged (gateway/serving/record/outcome.py computes it, `settle` books it): the
answering backend's reported usage at its prices (clamped to the attempt's bounds; reported
tokens past them are the overrun), plus, for each attempt that timed out after its request was
sent (the provider has the prompt and bills what it generates), that attempt's whole
reservation when it was not streamed, or its prompt's input cost (tokenizer count × input
price) when it was streamed (closing the stream stops the generation); counted in
``tollgate_timeout_charges``, whether or not another backend then answered. Later attempts are
reserved on top of it, so the total is within what the request reserved. Other failed
attempts (refused, 5xx, reset, never sent) cost nothing.

Abandoned reservations (their process died before settling) are released when older than the
store's ``reservation_ttl_s`` (config ``budget_reservation_ttl_s``) or, for a replica with a
name (``replica_id``), when it starts again (``reclaim_replica``). They are charged what is
provably owed: the cost in the request's log row if it was written (only its settlement was
lost), else nothing, since nothing shows the upstream was called (see ``_reclaim``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    BindParameter,
    ColumnElement,
    Engine,
    Insert,
    Update,
    and_,
    bindparam,
    case,
    delete,
    insert,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.exc import IntegrityError

from gateway.store.errors import BudgetExceeded, NotFound
from gateway.store.models import (
    api_keys,
    outage_charges,
    reservations,
    tenants,
)
from gateway.store.money import nusd_to_usd
from gateway.store.periods import period_start_s, validate_period
from gateway.store.records import Reservation, SettleResult

log = logging.getLogger(__name__)


# The request path's statements are built once, with bound parameters: building one per call
# (and SQLAlchemy's cache key over its tree) cost more CPU than the database's work on SQLite.
# The period starts are parameters too: ``period_starts(now)`` gives their values.
def period_param(name: str) -> BindParameter[int]:
    """An explicit BIGINT parameter: epoch seconds pass 2**31 in 2038 and nano-dollars far
    sooner; SQLAlchemy would infer the width from each value, this keeps it fixed. Names start
    with ``p_``, never a column's (an UPDATE would take a column's name for a SET value)."""
    return bindparam(f"p_{name}", type_=BigInteger)


def _big(value: int) -> ColumnElement[int]:
    """A BIGINT literal (as ``period_param``) for statements built per call."""
    return literal(value, type_=BigInteger)


def period_starts(now: datetime) -> dict[str, int]:
    """The values of ``_current_start``'s parameters at ``now``."""
    return {f"p_{p}": period_start_s(p, now) for p in ("daily", "weekly", "monthly")}


def _current_start() -> ColumnElement[int]:
    """SQL: the start of the current period for the row's own `period` (epoch seconds)."""
    c = tenants.c.period
    return case(
        (c == "daily", period_param("daily")),
        (c == "weekly", period_param("weekly")),
        (c == "monthly", period_param("monthly")),
        else_=_big(0),
    )


def _rollover_values(spent_after: ColumnElement[int]) -> dict:
    """SET clauses that re-baseline on a new period; `spent_after` is spent' plus any delta."""
    start = _current_start()
    rolled = tenants.c.period_start_s < start
    return {
        "period_start_s": case((rolled, start), else_=tenants.c.period_start_s),
        "spent_nusd": spent_after,
    }


def _spent_plus(value: ColumnElement[int]) -> ColumnElement[int]:
    """SQL: spent' + value, i.e. the value alone when the stored period has ended."""
    return case((tenants.c.period_start_s < _current_start(), value),
                else_=tenants.c.spent_nusd + value)


def _charged(actual: ColumnElement[int], reserved: ColumnElement[int]) -> ColumnElement[int]:
    """SQL: min(actual, reserved), what settlement adds to spent."""
    return case((reserved < actual, reserved), else_=actual)


def effective_spent(spent: int, period: str, stored_start_s: int, now: datetime) -> int:
    """Python mirror of spent' for reporting."""
    return 0 if stored_start_s < period_start_s(period, now) else spent


def _booking() -> Update:
    """UPDATE tenants SET reserved += p_amount, <rollover> WHERE id = p_tenant AND it fits."""
    amount = period_param("amount")
    spent_now = case((tenants.c.period_start_s < _current_start(), _big(0)),
                     else_=tenants.c.spent_nusd)
    fits = or_(tenants.c.budget_nusd.is_(None),
               and_(tenants.c.overrun_nusd == 0,
                    spent_now + tenants.c.reserved_nusd + amount <= tenants.c.budget_nusd))
    return (
        update(tenants)
        .where(tenants.c.id == bindparam("p_tenant"), tenants.c.disabled_at.is_(None), fits)
        .values(reserved_nusd=tenants.c.reserved_nusd + amount, **_rollover_values(spent_now))
    )


RESERVATION_KEYS = ("id", "tenant_id", "request_id", "amount_nusd", "created_at_s", "key_id",
                    "key_held_nusd")
BOOKING = _booking()
# The same for a request made with a key: it books only while that key is live, so a key
# deleted while its requests wait for the budget gets none of them served (its refusal is
# then NotFound). One indexed EXISTS on api_keys' primary key, in the same statement.
BOOKING_KEYED = BOOKING.where(select(api_keys.c.id).where(
    api_keys.c.id == bindparam("p_key_id"), api_keys.c.revoked_at.is_(None)).exists())
# SQLite: the reservation row, inserted in the booking's transaction.
RECORDING = insert(reservations).values({k: bindparam(f"p_{k}") for k in RESERVATION_KEYS})


def _booking_pg(booking: Update) -> Insert:
    """PostgreSQL: `WITH booked AS (UPDATE ... RETURNING id) INSERT ... SELECT FROM booked`."""
    booked = booking.returning(tenants.c.id).cte("booked")
    cols = [reservations.c[k] for k in RESERVATION_KEYS]
    row = select(*[bindparam(f"p_{k}", type_=c.type) if k != "tenant_id" else booked.c.id
                   for k, c in zip(RESERVATION_KEYS, cols, strict=True)])
    return (insert(reservations).from_select(cols, row).add_cte(booked)
            .returning(reservations.c.id))


BOOKING_PG = _booking_pg(BOOKING)
BOOKING_PG_KEYED = _booking_pg(BOOKING_KEYED)
RELEASING = (delete(reservations).where(reservations.c.id == bindparam("p_reservation"))
             .returning(reservations.c.tenant_id, reservations.c.amount_nusd,
                        reservations.c.key_id, reservations.c.key_held_nusd))
# The key's side of a settlement (key_ledger.py): its whole cost to the key's spend, what the
# reservation held of the key's budget released.
KEY_SETTLING = (update(api_keys).where(api_keys.c.id == bindparam("p_key"))
                .values(reserved_nusd=api_keys.c.reserved_nusd - period_param("key_held"),
                        spent_nusd=api_keys.c.spent_nusd + period_param("actual")))
# SQLite: the tenant's side of a settlement, after RELEASING returned the reservation's row.
SETTLING = (
    update(tenants).where(tenants.c.id == bindparam("p_tenant"))
    .values(reserved_nusd=tenants.c.reserved_nusd - period_param("held"),
            **_rollover_values(_spent_plus(_charged(period_param("actual"), period_param("held")))))
)


def _settling_pg() -> Update:
    """PostgreSQL, one statement: WITH d AS (DELETE ... RETURNING) UPDATE ... FROM d."""
    gone = RELEASING.cte("released")
    held, actual = gone.c.amount_nusd, period_param("actual")
    keyed = (update(api_keys).where(api_keys.c.id == gone.c.key_id)
             .values(reserved_nusd=api_keys.c.reserved_nusd - gone.c.key_held_nusd,
                     spent_nusd=api_keys.c.spent_nusd + _charged(actual, held))
             .returning(api_keys.c.id).cte("keyed"))
    return (update(tenants).where(tenants.c.id == gone.c.tenant_id)
            .values(reserved_nusd=tenants.c.reserved_nusd - held,
                    **_rollover_values(_spent_plus(_charged(actual, held))))
            .add_cte(gone).add_cte(keyed).returning(gone.c.amount_nusd))


SETTLING_PG = _settling_pg()


def reserve(engine: Engine, tenant_id: str, amount_nusd: int, request_id: str | None,
            now: datetime, id_prefix: str = "", key_id: str | None = None,
            book_keyed: Callable[[Reservation], bool] | None = None) -> Reservation:
    """Book `amount_nusd` against the tenant's budget or raise `BudgetExceeded`. The
    reservation's id starts with ``id_prefix`` (the replica's tag, ``replica_tag``); its spend
    settles into ``key_id``'s too, whose own budget ``book_keyed`` books (key_ledger.py)."""
    if amount_nusd < 0:
        raise ValueError("a reservation cannot be negative")
    rid = id_prefix + uuid.uuid4().hex[:RESERVATION_ID_LEN - len(id_prefix)]
    res = Reservation(id=rid, tenant_id=tenant_id, request_id=request_id,
                      amount_nusd=amount_nusd, created_at_s=int(now.timestamp()),
                      key_id=key_id, key_held_nusd=amount_nusd if book_keyed else 0)
    if book_keyed is not None:
        if book_keyed(res):
            return res
    elif _book(engine, res, {**period_starts(now), "p_tenant": tenant_id, "p_amount": amount_nusd}):
        return res
    if key_id is not None:
        _key_live(engine, key_id)
    # Refused (or no such tenant): read the numbers for the error, outside the hot path.
    with engine.connect() as conn:
        row = conn.execute(
            select(tenants.c.budget_nusd, tenants.c.spent_nusd, tenants.c.reserved_nusd,
                   tenants.c.period, tenants.c.period_start_s, tenants.c.disabled_at,
                   tenants.c.overrun_nusd)
            .where(tenants.c.id == tenant_id)
        ).first()
    if row is None or row.disabled_at is not None:
        raise NotFound(f"tenant {tenant_id} does not exist or is disabled")
    spent = effective_spent(row.spent_nusd, row.period, row.period_start_s, now)
    raise BudgetExceeded(nusd_to_usd(row.budget_nusd) or 0.0, spent / 1e9,
                         row.reserved_nusd / 1e9, amount_nusd / 1e9,
                         overrun_usd=row.overrun_nusd / 1e9)


def _book(engine: Engine, res: Reservation, booking: dict[str, Any]) -> bool:
    """Apply the conditional UPDATE (``BOOKING`` with the ``booking`` parameters) and record
    the reservation, atomically.

    PostgreSQL: one statement (``BOOKING_PG``), in autocommit: one round trip on the request
    path. SQLite (no network, no data-modifying CTEs): the same two statements in one
    transaction.
    """
    recorded = {f"p_{k}": getattr(res, k) for k in RESERVATION_KEYS}
    keyed = res.key_id is not None
    if keyed:
        booking = {**booking, "p_key_id": res.key_id}
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            return conn.execute(BOOKING_PG_KEYED if keyed else BOOKING_PG,
                                {**booking, **recorded}).first() is not None
    with engine.begin() as conn:
        if conn.execute(BOOKING_KEYED if keyed else BOOKING, booking).rowcount != 1:
            return False
        conn.execute(RECORDING, recorded)
        return True


def _key_live(engine: Engine, key_id: str) -> None:
    """NotFound when the key was deleted (a refusal read, off the hot path)."""
    with engine.connect() as conn:
        revoked = conn.execute(select(api_keys.c.revoked_at)
                               .where(api_keys.c.id == key_id)).first()
    if revoked is not None and revoked.revoked_at is not None:
        raise NotFound(f"key {key_id} was deleted")


def settle(engine: Engine, reservation_id: str, reserved_nusd: int, actual_nusd: int,
           now: datetime) -> SettleResult:
    """Charge the actual cost (at most the reservation; the rest is the operator's overrun,
    see the module docstring) and release the reservation, exactly once.

    The reservation row is deleted in the same transaction that moves the money, so a
    second settlement (a retry, a sweep) finds no row and changes nothing.
    """
    if actual_nusd < 0:
        raise ValueError("a settlement cannot be negative")
    # clamped before the database sees it: no BIGINT overflow, whatever was reported; the
    # row's own amount (SQL ``_charged``) clamps again should the caller's differ
    charged = min(actual_nusd, reserved_nusd)
    params = {**period_starts(now), "p_reservation": reservation_id, "p_actual": charged}
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            row = conn.execute(SETTLING_PG, params).first()
    else:
        with engine.begin() as conn:
            row = conn.execute(RELEASING, params).first()
            if row is not None:
                conn.execute(SETTLING, {**params, "p_tenant": row.tenant_id,
                                        "p_held": row.amount_nusd})
                if row.key_id is not None:
                    conn.execute(KEY_SETTLING, {**params, "p_key": row.key_id,
                                                "p_key_held": row.key_held_nusd,
                                                "p_actual": min(charged, row.amount_nusd)})
    if row is None:
        return SettleResult(reservation_id, reserved_nusd / 1e9, actual_nusd / 1e9,
                            applied=False)
    if actual_nusd > row.amount_nusd:
        log.warning("settlement %s: actual %d > reserved %d nUSD; the tenant is charged the "
                    "reservation, the excess is the operator's", reservation_id, actual_nusd,
                    row.amount_nusd)
    return SettleResult(reservation_id, row.amount_nusd / 1e9, actual_nusd / 1e9, applied=True)


def charge_once(engine: Engine, charge_id: str, tenant_id: str, amount_nusd: int,
                now: datetime, key_id: str | None = None) -> bool:
    """Add a cost incurred without a reservation to ``spent``, once per ``charge_id``.

    For requests served during a database outage (gateway/reliability/outage.py): the id is inserted into
    ``outage_charges`` in the same transaction as the charge, so a journal replayed again, after
    a crash or a database failure part-way through, finds the id and charges nothing. Returns
    whether this call charged. The charge lands in the current period, as a settlement does,
    and in ``key_id``'s spend too (the key's own budget counts what it spent in the outage).
    """
    if amount_nusd < 0:
        raise ValueError("a charge cannot be negative")
    spent_after = _spent_plus(_big(amount_nusd))
    try:
        with engine.begin() as conn:
            conn.execute(insert(outage_charges).values(
                id=charge_id, tenant_id=tenant_id, amount_nusd=amount_nusd,
                charged_at_s=int(now.timestamp())))
            conn.execute(update(tenants).where(tenants.c.id == tenant_id)
                         .values(**_rollover_values(spent_after)), period_starts(now))
            if key_id is not None:
                conn.execute(update(api_keys).where(api_keys.c.id == key_id)
                             .values(spent_nusd=api_keys.c.spent_nusd + _big(amount_nusd)))
    except IntegrityError:
        return False  # charged by an earlier replay
    return True


RESERVATION_ID_LEN = 36  # budget_reservations.id is String(36)


def set_budget(engine: Engine, tenant_id: str, budget_nusd: int | None, period: str | None,
               now: datetime, *, reset: bool = False) -> None:
    """Set the budget (None = unlimited) and optionally a period.

    A period different from the current one (or `reset=True`) re-baselines: spent goes to 0
    and the period starts at the new period's current start. Open reservations stay booked.
    Any call is the operator's answer to an overrun: it is moved into spent and cleared.
    """
    if budget_nusd is not None and budget_nusd < 0:
        raise ValueError("a budget cannot be negative")
    values: dict = {"budget_nusd": budget_nusd, "overrun_nusd": 0,
                    "spent_nusd": tenants.c.spent_nusd + tenants.c.overrun_nusd}
    if period is not None:
        validate_period(period)
        changed = true() if reset else tenants.c.period != period
        new_start = period_start_s(period, now)
        values.update(
            period=period,
            spent_nusd=case((changed, 0), else_=tenants.c.spent_nusd + tenants.c.overrun_nusd),
            period_start_s=case((changed, new_start), else_=tenants.c.period_start_s),
        )
    elif reset:
        values.update(spent_nusd=0, period_start_s=_current_start())
    with engine.begin() as conn:
        if conn.execute(update(tenants).where(tenants.c.id == tenant_id)
                        .values(**values), period_starts(now)).rowcount != 1:
            raise NotFound(f"tenant {tenant_id} does not exist")


# the SET clauses a lease's adjustment shares with settlement (gateway/store/lease_ledger.py)
rollover_values, spent_plus = _rollover_values, _spent_plus
