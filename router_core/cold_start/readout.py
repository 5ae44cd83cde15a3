"""Probe readout: a model placed in the head's space by its own outcomes on the probes.

A model known only by its quality on the N probe prompts (an unseen model, or one added to
a running router and graded by a judge) can be described by its footprint (the outcomes,
normalised) and placed through the seen models' calibration; or it can get its own
direction: a logistic regression of its outcomes on the probes' query vectors q = g_θ(Φ(x)),

    p̂_h(x) = σ(w_h·q + b_h),   stored as   e_h = w_h/‖w_h‖,  a_h = ‖w_h‖,

which is the router's runtime form p̂_h = σ(a_h·(q·e_h) + b_h): the candidate search, the
calibration and the decision rule are unchanged, and nothing is retrained. On MMLU-Pro's
unseen-models dev folds it routed better than the footprint (router_core.training's record).

Example::

    Q = router.project(encoder.encode(list(probes.prompts)))   # (N, d)
    r = fit_readout(Q, outcomes)                                # outcomes: (N,) in [0, 1]
    router.with_expert(Expert(name, r.descriptor, cost), a=r.a, b=r.b)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from router_core.tuning.calibration_fit import fit_soft_logistic


@dataclass(frozen=True)
class Readout:
    descriptor: np.ndarray  # e_h, a unit vector of the head's output dimension
    a: float  # ‖w_h‖: the slope on s = q·e_h
    b: float  # intercept


def fit_readout(
    Q: np.ndarray, outcomes: np.ndarray, c: float = 1.0, prior: np.ndarray | None = None
) -> Readout | None:
    """Fit p̂ = σ(w·q + b) on (Q, outcomes); None when the outcomes carry no signal.

    Args:
        Q: (N, d) query vectors of the probes.
        outcomes: (N,) quality in [0, 1]; NaN = not observed. A fractional outcome u enters
            as a positive with weight u and a negative with weight 1 − u.
        c: inverse L2 strength (sklearn's ``C``).
        prior: w's prior mean w₀ (the penalty is ½‖w − w₀‖² instead of ½‖w‖²), e.g.
            a_h·e_h of a fingerprinted model: the outcomes then refine its fingerprint.
    """
    u = np.asarray(outcomes, dtype=float)
    ok = np.isfinite(u)
    if ok.sum() < 2 or u[ok].min() == u[ok].max():
        return None
    X = np.asarray(Q, dtype=float)[ok]
    if prior is None:
        w, b = fit_soft_logistic(X, u[ok], c)
    else:
        w, b = _fit_with_prior(X, u[ok], c, np.asarray(prior, dtype=float))
    norm = float(np.linalg.norm(w))
    if norm < 1e-9:
        return None
    return Readout(descriptor=(w / norm).astype(np.float32), a=norm, b=b)


def _fit_with_prior(
    X: np.ndarray, u: np.ndarray, c: float, w0: np.ndarray
) -> tuple[np.ndarray, float]:
    """min_w,b  C·Σ BCE(σ(w·x + b), u) + ½‖w − w₀‖²  (sklearn's scaling), by L-BFGS."""
    from scipy.optimize import minimize

    d = X.shape[1]

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:d], theta[d]
        z = X @ w + b
        p = 1.0 / (1.0 + np.exp(-z))
        loss = np.sum(np.logaddexp(0.0, z) - u * z)
        g = p - u
        dw = c * (X.T @ g) + (w - w0)
        return c * loss + 0.5 * float((w - w0) @ (w - w0)), np.append(dw, c * g.sum())

    m = float(np.clip(u.mean(), 1e-3, 1 - 1e-3))
    theta0 = np.append(w0, np.log(m / (1 - m)) - float(np.mean(X @ w0)))
    res = minimize(f, theta0, jac=True, method="L-BFGS-B")
    return res.x[:d], float(res.x[d])
