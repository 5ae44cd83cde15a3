"""How well a backend's quality on a prompt is known: p̂ with a pseudo-count n.

A backend's quality estimate on prompt x is read as a Beta(p̂·n, (1 − p̂)·n) belief: as if
n outcomes had been seen on prompts like x, of which a share p̂ were good. Its spread is

    sd = sqrt(p̂ (1 − p̂) / (n + 1))

so a confident estimate (large n) has tight bounds p̂ ± z·sd and a prior (small n) wide ones.
Every source of an estimate (trained expert, prior, refined prior) ends in this one form, so
the decision rule never asks where an estimate came from, only how well it is known.

A belief over the logit z = w·q + b with variance v (router_core.promise.logit_belief) maps
to a pseudo-count by matching the variance of p ≈ σ(z) to first order (delta method):

    Var p ≈ (p (1 − p))² · v = p (1 − p) / (n + 1)   ⇒   n = 1 / (p (1 − p) · v) − 1
"""

from __future__ import annotations

import numpy as np

N_MAX = 1e6  # a pseudo-count beyond any table: "known exactly" for the rule's purposes


def beta_sd(p: np.ndarray, n: np.ndarray) -> np.ndarray:
    """sd = sqrt(p (1 − p) / (n + 1)), elementwise."""
    p = np.asarray(p, dtype=float)
    return np.sqrt(np.clip(p * (1.0 - p), 0.0, None) / (np.asarray(n, dtype=float) + 1.0))


def bounds(p: np.ndarray, n: np.ndarray, z: float) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) = p ∓ z·sd, clipped to [0, 1]."""
    sd = beta_sd(p, n)
    return np.clip(p - z * sd, 0.0, 1.0), np.clip(p + z * sd, 0.0, 1.0)


def pseudo_count_from_logit_var(p: np.ndarray, var_z: np.ndarray) -> np.ndarray:
    """n = 1 / (p (1 − p) · Var z) − 1 (module docstring), in [0, N_MAX]."""
    pq = np.clip(np.asarray(p, dtype=float) * (1.0 - np.asarray(p, dtype=float)), 1e-6, None)
    with np.errstate(divide="ignore"):
        n = 1.0 / (pq * np.clip(np.asarray(var_z, dtype=float), 1e-12, None)) - 1.0
    return np.clip(n, 0.0, N_MAX)


def logit_var_for_count(p: float, n: float) -> float:
    """The inverse: the logit variance whose belief at p is worth n outcomes."""
    pq = max(float(p) * (1.0 - float(p)), 1e-6)
    return 1.0 / (pq * (float(n) + 1.0))
