"""The packaged config.yaml is a pool a user would run today, routable by the packaged router
out of the box; the demo's RouterBench pool is routable by the RouterBench router."""

from __future__ import annotations

import re

from gateway.config import DEFAULT_CONFIG_PATH, load_settings
from gateway.pool import build_pool
from gateway.pool.known import know_backends
from gateway.pricing import resolve_prices
from gateway.sandbox.demo import DEMO_CONFIG_PATH
from router_core.artifact import ROUTERBENCH_ROUTER_DIR, load_router

ROUTES = {"auto", "auto-balanced", "auto-cheap"}


def test_every_backend_of_the_packaged_pool_is_priced_by_litellm_and_routable() -> None:
    settings = load_settings(DEFAULT_CONFIG_PATH)
    assert all(b.input_cost_per_token is None for b in settings.model_list)  # litellm's prices
    prices = resolve_prices(settings)  # strict: raises on a backend litellm cannot price
    router = load_router(None)
    status = {k.backend: k.status for k in know_backends(settings, router, prices)}
    trained = {n for n, s in status.items() if s == "trained" or s.startswith("alias of")}
    # the open models are in the training data (MMLU-Pro, LLMRouter): trained experts
    assert {"llama-3.1-70b-instruct", "llama-3.1-8b-instruct", "qwen2.5-7b-instruct",
            "gemma-2-9b-it"} <= trained
    # the rest join on a cold-start prior: every backend is routable from the first request
    status = {k.backend: k.status for k in build_pool(settings, prices, router).known.values()}
    assert {s for n, s in status.items() if n not in trained} == {"prior (0 outcomes)"}
    assert {"gpt-4o", "claude-sonnet-4-6"} <= set(status)


def test_routes_are_promises_named_by_the_drop_they_keep() -> None:
    for path in (DEFAULT_CONFIG_PATH, DEMO_CONFIG_PATH):
        settings = load_settings(path)
        assert set(settings.routes) == ROUTES, path
        drops = {r: settings.routes[r].max_drop for r in ROUTES}
        assert drops == {"auto": 0.01, "auto-balanced": 0.03, "auto-cheap": 0.06}, path
        assert "scripts/route_promises.py" in path.read_text()  # the comment names the rule


def test_the_packaged_pool_knows_the_frontier_by_published_results_and_promises_against_it(
) -> None:
    from gateway.app import reference_phi
    from router_core.encoders import encoder_for_router

    settings = load_settings(DEFAULT_CONFIG_PATH)
    router = load_router(None)
    phi_ref = reference_phi(settings, encoder_for_router(router.config, threads=1))
    pool = build_pool(settings, resolve_prices(settings), router, phi_ref)
    how = {b: pool.how_known(b) for b in pool.backends}
    assert how["llama-3.1-70b-instruct"] == "trained"
    for frontier in ("gpt-4o", "claude-sonnet-4-6"):
        assert how[frontier].startswith("prior from published results")
    level = {b: pool.qualities[pool.expert_of(b)].level for b in pool.backends}
    # published results put gpt-4o and claude-sonnet-4-6 above the strongest open model
    assert level["gpt-4o"] > level["llama-3.1-70b-instruct"]
    assert level["claude-sonnet-4-6"] > level["gpt-4o"]
    # gemini-3.5-flash has no sourced number, only Google's claim that it outperforms
    # gemini-3.1-pro: a prior on that claim, with half a published prior's pseudo-outcomes
    assert how["gemini-3.5-flash"].startswith("prior from a vendor claim: at least gemini-3.1-pro")
    from gateway.pool.promise import reference_queries
    Q = reference_queries(pool.router, phi_ref)
    flash = pool.qualities[pool.expert_of("gemini-3.5-flash")].prior
    sonnet = pool.qualities[pool.expert_of("claude-sonnet-4-6")].prior
    assert flash.estimate(Q)[1].mean() < sonnet.estimate(Q)[1].mean()
    # the reference is never a model assumed weak, nor one known by a claim or a price alone:
    # the strongest known by published results, or a dearer unknown
    for route in ROUTES:
        promise = pool.promises[route]
        assert promise.max_drop == settings.routes[route].max_drop
        assert promise.reference != "gemini-3.5-flash"
        assert level[promise.reference] >= level["claude-sonnet-4-6"] or (
            how[promise.reference] == "prior from price only")


