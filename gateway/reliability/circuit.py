"""Per-backend circuit breakers: a failing backend is put in cooldown and probed back.

States (exported as ``tollgate_circuit_state{model}``: 0 closed, 1 half-open, 2 open):
- closed: requests flow; ``failure_threshold`` consecutive failures open the circuit;
- open: the backend is skipped (the next candidate is tried, or 503 when none is left) until
  ``cooldown_s`` has passed;
- half-open: up to ``half_open_probes`` requests go through as probes; a probe that
  succeeds closes the circuit, one that fails opens it again for another cooldown.
A failure is what makes another backend worth trying (connection error, timeout, 429, 5xx,
an unparseable answer, a stream broken mid-way); a 400 about the request itself means the
backend answered and counts as a success. Breakers are per replica: each process learns a
backend's health from its own traffic.

No tenant can open a breaker for the others (issue 24). A failure is reported with who caused
it: ``tenant=None`` when it is the backend's beyond doubt (it refused the connection, rejected
our credentials: no request content can cause that), else the tenant whose request met it (a
timeout, a 5xx, a reset: a request can provoke those by what it asks). A tenant counts once
however many keys it has (``Tenant.principal``: a team's keys are its tenant; keys made
without a team count as their ``user_id`` when they have one). The evidence against a
backend while closed is

    E = f_proven + Σ_t min(f_t, s),   s = ⌈failure_threshold / min_tenants⌉      (C1)

over the failures since its last success (f_t: tenant t's), and the circuit opens when
E ≥ failure_threshold and the failures are proven ones or come from at least ``min_tenants``
tenants: one tenant's failures weigh at most s and never open it alone. While half-open, a proven failure reopens at
once; a tenant's failing probe frees the probe slot and reopens only once ``min_tenants``
tenants' probes failed. Who is one client (issue 48.11): a principal names its tenant and,
when its key has one, its user (``Tenant.principal``: ``tenant|user:u``); two principals that
share either are the same client (``principal_groups``), so a user's keys in two teams, or a
team key and the same user's own key, count once in min_tenants and in s.
``min_tenants: 1`` is the plain consecutive-failure breaker (a
deployment with a single tenant). Failures a request causes by its own content (a 400, a
context window, litellm's repeated-chunk stop) never reach ``failure``: the backend answered.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

from prometheus_client import CollectorRegistry, Counter, Gauge

# Who provoked a failed attempt (``UpstreamFailure.cause``, gateway/provider/failures.py).
from gateway.provider.failures import AMBIGUOUS, BACKEND, REQUEST  # noqa: F401 - re-exported


def principal_groups(principals: list[str]) -> list[int]:
    """For each principal (``a|b|...``: the identities it is), the index of its group:
    principals sharing any identity, directly or through others, are one client."""
    parent = list(range(len(principals)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, p in enumerate(principals):
        for ident in p.split("|"):
            j = owner.setdefault(ident, i)
            parent[root(i)] = root(j)
    return [root(i) for i in range(len(principals))]


def count_clients(principals: list[str]) -> int:
    """How many distinct clients ``principals`` are (``principal_groups``)."""
    return len(set(principal_groups(principals)))


class State(IntEnum):
    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


@dataclass
class _Breaker:
    state: State = State.CLOSED
    proven: int = 0  # the backend's own failures since the last success
    by_tenant: dict[str, int] = field(default_factory=dict)  # others', per tenant (C1)
    opened_at: float = 0.0
    probes: int = 0  # probes in flight while half-open


class CircuitBreakers:
    """One breaker per backend name, created on first use."""

    def __init__(self, failure_threshold: int = 5, cooldown_s: float = 30.0,
                 half_open_probes: int = 1, registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.monotonic, min_tenants: int = 1) -> None:
        self.failure_threshold = failure_threshold
        self.min_tenants = min_tenants
        self.tenant_share = math.ceil(failure_threshold / min_tenants)  # s of (C1)
        self.cooldown_s = cooldown_s
        self.half_open_probes = half_open_probes
        self._clock = clock
        self._breakers: dict[str, _Breaker] = {}
        r = registry if registry is not None else CollectorRegistry()
        self._gauge = Gauge("tollgate_circuit_state",
                            "Circuit breaker state per backend: 0 closed, 1 half-open, 2 open.",
                            ["model"], registry=r)
        self._transitions = Counter("tollgate_circuit_transitions",
                                    "Circuit breaker state changes per backend and new state.",
                                    ["model", "state"], registry=r)

    def _get(self, name: str) -> _Breaker:
        b = self._breakers.get(name)
        if b is None:
            b = self._breakers[name] = _Breaker()
            self._gauge.labels(name).set(State.CLOSED)
        return b

    def _move(self, name: str, b: _Breaker, state: State) -> None:
        if b.state != state:
            b.state = state
            self._gauge.labels(name).set(state)
            self._transitions.labels(name, state.name.lower()).inc()

    def state(self, name: str) -> State:
        b = self._get(name)
        if b.state == State.OPEN and self._clock() - b.opened_at >= self.cooldown_s:
            return State.HALF_OPEN  # what the next allow() would see
        return b.state

    def allow(self, name: str) -> bool:
        """May a request go to ``name`` now? Takes a probe slot when half-open."""
        b = self._get(name)
        if b.state == State.OPEN:
            if self._clock() - b.opened_at < self.cooldown_s:
                return False
            self._move(name, b, State.HALF_OPEN)
            b.probes, b.opened_at = 0, self._clock()
        if b.state == State.HALF_OPEN:
            if b.probes >= self.half_open_probes:
                if self._clock() - b.opened_at < self.cooldown_s:
                    return False
                b.probes, b.opened_at = 0, self._clock()  # a probe never reported back
            b.probes += 1
        return True

    def release(self, name: str) -> None:
        """Give back a probe slot taken by ``allow`` when no request was sent after all."""
        b = self._get(name)
        if b.state == State.HALF_OPEN and b.probes > 0:
            b.probes -= 1

    def success(self, name: str) -> None:
        b = self._get(name)
        b.proven, b.by_tenant = 0, {}
        b.probes = 0
        self._move(name, b, State.CLOSED)

    def evidence(self, name: str) -> int:
        """E of (C1): the failures that count towards opening ``name``."""
        b = self._get(name)
        per_client: dict[int, int] = {}
        names = list(b.by_tenant)
        for group, who in zip(principal_groups(names), names, strict=True):
            per_client[group] = per_client.get(group, 0) + b.by_tenant[who]
        return b.proven + sum(min(n, self.tenant_share) for n in per_client.values())

    def failure(self, name: str, tenant: str | None = None) -> None:
        """A failed attempt on ``name``: the backend's own (``tenant`` None) or one met by
        ``tenant``'s request (module docstring)."""
        b = self._get(name)
        if tenant is None:
            b.proven += 1
        else:
            b.by_tenant[tenant] = b.by_tenant.get(tenant, 0) + 1
        if b.state == State.HALF_OPEN:
            if tenant is None or count_clients(list(b.by_tenant)) >= self.min_tenants:
                self._open(name, b)
            elif b.probes > 0:
                b.probes -= 1  # not enough to reopen: another request may probe
            return
        if (b.state == State.CLOSED and self.evidence(name) >= self.failure_threshold
                and (b.proven > 0 or count_clients(list(b.by_tenant)) >= self.min_tenants)):
            self._open(name, b)

    def _open(self, name: str, b: _Breaker) -> None:
        b.opened_at = self._clock()
        b.probes = 0
        b.proven, b.by_tenant = 0, {}
        self._move(name, b, State.OPEN)
