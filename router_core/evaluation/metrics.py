"""The evaluation numbers, exactly as docs/evaluation.md defines them.

A router evaluated on a λ grid gives points (mean cost per query, mean quality) on the test
set. From those points:

- Deferral curve: the upper Pareto frontier of the points plus the cheapest-model point,
  linearly interpolated between frontier points, flat after its last point.
- AUDC = ∫_{C_min}^{C_max} f(c) dc / (C_max − C_min), with C_min / C_max the mean per-query
  costs of the cheapest / most expensive single model and f the deferral curve.
- Peak: the highest quality on the curve.
- QNC: the lowest cost on the curve reaching the best single model's mean quality q*,
  divided by that model's mean cost c*; ``None`` ("never") if the curve never reaches q*.
- Overpayment rate (EquiRouter): share of queries where the chosen model is correct
  (quality within δ of the best available on that query) but a strictly cheaper model was
  equally correct.

All functions are pure and numpy-only, so the dashboard and promotion can reuse them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Reference:
    """The single-model anchors of one test set: cheapest and best mean cost/quality."""

    c_min: float  # mean cost of the cheapest single model
    q_cheapest: float  # mean quality of that model
    c_max: float  # mean cost of the most expensive single model
    q_best: float  # mean quality of the best single model (q*)
    c_best: float  # mean cost of the best single model (c*)

    @classmethod
    def from_matrices(cls, quality: np.ndarray, cost: np.ndarray) -> Reference:
        """Anchors from (n, m) actual quality and cost (no NaN: drop such rows first)."""
        mc = cost.mean(axis=0)
        mq = quality.mean(axis=0)
        cheap = int(np.lexsort((-mq, mc))[0])  # cheapest; ties → better
        best = int(np.lexsort((mc, -mq))[0])  # best; ties → cheaper
        return cls(
            c_min=float(mc[cheap]),
            q_cheapest=float(mq[cheap]),
            c_max=float(mc.max()),
            q_best=float(mq[best]),
            c_best=float(mc[best]),
        )


def pareto_frontier(points: np.ndarray) -> np.ndarray:
    """The upper Pareto frontier of (cost, quality) points, sorted by cost.

    A point is kept when no other point costs at most as much with at least its quality
    (one strictly); among identical points one is kept. Returns (p, 2).
    """
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    order = np.lexsort((-pts[:, 1], pts[:, 0]))  # by cost, then quality descending
    frontier: list[tuple[float, float]] = []
    best_q = -np.inf
    for c, q in pts[order]:
        if q > best_q:
            frontier.append((c, q))
            best_q = q
    return np.array(frontier, dtype=np.float64).reshape(-1, 2)


def deferral_curve(points: np.ndarray, cheapest_point: tuple[float, float]) -> np.ndarray:
    """Frontier vertices of the router's points plus the cheapest-model point, (p, 2)."""
    pts = np.vstack([np.asarray(points, dtype=np.float64).reshape(-1, 2), [cheapest_point]])
    return pareto_frontier(pts)


def curve_value(curve: np.ndarray, c: np.ndarray | float) -> np.ndarray:
    """f(c): linear between vertices, flat after the last (and before the first) vertex."""
    return np.interp(c, curve[:, 0], curve[:, 1])


def audc(curve: np.ndarray, c_min: float, c_max: float) -> float:
    """Mean height of the curve over [C_min, C_max] (exact for a piecewise-linear f)."""
    if c_max <= c_min:
        return float(curve_value(curve, c_min))
    inner = curve[(curve[:, 0] > c_min) & (curve[:, 0] < c_max), 0]
    xs = np.concatenate([[c_min], inner, [c_max]])
    ys = curve_value(curve, xs)
    area = float(np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2.0))
    return area / (c_max - c_min)


def peak(curve: np.ndarray) -> float:
    return float(curve[:, 1].max())


def qnc(curve: np.ndarray, q_best: float, c_best: float) -> float | None:
    """Lowest cost at which the curve reaches q*, over c*; None if it never does."""
    q = curve[:, 1]
    hit = np.flatnonzero(q >= q_best - 1e-12)
    if len(hit) == 0:
        return None
    j = int(hit[0])
    if j == 0:
        cost = curve[0, 0]
    else:  # the curve rises linearly from vertex j-1 to j: solve f(c) = q*
        (c0, q0), (c1, q1) = curve[j - 1], curve[j]
        cost = c0 + (q_best - q0) * (c1 - c0) / (q1 - q0)
    return float(cost / c_best) if c_best > 0 else None


def overpayment_rate(
    chosen: np.ndarray, quality: np.ndarray, cost: np.ndarray, delta: float = 0.02
) -> float:
    """Share of queries whose correct choice had a strictly cheaper, equally correct model.

    Args:
        chosen: (n,) model index per query. quality, cost: (n, m) actual outcomes.
        delta: "correct" means quality ≥ (best quality on that query) − δ.
    """
    n = len(chosen)
    rows = np.arange(n)
    correct = quality >= quality.max(axis=1, keepdims=True) - delta  # (n, m)
    c_chosen = cost[rows, chosen]
    cheaper_ok = (correct & (cost < c_chosen[:, None])).any(axis=1)
    return float(np.mean(correct[rows, chosen] & cheaper_ok)) if n else 0.0


@dataclass(frozen=True)
class CurveMetrics:
    points: np.ndarray  # (L, 2) the λ-sweep points (mean cost, mean quality)
    curve: np.ndarray  # (p, 2) deferral-curve vertices
    audc: float
    peak: float
    qnc: float | None
    overpay: float

    def to_dict(self) -> dict:
        return {"audc": self.audc, "qnc": self.qnc, "peak": self.peak, "overpay": self.overpay}


