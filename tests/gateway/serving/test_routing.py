"""Routes, per-request options, passthrough and parameter forwarding."""

from __future__ import annotations

import json

import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.router_fixture import REPLIES, VERSION

MSG = [{"role": "user", "content": "Which backend answers this?"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.mark.parametrize(
    ("model", "extra", "expected"),
    [
        ("best", None, "fake-strong"),  # λ = 0: quality only
        ("auto", None, "fake-mid"),
        ("cheap", None, "fake-cheap"),  # λ = 5
        ("no-strong", None, "fake-mid"),  # λ = 0 over a pool without fake-strong
        ("auto", {"cost_weight": 0.0}, "fake-strong"),
        ("auto", {"cost_weight": 5.0}, "fake-cheap"),
        ("best", {"allowed_models": ["fake-cheap", "fake-mid"]}, "fake-mid"),
        # max_cost_usd drops fake-strong and fake-mid (256 expected output tokens x price)
        ("best", {"max_cost_usd": 0.0003}, "fake-cheap"),
    ],
)
def test_route_choice(
    gateway: Gateway, client: openai.OpenAI, model: str, extra: dict | None, expected: str
) -> None:
    kw = {"extra_body": {"tollgate": extra}} if extra else {}
    raw = client.chat.completions.with_raw_response.create(model=model, messages=MSG, **kw)
    assert raw.parse().model == expected
    row = gateway.log_row(raw.headers["x-tollgate-request-id"])
    assert row["chosen_model"] == expected and row["route"] == model
    if extra and "cost_weight" in extra:
        assert row["lam"] == extra["cost_weight"]
    if extra and "allowed_models" in extra:
        assert {c["backend"] for c in row["candidates"]} <= set(extra["allowed_models"])


def test_tenant_policy_limits_the_choice(gateway: Gateway) -> None:
    key, _ = gateway.tenant(policy={"allowed_models": ["fake-cheap", "fake-mid"]})
    c = gateway.client(key)
    assert c.chat.completions.create(model="best", messages=MSG).model == "fake-mid"
    with pytest.raises(openai.NotFoundError):  # passthrough outside the policy
        c.chat.completions.create(model="fake-strong", messages=MSG)
    # the request cannot widen the tenant's policy
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="best", messages=MSG,
                                  extra_body={"tollgate": {"allowed_models": ["fake-strong"]}})
    ids = [m.id for m in c.models.list().data]
    assert "fake-strong" not in ids and "fake-cheap" in ids


def test_passthrough_is_unrouted_but_logged(gateway: Gateway, client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="fake-strong", messages=MSG)
    resp = raw.parse()
    assert resp.model == "fake-strong"
    assert resp.choices[0].message.content == REPLIES["fake-strong"]
    assert raw.headers["x-tollgate-router-version"] == "passthrough"
    row = gateway.log_row(raw.headers["x-tollgate-request-id"])
    assert row["route"] is None and row["router_version"] is None and row["candidates"] == []
    assert row["reason"] == "passthrough" and row["chosen_model"] == "fake-strong"
    assert row["cost_usd"] > 0 and row["reserved_usd"] > 0


def test_every_openai_parameter_reaches_the_upstream(
    client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    resp = client.chat.completions.create(
        model="fake-cheap",
        messages=[{"role": "system", "content": "Be brief."}, *MSG],
        temperature=0.3,
        top_p=0.9,
        max_tokens=50,
        stop=["\n\n"],
        n=2,
        seed=7,
        user="user-42",
        logprobs=True,
        top_logprobs=2,
        presence_penalty=0.1,
        frequency_penalty=0.2,
        response_format={"type": "json_object"},
        metadata={"team": "search"},
        extra_body={"logit_bias": {"50256": -100}},
    )
    sent = upstream.requests_for("fake-cheap")[-1]
    expect = {"temperature": 0.3, "top_p": 0.9, "max_tokens": 50, "stop": ["\n\n"], "n": 2,
              "seed": 7, "user": "user-42", "logprobs": True, "top_logprobs": 2,
              "presence_penalty": 0.1, "frequency_penalty": 0.2,
              "response_format": {"type": "json_object"}, "metadata": {"team": "search"},
              "logit_bias": {"50256": -100}}
    for k, v in expect.items():
        assert sent[k] == v, k
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert len(resp.choices) == 2
    assert json.loads(resp.choices[0].message.content) == {"answer": REPLIES["fake-cheap"]}


def test_max_completion_tokens_is_forwarded_as_given(
    client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    client.chat.completions.create(model="fake-cheap", messages=MSG, max_completion_tokens=33)
    sent = upstream.requests_for("fake-cheap")[-1]
    assert sent["max_completion_tokens"] == 33 and "max_tokens" not in sent


def test_tool_calls_round_trip(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    resp = client.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    call = resp.choices[0].message.tool_calls[0]
    assert resp.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    sent = upstream.requests_for(resp.model)[-1]
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    # the tool result goes back through the gateway as the next turn
    follow = client.chat.completions.create(
        model="auto",
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"},
        ],
    )
    assert follow.choices[0].message.content
    assert upstream.requests_for(follow.model)[-1]["messages"][2]["tool_call_id"] == call.id


def test_models_lists_routes_and_backends(client: openai.OpenAI) -> None:
    models = {m.id: m for m in client.models.list().data}
    assert {"auto", "best", "cheap", "no-strong", "fake-strong", "fake-mid", "fake-cheap"} <= set(
        models)
    auto = models["auto"].model_extra["tollgate"]
    assert auto["type"] == "route" and auto["cost_weight"] == 0.5
    assert auto["backends"] == ["fake-cheap", "fake-mid", "fake-strong"]
    assert models["no-strong"].model_extra["tollgate"]["backends"] == ["fake-cheap", "fake-mid"]
    assert models["fake-mid"].model_extra["tollgate"]["type"] == "backend"


def test_router_version_header_names_the_artifact(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=MSG)
    assert raw.headers["x-tollgate-router-version"] == VERSION
