"""The packaged config.yaml is a pool a user would run today, routable by the packaged router
out of the box; the demo's RouterBench pool is routable by the RouterBench router."""

from __future__ import annotations

import re

from gateway.config import DEFAULT_CONFIG_PATH, load_settings
from gateway.pricing import resolve_prices
from gateway.sandbox.demo import DEMO_CONFIG_PATH
from gateway.pool import build_pool
from gateway.pool.known import know_backends
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


def test_routes_are_named_by_what_they_keep_and_their_lambda_grows_with_the_drop() -> None:
    for path in (DEFAULT_CONFIG_PATH, DEMO_CONFIG_PATH):
        settings = load_settings(path)
        assert set(settings.routes) == ROUTES, path
        lams = [settings.routes[r].cost_weight for r in ("auto", "auto-balanced", "auto-cheap")]
        assert lams == sorted(lams), (path, lams)
        assert "scripts/route_lambdas.py" in path.read_text()  # the comment names the choice


def test_the_demo_pool_is_the_routerbench_routers() -> None:
    settings = load_settings(DEMO_CONFIG_PATH)
    prices = resolve_prices(settings)
    router = load_router(ROUTERBENCH_ROUTER_DIR)
    known = know_backends(settings, router, prices)
    assert len(known) == 11 and {k.status for k in known} == {"trained"}


def test_route_lambdas_rewrites_only_the_cost_weights(tmp_path) -> None:
    from scripts.route_lambdas import write_lambdas

    path = tmp_path / "config.yaml"
    text = DEFAULT_CONFIG_PATH.read_text()
    path.write_text(text)
    write_lambdas(path, {"auto": 0.0123, "auto-cheap": 2.5})
    out = path.read_text()
    assert re.search(r"^  auto: \{cost_weight: 0\.0123, ", out, re.MULTILINE)
    assert re.search(r"^  auto-cheap: \{cost_weight: 2\.5, ", out, re.MULTILINE)
    assert load_settings(path).routes["auto-cheap"].cost_weight == 2.5
    assert len(out.splitlines()) == len(text.splitlines())
