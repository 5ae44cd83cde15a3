"""A route's promise against its reference, and how well the pool knows each backend.

A route with ``max_drop`` promises realized quality within ``max_drop`` of its reference
backend's, as cheaply as possible (DESIGN.md, "Routes: a promise against a reference"). The
rule that keeps it per request is router_core.promise's: each backend's quality on a prompt
is a belief (p̂, pseudo-count n), and the route takes the cheapest backend it is confident is
within the drop of the reference (gateway/serving/plan/promise_routing.py). This module builds,
once per pool, what that rule reads:

- ``Quality`` per expert: its belief and how it is known: ``trained`` (the router learned it
  from outcomes; n measured on validation prompts), ``prior from published results`` (the
  backend's published aggregate figure, router_core/identity/capability.yaml, put on the
  router's scale by the line through the trained experts that have both, then placed among
  its capability neighbours), ``prior from a vendor claim`` (no number sourced, but the
  vendor relates it to a model with one: that model's figure, half the pseudo-outcomes, and
  never above the lowest published level of the pool, ``claim_ceiling``),
  ``prior from price only`` (last resort: one pseudo-outcome, so
  it is neither assumed adequate as a candidate nor weak as a reference), ``refined by n
  outcomes`` (a cold-start expert the learning loop refitted).
- ``RoutePromise`` per promising route: its reference (named in config, else the strongest
  backend by what is known, a claim or a price not counting as known; a dearer backend known
  by price or claim alone is never assumed weaker),
  its drop, and the rule's confidence z and per-prompt tolerance, measured for the artifact
  by scripts/route_promises.py (``router.config["promise"]``) or, without them, the
  conservative defaults below.

The level of each estimate is its mean p̂ over reference prompts: the artifact's probe prompts
embedded once at startup (``phi_ref``), else the experts' own directions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gateway.config import Backend, Settings
from gateway.pool.known import PRIOR_KIND, Known, outcomes_of
from gateway.pool.priors import TYPICAL_TOKENS
from gateway.pricing import Price
from router_core.identity.capability import benchmark_map, capability
from router_core.promise import (
    LogitBelief,
    TrainedBelief,
    prior_from_aggregate,
    prior_from_price,
    promise_choice,
    router_weights,
    stack_estimates,
    tolerance_for,
)
from router_core.promise.priors import closeness_weights
from router_core.runtime.router import Router

TRAINED_N = 20.0  # a trained expert's pseudo-count when the artifact has none measured
PRIOR_N0 = 2.0  # an aggregate prior's, likewise
PRICE_N0 = 1.0  # a prior from price alone: one pseudo-outcome
DEFAULT_Z = 3.0  # the rule's confidence when the artifact has none measured for the drop
# a prior on a vendor's ordering claim ("outperforms X") holds half the pseudo-outcomes of
# one on a published score: the claim is a floor or a likeness, usually on other benchmarks
CLAIM_WEIGHT = 0.5
UNINFORMED = ("prior from price", "prior from a vendor claim")  # never the default reference


@dataclass(frozen=True)
class Quality:
    """How well the pool knows one expert: its belief, how, and its level (mean p̂)."""

    belief: TrainedBelief | LogitBelief
    how: str
    level: float
    prior: LogitBelief | None = None  # a cold-start expert's belief before any outcome


def belief_before_outcomes(q: Quality) -> TrainedBelief | LogitBelief:
    """The belief ``q``'s expert had before any outcome: its prior where outcomes refined it
    (a published belief with ``n_outcomes`` > 0), else the belief it routes on (a prior, a
    claim no outcome has checked yet, or a trained expert). The promise rule's careful view
    (router_core.promise.rule: evidence narrows the rule, never widens it)."""
    refined = (q.prior is not None and q.belief is not q.prior
               and getattr(q.belief, "n_outcomes", 0) > 0)  # fmt: skip
    return q.prior if refined else q.belief


BELIEFS_KEY = "promise_beliefs"  # router.config[...]: expert -> its refined belief's record


def belief_record(b: LogitBelief) -> dict[str, Any]:
    """A refined belief as plain JSON, to travel in the router version it was published in."""
    return {"coef": b.coef.tolist(), "b": b.b, "chol": b.chol.tolist(),
            "basis": None if b.basis is None else b.basis.tolist(), "how": b.how,
            "n_outcomes": b.n_outcomes, "level": b.level,
            "n_cap": None if not np.isfinite(b.n_cap) else b.n_cap}


def belief_from_record(r: Mapping[str, Any]) -> LogitBelief:
    return LogitBelief(coef=np.asarray(r["coef"], float), b=float(r["b"]),
                       chol=np.asarray(r["chol"], float),
                       basis=None if r.get("basis") is None else np.asarray(r["basis"], float),
                       how=str(r.get("how", "refined")), n_outcomes=int(r.get("n_outcomes", 0)),
                       level=float(r.get("level", 0.5)),
                       n_cap=np.inf if r.get("n_cap") is None else float(r["n_cap"]))


@dataclass(frozen=True)
class RoutePromise:
    """Realized quality within ``max_drop`` of ``reference``'s; the rule's z and tolerance."""

    route: str
    reference: str  # a backend
    max_drop: float
    z: float
    tolerance: float
    reference_chosen: str  # "named in config" or why it is the strongest

    def describe(self) -> str:
        return f"within {self.max_drop:g} of {self.reference} ({self.reference_chosen})"


def reference_queries(router: Router, phi_ref: np.ndarray | None) -> np.ndarray:
    """Q_ref: the reference prompts through the head, else the experts' own directions."""
    if phi_ref is not None and len(phi_ref):
        return router.project(np.asarray(phi_ref, dtype=np.float32)).astype(float)
    return np.stack([np.asarray(e.descriptor, dtype=float) for e in router.experts])


