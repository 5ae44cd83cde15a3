"""Rate limits: requests per minute (RPM) and tokens per minute (TPM), per subject (a tenant,
and a key with limits of its own; a request counts against all of its subjects at once).

Windows are fixed calendar minutes (``window = ⌊t / 60⌋``), counted per tenant:
- a request is admitted iff ``requests_in_window + 1 ≤ rpm`` and ``tokens_in_window < tpm``;
  admission increments the request count in the same atomic step;
- TPM is reserved at admission (issue 24): once a request is planned, its token bound
  R = N_prompt + n·m (the prompt bound of gateway/prompt_tokens.py and its output cap) is added to
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

# Every script takes the prefixes of the subjects a request counts against (its tenant and,
# with limits of its own, its key) as KEYS and checks or books them all in one atomic step.

# ARGV: window_s, then rpm and tpm of each subject in KEYS' order (-1 = none). Returns
# {admitted (1/0), the refusing subject's index (0 when admitted), which limit refused ("" when
# admitted), seconds to the next window, then requests counted (this one included when
# admitted) and tokens in the window: of each subject, or of the refusing one}.
ADMIT_LUA = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
local window_s = tonumber(ARGV[1])
local w = math.floor(t / window_s)
local left = tostring((w + 1) * window_s - t)
local counts = {}
for i, k in ipairs(KEYS) do
  local reqs = tonumber(redis.call('GET', k .. ':' .. w .. ':r') or '0')
  local toks = tonumber(redis.call('GET', k .. ':' .. w .. ':t') or '0')
  local rpm = tonumber(ARGV[2 * i])
  local tpm = tonumber(ARGV[2 * i + 1])
  if rpm >= 0 and reqs + 1 > rpm then return {0, i, 'requests', left, reqs, toks} end
  if tpm >= 0 and toks >= tpm then return {0, i, 'tokens', left, reqs, toks} end
  counts[i] = {reqs, toks}
end
local out = {1, 0, '', left}
for i, k in ipairs(KEYS) do
  local rkey = k .. ':' .. w .. ':r'
  redis.call('INCR', rkey)
  redis.call('EXPIRE', rkey, window_s * 2)
  table.insert(out, counts[i][1] + 1)
  table.insert(out, counts[i][2])
end
return out
"""

# ARGV: tokens, window_s. Adds tokens to the current window of every subject.
TOKENS_LUA = """
local now = redis.call('TIME')
local w = math.floor((tonumber(now[1]) + tonumber(now[2]) / 1e6) / tonumber(ARGV[2]))
for _, k in ipairs(KEYS) do
  local tkey = k .. ':' .. w .. ':t'
  redis.call('INCRBY', tkey, tonumber(ARGV[1]))
  redis.call('EXPIRE', tkey, tonumber(ARGV[2]) * 2)
end
return 1
"""

# ARGV: window_s, tokens wanted at least, at most, then the tpm of each subject. Reserves
# min(most, min over subjects of (tpm - tokens in the window)) in every subject's window when
# that is at least ``least``. Returns {tokens granted (0: none), the window, seconds to the
# next window}.
RESERVE_LUA = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
local window_s = tonumber(ARGV[1])
local w = math.floor(t / window_s)
local left = tostring((w + 1) * window_s - t)
local room = tonumber(ARGV[3])
for i, k in ipairs(KEYS) do
  local toks = tonumber(redis.call('GET', k .. ':' .. w .. ':t') or '0')
  room = math.min(room, tonumber(ARGV[3 + i]) - toks)
end
if room < tonumber(ARGV[2]) then return {0, w, left} end
for _, k in ipairs(KEYS) do
  local tkey = k .. ':' .. w .. ':t'
  redis.call('INCRBY', tkey, room)
  redis.call('EXPIRE', tkey, window_s * 2)
end
return {room, w, left}
"""

# ARGV: the window a reservation was made in, tokens to add (negative: give back). A window
# already expired is left alone.
SETTLE_LUA = """
for _, k in ipairs(KEYS) do
  local tkey = k .. ':' .. ARGV[1] .. ':t'
  if redis.call('EXISTS', tkey) == 1 then redis.call('INCRBY', tkey, tonumber(ARGV[2])) end
