"""Every error is an OpenAI error body with the right status, as the SDK sees it."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway

MSG = [{"role": "user", "content": "hi"}]


def _error(exc: openai.APIStatusError) -> dict:
    body = exc.response.json()
    assert set(body) == {"error"}
    assert {"message", "type", "code", "param"} <= set(body["error"])
    return body["error"]


def test_401_bad_key(gateway: Gateway) -> None:
    with pytest.raises(openai.AuthenticationError) as exc:
        gateway.client("tg-not-a-real-key").chat.completions.create(model="auto", messages=MSG)
    err = _error(exc.value)
    assert err["code"] == "invalid_api_key"
    assert exc.value.response.headers["x-tollgate-request-id"]


def test_401_missing_key(gateway: Gateway) -> None:
    r = httpx.post(gateway.base_url + "/v1/chat/completions",
                   json={"model": "auto", "messages": MSG})
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_404_unknown_model(gateway: Gateway, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="gpt-99", messages=MSG)
    err = _error(exc.value)
    assert err["code"] == "model_not_found" and err["param"] == "model"
    row = gateway.log_row(exc.value.response.headers["x-tollgate-request-id"])
    assert row["status"] == 404 and row["attempts"] == []


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"temperature": 7}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": "two"}, "n"),
        ({"extra_body": {"frobnicate": True}}, "frobnicate"),
        ({"extra_body": {"tollgate": {"cost_weight": -1}}}, "tollgate.cost_weight"),
        ({"extra_body": {"tollgate": {"allowed_models": ["nope"]}}}, "tollgate.allowed_models"),
        ({"extra_body": {"tollgate": {"max_cost_usd": 1e-12}}}, "tollgate.max_cost_usd"),
        ({"extra_body": {"tollgate": {"speed": "fast"}}}, "tollgate.speed"),
    ],
)
def test_400_names_the_field(client: openai.OpenAI, kwargs: dict, param: str) -> None:
    args = {"model": "auto", "messages": MSG, **kwargs}
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(**args)
    err = _error(exc.value)
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param


def test_400_body_not_json(gateway: Gateway, tenant: tuple[str, str]) -> None:
    r = httpx.post(gateway.base_url + "/v1/chat/completions", content=b"{not json",
                   headers={"authorization": f"Bearer {tenant[0]}",
                            "content-type": "application/json"})
    assert r.status_code == 400
    assert "JSON" in r.json()["error"]["message"]


def test_429_budget_exceeded(gateway: Gateway) -> None:
    key, tid = gateway.tenant(budget_usd=0.0001)
    with pytest.raises(openai.RateLimitError) as exc:
        gateway.client(key).chat.completions.create(
            model="fake-strong", messages=MSG, max_tokens=1000)
    err = _error(exc.value)
    assert err["type"] == "budget_exceeded" and err["code"] == "budget_exceeded"
    row = gateway.log_row(exc.value.response.headers["x-tollgate-request-id"])
    assert row["status"] == 429 and row["cost_usd"] == 0 and row["reserved_usd"] == 0
    assert gateway.settled(tid)["spent_usd"] == 0


@pytest.mark.parametrize(
    ("mode", "status", "code"),
    [
        ("error_500", 502, "bad_gateway"),
        ("reset", 502, "bad_gateway"),
        ("malformed_json", 502, "bad_gateway"),
        ("error_429", 503, "upstream_unavailable"),
        ("hang", 504, "upstream_timeout"),
    ],
)
def test_upstream_failures_map_to_5xx(
    gateway: Gateway, client: openai.OpenAI, upstream: FakeUpstream, mode: str, status: int,
    code: str,
) -> None:
    # passthrough to fake-mid: one candidate, so the failure reaches the client
    upstream.set_mode("fake-mid", mode)
    with pytest.raises(openai.APIStatusError) as exc:
        client.chat.completions.create(model="fake-mid", messages=MSG)
    assert exc.value.status_code == status
    err = _error(exc.value)
    assert err["type"] == "upstream_error" and err["code"] == code
    row = gateway.log_row(exc.value.response.headers["x-tollgate-request-id"])
    assert row["status"] == status and len(row["attempts"]) == 1
    # only a timeout after sending may be billed upstream: it costs what the attempt held
    owed = row["reserved_usd"] if mode == "hang" else 0  # a timeout owes what it held
    assert row["cost_usd"] == pytest.approx(owed) and row["error"]


def test_unknown_path_is_an_openai_error(gateway: Gateway) -> None:
    r = httpx.get(gateway.base_url + "/v1/nothing-here")
    assert r.status_code == 404
    assert set(r.json()["error"]) >= {"message", "type", "code"}
