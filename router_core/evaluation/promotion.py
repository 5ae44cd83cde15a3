"""The promotion guard: a retrained router replaces the live one only if it is not worse.

Both routers are evaluated on the same held-out slice of observations (prompts the candidate
was not trained on, see ``supervision.holdout_mask``) with the standard metrics: for each λ
of a grid, every held-out prompt is routed by ``Router.route`` exactly as the gateway does,
restricted to the models observed on that prompt (the only ones whose outcome is known), and
the point (mean observed cost, mean observed quality) is recorded; the points give the
deferral curve, AUDC and QNC (docs/evaluation.md). The candidate is promoted iff

    AUDC(candidate) ≥ AUDC(current) − margin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from router_core.baselines.choice import DEFAULT_LAMBDAS
from router_core.data.table import RoutingTable
from router_core.evaluation.metrics import Reference, audc, deferral_curve, peak, qnc
from router_core.runtime.router import Router

DEFAULT_MARGIN = 0.005


@dataclass(frozen=True)
class HoldoutScore:
    """A router's metrics on a held-out observation slice."""

    audc: float
    qnc: float | None
    peak: float
    n_prompts: int
    points: list[tuple[float, float]] = field(default_factory=list)  # (cost, quality) per λ


@dataclass(frozen=True)
class PromotionDecision:
    promote: bool
    reason: str
    candidate: HoldoutScore
    current: HoldoutScore | None
    margin: float

    def to_dict(self) -> dict:
        """The record stored with a version: metrics plus the λ-sweep points, which the
        dashboard draws as that version's deferral curve."""
        return {
            "promote": self.promote,
            "reason": self.reason,
            "margin": self.margin,
            "candidate": asdict(self.candidate),
            "current": None if self.current is None else asdict(self.current),
        }


def route_points(
    router: Router, phi: np.ndarray, table: RoutingTable, lambdas: np.ndarray = DEFAULT_LAMBDAS
) -> tuple[np.ndarray, int]:
    """(len(lambdas), 2) points (mean cost, mean quality) and the number of prompts used.

    Prompt i is routed among the models observed on it that the router knows (prompts are
    grouped by that set and each group routed with ``Router.route_batch``, which makes the
    same decisions as ``route``); prompts with no such model are left out for every λ.
    """
    known = set(router.model_names)
    names = router.model_names
    col = {m: j for j, m in enumerate(table.models)}
    observed = np.isfinite(table.quality) & np.isfinite(table.cost)
    groups: dict[tuple[str, ...], list[int]] = {}
    for i in range(len(table)):
        allowed = tuple(m for m in table.models if m in known and observed[i, col[m]])
        if allowed:
            groups.setdefault(allowed, []).append(i)
    n = sum(len(v) for v in groups.values())
    if n == 0:
        raise ValueError("no held-out prompt has an observed outcome for a model the router knows")
    q = router.project(phi)
    cost = np.zeros(len(lambdas))
    quality = np.zeros(len(lambdas))
    for allowed, rows in groups.items():
        rows_a = np.asarray(rows)
        idx = router.route_batch(q[rows_a], lambdas, allowed=allowed)  # (L, len(rows))
        cols = np.array([col[m] for m in names])[idx]
        cost += table.cost[rows_a[None, :], cols].sum(axis=1)
        quality += table.quality[rows_a[None, :], cols].sum(axis=1)
    return np.stack([cost / n, quality / n], axis=1), n


def evaluate_on_holdout(
    router: Router,
    phi: np.ndarray,
    table: RoutingTable,
    lambdas: np.ndarray = DEFAULT_LAMBDAS,
) -> HoldoutScore:
    """AUDC, QNC and peak of ``router`` on a held-out table (NaN = not observed).

    The single-model anchors (cheapest, most expensive, best) are the models' mean observed
    cost and quality over the held-out prompts, so every router is scored on one scale; on a
    fully observed table this is exactly ``router_core.evaluation``'s definition.
    """
    points, n = route_points(router, phi, table, lambdas)
    obs = np.isfinite(table.quality) & np.isfinite(table.cost)
    with np.errstate(invalid="ignore"):
        mc = np.nanmean(np.where(obs, table.cost, np.nan), axis=0)
        mq = np.nanmean(np.where(obs, table.quality, np.nan), axis=0)
    ok = np.isfinite(mc) & np.isfinite(mq)
    ref = Reference.from_matrices(mq[ok][None, :], mc[ok][None, :])
    curve = deferral_curve(points, (ref.c_min, ref.q_cheapest))
    return HoldoutScore(
        audc=audc(curve, ref.c_min, ref.c_max),
        qnc=qnc(curve, ref.q_best, ref.c_best),
        peak=peak(curve),
        n_prompts=n,
        points=[(float(c), float(v)) for c, v in points],
    )


def non_finite(router: Router) -> list[str]:
    """The parts of ``router`` holding NaN or inf (a router that would fail every request)."""
    bad = []
    if not all(np.isfinite(w).all() and np.isfinite(b).all() for w, b in router.head.layers):
        bad.append("head weights")
    if not all(np.isfinite(e.descriptor).all() and np.isfinite(e.cost_usd) for e in router.experts):
        bad.append("expert descriptors or costs")
    cal = router.calibration
    values = [*cal.a.values(), *cal.b.values(), cal.a0, cal.b0]
    if not np.isfinite(np.asarray(values, dtype=float)).all():
        bad.append("calibration")
    return bad


def decide_promotion(
    candidate: Router,
    current: Router | None,
    phi: np.ndarray,
    holdout: RoutingTable,
    margin: float = DEFAULT_MARGIN,
    lambdas: np.ndarray = DEFAULT_LAMBDAS,
) -> PromotionDecision:
    """Score both routers on the held-out slice; promote iff not worse by more than ``margin``."""
    bad = non_finite(candidate)
    if bad:
        empty = HoldoutScore(audc=float("nan"), qnc=None, peak=float("nan"), n_prompts=0)
        cur = None if current is None else evaluate_on_holdout(current, phi, holdout, lambdas)
        reason = f"refused: the candidate has non-finite {', '.join(bad)}"
        return PromotionDecision(False, reason, empty, cur, margin)
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
