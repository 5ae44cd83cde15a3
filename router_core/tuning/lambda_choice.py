"""Choosing a route's λ on validation prompts from the router's own quality estimates.

A deployment's pool has no recorded outcomes, but the router predicts p̂_h(x) for every
backend. On validation prompts X (never test rows), for each λ of a grid, the rule picks
h_λ(x); its expected quality is mean_x p̂_{h_λ(x)}(x) and its expected cost mean_x c_{h_λ(x)}.
The QNC point of the route is the largest λ (the cheapest routing) whose expected quality
stays within ``drop`` of the strongest single backend's, max_h mean_x p̂_h(x):

    λ* = max { λ : E[p̂_{h_λ}] ≥ max_h E[p̂_h] − drop }

Example::

    Q = router.project(encoder.encode(val_prompts))
    lam = lambda_within(router, Q, costs_usd={"gpt-4o": 0.004, ...}, drop=0.01)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from router_core.runtime.router import Router

LAMBDA_GRID = np.concatenate([[0.0], np.geomspace(1e-3, 10.0, 121)])


@dataclass(frozen=True)
class RoutePoint:
    lam: float
    quality: float  # mean p̂ of the chosen backend
    cost_usd: float  # mean cost of the chosen backend
    best_quality: float  # the strongest single backend's mean p̂
    best_cost_usd: float  # ... and its cost

    @property
    def saving(self) -> float:
        """Share of the strongest backend's cost saved."""
        return 1.0 - self.cost_usd / self.best_cost_usd if self.best_cost_usd > 0 else 0.0


def expected_points(
    router: Router,
    Q: np.ndarray,
    costs_usd: Mapping[str, float],
    lams: np.ndarray,
    allowed: Collection[str] | None = None,
) -> list[RoutePoint]:
    """Expected quality and cost of the route at each λ over the query vectors ``Q``.

    ``costs_usd`` prices the route's pool (c̃ divides by its dearest, as the gateway does);
    ``allowed`` (default: all of them) are the experts the choice is made among and the
    strongest is taken from (e.g. without backends on a cold-start prior)."""
    sub = router
    for n in router.model_names:
        if n not in costs_usd:
            sub = sub.without_expert(n)
    P = sub.quality_estimates(Q)
    cost = np.array([costs_usd[n] for n in sub.model_names])
    mean = P.mean(axis=0)
    ok = np.array([allowed is None or n in allowed for n in sub.model_names])
    best = int(np.argmax(np.where(ok, mean, -np.inf)))
    idx = sub.route_batch(Q, lams, costs_usd=dict(costs_usd), allowed=allowed)
    rows = np.arange(len(Q))
    return [
        RoutePoint(
            lam=float(lam),
            quality=float(P[rows, idx[i]].mean()),
            cost_usd=float(cost[idx[i]].mean()),
            best_quality=float(P[:, best].mean()),
            best_cost_usd=float(cost[best]),
        )
        for i, lam in enumerate(lams)
    ]


def lambda_within(
    router: Router,
    Q: np.ndarray,
    costs_usd: Mapping[str, float],
    drop: float = 0.01,
    lams: np.ndarray = LAMBDA_GRID,
    allowed: Collection[str] | None = None,
) -> RoutePoint:
    """The cheapest-routing grid point whose expected quality is within ``drop`` of the
    strongest backend's (λ = 0's point when none is)."""
    points = expected_points(router, Q, costs_usd, lams, allowed)
    ok = [p for p in points if p.quality >= p.best_quality - drop]
    return max(ok, key=lambda p: p.lam) if ok else points[0]
