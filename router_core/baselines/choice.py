"""The choice rule every quality-predicting baseline shares with Tollgate's scale.

Per query and λ: h* = argmax_h (q̂_h − λ·c̃_h), ties to the cheaper model, with
c̃ = c / max(c) over the pool (the normalisation ``Router.normalised_costs`` uses).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# λ = 0 plus a log grid wide enough to go from "best predicted quality" to "cheapest".
DEFAULT_LAMBDAS = np.concatenate([[0.0], np.geomspace(1e-3, 1e3, 160)])


def normalised(cost: np.ndarray) -> np.ndarray:
    """c̃ = c / max(c) over the last axis (0 when every cost is 0)."""
    cost = np.asarray(cost, dtype=np.float64)
    top = cost.max(axis=-1, keepdims=True)
    return np.divide(cost, top, out=np.zeros_like(cost), where=top > 0)


def choose(q_hat: np.ndarray, c_norm: np.ndarray, lams: Sequence[float] | np.ndarray) -> np.ndarray:
    """(n, m) predicted quality, (m,) or (n, m) normalised cost → (L, n) model indices."""
    q_hat = np.asarray(q_hat, dtype=np.float64)
    c = np.broadcast_to(np.asarray(c_norm, dtype=np.float64), q_hat.shape)
    out = np.empty((len(lams), q_hat.shape[0]), dtype=np.int64)
    for i, lam in enumerate(lams):
        score = q_hat - lam * c
        top = score.max(axis=1, keepdims=True)
        tied_cost = np.where(score >= top - 1e-12, c, np.inf)
        out[i] = tied_cost.argmin(axis=1)
    return out
