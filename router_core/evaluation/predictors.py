"""How good a router's correctness predictor is, model by model ([Prefill], level 1; docs/references.md).

For routers that estimate P(correct) per (prompt, model) (kNN, MLP, UMR, SharedTrunkNet,
Tollgate's calibrated similarity), on the test rows with outcomes thresholded at 0.5:

- AUC: the ROC AUC of p̂_h against the outcome, per model; reported as the mean over the
  models whose test outcomes have both classes.
- Brier score: mean (p̂_h − y)² per model; reported as the mean over models.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score


def predictor_scores(p_hat: np.ndarray, quality: np.ndarray) -> dict[str, float | list]:
    """{"auc", "brier"} means over models and the per-model lists (NaN: one class only)."""
    p_hat = np.clip(np.asarray(p_hat, dtype=np.float64), 0.0, 1.0)
    y = (np.asarray(quality, dtype=np.float64) >= 0.5).astype(np.float64)
    aucs, briers = [], []
    for h in range(y.shape[1]):
        both = 0 < y[:, h].sum() < len(y)
        aucs.append(float(roc_auc_score(y[:, h], p_hat[:, h])) if both else float("nan"))
        briers.append(float(np.mean((p_hat[:, h] - y[:, h]) ** 2)))
    finite = [a for a in aucs if np.isfinite(a)]
    return {
        "auc": float(np.mean(finite)) if finite else float("nan"),
        "brier": float(np.mean(briers)),
        "auc_per_model": aucs,
        "brier_per_model": briers,
    }


def calibrated_similarity(router, X: np.ndarray, pool: tuple[str, ...]) -> np.ndarray:
    """(n, |pool|) Tollgate's p̂_h = σ(a_h · ⟨q, e_h⟩ + b_h) for every pool model."""
    Q = router.project(X).astype(np.float64)
    names = router.model_names
    E = np.stack([router.experts[names.index(h)].descriptor for h in pool]).astype(np.float64)
    return np.stack([router.calibration(h, Q @ E[j]) for j, h in enumerate(pool)], axis=1).astype(
        np.float64
    )
