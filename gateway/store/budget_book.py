"""The budget as the event loop holds it: a request's reservation, drawn from a budget lease
(gateway/store/leases.py) or booked alone on the ledger (gateway/store/ledger.py), and its
settlement, both safe against the caller's cancellation.

Why apart from `Store`: this is what a request leaves in flight (the tasks booking and
settling, the settlements a database outage deferred); the store's lifecycle only waits for
it at close and retries it in its maintenance loop. A deferred settlement is never lost while
the process lives; if the process dies, the reservation expires and is charged in full.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Engine

# module imports by full name: ``from gateway.store import x`` would import this package's
# __init__, which imports store.py, which imports this module (an import cycle)
import gateway.store.ledger as ledgerlib
import gateway.store.reclaim as reclaimlib
from gateway.store.errors import StoreUnavailable
from gateway.store.key_ledger import key_booking
from gateway.store.lease_settings import LeaseSettings
from gateway.store.leases import LeaseBook
from gateway.store.money import usd_to_nusd
from gateway.store.records import Reservation, SettleResult, Tenant

log = logging.getLogger(__name__)
T = TypeVar("T")
Run = Callable[..., Awaitable[Any]]  # runs a synchronous database function in a thread


class BudgetBook:
    """This replica's reservations and settlements in flight, and those deferred."""

    def __init__(self, engine: Engine, run: Run, clock: Callable[[], datetime],
                 replica_tag: str, reservation_ttl_s: float,
                 leases: LeaseSettings | None) -> None:
        self.engine = engine
        self._run = run
        self._clock = clock
        self._replica_tag = replica_tag  # tags reservations (store/reclaim.py)
        self._reservation_ttl_s = reservation_ttl_s
        self._pending_settles: dict[str, tuple[Reservation, int]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        # budget leases (gateway/store/leases.py), when enabled
        self.leases = LeaseBook(leases, engine, run, self._book, clock, replica_tag) \
            if leases is not None and leases.enabled else None

    async def reserve(self, tenant: Tenant | str, usd: float,
                      request_id: str | None = None) -> Reservation:
        """Hold `usd` of the tenant's budget or raise `BudgetExceeded`.

        Cancellation-safe: the database work runs in its own task; if the caller is cancelled
        while it runs (client gone), a reservation booked anyway is released (settled at 0)
        instead of staying held until it expires."""
        if self.leases is not None and isinstance(tenant, Tenant):
            task = self._spawn(self.leases.reserve(tenant, usd_to_nusd(usd), request_id))
        else:
            task = self._spawn(self._book(tenant, usd_to_nusd(usd), request_id,
                                          self._replica_tag))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(self._release_orphan)
            raise

    async def _book(self, tenant: Tenant | str, amount_nusd: int, request_id: str | None,
                    id_prefix: str) -> Reservation:
        """One reservation booked on the ledger (the tenant's and its key's rows)."""
        tenant_id = tenant.id if isinstance(tenant, Tenant) else tenant
        now = self._clock()
        key_id = tenant.key_id if isinstance(tenant, Tenant) else None
        prefix = id_prefix if id_prefix.startswith(self._replica_tag) else \
            self._replica_tag + id_prefix
        return await self._run(ledgerlib.reserve, self.engine, tenant_id, amount_nusd,
                               request_id, now, prefix, key_id,
                               key_booking(self.engine, tenant, now))

    def _release_orphan(self, task: asyncio.Task[Reservation]) -> None:
        if not task.cancelled() and task.exception() is None:
            if self.leases is not None and self.leases.owns(task.result()):
                self.leases.settle(task.result(), 0)
            else:
                self._spawn(self._settle(task.result(), 0))

    async def settle(self, reservation: Reservation, actual_usd: float) -> SettleResult:
        """Charge `actual_usd`, release the reservation; idempotent.

        Cancellation-safe: the settlement runs in its own task and completes even if the
        caller is cancelled (e.g. settling in a `finally` after a client disconnect). If the
        database is down it is kept and retried in the background (`deferred=True`)."""
        if self.leases is not None and self.leases.owns(reservation):
            return self.leases.settle(reservation, usd_to_nusd(actual_usd))
        return await asyncio.shield(self._spawn(self._settle(reservation,
                                                             usd_to_nusd(actual_usd))))

    async def _settle(self, reservation: Reservation, actual: int) -> SettleResult:
        try:
            return await self._run(ledgerlib.settle, self.engine, reservation.id,
                                   reservation.amount_nusd, actual, self._clock())
        except StoreUnavailable:
            self._pending_settles[reservation.id] = (reservation, actual)
            return SettleResult(reservation.id, reservation.amount_usd, actual / 1e9,
                                applied=False, deferred=True)

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A task kept referenced until it is done (and awaited by `finish_in_flight`)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @property
    def pending(self) -> int:
        """Settlements the database could not take yet."""
        return len(self._pending_settles)

    async def retry_settles(self) -> None:
        for rid, (res, actual) in list(self._pending_settles.items()):
            await self._run(ledgerlib.settle, self.engine, rid, res.amount_nusd, actual,
                            self._clock())
            self._pending_settles.pop(rid, None)

    async def expire_stale(self) -> int:
        """Release reservations older than `reservation_ttl_s` (dead requests), charging
        what they provably owe (gateway/store/ledger.py)."""
        cutoff = int(self._clock().timestamp() - self._reservation_ttl_s)
        return await self._run(reclaimlib.expire_reservations, self.engine, cutoff, self._clock())

    async def finish_in_flight(self, timeout_s: float) -> None:
        """At close: bookings and settlements in flight finished, every lease settled."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)
        if self.leases is not None:
            await self.leases.close()

    async def retry_settles_once_more(self) -> None:
        """At close, once the log is flushed: the deferred settlements tried a last time."""
        with contextlib.suppress(StoreUnavailable):
            await self.retry_settles()
        if self._pending_settles:
            log.error("%d settlements could not be written; their reservations will be "
                      "charged in full when they expire", len(self._pending_settles))