def published_figure(b: Backend) -> tuple[float, str, bool] | None:
    """(value on the MMLU-Pro scale, how, whether it is only a vendor's claim) from the
    first of the backend's names the capability table knows (exact names and aliases)."""
    base = (b.model_info.model_extra or {}).get("base_model")
    for name in (b.model_name, b.litellm_model, *( [str(base)] if base else [])):
        cap = capability(name)
        if cap is not None:
            how = f"{cap.how} {cap.value:.3f} ({cap.source_title})"
            source = cap.how.removeprefix("mapped from ") if cap.how.startswith("mapped") else None
            line = benchmark_map(source) if source else None
            if line is not None:  # the conversion, stated: the fitted line and its residual
                label = {"mmlu": "MMLU", "gpqa_diamond": "GPQA-Diamond"}.get(source, source)
                how += (f" by MMLU-Pro = {line.slope:.2f}·{label} {line.intercept:+.2f}, fitted on "
                        f"{len(line.models)} models with both, residual ±{line.residual_sd:.2f}")
            return cap.value, how, cap.claim is not None
    return None


def _level_line(levels: dict[str, float], figures: dict[str, float]) -> tuple[float, float]:
    """p̄ ≈ α·A + β through the trained experts with a published figure A (least squares);
    the identity when fewer than three have one."""
    both = [m for m in levels if m in figures]
    if len(both) < 3:
        return 1.0, 0.0
    A = np.array([figures[m] for m in both])
    p = np.array([levels[m] for m in both])
    alpha, beta = np.polyfit(A, p, 1)
    return (float(alpha), float(beta)) if alpha > 0 else (1.0, 0.0)


def _placed_level(figure: float, models: list[str], figures: Mapping[str, float],
                  levels: Mapping[str, float], alpha: float) -> float:
    """The router-scale level of a published ``figure``: from its capability neighbours'
    levels, each moved along the line by the figure's distance from theirs,

        p̄ = Σ_h κ_h (p̄_h + α (A − A_h)),   κ_h ∝ exp(−(A − A_h)² / 2β²)

    so a model published above its neighbours is placed above them, whatever the global
    line's intercept (router_core.promise.priors' closeness weights)."""
    if not models:
        return float(np.clip(figure, 0.02, 0.98))
    A = np.array([figures[m] for m in models])
    kappa = closeness_weights(figure, A)
    placed = np.array([levels[m] for m in models]) + alpha * (figure - A)
    return float(np.clip(kappa @ placed, 0.02, 0.98))


