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
  ``allowance × replicas`` per outage, which is the price of staying up. A key with a
  budget of its own (LiteLLM's ``max_budget``) has the same allowance, capped at that budget,
  held apart per key: so a key spends at most ``min(allowance, max_budget) × replicas`` per
  outage, whether or not its tenant has a budget.
Either way a request needs its key recognised: during an outage the store serves keys it
saw recently from its cache (stale-if-error, ``auth_stale_s``); an unknown key gets 503,
never 401.

Reconciliation: every request served on an outage reservation is written to a journal
(``gateway.reliability.spool.Spool`` named ``outage``, a local file) with its actual cost. When the
database answers again each entry's cost is added to ``spent`` (``ledger.charge_once``), and
to its key's spend when the request had a key, in
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from sqlalchemy import Engine

from gateway.reliability.spool import Spool, log_rows_sink
from gateway.store import ledger
from gateway.store.errors import StoreUnavailable
from gateway.store.money import usd_to_nusd
from gateway.store.periods import utcnow
from gateway.store.policy import TenantPolicy
from gateway.store.records import KeyInfo, NewKey, Reservation, SettleResult, Tenant, TenantInfo

if TYPE_CHECKING:
    from gateway.store.key_store import KeyStore
    from gateway.store.litellm_admin import LiteLLMAdmin
    from gateway.store.logwriter import LogWriter
    from gateway.store.sessions import Session
    from gateway.store.store import Store

log = logging.getLogger(__name__)

POLICIES = ("refuse", "allow")


@dataclass(frozen=True)
class OutageReservation(Reservation):
    """Money held in process while the database is down."""

    outage: bool = True


@dataclass
class _Allowance:
    held: int = 0  # nUSD in outage reservations not yet settled
    used: int = 0  # nUSD settled on outage reservations, not yet reconciled


def charges_sink(engine: Engine) -> Callable[[list[dict[str, Any]]], None]:
    """Charge each journal entry in full, once per entry id (``ledger.charge_once``)."""

    def sink(rows: list[dict[str, Any]]) -> None:
        again = sum(
            not ledger.charge_once(engine, str(row["id"]), row["tenant_id"], int(row["nusd"]),
                                   utcnow(), key_id=row.get("key_id"))
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

    def of_key(self, key_id: str) -> _Allowance:
        """A key's own allowance (held apart from tenants': ids never collide)."""
        return self.tenants.setdefault(KEY_PREFIX + key_id, _Allowance())


KEY_PREFIX = "key:"


class GuardedStore:
    """The store with the outage policy, the log spool and the outage journal."""

    def __init__(self, inner: Store, *, policy: str = "refuse", allowance_usd: float = 0.0,
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

    # -- the store's own parts, unchanged ---------------------------------------------------
    @property
    def engine(self) -> Engine:
        return self.inner.engine

    @property
    def logs(self) -> LogWriter:
        return self.inner.logs

    @property
    def ready(self) -> bool:
        return self.inner.ready

    @property
    def prompt_secret(self) -> bytes | None:
        """The learning prompt-key secret (gateway.store.prompt_keys), once ready."""
        return self.inner.prompt_secret

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        engine = self.inner.engine
        loop = asyncio.get_running_loop()
        self.log_spool = Spool(self._spool_dir, log_rows_sink(engine), name="requestlog",
                               max_bytes=self._spool_max_bytes)
        self.journal = Spool(self._spool_dir, charges_sink(engine),
                             name="outage", max_bytes=self._spool_max_bytes)
        self.inner.logs.overflow = self.log_spool.accept
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
        if not self.inner.ready:
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
    def _allowance_nusd(self, tenant: Tenant) -> int | None:
        """The tenant's outage allowance in nUSD; None = not limited (no budget)."""
        if tenant.budget_usd is None:
            return None
        allowance = tenant.policy.outage_allowance_usd
        return usd_to_nusd(self.allowance_usd if allowance is None else allowance)

    def _key_allowance_nusd(self, tenant: Tenant) -> int | None:
        """The calling key's outage allowance in nUSD: the tenant's allowance capped at the
        key's own budget; None when the key has no budget (its tenant's limits apply)."""
        if tenant.key_id is None or tenant.key_budget_usd is None:
            return None
        allowance = tenant.policy.outage_allowance_usd
        usd = self.allowance_usd if allowance is None else allowance
        return usd_to_nusd(min(usd, tenant.key_budget_usd))

    async def reserve(self, tenant: Tenant | str, usd: float,
                      request_id: str | None = None) -> Reservation:
        try:
            return await self.inner.reserve(tenant, usd, request_id)
        except StoreUnavailable:
            if self.policy == "refuse" or not isinstance(tenant, Tenant):
                self.state.refused += 1
                raise
        amount = usd_to_nusd(usd)
        a = self.state.get(tenant.id)
        cap = self._allowance_nusd(tenant)
        if cap is not None and a.used + a.held + amount > cap:
            self.state.refused += 1
            raise StoreUnavailable("database unavailable and the tenant's outage allowance "
                                   "is used up")
        key_cap = self._key_allowance_nusd(tenant)
        k = self.state.of_key(tenant.key_id) if key_cap is not None and tenant.key_id else None
        if k is not None and key_cap is not None and k.used + k.held + amount > key_cap:
            self.state.refused += 1
            raise StoreUnavailable("database unavailable and the key's outage allowance "
                                   "is used up")
        a.held += amount
        if k is not None:
            k.held += amount
        self.state.served += 1
        return OutageReservation(id=uuid.uuid4().hex, tenant_id=tenant.id,
                                 request_id=request_id, amount_nusd=amount,
                                 created_at_s=int(utcnow().timestamp()),
                                 key_id=tenant.key_id, key_held_nusd=amount if k else 0)

    async def settle(self, reservation: Reservation, actual_usd: float) -> SettleResult:
        if not isinstance(reservation, OutageReservation):
            return await self.inner.settle(reservation, actual_usd)
        actual = usd_to_nusd(max(0.0, actual_usd))
        a = self.state.get(reservation.tenant_id)
        a.held -= reservation.amount_nusd
        a.used += actual
        if reservation.key_held_nusd and reservation.key_id is not None:
            k = self.state.of_key(reservation.key_id)
            k.held -= reservation.key_held_nusd
            k.used += actual
        if actual > 0 and self.journal is not None:
            await anyio.to_thread.run_sync(self.journal.accept, [{
                "id": reservation.id, "tenant_id": reservation.tenant_id,
                "key_id": reservation.key_id, "request_id": reservation.request_id,
                "nusd": actual, "at_s": reservation.created_at_s}])
        return SettleResult(reservation.id, reservation.amount_usd, actual / 1e9,
                            applied=False, deferred=True)

    # -- the rest is the store's -------------------------------------------------------------
    @property
    def key_admin(self) -> KeyStore:
        return self.inner.key_admin

    @property
    def litellm_admin(self) -> LiteLLMAdmin:
        return self.inner.litellm_admin

    async def ping(self) -> bool:
        return await self.inner.ping()

    async def authenticate(self, api_key: str) -> Tenant | None:
        return await self.inner.authenticate(api_key)

    def cached_tenant(self, api_key: str, max_age_s: float = 60.0) -> Tenant | None:
        return self.inner.cached_tenant(api_key, max_age_s)

    async def create_tenant(self, name: str, *, budget_usd: float | None = None,
                            period: str = "total",
                            policy: TenantPolicy | Mapping[str, Any] | None = None
                            ) -> tuple[TenantInfo, NewKey]:
        return await self.inner.create_tenant(name, budget_usd=budget_usd, period=period,
                                              policy=policy)

    async def get_tenant(self, id_or_name: str) -> TenantInfo:
        return await self.inner.get_tenant(id_or_name)

    async def list_tenants(self, include_disabled: bool = False) -> list[TenantInfo]:
        return await self.inner.list_tenants(include_disabled)

    async def update_tenant(self, id_or_name: str, **changes: Any) -> TenantInfo:
        return await self.inner.update_tenant(id_or_name, **changes)

    async def disable_tenant(self, id_or_name: str) -> TenantInfo:
        return await self.inner.disable_tenant(id_or_name)

    async def create_key(self, id_or_name: str, name: str | None = None) -> NewKey:
        return await self.inner.create_key(id_or_name, name)

    async def list_keys(self, tenant: str | None = None) -> list[KeyInfo]:
        return await self.inner.list_keys(tenant)

    async def revoke_key(self, key_id: str) -> KeyInfo:
        return await self.inner.revoke_key(key_id)

    async def open_session(self, *, admin: bool, key_id: str | None,
                           ttl_s: int = 8 * 3600) -> str:
        return await self.inner.open_session(admin=admin, key_id=key_id, ttl_s=ttl_s)

    async def find_session(self, cookie: str) -> Session | None:
        return await self.inner.find_session(cookie)

    async def close_session(self, cookie: str) -> None:
        await self.inner.close_session(cookie)
