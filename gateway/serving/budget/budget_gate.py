"""Per-tenant admission in front of the ledger (this process): waiting in line for the budget,
and a bound on what concurrent requests could overrun.

**Waiting instead of refusing.** A reservation the ledger refuses only because other requests'
reservations are in flight (settled spend + this request's bound ≤ budget) is not refused at
once: the request joins its key's line and waits, at most ``budget_wait_s`` in all, for
them to settle. There is one line per key (a tenant's keys each have their own), FIFO in this
process: a request finding others of its key waiting queues behind them instead of trying
first, and only each line's head retries the ledger. So the line is fair across keys: one
key's burst of waiting requests holds one head, and a team-mate's request is the head of its
own line at once, trying the ledger beside it instead of behind the whole burst. Every head
of a tenant's lines is woken at once when a request of the tenant settles in this process,
and otherwise
polls the ledger with a backoff from 10 ms to 250 ms, which is how it sees settlements of
other replicas (the database is the only state replicas share; across replicas the order
is by who polls first, not strict FIFO). Waiting is on the event loop's timers, never a
blocking call, and stops when the client disconnects (``BudgetHold.client_gone``).

**Overrun exposure.** A reservation bounds a request's cost by the output cap sent upstream;
a provider that ignores the cap bills up to the backend's own ``max_output_tokens``. The
difference (the request's *exposure*: cost at the backend's max output minus its
reservation, 0 when the request reserves the backend's max output already) is summed over a
tenant's requests in flight in this process, and a request whose exposure would take the sum
past ``budget_overrun_exposure`` × the tenant's budget waits in its line (at least one
request is always let in). A key with a budget of its own (LiteLLM's ``max_budget``) is
bounded the same way against that budget, over its own requests in flight: a key's limit is
a tenant's limit, whether or not its tenant has a budget. So however many concurrent requests overrun before the first
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

LineId = tuple[str, str | None]  # (tenant id, key id): one line per key


@dataclass
class _Line:
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class _Exposure:
    usd: float = 0.0  # USD providers could bill beyond the in-flight reservations
    in_flight: int = 0  # requests holding exposure


class BudgetGate:
    """The keys' lines and the tenants' and keys' exposures of this process. An exposure
    account is a tenant id, or ``key_account(key id)`` for a key's own budget."""

    def __init__(self) -> None:
        self._lines: dict[LineId, _Line] = {}
        self._exposures: dict[str, _Exposure] = {}
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

    def _line(self, line_id: LineId) -> _Line:
        line = self._lines.get(line_id)
        if line is None:
            line = self._lines[line_id] = _Line()
        return line

    def queued(self, line_id: LineId) -> int:
        line = self._lines.get(line_id)
        return len(line.waiters) if line else 0

    # -- the line ---------------------------------------------------------------------------
    def join(self, line_id: LineId) -> asyncio.Future[None]:
        """A place at the end of the key's line: done when it is at the head."""
        line = self._line(line_id)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.waiters.append(turn)
        if len(line.waiters) == 1:
            turn.set_result(None)
        return turn

    def leave(self, line_id: LineId, turn: asyncio.Future[None]) -> None:
        """Leave the line (admitted, refused or gone); the next one is at the head."""
        line = self._lines.get(line_id)
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
        if not line.waiters and self._lines.get(line_id) is line:
            del self._lines[line_id]

    async def pause(self, line_id: LineId, timeout_s: float) -> None:
        """Sleep up to ``timeout_s``; earlier when a request of the tenant settles here."""
        line = self._line(line_id)
        line.wake.clear()
        try:
            await asyncio.wait_for(line.wake.wait(), timeout=max(0.0, timeout_s))
        except TimeoutError:
            pass

    def settled(self, tenant_id: str) -> None:
        """A request of the tenant settled: wake the heads of its keys' lines."""
        for (tid, _), line in list(self._lines.items()):
            if tid == tenant_id:
                line.wake.set()

    # -- exposure ---------------------------------------------------------------------------
    def exposure_fits(self, account: str, usd: float, limit_usd: float | None) -> bool:
        """Whether a request exposing ``usd`` more may be in flight (always, alone)."""
        if limit_usd is None or usd <= 0:
            return True
        e = self._exposures.get(account)
        if e is None or e.in_flight == 0:
            return True
        return e.usd + usd <= limit_usd + 1e-12

    def expose(self, account: str, usd: float, *, first: bool = True) -> None:
        """A request in flight exposes ``usd`` more (``first``: it was not counted yet)."""
        e = self._exposures.setdefault(account, _Exposure())
        e.usd += usd
        e.in_flight += int(first)

    def withdraw(self, account: str, usd: float, *, last: bool) -> None:
        """Undo ``expose`` for a request not admitted after all (``last``: it no longer
        holds any exposure, so it leaves the in-flight count)."""
        self._lower(account, usd, int(last))

    def release(self, account: str, usd: float) -> None:
        self._lower(account, usd, 1)

    def _lower(self, account: str, usd: float, leaving: int) -> None:
        e = self._exposures.get(account)
        if e is None:
            return
        e.usd = max(0.0, e.usd - usd)
        e.in_flight = max(0, e.in_flight - leaving)
        if e.in_flight == 0:
            del self._exposures[account]


def key_account(key_id: str) -> str:
    """The exposure account of a key's own budget (tenant ids are hex: never ``key:``)."""
    return "key:" + key_id
