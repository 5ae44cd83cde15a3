"""The promise rule: the cheapest backend confidently within the route's drop of its reference.

A route has a reference backend r and a promise ``max_drop`` (auto 0.01, balanced 0.03,
cheap 0.06). On prompt x, with each backend's belief (p̂_h, n_h) and sd_h from the Beta view
(router_core.promise.belief), the reference's uncertainty is taken optimistically for r and
pessimistically for the candidate h:

    U_r = p̂_r + z·sd_r,   L_h = p̂_h − z·sd_h,   D_h = U_r − L_h   (a bound on p_r − p_h)
    E   = {r} ∪ {h : D_h ≤ τ}                                (confidently within tolerance)
    h*  = argmin_{h ∈ E} c_h   (ties: the higher p̂; EquiRouter's cheapest among equivalents)

An uncertain reference (wide U_r) or an uncertain candidate (low L_h) leaves E = {r}: the
route falls back to its reference. The per-prompt tolerance τ starts at the route's
``max_drop``; z and τ (never below max_drop) are chosen by router_core.promise.confidence so
that the route's realized average keeps the promise, never fixed per table. Per prompt this is a few vector
operations over the pool: microseconds for ~10 backends, and the same code for many prompts.

Evidence narrows the rule, never widens it. With ``before`` (the (p̂, n) the beliefs gave
before any outcome: the published priors), a candidate is within τ only where both views
say so,

    D_h = max(D_h(refined), D_h(before))                                          (careful)

so a refinement that moves a prior's p̂ up, or the reference's down, never sends a backend
more prompts than its prior did. A refit is kept when it predicts held-out verdicts better
(gateway/learning/refine_priors.py), which is not the same as keeping the promise: offline
(bench/routing/promise.py ``--refined-rule``, LLMRouter, seeds 0-2), the refined rule alone
dropped +0.047 on ``auto-balanced`` (promise 0.03) after 5000 judged outcomes, the careful one
+0.014, its cold start +0.008. What evidence
allows beyond the priors, the route's certificate serves, with its error stated
(router_core.promise.certify).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from router_core.promise.belief import beta_sd

PROMISES = {"auto": 0.01, "auto-balanced": 0.03, "auto-cheap": 0.06}


def drop_bounds(P: np.ndarray, N: np.ndarray, ref: int, z: float,
                before: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """(n, m) D_h = U_r − L_h (module docstring); 0 for the reference itself; with
    ``before`` (P₀, N₀), the larger of the two views' bounds (careful)."""
    if before is not None:
        return np.maximum(drop_bounds(P, N, ref, z), drop_bounds(*before, ref, z))
    P = np.atleast_2d(np.asarray(P, dtype=float))
    sd = beta_sd(P, np.atleast_2d(N))
    if not np.isfinite(z):  # infinite confidence: nothing but the reference is safe
        D = np.full(P.shape, np.inf)
    else:
        D = (P[:, [ref]] + z * sd[:, [ref]]) - (P - z * sd)
    D[:, ref] = 0.0
    return D


def promise_choice(
    P: np.ndarray, N: np.ndarray, cost: np.ndarray, ref: int, max_drop: float, z: float,
    before: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """(n,) index of h* for each prompt (module docstring).

    Args:
        P, N: (n, m) p̂ and pseudo-counts of the m backends on n prompts.
        cost: (m,) or (n, m) predicted cost of each backend (any unit, the same for all).
        ref: column of the reference; max_drop: the per-prompt tolerance τ (the route's
            promise, or the τ router_core.promise.confidence chose); z: the confidence.
        before: (P₀, N₀) before any outcome, when the beliefs were refined (careful).
    """
    P = np.atleast_2d(np.asarray(P, dtype=float))
    return cheapest_within(drop_bounds(P, N, ref, z, before), P, cost, max_drop)


def cheapest_within(D: np.ndarray, P: np.ndarray, cost: np.ndarray, max_drop: float
                    ) -> np.ndarray:  # fmt: skip
    """(n,) h* from the drop bounds ``D`` (n, m): the cheapest backend with D_h ≤ τ, ties to
    the higher p̂ (the reference's D is 0, so there is always one)."""
    ok = D <= max_drop
    c = np.broadcast_to(np.asarray(cost, dtype=float), P.shape)
    key = np.where(ok, c, np.inf)
    cheapest = ok & (key == key.min(axis=1, keepdims=True))
    return np.argmax(np.where(cheapest, P, -np.inf), axis=1)


def explain(
    names: Sequence[str],
    p: np.ndarray,
    n: np.ndarray,
    cost: np.ndarray,
    ref: int,
    max_drop: float,
    z: float,
    how: Sequence[str] | None = None,
    tolerance: float | None = None,
    before: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict:
    """The decision on one prompt as a log record: the reference with its p̂ and bounds,
    each candidate's p̂, n, lower bound, drop bound, cost and whether it is within the
    per-prompt tolerance τ (default: ``max_drop``, the route's promise), the choice and why
    (plain JSON types). ``before``: the beliefs' (p̂, n) before any outcome (careful)."""
    tol = float(max_drop if tolerance is None else tolerance)
    p = np.asarray(p, dtype=float).reshape(1, -1)
    n = np.asarray(n, dtype=float).reshape(1, -1)
    cost = np.asarray(cost, dtype=float).reshape(-1)
    if before is not None:
        before = tuple(np.asarray(a, dtype=float).reshape(1, -1) for a in before)
    D = drop_bounds(p, n, ref, z, before)
    sd = beta_sd(p, n)[0]
    choice = int(cheapest_within(D, p, cost, tol)[0])
    D = D[0]
    zf = z if np.isfinite(z) else None
    cands = [
        {
            "backend": names[h],
            "known": None if how is None else how[h],
            "p": round(float(p[0, h]), 4),
            "n": round(float(n[0, h]), 1),
            "lower": None if zf is None else round(float(p[0, h] - zf * sd[h]), 4),
            "drop_bound": None if not np.isfinite(D[h]) else round(float(D[h]), 4),
            "cost": float(cost[h]),
            "within": bool(D[h] <= tol),
        }
        for h in np.argsort(cost, kind="stable")
    ]
    within = [c for c in cands if c["within"] and c["backend"] != names[ref]]
    if choice == ref:
        why = ("no cheaper backend is confidently within the promise: the reference"
               if not within else "the reference is the cheapest within the promise")
    else:
        why = (f"cheapest of {len(within) + 1} backends confidently within "
               f"{tol:.3g} of the reference on this prompt (drop bound {D[choice]:.4f}; "
               f"the route promises {max_drop:g} on average)")
    return {
        "reference": {
            "backend": names[ref],
            "p": round(float(p[0, ref]), 4),
            "n": round(float(n[0, ref]), 1),
            "upper": None if zf is None else round(float(min(1.0, p[0, ref] + zf * sd[ref])), 4),
        },
        "max_drop": float(max_drop),
        "tolerance": tol,
        "z": zf,
        "chosen": names[choice],
        "why": why,
        "candidates": cands,
    }
