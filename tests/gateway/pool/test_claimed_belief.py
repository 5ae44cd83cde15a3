"""A published belief is worth its prior and the outcomes it was refined from, no more.

The live loop's wrong prior (bench/routing/wrong_prior_loop.py) is a belief record claiming a
cheap backend matches the strongest: the strongest's own readout and pseudo-count, from no
outcomes. Taken at its word, the promise rule was as sure of it as of a trained expert and
sent it a whole window of ``auto-cheap`` before the first refinement (realized drop 0.32).
Weighed as the claim it is, its pseudo-count is its prior's; the pool here is a real one
(``build_pool`` over the fake router and a backend the router does not know).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gateway.config import settings_from_dict
from gateway.pool import build_pool
from gateway.pool.promise import BELIEFS_KEY, PRICE_N0, belief_record, reference_queries
from gateway.pricing import Price
from router_core.promise import LogitBelief, TrainedBelief, router_weights
from tests.gateway.router_fixture import PRICES, build_router

NEW, STRONG = "fake-new", "fake-strong"


def _pool(n_outcomes: int):
    entries = [{"model_name": n, "litellm_params": {"model": f"openai/{n}"}}
               for n in [*PRICES, NEW]]
    settings = settings_from_dict({"model_list": entries})
    prices = {n: Price(i * 1e-6, o * 1e-6) for n, (i, o) in PRICES.items()}
    prices[NEW] = Price(0.05e-6, 0.1e-6)
    router = build_router()
    W, b = router_weights(router, [STRONG])
    Q = reference_queries(router, None)
    n = 20.0  # the strong expert's pseudo-count (gateway/pool/promise.py TRAINED_N)
    level = float(TrainedBelief(W[0], float(b[0]), n).estimate(Q)[0].mean())
    claim = LogitBelief.prior(W[0], float(b[0]), level, n, f"claim: matches {STRONG}", None, Q)
    claim = replace(claim, n_cap=n, level=level, n_outcomes=n_outcomes)
    base = build_pool(settings, prices, router)
    cfg = {**dict(base.router.config or {}), BELIEFS_KEY: {NEW: belief_record(claim)}}
    return build_pool(settings, prices, replace(base.router, config=cfg)), Q


def test_a_claim_from_no_outcomes_is_weighed_as_a_prior() -> None:
    pool, Q = _pool(0)
    p, n = pool.qualities[NEW].belief.estimate(Q)
    strong_p, strong_n = pool.qualities[STRONG].belief.estimate(Q)
    assert np.allclose(p, strong_p, atol=0.05)  # the claim's readout is kept as published
    assert float(n.max()) <= PRICE_N0 + 1e-9  # but it is worth what a price prior is
    assert float(strong_n.mean()) > 10 * PRICE_N0


def test_outcomes_earn_a_published_belief_its_weight() -> None:
    pool, Q = _pool(40)
    _, n = pool.qualities[NEW].belief.estimate(Q)
    assert PRICE_N0 < float(n.max()) <= PRICE_N0 + 40
    assert "refined by 40 outcomes" in pool.qualities[NEW].how


ROUTE_RULE = {"z": 0.75, "tolerance": 0.5}  # the artifact's τ, as if measured without NEW


def _route_pool(claimed: bool):
    """A pool with a promising route over every backend, reference prompts and a rule (z, τ)
    in the artifact; NEW on its price prior, or on the claim that it matches STRONG."""
    pool, _ = _pool(0)
    router = pool.router
    rules = {"0.06": ROUTE_RULE}
    config = {**dict(router.config or {}),
              "promise": {**dict((router.config or {}).get("promise") or {}), "rules": rules}}
    if not claimed:
        config.pop(BELIEFS_KEY)
    entries = [{"model_name": n, "litellm_params": {"model": f"openai/{n}"}}
               for n in [*PRICES, NEW]]
    settings = settings_from_dict({"model_list": entries, "routes": {
        "cheap": {"max_drop": 0.06, "reference": STRONG}}})
    phi_ref = np.random.default_rng(0).normal(size=(64, 384)).astype(np.float32)
    return build_pool(settings, pool.prices, replace(router, config=config), phi_ref)


def test_an_unchecked_claim_narrows_the_routes_tolerance() -> None:
    """τ follows the pool's own bounds (router_core.promise.confidence): the artifact's τ was
    measured with NEW on its prior, and the claim's wide bounds around a p̂ far too high take
    from the pool's own τ(z) on the reference prompts; the route's τ narrows by as much. A
    pool the loop has not changed keeps the artifact's τ exactly."""
    claimed, plain = _route_pool(True), _route_pool(False)
    assert plain.promises["cheap"].tolerance == ROUTE_RULE["tolerance"]
    assert claimed.promises["cheap"].tolerance < ROUTE_RULE["tolerance"]
    from gateway.pool.promise import pool_tolerance
    members = [n for _, n in claimed.route_experts["cheap"]]
    Q = reference_queries(claimed.router, claimed.phi_ref)

    def own(pool) -> float:
        beliefs = {e: q.belief for e, q in pool.qualities.items()}
        return pool_tolerance(members, STRONG, pool.known, beliefs, pool.prices, 0.06,
                              ROUTE_RULE["z"], Q)

    narrowed = own(plain) - own(claimed)
    assert narrowed > 0
    assert claimed.promises["cheap"].tolerance == pytest.approx(
        max(0.06, ROUTE_RULE["tolerance"] - narrowed))
