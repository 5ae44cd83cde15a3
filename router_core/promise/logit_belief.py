"""A Gaussian belief over a backend's readout θ = (w, b), in the router's runtime form.

The router estimates p̂_h(x) = σ(a_h·(q·e_h) + b_h) = σ(w_h·q + b_h) with w_h = a_h·e_h.
A backend known only by a prior, or by a prior and a few judged outcomes, gets a belief

    θ ~ N(θ̂, Σ),   z(x) = θ·x̃,  x̃ = (q, 1),   Var z(x) = x̃ᵀ Σ x̃

whose per-prompt logit variance becomes the Beta pseudo-count n(x) (router_core.promise.
belief). A prior is isotropic, Σ₀ = s²·I, with s² set so that n(x) = n₀ at the prior's mean
level p̄ (q is a unit vector, so x̃ᵀx̃ = 2):

    s² = 1 / (2 · p̄(1 − p̄) · (n₀ + 1))

Refinement (router_core.promise.refine) is the Laplace posterior: the MAP readout with θ₀ as
its mean and Σ = (Σ₀⁻¹ + Σ_i J_i x̃_i x̃_iᵀ)⁻¹, so n(x) grows where outcomes were observed and
stays at the prior's where they were not. The gateway keeps Σ's Cholesky factor L (Σ = L Lᵀ):
Var z(x) = ‖Lᵀ x̃‖², one (d+1)² product per backend and request.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from router_core.promise.belief import logit_var_for_count, pseudo_count_from_logit_var


@dataclass(frozen=True)
class LogitBelief:
    """θ̂ = (w, b) and the Cholesky factor of Σ; ``how`` says how it is known."""

    w: np.ndarray  # (d,) readout weights a·e
    b: float
    chol: np.ndarray  # (d+1, d+1) lower-triangular L, Σ = L Lᵀ
    how: str = "prior"  # "prior:aggregate", "prior:price", "refined:<n>"
    n_outcomes: int = 0
    level: float = 0.5  # p̄ the prior was placed at (its aggregate figure)

    @classmethod
    def prior(cls, w: np.ndarray, b: float, level: float, n0: float, how: str) -> LogitBelief:
        """Isotropic prior worth n₀ outcomes at its level p̄ (module docstring)."""
        w = np.asarray(w, dtype=float)
        s2 = logit_var_for_count(level, n0) / 2.0
        chol = np.sqrt(s2) * np.eye(len(w) + 1)
        return cls(w=w, b=float(b), chol=chol, how=how, level=float(level))

    @property
    def theta(self) -> np.ndarray:
        return np.append(self.w, self.b)

    @property
    def cov(self) -> np.ndarray:
        return self.chol @ self.chol.T

    def runtime_form(self) -> tuple[np.ndarray, float, float]:
        """(e, a, b) with p̂ = σ(a·(q·e) + b): what ``Router.with_expert`` takes."""
        a = float(np.linalg.norm(self.w))
        e = self.w / a if a > 1e-12 else np.eye(len(self.w))[0]
        return e.astype(np.float32), a, self.b

    def logits(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, variance) of z(x) for query vectors Q (n, d)."""
        Q = np.atleast_2d(np.asarray(Q, dtype=float))
        mean = Q @ self.w + self.b
        Xt = np.hstack([Q, np.ones((len(Q), 1))])
        var = np.sum((Xt @ self.chol) ** 2, axis=1)  # ‖Lᵀx̃‖²
        return mean, var

    def estimate(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(p̂, n) per query: p̂ = σ(z̄), n from Var z (router_core.promise.belief)."""
        mean, var = self.logits(Q)
        p = 1.0 / (1.0 + np.exp(-mean))
        return p, pseudo_count_from_logit_var(p, var)


@dataclass(frozen=True)
class TrainedBelief:
    """A trained expert: the router's calibrated p̂ with one pseudo-count n for every prompt
    (router_core.promise.trained measures it on validation prompts)."""

    w: np.ndarray
    b: float
    n: float
    how: str = "trained"

    def estimate(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = np.atleast_2d(np.asarray(Q, dtype=float)) @ self.w + self.b
        p = 1.0 / (1.0 + np.exp(-z))
        return p, np.full_like(p, self.n)


def router_weights(router, names=None) -> tuple[np.ndarray, np.ndarray]:
    """(W (m, d), b (m,)) of a ``Router``'s experts: w_h = a_h·e_h, in ``names`` order."""
    names = tuple(names or router.model_names)
    cal = router.calibration
    by = {e.name: e for e in router.experts}
    W = np.stack([cal.a.get(n, cal.a0) * np.asarray(by[n].descriptor, float) for n in names])
    b = np.array([cal.b.get(n, cal.b0) for n in names], dtype=float)
    return W, b


def stack_estimates(beliefs, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, N), each (n, m): every belief's estimate for the queries Q, in order."""
    pairs = [bl.estimate(Q) for bl in beliefs]
    return np.stack([p for p, _ in pairs], axis=1), np.stack([n for _, n in pairs], axis=1)
