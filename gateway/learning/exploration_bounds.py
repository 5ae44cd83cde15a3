"""What exploration may spend, booked before every call: a route's share, its reference cap, the
global budget.

Every shadow or judge call first books its worst case, with one conditional UPDATE per bound
(gateway/learning/exploration_ledger.py), on (1) the explored route's share allowance,
``max_share`` of what its requests were charged; (2) on a route with a promise, for the
reference's answer beside a cheaper served one and the judge's comparison, the route's cap per
UTC day (``reference_budget_usd``), when set; (3) the global budget per period
(``budget_usd``), when set. A call that does not fit one of them is skipped and what it booked
first released, so no bound is exceeded, whatever the concurrency or number of replicas; each
booking is settled at the call's actual cost (gateway/learning/shadow.py makes the calls).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

import anyio.to_thread
from sqlalchemy import Engine

from gateway.config import ExplorationSettings
from gateway.learning import exploration_ledger
from gateway.store.periods import period_start_s, utcnow

log = logging.getLogger(__name__)

Holds = list[tuple[str, int]]  # (ledger scope, period start) of one booking


class ExplorationBounds:
    """Books and settles exploration calls on the bounds ``cfg`` sets; counts what each
    refused (``skipped_*``: shown in the logs and tests)."""

    def __init__(self, engine: Engine, cfg: ExplorationSettings,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.engine, self.cfg, self.clock = engine, cfg, clock
        self.skipped_budget = 0
        self.skipped_reference_cap = 0  # reference shadowing refused by a route's daily cap
        self.skipped_share = 0  # calls refused by their route's share allowance (max_share)

    async def share(self, route: str, usd: float) -> Holds | None:
        """Book ``usd`` on ``route``'s share allowance alone ([] when there is no share
        bound): a judged pair's whole worst case, before any of its calls books the rest."""
        if self.cfg.max_share is None:
            return []
        scope = exploration_ledger.share_scope(route)
        if not await anyio.to_thread.run_sync(exploration_ledger.reserve_within, self.engine,
                                              scope, usd):
            self.skipped_share += 1
            return None
        return [(scope, exploration_ledger.SHARE_PERIOD_START)]

    async def book(self, usd: float, route: str | None = None, *, share: str | None = None
                   ) -> Holds | None:
        """Book ``usd`` on the bounds it falls under (module docstring): ``share``'s allowance
        (the explored request's route) when ``max_share`` is set, ``route``'s daily cap on
        asking its reference when it has one, the global budget when ``budget_usd`` is set.
        Each refusal releases what was booked first. The holds to settle, or None."""
        holds: Holds = []
        if share is not None:
            held = await self.share(share, usd)
            if held is None:
                return None
            holds += held
        cap = None if route is None else self.cfg.reference_budget_for(route)
        if cap is not None:
            scope = exploration_ledger.reference_scope(route or "")
            day = period_start_s(exploration_ledger.REFERENCE_PERIOD, self.clock())
            ok = await anyio.to_thread.run_sync(
                exploration_ledger.reserve, self.engine, day, cap, usd, scope)
            if not ok:
                await self.settle(holds, usd, 0.0)
                self.skipped_reference_cap += 1
                log.info("reference shadowing on route %s skipped: %.6f USD does not fit its "
                         "daily cap of %.4f USD", route, usd, cap)
                return None
            holds.append((scope, day))
        if self.cfg.budget_usd is None:
            return holds
        start = period_start_s(self.cfg.period, self.clock())
        ok = await anyio.to_thread.run_sync(
            exploration_ledger.reserve, self.engine, start, self.cfg.budget_usd, usd
        )
        if not ok:
            await self.settle(holds, usd, 0.0)  # release the route's booking
            self.skipped_budget += 1
            log.info("exploration skipped: %.6f USD does not fit the budget", usd)
            return None
        return [(exploration_ledger.GLOBAL, start), *holds]

    async def settle(self, holds: Holds, held: float, actual: float) -> None:
        """Move each hold from reserved to spent at ``actual`` (capped at ``held``; 0
        releases it)."""
        for scope, start in holds:
            await anyio.to_thread.run_sync(
                exploration_ledger.settle, self.engine, start, held, actual, scope)
            if scope.startswith(exploration_ledger.REFERENCE) and held > 0:
                log.info("reference shadowing on route %s: %.6f USD spent (%.6f held), "
                         "on the operator's exploration budget",
                         scope[len(exploration_ledger.REFERENCE):], min(actual, held), held)
