"""Category router (a diagnostic): told each test prompt's task or category, it sends the
whole category to one model per λ, argmax_h (q̄_{g,h} − λ·c̃_h) with q̄_{g,h} model h's mean
training quality on category g.

It reads a label a deployed router never sees, so it is not a product baseline: it measures
how much of a learned router's AUDC is task identity. A category absent from training falls
back to the pooled training mean (the single-model frontier).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from router_core.baselines.choice import choose


def category_means(train_quality: np.ndarray, train_category: np.ndarray) -> dict[str, np.ndarray]:
    """category → (m,) mean training quality per model (pooled mean where unobserved)."""
    pooled = np.nan_to_num(np.nanmean(train_quality, axis=0), nan=0.0)
    cats = np.asarray(train_category, dtype=str)
    out: dict[str, np.ndarray] = {}
    for g in np.unique(cats):
        q = train_quality[cats == g]
        seen = np.isfinite(q).any(axis=0)
        mean = np.nanmean(np.where(seen[None, :], q, 0.0), axis=0)
        out[str(g)] = np.where(seen, mean, pooled)
    return out


def category_router(
    train_quality: np.ndarray,
    train_category: np.ndarray,
    test_category: np.ndarray,
    c_norm: np.ndarray,
    lams: Sequence[float],
) -> np.ndarray:
    """(L, n) choices: each test prompt gets its category's training means as q̂."""
    means = category_means(train_quality, train_category)
    pooled = np.nan_to_num(np.nanmean(train_quality, axis=0), nan=0.0)
    q_hat = np.stack([means.get(str(g), pooled) for g in np.asarray(test_category, dtype=str)])
    return choose(q_hat, c_norm, lams)
