"""λ on validation: the cheapest routing whose expected quality stays near the strongest."""

from __future__ import annotations

import numpy as np

from router_core.runtime.router import Calibration, Expert, Head, Router
from router_core.tuning.lambda_choice import expected_points, lambda_within


def _router(d: int = 4) -> Router:
    eye = np.eye(d, dtype=np.float32)
    experts = (Expert("cheap", eye[0], 0.1), Expert("mid", eye[1], 0.3), Expert("top", eye[2], 1.0))
    cal = Calibration(a={"cheap": 3.0, "mid": 3.0, "top": 1.0},
                      b={"cheap": -0.5, "mid": 0.5, "top": 2.0}, a0=1.0, b0=0.0)  # fmt: skip
    return Router("t", Head(((eye, np.zeros(d, np.float32)),)), experts, cal, k=0, delta=0.0)


COSTS = {"cheap": 0.001, "mid": 0.003, "top": 0.01}


def _queries(n: int, seed: int) -> np.ndarray:
    """``n`` random unit query vectors."""
    Q = np.random.default_rng(seed).normal(size=(n, 4))
    return Q / np.linalg.norm(Q, axis=1, keepdims=True)


def test_the_chosen_lambda_keeps_quality_within_the_drop_and_saves():
    router, Q, costs = _router(), _queries(300, seed=0), COSTS
    tight = lambda_within(router, Q, costs, drop=0.01)
    loose = lambda_within(router, Q, costs, drop=0.05)
    assert tight.quality >= tight.best_quality - 0.01
    assert loose.quality >= loose.best_quality - 0.05
    assert loose.lam >= tight.lam and loose.cost_usd <= tight.cost_usd
    assert loose.saving > 0
    zero = expected_points(router, Q, costs, np.array([0.0]))[0]
    assert abs(zero.quality - zero.best_quality) < 0.02  # λ = 0 is quality first


def test_costs_are_divided_by_the_dearest_expert_the_caller_prices():
    """λ means the same whatever else the artifact holds: c̃ is over the caller's pool."""
    router = _router()
    q = np.array([0.6, 0.8, 0.0, 0.0])
    pair = {"cheap": 0.001, "mid": 0.003}
    routed = router.route(q, 0.5, costs_usd=pair)  # top is not priced: not in the pool
    assert {c.model: c.cost for c in routed.candidates}["mid"] == 1.0
    alone = router.without_expert("top").route(q, 0.5, costs_usd=pair)
    assert routed.chosen == alone.chosen
    # the pool prices top too, but only cheap and mid may be chosen: c̃ over all three
    kept = router.route(q, 0.5, allowed={"cheap", "mid"}, costs_usd={**pair, "top": 0.01})
    assert {c.model: c.cost for c in kept.candidates}["mid"] == 0.3
    batch = router.route_batch(q[None], [0.5], allowed={"cheap", "mid"},
                               costs_usd={**pair, "top": 0.01})
    assert router.model_names[batch[0, 0]] == kept.chosen


def test_the_choice_can_leave_experts_out_but_keep_their_costs():
    router, Q, costs = _router(), _queries(200, seed=1), COSTS
    p = lambda_within(router, Q, costs, drop=0.01, allowed={"cheap", "mid"})
    pts = expected_points(router, Q, costs, np.array([p.lam]), allowed={"cheap", "mid"})
    assert pts[0].best_cost_usd in (0.001, 0.003)  # the strongest among the allowed
    assert p.quality >= p.best_quality - 0.01
