"""The promise parameters of one router artifact, measured once on its own validation prompts.

The gateway's promise rule needs, per artifact, numbers that can only be measured where
outcomes are known; they are measured here (scripts/route_promises.py) and stored in
``router.config["promise"]`` so the gateway reads them instead of assuming them:

1. ``trained_n``: each trained expert's pseudo-count n from its calibration on validation
   prompts (``trained_pseudo_count``): how many outcomes its p̂ is worth.
2. ``level_map``: published capability A (MMLU-Pro scale) is not the router's scale. The
   level of expert h on the router's scale is its mean p̂ over the reference prompts Q_ref,
   ℓ_h = mean_x σ(w_h·q_x + b_h); a least-squares line over the experts with a published
   figure,

       ℓ ≈ slope·A + intercept,   residual_sd = sqrt(Σ (ℓ_h − ℓ̂_h)² / (k − 2)),

   puts a new backend's published figure on the router's scale before
   ``prior_from_aggregate`` matches its level on Q_ref.
3. ``n0``: the aggregate prior's pseudo-count, measured the way the gateway places a new
   backend (gateway/pool/promise.py): each published expert h is placed by
   ``prior_from_aggregate`` from its mapped figure ℓ̂_h = slope·A_h + intercept among all
   other trained experts at their own levels ℓ_g, and its prior p̂ is compared with its
   trained p̂ on the validation prompts (``trained.placed_prior_pseudo_count``, the formula
   of ``aggregate_prior_pseudo_count``)

       n₀ = mean p̂_prior(1 − p̂_prior) / mean (p̂_prior − p̂_trained)² − 1,

   so n0 includes the line's own error. ``aggregate_prior_pseudo_count`` itself (every expert
   placed at its mapped figure among the published ones at theirs) is reported beside it.
4. ``rules``: per promise, (z, τ) from ``choose_rule`` on two cases per source dataset's
   validation rows, each of which must keep the promise, since the artifact serves both
   kinds of pool:

   - pseudo-frontier: the K strongest trained experts by validation mean quality go on
     aggregate priors (their published figure mapped by the line, else their validation
     mean standing in) placed among the other trained experts at their levels, the
     strongest is the reference, the rest keep their trained beliefs (a config whose
     frontier backends the router never saw, as the packaged one);
   - all trained: every expert on its trained belief, the strongest the reference (a config
     of the router's own experts, as `tollgate demo`'s). A trained expert's pseudo-count
     measures its calibration by bins of p̂, not its error on one prompt, so its bounds are
     narrower than its per-prompt error: on RouterBench the rule chosen on the
     pseudo-frontier case alone realized a drop of 0.05 for `auto` (0.01) on the all-trained
     pool's validation prompts (issue 34).

   Outcomes are the rows'.

Q_ref is the artifact's probe prompts (probes.json) projected by the router: the gateway can
encode them at startup and so reproduce the level map and the priors' levels exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from router_core.promise.confidence import (
    Case,
    choose_confidence,
    realized,
    tolerance_for,
)
from router_core.promise.logit_belief import TrainedBelief, stack_estimates
from router_core.promise.priors import prior_from_aggregate
from router_core.promise.rule import PROMISES
from router_core.promise.trained import (
    N_MIN,
    aggregate_prior_pseudo_count,
    placed_prior_pseudo_count,
    trained_pseudo_count,
)

PSEUDO_FRONTIER = 2  # experts put on priors per case (bench/routing/promise.py's --hold-out)
MIN_OBSERVED = 0.95  # an expert joins a case's pool when observed on this share of its rows
MIN_LINE = 3  # fewer published experts: the identity line (no residual to measure)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


@dataclass(frozen=True)
class LevelMap:
    """ℓ ≈ slope·A + intercept (module docstring, 2); ``points``: model → (A, ℓ)."""

    slope: float
    intercept: float
    residual_sd: float | None
    points: Mapping[str, tuple[float, float]]
    note: str | None = None  # why the line is the identity, when it is

    def __call__(self, published: float) -> float:
        """The router-scale level of a published figure, kept inside (0, 1)."""
        return float(np.clip(self.slope * published + self.intercept, 1e-3, 1 - 1e-3))

    def to_dict(self) -> dict:
        return {
            "slope": round(self.slope, 6),
            "intercept": round(self.intercept, 6),
            "residual_sd": None if self.residual_sd is None else round(self.residual_sd, 6),
            "models": sorted(self.points),
            "note": self.note,
            "points": {
                m: [round(a, 4), round(lv, 4)] for m, (a, lv) in sorted(self.points.items())
            },
        }


def fit_level_map(published: Mapping[str, float], level: Mapping[str, float]) -> LevelMap:
    """Least squares ℓ = slope·A + intercept over models with both; the identity line when
    fewer than MIN_LINE, no spread in A, or a fitted slope ≤ 0 (published capability would
    rank backends backwards; gateway/pool/promise.py falls back the same way), its residual
    sd then that of ℓ − A."""
    pts = {m: (float(a), float(level[m])) for m, a in published.items() if m in level}
    if len(pts) < MIN_LINE:
        return LevelMap(1.0, 0.0, None, pts)
    x = np.array([a for a, _ in pts.values()])
    y = np.array([lv for _, lv in pts.values()])
    sxx = float(((x - x.mean()) ** 2).sum())
    if sxx <= 0:
        return LevelMap(1.0, 0.0, None, pts)
    slope = float(((x - x.mean()) * (y - y.mean())).sum()) / sxx
    intercept = float(y.mean() - slope * x.mean())
    note = None
    if slope <= 0:
        note = f"identity: the fitted slope {slope:.4f} is not positive"
        slope, intercept = 1.0, 0.0
    resid = y - (slope * x + intercept)
    return LevelMap(slope, intercept, float(np.sqrt((resid**2).sum() / (len(x) - 2))), pts, note)


def trained_counts(P: np.ndarray, Y: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    """Expert → n from its validation p̂ (column of P) against its observed outcomes."""
    return {m: round(trained_pseudo_count(P[:, j], Y[:, j]), 2) for j, m in enumerate(names)}


def prior_n0(
    W: np.ndarray,
    b: np.ndarray,
    names: Sequence[str],
    mapped: Mapping[str, float],
    levels: Mapping[str, float],
    Q_ref: np.ndarray,
    Q_val: np.ndarray,
) -> float:
    """n₀ as the gateway places a prior (module docstring, 3), in [N_MIN, N0_MAX]."""
    names = list(names)
    placed = {names.index(m): target for m, target in mapped.items()}
    lv = np.array([levels[m] for m in names])
    return placed_prior_pseudo_count(W, b, placed, lv, Q_ref, Q_val)


def published_n0(
    W: np.ndarray,
    b: np.ndarray,
    names: Sequence[str],
    mapped: Mapping[str, float],
    Q_ref: np.ndarray,
    Q_val: np.ndarray,
) -> float:
    """``aggregate_prior_pseudo_count`` among the published experts at their mapped figures."""
    idx = [list(names).index(m) for m in mapped]
    if len(idx) < 2:
        return N_MIN
    agg = np.array(list(mapped.values()))
    return aggregate_prior_pseudo_count(W[idx], b[idx], agg, Q_ref, Q_val)


@dataclass(frozen=True)
class FrontierCase:
    """One pseudo-frontier case and how its priors were placed."""

    name: str
    case: Case
    pool: tuple[str, ...]  # frontier (reference first), then the trained rest
    figures: Mapping[str, tuple[float, str]]  # frontier expert → (router-scale level, from)


def frontier_case(
    name: str,
    rows: np.ndarray,
    *,
    Q: np.ndarray,
    Y: np.ndarray,
    C: np.ndarray,
    names: Sequence[str],
    W: np.ndarray,
    b: np.ndarray,
    trained_n: Mapping[str, float],
    mapped: Mapping[str, float],
    levels: Mapping[str, float],
    Q_ref: np.ndarray,
    n0: float,
    k: int = PSEUDO_FRONTIER,
) -> FrontierCase | None:
    """The case on ``rows`` (module docstring, 4), or None with fewer than k + 1 experts
    (or than two); k = 0 is the all-trained case.

    Q, Y, C: (n, ·) projected prompts, outcomes and costs of the validation rows (columns in
    ``names`` order); the pool is the experts observed on MIN_OBSERVED of ``rows``, and the
    case keeps the rows where all of them were."""
    names = list(names)
    seen = np.isfinite(Y[rows]) & np.isfinite(C[rows])
    obs = seen.mean(0) >= MIN_OBSERVED  # a few missing rows do not drop an expert…
    rows = rows[seen[:, obs].all(1)]  # …the rows do
    here = [m for j, m in enumerate(names) if obs[j]]
    if len(here) < max(k + 1, 2) or len(rows) < 2:
        return None
    mean_q = {m: float(Y[rows, names.index(m)].mean()) for m in here}
    order = sorted(here, key=lambda m: -mean_q[m])
    frontier, rest = order[:k], order[k:]
    known = [m for m in names if m not in frontier]  # neighbours at their own levels
    kn = [names.index(m) for m in known]
    agg_known = np.array([levels[m] for m in known])
    figures, beliefs = {}, []
    for m in frontier:
        fig = (mapped[m], "published, mapped") if m in mapped else (mean_q[m], "val mean")
        figures[m] = fig
        beliefs.append(prior_from_aggregate(fig[0], W[kn], b[kn], agg_known, Q_ref, n0))
    for m in rest:
        j = names.index(m)
        beliefs.append(TrainedBelief(W[j], float(b[j]), trained_n[m]))
    P, N = stack_estimates(beliefs, Q[rows])
    cols = [names.index(m) for m in frontier + rest]
    paid = C[np.ix_(rows, cols)]
    case = Case(P, N, Y[np.ix_(rows, cols)], paid.mean(0), 0, paid)
    return FrontierCase(name, case, tuple(frontier + rest), figures)


def choose_rules(cases: Sequence[FrontierCase], promises: Mapping[str, float] = PROMISES
                 ) -> dict[str, dict]:  # fmt: skip
    """Per promise: z* from ``choose_confidence`` over every case (each must keep it; the
    saving that breaks ties is the mean over the cases' own pools, so neither kind of pool
    decides alone), τ(z*) the smallest over the cases (the artifact has no pool of its own;
    the gateway narrows it on its pool: gateway/pool/promise.py). Also the worst realized
    drop and the smallest saving on the cases. z = ∞: the route keeps its reference."""
    out = {}
    for drop in sorted(set(promises.values())):
        z = choose_confidence([[c.case] for c in cases], [c.case for c in cases], drop)
        taus = [tolerance_for(c.case.P, c.case.N, c.case.cost, c.case.ref, drop, z)
                for c in cases]  # fmt: skip
        tau = min(taus)
        runs = [realized(c.case, tau, z) for c in cases]
        out[f"{drop:g}"] = {
            "z": float(z),
            "tolerance": round(float(tau), 6),
            "val_drop": round(max(d for d, _, _ in runs), 5),
            "val_saving": round(min(s for _, _, s in runs), 5),
        }
    return out


def measure_promise(
    *,
    names: Sequence[str],
    W: np.ndarray,
    b: np.ndarray,
    Q_val: np.ndarray,
    Y_val: np.ndarray,
    C_val: np.ndarray,
    groups: np.ndarray,
    Q_ref: np.ndarray,
    published: Mapping[str, float],
    k: int = PSEUDO_FRONTIER,
) -> tuple[dict, list[FrontierCase]]:
    """Everything of the module docstring: the ``promise`` block (without the provenance
    keys the caller adds) and the cases the rules were chosen on.

    Args:
        names: the router's experts; W, b: their readouts (``router_weights``).
        Q_val, Y_val, C_val: projected validation prompts (n, d), outcomes and costs (n, m)
            in ``names`` order, NaN where an expert was not observed.
        groups: (n,) the source dataset of each validation row (one case per group).
        Q_ref: projected reference prompts (the artifact's probes).
        published: expert → its published capability (only experts that have one).
    """
    names = list(names)
    W, b = np.asarray(W, float), np.asarray(b, float)
    P_val = _sigmoid(Q_val @ W.T + b)
    trained_n = trained_counts(P_val, Y_val, names)
    levels = dict(zip(names, _sigmoid(Q_ref @ W.T + b).mean(0).tolist(), strict=True))
    pub = {m: float(v) for m, v in published.items() if m in names}
    line = fit_level_map(pub, levels)
    mapped = {m: line(a) for m, a in pub.items()}
    n0 = prior_n0(W, b, names, mapped, levels, Q_ref, Q_val)
    n0_published = published_n0(W, b, names, mapped, Q_ref, Q_val)
    cases = []
    for g in dict.fromkeys(np.asarray(groups).tolist()):
        rows = np.flatnonzero(np.asarray(groups) == g)
        for name, on_priors in ((str(g), k), (f"{g}, all trained", 0)):
            c = frontier_case(name, rows, Q=Q_val, Y=Y_val, C=C_val, names=names, W=W, b=b,
                              trained_n=trained_n, mapped=mapped, levels=levels, Q_ref=Q_ref,
                              n0=n0, k=on_priors)  # fmt: skip
            if c is not None:
                cases.append(c)
    if not cases:
        raise ValueError("no validation rows where more than k experts are all observed")
    block = {
        "trained_n": trained_n,
        "n0": round(float(n0), 3),
        "n0_among_published": round(float(n0_published), 3),
        "level_map": line.to_dict(),
        "rules": choose_rules(cases),
        "cases": {
            c.name: {
                "prompts": len(c.case.P),
                "reference": c.pool[0],
                "frontier": {
                    m: {"level": round(v, 4), "from": how} for m, (v, how) in c.figures.items()
                },
                "pool": list(c.pool),
            }
            for c in cases
        },
    }
    return block, cases
