"""The revocation signal in Redis: what lets a replica that cannot reach the database know
whether a key it validated earlier has been revoked since.

Every revocation (a key revoked, a tenant disabled or updated; through the admin API or the
CLI) increments ``{prefix}:auth:revocations`` before its database transaction and again after
it. A replica reads the counter before each key lookup and keeps it with the cached key; while
the database is unreachable it serves that key only if the counter is unchanged, i.e. nothing
was revoked anywhere since the key was found live (gateway/store/store.py, ``authenticate``).
Unreachable Redis, or no Redis configured, confirms nothing: the key is then a 503.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def counter_key(prefix: str) -> str:
    return f"{prefix}:auth:revocations"


class RevocationSignal:
    def __init__(self, redis_url: str, prefix: str = "tollgate", timeout_s: float = 0.5) -> None:
        import redis.asyncio as aioredis

        self.key = counter_key(prefix)
        self._redis: Any = aioredis.Redis.from_url(redis_url, socket_timeout=timeout_s,
                                                  socket_connect_timeout=timeout_s)

    async def mark(self) -> int | None:
        """The counter now; None when Redis does not answer."""
        try:
            value = await self._redis.get(self.key)
        except Exception:  # noqa: BLE001 - any Redis fault: nothing confirmed
            return None
        return int(value or 0)

    async def bump(self) -> bool:
        try:
            await self._redis.incr(self.key)
            return True
        except Exception as exc:  # noqa: BLE001
            log.error("revocation signal: Redis unavailable (%s); a replica that cannot reach "
                      "the database will refuse cached keys it cannot confirm", exc)
            return False

    async def close(self) -> None:
        try:
            await self._redis.aclose()
        except Exception:  # noqa: BLE001, S110 - closing: nothing left to tell
            pass


def bump_sync(redis_url: str | None, prefix: str = "tollgate") -> bool:
    """``RevocationSignal.bump`` for synchronous callers (the CLI); False without Redis."""
    if not redis_url:
        return False
    import redis

    try:
        client = redis.Redis.from_url(redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)
        try:
            client.incr(counter_key(prefix))
        finally:
            client.close()
        return True
    except Exception as exc:  # noqa: BLE001
        log.error("revocation signal: Redis unavailable (%s)", exc)
        return False
