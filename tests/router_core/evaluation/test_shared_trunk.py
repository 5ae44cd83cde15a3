"""SharedTrunkNet: calibrated probabilities on a synthetic case with known P(correct)."""

from __future__ import annotations

import numpy as np

from router_core.baselines.shared_trunk import SharedTrunkNet


def _synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two models: P(correct) = σ(3·x0) and σ(−3·x0 + 1); a third of model 1's cells unseen."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    p = 1.0 / (1.0 + np.exp(-np.stack([3 * X[:, 0], -3 * X[:, 0] + 1.0], axis=1)))
    Y = (rng.random(p.shape) < p).astype(np.float64)
    return X, Y, p


def test_probabilities_are_calibrated_and_track_the_true_ones():
    X, Y, _ = _synthetic(3000, 0)
    Y[::3, 1] = np.nan  # masked cells do not enter the loss
    Xv, Yv, _ = _synthetic(600, 1)
    net = SharedTrunkNet(n_members=3, keep=2, seed=0).fit(X, Y, Xv, Yv)
    assert len(net.members) == 2 and net.val_losses == sorted(net.val_losses)
    Xt, _, pt = _synthetic(4000, 2)
    ph = net.predict(Xt)
    assert ph.shape == (4000, 2) and ((ph > 0) & (ph < 1)).all()
    # close to the true probability on every prompt, on average
    assert np.abs(ph - pt).mean() < 0.05
    # reliability: within each decile of p̂ the true mean probability is close to p̂'s
    for k in range(2):
        edges = np.quantile(ph[:, k], np.linspace(0, 1, 11))
        bins = np.clip(np.searchsorted(edges, ph[:, k], side="right") - 1, 0, 9)
        gaps = [abs(ph[bins == b, k].mean() - pt[bins == b, k].mean()) for b in range(10)]
        assert max(gaps) < 0.06, (k, gaps)


def test_seeded_and_holdout_when_no_validation_rows():
    X, Y, _ = _synthetic(500, 3)
    a = SharedTrunkNet(n_members=2, keep=1, epochs=50, seed=4).fit(X, Y).predict(X[:10])
    b = SharedTrunkNet(n_members=2, keep=1, epochs=50, seed=4).fit(X, Y).predict(X[:10])
    assert np.array_equal(a, b)
