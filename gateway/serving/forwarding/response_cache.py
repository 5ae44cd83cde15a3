"""Where cached answers live: this process (``LocalEntries``) or Redis, shared by replicas.

A stored entry is the answer's JSON body with the time it was stored (``s-maxage`` compares
against it); the key is already keyed and hashed (gateway/serving/forwarding/cached_answer.py), so
neither store sees a prompt. The local store is bounded by entries and bytes (least recently
used first) and drops what expired on the way; Redis expires entries itself (``SET .. EX``).

Redis never fails a request: a fault is logged (first, then every 1000th), counted in
``tollgate_response_cache{result="error"}``, and answered as a miss / a skipped store; after
one, Redis is left alone for ``REDIS_PAUSE_S`` so a down Redis costs no request its connect
timeout. All Redis calls are redis.asyncio (nothing blocks the event loop).
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from gateway.config.cache import CacheSettings

log = logging.getLogger(__name__)
REDIS_PAUSE_S = 5.0  # after a Redis fault, the cache is skipped this long


class LocalEntries:
    """key → (expires at, bytes), bounded by ``max_entries`` and ``max_bytes`` (LRU)."""

    def __init__(self, max_entries: int, max_bytes: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries, self.max_bytes, self.clock = max_entries, max_bytes, clock
        self._items: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> bytes | None:
        item = self._items.get(key)
        if item is None:
            return None
        if item[0] <= self.clock():
            self._drop(key)
            return None
        self._items.move_to_end(key)
        return item[1]

    def put(self, key: str, value: bytes, ttl_s: float) -> None:
        if key in self._items:
            self._drop(key)
        if len(value) > self.max_bytes:
            return
        self._items[key] = (self.clock() + ttl_s, value)
        self.bytes += len(value)
        while len(self._items) > self.max_entries or self.bytes > self.max_bytes:
            self._drop(next(iter(self._items)))

    def _drop(self, key: str) -> None:
        _, value = self._items.pop(key)
        self.bytes -= len(value)


class ResponseCache:
    """The configured store with its metric: ``get``/``put`` never raise."""

    def __init__(self, settings: CacheSettings, redis_url: str | None, prefix: str,
                 counter: Any) -> None:
        self.settings, self.prefix, self.counter = settings, prefix, counter
        self.local: LocalEntries | None = None
        self.redis: Any = None
        self.errors = 0
        self._paused_until = 0.0
        if settings.type == "redis":
            url = settings.redis_url or redis_url
            if not url:
                raise ValueError("cache type redis needs a Redis: cache_params url or host "
                                 "(or reliability.redis_url / TOLLGATE_REDIS_URL)")
            import redis.asyncio as aioredis

            self.redis = aioredis.Redis.from_url(url, socket_timeout=1.0,
                                                 socket_connect_timeout=1.0)
        else:
            self.local = LocalEntries(settings.max_entries, settings.max_bytes)

    def redis_key(self, key: str) -> str:
        return f"{self.prefix}:rc:{key}"

    async def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry ({"body", "stored_at"}) or None (absent, expired, Redis down)."""
        raw: bytes | None = None
        if self.local is not None:
            raw = self.local.get(key)
        elif self._redis_usable():
            try:
                raw = await self.redis.get(self.redis_key(key))
            except Exception as e:  # noqa: BLE001 - any Redis fault: a miss, never a 500
                self._fault(e)
                return None
        if raw is None:
            return None
        try:
            entry = json.loads(raw)
        except ValueError:
            return None
        return entry if isinstance(entry, dict) and isinstance(entry.get("body"), dict) else None

    async def put(self, key: str, body: dict[str, Any], ttl_s: float) -> bool:
        """Store ``body`` for ``ttl_s`` seconds; False when not kept (too large, Redis down)."""
        raw = json.dumps({"body": body, "stored_at": time.time()}).encode()
        if len(raw) > self.settings.max_entry_bytes:
            return False
        if self.local is not None:
            self.local.put(key, raw, ttl_s)
            return True
        if not self._redis_usable():
            return False
        try:
            await self.redis.set(self.redis_key(key), raw, px=max(1, int(ttl_s * 1000)))
        except Exception as e:  # noqa: BLE001 - any Redis fault: not stored, never a 500
            self._fault(e)
            return False
        return True

    def _redis_usable(self) -> bool:
        return time.monotonic() >= self._paused_until

    def _fault(self, exc: Exception) -> None:
        self.errors += 1
        self._paused_until = time.monotonic() + REDIS_PAUSE_S
        self.counter.labels("error").inc()
        if self.errors == 1 or self.errors % 1000 == 0:
            log.warning("response cache: Redis unavailable (%s: %s); serving uncached for "
                        "%.0fs", type(exc).__name__, exc, REDIS_PAUSE_S)

    async def close(self) -> None:
        if self.redis is not None:
            await self.redis.aclose()


def build_response_cache(settings: CacheSettings, reliability: Any,
                         metrics: Any) -> ResponseCache | None:
    """The configured cache (None when off); Redis defaults to the reliability section's."""
    if not settings.enabled:
        return None
    cache = ResponseCache(settings, reliability.redis_url, reliability.redis_prefix,
                          metrics.response_cache)
    log.info("response cache on: %s, ttl %gs%s", settings.type, settings.ttl_s,
             "" if cache.local is None else f", at most {settings.max_entries} entries / "
             f"{settings.max_bytes} bytes")
    return cache


async def close_response_cache(cache: ResponseCache | None) -> None:
    if cache is not None:
        await cache.close()
