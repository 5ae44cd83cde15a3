"""A single-turn request has nothing cached: the backend that answered the same prompt before
does not hold it (gateway/serving/plan/planning.py ``ranked``).

Session affinity keeps a conversation's turns on the backend holding its prompt cache, which
is its earlier turns (``earlier_share``). A one-message request has none, yet a repeated
prompt was named as the same conversation and kept on whoever answered it first: in the live
learning loop (bench/routing/learning_loop.py --packaged) the route's certificate drew a
cheaper backend 33 times and every one was "kept on claude-sonnet-4-6, which holds this
conversation's prompt cache", so the certified saving was never served. Planned here as
plan_request plans, on a route whose δ-equivalent set holds every backend.
"""

from __future__ import annotations

import numpy as np

from gateway.config import settings_from_dict
from gateway.pool import build_pool
from gateway.pricing import resolve_prices
from gateway.serving.plan.planning import deployable, ranked, start_plan
from gateway.serving.request.chat_request import parse_chat_request
from gateway.store.policy import TenantPolicy
from gateway.store.records import Tenant
from tests.gateway.router_fixture import PRICES, build_router

ROUTES = {"wide": {"cost_weight": 0.5, "delta": 1.0}}  # δ 1: every backend equivalent


def _ranked(messages: list[dict], held: str | None):
    entries = [{"model_name": n,
                "litellm_params": {"model": f"openai/{n}", "api_base": "http://127.0.0.1:9"},
                "model_info": {"input_cost_per_million": pin, "output_cost_per_million": pout}}
               for n, (pin, pout) in PRICES.items()]
    settings = settings_from_dict({"model_list": entries, "routes": ROUTES})
    tenant = Tenant(id="t1", name="t1", budget_usd=None, period="total",
                    policy=TenantPolicy.parse({}))
    req = parse_chat_request({"model": "wide", "messages": messages})
    plan = start_plan(build_pool(settings, resolve_prices(settings), build_router()), tenant,
                      req)
    phi = np.random.default_rng(0).normal(size=(1, 384)).astype(np.float32)
    return ranked(plan, deployable(plan), phi, 12, held).routed


def test_one_turn_is_routed_by_the_rule_whoever_answered_it_before() -> None:
    single = [{"role": "user", "content": "What is 17 + 25?"}]
    free = _ranked(single, None)
    assert free.decision.chosen != "fake-strong"  # the rule's own pick, cheaper
    assert "fake-strong" in free.decision.equivalent  # the held backend is eligible
    again = _ranked(single, "fake-strong")
    assert again.decision.chosen == free.decision.chosen
    assert "prompt cache" not in again.decision.reason


def test_a_later_turn_stays_on_the_backend_holding_its_earlier_turns() -> None:
    turns = [{"role": "system", "content": "You are a careful assistant. " * 20},
             {"role": "user", "content": "What is 17 + 25?"}]
    kept = _ranked(turns, "fake-strong")
    assert kept.decision.chosen == "fake-strong"
    assert "holds this conversation's prompt cache" in kept.decision.reason
