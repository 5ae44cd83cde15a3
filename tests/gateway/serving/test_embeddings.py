"""POST /v1/embeddings through a real gateway with the OpenAI SDK: passthrough to an embedding
backend (over HTTP to the fake upstream), priced, budgeted, logged; an embedding model in
model_list never joins a chat route, and chat to it is a clear 400.

Real parts: uvicorn, the OpenAI SDK, litellm's aembedding over HTTP, SQLite.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import openai
import pytest

from gateway.config import settings_from_dict
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import TIMEOUTS, Gateway, run_gateway
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES, REPLIES

EMBED = "fake-embed"
PRICE_IN = 0.02  # USD per 1M input tokens


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    backends.append(FakeBackend(EMBED, reply="", input_per_m=PRICE_IN, output_per_m=0.0))
    with FakeUpstream(backends) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('embed') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    cfg["model_list"] = [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES]
    cfg["model_list"].append(up.model_entry(EMBED, mode="embedding"))
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def test_embeddings_are_forwarded_priced_and_logged(gw: Gateway, up: FakeUpstream) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    client = gw.client(key)
    raw = client.embeddings.with_raw_response.create(
        model=EMBED, input=["the first text", "a second, longer text here"])
    resp = raw.parse()
    assert [d.index for d in resp.data] == [0, 1] and len(resp.data[0].embedding) == 8
    assert resp.usage.prompt_tokens == 8 and resp.model == EMBED
    sent = up.requests_for(EMBED)[-1]
    assert sent["input"] == ["the first text", "a second, longer text here"]
    cost = float(raw.headers["x-tollgate-cost-usd"])
    assert cost == pytest.approx(8 * PRICE_IN / 1e6)
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["chosen_model"] == EMBED and row["reason"] == "embeddings"
    assert row["prompt_tokens"] == 8 and row["status"] == 200
    # held: the UTF-8 bytes of the input and 8 framing tokens per input bound its tokens;
    # settled at the reported usage
    assert row["reserved_usd"] == pytest.approx((40 + 2 * 8) * PRICE_IN / 1e6)
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(cost)


def test_an_embedding_model_is_never_routed_and_chat_to_it_is_a_400(gw: Gateway) -> None:
    pool = gw.app.state.ctx.pool.current
    assert pool.modes[EMBED] == "embedding" and pool.modes["fake-cheap"] == "chat"
    assert EMBED not in pool.deployable("auto").values()
    assert pool.known[EMBED].status == "embedding (reached by name)"
    key, _ = gw.tenant()
    client = gw.client(key)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=EMBED, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["param"] == "model" and e.value.body["code"] == "model_not_supported"
    with pytest.raises(openai.BadRequestError) as e:  # and embeddings of a chat model too
        client.embeddings.create(model="fake-cheap", input="hi")
    assert e.value.body["code"] == "model_not_supported"


def test_bad_embeddings_bodies_are_400_naming_the_field_and_the_budget_holds(
    gw: Gateway
) -> None:
    key, tenant_id = gw.tenant(budget_usd=1e-9)
    client = gw.client(key)
    for kwargs, param in (({"input": []}, "input"), ({"input": [""]}, "input"),
                          ({"input": "x", "dimensions": 0}, "dimensions"),
                          ({"input": "x", "extra_body": {"nope": 1}}, "nope")):
        with pytest.raises(openai.BadRequestError) as e:
            client.embeddings.create(model=EMBED, **kwargs)
        assert e.value.body["param"] == param
    with pytest.raises(openai.RateLimitError) as e:  # 1e-9 USD pays for no input at all
        client.embeddings.create(model=EMBED, input="a text the budget cannot pay for")
    assert e.value.body["code"] == "budget_exceeded"
    assert gw.settled(tenant_id)["spent_usd"] == 0
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="nope", input="x")


def test_a_401_on_embeddings_leaves_an_access_line(gw: Gateway,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Embeddings run in the frame every endpoint runs in (gateway/serving/endpoint.py): a
    request refused before a tenant is known is logged on the access log as chat's is."""
    client = gw.client("sk-not-a-key")
    with caplog.at_level(logging.INFO, logger="tollgate.access"), \
            pytest.raises(openai.AuthenticationError) as e:
        client.embeddings.create(model=EMBED, input="hi")
    rid = e.value.response.headers["x-tollgate-request-id"]
    lines = [r.getMessage() for r in caplog.records if r.name == "tollgate.access"]
    mine = [line for line in lines if line.startswith(rid)]
    assert len(mine) == 1 and " 401 " in mine[0] and "tenant=-" in mine[0]


def test_a_refused_embeddings_row_names_the_backend_and_its_attempt(
        gw: Gateway, up: FakeUpstream) -> None:
    """The row of a failed embeddings call: its reason, the backend it named, its attempt with
    the upstream's status, the client's error from the one upstream error map."""
    key, tenant_id = gw.tenant(budget_usd=1.0)
    client = gw.client(key)
    up.set_mode(EMBED, "error_400", times=1)
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=EMBED, input="hi")
    assert e.value.body["code"] == "upstream_bad_request"
    row = gw.log_row(e.value.response.headers["x-tollgate-request-id"])
    assert row["reason"] == "embeddings" and row["chosen_model"] == EMBED
    assert row["status"] == 400 and row["cost_usd"] == 0.0
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [(EMBED, 400)]
    assert gw.settled(tenant_id)["spent_usd"] == 0.0
