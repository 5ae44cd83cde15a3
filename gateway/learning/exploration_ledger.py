"""The exploration budget per period (``exploration_ledger``), separate from the tenants'
budgets and booked like them: one conditional UPDATE, money in integer nano-dollars."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN

from sqlalchemy import Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from gateway.learning.tables import ledger_t
from gateway.store.records import nusd_to_usd, usd_to_nusd


def nusd(usd: float) -> int:
    """USD → nano-dollars to the nearest: exploration is booked at its estimate and settled at
    its actual cost, so no rounding direction needs to protect a tenant."""
    return usd_to_nusd(usd, ROUND_HALF_EVEN)


def reserve(engine: Engine, period_start_s: int, budget_usd: float, usd: float) -> bool:
    """Book ``usd`` in this period's exploration budget in one conditional UPDATE.

    Invariant: spent + reserved ≤ budget after every booking, under any interleaving.
    """
    amount, budget = nusd(usd), nusd(budget_usd)
    if amount > budget:
        return False
    for _ in range(2):
        with engine.begin() as conn:
            res = conn.execute(
                update(ledger_t)
                .where(
                    ledger_t.c.period_start_s == period_start_s,
                    ledger_t.c.spent_nusd + ledger_t.c.reserved_nusd + amount
                    <= ledger_t.c.budget_nusd,
                )
                .values(reserved_nusd=ledger_t.c.reserved_nusd + amount)
            )
            if res.rowcount == 1:
                return True
            exists = conn.execute(
                select(ledger_t.c.period_start_s).where(ledger_t.c.period_start_s == period_start_s)
            ).first()
        if exists is not None:
            return False
        try:
            with engine.begin() as conn:
                conn.execute(
                    insert(ledger_t).values(
                        period_start_s=period_start_s,
                        budget_nusd=budget,
                        spent_nusd=0,
                        reserved_nusd=0,
                    )
                )
        except IntegrityError:  # another replica opened the period first: retry the update
            pass
    return False


def settle(
    engine: Engine, period_start_s: int, reserved_usd: float, actual_usd: float
) -> None:
    """Move a booking from reserved to spent at its actual cost (capped at the booking)."""
    held = nusd(reserved_usd)
    spent = min(nusd(actual_usd), held)
    with engine.begin() as conn:
        conn.execute(
            update(ledger_t)
            .where(ledger_t.c.period_start_s == period_start_s)
            .values(
                reserved_nusd=ledger_t.c.reserved_nusd - held,
                spent_nusd=ledger_t.c.spent_nusd + spent,
            )
        )


def spending(engine: Engine, period_start_s: int | None = None) -> dict:
    """Spent and reserved USD in one period (or summed over all periods)."""
    q = select(
        func.coalesce(func.sum(ledger_t.c.spent_nusd), 0),
        func.coalesce(func.sum(ledger_t.c.reserved_nusd), 0),
        func.coalesce(func.max(ledger_t.c.budget_nusd), 0),
    )
    if period_start_s is not None:
        q = q.where(ledger_t.c.period_start_s == period_start_s)
    with engine.connect() as conn:
        spent, reserved, budget = conn.execute(q).one()
    return {"spent_usd": nusd_to_usd(int(spent)), "reserved_usd": nusd_to_usd(int(reserved)),
            "budget_usd": nusd_to_usd(int(budget))}
