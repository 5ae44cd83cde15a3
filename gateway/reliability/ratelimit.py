"""Per-tenant rate limits: requests per minute (RPM) and tokens per minute (TPM).

Windows are fixed calendar minutes (``window = ⌊t / 60⌋``), counted per tenant:
- a request is admitted iff ``requests_in_window + 1 ≤ rpm`` and ``tokens_in_window < tpm``;
  admission increments the request count in the same atomic step;
- TPM is reserved at admission (issue 24): once a request is planned, its token bound
  R = N_prompt + n·m (the prompt bound of gateway/pricing.py and its output cap) is added to
  its window iff ``tokens_in_window + R ≤ tpm``, atomically; a request without a client
  ``max_tokens`` may be granted less, down to N_prompt + n·``min_output_tokens``, its
  output cap lowered to fit. When it ends, the window it was reserved in is settled to the
  tokens actually used (prompt + completion), so concurrent requests never admit more than
  ``tpm`` tokens in a window. A request whose bound alone passes ``tpm`` is refused for good.
A refusal carries ``retry_after_s`` = seconds to the next window. Every verdict under a limit
also carries the window's counts, which the response reports in OpenAI's ``x-ratelimit-*``
headers (limit, remaining, reset for requests and for tokens).

Shared across replicas through Redis: one Lua script does the check and the increment
atomically on the Redis server (and reads the window from Redis' own clock, so replicas
with skewed clocks still agree). Without a Redis URL, or while Redis is unreachable, the same
rule runs in process (per replica; the event loop makes each check-and-increment atomic).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.store.policy import EMPTY, TenantPolicy

log = logging.getLogger(__name__)

WINDOW_S = 60

# KEYS[1]: key prefix for this tenant. ARGV: rpm (-1 = none), tpm (-1 = none), window_s.
# Returns {admitted (1/0), which limit refused ("" when admitted), seconds to next window,
# requests counted in the window (this one included when admitted), tokens in the window}.
ADMIT_LUA = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
local window_s = tonumber(ARGV[3])
local w = math.floor(t / window_s)
local rkey = KEYS[1] .. ':' .. w .. ':r'
local tkey = KEYS[1] .. ':' .. w .. ':t'
local rpm = tonumber(ARGV[1])
local tpm = tonumber(ARGV[2])
local left = (w + 1) * window_s - t
local reqs = tonumber(redis.call('GET', rkey) or '0')
local toks = tonumber(redis.call('GET', tkey) or '0')
if rpm >= 0 and reqs + 1 > rpm then return {0, 'requests', tostring(left), reqs, toks} end
if tpm >= 0 and toks >= tpm then
  return {0, 'tokens', tostring(left), reqs, toks}
end
redis.call('INCR', rkey)
redis.call('EXPIRE', rkey, window_s * 2)
return {1, '', tostring(left), reqs + 1, toks}
"""

# KEYS[1]: key prefix. ARGV: tokens, window_s. Adds tokens to the current window.
TOKENS_LUA = """
local now = redis.call('TIME')
local w = math.floor((tonumber(now[1]) + tonumber(now[2]) / 1e6) / tonumber(ARGV[2]))
local tkey = KEYS[1] .. ':' .. w .. ':t'
redis.call('INCRBY', tkey, tonumber(ARGV[1]))
redis.call('EXPIRE', tkey, tonumber(ARGV[2]) * 2)
return 1
"""