def claim_ceiling(published_levels: list[float]) -> float:
    """The highest level a prior on a vendor's claim alone may take: the lowest level of the
    pool's backends known by a published figure (trained experts with one, and priors from
    published results), so a claim never outranks a published figure (issue 46). A sentence
    is not a measurement: a claim-only backend starts below everything measured, and judged
    outcomes move it (the learning loop refines it at its first ones); ∞ when nothing in the
    pool is published."""
    return min(published_levels, default=float("inf"))


def backend_qualities(router: Router, known: Mapping[str, Known], settings: Settings,
                      prices: Mapping[str, Price], Q_ref: np.ndarray) -> dict[str, Quality]:
    """expert -> Quality for every expert a priced backend routes as (module docstring)."""
    params = dict((router.config or {}).get("promise") or {})
    trained_n = {str(k): float(v) for k, v in dict(params.get("trained_n") or {}).items()}
    n0 = float(params.get("n0", PRIOR_N0))
    W, b = router_weights(router)
    index = {name: i for i, name in enumerate(router.model_names)}
    kinds = {e.name: e.kind for e in router.experts}
    counts = outcomes_of(router)
    refined = dict((router.config or {}).get(BELIEFS_KEY) or {})
    out: dict[str, Quality] = {}
    for name in router.model_names:
        if kinds[name] != PRIOR_KIND and name not in counts:
            i = index[name]
            belief = TrainedBelief(W[i], float(b[i]), trained_n.get(name, TRAINED_N))
            out[name] = Quality(belief, "trained", float(belief.estimate(Q_ref)[0].mean()))
    trained = list(out)
    if not trained:
        return out
    backends = {k.expert: settings.backend(k.backend) for k in known.values() if k.expert}
    figures = {}
    for m in trained:
        fig = published_figure(backends[m]) if m in backends else None
        cap = fig or ((v.value, "", v.claim is not None) if (v := capability(m)) else None)
        if cap is not None and not cap[2]:  # a vendor's claim never fits the level line
            figures[m] = cap[0]
    levels = {m: out[m].level for m in trained}
    alpha, _ = _level_line(levels, figures)
    with_fig = [m for m in trained if m in figures]
    Wk = np.stack([W[index[m]] for m in trained])
    bk = np.array([b[index[m]] for m in trained])
    pk = np.array([levels[m] for m in trained])
    usd_k = np.array([max(e.cost_usd, 1e-12) for e in router.experts if e.name in levels])
    # no readout is known better than a trained expert: a refined prior's n stops there
    n_cap = float(np.median([out[m].belief.n for m in trained]))
    cold: dict[str, Known] = {}  # expert -> its first backend (model_list order)
    for k in known.values():
        if k.expert is not None and k.expert not in out and k.backend in prices:
            cold.setdefault(k.expert, k)
    figs = {e: published_figure(settings.backend(k.backend)) for e, k in cold.items()}
    placed = {e: _placed_level(f[0], with_fig, figures, levels, alpha)
              for e, f in figs.items() if f is not None}
    ceiling = claim_ceiling([levels[m] for m in with_fig if m in backends]
                            + [placed[e] for e, f in figs.items() if f is not None and not f[2]])
    for k in cold.values():
        fig = figs[k.expert]
        if fig is not None:
            target = min(placed[k.expert], ceiling) if fig[2] else placed[k.expert]
            n_prior = n0 * CLAIM_WEIGHT if fig[2] else n0
            prior = prior_from_aggregate(target, Wk, bk, pk, Q_ref, n_prior)
            how = f"prior from a {fig[1]}" if fig[2] else f"prior from published results: {fig[1]}"
            if fig[2] and target < placed[k.expert]:
                how += f", capped at {target:.3f}, the lowest level the pool knows by a published figure"
        else:
            usd = prices[k.backend].cost(*TYPICAL_TOKENS)
            n_prior = PRICE_N0
            prior = prior_from_price(usd, Wk, bk, pk, usd_k, Q_ref, n_prior)
            how = "prior from price only"
        prior = replace(prior, n_cap=n_cap)
        belief = prior
        if k.expert in refined:  # published by the learning loop (learning/refine_priors.py)
            belief = belief_from_record(refined[k.expert])
            # a published belief is worth its prior and the outcomes it saw, no more: one
            # that says it matches a trained expert from no outcomes is a claim, and is
            # weighed as one (it routes only where that little is within the promise)
            earned = n_prior + belief.n_outcomes
            belief = replace(belief, n_cap=min(belief.n_cap, n_cap, earned))
            how += f", refined by {belief.n_outcomes} outcomes"
        out[k.expert] = Quality(belief, how, float(belief.estimate(Q_ref)[0].mean()), prior)
    return out


