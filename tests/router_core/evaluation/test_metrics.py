"""Metrics match values computed by hand on small curves (docs/evaluation.md definitions)."""

from __future__ import annotations

import numpy as np
import pytest

from router_core.evaluation.metrics import (
    Reference,
    audc,
    bootstrap_delta_audc,
    bootstrap_delta_within_audc,
    deferral_curve,
    evaluate_choices,
    overpayment_rate,
    pareto_frontier,
    peak,
    qnc,
)

POINTS = np.array([[1.0, 0.5], [2.0, 0.8], [3.0, 0.7], [4.0, 0.9]])
CHEAP = (0.5, 0.3)


def test_frontier_drops_dominated_points_and_adds_the_cheapest_model():
    curve = deferral_curve(POINTS, CHEAP)
    assert curve.tolist() == [[0.5, 0.3], [1.0, 0.5], [2.0, 0.8], [4.0, 0.9]]
    # duplicates and equal-cost points keep only the best one
    f = pareto_frontier(np.array([[1.0, 0.2], [1.0, 0.4], [1.0, 0.4], [2.0, 0.4]]))
    assert f.tolist() == [[1.0, 0.4]]


def test_audc_by_hand():
    curve = deferral_curve(POINTS, CHEAP)
    # trapezoids 0.5·0.4 + 1·0.65 + 2·0.85, then flat 0.9 from 4 to 5: 3.45 over 4.5
    assert audc(curve, 0.5, 5.0) == pytest.approx(3.45 / 4.5)
    # only part of the curve inside the window: [1.5, 3] → (0.5·0.725 + 1·0.825)/1.5
    assert audc(curve, 1.5, 3.0) == pytest.approx((0.5 * 0.725 + 1.0 * 0.825) / 1.5)


def test_audc_of_a_flat_curve_is_its_height():
    curve = deferral_curve(np.array([[0.5, 0.3]]), CHEAP)
    assert audc(curve, 0.5, 5.0) == pytest.approx(0.3)


def test_peak_and_qnc_by_hand():
    curve = deferral_curve(POINTS, CHEAP)
    assert peak(curve) == 0.9
    # q* = 0.85 is reached halfway between (2, 0.8) and (4, 0.9): cost 3, over c* = 4
    assert qnc(curve, 0.85, 4.0) == pytest.approx(0.75)
    assert qnc(curve, 0.3, 4.0) == pytest.approx(0.125)  # already at the first vertex
    assert qnc(curve, 0.8, 4.0) == pytest.approx(0.5)  # exactly at a vertex
    assert qnc(curve, 0.95, 4.0) is None  # never reached


def test_overpayment_by_hand():
    quality = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    cost = np.tile([1.0, 2.0, 3.0], (3, 1))
    # row 0: correct, the cheaper model 0 was correct too → overpaid; rows 1, 2: no
    assert overpayment_rate(np.array([1, 1, 0]), quality, cost) == pytest.approx(1 / 3)
    # row 0 wrong; row 1 correct but model 1 was cheaper and correct; row 2 wrong
    assert overpayment_rate(np.array([2, 2, 1]), quality, cost) == pytest.approx(1 / 3)
    # cheapest correct model everywhere (the oracle) never overpays
    assert overpayment_rate(np.array([0, 1, 0]), quality, cost) == 0.0
    # graded quality: within δ of the best counts as correct
    q = np.array([[0.9, 0.89, 0.5]])
    assert overpayment_rate(np.array([0]), q, np.array([[2.0, 1.0, 0.5]]), delta=0.02) == 1.0
    assert overpayment_rate(np.array([0]), q, np.array([[2.0, 1.0, 0.5]]), delta=0.0) == 0.0


def test_reference_and_evaluate_choices_by_hand():
    # 4 queries, 3 models with costs 1, 2, 4 and known outcomes.
    quality = np.array([[0, 1, 1], [1, 1, 1], [0, 0, 1], [0, 1, 1]], dtype=float)
    cost = np.tile([1.0, 2.0, 4.0], (4, 1))
    ref = Reference.from_matrices(quality, cost)
    assert (ref.c_min, ref.q_cheapest, ref.c_max) == (1.0, 0.25, 4.0)
    assert (ref.q_best, ref.c_best) == (1.0, 4.0)
    # λ grid of two settings: all model 2 (cost 4, quality 1) and the oracle
    oracle = np.array([1, 0, 2, 1])  # cost (2+1+4+2)/4 = 2.25, quality 1
    chosen = np.stack([np.full(4, 2), oracle])
    m = evaluate_choices(chosen, quality, cost, ref)
    assert m.points.tolist() == [[4.0, 1.0], [2.25, 1.0]]
    assert m.curve.tolist() == [[1.0, 0.25], [2.25, 1.0]]
    # area: (1.25·(0.25+1)/2 + 1.75·1)/3
    assert m.audc == pytest.approx((1.25 * 0.625 + 1.75) / 3.0)
    assert m.peak == 1.0
    assert m.qnc == pytest.approx(2.25 / 4.0)
    # model 2 everywhere overpays on the 3 queries with a cheaper correct model; oracle never
    assert m.overpay == pytest.approx((3 / 4 + 0) / 2)


def test_bootstrap_ci_is_paired_deterministic_and_signed():
    rng = np.random.default_rng(0)
    n = 300
    quality = (rng.random((n, 3)) < [0.4, 0.6, 0.8]).astype(float)
    cost = np.tile([1.0, 2.0, 4.0], (n, 1))
    oracle_like = np.where(quality[:, 0] == 1, 0, np.where(quality[:, 1] == 1, 1, 2))[None, :]
    cheap = np.zeros((1, n), dtype=int)
    lo, hi = bootstrap_delta_audc(oracle_like, cheap, quality, cost, n_boot=200, seed=1)
    assert 0 < lo < hi
    assert (lo, hi) == bootstrap_delta_audc(oracle_like, cheap, quality, cost, n_boot=200, seed=1)
    same = bootstrap_delta_audc(cheap, cheap, quality, cost, n_boot=50)
    assert same == (0.0, 0.0)


def test_within_category_bootstrap_sees_only_what_a_router_knows_inside_categories():
    rng = np.random.default_rng(0)
    n = 300
    category = np.array(["easy", "hard"] * (n // 2))
    hard = category == "hard"
    p = np.where(hard[:, None], [0.1, 0.3, 0.8], [0.7, 0.8, 0.9])
    quality = (rng.random((n, 3)) < p).astype(float)
    cost = np.tile([1.0, 2.0, 4.0], (n, 1))
    oracle_like = np.where(quality[:, 0] == 1, 0, np.where(quality[:, 1] == 1, 1, 2))[None, :]
    by_category = np.where(hard, 2, 0)[None, :]  # told the category, blind to the prompt
    lo, hi = bootstrap_delta_within_audc(oracle_like, by_category, quality, cost, category,
                                         n_boot=200, seed=1)
    assert 0 < lo < hi
    assert bootstrap_delta_within_audc(by_category, by_category, quality, cost, category,
                                       n_boot=50) == (0.0, 0.0)
    # one category: the stratified bootstrap is the pooled one (same draws)
    one = np.array(["all"] * n)
    assert bootstrap_delta_within_audc(oracle_like, by_category, quality, cost, one,
                                       n_boot=100, seed=3) == bootstrap_delta_audc(
        oracle_like, by_category, quality, cost, n_boot=100, seed=3)
