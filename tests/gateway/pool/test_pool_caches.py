"""A pool's caches belong to that one value: a copy made with ``dataclasses.replace`` (other
prices, other qualities) starts with empty caches, never the original's entries.

Before, ``replace`` carried both dicts over: a copy with other prices answered ``concrete``
with the original's pool of the wildcard-matched model (priced the original's way), and the
stacked beliefs were shared by every copy. The pool is a real one (``build_pool`` over the
fake router, a wildcard backend beside the priced ones).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gateway.config import settings_from_dict
from gateway.pool import build_pool
from gateway.pricing import Price
from tests.gateway.router_fixture import PRICES, build_router

MODEL_LIST = [{"model_name": n, "litellm_params": {"model": f"openai/{n}"},
               "model_info": {"input_cost_per_million": i, "output_cost_per_million": o}}
              for n, (i, o) in PRICES.items()]
WILDCARD = {"model_name": "acme/*", "litellm_params": {"model": "openai/*"},
            "model_info": {"input_cost_per_million": 1.0, "output_cost_per_million": 2.0}}
PRICED = {n: Price(i * 1e-6, o * 1e-6) for n, (i, o) in PRICES.items()}


def _pool():
    settings = settings_from_dict({"model_list": [*MODEL_LIST, WILDCARD],
                                   "routes": {"auto": {"max_drop": 0.01}}})
    return build_pool(settings, PRICED, build_router())


def test_a_replaced_pool_does_not_see_the_originals_cache_entries() -> None:
    pool = _pool()
    first = pool.concrete("acme/x")
    assert first is not None and pool.concrete("acme/x") is first  # cached on this value
    experts = tuple(sorted(pool.qualities))
    stack = pool.belief_stack(experts)
    assert pool.belief_stack(experts) is stack

    dearer = {**pool.prices, "fake-cheap": Price(9e-6, 9e-6)}
    copy = replace(pool, prices=MappingProxyType(dearer))
    mine = copy.concrete("acme/x")
    assert mine is not None and mine is not first
    assert mine.prices["fake-cheap"] == Price(9e-6, 9e-6)  # built from the copy's prices
    assert first.prices["fake-cheap"] == PRICED["fake-cheap"]
    assert copy.belief_stack(experts) is not stack
    # and the original's caches did not take the copy's entries either
    assert pool.concrete("acme/x") is first and pool.belief_stack(experts) is stack
    assert mine.concrete("acme/y") is not pool.concrete("acme/y")
