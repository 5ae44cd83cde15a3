"""The category and single-frontier diagnostics and within-category AUDC, by hand.

Two categories, two models: "cheap" (cost 1) and "dear" (cost 2).
- category a: cheap is right on every prompt, dear too → a category router sends a to cheap.
- category b: cheap is always wrong, dear always right → b goes to dear once λ is small.
A router that only knows the category is then perfect here; inside each category there is
nothing left to route, so its within-category AUDC equals each category's best single line.
"""

from __future__ import annotations

import numpy as np
import pytest

from router_core.baselines import category_router, single_frontier
from router_core.baselines.category import category_means
from router_core.evaluation.metrics import within_category_audc
from router_core.evaluation.runner import EvalResult

LAMS = np.array([0.0, 0.1, 10.0])
C_NORM = np.array([0.5, 1.0])  # cheap, dear


def test_category_means_fall_back_to_the_pooled_mean_for_unobserved_models():
    q = np.array([[1.0, np.nan], [0.0, 1.0], [1.0, 0.0]])
    means = category_means(q, np.array(["a", "b", "b"]))
    # a never observed "dear": its pooled training mean (1 + 0) / 2 stands in
    assert means["a"].tolist() == [1.0, 0.5]
    assert means["b"].tolist() == [0.5, 0.5]


def test_category_router_sends_each_category_to_its_best_trade_off():
    q_train = np.array([[1.0, 1.0], [1.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    cats = np.array(["a", "a", "b", "b"])
    test_cats = np.array(["b", "a", "z"])  # z: unseen in training → pooled means (0.5, 1)
    ch = category_router(q_train, cats, test_cats, C_NORM, LAMS)
    # λ=0: b→dear, a→cheap (tie at 1.0 → cheaper), z→dear (1 > 0.5)
    assert ch[0].tolist() == [1, 0, 1]
    # λ=0.1: b: 0 − .05 vs 1 − .1 → dear; z: .5 − .05 = .45 vs .9 → dear
    assert ch[1].tolist() == [1, 0, 1]
    # λ=10: everything to cheap
    assert ch[2].tolist() == [0, 0, 0]


def test_single_frontier_uses_one_model_per_lambda():
    q_train = np.array([[1.0, 1.0], [0.0, 1.0]])  # means cheap .5, dear 1
    ch = single_frontier(q_train, C_NORM, 3, np.array([0.0, 0.9, 1.1]))
    # λ=.9: .5 − .45 = .05 vs 1 − .9 = .1 → dear; λ=1.1: −.05 vs −.1 → cheap
    assert ch.tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 0]]


def test_within_category_audc_by_hand():
    # 4 test prompts: a, a, b, b; costs cheap 1, dear 3.
    quality = np.array([[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    cost = np.array([[1.0, 3.0]] * 4)
    cats = np.array(["a", "a", "b", "b"])
    # a router that takes dear on prompt 1 only (the one where cheap fails), cheap elsewhere
    chosen = np.array([[0, 1, 0, 0]])
    mean, per = within_category_audc(chosen, quality, cost, cats)
    # category a: cheapest model point (1, .5), router point (2, 1.0); C_max = 3.
    # curve (1,.5) → (2,1), flat to 3: area 1·(.5+1)/2 + 1·1 = 1.75, over 3 − 1 → .875
    assert per["a"] == pytest.approx(0.875)
    # category b: router (1, 0) = the cheapest point; dear gets 0.5 at cost 3 but the router
    # never takes it: the curve is flat at 0 → AUDC 0
    assert per["b"] == pytest.approx(0.0)
    assert mean == pytest.approx((2 * 0.875 + 2 * 0.0) / 4)


def test_table_and_json_mark_learned_routers_that_do_not_beat_the_diagnostics():
    from router_core.evaluation.metrics import CurveMetrics, Reference

    def m(a: float) -> CurveMetrics:
        return CurveMetrics(np.zeros((1, 2)), np.zeros((1, 2)), a, a, None, 0.0)

    res = EvalResult(
        dataset="toy",
        split="standard",
        n_test=4,
        metrics={"category": m(0.8), "single_frontier": m(0.7), "mlp": m(0.75), "knn": m(0.9)},
        reference=Reference(1.0, 0.5, 3.0, 1.0, 3.0),
        delta_audc_ci=None,
        best_baseline="knn",
        lams=LAMS,
        audc_within={"category": 0.6, "single_frontier": 0.6, "mlp": 0.65, "knn": 0.6},
    )
    assert res.below_diagnostics("mlp") == ["category"]
    assert res.below_diagnostics("knn") == ["category(within)", "single_frontier(within)"]
    assert res.below_diagnostics("category") == []  # a diagnostic is not judged
    doc = res.to_json()
    assert doc["routers"]["mlp"]["audc_within"] == 0.65
    assert doc["routers"]["mlp"]["below"] == ["category"]
    line = next(x for x in res.table().splitlines() if x.startswith("mlp "))
    assert line.endswith("category") and "0.6500" in line
