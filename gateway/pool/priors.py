"""Cold-start priors: every priced backend the router does not know joins on a prior expert.

``with_priors(router, settings, prices, exclude)`` returns the router with one ``prior`` expert
per priced backend it cannot route as (gateway/pool/known.py), named after the backend and
placed by router_core's cold start from what is known before any outcome: the family and size
its model name says, its price (config or litellm's model info). ``build_pool`` applies it, at
startup and on every hot swap, so a backend is routable from its first request. Refining a
prior from outcomes is the learning loop's (gateway/learning/refine_priors.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from gateway.config import Backend, Settings
from gateway.pool.known import COLD_START_KEY, LEARNED_KIND, PRIOR_KIND, expert_for, outcomes_of
from gateway.pricing import Price
from router_core.cold_start.placement import (
    Placement,
    identity_traits,
    place_prior,
    traits_from_name,
)
from router_core.identity.table import identity_table
from router_core.runtime.router import Router

TYPICAL_TOKENS = (500, 256)  # prompt, completion: the expert's nominal cost per query


def known_traits(router: Router) -> dict:
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
    """The trait prior of backend ``b`` among ``router``'s experts learned from outcomes."""
    traits = traits_from_name(b.litellm_model, usd_out=price.output_per_token * 1e6)
    base = router
    kinds = {e.name: e.kind for e in router.experts}
    for name in router.model_names:  # place among experts learned from outcomes only
        if kinds[name] in (PRIOR_KIND, LEARNED_KIND) and name in outcomes_of(router):
            base = base.without_expert(name)
    return place_prior(base, traits, known_traits(router))


def with_priors(router: Router, settings: Settings, prices: Mapping[str, Price],
                exclude: Collection[str] = ()) -> Router:
    """``router`` plus a prior expert for every priced backend it cannot route as, but those
    in ``exclude`` (the exploration judge grades answers: it is not routed to)."""
    counts = dict(outcomes_of(router))
    start = router
    for b in settings.model_list:
        price = prices.get(b.model_name)
        if price is None or b.model_name in exclude or expert_for(b, router) is not None:
            continue
        prior = prior_for(router, b, price)
        cost = price.cost(*TYPICAL_TOKENS)
        router = router.with_expert(prior.expert(b.model_name, cost, PRIOR_KIND), a=prior.a,
                                    b=prior.b)  # fmt: skip
        counts[b.model_name] = 0
    if router is start:
        return router
    return replace(router, config={**dict(router.config or {}), COLD_START_KEY: counts})
