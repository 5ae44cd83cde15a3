"""Cold start in the gateway: unknown backends join on a prior; outcomes refine them.

``with_priors(router, settings, prices)`` returns the router with one ``prior`` expert per
priced backend the router does not know (gateway/serving/known_backends.py), named after the
backend and placed by router_core/cold_start.py from what is known before any outcome: the
family and size its model name says, its price (config or litellm's model info). The app
applies it at startup and on every hot swap, so a backend is routable from the first request.

``refine_backend(engine, router, settings, prices, name)`` reads the outcomes the learning
loop gathered for that expert (shadow-judge calls and client feedback, ``observations``),
projects their prompts' stored Φ(x) through the current head, and refits the readout with the
trait prior as its mean (``router_core.cold_start.refine``): the new descriptor is hot-swapped,
the head is not retrained. Past ``min_outcomes`` the expert leaves the prior (kind
``readout``) and its traffic is no longer capped by ``routes.NAME.explore_share``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from gateway.config import Backend, Settings
from gateway.learning import router_versions
from gateway.learning import tables as ldb
from gateway.learning.shadow import ExplorationSettings
from gateway.pricing import Price
from gateway.serving.known_backends import (
    COLD_START_KEY,
    LEARNED_KIND,
    PRIOR_KIND,
    expert_for,
    outcomes_of,
)
from router_core.cold_start import (
    Placement,
    identity_traits,
    place_prior,
    refine,
    traits_from_name,
)
from router_core.model_identity import identity_table
from router_core.router import Router

MIN_OUTCOMES = 100  # outcomes after which a backend leaves its prior (bench/cold_start.py)
TYPICAL_TOKENS = (500, 256)  # prompt, completion: the expert's nominal cost per query


def _known_traits(router: Router) -> dict:
    """expert name -> traits, for the router's experts the identity table knows."""
    ids = identity_table()
    by_id = identity_traits(ids)
    out = {}
    for name in router.model_names:
        match = ids.resolve(name)
        if match is not None:
            out[name] = by_id[match.id]
    return out


def prior_for(router: Router, b: Backend, price: Price) -> Placement:
    """The trait prior of backend ``b`` among ``router``'s experts."""
    traits = traits_from_name(b.litellm_model, usd_out=price.output_per_token * 1e6)
    known = _known_traits(router)
    base = router
    for name in router.model_names:  # place among experts learned from outcomes only
        kind = next(e.kind for e in router.experts if e.name == name)
        if kind in (PRIOR_KIND, LEARNED_KIND) and name in outcomes_of(router):
            base = base.without_expert(name)
    return place_prior(base, traits, known)


def with_priors(router: Router, settings: Settings, prices: Mapping[str, Price]) -> Router:
    """``router`` plus a prior expert for every priced backend it cannot route as (but the
    exploration judge)."""
    counts = dict(outcomes_of(router))
    start = router
    judge = ExplorationSettings.from_settings(settings).judge.get("model")
    for b in settings.model_list:
        price = prices.get(b.model_name)
        if price is None or b.model_name == judge or expert_for(b, router) is not None:
            continue  # the exploration judge grades answers: it is not routed to
        prior = prior_for(router, b, price)
        cost = price.cost(*TYPICAL_TOKENS)
        router = router.with_expert(prior.expert(b.model_name, cost, PRIOR_KIND), a=prior.a,
                                    b=prior.b)  # fmt: skip
        counts[b.model_name] = 0
    if router is start:
        return router
    return replace(router, config={**dict(router.config or {}), COLD_START_KEY: counts})


def observed(engine: Any, router: Router, expert: str) -> tuple[np.ndarray, np.ndarray]:
    """(Q, quality) of every outcome recorded for ``expert``, Q through ``router``'s head."""
    obs = ldb.load_observations(engine)
    obs = obs[obs["model"] == expert]
    if obs.empty:
        return np.zeros((0, router.head.out_dim)), np.zeros(0)
    _, phi = ldb.load_prompts(engine, list(obs["prompt_key"]))
    return router.project(phi), obs["quality"].to_numpy(dtype=float)


def refine_backend(
    engine: Any,
    router: Router,
    settings: Settings,
    prices: Mapping[str, Price],
    name: str,
    min_outcomes: int = MIN_OUTCOMES,
) -> tuple[Router, int]:
    """``router`` with backend ``name``'s cold-start expert refined by its outcomes, and n."""
    b = settings.backend(name)
    if b is None or name not in prices:
        raise ValueError(f"no priced backend {name!r}")
    kinds = {e.name: e.kind for e in router.experts}
    if kinds.get(name) not in (PRIOR_KIND, LEARNED_KIND):
        raise ValueError(f"{name!r} is not on a cold-start prior (it is {kinds.get(name)!r})")
    Q, u = observed(engine, router, name)
    placed = refine(prior_for(router, b, prices[name]), Q, u)
    kind = LEARNED_KIND if placed.n_outcomes >= min_outcomes else PRIOR_KIND
    cost = prices[name].cost(*TYPICAL_TOKENS)
    out = router.with_expert(placed.expert(name, cost, kind), a=placed.a, b=placed.b)
    counts = {**outcomes_of(router), name: placed.n_outcomes}
    stamp = f"{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:4]}"
    version = f"{router.version.split('@', 1)[0]}@learn-{name}-{placed.n_outcomes}-{stamp}"
    config = {**dict(out.config or {}), COLD_START_KEY: counts}
    return replace(out, config=config, version=version), placed.n_outcomes


def cold_start_backends(router: Router, settings: Settings) -> list[str]:
    """The backends whose expert came from cold start (on its prior or refined past it)."""
    counts = outcomes_of(router)
    return [b.model_name for b in settings.model_list if b.model_name in counts]


def publish_refinement(
    engine: Any, router: Router, settings: Settings, prices: Mapping[str, Price], name: str
) -> tuple[Router, int]:
    """Refine backend ``name`` and record the result as the active router version, so every
    replica hot-swaps to it (gateway/learning/hotswap.py)."""
    new, n = refine_backend(engine, router, settings, prices, name)
    row = router_versions.active_version(engine) or {}
    router_versions.record_version(
        engine, new, status="learned", parent=router.version,
        metrics={"change": "learned", "backend": name, "n_outcomes": n},
        n_observations=int(row.get("n_observations") or 0),
        max_obs_id=int(row.get("max_observation_id") or 0), activate=True,
    )  # fmt: skip
    return new, n


def refine_due(engine: Any, router: Router, settings: Settings, prices) -> list[str]:
    """Refine every cold-start backend that has outcomes its descriptor has not seen yet."""
    done = []
    for name in cold_start_backends(router, settings):
        if name not in prices:
            continue
        _, u = observed(engine, router, name)
        if len(u) > outcomes_of(router).get(name, 0):
            router, _ = publish_refinement(engine, router, settings, prices, name)
            done.append(name)
    return done
