"""Choosing the rule's parameters where the truth is known, and checking them elsewhere.

The rule (router_core.promise.rule) has two parameters: the confidence z, and the per-prompt
tolerance τ = m·max_drop (m ≥ 1: a prompt may be routed to a backend whose drop bound
exceeds the route's average promise, if the route's realized average still keeps it).
Neither can be chosen against a frontier reference: its per-prompt outcomes are what is
unknown. So the situation is rebuilt one step down, among backends whose outcomes are known:
the next strongest trained experts become pseudo-frontier, placed on aggregate priors among
the others, the strongest as the reference, refined by the same number of simulated judged
outcomes as the real pool has had. On prompts the router was not fitted on, each (z, m) of a
grid routes the pseudo-pool, and the realized drop is measured against the pseudo-reference's
true outcomes; the chosen pair saves the most among those whose drop plus one standard error
keeps the promise in every case:

    (z*, m*) = argmax_{(z, m) : max_cases [d̄ + se] ≤ max_drop} saving,   d̄ = mean_x (y_r − y_h*)

ties going to the safer pair (larger z, smaller m). The parameters are chosen over the whole
pool, priors included, and the bench checks them on test prompts they were not chosen on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from router_core.promise.rule import promise_choice

Z_GRID = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, np.inf)
SLACK_GRID = (1.0,)  # m > 1 chosen one rung down missed the promise on test


@dataclass(frozen=True)
class Case:
    """A pool with known outcomes on held-out prompts: P, N (n, m), outcomes Y (n, m),
    ``cost`` (m,) the rule decides on (prices), ``paid`` (n, m) what each answer really cost
    (default: ``cost``), the reference's column."""

    P: np.ndarray
    N: np.ndarray
    Y: np.ndarray
    cost: np.ndarray
    ref: int
    paid: np.ndarray | None = None


def realized(case: Case, tolerance: float, z: float) -> tuple[float, float, float]:
    """(mean drop, its standard error, saving) of the rule (per-prompt ``tolerance``, z)
    on ``case``:

    d̄ = mean_x (y_r − y_h*(x)),   saving = 1 − Σ_x paid_h*(x) / Σ_x paid_r(x)."""
    h = promise_choice(case.P, case.N, case.cost, case.ref, tolerance, z)
    rows = np.arange(len(h))
    d = case.Y[:, case.ref] - case.Y[rows, h]
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    paid = np.broadcast_to(case.cost if case.paid is None else case.paid, case.P.shape)
    saving = 1.0 - paid[rows, h].sum() / paid[:, case.ref].sum()
    return float(d.mean()), se, float(saving)


@dataclass(frozen=True)
class RuleParams:
    z: float  # confidence
    tolerance: float  # per-prompt drop bound τ = m·max_drop


def choose_rule(
    cases: list[Case], max_drop: float, z_grid=Z_GRID, slack_grid=SLACK_GRID
) -> RuleParams:
    """(z*, τ*) (module docstring); the reference always (z = ∞) if no pair holds."""
    best, best_saving = RuleParams(float(z_grid[-1]), max_drop), -np.inf
    for m in slack_grid:
        for z in reversed(z_grid):  # safer first: a tie keeps the larger z
            runs = [realized(c, m * max_drop, z) for c in cases]
            if all(d + se <= max_drop for d, se, _ in runs):
                saving = min(s for _, _, s in runs)
                if saving > best_saving + 1e-9:
                    best, best_saving = RuleParams(float(z), m * max_drop), saving
    return best
