"""Requests in flight at once: LiteLLM's ``max_parallel_requests`` of a key and of a team.

A request takes a slot from every subject with a limit (its key, its tenant) before it is
forwarded and gives them back when it is finished (settled and logged; a stream when it ends):
admitted iff ``in_flight(s) + 1 ≤ limit(s)`` for every subject s, all slots taken in one
atomic step (0 refuses every request, as in LiteLLM).

Shared across replicas through Redis: a sorted set per subject holds the request ids in
flight, scored by a lease end; one Lua script drops expired leases, checks and adds, so a
replica that dies mid-request frees its slots after ``LEASE_S`` at most. Without Redis, or
while it is unreachable, the same rule runs in process (per replica). A request longer than
the lease stops counting when its lease ends: the limit errs towards serving, never towards
locking a key out for good.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LEASE_S = 900  # longest a slot is held without its release (a crashed replica's request)

# KEYS: a sorted set per subject. ARGV: request id, lease end (s), then each subject's limit.
# Returns {1, 0} when every slot was taken, else {0, index of the full subject}.
ACQUIRE_LUA = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
for i, k in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', k, '-inf', t)
  if redis.call('ZCARD', k) + 1 > tonumber(ARGV[2 + i]) then return {0, i} end
end
for _, k in ipairs(KEYS) do
  redis.call('ZADD', k, t + tonumber(ARGV[2]), ARGV[1])
  redis.call('EXPIRE', k, math.ceil(tonumber(ARGV[2])) + 1)
end
return {1, 0}
"""


@dataclass(frozen=True)
class Slot:
    """The slots one request holds (``local``: in this process's table)."""

    request_id: str
    subjects: tuple[str, ...]
    local: bool


class ParallelLimiter:
    """Slots per subject, in Redis when ``redis`` (a redis.asyncio client) is given."""

    def __init__(self, redis: Any, prefix: str, on_redis_error: Callable[[Exception], None],
                 clock: Callable[[], float] = time.time) -> None:
        self._redis, self._prefix, self._on_error, self._clock = redis, prefix, on_redis_error, clock
        self._acquire = redis.register_script(ACQUIRE_LUA) if redis is not None else None
        self._local: dict[str, dict[str, float]] = {}  # subject → {request id: lease end}

    def _key(self, subject: str) -> str:
        return f"{self._prefix}:par:{subject}"

    async def acquire(self, request_id: str, limits: list[tuple[str, int]]
                      ) -> tuple[Slot | None, str | None]:
        """(the slots taken, None), or (None, the subject whose limit is full)."""
        names = tuple(n for n, _ in limits)
        if self._acquire is not None:
            try:
                ok, index = await self._acquire(
                    keys=[self._key(n) for n in names],
                    args=[request_id, LEASE_S, *(lim for _, lim in limits)])
            except Exception as exc:  # noqa: BLE001 - any Redis fault: in process, never 500
                self._on_error(exc)
            else:
                if int(ok):
                    return Slot(request_id, names, False), None
                return None, names[int(index) - 1]
        now = self._clock()
        for name, limit in limits:
            held = self._local.setdefault(name, {})
            for rid in [r for r, end in held.items() if end <= now]:
                del held[rid]
            if len(held) + 1 > limit:
                return None, name
        for name in names:
            self._local[name][request_id] = now + LEASE_S
        return Slot(request_id, names, True), None

    async def release(self, slot: Slot) -> None:
        if not slot.local and self._redis is not None:
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for name in slot.subjects:
                        pipe.zrem(self._key(name), slot.request_id)
                    await pipe.execute()
                return
            except Exception as exc:  # noqa: BLE001 - the lease frees it later
                self._on_error(exc)
                return
        for name in slot.subjects:
            held = self._local.get(name)
            if held is not None:
                held.pop(slot.request_id, None)
                if not held:
                    del self._local[name]
