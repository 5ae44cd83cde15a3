"""`Store`: the asynchronous facade the HTTP side calls (auth, budget, log, admin).

Why synchronous SQLAlchemy in worker threads rather than SQLAlchemy asyncio: SQLite needs
aiosqlite for asyncio, which is not installed, and one code path for both databases is worth
more than the ~50 µs a thread hop costs; the ledger's statements are short and few (one
transaction to reserve, one to settle). Threads are bounded by a capacity limiter sized to the
connection pool, so a burst waits in the limiter rather than starving other users of the
default thread pool (the encoder) or timing out on the pool.

Start-up: the store upgrades the schema to Alembic's head on start, on SQLite and PostgreSQL
alike (on PostgreSQL under an advisory lock, so replicas starting together apply each
revision once); pass `auto_upgrade=False` to leave it to `tollgate db upgrade`. A database
that is down at start does not stop the gateway: `start()` returns, the store keeps retrying
in the background, and until it is ready every call raises `StoreUnavailable` (HTTP 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any, ParamSpec, TypeVar

import anyio
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

# module imports by full name: ``from gateway.store import x`` would import this package's
# __init__, which imports this module (an import cycle)
import gateway.store.keys as keylib
import gateway.store.migrate as migratelib
import gateway.store.prompt_keys as prompt_keys  # noqa: PLR0402 - not through __init__
import gateway.store.reclaim as reclaimlib
import gateway.store.sessions as sessionlib
import gateway.store.tenants as admin
from gateway.store.budget_book import BudgetBook
from gateway.store.dberrors import is_unavailable
from gateway.store.engine import (
    database_url_from_env,
    describe_error,
    display_url,
    make_engine,
    pool_capacity,
)
from gateway.store.errors import StoreUnavailable
from gateway.store.key_cache import KeyCache
from gateway.store.key_store import KeyStore
from gateway.store.lease_settings import LeaseSettings
from gateway.store.litellm_admin import LiteLLMAdmin
from gateway.store.logwriter import LogWriter
from gateway.store.periods import utcnow
from gateway.store.policy import TenantPolicy
from gateway.store.records import KeyInfo, NewKey, Reservation, SettleResult, Tenant, TenantInfo
from gateway.store.revocations import RevocationSignal

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")


def _select_one(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")


def _hint(exc: BaseException, name: str | None) -> str:
    """What to do about the commonest cause a new install meets: a database not created."""
    text = describe_error(exc)
    if name and f'database "{name}" does not exist' in text:
        return f" (create it: `createdb {name}`; the gateway makes the schema)"
    return ""


class Store:
    """The database side of the gateway. Create with `Store.from_url`, then `await start()`."""

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] = utcnow,
                 auto_upgrade: bool = True, auth_ttl_s: float = 5.0,
                 auth_stale_s: float = 600.0, auth_cache_size: int = 10_000,
                 reservation_ttl_s: float = 3600.0, maintenance_interval_s: float = 30.0,
                 log_prompts: bool = False, log_options: dict[str, Any] | None = None,
                 replica_id: str | None = None, replica_dir: str | None = None,
                 leases: LeaseSettings | None = None) -> None:
        self.engine = engine
        self._clock = clock
        self._auto_upgrade = auto_upgrade
        self.keys = KeyCache(engine, self._run, ttl_s=auth_ttl_s, stale_s=auth_stale_s,
                             size=auth_cache_size)
        self.prompt_secret: bytes | None = None  # gateway.store.prompt_keys, once ready
        # LiteLLM's key API (gateway/store/key_admin.py) and /team, /user, /spend/logs
        shared = (engine, self._run, self._revoking, self._require_secret, clock)
        self.key_admin, self.litellm_admin = KeyStore(*shared), LiteLLMAdmin(*shared)
        # an identity tags reservations; its previous run's are released (store/reclaim.py)
        self.replica_slot = reclaimlib.claim_slot(replica_dir, replica_id) if replica_dir else None
        self._replica_tag = reclaimlib.tag_for(self.replica_slot, replica_id)
        self._started_s = int(clock().timestamp())
        self._maintenance_interval_s = maintenance_interval_s
        self._secret: bytes | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._maintenance: asyncio.Task[None] | None = None
        self.logs = LogWriter(engine, log_prompts=log_prompts, clock=clock,
                              **(log_options or {}))
        # reservations and settlements in flight (gateway/store/budget_book.py)
        self.budget = BudgetBook(engine, self._run, clock, self._replica_tag,
                                 reservation_ttl_s, leases)
        self.leases = self.budget.leases  # budget leases (gateway/store/leases.py), if enabled

    @classmethod
    def from_url(cls, url: str | None = None, *, engine_options: dict[str, Any] | None = None,
                 **kwargs: Any) -> Store:
        """A store on `url` (default: `TOLLGATE_DATABASE_URL` or `sqlite:///./tollgate.db`);
        `engine_options` go to `make_engine` (e.g. `ping_after_idle_s`, `pool_size`)."""
        engine = make_engine(url or database_url_from_env(), **(engine_options or {}))
        return cls(engine, **kwargs)

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """True once the schema is current and the key secret is loaded."""
        return self._secret is not None

    async def start(self) -> None:
        """Upgrade and load the secret; on a database fault keep retrying in the background."""
        self._limiter = anyio.CapacityLimiter(pool_capacity(self.engine))
        try:
            await self._prepare()
        except StoreUnavailable as exc:  # one line with the driver's cause, no traceback
            log.error("database %s unavailable at start: %s%s; serving anyway (503 where it "
                      "is needed) and retrying in the background", display_url(self.engine.url),
                      describe_error(exc), _hint(exc, self.engine.url.database))
        await self.logs.start(self._limiter)
        self._maintenance = asyncio.get_running_loop().create_task(
            self._maintain(), name="store-maintenance")

    async def close(self, flush_timeout_s: float = 30.0) -> None:
        """Finish settlements in flight, flush the request log, retry deferred settlements
        once, release connections."""
        await self.budget.finish_in_flight(flush_timeout_s)
        await self.logs.close(flush_timeout_s)
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
            self._maintenance = None
        await self.budget.retry_settles_once_more()
        if self.revocations is not None:
            await self.revocations.close()
        self.engine.dispose()
        reclaimlib.release_slot(self.replica_slot)

    async def ping(self) -> bool:
        """Readiness: the schema is current and the database answers `SELECT 1` now."""
        if not self.ready:
            return False
        try:
            await self._run(_select_one, self.engine)
        except StoreUnavailable:
            return False
        return True

    async def _prepare(self) -> None:
        def prepare() -> bytes:
            if self._auto_upgrade:
                migratelib.upgrade_engine(self.engine)
            secret = keylib.load_or_create_secret(self.engine)
            if self._replica_tag:
                reclaimlib.reclaim_replica(self.engine, self._replica_tag, self._started_s,
                                          self._clock())
            return secret

        secret = await self._run(prepare)
        # learning prompt keys: keyed with the secret, older unkeyed ones re-keyed once
        await self._run(prompt_keys.upgrade, self.engine, secret)
        self.prompt_secret = prompt_keys.use(secret)
        self._secret = secret

    async def _maintain(self) -> None:
        """Background: become ready, retry deferred settlements, expire stale reservations."""
        backoff = 0.5
        while True:
            if not self.ready:
                try:
                    await self._prepare()
                    log.info("database reachable again; store ready")
                    backoff = 0.5
                except Exception as exc:
                    if not isinstance(exc, StoreUnavailable):
                        log.exception("store start-up failed; retrying")
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self._maintenance_interval_s)
                    continue
            try:
                await self.budget.retry_settles()
                await self.expire_stale()
            except StoreUnavailable:
                pass
            except Exception:
                log.exception("store maintenance failed")
            await asyncio.sleep(self._maintenance_interval_s if not self.budget.pending
                                else min(1.0, self._maintenance_interval_s))

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a synchronous database function in a bounded worker thread."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(pool_capacity(self.engine))
        try:
            return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs),
                                                  limiter=self._limiter)
        except SQLAlchemyError as exc:
            if is_unavailable(exc):
                cause = type(getattr(exc, "orig", None) or exc).__name__
                raise StoreUnavailable(f"database unavailable ({cause})") from exc
            raise

    def _require_secret(self) -> bytes:
        if self._secret is None:
            raise StoreUnavailable("database not ready")
        return self._secret

    # -- auth ---------------------------------------------------------------------------------
    async def authenticate(self, api_key: str) -> Tenant | None:
        """The tenant owning `api_key`, or None. Raises `StoreUnavailable`, never returns
        None, when the database cannot answer; revocation holds at once on every replica
        (gateway/store/key_cache.py)."""
        if not keylib.plausible_key(api_key):
            return None
        return await self.keys.authenticate(keylib.hash_key(self._require_secret(), api_key))

    def cached_tenant(self, api_key: str, max_age_s: float = 60.0) -> Tenant | None:
        """The tenant of ``api_key`` if this process found it live in the last ``max_age_s``,
        else None; never a database lookup. Only a hint that the key is worth checking
        (``gateway.auth`` lets a throttled address through to ``authenticate`` with it): it
        may have been revoked since."""
        if not keylib.plausible_key(api_key) or self._secret is None:
            return None
        return self.keys.cached(keylib.hash_key(self._secret, api_key), max_age_s)

    def invalidate_auth_cache(self) -> None:
        """Forget cached keys (this process; other replicas follow the revocation epoch)."""
        self.keys.clear()

    @property
    def revocations(self) -> RevocationSignal | None:
        """The Redis revocation counter (set by the app when reliability.redis_url is set)."""
        return self.keys.revocations

    @revocations.setter
    def revocations(self, signal: RevocationSignal | None) -> None:
        self.keys.revocations = signal

    async def _revoking(self, fn: Callable[..., T], *args: Any) -> T:
        """A change that may make keys stop working: the Redis revocation counter is bumped
        before and after its transaction (which bumps the epoch), and this cache dropped."""
        if self.revocations is not None:
            await self.revocations.bump()
        try:
            return await self._run(fn, *args)
        finally:
            self.invalidate_auth_cache()
            if self.revocations is not None:
                await self.revocations.bump()

    # -- budget (gateway/store/budget_book.py) ----------------------------------------------
    async def reserve(self, tenant: Tenant | str, usd: float,
                      request_id: str | None = None) -> Reservation:
        """Hold `usd` of the tenant's budget or raise `BudgetExceeded`; cancellation-safe."""
        self._require_secret()
        return await self.budget.reserve(tenant, usd, request_id)

    async def settle(self, reservation: Reservation, actual_usd: float) -> SettleResult:
        """Charge `actual_usd`, release the reservation; idempotent, cancellation-safe, and
        deferred (`deferred=True`) while the database is down."""
        return await self.budget.settle(reservation, actual_usd)

    @property
    def pending_settlements(self) -> int:
        return self.budget.pending

    async def expire_stale(self) -> int:
        """Release reservations older than `reservation_ttl_s` (dead requests)."""
        return await self.budget.expire_stale()

    # -- admin --------------------------------------------------------------------------------
    async def create_tenant(self, name: str, *, budget_usd: float | None = None,
                            period: str = "total",
                            policy: TenantPolicy | Mapping[str, Any] | None = None
                            ) -> tuple[TenantInfo, NewKey]:
        """Raises `InvalidPolicy` (a ValueError) for a policy that does not validate."""
        return await self._run(admin.create_tenant, self.engine, self._require_secret(), name,
                               self._clock(), budget_usd=budget_usd, period=period,
                               policy=policy)

    async def get_tenant(self, id_or_name: str) -> TenantInfo:
        tid = await self._run(admin.resolve_tenant_id, self.engine, id_or_name)
        return await self._run(admin.get_tenant, self.engine, tid, self._clock())

    async def list_tenants(self, include_disabled: bool = False) -> list[TenantInfo]:
        return await self._run(admin.list_tenants, self.engine, self._clock(), include_disabled)

    async def update_tenant(self, id_or_name: str, **changes: Any) -> TenantInfo:
        """Budget (`budget_usd`, None = unlimited), `period`, `reset`, `policy`."""
        tid = await self._run(admin.resolve_tenant_id, self.engine, id_or_name)
        return await self._revoking(partial(admin.update_tenant, **changes), self.engine, tid,
                                    self._clock())

    async def disable_tenant(self, id_or_name: str) -> TenantInfo:
        tid = await self._run(admin.resolve_tenant_id, self.engine, id_or_name)
        return await self._revoking(admin.disable_tenant, self.engine, tid, self._clock())

    async def create_key(self, id_or_name: str, name: str | None = None) -> NewKey:
        tid = await self._run(admin.resolve_tenant_id, self.engine, id_or_name)
        return await self._run(admin.create_key, self.engine, self._require_secret(), tid,
                               self._clock(), name)

    async def list_keys(self, tenant: str | None = None) -> list[KeyInfo]:
        tid = None if tenant is None else await self._run(admin.resolve_tenant_id,
                                                          self.engine, tenant)
        return await self._run(admin.list_keys, self.engine, tid)

    # -- dashboard sessions ------------------------------------------------------------------
    async def open_session(self, *, admin: bool, key_id: str | None,
                           ttl_s: int = 8 * 3600) -> str:
        """A dashboard session (gateway/store/sessions.py); returns the signed cookie value."""
        return await self._run(sessionlib.open_session, self.engine, self._require_secret(),
                               admin=admin, key_id=key_id,
                               now_s=int(self._clock().timestamp()), ttl_s=ttl_s)

    async def find_session(self, cookie: str) -> sessionlib.Session | None:
        return await self._run(sessionlib.find_session, self.engine, self._require_secret(),
                               cookie, int(self._clock().timestamp()))

    async def close_session(self, cookie: str) -> None:
        await self._run(sessionlib.close_session, self.engine, self._require_secret(), cookie)

    async def revoke_key(self, key_id: str) -> KeyInfo:
        return await self._revoking(admin.revoke_key, self.engine, key_id, self._clock())


def open_store(url: str | None = None, **kwargs: Any) -> tuple[Store, LogWriter]:
    """`Store.from_url(url, **kwargs)` and its log writer (`store.logs`), for app wiring.

    `store.start()` also starts the writer and `store.close()` flushes it; starting or
    closing the writer again on its own is harmless."""
    store = Store.from_url(url, **kwargs)
    return store, store.logs