def test_the_demo_pool_is_the_routerbench_routers() -> None:
    settings = load_settings(DEMO_CONFIG_PATH)
    prices = resolve_prices(settings)
    router = load_router(ROUTERBENCH_ROUTER_DIR)
    known = know_backends(settings, router, prices)
    assert len(known) == 11 and {k.status for k in known} == {"trained"}


def test_route_lambdas_rewrites_only_the_cost_weights(tmp_path) -> None:
    from scripts.route_lambdas import write_lambdas

    path = tmp_path / "config.yaml"
    text = re.sub(r"max_drop: 0\.0\d", "cost_weight: 1.0", DEFAULT_CONFIG_PATH.read_text())
    path.write_text(text)
    write_lambdas(path, {"auto": 0.0123, "auto-cheap": 2.5})
    out = path.read_text()
    assert re.search(r"^  auto: \{cost_weight: 0\.0123, ", out, re.MULTILINE)
    assert re.search(r"^  auto-cheap: \{cost_weight: 2\.5, ", out, re.MULTILINE)
    assert load_settings(path).routes["auto-cheap"].cost_weight == 2.5
    assert len(out.splitlines()) == len(text.splitlines())


def test_on_the_packaged_config_each_decision_keeps_its_promise_by_its_own_estimates() -> None:
    """MMLU-Pro and LLMRouter test prompts through the packaged pool, as the gateway plans
    them: every choice is the reference or confidently within the route's drop of it, and the
    frontier backends get the prompts only they are expected to answer well."""
    import numpy as np

    from gateway.app import reference_phi
    from gateway.serving.plan.planning import deployable, ranked, start_plan
    from gateway.serving.request.chat_request import parse_chat_request
    from gateway.store.records import Tenant
    from router_core.data import load_dataset
    from router_core.encoders import encoder_for_router

    settings = load_settings(DEFAULT_CONFIG_PATH)
    router = load_router(None)
    encoder = encoder_for_router(router.config, threads=1)
    pool = build_pool(settings, resolve_prices(settings), router, reference_phi(settings, encoder))
    tenant = Tenant(id="t", name="t", budget_usd=None, period="total")
    prompts = []
    for name in ("mmlu-pro", "llmrouter"):
        table = load_dataset(name)
        test = np.flatnonzero(np.asarray(table.split) == "test")[:20]
        prompts += [str(table.prompts[i]) for i in test]
    phis = encoder.encode(prompts)
    chosen = {route: [] for route in ROUTES}
    for route in ROUTES:
        for text, phi in zip(prompts, phis):
            req = parse_chat_request({"model": route, "messages": [{"role": "user",
                                                                    "content": text}]})
            plan = start_plan(pool, tenant, req)
            plan = ranked(plan, deployable(plan), phi[None, :], 200)
            rec = plan.routed.promise
            assert rec["reference"]["backend"] == pool.promises[route].reference
            pick = next(c for c in rec["candidates"] if c["backend"] == rec["chosen"])
            assert rec["chosen"] == rec["reference"]["backend"] or (
                pick["within"] and pick["drop_bound"] <= pool.promises[route].tolerance)
            chosen[route].append(rec["chosen"])
    frontier = {"gpt-4o", "claude-sonnet-4-6"}
    assert any(c in frontier for c in chosen["auto"])  # the frontier is not starved
    # a looser promise never spends more on the frontier than a tighter one
    share = {r: sum(c in frontier for c in chosen[r]) for r in ROUTES}
    assert share["auto"] >= share["auto-balanced"] >= share["auto-cheap"]
