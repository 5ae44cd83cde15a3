"""Per-tenant admission in front of the ledger (this process): waiting in line for the budget,
and a bound on what concurrent requests could overrun.

**Waiting instead of refusing.** A reservation the ledger refuses only because other requests'
reservations are in flight (settled spend + this request's bound ≤ budget) is not refused at
once: the request joins its tenant's line and waits, at most ``budget_wait_s`` in all, for
them to settle. The line is FIFO per tenant in this process: a request finding others waiting
queues behind them instead of trying first, and only the head retries the ledger. The head
is woken at once when a request of the same tenant settles in this process, and otherwise
polls the ledger with a backoff from 10 ms to 250 ms, which is how it sees settlements of
other replicas (the database is the only state replicas share; across replicas the order
is by who polls first, not strict FIFO). Waiting is on the event loop's timers, never a
blocking call, and stops when the client disconnects (``BudgetHold.client_gone``).

**Overrun exposure.** A reservation bounds a request's cost by the output cap sent upstream;
a provider that ignores the cap bills up to the backend's own ``max_output_tokens``. The
difference (the request's *exposure*: cost at the backend's max output minus its
reservation, 0 when the request reserves the backend's max output already) is summed over a
tenant's requests in flight in this process, and a request whose exposure would take the sum
past ``budget_overrun_exposure`` × the tenant's budget waits in the same line (at least one
request is always let in). So however many concurrent requests overrun before the first
overrun settles (after which the ledger refuses the tenant), what providers can bill beyond
the budget is at most ``budget_overrun_exposure`` × budget per replica (or one request's
exposure, if larger), for backends that respect their ``max_output_tokens``. A backend that
has answered within its bounds in this process (and was never seen overrunning one) is
trusted: its requests carry no exposure, so a tenant's concurrency is not limited by it. One
overrun (a settled answer reporting usage past its bounds, logged as an error and counted
in ``tollgate_budget_overruns``) takes the backend's trust away for good in this process;
the overrunning tenant is also refused by the ledger until an operator acts. The bound
therefore holds for backends until their first answer and after their first overrun; a
backend that answers within bounds and later starts overrunning is caught on that first
overrun (concurrent requests already in flight on it are not bounded).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field


@dataclass
class _Line:
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    exposure: float = 0.0  # USD providers could bill beyond the in-flight reservations
    in_flight: int = 0  # requests holding exposure


class BudgetGate:
    """The tenants' lines and exposures of this process."""

    def __init__(self) -> None:
        self._lines: dict[str, _Line] = {}
        self._trusted: set[str] = set()  # backends that answered within their bounds here
        self._overran: set[str] = set()  # backends seen billing past a bound: never trusted

    # -- backends ---------------------------------------------------------------------------
    def trusted(self, backend: str) -> bool:
        """Whether ``backend``'s requests carry no exposure: it has answered within its
        bounds in this process and has never been seen overrunning one."""
        return backend in self._trusted

    def answered(self, backend: str, *, overran: bool) -> None:
        """A settled answer of ``backend``: within its bounds, or past them (then its
        requests carry their exposure from now on, in this process)."""
        if overran:
            self._overran.add(backend)
            self._trusted.discard(backend)
        elif backend not in self._overran:
            self._trusted.add(backend)

    def _line(self, tenant_id: str) -> _Line:
        line = self._lines.get(tenant_id)
        if line is None:
            line = self._lines[tenant_id] = _Line()
        return line

    def queued(self, tenant_id: str) -> int:
        line = self._lines.get(tenant_id)
        return len(line.waiters) if line else 0

    # -- the line ---------------------------------------------------------------------------
    def join(self, tenant_id: str) -> asyncio.Future[None]:
        """A place at the end of the tenant's line: done when it is at the head."""
        line = self._line(tenant_id)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.waiters.append(turn)
        if len(line.waiters) == 1:
            turn.set_result(None)
        return turn

    def leave(self, tenant_id: str, turn: asyncio.Future[None]) -> None:
        """Leave the line (admitted, refused or gone); the next one is at the head."""
        line = self._lines.get(tenant_id)
        if line is None:
            return
        head = bool(line.waiters) and line.waiters[0] is turn
        try:
            line.waiters.remove(turn)
        except ValueError:
            return
        if not turn.done():
            turn.cancel()
        if head and line.waiters and not line.waiters[0].done():
            line.waiters[0].set_result(None)
        self._forget(tenant_id, line)

    async def pause(self, tenant_id: str, timeout_s: float) -> None:
        """Sleep up to ``timeout_s``; earlier when a request of the tenant settles here."""
        line = self._line(tenant_id)
        line.wake.clear()
        try:
            await asyncio.wait_for(line.wake.wait(), timeout=max(0.0, timeout_s))
        except TimeoutError:
            pass

    def settled(self, tenant_id: str) -> None:
        """A request of the tenant settled: wake the head of its line."""
        line = self._lines.get(tenant_id)
        if line is not None:
            line.wake.set()

    # -- exposure ---------------------------------------------------------------------------
    def exposure_fits(self, tenant_id: str, usd: float, limit_usd: float | None) -> bool:
        """Whether a request exposing ``usd`` more may be in flight (always, alone)."""
        if limit_usd is None or usd <= 0:
            return True
        line = self._lines.get(tenant_id)
        if line is None or line.in_flight == 0:
            return True
        return line.exposure + usd <= limit_usd + 1e-12

    def expose(self, tenant_id: str, usd: float, *, first: bool = True) -> None:
        """A request in flight exposes ``usd`` more (``first``: it was not counted yet)."""
        line = self._line(tenant_id)
        line.exposure += usd
        line.in_flight += int(first)

    def withdraw(self, tenant_id: str, usd: float, *, last: bool) -> None:
        """Undo ``expose`` for a request not admitted after all (``last``: it no longer
        holds any exposure, so it leaves the in-flight count)."""
        line = self._lines.get(tenant_id)
        if line is None:
            return
        line.exposure = max(0.0, line.exposure - usd)
        line.in_flight = max(0, line.in_flight - int(last))
        if line.in_flight == 0:
            line.exposure = 0.0
        self._forget(tenant_id, line)

    def release(self, tenant_id: str, usd: float) -> None:
        line = self._lines.get(tenant_id)
        if line is None:
            return
        line.exposure = max(0.0, line.exposure - usd)
        line.in_flight = max(0, line.in_flight - 1)
        if line.in_flight == 0:
            line.exposure = 0.0
        line.wake.set()
        self._forget(tenant_id, line)

    def _forget(self, tenant_id: str, line: _Line) -> None:
        if not line.waiters and line.in_flight == 0 and self._lines.get(tenant_id) is line:
            del self._lines[tenant_id]
