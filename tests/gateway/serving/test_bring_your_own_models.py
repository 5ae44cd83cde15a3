"""A LiteLLM proxy's model_list, pasted as it is, routes ``auto`` from the first start.

No Tollgate key in the pool (no router_model, no prices): the gateway prices the backends
from litellm's map, resolves the ones the packaged router knows through the identity table
and gives the others a cold-start prior; the one litellm cannot price is named in a warning
and left out. Real HTTP to the fake upstreams, the OpenAI SDK as the client, the packaged
router and real MiniLM.
"""

from __future__ import annotations

import httpx
import pytest

from gateway.config import settings_from_dict
from router_core.artifact import load_router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, run_gateway

# model_name -> litellm model string, as a LiteLLM proxy user writes them
PASTED = {
    "gpt-4o": "openai/gpt-4o",
    "gpt-4o-mini": "openai/gpt-4o-mini",
    "llama-70b": "together_ai/meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo",
    "llama-8b": "together_ai/meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo",
    "in-house": "openai/in-house-model",  # litellm has no price for it
}
PRICED = {"gpt-4o", "gpt-4o-mini", "llama-70b", "llama-8b"}


@pytest.fixture(scope="module")
def upstreams():
    # a backend answers as the model id the provider client sends
    ids = {name: model.split("/", 1)[1] for name, model in PASTED.items()}
    with FakeUpstream([FakeBackend(i, reply=f"answer from {i}") for i in ids.values()]) as up:
        yield up


@pytest.fixture(scope="module")
def pasted_gateway(upstreams, encoder, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("byom")
    model_list = [
        {"model_name": name,
         "litellm_params": {"model": model, "api_base": upstreams.base_url, "api_key": "sk-x"}}
        for name, model in PASTED.items()
    ]  # fmt: skip
    settings = settings_from_dict({
        "model_list": model_list,
        "database_url": f"sqlite:///{tmp / 'byom.db'}",
        "admin_key": ADMIN_KEY,
        "reliability": {"spool_dir": str(tmp / "spool")},
    })  # fmt: skip
    yield from run_gateway(settings, load_router(), encoder)


def test_auto_routes_over_every_priced_backend_on_first_start(pasted_gateway):
    gw = pasted_gateway
    key, _ = gw.tenant()
    models = httpx.get(gw.base_url + "/v1/models", headers={"authorization": f"Bearer {key}"})
    data = {m["id"]: m["tollgate"] for m in models.json()["data"]}
    assert set(data["auto"]["backends"]) == PRICED
    known = {name: data[name]["known_as"] for name in PASTED}
    assert known["in-house"] == "no price"
    for name in PRICED:
        assert data[name]["routable"], name
        assert known[name].startswith(("alias of", "trained", "prior (0 outcomes)")), known
    client = gw.client(key)
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Write a haiku about routers."}]
    )
    assert raw.parse().choices[0].message.content.startswith("answer from")
    assert raw.headers["x-tollgate-model"] in PRICED
    rid = raw.headers["x-tollgate-request-id"]
    row = gw.log_row(rid)
    assert {c["backend"] for c in row["candidates"]} == PRICED  # every one was scored
    priors = {c["backend"] for c in row["candidates"] if c.get("known") == "prior"}
    assert priors == {n for n in PRICED if known[n].startswith("prior")}
    explained = httpx.get(gw.base_url + f"/v1/routing/{rid}",
                          headers={"authorization": f"Bearer {key}"}).json()  # fmt: skip
    assert {c["backend"] for c in explained["decision"]["candidates"] if c["prior"]} == priors


def test_the_unpriced_backend_is_refused_with_a_clear_error(pasted_gateway):
    import openai

    client = pasted_gateway.client(pasted_gateway.tenant()[0])
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="in-house", messages=[{"role": "user", "content": "hi"}])
    assert err.value.status_code == 503
    assert err.value.body["code"] == "backend_unpriced"
