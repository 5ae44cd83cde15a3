"""A pool is built with its promise routes' belief stacks (``Pool.warmed``): the first request
after startup or a hot swap ranks on them instead of building them on the event loop."""

from __future__ import annotations

import numpy as np

from gateway.config import DEFAULT_CONFIG_PATH, load_settings
from gateway.pool import build_pool
from gateway.pool import pool as pool_module
from gateway.pricing import resolve_prices
from gateway.serving.plan.promise_routing import promise_route
from router_core.artifact import load_router


def test_the_first_promise_decision_builds_no_belief_stack(monkeypatch) -> None:
    settings = load_settings(DEFAULT_CONFIG_PATH)
    pool = build_pool(settings, resolve_prices(settings), load_router(None))
    assert pool.promises, "the packaged config has promise routes"
    built = []

    class Counting(pool_module.BeliefStack):
        def __init__(self, beliefs) -> None:
            built.append(len(beliefs))
            super().__init__(beliefs)

    monkeypatch.setattr(pool_module, "BeliefStack", Counting)
    dim = pool.router.head.layers[0][0].shape[1]
    phi = np.random.default_rng(0).normal(size=(1, dim)).astype(np.float32)
    for route, promise in pool.promises.items():
        by_rm = pool.deployable(route)
        costs = {b: pool.prices[b].cost(500, 256) for b in by_rm.values()}
        routed = promise_route(pool, promise, phi, by_rm, costs, None, max(costs.values()))
        assert routed.decision.chosen in by_rm
    assert built == []
    # a request that narrows the set (a tenant's allowed-list) still gets one, built lazily
    route, promise = next(iter(pool.promises.items()))
    by_rm = dict(list(pool.deployable(route).items())[:2])
    costs = {b: pool.prices[b].cost(500, 256) for b in by_rm.values()}
    promise_route(pool, promise, phi, by_rm, costs, None, max(costs.values()))
    assert built
