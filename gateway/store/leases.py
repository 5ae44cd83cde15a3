"""Budget leases (issue 49): a replica books a slice of a tenant's (and its key's) budget in one
write and reserves and settles its requests against it in memory.

Why: every request used to write the tenant's row twice (reserve, settle), so one tenant's
traffic, over all replicas, was capped by one row's write rate (about 1-2k pairs/s on this
machine's PostgreSQL, falling as replicas were added). A lease is a reservation
(gateway/store/lease_ledger.py, L1), so the hard bound is exact as before:

    spent + Σ leases + Σ other reservations <= budget                       (L1)

and in memory, per lease,  booked = free + held + charged                     (L2)

(free: drawable; held: by requests in flight; charged: settled requests' cost, not yet
written). A request draws ``x <= free`` (free -= x, held += x) and settles at ``c <= x``
(held -= x, charged += c, free += x - c). So no request is ever admitted past what the
database booked, and the database never books past the budget.

Size (adaptive): the requests the (tenant, key) is expected to send while a lease takes new
requests, ``n = ⌈rate · max_age_s⌉`` (rate: an average over recent arrivals), at most
``max_requests``; the lease holds ``n · x`` (x: this request's hold). A lease the budget
refuses is asked again at ``max_room_share`` of the free room the refusal reported; below two
requests' worth the request books its own reservation, as without leases, so the last
dollars are still served one request at a time (and the budget's waiting line works as
before). A sporadic tenant (n = 1) never leases.

Life: a lease takes new requests for ``max_age_s`` (the bound on how late this replica sees a
budget an admin lowered: the setting that trades lease size, i.e. writes per request, against
budget-change visibility), until a request finds it too small, or until ``idle_s`` without a
request; then it is closed: its free part is given back at once (``adjust``), and it is
settled at its charged cost when its last request settles. At shutdown every lease is
settled. While a lease is open or has requests in flight its row's heartbeat is refreshed at
least every ``ttl_s / 3`` (with what was charged since); a lease whose heartbeat is older than
``ttl_s / 2`` is returned by any replica's sweep (every ``ttl_s / 10``), so a killed replica's
lease is back within ``ttl_s``: charged nothing more,
so a killed replica's spend since its last heartbeat (at most ``flush_s`` of its traffic) is
the operator's, as a killed replica's requests in flight always were (reclaim.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

# not through gateway.store's __init__: it imports store.py, which imports this module
import gateway.store.lease_ledger as lease_ledger  # noqa: PLR0402
import gateway.store.ledger as ledgerlib
from gateway.store.errors import BudgetExceeded, StoreUnavailable
from gateway.store.lease_settings import LeaseSettings
from gateway.store.records import Reservation, SettleResult, Tenant

log = logging.getLogger(__name__)

LineKey = tuple[str, str | None]  # (tenant id, key id)
Book = Callable[[Tenant, int, str | None, str], Awaitable[Reservation]]
Run = Callable[..., Awaitable[Any]]
TICK_S = 0.05  # how often leases are looked at (in memory; writes only when due)
FLUSH_S = 1.0  # charged cost is written at least this often while a lease is open


@dataclass
class _Lease:
    res: Reservation  # the lease's reservation row, as booked
    booked: int  # nano-USD still booked on the row (L2)
    free: int
    keyed: bool  # it holds its key's own budget too
    opened: float
    held: int = 0
    charged: int = 0
    draws: int = 0
    in_flight: int = 0
    last_draw: float = 0.0
    last_write: float = 0.0
    closed: bool = False
    writing: bool = False


@dataclass
class _Arrivals:
    """An average of the gaps between a (tenant, key)'s requests (exponential, α = 0.1)."""

    last: float = 0.0
    gap: float | None = None

    def arrived(self, now: float) -> None:
        if self.last:
            g = max(now - self.last, 1e-6)
            self.gap = g if self.gap is None else 0.9 * self.gap + 0.1 * g
        self.last = now

    def expected(self, window_s: float) -> int:
        return 1 if self.gap is None else max(1, math.ceil(window_s / self.gap))


@dataclass
class LeaseStats:
    """Counters for the scale bench and metrics: ledger writes made for leases."""

    opened: int = 0
    adjusted: int = 0
    closed: int = 0
    draws: int = 0
    plain: int = 0  # requests that booked their own reservation
    swept: int = 0


