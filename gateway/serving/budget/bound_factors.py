"""What a provider's miscount costs: the operator, never the tenant (issue 35's policy).

A reservation bounds a request's cost (gateway/pricing.py); a provider may still report more:
special tokens an embedding model adds per input, a document it read by reference, an output
cap it ignored, or a plain bug. The policy:

- the tenant is charged at most what was reserved, so its hard budget holds by construction
  and a miscount never locks it out (gateway/serving/record/outcome.py, gateway/store/ledger.py);
- the excess is the operator's: counted in ``tollgate_overrun_usd_total{backend}``, written in
  the request's log row (its answering attempt's ``overrun_usd``) and shown on the dashboard;
- the backend's bound is widened from what it reported: its factor

      f_h ← min(ABSURD_FACTOR, f_h · r),  r = reported tokens / bound tokens (largest side), (B1)

  multiplies its later reservations (and the bounds usage is clamped to), so a backend that
  counts a few tokens more than the bytes bound is reserved for what it really bills;
- a report past ``ABSURD_FACTOR`` × the base bound (r·f_h > 10) is not a miscount but a
  broken upstream: the excess is counted only up to ``ABSURD_FACTOR`` × the bound, and once
  requests of ``HOLD_OUT_PRINCIPALS`` different principals (tenants, or a team-less key's
  user) met such reports within ``HOLD_OUT_S``, the backend is held out of new requests for
  ``HOLD_OUT_S``, logged as an error. Before that, it is held out for the principals that met
  such a report (their own loss is bounded) but not for everyone (as with the circuit
  breakers): a request's own shape (a tiny ``max_tokens`` a provider ignores) could otherwise
  take a backend away from every tenant.

State of this process (each replica learns its own); a restart forgets it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gateway.errors import GatewayError
from gateway.pricing import Price
from gateway.reliability.circuit import count_clients

log = logging.getLogger(__name__)

ABSURD_FACTOR = 10.0  # a report past 10× the bound is not believed as a bill
HOLD_OUT_S = 600.0  # how long a backend that reported an absurd usage is left out
HOLD_OUT_PRINCIPALS = 2  # distinct principals whose requests met absurd reports


@dataclass
class BoundFactors:
    """Per-backend reservation factors (B1) and backends held out, in this process."""

    clock: Callable[[], float] = time.monotonic
    _factors: dict[str, float] = field(default_factory=dict)
    _held_until: dict[str, float] = field(default_factory=dict)
    _absurd_seen: dict[str, dict[str, float]] = field(default_factory=dict)  # backend: who, when

    def factor(self, backend: str) -> float:
        """f_h ≥ 1: how much wider than the byte bound ``backend``'s reservations are."""
        return self._factors.get(backend, 1.0)

    def held_out(self, backend: str, principal: str | None = None) -> bool:
        """Whether ``backend`` is held out: for everyone, or for ``principal`` alone once its
        own requests met an absurd report less than ``HOLD_OUT_S`` ago."""
        if principal is not None:  # met by this client, under any of its identities
            now = self.clock()
            mine = set(principal.split("|"))
            if any(now - t < HOLD_OUT_S and mine & set(p.split("|"))
                   for p, t in self._absurd_seen.get(backend, {}).items()):
                return True
        until = self._held_until.get(backend)
        if until is None:
            return False
        if self.clock() >= until:
            del self._held_until[backend]
            return False
        return True

    def reported(self, backend: str, ratio: float, principal: str = "") -> str:
        """Learn from a report ``ratio`` × the (already widened) bound, on a request of
        ``principal``: "within", "widened" (f_h grew, B1), "absurd" (f_h at its cap) or
        "held out" (absurd for ``HOLD_OUT_PRINCIPALS`` principals)."""
        if not ratio > 1.0:  # also NaN
            return "within"
        f = self.factor(backend)
        if ratio * f > ABSURD_FACTOR:
            self._factors[backend] = ABSURD_FACTOR
            now = self.clock()
            seen = {p: t for p, t in self._absurd_seen.get(backend, {}).items()
                    if now - t < HOLD_OUT_S}
            seen[principal] = now
            self._absurd_seen[backend] = seen
            if count_clients(list(seen)) < HOLD_OUT_PRINCIPALS:
                log.error("backend %s reported usage %.3g× its reservation bound (over %g×); "
                          "the excess is the operator's", backend, ratio * f, ABSURD_FACTOR)
                return "absurd"
            self._held_until[backend] = now + HOLD_OUT_S
            log.error("backend %s reported usage %.3g× its reservation bound (over %g×) to %d "
                      "principals: held out of new requests for %gs; the excess is the "
                      "operator's", backend, ratio * f, ABSURD_FACTOR, count_clients(list(seen)),
                      HOLD_OUT_S)
            return "held out"
        self._factors[backend] = min(ABSURD_FACTOR, f * ratio)
        log.warning("backend %s reported usage %.3g× its reservation bound: its later "
                    "reservations are %.3g× the bound; the excess is the operator's",
                    backend, ratio, self._factors[backend])
        return "widened"


def held_out_error(name: str) -> GatewayError:
    """The 503 for a request whose only candidates are held out."""
    return GatewayError(503, f"backend {name!r} is held out: it reported usage past 10x its "
                        "reservation bound (gateway/serving/budget/bound_factors.py)", "upstream_error",
                        code="upstream_unavailable")


def widened_price(price: Price, factor: float) -> Price:
    """``price`` with every rate × ``factor``: what a reservation holds on a backend whose
    bound was widened (B1). Settled at the real price, never this one."""
    if factor <= 1.0:
        return price
    return replace(price, input_per_token=price.input_per_token * factor,
                   output_per_token=price.output_per_token * factor,
                   above=tuple((t, i * factor, o * factor) for t, i, o in price.above),
                   model=None)


def widened(tokens: int, factor: float) -> int:
    """A token bound × ``factor``, rounded up."""
    return tokens if factor <= 1.0 else math.ceil(tokens * factor)


def report_ratio(reported: tuple[int | None, int | None], bound: tuple[int, int]) -> float:
    """r of (B1): the larger of reported/bound over prompt and completion (a side not
    reported, or of bound 0 with nothing reported, counts 0)."""
    r = 0.0
    for got, most in zip(reported, bound, strict=True):
        if got is None or got <= 0:
            continue
        r = max(r, got / most if most > 0 else math.inf)
    return r
