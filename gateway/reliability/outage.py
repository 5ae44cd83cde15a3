"""Budget enforcement while the database is unreachable, and reconciliation afterwards.

``GuardedStore`` wraps the store the HTTP side calls (``authenticate`` / ``reserve`` /
``settle``, docs/architecture.md) and adds what a database outage needs:

Budget policy (``reliability.outage.budget`` in config.yaml):
- ``refuse`` (default): a reservation the database cannot book is refused with 503
  ``store_unavailable``. Budgets hold exactly; availability is lost for the outage.
- ``allow``: a tenant may spend up to its outage allowance per replica per outage
  (``policy.outage_allowance_usd``, else ``reliability.outage.allowance_usd``) without the
  database: the reservation is held in process against that allowance. A tenant without a
  budget is not limited. The worst-case overspend of a hard budget is therefore
  ``allowance × replicas`` per outage, which is the price of staying up.
Either way a request needs its key recognised: during an outage the store serves keys it
saw recently from its cache (stale-if-error, ``auth_stale_s``); an unknown key gets 503,
never 401.

Reconciliation: every request served on an outage reservation is written to a journal
(``gateway.reliability.spool.Spool`` named ``outage``, a local file) with its actual cost. When the
database answers again each entry's cost is added to ``spent`` (``ledger.charge_once``) in
the transaction that records the entry's id in ``outage_charges``; an id already there means
the entry was charged, so a replay after a crash, or after the database failed again part-way
through the journal, charges nothing twice. The allowance of a tenant is restored once its
journal entries are charged.

Log rows the database cannot take go to the log spool (``Spool`` named ``requestlog``) through
the log writer's ``overflow`` hook; both spools are replayed in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread
from sqlalchemy import Engine

from gateway.reliability.spool import Spool, log_rows_sink
from gateway.store import ledger
from gateway.store.errors import StoreUnavailable
from gateway.store.periods import utcnow
from gateway.store.records import SettleResult, usd_to_nusd

log = logging.getLogger(__name__)

POLICIES = ("refuse", "allow")


@dataclass(frozen=True)
class OutageReservation:
    """Money held in process while the database is down."""

    id: str
    tenant_id: str
    request_id: str | None
    amount_nusd: int
    created_at_s: int
    outage: bool = True

    @property
    def amount_usd(self) -> float:
        return self.amount_nusd / 1e9


@dataclass
class _Allowance:
    held: int = 0  # nUSD in outage reservations not yet settled
    used: int = 0  # nUSD settled on outage reservations, not yet reconciled


def charges_sink(engine: Engine) -> Callable[[list[dict[str, Any]]], None]:
    """Charge each journal entry in full, once per entry id (``ledger.charge_once``)."""

    def sink(rows: list[dict[str, Any]]) -> None:
        again = sum(
            not ledger.charge_once(engine, str(row["id"]), row["tenant_id"], int(row["nusd"]),
                                   utcnow())
            for row in rows
        )
        if again:  # a replay after a failure part-way: those entries were charged before
            log.info("outage journal: %d of %d entries were already charged", again, len(rows))

    return sink


@dataclass
class OutageState:
    """Per-replica allowance bookkeeping (one per GuardedStore)."""

    tenants: dict[str, _Allowance] = field(default_factory=dict)
    served: int = 0  # requests admitted on outage reservations
    refused: int = 0  # reservations refused for the outage

    def get(self, tenant_id: str) -> _Allowance:
        return self.tenants.setdefault(tenant_id, _Allowance())


class GuardedStore:
    """The store with the outage policy, the log spool and the outage journal."""

    def __init__(self, inner: Any, *, policy: str = "refuse", allowance_usd: float = 0.0,
                 spool_dir: str | Path = "./tollgate-spool",
                 spool_max_bytes: int = 64 * 1024 * 1024,
                 replay_interval_s: float = 2.0, flush_timeout_s: float = 10.0) -> None:
        if policy not in POLICIES:
            raise ValueError(f"outage budget policy must be one of {POLICIES}, not {policy!r}")
        self.inner = inner
        self.policy = policy
        self.allowance_usd = allowance_usd
        self.state = OutageState()
        self._spool_dir = Path(spool_dir)
        self._spool_max_bytes = spool_max_bytes
        self._interval = replay_interval_s
        self._flush_timeout_s = flush_timeout_s
        self.log_spool: Spool | None = None
        self.journal: Spool | None = None
        self._task: asyncio.Task[None] | None = None

    def __getattr__(self, name: str) -> Any:  # everything else is the store's
        return getattr(self.inner, name)

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        engine = self.inner.engine
        loop = asyncio.get_running_loop()
        self.log_spool = Spool(self._spool_dir, log_rows_sink(engine), name="requestlog",
                               max_bytes=self._spool_max_bytes)
        self.journal = Spool(self._spool_dir, charges_sink(engine),
                             name="outage", max_bytes=self._spool_max_bytes)
        logs = getattr(self.inner, "logs", None)
        if logs is not None:
            logs.overflow = self.log_spool.accept
        await self.inner.start()
        self._task = loop.create_task(self._background(), name="outage-reconcile")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.journal is not None:
            with contextlib.suppress(Exception):
                await self._replay(self.journal)
        # flushes the log writer; rows still unwritten after the timeout go to the spool
        await self.inner.close(flush_timeout_s=self._flush_timeout_s)
        for spool in (self.journal, self.log_spool):
            if spool is not None:
                spool.close()

    async def _replay(self, spool: Spool) -> int:
        if not getattr(self.inner, "ready", True):
            return 0
        n = await spool.replay()
        if spool is self.journal and n and not spool.pending:
            self.state.tenants = {k: a for k, a in self.state.tenants.items() if a.held}
            for a in self.state.tenants.values():
                a.used = 0
        return n

    async def _background(self) -> None:
        while True:
            for spool in (self.journal, self.log_spool):
                if spool is None:
                    continue
                try:
                    await self._replay(spool)
                except Exception:  # keep trying; the next round may succeed
                    log.exception("%s replay failed", spool.name)
            await asyncio.sleep(self._interval)

    # -- budget ----------------------------------------------------------------------------
    def _allowance_nusd(self, tenant: Any) -> int | None:
        """The tenant's outage allowance in nUSD; None = not limited (no budget)."""
        if getattr(tenant, "budget_usd", 0.0) is None:
            return None
        policy = getattr(tenant, "policy", None) or {}
        return usd_to_nusd(float(policy.get("outage_allowance_usd", self.allowance_usd)))

    async def reserve(self, tenant: Any, usd: float, request_id: str | None = None) -> Any:
        try:
            return await self.inner.reserve(tenant, usd, request_id)
        except StoreUnavailable:
            if self.policy == "refuse" or not hasattr(tenant, "id"):
                self.state.refused += 1
                raise
        amount = usd_to_nusd(usd)
        a = self.state.get(tenant.id)
        cap = self._allowance_nusd(tenant)
        if cap is not None and a.used + a.held + amount > cap:
            self.state.refused += 1
            raise StoreUnavailable("database unavailable and the tenant's outage allowance "
                                   "is used up")
        a.held += amount
        self.state.served += 1
        return OutageReservation(id=uuid.uuid4().hex, tenant_id=tenant.id,
                                 request_id=request_id, amount_nusd=amount,
                                 created_at_s=int(utcnow().timestamp()))

    async def settle(self, reservation: Any, actual_usd: float) -> Any:
        if not isinstance(reservation, OutageReservation):
            return await self.inner.settle(reservation, actual_usd)
        actual = usd_to_nusd(max(0.0, actual_usd))
        a = self.state.get(reservation.tenant_id)
        a.held -= reservation.amount_nusd
        a.used += actual
        if actual > 0 and self.journal is not None:
            await anyio.to_thread.run_sync(self.journal.accept, [{
                "id": reservation.id, "tenant_id": reservation.tenant_id,
                "request_id": reservation.request_id, "nusd": actual,
                "at_s": reservation.created_at_s}])
        return SettleResult(reservation.id, reservation.amount_usd, actual / 1e9,
                            applied=False, deferred=True)
