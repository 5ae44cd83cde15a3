"""POST /v1/responses through a real gateway with the OpenAI SDK: a backend name is a
passthrough, ``auto`` is routed like chat from the same text; non-streamed and streamed (the
events OpenAI sends), budgeted at max_output_tokens, settled at the reported usage, logged.

Real parts: uvicorn, the OpenAI SDK, litellm's aresponses over HTTP to the fake upstream's
/v1/responses (OpenAI's own Responses API, as litellm calls it for an openai/ model), SQLite.
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

NATIVE = "gpt-4o-mini"  # in litellm's map: litellm streams its Responses API natively
NATIVE_PRICE = (0.15, 0.6)


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    backends.append(FakeBackend(NATIVE, reply="a native stream of five words",
                                input_per_m=NATIVE_PRICE[0], output_per_m=NATIVE_PRICE[1]))
    with FakeUpstream(backends) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('responses') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    cfg["model_list"] = [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES]
    cfg["model_list"].append(up.model_entry(NATIVE))
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def cost(model: str, prompt: int, completion: int) -> float:
    pin, pout = NATIVE_PRICE if model == NATIVE else PRICES[model]
    return (prompt * pin + completion * pout) / 1e6


def test_a_named_backend_answers_a_response_settled_and_logged(
    gw: Gateway, up: FakeUpstream
) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    raw = gw.client(key).responses.with_raw_response.create(
        model="fake-cheap", instructions="Answer briefly.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Say hello"}]}],
        max_output_tokens=50)
    resp = raw.parse()
    assert resp.object == "response" and resp.status == "completed"
    assert resp.model == "fake-cheap" and resp.output_text == REPLIES["fake-cheap"]
    sent = up.requests_for("fake-cheap")[-1]
    assert sent["instructions"] == "Answer briefly." and sent["max_output_tokens"] == 50
    assert resp.usage.input_tokens == 4  # words of instructions + input
    n_out = len(REPLIES["fake-cheap"].split())
    assert resp.usage.output_tokens == n_out
    charged = float(raw.headers["x-tollgate-cost-usd"])
    assert charged == pytest.approx(cost("fake-cheap", 4, n_out))
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["chosen_model"] == "fake-cheap" and row["reason"] == "passthrough"
    assert row["prompt_tokens"] == 4 and row["completion_tokens"] == n_out
    # reserved: the prompt's bound plus max_output_tokens at the output price
    assert row["reserved_usd"] >= cost("fake-cheap", 0, 50)
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(charged, abs=2e-9)


def test_auto_is_routed_like_chat_from_the_same_text(gw: Gateway) -> None:
    key, _ = gw.tenant()
    client = gw.client(key)
    text = "Prove that there are infinitely many primes."
    chat = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "system", "content": "Be rigorous."},
                                {"role": "user", "content": text}])
    raw = client.responses.with_raw_response.create(model="auto", instructions="Be rigorous.",
                                                    input=text)
    resp = raw.parse()
    assert raw.headers["x-tollgate-model"] == chat.headers["x-tollgate-model"] == resp.model
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    chat_row = gw.log_row(chat.headers["x-tollgate-request-id"])
    assert row["route"] == "auto" and row["router_version"] == chat_row["router_version"]
    assert [c["backend"] for c in row["candidates"]] == [
        c["backend"] for c in chat_row["candidates"]]
    assert row["cost_usd"] > 0 and row["status"] == 200


@pytest.mark.parametrize("model", ["fake-cheap", NATIVE])
def test_a_streamed_response_is_openais_events_settled_before_completed(
    gw: Gateway, up: FakeUpstream, model: str
) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    client = gw.client(key)
    with client.responses.with_streaming_response.create(
            model=model, input="Stream me a reply", stream=True) as raw:
        rid = raw.headers["x-tollgate-request-id"]
        events = list(raw.parse())
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and "response.output_text.done" in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert final.output_text == text and final.model == model
    assert final.usage.input_tokens == 4
    row = gw.log_row(rid)
    assert row["stream"] is True and row["status"] == 200 and row["chosen_model"] == model
    assert row["completion_tokens"] == final.usage.output_tokens
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(
        cost(model, 4, final.usage.output_tokens), abs=2e-9)
    if model == NATIVE:  # litellm streamed it from the upstream, not faked from one answer
        assert up.requests_for(NATIVE)[-1].get("stream") is True


def test_refusals_name_the_field_and_the_budget_holds(gw: Gateway) -> None:
    key, tenant_id = gw.tenant(budget_usd=1e-9)
    client = gw.client(key)
    for kwargs, param in (({"input": []}, "input"),
                          ({"input": "x", "previous_response_id": "resp_1"},
                           "previous_response_id"),
                          ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
                          ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
                          ({"input": "x", "extra_body": {"nope": 1}}, "nope")):
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(model="fake-cheap", **kwargs)
        assert e.value.body["param"] == param
    with pytest.raises(openai.RateLimitError) as e:
        client.responses.create(model="fake-cheap", input="the budget cannot pay for this")
    assert e.value.body["code"] == "budget_exceeded"
    assert gw.settled(tenant_id)["spent_usd"] == 0
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="nope", input="x")


def test_an_upstream_failure_falls_back_like_chat(gw: Gateway, up: FakeUpstream) -> None:
    key, _ = gw.tenant()
    up.set_mode("fake-cheap", "error_500", times=1)
    raw = gw.client(key).responses.with_raw_response.create(
        model="fake-cheap", input="hello", extra_body={"fallbacks": ["fake-mid"]})
    assert raw.parse().model == "fake-mid"
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [
        ("fake-cheap", 500), ("fake-mid", 200)]