@dataclass
class LeaseBook:
    """This replica's open leases, per (tenant, key)."""

    settings: LeaseSettings
    engine: Engine
    run: Run  # runs a synchronous database function off the event loop (Store._run)
    book: Book  # books a reservation (Store's ledger path) with an id prefix
    clock: Callable[[], datetime]
    tag: str = ""  # the replica's reservation-id tag (reclaim.py)
    stats: LeaseStats = field(default_factory=LeaseStats)
    _open: dict[LineKey, _Lease] = field(default_factory=dict)
    _closing: list[_Lease] = field(default_factory=list)
    _draws: dict[str, _Lease] = field(default_factory=dict)
    _arrivals: dict[LineKey, _Arrivals] = field(default_factory=dict)
    _booking: dict[LineKey, asyncio.Task[_Lease | None]] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None
    _last_sweep: float = 0.0
    _stopping: bool = False

    # -- requests -------------------------------------------------------------------------
    async def reserve(self, tenant: Tenant, amount: int, request_id: str | None) -> Reservation:
        """Hold ``amount`` nano-USD for a request: drawn from this replica's lease, from a new
        one, or booked alone; raises ``BudgetExceeded`` as the ledger does."""
        self._ensure_task()
        k: LineKey = (tenant.id, tenant.key_id)
        now = time.monotonic()
        arrivals = self._arrivals.setdefault(k, _Arrivals())
        arrivals.arrived(now)
        n = min(self.settings.max_requests, arrivals.expected(self.settings.max_age_s))
        for _ in range(4):  # a lease booked meanwhile may be drawn by others first
            lease = self._open.get(k)
            if lease is not None and self._takes(lease, amount, time.monotonic()):
                return self._draw(lease, amount, request_id)
            pending = self._booking.get(k)
            if pending is None:
                if lease is not None:
                    self._close(k, lease)
                if n < 2:
                    break
                # one booking per (tenant, key) at a time: the others wait for it
                pending = asyncio.get_running_loop().create_task(
                    self._lease(tenant, n * amount, amount))
                self._booking[k] = pending
                pending.add_done_callback(lambda t, k=k: self._booked(k, t))
            if await asyncio.shield(pending) is None:
                break  # the budget refused a lease: this request books its own
        await self._give_back(tenant.id)  # closed leases' free parts, before being refused
        self.stats.plain += 1
        return await self.book(tenant, amount, request_id, "")

    def _booked(self, k: LineKey, task: asyncio.Task[_Lease | None]) -> None:
        if self._booking.get(k) is task:
            del self._booking[k]

    def owns(self, reservation: Reservation) -> bool:
        return reservation.id in self._draws

    def settle(self, reservation: Reservation, actual: int) -> SettleResult:
        """Settle a drawn request in memory (L2): charged at most what it held."""
        lease = self._draws.pop(reservation.id)
        x = reservation.amount_nusd
        charged = min(max(actual, 0), x)
        lease.held -= x
        lease.in_flight -= 1
        lease.charged += charged
        lease.free += x - charged
        return SettleResult(reservation.id, x / 1e9, actual / 1e9, applied=True)

    def _takes(self, lease: _Lease, amount: int, now: float) -> bool:
        return (not lease.closed and lease.free >= amount
                and now - lease.opened < self.settings.max_age_s)

    def _draw(self, lease: _Lease, amount: int, request_id: str | None) -> Reservation:
        lease.free -= amount
        lease.held += amount
        lease.draws += 1
        lease.in_flight += 1
        lease.last_draw = time.monotonic()
        self.stats.draws += 1
        r = lease.res
        draw = Reservation(id=f"{r.id}/{lease.draws}", tenant_id=r.tenant_id,
                           request_id=request_id, amount_nusd=amount,
                           created_at_s=int(self.clock().timestamp()), key_id=r.key_id,
                           key_held_nusd=amount if lease.keyed else 0)
        self._draws[draw.id] = lease
        return draw

    async def _lease(self, tenant: Tenant, size: int, amount: int) -> _Lease | None:
        """Book a lease of ``size`` (or of ``max_room_share`` of the free room a refusal
        reports, if that is at least two requests' worth); None when neither fits."""
        prefix = self.tag + lease_ledger.LEASE_MARK
        try:
            res = await self.book(tenant, size, None, prefix)
        except BudgetExceeded as e:
            room = round((e.budget_usd - e.spent_usd - e.reserved_usd) * 1e9)
            size = min(size - amount, int(room * self.settings.max_room_share))
            if e.overrun_usd or size < 2 * amount:
                return None
            try:
                res = await self.book(tenant, size, None, prefix)
            except BudgetExceeded:
                return None
        now = time.monotonic()
        lease = _Lease(res=res, booked=res.amount_nusd, free=res.amount_nusd,
                       keyed=res.key_held_nusd > 0, opened=now, last_write=now)
        k = (tenant.id, tenant.key_id)
        old = self._open.get(k)
        if old is not None:  # another request booked one meanwhile
            self._close(k, old)
        self._open[k] = lease
        self.stats.opened += 1
        return lease

    def _close(self, k: LineKey, lease: _Lease) -> None:
        if self._open.get(k) is lease:
            del self._open[k]
        if not lease.closed:
            lease.closed = True
            self._closing.append(lease)

    # -- writes ---------------------------------------------------------------------------
    def _ensure_task(self) -> None:
        if not self._stopping and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._tend(), name="leases")

    async def _tend(self) -> None:
        """Close leases that aged or idled, give back and settle closed ones, refresh
        heartbeats, and sweep dead replicas' leases (lease_ledger.expire_leases)."""
        while not self._stopping:
            await asyncio.sleep(TICK_S)
            try:
                await self.tick()
            except StoreUnavailable:
                pass
            except Exception:
                log.exception("budget lease upkeep failed")

    async def tick(self, *, final: bool = False) -> None:
        now = time.monotonic()
        s = self.settings
        for k, lease in list(self._open.items()):
            if final or now - lease.opened >= s.max_age_s or (
                    now - max(lease.last_draw, lease.opened) >= s.idle_s):
                self._close(k, lease)
        heartbeat = min(FLUSH_S, s.ttl_s / 3)
        for lease in [*self._open.values(), *self._closing]:
            if lease.writing:
                continue
            if lease.closed and (lease.in_flight == 0 or final):
                await self._write(lease, settle=True)
            elif lease.closed and lease.free > 0 and (2 * lease.free >= lease.booked
                                                      or now - lease.last_write >= heartbeat):
                await self._write(lease)  # its free part back (most of it, or on a heartbeat)
            elif now - lease.last_write >= heartbeat:
                await self._write(lease)
        if now - self._last_sweep >= s.ttl_s / 10:
            self._last_sweep = now
            for k in [k for k, a in self._arrivals.items()  # bounded by recent tenants
                      if now - a.last > max(60.0, 10 * s.max_age_s) and k not in self._open]:
                del self._arrivals[k]
            # stale at half the TTL (heartbeats come every ttl_s / 3 at most), swept every
            # tenth: a killed replica's lease is back within ttl_s
            cutoff = int(self.clock().timestamp() - s.ttl_s / 2)
            mine = [lease.res.id for lease in [*self._open.values(), *self._closing]]
            self.stats.swept += await self.run(lease_ledger.expire_leases, self.engine, cutoff,
                                               self.clock(), keep=mine)

    async def _write(self, lease: _Lease, *, settle: bool = False) -> None:
        """One ledger write for ``lease``: settle it whole, or charge what its requests were
        charged, give back its free part if closed, and refresh its heartbeat."""
        lease.writing = True
        charged, free = lease.charged, lease.free if lease.closed else 0
        try:
            if settle:
                await self.run(ledgerlib.settle, self.engine, lease.res.id, lease.booked,
                               charged, self.clock())
                self._closing.remove(lease)
                self.stats.closed += 1
                return
            ok = await self.run(lease_ledger.adjust, self.engine, lease.res.id, charged, free,
                                self.clock(), keyed=lease.keyed)
            if not ok:  # swept (this replica was taken for dead): nothing left to draw
                log.error("budget lease %s was returned by a sweep while in use",
                          lease.res.id)
                lease.closed, lease.free = True, 0
                return
            lease.charged -= charged
            lease.free -= free
            lease.booked -= charged + free
            lease.last_write = time.monotonic()
            self.stats.adjusted += 1
        finally:
            lease.writing = False

    async def _give_back(self, tenant_id: str) -> None:
        """Give back the free part of this tenant's closed leases now (a refusal waits)."""
        for lease in list(self._closing):
            # still closing: a concurrent give-back may have settled it while this one awaited
            if (lease.res.tenant_id == tenant_id and lease.free > 0 and not lease.writing
                    and lease in self._closing):
                with contextlib.suppress(StoreUnavailable):
                    await self._write(lease, settle=lease.in_flight == 0)

    async def close(self) -> None:
        """At shutdown: every lease settled at what its requests were charged."""
        # never cancelled mid-write: a write that committed must update the lease in memory,
        # or the final settlement would charge its requests twice (clamped to the lease)
        self._stopping = True
        if self._task is not None:
            await self._task
            self._task = None
        for _ in range(3):
            with contextlib.suppress(StoreUnavailable):
                await self.tick(final=True)
            if not self._open and not self._closing:
                return
        log.error("%d budget leases could not be settled at shutdown; the sweep returns "
                  "them after %gs", len(self._open) + len(self._closing), self.settings.ttl_s)
