"""Priors for a backend with no outcomes: from one published aggregate figure, else price.

From an aggregate figure A (e.g. a leaderboard accuracy), among known experts h with their
own aggregate A_h and readout w_h = a_h·e_h:

    κ_h = exp(−(A − A_h)² / 2β²),   β = distance to the k-th closest A_h (k = 3), ≥ 0.01
    α   = κ / Σ_h κ_h,  w = Σ_h α_h w_h         (direction: its capability neighbours')
    b   : mean_x σ(w·q_x + b) = A over a reference set of prompts   (the level is A's)

so the prior routes on its neighbours' strengths and weaknesses at its own level, and the
known readouts w_h are the basis its refinement moves α on (router_core.promise.logit_belief).
The
bandwidth adapts to how densely the known figures lie, so no scale is fixed per benchmark.
Its uncertainty is a small pseudo-count n₀ (router_core.promise.trained measures it by
placing each trained expert this way among the others).

From a price alone (last resort): the neighbours are the known experts closest in
log-price, the level their weighted mean figure, and the pseudo-count is one outcome. With so
wide a belief the rule is conservative in the direction that keeps the promise by itself: as
a candidate its lower bound is low (an unknown cheap model is not assumed adequate), as a
reference its upper bound is high (an unknown reference is not assumed weak).
"""

from __future__ import annotations

import numpy as np

from router_core.promise.logit_belief import LogitBelief

NEIGHBOURS = 3  # the bandwidth is the distance to the k-th closest known figure
MIN_BANDWIDTH = 0.01
PRICE_PSEUDO_COUNT = 1.0


def closeness_weights(value: float, known: np.ndarray, k: int = NEIGHBOURS,
                      floor: float = MIN_BANDWIDTH) -> np.ndarray:
    """κ_h = exp(−(v − v_h)² / 2β²), β the k-th closest distance (≥ floor); sums to 1.
    No known value: no neighbours, an empty κ (a prior from it has no direction, only its
    level: a pool of one trained model beside one prior)."""
    d = np.abs(np.asarray(known, dtype=float).reshape(-1) - float(value))
    if not len(d):
        return d
    beta = max(float(np.sort(d)[min(k, len(d)) - 1]), floor)
    w = np.exp(-(d**2) / (2 * beta**2))
    return w / w.sum()


def level_intercept(w: np.ndarray, Q_ref: np.ndarray, target: float, b0: float = 0.0) -> float:
    """b with mean_x σ(w·q_x + b) = target over Q_ref (Newton on a monotone function)."""
    s = np.atleast_2d(np.asarray(Q_ref, dtype=float)) @ np.asarray(w, dtype=float)
    t = float(np.clip(target, 1e-4, 1 - 1e-4))
    b = float(b0)
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(s + b)))
        f, df = p.mean() - t, float((p * (1 - p)).mean())
        if abs(f) < 1e-7 or df < 1e-12:
            break
        b -= float(np.clip(f / df, -5.0, 5.0))
    return b


def prior_from_aggregate(
    aggregate: float,
    W_known: np.ndarray,
    b_known: np.ndarray,
    agg_known: np.ndarray,
    Q_ref: np.ndarray,
    n0: float,
    n_aggregate: float | None = None,
) -> LogitBelief:
    """The prior of a backend with aggregate figure ``aggregate`` (module docstring).

    Args:
        W_known, b_known: (m, d), (m,) known experts' readouts (``router_weights``).
        agg_known: (m,) their own aggregate figures, on the same scale as ``aggregate``.
        Q_ref: (n, d) query vectors of reference prompts the level is matched on.
        n0: the prior's pseudo-count.
        n_aggregate: how many outcomes the figure was measured on (a benchmark's size): its
            level is then held with that precision (``LogitBelief.prior``); None: not held.
    """
    kappa = closeness_weights(aggregate, agg_known)
    W = np.asarray(W_known, dtype=float)
    b = level_intercept(kappa @ W, Q_ref, aggregate, float(kappa @ b_known))
    return LogitBelief.prior(kappa, b, aggregate, n0, "prior:aggregate", W, Q_ref, n_aggregate)


def prior_from_price(
    usd: float,
    W_known: np.ndarray,
    b_known: np.ndarray,
    agg_known: np.ndarray,
    usd_known: np.ndarray,
    Q_ref: np.ndarray,
    n: float = PRICE_PSEUDO_COUNT,
) -> LogitBelief:
    """The prior of a backend known only by its price (module docstring)."""
    kappa = closeness_weights(np.log(max(usd, 1e-12)), np.log(np.clip(usd_known, 1e-12, None)),
                              floor=0.5)
    level = float(kappa @ np.asarray(agg_known, dtype=float))
    W = np.asarray(W_known, dtype=float)
    b = level_intercept(kappa @ W, Q_ref, level, float(kappa @ b_known))
    return LogitBelief.prior(kappa, b, level, n, "prior:price", W, Q_ref)
