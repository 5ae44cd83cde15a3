"""How far a routing decision is from changing: the margin a cascade trusts its cheap
encoder by.

A decision flips when some candidate's score moves past a boundary of the rule. The margin is
the smallest such distance, in the rule's own units (calibrated quality), so one threshold
means the same under every λ and pool.

λ rule (router_core.runtime.decision, CSCR Eq. 9 with the cheapest-in-E tie-break): with scores
a_h = p̂_h − λ·c̃_h, E = {h : a_h ≥ max a − δ} and the winner w the cheapest in E,

    m = min( a_w − max_{h≠w} a_h + δ,                  (w leaves E)
             min_{h : c_h < c_w} (max a − δ − a_h) )    (a cheaper h enters E)

Promise rule (router_core.promise.rule): with drop bounds D_h, E = {r} ∪ {h : D_h ≤ τ} and the
winner w the cheapest in E,

    m = min( τ − D_w  (w ≠ r),   min_{h : c_h < c_w, h ≠ r} (D_h − τ) )

Both are ≥ 0 (up to ties) and +inf for a single candidate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from router_core.runtime.decision import Decision


def rule_margins(score: np.ndarray, cost: np.ndarray, pick: np.ndarray, delta: float
                 ) -> np.ndarray:
    """(n,) margins of the λ rule for (n, k) candidate scores and normalised costs, the
    winner of each row at column ``pick``."""
    score = np.asarray(score, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.float64)
    rows = np.arange(len(score))
    a_w = score[rows, pick]
    c_w = cost[rows, pick]
    others = score.copy()
    others[rows, pick] = -np.inf
    leave = a_w - others.max(axis=1) + delta
    boundary = score.max(axis=1, keepdims=True) - delta
    cheaper = (cost < c_w[:, None]) & np.isfinite(score)
    enter = np.where(cheaper, boundary - score, np.inf).min(axis=1)
    return np.minimum(leave, enter)


def decision_margin(decision: Decision) -> float:
    """The λ rule's margin of one ``Router.route`` decision (its candidates, chosen first)."""
    cands = decision.candidates
    if len(cands) < 2:
        return float("inf")
    score = np.array([[c.score for c in cands]])
    cost = np.array([[c.cost for c in cands]])
    return float(rule_margins(score, cost, np.zeros(1, dtype=np.int64), decision.delta)[0])


def promise_margin(drop: np.ndarray, cost: np.ndarray, chosen: int, ref: int,
                   tolerance: float) -> float:
    """The promise rule's margin on one prompt: drop bounds D (k,), costs (k,), the chosen
    and reference columns, the per-prompt tolerance τ."""
    drop = np.asarray(drop, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.float64)
    gaps = [tolerance - drop[chosen]] if chosen != ref else []
    gaps += [drop[h] - tolerance for h in range(len(drop))
             if h != ref and h != chosen and cost[h] < cost[chosen] and np.isfinite(drop[h])]
    return float(min(gaps)) if gaps else float("inf")
