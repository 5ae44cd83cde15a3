"""Refining a belief from judged outcomes whose judge is right with probability α.

A judge that grades an answer correctly with probability α reports "good" with probability

    P(x) = ε + (1 − 2ε)·σ(θ·x̃),   ε = 1 − α

(a symmetric label-noise link). The refined readout is the MAP estimate under the current
belief N(θ₀, Σ₀) (the prior as its mean, router_core.cold_start's readout generalised to a
Gaussian prior and a noisy judge), from k_i "good" verdicts out of c_i judgements per prompt:

    θ̂ = argmin_θ  −Σ_i [k_i log P_i + (c_i − k_i) log(1 − P_i)] + ½ (θ − θ₀)ᵀ Σ₀⁻¹ (θ − θ₀)

and its Laplace covariance Σ = (Σ₀⁻¹ + Σ_i c_i J_i f̃_i f̃_iᵀ)⁻¹ with the expected information

    J_i = ((1 − 2ε) p_i (1 − p_i))² / (P_i (1 − P_i)),

which is (1 − 2ε)² = 0.36 of a clean outcome's at α = 0.8 and p = ½: a noisy judge's
verdict is worth about a third of a known outcome, and the pseudo-count grows accordingly.
Repeated verdicts on one prompt enter as their DARS aggregate (``judged_counts``: per
(prompt, backend) the mean q̄ and count c, so k = q̄·c), never as independent prompts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

import numpy as np

from router_core.promise.logit_belief import LogitBelief


def _noisy_p(z: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    p = 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))
    return p, eps + (1.0 - 2.0 * eps) * p


def refine(
    belief: LogitBelief,
    Q: np.ndarray,
    good: np.ndarray,
    count: np.ndarray,
    accuracy: float = 1.0,
) -> LogitBelief:
    """The Laplace posterior after ``good[i]`` of ``count[i]`` judged-good verdicts on
    query ``Q[i]`` (module docstring); ``accuracy`` α of the judge (1 = exact outcomes)."""
    from scipy.linalg import cho_factor, cho_solve, solve_triangular
    from scipy.optimize import minimize

    k = np.asarray(good, dtype=float)
    c = np.asarray(count, dtype=float)
    ok = c > 0
    if not ok.any():
        return belief
    X = belief.features(np.atleast_2d(np.asarray(Q, dtype=float))[ok])
    k, c = k[ok], c[ok]
    eps = float(np.clip(1.0 - accuracy, 0.0, 0.49))
    theta0 = belief.theta
    # Σ₀⁻¹ from the Cholesky factor: Σ₀⁻¹ = L⁻ᵀ L⁻¹
    Linv = solve_triangular(belief.chol, np.eye(len(theta0)), lower=True)
    prec0 = Linv.T @ Linv

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        p, P = _noisy_p(X @ theta, eps)
        P = np.clip(P, 1e-12, 1 - 1e-12)
        nll = -np.sum(k * np.log(P) + (c - k) * np.log1p(-P))
        dP = (1.0 - 2.0 * eps) * p * (1.0 - p)
        gz = dP * ((c - k) / (1.0 - P) - k / P)
        d = theta - theta0
        return float(nll + 0.5 * d @ prec0 @ d), X.T @ gz + prec0 @ d

    theta = minimize(f, theta0, jac=True, method="L-BFGS-B").x
    p, P = _noisy_p(X @ theta, eps)
    J = c * ((1.0 - 2.0 * eps) * p * (1.0 - p)) ** 2 / np.clip(P * (1.0 - P), 1e-12, None)
    H = prec0 + (X * J[:, None]).T @ X
    cf = cho_factor(H, lower=True)
    cov = cho_solve(cf, np.eye(len(theta)))
    chol = np.linalg.cholesky(0.5 * (cov + cov.T))
    n = belief.n_outcomes + int(c.sum())
    return replace(belief, coef=theta[:-1], b=float(theta[-1]), chol=chol,
                   how=f"refined:{n}", n_outcomes=n)  # fmt: skip


def _deviances(belief: LogitBelief, Q: np.ndarray, k: np.ndarray, c: np.ndarray,
               eps: float) -> np.ndarray:
    """−[k log P + (c − k) log(1 − P)] per prompt under the belief's mean, noisy link."""
    _, P = _noisy_p(belief.features(Q) @ belief.theta, eps)
    P = np.clip(P, 1e-12, 1 - 1e-12)
    return -(k * np.log(P) + (c - k) * np.log1p(-P))


def validated_refine(
    belief: LogitBelief,
    Q: np.ndarray,
    good: np.ndarray,
    count: np.ndarray,
    accuracy: float = 1.0,
    folds: int = 2,
    seed: int = 0,
    min_z: float = 0.0,
) -> LogitBelief:
    """``refine``, kept only if it predicts verdicts it was not fitted on better than the
    belief it started from: with the prompts split in ``folds``, the refined readouts'
    held-out deviance must be below the starting belief's,

        G = Σ_f [dev(belief, fold_f) − dev(refine(belief, rest_f), fold_f)] > min_z·se(G)

    (se(G) = √n·sd of the per-prompt terms; ``min_z`` 0: any gain) otherwise the belief is
    kept (its count of seen verdicts updated). The Laplace posterior
    knows how well the readout's coefficients are pinned, not whether the readout family
    fits the backend; where it does not, noisy verdicts would only reshape the prior at
    random and tighten its bounds around the wrong shape."""
    k = np.asarray(good, dtype=float)
    c = np.asarray(count, dtype=float)
    Q = np.atleast_2d(np.asarray(Q, dtype=float))
    eps = float(np.clip(1.0 - accuracy, 0.0, 0.49))
    fold = np.random.default_rng(seed).permutation(len(c)) % folds
    gains = np.zeros(len(c))
    for f in range(folds):
        fit, held = fold != f, fold == f
        if not held.any() or not fit.any():
            return belief
        part = refine(belief, Q[fit], k[fit], c[fit], accuracy)
        gains[held] = (_deviances(belief, Q[held], k[held], c[held], eps)
                       - _deviances(part, Q[held], k[held], c[held], eps))
    se = float(np.sqrt(len(gains)) * gains.std(ddof=1)) if len(gains) > 1 else 0.0
    if gains.sum() > max(min_z * se, 0.0):
        return refine(belief, Q, k, c, accuracy)
    return replace(belief, n_outcomes=belief.n_outcomes + int(c.sum()),
                   how=f"{belief.how.split(' ')[0]} (not moved by {int(c.sum())} verdicts)")


def judged_counts(
    verdicts: Iterable[Mapping], backend: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt keys, k, c) of one backend from judged verdicts, DARS-aggregated.

    ``verdicts``: rows ``{prompt_key, model, quality}`` (quality = the judge's grade in
    [0, 1]; ``cost`` optional). Per (prompt, backend) the mean grade q̄ and count c
    (router_core.training.supervision.aggregate), so k = q̄·c good verdicts of c.
    """
    from router_core.training.supervision import aggregate

    rows = [dict(v, cost=v.get("cost", np.nan)) for v in verdicts if v["model"] == backend]
    if not rows:
        return np.array([], dtype=object), np.zeros(0), np.zeros(0)
    agg = aggregate(rows, models=[backend])
    c = agg.count[:, 0].astype(float)
    return agg.prompt_keys, np.nan_to_num(agg.mean_quality[:, 0]) * c, c
