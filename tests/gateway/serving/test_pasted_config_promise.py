"""A pasted LiteLLM config (model_list only, no ``routes:``) keeps a promise on ``auto``.

Before issue 34 such a config got one λ route, ``auto: cost_weight 0.5 (no promise)``, and
every ``auto`` request went to gpt-4o-mini, "Prove sqrt(2) is irrational" included. Now it
gets ``auto`` (0.01), ``auto-balanced`` (0.03) and ``auto-cheap`` (0.06), each against the
strongest known backend, and the startup block, ``/v1/models`` and each request's explanation
say so.

Real parts: uvicorn, the OpenAI SDK, SQLite, the packaged router and MiniLM. The entries are
OpenAI, Anthropic and Azure models as a LiteLLM user writes them, each pointed at the local
OpenAI-compatible fake upstream (``openai/<id>``) with ``model_info.base_model`` keeping the
provider's model, so litellm's prices and the capability table still know it.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gateway.cli.startup import DEFAULT_ROUTES_NOTE, promise_lines
from gateway.config import settings_from_dict
from router_core.artifact import load_router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, Gateway, run_gateway

# model_name -> (the upstream's model id, the provider model it is)
PASTED = {
    "gpt-4o": ("gpt-4o", "openai/gpt-4o"),
    "gpt-4o-mini": ("gpt-4o-mini", "openai/gpt-4o-mini"),
    "claude-sonnet-4-6": ("claude-sonnet-4-6", "anthropic/claude-sonnet-4-6"),
    "azure-4o": ("my-prod-4o", "azure/gpt-4o"),
}
PROMPTS = ["Prove sqrt(2) is irrational.", "Write a haiku about routers.",
           "What is the capital of Australia?", "Explain the CAP theorem with an example.",
           "Translate 'good morning' into French.", "Sort [3, 1, 2] in Python."]


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    with FakeUpstream([FakeBackend(i, reply=f"answer from {i}") for i, _ in PASTED.values()]) as u:
        yield u


@pytest.fixture(scope="module")
def pasted(up: FakeUpstream, encoder, tmp_path_factory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("pasted_promise")
    model_list = [{"model_name": name,
                   "litellm_params": {"model": f"openai/{upstream_id}", "api_base": up.base_url,
                                      "api_key": "sk-x"},
                   "model_info": {"base_model": provider}}
                  for name, (upstream_id, provider) in PASTED.items()]
    settings = settings_from_dict({
        "model_list": model_list, "database_url": f"sqlite:///{tmp / 'pasted.db'}",
        "admin_key": ADMIN_KEY, "reliability": {"spool_dir": str(tmp / "spool")}})
    yield from run_gateway(settings, load_router(), encoder)


def test_a_config_without_routes_gets_the_three_promising_routes(pasted: Gateway) -> None:
    key, _ = pasted.tenant()
    models = {m.id: m.model_extra["tollgate"] for m in pasted.client(key).models.list().data}
    drops = {r: models[r]["promise"]["max_drop"] for r in ("auto", "auto-balanced", "auto-cheap")}
    assert drops == {"auto": 0.01, "auto-balanced": 0.03, "auto-cheap": 0.06}
    for route in drops:
        entry = models[route]
        assert entry["rule"] == "promise" and entry["promise_by_default"] is True
        assert entry["cost_weight"] is None
        # against the strongest known backend, never the cheap one
        assert entry["promise"]["reference"] != "gpt-4o-mini"
        pool = pasted.app.state.ctx.pool.current
        strongest = max(pool.qualities[e].level for e in pool.deployable(route))
        assert entry["promise"]["reference_mean_p"] == pytest.approx(strongest, abs=1e-4)
    lines = promise_lines(pasted.app.state.ctx.pool.current)  # the startup block's
    assert lines[0] == DEFAULT_ROUTES_NOTE
    assert any(line.startswith("auto: realized quality within 0.01 of ") for line in lines)
    assert not any("no promise" in line for line in lines)


def test_auto_keeps_its_promise_request_by_request(pasted: Gateway) -> None:
    key, _ = pasted.tenant()
    client = pasted.client(key)
    drops, served = [], {}
    for text in PROMPTS:
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": text}])
        served[text] = raw.parse().model
        r = httpx.get(f"{pasted.base_url}/v1/routing/{raw.headers['x-tollgate-request-id']}",
                      headers={"authorization": f"Bearer {key}"}, timeout=30)
        ref = r.json()["decision"]["reference"]
        assert ref["allowed"] is True and ref["p"] is not None
        drops.append(ref["estimated_drop"])
    # the drop by the router's own estimates, per request and on average, is within 0.01
    assert sum(drops) / len(drops) <= 0.01, drops
    assert served["Prove sqrt(2) is irrational."] != "gpt-4o-mini"
    assert set(served.values()) != {"gpt-4o-mini"}