def default_reference(route_backends: list[str], known: Mapping[str, Known],
                      qualities: Mapping[str, Quality], prices: Mapping[str, Price]) -> tuple[str, str]:
    """(backend, why): the strongest by what is known; a dearer backend known by price or a
    vendor's claim alone is taken instead (an unknown reference is never assumed weak)."""
    def usd(name: str) -> float:
        return prices[name].cost(*TYPICAL_TOKENS)

    ranked = [(qualities[known[n].expert], n) for n in route_backends
              if known[n].expert in qualities]
    informed = [(q.level, n) for q, n in ranked if not q.how.startswith(UNINFORMED)]
    if informed:
        level, best = max(informed)
        dearer_unknown = [n for q, n in ranked
                          if q.how.startswith(UNINFORMED) and usd(n) > usd(best)]
        if not dearer_unknown:
            return best, f"strongest known: mean p̂ {level:.3f}"
    best = max((n for _, n in ranked), key=usd)
    return best, "dearest, its quality known by price alone"


def pool_tolerance(members: list[str], ref: str, known: Mapping[str, Known],
                   beliefs: Mapping[str, Any], prices: Mapping[str, Price],
                   max_drop: float, z: float, Q_ref: np.ndarray) -> float:
    """τ(z) of a pool on its reference prompts (router_core.promise.confidence's
    ``tolerance_for``: the widest per-prompt tolerance whose routing keeps the mean
    pessimistic drop bound within ``max_drop``) from ``beliefs`` (expert -> belief); ∞ when
    the pool has nothing to say (its reference not among ``members``, or alone)."""
    by_expert: dict[str, str] = {}
    for n in members:
        by_expert.setdefault(known[n].expert, n)
    if ref not in members or len(by_expert) < 2:
        return float("inf")
    experts = list(by_expert)
    P, N = stack_estimates([beliefs[e] for e in experts], Q_ref)
    cost = np.array([prices[by_expert[e]].cost(*TYPICAL_TOKENS) for e in experts])
    return tolerance_for(P, N, cost, experts.index(known[ref].expert), max_drop, z)


def learned_tolerance(tolerance: float, members: list[str], ref: str,
                      known: Mapping[str, Known], qualities: Mapping[str, Quality],
                      prices: Mapping[str, Price], max_drop: float, z: float,
                      Q_ref: np.ndarray) -> float:
    """The artifact's τ, narrowed by what the beliefs published since (a claim, a refined
    prior: ``BELIEFS_KEY``) took from the pool's own τ(z) on the reference prompts:

        τ = max(max_drop, τ_artifact − max(0, τ(z | priors) − τ(z | beliefs)))

    τ follows the pool's bounds (router_core.promise.confidence) and the artifact measured it
    for the pool as it starts, each cold-start backend on its prior; a published belief that
    no outcome has checked (a claim that a cheap backend matches the strongest, its bounds
    as wide as a prior's around a p̂ far too high) makes the pool's bounds worse than that,
    and the route's τ narrows by as much. Never wider than the artifact's: the reference
    prompts are fewer than the validation prompts it was measured on, and a pool the loop
    has not changed keeps the measured τ exactly."""
    current = {e: q.belief for e, q in qualities.items()}
    start = {e: q.prior if q.prior is not None else q.belief for e, q in qualities.items()}
    if all(current[e] is start[e] for e in current):
        return tolerance
    now = pool_tolerance(members, ref, known, current, prices, max_drop, z, Q_ref)
    before = pool_tolerance(members, ref, known, start, prices, max_drop, z, Q_ref)
    if not (np.isfinite(now) and np.isfinite(before)):
        return tolerance
    return max(float(max_drop), tolerance - max(0.0, before - now))


