"""POST /v1/embeddings through a real gateway with the OpenAI SDK: passthrough to an embedding
backend (over HTTP to the fake upstream), priced, budgeted, logged; an embedding model in
model_list never joins a chat route, and chat to it is a clear 400.

Real parts: uvicorn, the OpenAI SDK, litellm's aembedding over HTTP, SQLite.
"""

from __future__ import annotations

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
