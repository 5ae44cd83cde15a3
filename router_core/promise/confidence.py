"""The rule's two parameters: the tolerance from the pool's own bounds, the confidence from
a rung where the truth is known.

Tolerance τ (no outcomes needed). A route may send a prompt to a backend whose drop bound D
exceeds its promise on that prompt, if others are confidently better than the reference:
what it promises is the average. So τ is the largest per-prompt tolerance whose routing keeps
the average of the pessimistic bounds within the promise on the route's held-out prompts,
over the whole pool (priors with their wide bounds included):

    τ(z) = max { τ ≥ max_drop : mean_x max(D_{h_τ(x)}(x), 0) ≤ max_drop }   (D = 0 where h = r)

If the bounds hold, so does the average drop. A confident gain (D < 0) is not spent on other
prompts' losses: a bound that is too tight would otherwise buy a wider τ twice. A pool whose reference leads by far has large
bounds everywhere and gets a small τ; no scale is carried from one pool to another.

Confidence z (chosen where outcomes are known). Whether the bounds hold cannot be checked
against a frontier reference: its per-prompt outcomes are what is unknown. So the situation is
rebuilt one rung down: the next strongest trained experts become pseudo-frontier, placed on
aggregate priors among the others, the strongest as the reference, refined by as many
simulated judged outcomes as the real pool has had. On prompts the router was not fitted on,
each z of a grid, with its own τ(z), routes the pseudo-pool, and the realized drop is measured
against the pseudo-reference's true outcomes:

    z* = argmax_{z : max_cases [d̄(z) + se(z)] ≤ max_drop} saving_own(z),   d̄ = mean_x (y_r − y_h*)

where saving_own is what the real pool's routing, with τ(z), would save on its own held-out
prompts (prices only: no outcomes), ties going to the larger z. The bench checks both on test
prompts they were not chosen on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from router_core.promise.rule import drop_bounds, promise_choice

Z_GRID = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, np.inf)
TOLERANCE_STEPS = 40  # τ grid: max_drop · (1/max_drop)^(i/40), i = 0..40


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
    tolerance: float  # per-prompt drop bound τ ≥ max_drop


def tolerance_for(
    P: np.ndarray, N: np.ndarray, cost: np.ndarray, ref: int, max_drop: float, z: float
) -> float:
    """τ(z) on held-out prompts' estimates P, N (module docstring): outcomes not needed."""
    if not np.isfinite(z):
        return float(max_drop)
    D = drop_bounds(P, N, ref, z)
    rows = np.arange(len(D))
    best = float(max_drop)
    for tau in np.geomspace(max_drop, 1.0, TOLERANCE_STEPS + 1)[1:]:
        h = promise_choice(P, N, cost, ref, tau, z)
        if np.maximum(D[rows, h], 0.0).mean() <= max_drop:
            best = float(tau)
    return best


def choose_rule(
    cases: list[Case], own: Case, max_drop: float, z_grid=Z_GRID
) -> RuleParams:
    """(z*, τ(z*)) (module docstring): z* among those that keep the promise on ``cases``
    (rungs with known outcomes), the one that saves most on ``own`` (the real pool's held-out
    prompts: only their estimates and prices are read, never their outcomes)."""
    best, best_saving = RuleParams(np.inf, float(max_drop)), 0.0
    for z in reversed(z_grid):  # safer first: a tie keeps the larger z
        runs = [realized(c, tolerance_for(c.P, c.N, c.cost, c.ref, max_drop, z), z)
                for c in cases]  # fmt: skip
        if not all(d + se <= max_drop for d, se, _ in runs):
            continue
        tau = tolerance_for(own.P, own.N, own.cost, own.ref, max_drop, z)
        h = promise_choice(own.P, own.N, own.cost, own.ref, tau, z)
        saving = 1.0 - own.cost[h].mean() / own.cost[own.ref]
        if saving > best_saving + 1e-9:
            best, best_saving = RuleParams(float(z), tau), saving
    return best
