"""Which layer of an LM's residual stream to route on: Fisher separability J ([Prefill]; docs/references.md).

For one layer's pooled states X (n, d) of the training prompts and the 0/1 outcomes Y
(n, m) of the m target models:

- Effective dimensionality, the participation ratio of the covariance eigenvalues σ_i:
  d_eff = (Σ σ_i)² / Σ σ_i².
- Anisotropy α: the mean pairwise cosine similarity of the (uncentred) state vectors,
  α = (‖Σ u_i‖² − n) / (n (n − 1)) with u_i = x_i / ‖x_i‖.
- Fisher separability on PCA-reduced features z (fit on these rows): per target k,
  J_k = Δμ_kᵀ (S_W,k + εI)⁻¹ Δμ_k with Δμ_k the difference of the class means of z and
  S_W,k the pooled within-class covariance; J is the mean of J_k over the targets with at
  least ``min_class`` prompts in each class. ε = 1e-3 · tr(S_W)/p keeps S_W invertible.

Paper 004 found J the most useful of the three for choosing the layer; d_eff and α are
reported beside it as descriptions. Everything here sees training rows only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class LayerGeometry:
    layer: int
    fisher_j: float
    d_eff: float
    anisotropy: float

    def to_dict(self) -> dict:
        return asdict(self)


def effective_dimensionality(X: np.ndarray) -> float:
    """d_eff = (Σσ)² / Σσ² of the covariance eigenvalues (from the singular values)."""
    Xc = np.asarray(X, dtype=np.float64) - np.mean(X, axis=0)
    s2 = np.linalg.svd(Xc, compute_uv=False) ** 2
    return float(s2.sum() ** 2 / max((s2**2).sum(), 1e-300))


def anisotropy(X: np.ndarray) -> float:
    """Mean pairwise cosine similarity of the rows (1: all alike, ~0: isotropic)."""
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    if n < 2:
        return 1.0
    U = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    s = U.sum(axis=0)
    return float((s @ s - n) / (n * (n - 1)))


def fisher_j(Z: np.ndarray, Y: np.ndarray, min_class: int = 5) -> float:
    """Mean over targets of J_k = Δμᵀ (S_W + εI)⁻¹ Δμ (NaN outcomes skipped)."""
    Z = np.asarray(Z, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64).reshape(len(Z), -1)
    scores = []
    for k in range(Y.shape[1]):
        seen = np.isfinite(Y[:, k])
        z, y = Z[seen], Y[seen, k] >= 0.5
        n1, n0 = int(y.sum()), int((~y).sum())
        if n1 < min_class or n0 < min_class:
            continue
        d = z[y].mean(axis=0) - z[~y].mean(axis=0)
        r1, r0 = z[y] - z[y].mean(axis=0), z[~y] - z[~y].mean(axis=0)
        sw = (r1.T @ r1 + r0.T @ r0) / (n1 + n0)
        eps = 1e-3 * np.trace(sw) / max(len(d), 1) + 1e-12
        scores.append(float(d @ np.linalg.solve(sw + eps * np.eye(len(d)), d)))
    return float(np.mean(scores)) if scores else float("nan")


def layer_geometry(
    states: np.ndarray,
    outcomes: np.ndarray,
    pca_dim: int = 100,
    max_rows: int = 1200,
    min_class: int = 5,
) -> list[LayerGeometry]:
    """J, d_eff and α of every layer of ``states`` (n, layers, d) on the given rows.

    ``max_rows``: a seeded subset of the rows when there are more (the SVDs grow with n).
    """
    states = np.asarray(states)
    outcomes = np.asarray(outcomes, dtype=np.float64)
    if len(states) > max_rows:
        keep = np.sort(np.random.default_rng(0).permutation(len(states))[:max_rows])
        states, outcomes = states[keep], outcomes[keep]
    out = []
    for layer in range(states.shape[1]):
        X = states[:, layer].astype(np.float64)
        U, S, _ = np.linalg.svd(X - X.mean(axis=0), full_matrices=False)  # one SVD for both
        p = min(pca_dim, len(S))
        s2 = S**2
        out.append(
            LayerGeometry(
                layer=layer,
                fisher_j=fisher_j(U[:, :p] * S[:p], outcomes, min_class),
                d_eff=float(s2.sum() ** 2 / max((s2**2).sum(), 1e-300)),
                anisotropy=anisotropy(X),
            )
        )
    return out


def best_layer(report: list[LayerGeometry]) -> int:
    """The layer of highest J (the earliest on a tie); NaN layers never win."""
    js = np.array([g.fisher_j for g in report], dtype=np.float64)
    if not np.isfinite(js).any():
        raise ValueError("no layer has a finite Fisher J: too few prompts of each outcome")
    return int(report[int(np.nanargmax(js))].layer)
