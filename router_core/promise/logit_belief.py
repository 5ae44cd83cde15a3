"""A Gaussian belief over a backend's readout, in the router's runtime form.

The router estimates p̂_h(x) = σ(a_h·(q·e_h) + b_h) = σ(w_h·q + b_h) with w_h = a_h·e_h.
A backend known by a prior, or a prior and a few judged outcomes, gets a readout on a basis
B (k, d) of directions, the known experts' readouts w_h by default (its capability
neighbours span what it can learn, k ≈ 10 coefficients instead of d ≈ 200, so a few hundred
noisy verdicts can move it without overfitting), with a Gaussian belief on θ = (α, b):

    w = Bᵀα,   z(x) = α·f(x) + b,   f(x) = B q,   θ ~ N(θ̂, Σ),   Var z(x) = f̃ᵀ Σ f̃,  f̃ = (f, 1)

whose per-prompt logit variance becomes the Beta pseudo-count n(x) (router_core.promise.
belief). A prior is isotropic, Σ₀ = s²·I, with s² set so that n(x) = n₀ on average over
reference prompts at the prior's level p̄:

    s² = 1 / (p̄(1 − p̄) · (n₀ + 1) · mean_x ‖f̃(x)‖²)

except along its level, which the aggregate figure pins (``LogitBelief.prior``'s
``level_count``).

Refinement (router_core.promise.refine) is the Laplace posterior: the MAP readout with θ₀ as
its mean and Σ = (Σ₀⁻¹ + Σ_i J_i f̃_i f̃_iᵀ)⁻¹, so n(x) grows where outcomes were observed and
stays at the prior's where they were not. At serving time p̂ is the usual σ(w·q + b) and
Var z(x) = ‖Lᵀ f̃‖² with Σ = L Lᵀ: a (k+1)² product per backend and request.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from router_core.promise.belief import logit_var_for_count, pseudo_count_from_logit_var


@dataclass(frozen=True)
class LogitBelief:
    """θ̂ = (α, b), the basis and the Cholesky factor of Σ; ``how`` says how it is known."""

    coef: np.ndarray  # (k,) α, coefficients on the basis
    b: float
    chol: np.ndarray  # (k+1, k+1) lower-triangular L, Σ = L Lᵀ
    basis: np.ndarray | None = None  # (k, d) B; None = the head's own coordinates (B = I)
    how: str = "prior"  # "prior:aggregate", "prior:price", "refined:<n>"
    n_outcomes: int = 0
    level: float = 0.5  # p̄ the prior was placed at (its aggregate figure)
    n_cap: float = np.inf  # what a fully trained expert is worth: no readout is known better

    @classmethod
    def prior(cls, coef: np.ndarray, b: float, level: float, n0: float, how: str,
              basis: np.ndarray | None = None, Q_ref: np.ndarray | None = None,
              level_count: float | None = None) -> LogitBelief:
        """Prior worth n₀ outcomes per prompt at its level p̄ on average over ``Q_ref``
        (module docstring; without Q_ref, unit queries in the head's coordinates).

        ``level_count``: how many outcomes the aggregate figure was measured on (N_A). Its
        mean is then known far better than any prompt: the mean logit over the reference
        prompts, f̄·θ, gets the precision of N_A outcomes,

            Σ₀⁻¹ = I/s² + N_A p̄(1 − p̄) · f̄ f̄ᵀ,   f̄ = mean_x f̃(x),

        with s² re-solved so that mean_x Var z(x) still matches n₀. Refinement then reshapes
        the prior across prompts but hardly moves its level, which a few hundred noisy
        verdicts know worse than the published figure does."""
        coef = np.asarray(coef, dtype=float)
        k1 = len(coef) + 1
        target = logit_var_for_count(level, n0)
        if Q_ref is None:
            s2 = target / 2.0
            return cls(coef=coef, b=float(b), chol=np.sqrt(s2) * np.eye(k1), basis=basis,
                       how=how, level=float(level))  # fmt: skip
        Q_ref = np.atleast_2d(np.asarray(Q_ref, dtype=float))
        F = Q_ref if basis is None else Q_ref @ np.asarray(basis, float).T
        F = np.hstack([F, np.ones((len(F), 1))])
        if not level_count:
            s2 = target / float(np.mean(np.sum(F**2, axis=1)))
            return cls(coef=coef, b=float(b), chol=np.sqrt(s2) * np.eye(k1), basis=basis,
                       how=how, level=float(level))  # fmt: skip
        fbar = F.mean(axis=0)
        tight = float(level_count) * max(level * (1.0 - level), 1e-6) * np.outer(fbar, fbar)

        def cov(log_s2: float) -> np.ndarray:
            return np.linalg.inv(np.eye(k1) / np.exp(log_s2) + tight)

        lo, hi = np.log(target) - 20.0, np.log(target) + 20.0
        for _ in range(60):  # mean Var z is increasing in s²: bisection on log s²
            mid = 0.5 * (lo + hi)
            if float(np.mean(np.sum((F @ cov(mid)) * F, axis=1))) < target:
                lo = mid
            else:
                hi = mid
        S = cov(0.5 * (lo + hi))
        chol = np.linalg.cholesky(0.5 * (S + S.T))
        return cls(coef=coef, b=float(b), chol=chol, basis=basis, how=how, level=float(level))

    @property
    def w(self) -> np.ndarray:
        """(d,) readout weights a·e in the head's space: Bᵀα."""
        return self.coef if self.basis is None else np.asarray(self.basis).T @ self.coef

    @property
    def theta(self) -> np.ndarray:
        return np.append(self.coef, self.b)

    def features(self, Q: np.ndarray) -> np.ndarray:
        """f̃(x) = (B q, 1) for each query: (n, k+1)."""
        Q = np.atleast_2d(np.asarray(Q, dtype=float))
        F = Q if self.basis is None else Q @ np.asarray(self.basis).T
        return np.hstack([F, np.ones((len(Q), 1))])

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
        Ft = self.features(Q)
        mean = Ft @ self.theta
        var = np.sum((Ft @ self.chol) ** 2, axis=1)  # ‖Lᵀf̃‖²
        return mean, var

    def estimate(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(p̂, n) per query: p̂ = σ(z̄), n from Var z (router_core.promise.belief), capped:

            1/(n + 1) = 1/(n_Laplace + 1) + 1/(n_cap + 1)

        the Laplace variance says how well the readout's parameters are known, not how
        well the readout family fits the backend: a belief with unlimited outcomes is worth
        what a trained expert is worth (``n_cap``), no more."""
        mean, var = self.logits(Q)
        p = 1.0 / (1.0 + np.exp(-mean))
        n = pseudo_count_from_logit_var(p, var)
        return p, 1.0 / (1.0 / (n + 1.0) + 1.0 / (self.n_cap + 1.0)) - 1.0


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
    """(W (m, d), b (m,)) of a ``Router``'s experts: w_h = a_h·e_h, in ``names`` order (all
    of them when None; none, W of shape (0, d), when ``names`` is empty)."""
    names = tuple(router.model_names if names is None else names)
    cal = router.calibration
    by = {e.name: e for e in router.experts}
    d = len(router.experts[0].descriptor) if router.experts else 0
    W = np.stack([cal.a.get(n, cal.a0) * np.asarray(by[n].descriptor, float) for n in names]
                 ) if names else np.zeros((0, d))
    b = np.array([cal.b.get(n, cal.b0) for n in names], dtype=float)
    return W, b


def stack_estimates(beliefs, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, N), each (n, m): every belief's estimate for the queries Q, in order."""
    pairs = [bl.estimate(Q) for bl in beliefs]
    return np.stack([p for p, _ in pairs], axis=1), np.stack([n for _, n in pairs], axis=1)