end
return 1
"""


@dataclass(frozen=True)
class TokenGrant:
    """Tokens reserved against TPM for one request, in ``window``, in each of ``subjects``'
    windows; ``local``: held by the in-process limiter (no Redis, or Redis was down)."""

    tokens: int
    window: int
    retry_after_s: float
    local: bool
    subjects: tuple[str, ...] = ()


@dataclass(frozen=True)
class Limits:
    """A tenant's (or a key's) limits; None = unlimited, 0 = nothing passes (LiteLLM's)."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.requests_per_minute is None and self.tokens_per_minute is None


Subject = tuple[str, Limits]  # who a request counts against (a tenant, a key) and its limits


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    limit: str | None  # "requests" | "tokens" when refused
    retry_after_s: float
    limits: Limits = Limits()  # what applied (unlimited: no headers)
    requests: int = 0  # requests counted in this window
    tokens: int = 0  # tokens counted in this window
    subject: str | None = None  # the subject that refused (None when admitted)

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


def tightest_headers(verdicts: list[Verdict]) -> dict[str, str]:
    """The ``x-ratelimit-*`` headers of several subjects' verdicts: per limit (requests,
    tokens), the one with the least remaining."""
    out: dict[str, str] = {}
    for v in verdicts:
        for name, value in v.headers().items():
            if not name.startswith("x-ratelimit-remaining-"):
                continue
            what = name.removeprefix("x-ratelimit-remaining-")
            if name not in out or int(value) < int(out[name]):
                for h in ("limit", "remaining", "reset"):
                    out[f"x-ratelimit-{h}-{what}"] = v.headers()[f"x-ratelimit-{h}-{what}"]
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
        self._counts: dict[tuple[str, int], list[int]] = {}  # (subject, window) -> [reqs, toks]

    def _slot(self, subject: str) -> tuple[list[int], float]:
        t = self._clock()
        w = int(t // self._window_s)
        if len(self._counts) > 10_000:  # forget past windows
            self._counts = {k: v for k, v in self._counts.items() if k[1] >= w}
        slot = self._counts.setdefault((subject, w), [0, 0])
        return slot, (w + 1) * self._window_s - t

    def admit_all(self, subjects: list[Subject]) -> list[Verdict]:
        """ADMIT_LUA's rule in process: every subject admits, or the first refusal alone."""
        slots = []
        for name, limits in subjects:
            slot, left = self._slot(name)
            rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
            if rpm is not None and slot[0] + 1 > rpm:
                return [Verdict(False, "requests", left, limits, slot[0], slot[1], name)]
            if tpm is not None and slot[1] >= tpm:
                return [Verdict(False, "tokens", left, limits, slot[0], slot[1], name)]
            slots.append((slot, left, limits))
        for slot, _, _ in slots:
            slot[0] += 1
        return [Verdict(True, None, left, limits, slot[0], slot[1])
                for slot, left, limits in slots]

    def admit(self, subject: str, limits: Limits) -> Verdict:
        return self.admit_all([(subject, limits)])[0]

    def add_tokens(self, subject: str, tokens: int) -> None:
        slot, _ = self._slot(subject)
        slot[1] += tokens

    def reserve_all(self, subjects: list[Subject], least: int, most: int) -> TokenGrant:
        """RESERVE_LUA's rule in process (the event loop makes it atomic)."""
        names = tuple(name for name, _ in subjects)
        w = int(self._clock() // self._window_s)
        room, left = most, 0.0
        for name, limits in subjects:
            slot, left = self._slot(name)
            room = min(room, (limits.tokens_per_minute or 0) - slot[1])
        if room < least:
            return TokenGrant(0, w, left, True, names)
        for name in names:
            self._slot(name)[0][1] += room
        return TokenGrant(room, w, left, True, names)

    def reserve(self, subject: str, tpm: int, least: int, most: int) -> TokenGrant:
        return self.reserve_all([(subject, Limits(None, tpm))], least, most)

    def settle(self, subject: str, window: int, delta: int) -> None:
        slot = self._counts.get((subject, window))
        if slot is not None:
            slot[1] += delta


class RateLimiter:
    """Redis-backed when ``redis_url`` is set, in-process otherwise or while Redis is down."""

    def __init__(self, redis_url: str | None, default: Limits, prefix: str = "tollgate",
                 window_s: int = WINDOW_S) -> None:
        self.default = default
        self.window_s = window_s
        self.local = LocalLimiter(window_s=window_s)
        self.prefix = prefix
        self.redis: Any = None  # the client, shared with gateway/reliability/parallel.py
        self._admit: Any = None
        self._tokens: Any = None
        self._reserve: Any = None
        self._settle: Any = None
        self.redis_errors = 0
        if redis_url:
            import redis.asyncio as aioredis

            self.redis = aioredis.Redis.from_url(redis_url, socket_timeout=1.0,
                                                 socket_connect_timeout=1.0)
            self._admit = self.redis.register_script(ADMIT_LUA)
            self._tokens = self.redis.register_script(TOKENS_LUA)
            self._reserve = self.redis.register_script(RESERVE_LUA)
            self._settle = self.redis.register_script(SETTLE_LUA)

    @property
    def shared(self) -> bool:
        return self.redis is not None

    def _key(self, subject: str) -> str:
        return f"{self.prefix}:rl:{subject}"

    def degraded(self, exc: Exception) -> None:
        self.redis_errors += 1
        if self.redis_errors == 1 or self.redis_errors % 1000 == 0:
            log.warning("rate limiter: Redis unavailable (%s); limiting in process",
                        type(exc).__name__)

    async def admit_all(self, subjects: list[Subject]) -> list[Verdict]:
        """Check and count one request against every subject's limits atomically: a verdict
        per subject when all admit, else the refusing subject's alone."""
        subjects = [(n, lim) for n, lim in subjects if not lim.unlimited]
        if not subjects:
            return [Verdict(True, None, 0.0)]
        if self.redis is not None:
            args: list[int] = [self.window_s]
            for _, lim in subjects:
                args += [-1 if lim.requests_per_minute is None else lim.requests_per_minute,
                         -1 if lim.tokens_per_minute is None else lim.tokens_per_minute]
            try:
                ok, index, which, left, *counts = await self._admit(
                    keys=[self._key(n) for n, _ in subjects], args=args)
            except Exception as exc:  # noqa: BLE001 - any Redis fault: fall back, never 500
                self.degraded(exc)
            else:
                which = which.decode() if isinstance(which, bytes) else str(which)
                if not int(ok):
                    name, lim = subjects[int(index) - 1]
                    return [Verdict(False, which, float(left), lim, int(counts[0]),
                                    int(counts[1]), name)]
                return [Verdict(True, None, float(left), lim, int(counts[2 * i]),
                                int(counts[2 * i + 1])) for i, (_, lim) in enumerate(subjects)]
        return self.local.admit_all(subjects)

    async def admit(self, tenant: str, policy: TenantPolicy | None) -> Verdict:
        """Check and count one request of ``tenant`` atomically."""
        return (await self.admit_all([(tenant, limits_for(policy, self.default))]))[0]

    async def add_tokens_all(self, subjects: list[str], tokens: int) -> None:
        """Count ``tokens`` used by a finished request in each subject's window."""
        if tokens <= 0 or not subjects:
            return
        if self.redis is not None:
            try:
                await self._tokens(keys=[self._key(n) for n in subjects],
                                   args=[int(tokens), self.window_s])
                return
            except Exception as exc:  # noqa: BLE001
                self.degraded(exc)
        for name in subjects:
            self.local.add_tokens(name, tokens)

    async def add_tokens(self, tenant: str, tokens: int, policy: TenantPolicy | None) -> None:
        """Count ``tokens`` used by a finished request (only when a TPM limit applies)."""
        if limits_for(policy, self.default).tokens_per_minute is not None:
            await self.add_tokens_all([tenant], tokens)

    def tokens_per_minute(self, policy: TenantPolicy | None) -> int | None:
        return limits_for(policy, self.default).tokens_per_minute

    async def reserve_all(self, subjects: list[Subject], least: int, most: int) -> TokenGrant:
        """Reserve between ``least`` and ``most`` tokens in every subject's window atomically
        (each has a TPM limit; ``tokens`` 0: some window has no room for ``least``)."""
        names = tuple(n for n, _ in subjects)
        if self.redis is not None:
            try:
                got, w, left = await self._reserve(
                    keys=[self._key(n) for n in names],
                    args=[self.window_s, least, most,
                          *(lim.tokens_per_minute or 0 for _, lim in subjects)])
            except Exception as exc:  # noqa: BLE001 - any Redis fault: fall back, never 500
                self.degraded(exc)
            else:
                return TokenGrant(int(got), int(w), float(left), False, names)
        return self.local.reserve_all(subjects, least, most)

    async def reserve_tokens(self, tenant: str, tpm: int, least: int, most: int
                             ) -> TokenGrant:
        """``reserve_all`` for one subject with the limit ``tpm``."""
        return await self.reserve_all([(tenant, Limits(None, tpm))], least, most)

    async def settle_tokens(self, tenant: str | None, grant: TokenGrant, used: int) -> None:
        """The grant's windows count ``used`` tokens instead of the reserved ones."""
        delta = max(0, used) - grant.tokens
        if delta == 0 or grant.tokens == 0:
            return
        names = grant.subjects or ((tenant,) if tenant is not None else ())
        if not grant.local and self.redis is not None:
            try:
                await self._settle(keys=[self._key(n) for n in names],
                                   args=[grant.window, delta])
                return
            except Exception as exc:  # noqa: BLE001
                self.degraded(exc)
                return  # the reservation stays counted: the safe side
        for name in names:
            self.local.settle(name, grant.window, delta)

    async def close(self) -> None:
        if self.redis is not None:
            await self.redis.aclose()
