"""Clopper-Pearson bounds of a binomial rate ([ClopperPearson]): the judge's agreement and the
second moments of judged differences are bounded with them (router_core.promise.certify,
router_core.promise.route_certificate)."""

from __future__ import annotations

import numpy as np


def cp_upper(k: np.ndarray, n: np.ndarray, delta: float) -> np.ndarray:
    """Clopper-Pearson upper bound of a binomial rate at one-sided level δ (1 where n = 0)."""
    from scipy.stats import beta as beta_dist  # here: serving a certificate never imports scipy

    k, n = np.asarray(k, float), np.asarray(n, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        up = beta_dist.ppf(1.0 - delta, k + 1.0, np.maximum(n - k, 0.0))
    return np.where(k >= n, 1.0, np.nan_to_num(up, nan=1.0))


def cp_lower(k: np.ndarray, n: np.ndarray, delta: float) -> np.ndarray:
    """Clopper-Pearson lower bound of a binomial rate at one-sided level δ (0 where k = 0)."""
    from scipy.stats import beta as beta_dist

    k, n = np.asarray(k, float), np.asarray(n, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = beta_dist.ppf(delta, np.maximum(k, 1e-12), n - k + 1.0)
    return np.where(k <= 0, 0.0, np.nan_to_num(lo, nan=0.0))
