"""The promotion guard: a retrained router replaces the live one only if it is not worse.

Both routers are evaluated on the same held-out slice of observations (prompts the candidate
was not trained on, see ``supervision.holdout_mask``) with the standard metrics: for each λ
of a grid, every held-out prompt is routed by ``Router.route`` exactly as the gateway does,
restricted to the models observed on that prompt (the only ones whose outcome is known), and
the point (mean observed cost, mean observed quality) is recorded; the points give the
deferral curve, AUDC and QNC (DESIGN.md, "Evaluation"). The candidate is promoted iff

    AUDC(candidate) ≥ AUDC(current) − margin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from router_core.data.table import RoutingTable
from router_core.decision import NoEligibleModel
from router_core.router import Router

DEFAULT_LAMBDAS = np.concatenate([[0.0], np.geomspace(1e-3, 1e2, 40)])
DEFAULT_MARGIN = 0.005


@dataclass(frozen=True)
class HoldoutScore:
    """A router's metrics on a held-out observation slice."""

    audc: float
    qnc: float | None
    peak: float
    n_prompts: int
    points: list[tuple[float, float]] = field(default_factory=list)  # (cost, quality) per λ

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("points")
        return d


@dataclass(frozen=True)
class PromotionDecision:
    promote: bool
    reason: str
    candidate: HoldoutScore
    current: HoldoutScore | None
    margin: float

    def to_dict(self) -> dict:
        return {
            "promote": self.promote,
            "reason": self.reason,
            "margin": self.margin,
            "candidate": self.candidate.summary(),
            "current": None if self.current is None else self.current.summary(),
        }


def route_points(
    router: Router, phi: np.ndarray, table: RoutingTable, lambdas: np.ndarray = DEFAULT_LAMBDAS
) -> tuple[np.ndarray, int]:
    """(len(lambdas), 2) points (mean cost, mean quality) and the number of prompts used.

    Prompt i is routed among the models observed on it that the router knows; prompts with
    no such model are left out (for every λ, so all points average the same prompts).
    """
    known = set(router.model_names)
    col = {m: j for j, m in enumerate(table.models)}
    q = router.project(phi)
    observed = np.isfinite(table.quality) & np.isfinite(table.cost)
    rows = []
    for i in range(len(table)):
        allowed = [m for m in table.models if m in known and observed[i, col[m]]]
        if allowed:
            rows.append((i, allowed))
    if not rows:
        raise ValueError("no held-out prompt has an observed outcome for a model the router knows")
    points = np.zeros((len(lambdas), 2))
    for li, lam in enumerate(lambdas):
        cost = quality = 0.0
        for i, allowed in rows:
            try:
                chosen = router.route(q[i], float(lam), allowed=allowed).chosen
            except NoEligibleModel:  # pragma: no cover - allowed is never empty here
                continue
            cost += table.cost[i, col[chosen]]
            quality += table.quality[i, col[chosen]]
        points[li] = (cost / len(rows), quality / len(rows))
    return points, len(rows)


def deferral_metrics(
    points: np.ndarray,
    c_min: float,
    c_max: float,
    best_quality: float,
    best_cost: float,
    cheapest_quality: float,
) -> tuple[float, float | None, float]:
    """(AUDC, QNC, peak) of a set of (cost, quality) points, DESIGN.md's definitions.

    Curve: upper Pareto frontier of the points plus the cheapest model's point, linear in
    between, flat after the last point. AUDC = ∫_{C_min}^{C_max} curve / (C_max − C_min).
    QNC = lowest cost on the curve reaching ``best_quality``, over ``best_cost``.
    """
    pts = np.vstack([points, [[c_min, cheapest_quality]]])
    pts = pts[np.lexsort((-pts[:, 1], pts[:, 0]))]  # by cost, then best quality first
    frontier = []
    for c, qv in pts:
        if not frontier or qv > frontier[-1][1]:
            frontier.append((c, qv))
    fr = np.array(frontier)
    peak = float(fr[:, 1].max())
    if c_max <= c_min:
        return peak, None, peak
    grid = np.linspace(c_min, c_max, 2001)
    curve = np.interp(grid, fr[:, 0], fr[:, 1])  # flat before the first and after the last
    audc = float(np.trapezoid(curve, grid) / (c_max - c_min))
    reach = np.flatnonzero(fr[:, 1] >= best_quality - 1e-12)
    qnc = None
    if len(reach) and best_cost > 0:
        j = int(reach[0])
        if j == 0:
            cost_at = fr[0, 0]
        else:  # the segment from fr[j-1] to fr[j] crosses best_quality
            (c0, q0), (c1, q1) = fr[j - 1], fr[j]
            cost_at = c0 + (best_quality - q0) * (c1 - c0) / (q1 - q0)
        qnc = float(cost_at / best_cost)
    return audc, qnc, peak


def evaluate_on_holdout(
    router: Router,
    phi: np.ndarray,
    table: RoutingTable,
    lambdas: np.ndarray = DEFAULT_LAMBDAS,
) -> HoldoutScore:
    """AUDC, QNC and peak of ``router`` on a held-out table (NaN = not observed).

    Single-model references (cheapest, most expensive, best) are the models' mean observed
    cost and quality over the held-out prompts, so both routers are scored on one scale.
    """
    points, n = route_points(router, phi, table, lambdas)
    obs = np.isfinite(table.quality) & np.isfinite(table.cost)
    with np.errstate(invalid="ignore"):
        mc = np.nanmean(np.where(obs, table.cost, np.nan), axis=0)
        mq = np.nanmean(np.where(obs, table.quality, np.nan), axis=0)
    ok = np.isfinite(mc) & np.isfinite(mq)
    mc, mq = mc[ok], mq[ok]
    cheapest, best = int(np.argmin(mc)), int(np.argmax(mq))
    audc, qnc, peak = deferral_metrics(
        points,
        float(mc.min()),
        float(mc.max()),
        float(mq[best]),
        float(mc[best]),
        float(mq[cheapest]),
    )
    return HoldoutScore(
        audc=audc, qnc=qnc, peak=peak, n_prompts=n, points=[tuple(map(float, p)) for p in points]
    )


def decide_promotion(
    candidate: Router,
    current: Router | None,
    phi: np.ndarray,
    holdout: RoutingTable,
    margin: float = DEFAULT_MARGIN,
    lambdas: np.ndarray = DEFAULT_LAMBDAS,
) -> PromotionDecision:
    """Score both routers on the held-out slice; promote iff not worse by more than ``margin``."""
    cand = evaluate_on_holdout(candidate, phi, holdout, lambdas)
    if current is None:
        return PromotionDecision(True, "no current router", cand, None, margin)
    cur = evaluate_on_holdout(current, phi, holdout, lambdas)
    delta = cand.audc - cur.audc
    if delta >= -margin:
        reason = (
            f"candidate AUDC {cand.audc:.4f} vs current {cur.audc:.4f} (Δ {delta:+.4f}) "
            f"is within the margin {margin:g}"
        )
        return PromotionDecision(True, reason, cand, cur, margin)
    reason = (
        f"refused: candidate AUDC {cand.audc:.4f} is {-delta:.4f} below the current "
        f"{cur.audc:.4f} (margin {margin:g})"
    )
    return PromotionDecision(False, reason, cand, cur, margin)
