"""Whom a promise route's exploration judges beside its reference: the backend whose
certificate would save most (Thompson sampling, ``Evidence.partner`` of
router_core/promise/certify.py, as bench/routing/promise.py explores).

The route's certificate (gateway/learning/certify_routes.py) certifies only the backends that
have judged pairs against the reference. Exploration used to shadow the least known backend
first, and a trained backend counts as known (``shadow.judged_outcomes``), so on a route
served by its reference every shadow call went to the backends on priors, and the cheaper
trained ones never had a pair: in bench/routing/learning_loop.py only the two cold-start
backends were ever judged, and nothing else could be certified. Now a backend on its prior is
judged first until it has ``MIN_OUTCOMES`` outcomes (the count at which it leaves its prior,
gateway/learning/refine_priors.py: a wrong prior or claim is what routing can be wrong
about), and after that the route's partner is drawn from its judged pairs.

The counts are kept in memory per route, read once from the database on the route's first
exploration (``judged_pairs``) and added to as pairs are stored, in one region (the partner
is about which backend, not where; the certificate fits its regions itself).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gateway.learning.certify_routes import judged_pairs
from gateway.pool import Pool
from gateway.pool.priors import TYPICAL_TOKENS
from router_core.promise import JUDGE_ACCURACY
from router_core.promise.certify import Evidence


class RoutePartners:
    """Per promise route: its judged pairs counted (``Evidence``), and the next partner."""

    def __init__(self, engine: Any, seed: int | None = None) -> None:
        self.engine = engine
        self.rng = np.random.default_rng(seed)
        self._evidence: dict[tuple[str, tuple[str, ...], str], Evidence] = {}
        self._lock = threading.Lock()

    def _names(self, pool: Pool, route: str) -> tuple[str, ...]:
        return tuple(b for _, b in pool.route_experts.get(route, ()))

    def evidence(self, pool: Pool, route: str) -> Evidence | None:
        """The route's counted pairs (read from the database the first time), or None when
        the route has no promise or its reference is not one of its backends."""
        promise = pool.promises.get(route)
        names = self._names(pool, route)
        if promise is None or promise.reference not in names:
            return None
        key = (route, names, promise.reference)
        with self._lock:
            ev = self._evidence.get(key)
        if ev is not None:
            return ev
        pairs, _ = judged_pairs(self.engine, pool, route, promise.reference)
        ev = Evidence(1, len(names), names.index(promise.reference))
        rows = [p for p in pairs if p["backend"] in names]
        if rows:
            ev.add([0] * len(rows), [names.index(p["backend"]) for p in rows],
                   [p["reference_grade"] for p in rows], [p["grade"] for p in rows],
                   keys=[p["key"] for p in rows])
        with self._lock:
            return self._evidence.setdefault(key, ev)

    def add(self, pool: Pool, route: str, key: str, reference_grade: float,
            grades: Mapping[str, float]) -> None:
        """Count one request's pairs: the reference's grade beside each other backend's."""
        promise = pool.promises.get(route)
        names = self._names(pool, route)
        if promise is None:
            return
        with self._lock:
            ev = self._evidence.get((route, names, promise.reference))
            rows = [(names.index(b), g) for b, g in grades.items()
                    if b in names and b != promise.reference]
            if ev is not None and rows:
                ev.add([0] * len(rows), [h for h, _ in rows], [reference_grade] * len(rows),
                       [g for _, g in rows], keys=[key] * len(rows))

    def pick(self, pool: Pool, route: str, candidates: Sequence[str]) -> str | None:
        """The partner among ``candidates`` (backends of the route cheaper than its
        reference): each one's drop drawn from its pairs' posterior, its belief's drop
        (reference level − its level) worth a couple of pairs, the one whose certified share
        would save most; None when no candidate is cheaper or the route has no promise."""
        ev = self.evidence(pool, route)
        promise = pool.promises.get(route)
        if ev is None or promise is None:
            return None
        names = self._names(pool, route)
        ref = names[ev.ref]
        ref_usd = pool.prices[ref].cost(*TYPICAL_TOKENS) if ref in pool.prices else 0.0
        if ref_usd <= 0:
            return None
        savings = np.zeros(len(names))
        prior_drop = np.zeros(len(names))
        ref_q = pool.qualities.get(pool.expert_of(ref) or "")
        for i, b in enumerate(names):
            if b in candidates and b in pool.prices:
                savings[i] = 1.0 - pool.prices[b].cost(*TYPICAL_TOKENS) / ref_usd
            q = pool.qualities.get(pool.expert_of(b) or "")
            if q is not None and ref_q is not None:
                prior_drop[i] = ref_q.level - q.level
        if not (savings > 0).any():
            return None
        with self._lock:
            h = ev.partner(0, savings, promise.max_drop, JUDGE_ACCURACY, self.rng, prior_drop)
        return None if h == ev.ref or savings[h] <= 0 else names[h]
