"""Reliability settings (``reliability:`` in config.yaml) and the per-app parts built from them.

    reliability:
      redis_url: redis://127.0.0.1:6379/0   # or TOLLGATE_REDIS_URL; none = per-replica limits
      rate_limits: {requests_per_minute: null, tokens_per_minute: null}  # tenant policy wins
      circuit: {failure_threshold: 5, cooldown_s: 30, half_open_probes: 1, min_tenants: 2}
      outage: {budget: refuse, allowance_usd: 0.0}   # or budget: allow (see gateway.reliability.outage)
      spool_dir: ./tollgate-spool                     # or TOLLGATE_SPOOL_DIR
      max_body_bytes: 8388608                         # 413 above this
      max_messages: 2048                              # 400 above this many messages
      max_content_parts: 4096                         # ... content parts in all
      shutdown_grace_s: 30                            # SIGTERM: in-flight requests get this long
      log_flush_timeout_s: 10                         # then the log queue; the rest is spooled

Tenant policy keys read here: ``requests_per_minute``, ``tokens_per_minute``,
``max_parallel_requests`` (a LiteLLM team's ``rpm_limit``, ``tpm_limit``,
``max_parallel_requests``), ``outage_allowance_usd``. A key's own LiteLLM limits
(``rpm_limit``, ``tpm_limit``, ``max_parallel_requests`` on /key/generate) apply on top of its
tenant's: a request counts against both and passes only when both admit it (one atomic step
in Redis). Per-backend upstream timeouts are ``model_info.timeout``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import get_context
from typing import TYPE_CHECKING, Any

import anyio
from prometheus_client import CollectorRegistry

from gateway.config import ReliabilitySettings
from gateway.errors import GatewayError
from gateway.reliability.circuit import BACKEND, REQUEST, CircuitBreakers
from gateway.reliability.parallel import ParallelLimiter, Slot
from gateway.reliability.ratelimit import (
    Limits,
    RateLimiter,
    Subject,
    TokenGrant,
    limits_for,
    tightest_headers,
)
from gateway.store.records import Tenant

if TYPE_CHECKING:
    from gateway.reliability.outage import GuardedStore
    from gateway.store.store import Store

REQUEST_FAULTS = frozenset({"context_window_exceeded", "bad_request"})
NOT_SENT = "not_sent"  # the request failed before it reached the backend


KEY_SUBJECT = "key:"  # a key's own limits count under this prefix (tenant ids are hex)


def _whose(subject: str | None) -> str:
    return "this API key" if subject and subject.startswith(KEY_SUBJECT) else \
        "this API key's tenant (team)"


def rate_limited(limit: str, retry_after: str,
                 headers: dict[str, str] | None = None, subject: str | None = None
                 ) -> GatewayError:
    """429 in OpenAI's shape, with ``Retry-After`` (and the ``x-ratelimit-*`` headers)."""
    what = "requests" if limit == "requests" else "tokens"
    return GatewayError(
        429,
        f"Rate limit reached: {what} per minute for {_whose(subject)}. "
        f"Try again in {retry_after}s.",
        "rate_limit_error",
        code="rate_limit_exceeded",
        headers={"retry-after": retry_after, **(headers or {})},
    )


REFUSAL_PAUSE_S = 1.0  # a paused refusal's wait (its retry-after)


async def pause_refusal(waits: anyio.CapacityLimiter, seconds: float = REFUSAL_PAUSE_S,
                        sleep: Callable[[float], Awaitable[Any]] = anyio.sleep) -> None:
    """Wait ``seconds`` before sending a refusal (its retry-after; the body unread): a client
    looping on refusals then gets one a second per connection, not thousands of cheap ones
    that take the event loop (or the host's network) from other tenants (issue 48.6-7). At
    most ``waits``' total pause at once; past that, no pause."""
    if waits.available_tokens == 0:
        return
    async with waits:
        await sleep(seconds)


