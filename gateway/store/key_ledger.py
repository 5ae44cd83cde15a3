"""A key's own budget inside its tenant's: the key side of the ledger (gateway/store/ledger.py).

Invariant, per key with a budget and per budget period: key.spent + key.reserved <= key.budget,
alongside the tenant's spent + reserved <= budget. A reservation for a key with a budget (or a
reset period) is booked on both rows in ONE transaction,

    UPDATE tenants  SET reserved += x ... WHERE id = :t AND <tenant fits>     -- ledger.BOOKING
    UPDATE api_keys SET reserved += x ... WHERE id = :k AND <key fits>        -- KEY_BOOKING
    INSERT INTO budget_reservations (..., key_id, key_held_nusd = x)

and rolled back whole if either row refuses, so no interleaving of requests, replicas or
databases books past either budget (each conditional UPDATE is serialised on its row, as the
tenant's is; rows are always locked tenant first, then key, on reserve and settle alike, so two
transactions cannot deadlock). A key without a budget takes the tenant's one-statement path
with ``key_id`` on the reservation, so its spend is still counted when it settles.

Reset period (LiteLLM's ``budget_duration``): when ``budget_reset_at_s`` has passed, the
first reservation re-baselines the key's spend to 0 and moves ``budget_reset_at_s`` to now +
the duration, which is how LiteLLM Proxy resets a key's budget (its reset job sets
``budget_reset_at = now + duration``). Reservations in flight carry over; a settlement lands
in the period in which it happens, as the tenant's do. Settling (ledger.settle) adds the
answer's whole cost to the key's spend and releases what the reservation held of its budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, and_, bindparam, case, or_, select, update

from gateway.store.durations import after
from gateway.store.errors import BudgetExceeded, NotFound
from gateway.store.ledger import BOOKING, RECORDING, RESERVATION_KEYS, period_param, period_starts
from gateway.store.models import api_keys
from gateway.store.records import Reservation, Tenant


@dataclass(frozen=True)
class KeyBooking:
    """Which key a reservation is for, and whether its own ledger takes part."""

    key_id: str
    budgeted: bool  # a budget or a reset period: book on the key's row too
    next_reset_s: int | None = None  # now + the key's budget_duration, for a reset due now


class KeyBudgetExceeded(BudgetExceeded):
    """The key's own budget refused the reservation (its tenant's might have taken it)."""

    def __init__(self, key_id: str, *args: float, **kwargs: float) -> None:
        super().__init__(*args, **kwargs)
        self.key_id = key_id
        self.args = (f"key {key_id}: {self.args[0]}",)


def _rolled() -> object:
    """SQL: the key's reset time has come (its spend starts again)."""
    return and_(api_keys.c.budget_reset_at_s.is_not(None),
                api_keys.c.budget_reset_at_s <= period_param("now"))


def _key_booking():
    amount = period_param("amount")
    spent_now = case((_rolled(), 0), else_=api_keys.c.spent_nusd)
    fits = or_(api_keys.c.budget_nusd.is_(None),
               spent_now + api_keys.c.reserved_nusd + amount <= api_keys.c.budget_nusd)
    return (update(api_keys)
            .where(api_keys.c.id == bindparam("p_key"), api_keys.c.revoked_at.is_(None), fits)
            .values(reserved_nusd=api_keys.c.reserved_nusd + amount, spent_nusd=spent_now,
                    budget_reset_at_s=case((_rolled(), period_param("next_reset")),
                                           else_=api_keys.c.budget_reset_at_s)))


KEY_BOOKING = _key_booking()


class _Refused(Exception):
    """Rolls the booking's transaction back; ``key`` says which row refused."""

    def __init__(self, key: bool) -> None:
        super().__init__()
        self.key = key


def reserve_keyed(engine: Engine, res: Reservation, key: KeyBooking, now: datetime) -> bool:
    """Book ``res`` on its tenant's row and its key's in one transaction (module docstring).
    False when the tenant refused; `KeyBudgetExceeded` when the key did."""
    tenant_params = {**period_starts(now), "p_tenant": res.tenant_id, "p_amount": res.amount_nusd}
    now_s = int(now.timestamp())
    key_params = {"p_key": key.key_id, "p_amount": res.amount_nusd, "p_now": now_s,
                  "p_next_reset": key.next_reset_s if key.next_reset_s is not None else now_s}
    try:
        with engine.begin() as conn:
            if conn.execute(BOOKING, tenant_params).rowcount != 1:
                raise _Refused(key=False)
            if conn.execute(KEY_BOOKING, key_params).rowcount != 1:
                raise _Refused(key=True)
            conn.execute(RECORDING, {f"p_{k}": getattr(res, k) for k in RESERVATION_KEYS})
    except _Refused as refused:
        if not refused.key:
            return False
        raise _key_refusal(engine, key.key_id, res.amount_nusd, now_s) from None
    return True


def _key_refusal(engine: Engine, key_id: str, amount_nusd: int, now_s: int) -> BudgetExceeded:
    """The refusal with the key's numbers (read after the rollback, off the hot path)."""
    with engine.connect() as conn:
        row = conn.execute(select(api_keys).where(api_keys.c.id == key_id)).first()
    if row is None or row.revoked_at is not None:
        raise NotFound(f"key {key_id} does not exist or was deleted")
    return KeyBudgetExceeded(key_id, (row.budget_nusd or 0) / 1e9,
                             effective_key_spent(row.spent_nusd, row.budget_reset_at_s,
                                                 now_s) / 1e9,
                             row.reserved_nusd / 1e9, amount_nusd / 1e9)


def effective_key_spent(spent_nusd: int, reset_at_s: int | None, now_s: int) -> int:
    """The key's spend in its current period (0 once its reset time has passed)."""
    return 0 if reset_at_s is not None and reset_at_s <= now_s else spent_nusd


def key_booking(engine: Engine, tenant: Tenant | str, now: datetime
                ) -> Callable[[Reservation], bool] | None:
    """How a reservation is booked on the calling key's own ledger as well (``reserve_keyed``),
    when the key has a budget or a reset period; None otherwise (the tenant's path)."""
    if not isinstance(tenant, Tenant) or tenant.key_id is None or not tenant.key_budgeted:
        return None
    duration = tenant.key_budget_duration
    booking = KeyBooking(tenant.key_id, True,
                         int(after(duration, now).timestamp()) if duration else None)
    return lambda res: reserve_keyed(engine, res, booking, now)
