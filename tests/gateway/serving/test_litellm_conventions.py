"""A LiteLLM Proxy user's habits, each checked with the OpenAI SDK against a real gateway.

The gateway runs a LiteLLM-style config (model_list with a two-deployment group, and the
``router_settings`` / ``litellm_settings`` / ``general_settings`` sections) over the fake
upstreams, on SQLite.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.config import settings_from_dict
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway, run_gateway

MASTER = "sk-litellm-master-key"
GROUP_REPLIES = {"The mid model answers well.", "Cheap answer."}


def litellm_config(up: FakeUpstream, tmp: Path, **general: Any) -> dict[str, Any]:
    """A LiteLLM proxy config.yaml as a LiteLLM user has it, pointed at the fake upstreams."""
    strong, mid, cheap = (up.model_entry(n) for n in ("fake-strong", "fake-mid", "fake-cheap"))
    pair_info = {"input_cost_per_million": 1.0, "output_cost_per_million": 2.0}
    together = {**cheap["litellm_params"], "model": "together_ai/fake-cheap"}
    return {
        "model_list": [
            strong, mid, cheap,
            {"model_name": "fake-pair", "litellm_params": mid["litellm_params"],
             "model_info": pair_info},
            {"model_name": "fake-pair", "litellm_params": cheap["litellm_params"],
             "model_info": pair_info},
            {"model_name": "fake-together", "litellm_params": together,
             "model_info": cheap["model_info"]},
        ],
        "routes": {"auto": {"cost_weight": 0.5}},
        "router_settings": {"routing_strategy": "simple-shuffle", "num_retries": 2,
                            "allowed_fails": 1_000_000, "cooldown_time": 30,
                            "fallbacks": [{"fake-mid": ["fake-cheap"]}],
                            "enable_pre_call_checks": True},
        "litellm_settings": {"drop_params": False, "set_verbose": False},
        "general_settings": {"master_key": MASTER, "database_url": f"sqlite:///{tmp / 'l.db'}",
                             **general},
        "reliability": {"spool_dir": str(tmp / "spool")},
    }


@pytest.fixture(scope="module")
def gw(upstream: FakeUpstream, test_router: Any, encoder: Any,
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("litellm")
    settings = settings_from_dict(litellm_config(upstream, tmp))
    yield from run_gateway(settings, test_router, encoder)


def _tenant(gw: Gateway, **body: Any) -> str:
    r = httpx.post(gw.base_url + "/admin/tenants", json={"name": f"t-{uuid.uuid4().hex[:12]}", **body},
                   headers={"authorization": f"Bearer {MASTER}"}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["api_key"]


def _client(gw: Gateway, key: str, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url + "/v1", api_key=key, **{"max_retries": 0, **kw})


def _ask(client: openai.OpenAI, model: str, **kw: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "Say hi."}], max_tokens=20, **kw)


def test_master_key_is_the_admin_key_and_sections_map(gw: Gateway) -> None:
    s = gw.settings
    assert s.admin_key == MASTER and s.max_attempts == 3
    assert s.fallbacks == {"fake-mid": ["fake-cheap"]}
    assert s.reliability.circuit.cooldown_s == 30
    assert "router_settings.enable_pre_call_checks" in s.ignored_keys
    assert "router_settings.routing_strategy" not in s.ignored_keys  # simple-shuffle is ours


def test_a_group_spreads_load_and_fails_over_inside(gw: Gateway, upstream: FakeUpstream) -> None:
    client = _client(gw, _tenant(gw))
    replies = {_ask(client, "fake-pair").parse().choices[0].message.content for _ in range(16)}
    assert replies == GROUP_REPLIES  # both deployments answered (P(miss) = 2·2^-16)
    upstream.set_mode("fake-mid", "error_500", times=1000)
    for _ in range(6):
        raw = _ask(client, "fake-pair")
        assert raw.parse().choices[0].message.content == "Cheap answer."
        assert raw.headers["x-tollgate-model"] == "fake-pair"
    stream = client.chat.completions.create(
        model="fake-pair", messages=[{"role": "user", "content": "hi"}], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == \
        "Cheap answer."


def test_drop_params_per_request(gw: Gateway, upstream: FakeUpstream) -> None:
    client = _client(gw, _tenant(gw))
    # litellm knows together_ai does not take reasoning_effort: refused unless dropped
    with pytest.raises(openai.BadRequestError):
        _ask(client, "fake-together", reasoning_effort="low")
    upstream.reset()
    raw = _ask(client, "fake-together", reasoning_effort="low", extra_body={"drop_params": True})
    assert raw.parse().choices[0].message.content == "Cheap answer."
    assert "reasoning_effort" not in upstream.requests_for("fake-cheap")[-1]
    with pytest.raises(openai.BadRequestError) as e:
        _ask(client, "fake-cheap", extra_body={"drop_params": "yes"})
    assert e.value.body["param"] == "drop_params"


def test_fallbacks_in_the_body_and_in_the_config(gw: Gateway, upstream: FakeUpstream) -> None:
    client = _client(gw, _tenant(gw))
    upstream.set_mode("fake-strong", "error_500", times=1000)
    raw = _ask(client, "fake-strong", extra_body={"fallbacks": ["fake-mid"]})
    assert raw.headers["x-tollgate-model"] == "fake-mid"
    with pytest.raises(openai.InternalServerError):  # no fallbacks: the failure is the answer
        _ask(client, "fake-strong")
    upstream.set_mode("fake-mid", "error_500", times=1000)
    raw = _ask(client, "fake-mid")  # router_settings.fallbacks: fake-mid → fake-cheap
    assert raw.headers["x-tollgate-model"] == "fake-cheap"
    with pytest.raises(openai.BadRequestError) as e:
        _ask(client, "fake-cheap", extra_body={"fallbacks": ["no-such-model"]})
    assert e.value.body["param"] == "fallbacks"


def test_x_request_id_is_the_tollgate_request_id(gw: Gateway) -> None:
    client = _client(gw, _tenant(gw))
    raw = _ask(client, "fake-cheap")
    rid = raw.headers["x-tollgate-request-id"]
    assert raw.headers["x-request-id"] == rid and raw.parse()._request_id == rid
    assert gw.log_row(rid)["status"] == 200
    with pytest.raises(openai.NotFoundError) as e:
        _ask(client, "no-such-model")
    assert e.value.request_id == e.value.response.headers["x-tollgate-request-id"]


def test_ratelimit_headers_when_a_limit_applies(gw: Gateway) -> None:
    limited = _client(gw, _tenant(gw, policy={"requests_per_minute": 50}))
    first, second = _ask(limited, "fake-cheap").headers, _ask(limited, "fake-cheap").headers
    assert first["x-ratelimit-limit-requests"] == "50"
    remaining = int(first["x-ratelimit-remaining-requests"])
    # the two may straddle a minute boundary (a fresh window): then the count restarts
    assert int(second["x-ratelimit-remaining-requests"]) in (remaining - 1, 49)
    assert first["x-ratelimit-reset-requests"].endswith("s")
    assert "x-ratelimit-limit-tokens" not in first
    free = _ask(_client(gw, _tenant(gw)), "fake-cheap").headers
    assert not [h for h in free if h.startswith("x-ratelimit")]


def test_budget_refusal_is_not_retried_by_the_sdk(gw: Gateway) -> None:
    sent: list[httpx.Request] = []
    http = httpx.Client(event_hooks={"request": [sent.append]})
    client = _client(gw, _tenant(gw, budget_usd=1e-9), max_retries=2, http_client=http)
    with pytest.raises(openai.RateLimitError) as e:
        _ask(client, "fake-strong")
    assert e.value.code == "budget_exceeded"
    assert e.value.response.headers["x-should-retry"] == "false"
    assert len(sent) == 1  # the SDK would have sent 3 without x-should-retry: false


def test_retrieve_one_model(gw: Gateway) -> None:
    client = _client(gw, _tenant(gw))
    assert client.models.retrieve("auto").id == "auto"
    pair = client.models.retrieve("fake-pair")
    assert pair.id == "fake-pair" and pair.model_extra["tollgate"]["deployments"] == 2
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("no-such-model")
    assert e.value.code == "model_not_found"


def test_x_api_key_and_bearer_are_both_accepted(gw: Gateway) -> None:
    key = _tenant(gw)

    def only_x_api_key(request: httpx.Request) -> None:
        del request.headers["authorization"]

    http = httpx.Client(event_hooks={"request": [only_x_api_key]})
    via_header = _client(gw, "ignored", default_headers={"x-api-key": key}, http_client=http)
    assert _ask(via_header, "fake-cheap").parse().choices[0].message.content == "Cheap answer."
    assert _ask(_client(gw, key), "fake-cheap").parse().choices
    r = httpx.get(gw.base_url + "/v1/models", headers={"x-api-key": "sk-tg-wrong"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def test_litellm_probe_paths(gw: Gateway) -> None:
    assert httpx.get(gw.base_url + "/health/liveliness").json() == {"status": "ok"}
    ready = httpx.get(gw.base_url + "/health/readiness")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
