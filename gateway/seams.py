"""The seams between the rooms, as protocols: what the gateway calls on the store, on the
request-log sink, on the reliability guards and on the learning side. `GatewayContext` types
its fields with them; `gateway.store.Store` (wrapped by
`gateway.reliability.outage.GuardedStore`), `gateway.store.LogWriter` (tapped by
`gateway.review.metrics.MetricsTap`), `gateway.reliability.guards.Reliability` and
`gateway.learning.loop.Learning` implement them. Names of other rooms appear only under
``TYPE_CHECKING``: this module imports no room.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from gateway.config import ReliabilitySettings
    from gateway.reliability.circuit import CircuitBreakers
    from gateway.reliability.parallel import Slot
    from gateway.reliability.ratelimit import TokenGrant
    from gateway.store.key_store import KeyStore
    from gateway.store.logwriter import LogStats
    from gateway.store.policy import TenantPolicy
    from gateway.store.records import KeyInfo, NewKey, Reservation, SettleResult, Tenant, TenantInfo
    from gateway.store.revocations import RevocationSignal
    from gateway.store.sessions import Session


class LogSink(Protocol):
    """Where finished requests' log rows go (batched, written off the request path)."""

    @property
    def pending(self) -> int:
        """Rows accepted and not yet written."""
        ...

    @property
    def stats(self) -> LogStats: ...

    def submit(self, row: dict[str, Any]) -> bool:
        """Queue ``row``; never blocks; False when it was dropped."""
        ...

    async def flush(self, timeout_s: float | None = None) -> bool: ...

    async def start(self, limiter: Any = None) -> None: ...

    async def close(self, timeout_s: float | None = 30.0) -> bool: ...


class Store(Protocol):
    """What the gateway calls on the database side (all coroutines but `cached_tenant`)."""

    engine: Engine  # for the review and learning rooms' own read queries
    logs: LogSink  # the store's own request-log writer
    # the key of learning prompt hashes (gateway/store/prompt_keys.py), once the store is ready
    prompt_secret: bytes | None
    key_admin: KeyStore  # LiteLLM's key API (gateway/store/key_admin.py)
    # the Redis revocation counter (gateway/store/revocations.py), set by guard_store when
    # reliability.redis_url is set
    revocations: RevocationSignal | None

    @property
    def ready(self) -> bool: ...

    async def start(self) -> None: ...

    async def close(self) -> None:
        """Finish settlements in flight, flush the request log, release connections."""
        ...

    async def ping(self) -> bool: ...

    # auth
    async def authenticate(self, api_key: str) -> Tenant | None: ...

    def cached_tenant(self, api_key: str, max_age_s: float = 60.0) -> Tenant | None: ...

    # budget
    async def reserve(self, tenant: Tenant | str, usd: float,
                      request_id: str | None = None) -> Reservation: ...

    async def settle(self, reservation: Reservation, actual_usd: float) -> SettleResult: ...

    # admin
    async def create_tenant(self, name: str, *, budget_usd: float | None = None,
                            period: str = "total", policy: TenantPolicy | Any = None
                            ) -> tuple[TenantInfo, NewKey]: ...

    async def get_tenant(self, id_or_name: str) -> TenantInfo: ...

    async def list_tenants(self, include_disabled: bool = False) -> list[TenantInfo]: ...

    async def update_tenant(self, id_or_name: str, **changes: Any) -> TenantInfo: ...

    async def disable_tenant(self, id_or_name: str) -> TenantInfo: ...

    async def create_key(self, id_or_name: str, name: str | None = None) -> NewKey: ...

    async def list_keys(self, tenant: str | None = None) -> list[KeyInfo]: ...

    async def revoke_key(self, key_id: str) -> KeyInfo: ...

    # dashboard sessions
    async def open_session(self, *, admin: bool, key_id: str | None,
                           ttl_s: int = 8 * 3600) -> str: ...

    async def find_session(self, cookie: str) -> Session | None: ...

    async def close_session(self, cookie: str) -> None: ...


class Reliability(Protocol):
    """What serving calls on ``ctx.reliability``: rate limits, parallel-request slots and the
    backends' circuit breakers of one gateway."""

    settings: ReliabilitySettings  # resolved (the environment's Redis URL and spool read)
    circuits: CircuitBreakers

    async def admit(self, tenant: Tenant) -> dict[str, str]:
        """Count one request against its tenant's and key's limits: the ``x-ratelimit-*``
        headers; raises a 429 GatewayError."""
        ...

    async def take_slot(self, tenant: Tenant, request_id: str) -> Slot | None: ...

    async def free_slot(self, slot: Slot | None) -> None: ...

    async def reserve_tokens(self, tenant: Tenant, least: int, most: int
                             ) -> TokenGrant | None: ...

    async def settle_tokens(self, tenant: Tenant, grant: TokenGrant | None, used: int
                            ) -> None: ...

    def upstream_result(self, backend: str, failure: Any | None, tenant: str | None) -> None:
        """Feed an attempt's outcome to the backend's circuit breaker."""
        ...

    async def close(self) -> None: ...


class LearningHooks(Protocol):
    """What serving and review call on ``ctx.learning`` (None when there is no database)."""

    @property
    def engine(self) -> Engine: ...

    async def after_request(self, served: Any) -> None:
        """A served request (``gateway.serving.record.served.Served``), for the outcome record and
        shadow exploration; returns at once, the work runs in the background."""
        ...

    def recent(self, request_id: str) -> dict[str, Any] | None:
        """A request this replica served, if still in memory (a ``learning_requests`` row)."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...
