"""The promotion guard's metrics and decision on hand-built routers (no training needed)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from router_core.data.table import RoutingTable
from router_core.evaluation.promotion import (
    decide_promotion,
    evaluate_on_holdout,
    route_points,
)
from router_core.runtime.router import Calibration, Expert, Head, Router


def _router(descriptors: np.ndarray, version: str) -> Router:
    head = Head(layers=((np.eye(2, dtype=np.float32), np.zeros(2, dtype=np.float32)),))
    experts = (
        Expert("cheap", descriptors[0].astype(np.float32), cost_usd=1.0),
        Expert("strong", descriptors[1].astype(np.float32), cost_usd=10.0),
    )
    cal = Calibration(a={}, b={}, a0=10.0, b0=-5.0)  # p̂ = σ(10 s − 5)
    return Router(version=version, head=head, experts=experts, calibration=cal, k=2, delta=0.0)


def _holdout() -> tuple[np.ndarray, RoutingTable]:
    # prompts near e_cheap are easy (cheap right), near e_strong only the strong model is right
    rng = np.random.default_rng(0)
    n = 40
    hard = np.arange(n) % 2 == 1
    phi = np.where(hard[:, None], [0.0, 1.0], [1.0, 0.0]) + 0.05 * rng.standard_normal((n, 2))
    phi /= np.linalg.norm(phi, axis=1, keepdims=True)
    quality = np.stack([np.where(hard, 0.0, 1.0), np.ones(n)], axis=1)
    table = RoutingTable(
        name="holdout",
        prompt_ids=np.array([f"p{i}" for i in range(n)], dtype=object),
        prompts=np.array([f"text {i}" for i in range(n)], dtype=object),
        models=("cheap", "strong"),
        quality=quality,
        cost=np.tile([1.0, 10.0], (n, 1)),
        split=np.array(["test"] * n, dtype=object),
    )
    return phi.astype(np.float32), table


def test_route_points_restrict_to_observed_models():
    phi, table = _holdout()
    good = _router(np.eye(2), "good")
    pts, n = route_points(good, phi, table, np.array([0.0]))
    assert n == 40
    # λ = 0: easy → cheap (p̂ ties at the top? no: cheap's similarity is higher), hard → strong
    assert pts[0] == pytest.approx([(20 * 1 + 20 * 10) / 40, 1.0])
    q = table.quality.copy()
    q[:, 1] = np.nan  # the strong model never observed: every prompt must go to cheap
    only_cheap = RoutingTable(**{**table.__dict__, "quality": q})
    pts2, _ = route_points(good, phi, only_cheap, np.array([0.0]))
    assert pts2[0] == pytest.approx([1.0, 0.5])


def test_a_worse_router_is_refused_and_a_good_one_promoted():
    phi, table = _holdout()
    good = _router(np.eye(2), "good")
    swapped = _router(np.eye(2)[::-1], "swapped")  # sends hard prompts to the cheap model
    s_good = evaluate_on_holdout(good, phi, table)
    s_bad = evaluate_on_holdout(swapped, phi, table)
    assert s_good.audc > s_bad.audc + 0.05
    refused = decide_promotion(swapped, good, phi, table, margin=0.01)
    assert not refused.promote and refused.reason.startswith("refused")
    accepted = decide_promotion(good, swapped, phi, table, margin=0.01)
    assert accepted.promote
    assert accepted.to_dict()["candidate"]["audc"] == pytest.approx(s_good.audc)
    assert decide_promotion(swapped, None, phi, table).promote  # first version: nothing to beat


def test_a_router_with_nan_parameters_is_refused_before_scoring():
    phi, table = _holdout()
    good = _router(np.eye(2), "good")
    broken = dataclasses.replace(
        good, version="nan", calibration=Calibration(a={"cheap": float("nan")}, b={}, a0=1, b0=0)
    )
    d = decide_promotion(broken, good, phi, table)
    assert not d.promote and "calibration" in d.reason
    assert not decide_promotion(broken, None, phi, table).promote