def route_promises(settings: Settings, known: Mapping[str, Known],
                   qualities: Mapping[str, Quality], prices: Mapping[str, Price],
                   router_config: Mapping[str, Any], Q_ref: np.ndarray | None = None
                   ) -> dict[str, RoutePromise]:
    """route -> its promise, for the routes with ``max_drop`` that have a known backend.

    z and τ are the route's, measured for the artifact (scripts/route_promises.py); with
    reference prompts (``Q_ref``), τ narrows as far as published beliefs worsened the pool's
    own bounds (``learned_tolerance``)."""
    rules = dict(dict(router_config.get("promise") or {}).get("rules") or {})
    out = {}
    for name, route in settings.routes.items():
        if route.max_drop is None:
            continue
        members = [b.model_name for b in settings.route_backends(name)
                   if b.model_name in prices and known[b.model_name].expert in qualities]
        if not members:
            continue
        if route.reference is not None:
            ref, why = route.reference, "named in config"
        else:
            ref, why = default_reference(members, known, qualities, prices)
        rule = dict(rules.get(f"{route.max_drop:g}") or {})
        z = float(rule.get("z", DEFAULT_Z))
        tolerance = float(rule.get("tolerance", route.max_drop))
        if Q_ref is not None and len(Q_ref) and np.isfinite(z):
            tolerance = learned_tolerance(tolerance, members, ref, known, qualities, prices,
                                          route.max_drop, z, Q_ref)
        out[name] = RoutePromise(name, ref, route.max_drop, z, tolerance, why)
    return out


CLAIM_HOW = "prior from a vendor claim"


def claim_carried(settings: Settings, known: Mapping[str, Known],
                  qualities: Mapping[str, Quality], prices: Mapping[str, Price],
                  promises: Mapping[str, RoutePromise], Q_ref: np.ndarray
                  ) -> dict[str, dict[str, float]]:
    """route -> {backend known by a vendor's claim alone: the share of the reference prompts
    the route's rule sends it}, for every promising route with such a backend among its
    members (an empty dict when the rule sends them none): where the route's saving rests on
    a sentence no outcome has checked (issue 46; the startup block prints it)."""
    out: dict[str, dict[str, float]] = {}
    for name, promise in promises.items():
        by_expert: dict[str, str] = {}
        for b in settings.route_backends(name):
            k = known.get(b.model_name)
            if b.model_name in prices and k is not None and k.expert in qualities:
                by_expert.setdefault(k.expert, b.model_name)
        claimed = [e for e in by_expert if qualities[e].how.startswith(CLAIM_HOW)]
        ref = known[promise.reference].expert if promise.reference in known else None
        if not claimed or ref not in by_expert or not len(Q_ref):
            continue
        experts = list(by_expert)
        P, N = stack_estimates([qualities[e].belief for e in experts], Q_ref)
        before = stack_estimates([belief_before_outcomes(qualities[e]) for e in experts],
                                 Q_ref)  # the careful view, as serving decides
        cost = np.array([prices[by_expert[e]].cost(*TYPICAL_TOKENS) for e in experts])
        chosen = promise_choice(P, N, cost, experts.index(ref), promise.tolerance, promise.z,
                                before)  # fmt: skip
        share = {by_expert[e]: float(np.mean(chosen == experts.index(e))) for e in claimed}
        out[name] = {b: s for b, s in share.items() if s > 0}
    return out
