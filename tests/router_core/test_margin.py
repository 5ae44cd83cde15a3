"""The margin of a routing decision (router_core/runtime/margin.py) and the cascade's threshold."""

from __future__ import annotations

import numpy as np

from router_core.runtime.decision import decide
from router_core.runtime.margin import decision_margin, promise_margin, rule_margins
from router_core.tuning.cascade_fit import choose_threshold


def _scored(score, cost, delta=0.02):
    """A Decision whose candidates carry these scores (λ = 0: quality = score)."""
    return decide([f"m{i}" for i in range(len(score))], similarity=np.zeros(len(score)),
                  quality=np.asarray(score, float), cost=np.asarray(cost, float), lam=0.0,
                  delta=delta)


def test_the_margin_is_the_smallest_score_change_that_flips_the_decision():
    # m0 best and dearest; m1 within δ of it and cheaper: m1 wins, m2 is cheapest, outside E
    d = _scored([0.80, 0.79, 0.70], [1.0, 0.5, 0.1], delta=0.02)
    assert d.chosen == "m1"
    margin = decision_margin(d)
    # m1 leaves E if it falls 0.01 more; m2 enters E if it rises 0.08
    assert np.isclose(margin, 0.01)
    # the flip happens just past the margin, not before
    assert _scored([0.80, 0.79 - 0.009, 0.70], [1.0, 0.5, 0.1]).chosen == "m1"
    assert _scored([0.80, 0.79 - 0.011, 0.70], [1.0, 0.5, 0.1]).chosen == "m0"


def test_a_cheaper_candidate_close_to_entering_sets_the_margin():
    d = _scored([0.90, 0.875, 0.50], [1.0, 0.2, 0.1], delta=0.02)
    assert d.chosen == "m0"  # m1 is 0.025 below: outside δ
    assert np.isclose(decision_margin(d), 0.005)
    assert decision_margin(_scored([0.5], [1.0])) == float("inf")


def test_batched_margins_equal_the_single_decision_ones():
    rng = np.random.default_rng(0)
    score, cost = rng.uniform(size=(50, 4)), rng.uniform(size=(50, 4))
    picks, singles = [], []
    for s, c in zip(score, cost):
        d = _scored(s, c)
        picks.append(int(d.chosen[1:]))
        singles.append(decision_margin(d))
    np.testing.assert_allclose(rule_margins(score, cost, np.array(picks), 0.02), singles)


def test_the_promise_margin():
    drop, cost = np.array([0.0, 0.03, 0.045, 0.2]), np.array([1.0, 0.5, 0.2, 0.1])
    # τ = 0.05: E = {ref 0, 1, 2}; the cheapest of E is 2 (drop 0.045): 0.005 from leaving,
    # 3 (cheaper) is 0.15 from entering
    assert np.isclose(promise_margin(drop, cost, chosen=2, ref=0, tolerance=0.05), 0.005)
    assert promise_margin(drop[:1], cost[:1], chosen=0, ref=0, tolerance=0.05) == float("inf")


def test_the_threshold_is_the_smallest_that_keeps_the_agreement():
    margin = np.array([0.5, 0.4, 0.3, 0.2, 0.1, np.inf])
    same = np.array([True, True, False, True, False, True])
    assert choose_threshold(margin, same, 1.0) == 0.4  # 0.3 is wrong: it must go to MiniLM
    assert choose_threshold(margin, same, 0.8) == 0.2  # one wrong of six is allowed
    assert choose_threshold(margin, same, 0.5) == 0.0  # everything stays static
    # where the encoders agree, no threshold is needed, however large the margins (large λ)
    assert choose_threshold(margin + 8.0, np.ones(6, bool), 0.99) == 0.0
    never = choose_threshold(margin[:5], np.zeros(5, bool), 1.0)
    assert never > 0.5  # nothing can be trusted: every finite margin falls below it
