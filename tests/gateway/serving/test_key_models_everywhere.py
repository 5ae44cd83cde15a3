"""A key's ``models`` holds for every backend that answers (issue 35, finding 1): the
request's ``fallbacks`` and the config's, a route's candidates, on chat, /v1/responses and
/v1/completions, through a running gateway (the fake upstream, the openai SDK, SQLite). A model
outside the key's list is a 403 (issue 47.6: a 401 tells a client its key is bad)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.serving.test_litellm_conventions import MASTER, _tenant, gw  # noqa: F401

ASK = [{"role": "user", "content": "Say hi."}]


def _key(g: Gateway, models: list[str]) -> str:
    r = httpx.post(g.base_url + "/key/generate", json={"models": models}, timeout=30,
                   headers={"authorization": f"Bearer {MASTER}"})
    assert r.status_code == 200, r.text
    return r.json()["key"]


def _client(g: Gateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=g.base_url + "/v1", api_key=key, max_retries=0)


def _chat(g: Gateway, key: str, model: str, **extra: Any) -> Any:
    return _client(g, key).chat.completions.with_raw_response.create(
        model=model, messages=ASK, max_tokens=20, extra_body=extra or None)


def test_a_body_fallback_outside_the_keys_models_is_refused_on_every_endpoint(
        gw: Gateway, upstream: FakeUpstream) -> None:  # noqa: F811 - fixture
    key = _key(gw, ["fake-strong"])
    upstream.set_mode("fake-strong", "error_500", times=1000)
    calls = {
        "chat": lambda: _chat(gw, key, "fake-strong", fallbacks=["fake-mid"]),
        "responses": lambda: _client(gw, key).responses.create(
            model="fake-strong", input="hi", extra_body={"fallbacks": ["fake-mid"]}),
        "completions": lambda: _client(gw, key).completions.create(
            model="fake-strong", prompt="hi", max_tokens=20,
            extra_body={"fallbacks": ["fake-mid"]}),
    }
    for name, call in calls.items():
        with pytest.raises(openai.PermissionDeniedError) as exc:
            call()
        assert exc.value.body["code"] == "key_model_access_denied", name  # type: ignore[index]
        assert exc.value.body["param"] == "fallbacks", name  # type: ignore[index]
    assert upstream.requests_for("fake-mid") == []  # nothing reached the backend it may not use
    # a fallback the key lists is taken as before
    both = _key(gw, ["fake-strong", "fake-mid"])
    assert _chat(gw, both, "fake-strong", fallbacks=["fake-mid"]).headers[
        "x-tollgate-model"] == "fake-mid"


def test_a_config_fallback_outside_the_keys_models_is_skipped(
        gw: Gateway, upstream: FakeUpstream) -> None:  # noqa: F811 - fixture
    """router_settings.fallbacks maps fake-mid → fake-cheap: a key without fake-cheap gets
    fake-mid's own failure, as LiteLLM's enforce_fallback_model_access does."""
    key = _key(gw, ["fake-mid"])
    upstream.set_mode("fake-mid", "error_500", times=1000)
    with pytest.raises(openai.InternalServerError):
        _chat(gw, key, "fake-mid")
    with pytest.raises(openai.InternalServerError):
        _client(gw, key).responses.create(model="fake-mid", input="hi")
    assert upstream.requests_for("fake-cheap") == []
    allowed = _key(gw, ["fake-mid", "fake-cheap"])
    assert _chat(gw, allowed, "fake-mid").headers["x-tollgate-model"] == "fake-cheap"
    plain = _tenant(gw)  # a tenant's own key (no models list) keeps the config's fallbacks
    assert _chat(gw, plain, "fake-mid").headers["x-tollgate-model"] == "fake-cheap"


def test_a_routed_requests_fallbacks_hold_to_the_keys_models(gateway: Gateway) -> None:
    """A key listing the route ``no-strong`` (fake-mid, fake-cheap) is answered by the route's
    backends; a body fallback to fake-strong, outside its list, is its 401."""
    made = gateway.admin("POST", "/key/generate", json={"models": ["no-strong"]})
    assert made.status_code == 200, made.text
    key = made.json()["key"]
    assert _chat(gateway, key, "no-strong").headers["x-tollgate-model"] in {
        "fake-mid", "fake-cheap"}
    with pytest.raises(openai.PermissionDeniedError) as exc:
        _chat(gateway, key, "no-strong", fallbacks=["fake-strong"])
    assert exc.value.body["param"] == "fallbacks"  # type: ignore[index]
