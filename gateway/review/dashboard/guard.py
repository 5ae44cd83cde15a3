"""How often a principal may call the dashboard API, and how many of its queries run at once.

Rows are free to create (a $0 tenant's refused requests are logged too), so a summary's cost
grows with the log; one tenant calling it in a loop must not take the process from the
others (issue 24: 12 concurrent calls took another tenant's chat p50 from 17 ms to 1.39 s).

- Per principal (the admin, or one tenant): at most ``dashboard_requests_per_minute`` calls
  per fixed minute, counted by the reliability rate limiter (``ratelimit.RateLimiter``: in
  Redis across replicas when ``reliability.redis_url`` is set, in process otherwise).
- Per process: at most ``dashboard_max_concurrent`` queries at once, run on worker threads
  of their own capacity limiter, apart from the default one that the store's calls
  (``gateway.context.call``) share with the chat path. A call beyond that is refused at once.

Both refusals are 429 in OpenAI's error format with ``Retry-After``.

- A summary is computed once per (view, window) and served from memory for
  ``SUMMARY_FRESH_S`` seconds; calls for a summary being computed wait for that computation
  instead of taking a slot of their own (issue 35: 12 concurrent summaries of one view took
  another tenant's chat p50 from 19 to 250 ms, each re-reading 60k rows).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from multiprocessing import get_context
from typing import Any

import anyio
import anyio.to_thread

from gateway.auth import Principal
from gateway.config import Settings
from gateway.errors import GatewayError
from gateway.reliability.ratelimit import Limits, RateLimiter

BUSY_RETRY_S = 1  # a dashboard query is short: try again in a second
SUMMARY_FRESH_S = 10.0  # a summary's figures move by the minute; its queries take seconds


class DashboardGuard:
    """The dashboard's rate limit and its own small pool of query slots."""

    def __init__(self, redis_url: str | None, redis_prefix: str, requests_per_minute: int,
                 max_concurrent: int) -> None:
        self.limiter = RateLimiter(redis_url, Limits(requests_per_minute, None),
                                   prefix=f"{redis_prefix}:dashboard")
        self.max_concurrent = max_concurrent
        self.running = 0  # queries in flight in this process (the event loop counts them)
        self._threads = anyio.CapacityLimiter(max_concurrent)
        # (view, window) -> (computed at, monotonic) and its task: one computation at a time
        self._summaries: dict[Hashable, tuple[float, asyncio.Task[Any]]] = {}
        self._procs: ProcessPoolExecutor | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> DashboardGuard:
        r = settings.reliability.resolved()  # TOLLGATE_REDIS_URL applied
        return cls(r.redis_url, r.redis_prefix, settings.dashboard_requests_per_minute,
                   settings.dashboard_max_concurrent)

    @classmethod
    def in_process(cls) -> DashboardGuard:
        """The defaults, counted in this process (until the app's settings are read)."""
        d = Settings()
        return cls(None, "tollgate", d.dashboard_requests_per_minute, d.dashboard_max_concurrent)

    async def admit(self, who: Principal) -> None:
        """Count one call of ``who``; 429 past its calls per minute."""
        principal = "admin" if who.admin else f"tenant:{who.tenant_id}"
        v = await self.limiter.admit(principal, None)
        if not v.admitted:
            raise GatewayError(
                429, f"Rate limit reached: {v.limits.requests_per_minute} dashboard API calls "
                f"per minute for this key. Try again in {v.retry_after_header}s.",
                "rate_limit_error", code="rate_limit_exceeded",
                headers={"retry-after": v.retry_after_header, **v.headers()})

    async def run(self, fn: Callable[..., Any], *args: Any, apart: bool = False) -> Any:
        """``fn(*args)`` on one of the dashboard's threads (``apart``: in its worker process,
        summary_job.py); 429 when every slot is taken."""
        if self.running >= self.max_concurrent:
            raise GatewayError(
                429, f"The dashboard is answering {self.max_concurrent} queries already. "
                f"Try again in {BUSY_RETRY_S}s.", "rate_limit_error", code="dashboard_busy",
                headers={"retry-after": str(BUSY_RETRY_S)})
        self.running += 1
        try:
            if apart:
                try:
                    return await asyncio.get_running_loop().run_in_executor(
                        self._process(), partial(fn, *args))
                except BrokenProcessPool:  # its worker died (killed, out of memory)
                    self._procs = None  # the next call starts another
                    raise GatewayError(503, "The dashboard's worker process stopped; try "
                                       f"again in {BUSY_RETRY_S}s.", "api_error",
                                       code="dashboard_unavailable",
                                       headers={"retry-after": str(BUSY_RETRY_S)}) from None
            return await anyio.to_thread.run_sync(partial(fn, *args), limiter=self._threads)
        finally:
            self.running -= 1

    def _process(self) -> ProcessPoolExecutor:
        """The dashboard's worker process, started at its first use (spawned: a fork of a
        serving process would copy its threads' locks)."""
        if self._procs is None:
            self._procs = ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"))
        return self._procs

    async def shared(self, key: Hashable, fn: Callable[..., Any], *args: Any,
                     apart: bool = False) -> Any:
        """``run(fn, *args)``, shared by every call with the same ``key`` while it runs and
        for ``SUMMARY_FRESH_S`` after; a failed computation is not kept."""
        now = time.monotonic()
        for k in [k for k, (t, task) in self._summaries.items()
                  if task.done() and now - t > SUMMARY_FRESH_S]:
            del self._summaries[k]
        held = self._summaries.get(key)
        if held is None or (held[1].done() and (held[1].cancelled()
                                                or held[1].exception() is not None)):
            task = asyncio.get_running_loop().create_task(self.run(fn, *args, apart=apart))
            held = self._summaries[key] = (now, task)
        return await asyncio.shield(held[1])

    def worker_pids(self) -> list[int]:
        """The dashboard's worker processes now (none before the first summary)."""
        return [] if self._procs is None else [
            p.pid for p in (self._procs._processes or {}).values()]  # no public accessor

    async def close(self) -> None:
        if self._procs is not None:
            self._procs.shutdown(wait=False, cancel_futures=True)
        await self.limiter.close()
