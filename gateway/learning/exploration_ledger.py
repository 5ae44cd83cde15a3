"""The exploration budget per period (``exploration_ledger``), separate from the tenants'
budgets and booked like them: one conditional UPDATE, money in integer nano-dollars.

A row is one (period, scope): scope ``GLOBAL`` (``''``) is ``retraining.exploration``'s
``budget_usd`` per ``period``; ``reference_scope(route)`` is that route's daily cap on
shadowing its reference (``reference_budget_usd``), booked beside the global budget, so the
same call is held by both and each is never exceeded. Sums over scopes would count such a
call twice: ``spending`` reads one scope, ``spending_by_scope`` each.

``share_scope(route)`` bounds exploration by the route's own spend (``max_share``): its row
(period ``SHARE_PERIOD_START``, never rolling over) has as budget ``max_share`` × what the
route's requests were charged, credited as they are recorded (``credit``), and every
exploration call of a request on that route (shadow answers, the reference's answer, the
judge's calls) is booked on it first (``reserve_within``): exploration spent ≤ max_share ×
route spend at every moment, on every replica.
"""

from __future__ import annotations

from datetime import datetime
from decimal import ROUND_HALF_EVEN

from sqlalchemy import Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from gateway.learning.tables import ledger_t
from gateway.store.periods import period_start_s as _period_start_s
from gateway.store.records import nusd_to_usd, usd_to_nusd

GLOBAL = ""
REFERENCE = "reference:"
REFERENCE_PERIOD = "daily"  # a route's reference cap is per UTC day, whatever the global period
SHARE = "share:"
SHARE_PERIOD_START = 0  # a route's share allowance never rolls over (period "total")


def reference_scope(route: str) -> str:
    """The scope of ``route``'s daily cap on shadowing its reference."""
    return REFERENCE + route


def share_scope(route: str) -> str:
    """The scope of ``route``'s exploration allowance (``max_share`` of its spend)."""
    return SHARE + route


def nusd(usd: float) -> int:
    """USD → nano-dollars to the nearest: exploration is booked at its estimate and settled at
    its actual cost, so no rounding direction needs to protect a tenant."""
    return usd_to_nusd(usd, ROUND_HALF_EVEN)


def _row(period_start_s: int, scope: str) -> tuple:
    return ledger_t.c.period_start_s == period_start_s, ledger_t.c.scope == scope


def reserve(engine: Engine, period_start_s: int, budget_usd: float, usd: float,
            scope: str = GLOBAL) -> bool:
    """Book ``usd`` in this period's budget of ``scope`` in one conditional UPDATE.

    Invariant: spent + reserved ≤ budget after every booking, under any interleaving. The
    budget is the one the (period, scope) row was opened with. A refusal is only ever read
    from a row that is full; when the row was opened (or released) by another replica
    between the UPDATE and the read, the UPDATE is tried again, a bounded number of times.
    """
    amount, budget = nusd(usd), nusd(budget_usd)
    if amount > budget:
        return False
    for _ in range(4):
        with engine.begin() as conn:
            res = conn.execute(
                update(ledger_t)
                .where(
                    *_row(period_start_s, scope),
                    ledger_t.c.spent_nusd + ledger_t.c.reserved_nusd + amount
                    <= ledger_t.c.budget_nusd,
                )
                .values(reserved_nusd=ledger_t.c.reserved_nusd + amount)
            )
            if res.rowcount == 1:
                return True
            row = conn.execute(
                select(ledger_t.c.spent_nusd + ledger_t.c.reserved_nusd + amount
                       <= ledger_t.c.budget_nusd).where(*_row(period_start_s, scope))
            ).first()
        if row is not None:
            if not row[0]:
                return False
            continue  # it fits now: opened or released after the UPDATE read it
        try:
            with engine.begin() as conn:
                conn.execute(
                    insert(ledger_t).values(
                        period_start_s=period_start_s,
                        scope=scope,
                        budget_nusd=budget,
                        spent_nusd=0,
                        reserved_nusd=0,
                    )
                )
        except IntegrityError:  # another replica opened the period first: retry the update
            pass
    return False


def credit(engine: Engine, amounts: dict[str, float]) -> None:
    """Grow each scope's allowance (period ``SHARE_PERIOD_START``) by its USD, in one
    transaction: one UPDATE a scope, an INSERT where its row is new (a replica that loses the
    race to open it adds to the row the winner opened)."""
    for scope, usd in sorted(amounts.items()):
        amount = nusd(usd)
        if amount <= 0:
            continue
        for _ in range(3):
            try:
                with engine.begin() as conn:
                    res = conn.execute(
                        update(ledger_t).where(*_row(SHARE_PERIOD_START, scope))
                        .values(budget_nusd=ledger_t.c.budget_nusd + amount))
                    if res.rowcount == 0:
                        conn.execute(insert(ledger_t).values(
                            period_start_s=SHARE_PERIOD_START, scope=scope,
                            budget_nusd=amount, spent_nusd=0, reserved_nusd=0))
                break
            except IntegrityError:  # opened by another replica meanwhile: add to it
                continue


