"""Pseudo-counts measured, not assumed: how many outcomes each kind of estimate is worth.

Trained expert (its calibrated p̂ on validation prompts, outcomes y): with equal-count bins
of p̂, the squared gap between a bin's outcome rate ȳ_b and its mean estimate p̄_b, less the
binomial noise of the bin, is the estimate's own error; the Beta view's variance matched to
it gives

    n = mean p̂(1 − p̂) / max(mean_b[(ȳ_b − p̄_b)² − p̄_b(1 − p̄_b)/|b|], ε) − 1

clipped to [N_MIN, outcomes seen]. A well calibrated expert earns a large n, a badly
calibrated one a small n.

Aggregate prior (n₀): each trained expert is placed by ``prior_from_aggregate`` among the
others from its own aggregate figure, exactly as a new backend would be; on validation prompts
its prior p̂ is compared with its trained p̂ (the best per-prompt truth available), and the
pooled squared gap gives

    n₀ = mean p̂_prior(1 − p̂_prior) / mean (p̂_prior − p̂_trained)² − 1

clipped to [N_MIN, N0_MAX]: as many outcomes as a prior placed this way is really worth.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from router_core.promise.priors import prior_from_aggregate

N_MIN = 1.0
N0_MAX = 100.0
BINS = 10


def trained_pseudo_count(p_val: np.ndarray, y_val: np.ndarray, bins: int = BINS) -> float:
    """n of one trained expert from its validation calibration (module docstring)."""
    p = np.asarray(p_val, dtype=float)
    y = np.asarray(y_val, dtype=float)
    ok = np.isfinite(p) & np.isfinite(y)
    p, y = p[ok], y[ok]
    if len(p) < 2 * bins:
        return N_MIN
    order = np.argsort(p, kind="stable")
    excess = []
    for idx in np.array_split(order, bins):
        pb, yb = p[idx].mean(), y[idx].mean()
        excess.append((yb - pb) ** 2 - pb * (1 - pb) / len(idx))
    err = max(float(np.mean(excess)), 1e-4)
    n = float(np.mean(p * (1 - p))) / err - 1.0
    return float(np.clip(n, N_MIN, len(p)))


def aggregate_prior_pseudo_count(
    W: np.ndarray,
    b: np.ndarray,
    agg: np.ndarray,
    Q_ref: np.ndarray,
    Q_val: np.ndarray,
) -> float:
    """n₀ by placing each trained expert among the others (module docstring).

    Args:
        W, b: (m, d), (m,) the trained experts' readouts; agg: (m,) their aggregate figures.
        Q_ref: prompts the prior's level is matched on; Q_val: prompts the gap is measured on.
    """
    agg = np.asarray(agg, float)
    return placed_prior_pseudo_count(W, b, dict(enumerate(agg)), agg, Q_ref, Q_val)


def placed_prior_pseudo_count(
    W: np.ndarray,
    b: np.ndarray,
    placed: Mapping[int, float],
    levels: np.ndarray,
    Q_ref: np.ndarray,
    Q_val: np.ndarray,
) -> float:
    """n₀ (module docstring) from placing each expert h of ``placed`` at the figure
    ``placed[h]`` among all the other experts at their ``levels``.

    Args:
        W, b: (m, d), (m,) the trained experts' readouts; levels: (m,) their figures as
            neighbours; placed: index of an expert to place → the figure it is placed from.
        Q_ref: prompts the prior's level is matched on; Q_val: prompts the gap is measured on.
    """
    W, b, levels = np.asarray(W, float), np.asarray(b, float), np.asarray(levels, float)
    Qv = np.atleast_2d(np.asarray(Q_val, dtype=float))
    num, den = [], []
    for h, target in placed.items():
        rest = np.arange(len(levels)) != h
        if rest.sum() < 1:
            continue
        prior = prior_from_aggregate(target, W[rest], b[rest], levels[rest], Q_ref, n0=N_MIN)
        p_prior, _ = prior.estimate(Qv)
        p_true = 1.0 / (1.0 + np.exp(-(Qv @ W[h] + b[h])))
        num.append(np.mean(p_prior * (1 - p_prior)))
        den.append(np.mean((p_prior - p_true) ** 2))
    if not den:
        return N_MIN
    n0 = float(np.mean(num)) / max(float(np.mean(den)), 1e-6) - 1.0
    return float(np.clip(n0, N_MIN, N0_MAX))