def sweep_points(chosen: np.ndarray, quality: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """(L, n) choices → (L, 2) points of mean actual cost and quality per λ."""
    chosen = np.atleast_2d(chosen)
    rows = np.arange(chosen.shape[1])
    return np.stack([cost[rows, chosen].mean(axis=1), quality[rows, chosen].mean(axis=1)], axis=1)


def evaluate_choices(
    chosen: np.ndarray,
    quality: np.ndarray,
    cost: np.ndarray,
    ref: Reference | None = None,
    delta: float = 0.02,
) -> CurveMetrics:
    """All metrics of one router from its (L, n) choices over the λ grid.

    The overpayment rate is averaged over the λ grid (every router is swept over the same
    grid; a λ-independent router has the same rate at every λ).
    """
    chosen = np.atleast_2d(chosen)
    ref = ref or Reference.from_matrices(quality, cost)
    pts = sweep_points(chosen, quality, cost)
    curve = deferral_curve(pts, (ref.c_min, ref.q_cheapest))
    over = float(np.mean([overpayment_rate(ch, quality, cost, delta) for ch in chosen]))
    return CurveMetrics(
        points=pts,
        curve=curve,
        audc=audc(curve, ref.c_min, ref.c_max),
        peak=peak(curve),
        qnc=qnc(curve, ref.q_best, ref.c_best),
        overpay=over,
    )


def bootstrap_delta_audc(
    chosen_a: np.ndarray,
    chosen_b: np.ndarray,
    quality: np.ndarray,
    cost: np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Paired bootstrap CI of AUDC(a) − AUDC(b): the same resampled queries for both.

    Each replicate resamples the n test queries with replacement, recomputes both routers'
    λ-sweep points, the single-model anchors (C_min, C_max, cheapest point) on that
    replicate, both curves and their AUDC; the CI is the percentile interval.
    """
    rng = np.random.default_rng(seed)
    deltas = _replicate_deltas(chosen_a, chosen_b, quality, cost, n_boot, rng)
    return _percentile_ci(deltas, level)


def bootstrap_delta_within_audc(
    chosen_a: np.ndarray,
    chosen_b: np.ndarray,
    quality: np.ndarray,
    cost: np.ndarray,
    category: np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Paired bootstrap CI of the within-category AUDC difference (``within_category_audc``
    of a minus that of b), stratified: each replicate resamples every category's test
    queries inside it, so the category weights stay those of the test set."""
    chosen_a, chosen_b = np.atleast_2d(chosen_a), np.atleast_2d(chosen_b)
    cats = np.asarray(category, dtype=str)
    rng = np.random.default_rng(seed)
    deltas = np.zeros(n_boot)
    for g in np.unique(cats):
        rows = np.flatnonzero(cats == g)
        part = _replicate_deltas(
            chosen_a[:, rows], chosen_b[:, rows], quality[rows], cost[rows], n_boot, rng
        )
        deltas += part * len(rows) / len(cats)
    return _percentile_ci(deltas, level)


def _replicate_deltas(
    chosen_a: np.ndarray,
    chosen_b: np.ndarray,
    quality: np.ndarray,
    cost: np.ndarray,
    n_boot: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """AUDC(a) − AUDC(b) on ``n_boot`` resamples (with replacement) of these queries, each
    with the single-model anchors of its own replicate."""
    chosen_a, chosen_b = np.atleast_2d(chosen_a), np.atleast_2d(chosen_b)
    n = quality.shape[0]
    rows = np.arange(n)
    qa, ca = quality[rows, chosen_a], cost[rows, chosen_a]  # (La, n)
    qb, cb = quality[rows, chosen_b], cost[rows, chosen_b]
    deltas = np.empty(n_boot)
    chunk = max(1, 2_000_000 // max(n, 1))
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        w = rng.multinomial(n, np.full(n, 1.0 / n), size=b).astype(np.float64) / n  # (b, n)
        mq, mc = w @ quality, w @ cost  # (b, m) single-model means
        pa = np.stack([w @ ca.T, w @ qa.T], axis=-1)  # (b, La, 2)
        pb = np.stack([w @ cb.T, w @ qb.T], axis=-1)
        for r in range(b):
            cheap = int(np.lexsort((-mq[r], mc[r]))[0])
            lo, hi = float(mc[r, cheap]), float(mc[r].max())
            anchor = (lo, float(mq[r, cheap]))
            deltas[done + r] = audc(deferral_curve(pa[r], anchor), lo, hi) - audc(
                deferral_curve(pb[r], anchor), lo, hi
            )
        done += b
    return deltas


def _percentile_ci(deltas: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2.0 * 100.0
    lo_q, hi_q = np.percentile(deltas, [tail, 100.0 - tail])
    return float(lo_q), float(hi_q)


def within_category_audc(
    chosen: np.ndarray, quality: np.ndarray, cost: np.ndarray, category: np.ndarray
) -> tuple[float, dict[str, float]]:
    """AUDC inside each category, averaged weighted by its number of test prompts.

    Each category's deferral curve is built from the router's choices on that category's
    prompts alone, with that category's own single-model anchors (C_min, C_max, cheapest
    point): a router that only tells categories apart scores the single-model line here,
    however well its pooled curve does. Returns (weighted mean, category → AUDC).
    """
    chosen = np.atleast_2d(chosen)
    cats = np.asarray(category, dtype=str)
    per: dict[str, float] = {}
    total = 0.0
    for g in np.unique(cats):
        rows = np.flatnonzero(cats == g)
        per[str(g)] = evaluate_choices(chosen[:, rows], quality[rows], cost[rows]).audc
        total += per[str(g)] * len(rows)
    return total / max(len(cats), 1), per
