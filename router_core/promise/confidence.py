"""Choosing the rule's confidence z where the truth is known, and checking it elsewhere.

z cannot be chosen against a frontier reference: its per-prompt outcomes are what is
unknown. So the situation is rebuilt one step down, among backends whose outcomes are known:
the k strongest trained experts (by their aggregate figure) become pseudo-frontier,
placed on aggregate priors among the others, the strongest as the reference, refined by the
same number of simulated judged outcomes as the real pool has had. On prompts the router was
not fitted on, each z of a grid routes the pseudo-pool, and the realized drop is measured
against the pseudo-reference's true outcomes; the chosen z is the smallest whose drop plus
one standard error keeps the promise in every case (k = 1..K):

    z* = min { z : max_cases [ d̄(z) + se(z) ] ≤ max_drop },   d̄ = mean_x (y_r − y_h*(x))

so the parameter is chosen over the whole pool, priors included, and the bench checks it on
test prompts it was not chosen on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from router_core.promise.rule import promise_choice

Z_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, np.inf)


@dataclass(frozen=True)
class Case:
    """A pool with known outcomes on held-out prompts: P, N (n, m), outcomes Y (n, m),
    cost (m,), the reference's column."""

    P: np.ndarray
    N: np.ndarray
    Y: np.ndarray
    cost: np.ndarray
    ref: int


def realized(case: Case, max_drop: float, z: float) -> tuple[float, float, float]:
    """(mean drop, its standard error, saving) of the rule on ``case``."""
    h = promise_choice(case.P, case.N, case.cost, case.ref, max_drop, z)
    rows = np.arange(len(h))
    d = case.Y[:, case.ref] - case.Y[rows, h]
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    saving = 1.0 - case.cost[h].mean() / case.cost[case.ref]
    return float(d.mean()), se, float(saving)


def choose_confidence(cases: list[Case], max_drop: float, grid=Z_GRID) -> float:
    """z* (module docstring); the last grid point (the reference always) if none holds."""
    for z in grid:
        if all(sum(realized(c, max_drop, z)[:2]) <= max_drop for c in cases):
            return float(z)
    return float(grid[-1])