@dataclass
class Reliability:
    """Rate limiter and circuit breakers of one gateway (on ``GatewayContext.reliability``)."""

    settings: ReliabilitySettings
    limiter: RateLimiter
    circuits: CircuitBreakers
    parallel: ParallelLimiter
    # CPU work a tenant asks for and pays nothing for (count_tokens): one at a time in this
    # process (a body's parse), the count itself in a worker process (``apart``)
    counting: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(1))
    # refusals paused at once (pause_refusal)
    refusal_waits: anyio.CapacityLimiter = field(
        default_factory=lambda: anyio.CapacityLimiter(256))
    _counter: ProcessPoolExecutor | None = field(default=None, init=False, repr=False)

    @classmethod
    def build(cls, settings: ReliabilitySettings | None,
              registry: CollectorRegistry | None) -> Reliability:
        s = (settings or ReliabilitySettings()).resolved()
        limiter = RateLimiter(
            s.redis_url,
            Limits(s.rate_limits.requests_per_minute, s.rate_limits.tokens_per_minute),
            prefix=s.redis_prefix,
        )
        circuits = CircuitBreakers(s.circuit.failure_threshold, s.circuit.cooldown_s,
                                   s.circuit.half_open_probes, registry=registry,
                                   min_tenants=s.circuit.min_tenants)
        parallel = ParallelLimiter(limiter.redis, s.redis_prefix, limiter.degraded)
        return cls(s, limiter, circuits, parallel)

    def subjects(self, tenant: Tenant) -> list[Subject]:
        """What a request of ``tenant`` counts against: its tenant's limits and, when its key
        has limits of its own, the key's."""
        out: list[Subject] = [(str(tenant.id), limits_for(tenant.policy, self.limiter.default))]
        key = Limits(tenant.key_rpm_limit, tenant.key_tpm_limit)
        if tenant.key_id is not None and not key.unlimited:
            out.append((KEY_SUBJECT + tenant.key_id, key))
        return [(n, lim) for n, lim in out if not lim.unlimited]

    async def admit(self, tenant: Tenant) -> dict[str, str]:
        """Count one request against the tenant's and its key's limits: the
        ``x-ratelimit-*`` headers of the response (the tightest; none when no limit
        applies); raises a 429 GatewayError."""
        verdicts = await self.limiter.admit_all(self.subjects(tenant))
        v = verdicts[0]
        if not v.admitted:
            raise rate_limited(v.limit or "requests", v.retry_after_header, v.headers(),
                               v.subject)
        return tightest_headers(verdicts)

    async def take_slot(self, tenant: Tenant, request_id: str) -> Slot | None:
        """A slot of the key's and the tenant's ``max_parallel_requests`` (None: no such
        limit); 429 while either has as many requests in flight as its limit."""
        limits: list[tuple[str, int]] = []
        if tenant.key_id is not None and tenant.key_max_parallel_requests is not None:
            limits.append((KEY_SUBJECT + tenant.key_id, tenant.key_max_parallel_requests))
        if tenant.policy.max_parallel_requests is not None:
            limits.append((str(tenant.id), tenant.policy.max_parallel_requests))
        if not limits:
            return None
        slot, full = await self.parallel.acquire(request_id, limits)
        if slot is None:
            raise GatewayError(
                429, f"Max parallel request limit reached for {_whose(full)}: "
                f"{dict(limits)[full]} requests in flight. Try again when one has finished.",
                "rate_limit_error", code="rate_limit_exceeded", headers={"retry-after": "1"})
        return slot

    async def free_slot(self, slot: Slot | None) -> None:
        if slot is not None:
            await self.parallel.release(slot)

    def upstream_result(self, backend: str, failure: Any | None, tenant: str | None) -> None:
        """Feed an attempt of ``tenant``'s to the backend's circuit breaker.

        A failure about this request (its ``cause`` is the request: a 400, a context window
        too small, a stream litellm stopped for repeating itself) means the backend answered:
        a success; one that is the backend's beyond doubt counts in full; any other counts
        as ``tenant``'s, which alone can never open the circuit (gateway/reliability/circuit.py,
        C1). A request that never reached the backend says nothing (a half-open probe is
        freed)."""
        if failure is not None and failure.kind == NOT_SENT:
            self.circuits.release(backend)
        elif (failure is None or failure.cause == REQUEST or failure.kind in REQUEST_FAULTS
              or not failure.retryable):
            self.circuits.success(backend)
        else:
            self.circuits.failure(backend, None if failure.cause == BACKEND else str(tenant))

    def _tpm_subjects(self, tenant: Tenant) -> list[Subject]:
        return [(n, lim) for n, lim in self.subjects(tenant)
                if lim.tokens_per_minute is not None]

    async def used_tokens(self, tenant: Tenant, tokens: int) -> None:
        await self.limiter.add_tokens_all([n for n, _ in self._tpm_subjects(tenant)], tokens)

    async def reserve_tokens(self, tenant: Tenant, least: int, most: int) -> TokenGrant | None:
        """Reserve a planned request's token bound against the TPM of its tenant and its key
        (None: no TPM limit): ``most`` tokens, or as few as ``least``, in both windows at once
        (gateway/reliability/ratelimit.py). Raises a 429: retryable while a window is full,
        final (``x-should-retry: false``) when ``least`` alone passes a limit."""
        subjects = self._tpm_subjects(tenant)
        if not subjects:
            return None
        name, tightest = min(subjects, key=lambda s: s[1].tokens_per_minute or 0)
        tpm = tightest.tokens_per_minute or 0
        if least > tpm:
            raise GatewayError(
                429, f"Request too large: it may use up to {least} tokens (its prompt bound "
                f"and output cap), more than the limit of {_whose(name)}, {tpm} tokens per "
                "minute. Reduce the prompt or max_tokens.", "rate_limit_error",
                code="request_too_large", headers={"x-should-retry": "false"})
        grant = await self.limiter.reserve_all(subjects, least, most)
        if grant.tokens == 0:
            raise rate_limited("tokens", str(max(1, math.ceil(grant.retry_after_s))))
        return grant

    async def settle_tokens(self, tenant: Tenant, grant: TokenGrant | None, used: int) -> None:
        """A reserved request's window counts the tokens it used; without a reservation
        (embeddings), they are added."""
        if grant is None:
            await self.used_tokens(tenant, used)
        else:
            await self.limiter.settle_tokens(str(tenant.id), grant, used)

    async def pause_refusal(self) -> None:
        """``pause_refusal`` on this replica's ``refusal_waits``."""
        await pause_refusal(self.refusal_waits)

    async def apart(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in this replica's counting process, one call at a time: a tokenizer
        holds the GIL for each piece it encodes, so in a thread a flood of free counts took
        a neighbour's p50 3-4× and held /health for hundreds of ms (issue 48.6). The process
        is spawned at first use (a fork of a serving process would copy its threads' locks);
        if it dies, the next call starts another (this one is a 503)."""
        async with self.counting:
            if self._counter is None:
                self._counter = ProcessPoolExecutor(max_workers=1,
                                                    mp_context=get_context("spawn"))
            try:
                return await asyncio.get_running_loop().run_in_executor(
                    self._counter, partial(fn, *args))
            except BrokenProcessPool:
                self._counter = None
                raise GatewayError(503, "The token counting process stopped; try again.",
                                   "api_error", code="service_unavailable",
                                   headers={"retry-after": "1"}) from None

    async def close(self) -> None:
        if self._counter is not None:
            self._counter.shutdown(wait=False, cancel_futures=True)
        await self.limiter.close()


def circuit_open_error(rel: Reliability, candidates: list[str]) -> GatewayError:
    """503 when every candidate left was skipped because its circuit is open."""
    return GatewayError(
        503,
        "every candidate backend is cooling down after repeated failures (circuit open): "
        + ", ".join(candidates),
        "upstream_error",
        code="upstream_unavailable",
        headers={"retry-after": str(max(1, math.ceil(rel.circuits.cooldown_s)))},
    )


def guard_store(store: Store | GuardedStore | None, settings: ReliabilitySettings | None
                ) -> GuardedStore | None:
    """Wrap a `gateway.store.Store` with the outage policy and the spools
    (`gateway.reliability.outage.GuardedStore`); a guarded store is returned unchanged."""
    from gateway.reliability.outage import GuardedStore

    if store is None or isinstance(store, GuardedStore):
        return store
    s = (settings or ReliabilitySettings()).resolved()
    if s.redis_url and store.revocations is None:
        from gateway.store.revocations import RevocationSignal

        # revocations counted in Redis: what a replica cut off from the database can check
        store.revocations = RevocationSignal(s.redis_url, s.redis_prefix)
    return GuardedStore(store, policy=s.outage.budget, allowance_usd=s.outage.allowance_usd,
                        spool_dir=s.spool_dir, flush_timeout_s=s.log_flush_timeout_s)
