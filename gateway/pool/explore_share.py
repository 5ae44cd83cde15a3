"""On a λ route, the traffic a backend gets while it is on its cold-start prior is bounded.

A prior is a guess; under the λ rule (a = p̂ − λ·c̃, no promise to keep) nothing else bounds
what a guess costs the answers, so until outcomes confirm it a λ route sends a prior backend at
most ``routes.NAME.explore_share`` of its λ-decided requests (default 0.05): before routing, a
prior backend already chosen for that share of them (counting this one) is left out of the
candidates, so it is a candidate from the first request on and its share stays within
``explore_share`` plus one request. Counts are per gateway process (each replica keeps its own
share).

A route with a promise is never capped (gateway/serving/plan/planning.py ``deployable``): a cap
there would take the reference away once it had its share (the route then promised against a
stand-in) and hand each frontier backend a fixed share however its p̂ stood. There a backend
known only by a prior gets live traffic only where the promise rule finds it within the
promise, and learns the rest from shadow calls on the operator's exploration budget
(gateway/learning/shadow.py); ``explore_share`` is accepted there and ignored (the startup
block says so when it is set).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping


class PriorShare:
    """Routed requests per route, and how many of them each prior backend was chosen for."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.routed: Counter[str] = Counter()
        self.chosen: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def over(self, route: str, priors: Iterable[str], share: float) -> set[str]:
        """The prior backends that would exceed ``share`` of ``route`` if chosen now."""
        with self._lock:
            limit = share * (self.routed[route] + 1)
            return {b for b in priors if self.chosen[route][b] >= limit}

    def record(self, route: str, chosen: str | None, on_prior: bool) -> None:
        with self._lock:
            self.routed[route] += 1
            if chosen is not None and on_prior:
                self.chosen[route][chosen] += 1

    def share(self, route: str, backend: str) -> float:
        with self._lock:
            n = self.routed[route]
            return self.chosen[route][backend] / n if n else 0.0


def cap_priors(share: PriorShare, route: str, explore_share: float, priors: Collection[str],
               by_expert: Mapping[str, str]) -> dict[str, str]:
    """``by_expert`` (expert -> backend) without the backends on a prior (their expert in
    ``priors``) that have had their share of ``route`` (all of it when nothing else would be
    left)."""
    on_prior = [b for expert, b in by_expert.items() if expert in priors]
    over = share.over(route, on_prior, explore_share)
    kept = {e: b for e, b in by_expert.items() if b not in over}
    return kept or dict(by_expert)
