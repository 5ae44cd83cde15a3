"""λ on validation: the cheapest routing whose expected quality stays near the strongest."""

from __future__ import annotations

import numpy as np

from router_core.lambda_choice import expected_points, lambda_within
from router_core.router import Calibration, Expert, Head, Router


def _router(d: int = 4) -> Router:
    eye = np.eye(d, dtype=np.float32)
    experts = (Expert("cheap", eye[0], 0.1), Expert("mid", eye[1], 0.3), Expert("top", eye[2], 1.0))
    cal = Calibration(a={"cheap": 3.0, "mid": 3.0, "top": 1.0},
                      b={"cheap": -0.5, "mid": 0.5, "top": 2.0}, a0=1.0, b0=0.0)  # fmt: skip
    return Router("t", Head(((eye, np.zeros(d, np.float32)),)), experts, cal, k=0, delta=0.0)


def test_the_chosen_lambda_keeps_quality_within_the_drop_and_saves():
    router = _router()
    rng = np.random.default_rng(0)
    Q = rng.normal(size=(300, 4))
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    costs = {"cheap": 0.001, "mid": 0.003, "top": 0.01}
    tight = lambda_within(router, Q, costs, drop=0.01)
    loose = lambda_within(router, Q, costs, drop=0.05)
    assert tight.quality >= tight.best_quality - 0.01
    assert loose.quality >= loose.best_quality - 0.05
    assert loose.lam >= tight.lam and loose.cost_usd <= tight.cost_usd
    assert loose.saving > 0
    zero = expected_points(router, Q, costs, np.array([0.0]))[0]
    assert abs(zero.quality - zero.best_quality) < 0.02  # λ = 0 is quality first