def reserve_within(engine: Engine, scope: str, usd: float) -> bool:
    """Book ``usd`` on ``scope``'s allowance (period ``SHARE_PERIOD_START``) in one conditional
    UPDATE; False when it does not fit or nothing was credited yet."""
    amount = nusd(usd)
    with engine.begin() as conn:
        res = conn.execute(
            update(ledger_t)
            .where(*_row(SHARE_PERIOD_START, scope),
                   ledger_t.c.spent_nusd + ledger_t.c.reserved_nusd + amount
                   <= ledger_t.c.budget_nusd)
            .values(reserved_nusd=ledger_t.c.reserved_nusd + amount))
        return res.rowcount == 1


def shares(engine: Engine) -> dict[str, dict]:
    """route -> {spent_usd, reserved_usd, budget_usd} of its share allowance (budget: what
    ``max_share`` of its recorded spend allows so far)."""
    return {scope[len(SHARE):]: v for scope, v in spending_by_scope(
        engine, SHARE_PERIOD_START).items() if scope.startswith(SHARE)}


def settle(
    engine: Engine, period_start_s: int, reserved_usd: float, actual_usd: float,
    scope: str = GLOBAL,
) -> None:
    """Move a booking from reserved to spent at its actual cost (capped at the booking);
    ``actual_usd`` 0 releases it."""
    held = nusd(reserved_usd)
    spent = min(nusd(actual_usd), held)
    with engine.begin() as conn:
        conn.execute(
            update(ledger_t)
            .where(*_row(period_start_s, scope))
            .values(
                reserved_nusd=ledger_t.c.reserved_nusd - held,
                spent_nusd=ledger_t.c.spent_nusd + spent,
            )
        )


def _usd(spent: int, reserved: int, budget: int) -> dict:
    return {"spent_usd": nusd_to_usd(int(spent)), "reserved_usd": nusd_to_usd(int(reserved)),
            "budget_usd": nusd_to_usd(int(budget))}


def spending(engine: Engine, period_start_s: int | None = None, scope: str = GLOBAL) -> dict:
    """Spent and reserved USD of one scope in one period (or summed over all periods)."""
    q = select(
        func.coalesce(func.sum(ledger_t.c.spent_nusd), 0),
        func.coalesce(func.sum(ledger_t.c.reserved_nusd), 0),
        func.coalesce(func.max(ledger_t.c.budget_nusd), 0),
    ).where(ledger_t.c.scope == scope)
    if period_start_s is not None:
        q = q.where(ledger_t.c.period_start_s == period_start_s)
    with engine.connect() as conn:
        spent, reserved, budget = conn.execute(q).one()
    return _usd(spent, reserved, budget)


def spending_by_scope(engine: Engine, period_start_s: int | None = None) -> dict[str, dict]:
    """``spending`` for every scope with a row, in one query: scope → {spent_usd,
    reserved_usd, budget_usd} in that period (or summed over all periods; budget: the
    largest)."""
    q = select(
        ledger_t.c.scope,
        func.sum(ledger_t.c.spent_nusd),
        func.sum(ledger_t.c.reserved_nusd),
        func.max(ledger_t.c.budget_nusd),
    ).group_by(ledger_t.c.scope).order_by(ledger_t.c.scope)
    if period_start_s is not None:
        q = q.where(ledger_t.c.period_start_s == period_start_s)
    with engine.connect() as conn:
        rows = conn.execute(q).all()
    return {scope: _usd(spent, reserved, budget) for scope, spent, reserved, budget in rows}


def current_spending(engine: Engine, period: str, now: datetime) -> dict[str, dict]:
    """What the dashboard shows: the global budget in its current ``period`` and every
    route's reference cap today (UTC), scope → {spent_usd, reserved_usd, budget_usd}."""
    out = {s: v for s, v in spending_by_scope(
        engine, _period_start_s(REFERENCE_PERIOD, now)).items() if s.startswith(REFERENCE)}
    out.update({share_scope(r): v for r, v in shares(engine).items()})
    glob = spending_by_scope(engine, _period_start_s(period, now)).get(GLOBAL)
    if glob is not None:
        out[GLOBAL] = glob
    return dict(sorted(out.items()))
