"""A cold-start prior's level, corrected by judged verdicts its shape refit did not earn.

``validated_refine`` (router_core.promise.refine) moves a prior's whole readout, k basis
coefficients and its intercept, only when the refit predicts held-out verdicts better than
the prior did. With a noisy judge that bar is rarely cleared by the shape, and the level went
down with it: a price prior at mean p̂ 0.67 over RouterBench's test prompts, for a backend
right 60% of the time there, was "not moved by 400 verdicts" in the live loop
(bench/routing/live_promise.py). The level is one number, which those verdicts do pin: the
shift δ of the prior's logit is the MAP under the same noisy-judge link,

    δ̂ = argmin_δ  −Σ_i [k_i log P_i(δ) + (c_i − k_i) log(1 − P_i(δ))] + δ² / (2 σ̄²)
    P_i(δ) = ε + (1 − 2ε)·σ(z̄_i + δ),   ε = 1 − α,   σ̄² = mean_i Var z(x_i)

(k_i of c_i verdicts good on prompt i, z̄_i and Var z the prior's logit mean and variance
there: the prior's own uncertainty is what δ may move by before the verdicts are heard). The
belief keeps its covariance: its level is corrected, its shape is no better known, so the
promise rule gains no confidence from the correction.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from router_core.promise import LogitBelief

MAX_SHIFT = 10.0  # logits: a bound for the search, far past any level p̂ ∈ (0.0001, 0.9999)


def level_corrected(belief: LogitBelief, Q: np.ndarray, good: np.ndarray, count: np.ndarray,
                    accuracy: float) -> LogitBelief:
    """``belief`` with its intercept moved by δ̂ (module docstring); unchanged without
    verdicts."""
    k = np.asarray(good, dtype=float)
    c = np.asarray(count, dtype=float)
    if not len(c) or c.sum() <= 0:
        return belief
    z, var = belief.logits(np.atleast_2d(np.asarray(Q, dtype=float)))
    prior_var = max(float(np.mean(var)), 1e-6)
    eps = float(np.clip(1.0 - accuracy, 0.0, 0.49))

    def objective(delta: float) -> float:
        P = eps + (1.0 - 2.0 * eps) / (1.0 + np.exp(-np.clip(z + delta, -30, 30)))
        P = np.clip(P, 1e-12, 1 - 1e-12)
        nll = -np.sum(k * np.log(P) + (c - k) * np.log1p(-P))
        return float(nll + 0.5 * delta**2 / prior_var)

    from scipy.optimize import minimize_scalar  # here: serving never imports scipy

    delta = float(minimize_scalar(objective, bounds=(-MAX_SHIFT, MAX_SHIFT),
                                  method="bounded").x)
    return replace(belief, b=belief.b + delta)