# KEYS[1]: key prefix. ARGV: tpm, tokens wanted at least, at most, window_s. Reserves
# min(most, tpm - tokens in the window) when that is at least ``least``. Returns {tokens
# granted (0: none), the window, seconds to the next window, tokens in the window}.
RESERVE_LUA = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
local window_s = tonumber(ARGV[4])
local w = math.floor(t / window_s)
local tkey = KEYS[1] .. ':' .. w .. ':t'
local toks = tonumber(redis.call('GET', tkey) or '0')
local room = tonumber(ARGV[1]) - toks
local left = (w + 1) * window_s - t
if room < tonumber(ARGV[2]) then return {0, w, tostring(left), toks} end
local grant = math.min(tonumber(ARGV[3]), room)
redis.call('INCRBY', tkey, grant)
redis.call('EXPIRE', tkey, window_s * 2)
return {grant, w, tostring(left), toks + grant}
"""

# KEYS[1]: key prefix. ARGV: the window a reservation was made in, tokens to add (negative:
# give back), window_s. A window already expired is left alone.
SETTLE_LUA = """
local tkey = KEYS[1] .. ':' .. ARGV[1] .. ':t'
if redis.call('EXISTS', tkey) == 1 then redis.call('INCRBY', tkey, tonumber(ARGV[2])) end
return 1
"""


@dataclass(frozen=True)
class TokenGrant:
    """Tokens reserved against TPM for one request, in ``window``; ``local``: held by the
    in-process limiter (no Redis, or Redis was down)."""

    tokens: int
    window: int
    retry_after_s: float
    local: bool


@dataclass(frozen=True)
class Limits:
    """A tenant's limits; None = unlimited."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.requests_per_minute is None and self.tokens_per_minute is None


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    limit: str | None  # "requests" | "tokens" when refused
    retry_after_s: float
    limits: Limits = Limits()  # what applied (unlimited: no headers)
    requests: int = 0  # requests counted in this window
    tokens: int = 0  # tokens counted in this window

    @property
    def retry_after_header(self) -> str:
        """Whole seconds, rounded up, at least 1 (the HTTP ``Retry-After`` form)."""
        return str(max(1, math.ceil(self.retry_after_s)))

    def headers(self) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` for the limits
        that apply; reset is the time to the next window (e.g. ``"17s"``)."""
        out: dict[str, str] = {}
        reset = f"{max(0, math.ceil(self.retry_after_s))}s"
        for name, limit, used in (("requests", self.limits.requests_per_minute, self.requests),
                                  ("tokens", self.limits.tokens_per_minute, self.tokens)):
            if limit is not None:
                out[f"x-ratelimit-limit-{name}"] = str(limit)
                out[f"x-ratelimit-remaining-{name}"] = str(max(0, limit - used))
                out[f"x-ratelimit-reset-{name}"] = reset
        return out


def limits_for(policy: TenantPolicy | None, default: Limits) -> Limits:
    """Tenant policy ``requests_per_minute`` / ``tokens_per_minute`` override the defaults."""
    p = policy or EMPTY
    rpm, tpm = p.requests_per_minute, p.tokens_per_minute
    return Limits(default.requests_per_minute if rpm is None else rpm,
                  default.tokens_per_minute if tpm is None else tpm)


class LocalLimiter:
    """The in-process rule (one replica). ``clock`` is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.time, window_s: int = WINDOW_S) -> None:
        self._clock = clock
        self._window_s = window_s
        self._counts: dict[tuple[str, int], list[int]] = {}  # (tenant, window) -> [reqs, toks]

    def _slot(self, tenant: str) -> tuple[list[int], float]:
        t = self._clock()
        w = int(t // self._window_s)
        if len(self._counts) > 10_000:  # forget past windows
            self._counts = {k: v for k, v in self._counts.items() if k[1] >= w}
        slot = self._counts.setdefault((tenant, w), [0, 0])
        return slot, (w + 1) * self._window_s - t

    def admit(self, tenant: str, limits: Limits) -> Verdict:
        slot, left = self._slot(tenant)
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        if rpm is not None and slot[0] + 1 > rpm:
            return Verdict(False, "requests", left, limits, slot[0], slot[1])
        if tpm is not None and slot[1] >= tpm:
            return Verdict(False, "tokens", left, limits, slot[0], slot[1])
        slot[0] += 1
        return Verdict(True, None, left, limits, slot[0], slot[1])

    def add_tokens(self, tenant: str, tokens: int) -> None:
        slot, _ = self._slot(tenant)
        slot[1] += tokens

    def reserve(self, tenant: str, tpm: int, least: int, most: int) -> TokenGrant:
        """RESERVE_LUA's rule in process (the event loop makes it atomic)."""
        slot, left = self._slot(tenant)
        w = int(self._clock() // self._window_s)
        room = tpm - slot[1]
        if room < least:
            return TokenGrant(0, w, left, True)
        grant = min(most, room)
        slot[1] += grant
        return TokenGrant(grant, w, left, True)

    def settle(self, tenant: str, window: int, delta: int) -> None:
        slot = self._counts.get((tenant, window))
        if slot is not None:
            slot[1] += delta


class RateLimiter:
    """Redis-backed when ``redis_url`` is set, in-process otherwise or while Redis is down."""

    def __init__(self, redis_url: str | None, default: Limits, prefix: str = "tollgate",
                 window_s: int = WINDOW_S) -> None:
        self.default = default
        self.window_s = window_s
        self.local = LocalLimiter(window_s=window_s)
        self._prefix = prefix
        self._redis: Any = None
        self._admit: Any = None
        self._tokens: Any = None
        self._reserve: Any = None
        self._settle: Any = None
        self.redis_errors = 0
        if redis_url:
            import redis.asyncio as aioredis

            self._redis = aioredis.Redis.from_url(redis_url, socket_timeout=1.0,
                                                  socket_connect_timeout=1.0)
            self._admit = self._redis.register_script(ADMIT_LUA)
            self._tokens = self._redis.register_script(TOKENS_LUA)
            self._reserve = self._redis.register_script(RESERVE_LUA)
            self._settle = self._redis.register_script(SETTLE_LUA)

    @property
    def shared(self) -> bool:
        return self._redis is not None

    def _key(self, tenant: str) -> str:
        return f"{self._prefix}:rl:{tenant}"

    def _degraded(self, exc: Exception) -> None:
        self.redis_errors += 1
        if self.redis_errors == 1 or self.redis_errors % 1000 == 0:
            log.warning("rate limiter: Redis unavailable (%s); limiting in process",
                        type(exc).__name__)

    async def admit(self, tenant: str, policy: TenantPolicy | None) -> Verdict:
        """Check and count one request of ``tenant`` atomically."""
        limits = limits_for(policy, self.default)
        if limits.unlimited:
            return Verdict(True, None, 0.0)
        if self._redis is not None:
            rpm = -1 if limits.requests_per_minute is None else limits.requests_per_minute
            tpm = -1 if limits.tokens_per_minute is None else limits.tokens_per_minute
            try:
                ok, which, left, reqs, toks = await self._admit(
                    keys=[self._key(tenant)], args=[rpm, tpm, self.window_s])
            except Exception as exc:  # noqa: BLE001 - any Redis fault: fall back, never 500
                self._degraded(exc)
            else:
                which = which.decode() if isinstance(which, bytes) else str(which)
                return Verdict(bool(int(ok)), which or None, float(left), limits, int(reqs),
                               int(toks))
        return self.local.admit(tenant, limits)

    async def add_tokens(self, tenant: str, tokens: int, policy: TenantPolicy | None) -> None:
        """Count ``tokens`` used by a finished request (only when a TPM limit applies)."""
        if tokens <= 0 or limits_for(policy, self.default).tokens_per_minute is None:
            return
        if self._redis is not None:
            try:
                await self._tokens(keys=[self._key(tenant)], args=[int(tokens), self.window_s])
                return
            except Exception as exc:  # noqa: BLE001
                self._degraded(exc)
        self.local.add_tokens(tenant, tokens)

    def tokens_per_minute(self, policy: TenantPolicy | None) -> int | None:
        return limits_for(policy, self.default).tokens_per_minute

    async def reserve_tokens(self, tenant: str, tpm: int, least: int, most: int
                             ) -> TokenGrant:
        """Reserve between ``least`` and ``most`` tokens of ``tenant``'s window atomically
        (``tokens`` 0: the window has no room for ``least``)."""
        if self._redis is not None:
            try:
                got, w, left, _ = await self._reserve(
                    keys=[self._key(tenant)], args=[tpm, least, most, self.window_s])
            except Exception as exc:  # noqa: BLE001 - any Redis fault: fall back, never 500
                self._degraded(exc)
            else:
                return TokenGrant(int(got), int(w), float(left), False)
        return self.local.reserve(tenant, tpm, least, most)

    async def settle_tokens(self, tenant: str, grant: TokenGrant, used: int) -> None:
        """The grant's window counts ``used`` tokens instead of the reserved ones."""
        delta = max(0, used) - grant.tokens
        if delta == 0 or grant.tokens == 0:
            return
        if not grant.local and self._redis is not None:
            try:
                await self._settle(keys=[self._key(tenant)],
                                   args=[grant.window, delta, self.window_s])
                return
            except Exception as exc:  # noqa: BLE001
                self._degraded(exc)
                return  # the reservation stays counted: the safe side
        self.local.settle(tenant, grant.window, delta)

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
