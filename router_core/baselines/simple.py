"""Reference routers that need no model of the prompt: oracle, random, cheapest, best single.

They bracket every learned router: the oracle (cheapest correct model, swept over λ with the
true outcomes) is the ceiling; cheapest and best single model are the two ends of the
single-model line; random is what choosing blindly costs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from router_core.baselines.choice import choose, normalised


def oracle(quality: np.ndarray, cost: np.ndarray, lams: Sequence[float]) -> np.ndarray:
    """(L, n): per query, the true best trade-off q − λ·c̃ (at λ = 0 the cheapest correct)."""
    c = np.asarray(cost, dtype=np.float64)
    c_norm = c / max(float(np.nanmax(c.mean(axis=0))), 1e-300)
    return choose(quality, c_norm, lams)


def random_router(n: int, m: int, seed: int = 0) -> np.ndarray:
    """(1, n): a model drawn uniformly per query (seeded)."""
    return np.random.default_rng(seed).integers(0, m, size=(1, n))


def cheapest(train_cost: np.ndarray, n: int) -> np.ndarray:
    """(1, n): always the model with the lowest mean training cost."""
    return np.full((1, n), int(np.nanargmin(np.nanmean(train_cost, axis=0))), dtype=np.int64)


def best_single(train_quality: np.ndarray, train_cost: np.ndarray, n: int) -> np.ndarray:
    """(1, n): always the model with the best mean training quality (ties → cheaper)."""
    mq = np.nanmean(train_quality, axis=0)
    mc = np.nanmean(train_cost, axis=0)
    return np.full((1, n), int(np.lexsort((mc, -mq))[0]), dtype=np.int64)


def mean_cost_norm(train_cost: np.ndarray) -> np.ndarray:
    """(m,) c̃ from mean training costs, as the Router stores ``Expert.cost_usd``."""
    mc = np.nanmean(train_cost, axis=0)
    mc = np.where(np.isfinite(mc), mc, np.nanmean(mc))
    return normalised(mc)


def single_frontier(
    train_quality: np.ndarray, c_norm: np.ndarray, n: int, lams: Sequence[float]
) -> np.ndarray:
    """(L, n): at each λ one model for every query, argmax_h (mean q_h − λ·c̃_h) on train.

    The λ sweep walks the single-model frontier estimated on training rows: a router that
    does not beat it gains nothing from reading the prompt.
    """
    mq = np.nan_to_num(np.nanmean(train_quality, axis=0), nan=0.0)
    return choose(np.broadcast_to(mq, (n, len(mq))), c_norm, lams)
