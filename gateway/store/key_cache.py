"""The authentication cache: which tenant a key digest belongs to, and when to ask again.

Revocation holds at once on every replica: a revocation (key revoked, tenant disabled or
updated) bumps the revocation epoch in the same transaction (gateway/store/auth_epoch.py);
each authentication reads the epoch (one primary-key read, shared by the calls that arrive
while none is running) and serves a cached key only if the epoch has not moved since the key
was found live. While the database cannot be read, a cached key is served only if nothing can
have revoked it: validated at the newest epoch this replica has seen, within ``stale_s``, and
the Redis revocation counter (gateway/store/revocations.py) unchanged since; without Redis,
nothing confirms it and the answer is 503 (never 401). Unknown keys are cached apart, briefly,
so a flood of wrong keys cannot evict the real tenants' keys.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

import gateway.store.tenants as tenantlib
from gateway.store.errors import StoreUnavailable
from gateway.store.records import Tenant
from gateway.store.revocations import RevocationSignal


@dataclass(frozen=True)
class Entry:
    """A key found live (or not) by one lookup."""

    tenant: Tenant | None
    expires: float  # time.monotonic()
    fetched: float
    epoch: int = 0  # the revocation epoch it was validated at (gateway.store.auth_epoch)
    mark: int | None = None  # the Redis revocation counter before that validation


class KeyCache:
    """Tenants by key digest for one process (module docstring)."""

    def __init__(self, engine: Engine, run: Callable[..., Awaitable[Any]], *, ttl_s: float,
                 stale_s: float, size: int) -> None:
        self._engine, self._run = engine, run  # run: the store's bounded worker thread
        self._ttl_s, self._neg_ttl_s = ttl_s, min(1.0, ttl_s)
        self._stale_s, self._size = stale_s, size
        self._live: OrderedDict[str, Entry] = OrderedDict()  # live keys only
        self._unknown: OrderedDict[str, float] = OrderedDict()  # digest -> expiry
        self._inflight: dict[str, asyncio.Task[tuple[int, Tenant | None]]] = {}
        self._epoch_known = -1  # the newest revocation epoch this process has read
        self._epoch_next: asyncio.Future[int] | None = None
        self._epoch_reader: asyncio.Task[None] | None = None
        self.revocations: RevocationSignal | None = None  # set when Redis is configured

    async def authenticate(self, digest: str) -> Tenant | None:
        """The tenant owning the key of ``digest``, or None. Raises `StoreUnavailable`, never
        returns None, when the database cannot answer.

        Revocation holds at once on every replica: each call reads the revocation epoch
        (``gateway.store.auth_epoch``; one primary-key read, shared by the calls that arrive
        while none is running) and serves a cached key only if the epoch has not moved since
        the key was found live; otherwise the key is looked up again. While the database
        cannot be read, a cached key is served only if it was validated at the newest epoch
        this replica has seen, within `auth_stale_s`, and the revocation counter in Redis
        (``gateway.store.revocations``) is unchanged since; without Redis, or with Redis
        unreachable too, nothing confirms it and the answer is 503."""
        now = time.monotonic()
        if self._unknown.get(digest, 0.0) > now:
            return None
        entry = self._live.get(digest)
        try:
            epoch = await self._current_epoch()
        except StoreUnavailable:
            return await self._during_outage(entry, now)
        # still cached after the epoch read? (a lookup meanwhile may have found it revoked)
        if (entry is not None and entry.epoch == epoch and entry.expires > now
                and self._live.get(digest) is entry):
            self._live.move_to_end(digest)
            return entry.tenant
        task = self._inflight.get(digest)
        if task is None:  # one lookup per key at a time: a burst of misses shares it
            task = self._start_lookup(digest)
        found_at, tenant = await asyncio.shield(task)
        if found_at < epoch:  # that lookup began before a revocation this call has seen
            found_at, tenant = await asyncio.shield(self._start_lookup(digest))
        return tenant

    def _start_lookup(self, digest: str) -> asyncio.Task[tuple[int, Tenant | None]]:
        task = asyncio.get_running_loop().create_task(self._lookup(digest))
        self._inflight[digest] = task
        task.add_done_callback(lambda t: self._inflight.pop(digest, None)
                               if self._inflight.get(digest) is t else None)
        return task

    async def _lookup(self, digest: str) -> tuple[int, Tenant | None]:
        # the Redis mark before the database read: a revocation committed after the read
        # increments the counter after the mark was taken
        mark = await self.revocations.mark() if self.revocations is not None else None
        epoch, tenant = await self._run(tenantlib.lookup_key_at, self._engine, digest)
        now = time.monotonic()
        self._epoch_known = max(self._epoch_known, epoch)
        if tenant is None:
            self._live.pop(digest, None)
            self._unknown[digest] = now + self._neg_ttl_s
            self._unknown.move_to_end(digest)
            while len(self._unknown) > self._size:
                self._unknown.popitem(last=False)
            return epoch, None
        self._live[digest] = Entry(tenant, now + self._ttl_s, now, epoch, mark)
        self._live.move_to_end(digest)
        while len(self._live) > self._size:
            self._live.popitem(last=False)
        return epoch, tenant

    async def _during_outage(self, entry: Entry | None, now: float) -> Tenant:
        """The cached tenant while the database cannot be read, only when nothing can have
        revoked it (``authenticate``); else StoreUnavailable (503, never 401)."""
        if (entry is None or entry.tenant is None or now - entry.fetched > self._stale_s
                or entry.epoch != self._epoch_known or entry.mark is None
                or self.revocations is None):
            raise StoreUnavailable("database unavailable")
        if await self.revocations.mark() != entry.mark:
            raise StoreUnavailable("database unavailable (a revocation may have happened)")
        return entry.tenant

    async def _current_epoch(self) -> int:
        """The revocation epoch from a read that began after this call did."""
        fut = self._epoch_next
        if fut is None:
            fut = self._epoch_next = asyncio.get_running_loop().create_future()
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
            if self._epoch_reader is None or self._epoch_reader.done():
                self._epoch_reader = asyncio.get_running_loop().create_task(
                    self._read_epochs(), name="auth-epoch")
        return await asyncio.shield(fut)

    async def _read_epochs(self) -> None:
        """Serve the waiting callers one read at a time; callers arriving during a read wait
        for the next one (it begins after they did)."""
        while (fut := self._epoch_next) is not None:
            self._epoch_next = None
            try:
                epoch = await self._run(tenantlib.read_epoch, self._engine)
            except asyncio.CancelledError:  # shutting down: no waiter is left hanging
                fut.cancel()
                raise
            except Exception as exc:  # noqa: BLE001 - StoreUnavailable, or a bug: waiters get it
                fut.set_exception(exc)
                continue
            self._epoch_known = max(self._epoch_known, epoch)
            fut.set_result(epoch)

    def cached(self, digest: str, max_age_s: float) -> Tenant | None:
        """The tenant of ``digest`` if found live in the last ``max_age_s`` (no lookup)."""
        entry = self._live.get(digest)
        if entry is None or time.monotonic() - entry.fetched > max_age_s:
            return None
        return entry.tenant

    def clear(self) -> None:
        self._live.clear()
        self._unknown.clear()
