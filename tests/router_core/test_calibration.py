"""Calibration p̂ = σ(a_h s + b_h): recovers known slopes, pools, places unseen models."""

from __future__ import annotations

import numpy as np

from router_core.tuning.calibration_fit import fit_calibration


def _data(n: int = 4000, seed: int = 0):
    rng = np.random.default_rng(seed)
    a, b = np.array([8.0, 3.0]), np.array([-1.0, 0.5])
    s = rng.uniform(-0.5, 0.5, size=(n, 2))
    p = 1 / (1 + np.exp(-(a * s + b)))
    y = (rng.random((n, 2)) < p).astype(float)
    return s, y, a, b


def test_per_model_logistic_recovers_the_generating_parameters():
    s, y, a, b = _data()
    cal = fit_calibration(s, y, ["m0", "m1"], c=1e4)
    for i, m in enumerate(["m0", "m1"]):
        assert abs(cal.a[m] - a[i]) < 0.15 * a[i] + 0.3
        assert abs(cal.b[m] - b[i]) < 0.15
    # pooled fit sits between the two slopes; unknown models fall back to it
    assert min(a) - 1 < cal.a0 < max(a) + 1
    assert np.isclose(cal("new-model", 0.0), 1 / (1 + np.exp(-cal.b0)))


def test_soft_labels_and_missing_cells():
    s, y, _, _ = _data(n=1000)
    soft = 0.5 * y + 0.25
    soft[:10, 0] = np.nan
    cal = fit_calibration(s, soft, ["m0", "m1"])
    assert np.isfinite([cal.a["m0"], cal.b["m0"], cal.a0, cal.b0]).all()
    assert cal("m0", 0.4) > cal("m0", -0.4)


def test_unseen_models_are_placed_by_their_level():
    s, y, _, _ = _data()
    level = np.array([0.3, 0.6, 0.9])
    s3 = np.concatenate([s, np.zeros((len(s), 1))], axis=1)
    y3 = np.concatenate([y, np.full((len(s), 1), np.nan)], axis=1)
    cal = fit_calibration(s3, y3, ["m0", "m1", "new"], fit_models=["m0", "m1"], level=level)
    assert "new" in cal.a  # placed, not left to the pooled fallback
    weak = fit_calibration(
        s3, y3, ["m0", "m1", "new"], fit_models=["m0", "m1"], level=np.array([0.3, 0.6, 0.1])
    )
    assert cal("new", 0.0) > weak("new", 0.0)  # a stronger probe record → higher p̂
