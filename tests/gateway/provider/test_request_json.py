"""Upstream request bodies are serialised with orjson (gateway/provider/request_json.py)
by an openai SDK client of ours that litellm is given as ``client=``: the same request the SDK's own
client sends, faster; what orjson refuses is left to the SDK. The SDK itself is not patched."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pydantic
import pytest
from openai import _base_client
from openai._utils import _json as sdk_json

from gateway.config import settings_from_dict
from gateway.provider import request_json
from gateway.provider.litellm_transport import chat_kwargs, wire_params
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.router_fixture import REPLIES

TEXT = 'héllo 漢字 😀 "quoted" \\ back\nslash\t\x01 ' * 3


class Part(pydantic.BaseModel):
    type: str = "text"
    text: str | None = None


def _sent(cls: type[openai.AsyncOpenAI], body: Any, options: dict | None = None,
          stream: bool = False) -> httpx.Request:
    """The HTTP request a client of ``cls`` sends for ``post("/chat/completions", body=...)``."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True})

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            client = cls(api_key="sk-test", base_url="http://upstream.test/v1",
                         http_client=http, max_retries=0)
            await client.post("/chat/completions", cast_to=object, body=body,
                              options=options or {}, stream=stream,
                              stream_cls=openai.AsyncStream[object])

    asyncio.run(go())
    (request,) = seen
    return request


def _both(body: Any, options: dict | None = None) -> tuple[httpx.Request, httpx.Request]:
    return _sent(request_json.OrjsonAsyncOpenAI, body, options), _sent(openai.AsyncOpenAI, body,
                                                                      options)


def test_the_sdk_is_not_patched() -> None:
    assert _base_client.openapi_dumps is sdk_json.openapi_dumps
    assert not hasattr(request_json, "install")


BODIES = [
    {"model": "m", "messages": [{"role": "user", "content": TEXT}], "temperature": 0.7,
     "n": 1, "max_tokens": 8, "stop": None, "stream": True, "logit_bias": {"50256": -100},
     "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
    {"messages": [{"role": "user", "content": [Part(text=TEXT)]}]},
    {"when": datetime.datetime(2026, 12, 1, 9, 30, 5, 123, tzinfo=datetime.UTC)},
    {"ints": [0, -1, 2**63 - 1], "floats": [0.1, 2.5, 1e-05, 1e16], "nested": {"a": [[]]}},
    {},
]


@pytest.mark.parametrize("body", BODIES)
def test_the_same_request_as_the_sdk(body: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    used = _spy(monkeypatch)
    mine, sdk = _both(body)
    assert used == [body]  # written by request_json
    assert json.loads(mine.content) == json.loads(sdk.content)
    if "floats" not in body:  # a float may be spelled differently (1e-05 as 0.00001)
        assert mine.content == sdk.content  # byte for byte: UTF-8, compact, the same escapes
    assert mine.url == sdk.url and mine.method == sdk.method == "POST"
    # the same headers: content-type application/json, user agent, auth, length
    assert mine.headers["content-length"] == str(len(mine.content))
    assert {**mine.headers, "content-length": ""} == {**sdk.headers, "content-length": ""}
    assert mine.headers["content-type"] == "application/json"


def test_extra_body_merged_as_the_sdk_merges_it() -> None:
    """Shallow, extra_body wins, an Omit value drops the key."""
    body = {"model": "m", "messages": [{"role": "user", "content": TEXT}], "top_p": 1,
            "metadata": {"a": 1}}
    extra = {"top_p": 0.5, "metadata": {"b": 2}, "model": openai.Omit(), "repetition_penalty": 1}
    mine, sdk = _both(body, {"extra_json": extra})
    assert mine.content == sdk.content
    assert json.loads(mine.content) == {"messages": body["messages"], "top_p": 0.5,
                                        "metadata": {"b": 2}, "repetition_penalty": 1}
    assert dict(mine.headers) == dict(sdk.headers)
    mine, sdk = _both(None, {"extra_json": {"only": "extra"}})  # no body: the SDK's own path
    assert mine.content == sdk.content == b'{"only":"extra"}'


def test_what_orjson_refuses_goes_to_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    used = _spy(monkeypatch)
    for body, expected in [({1: 2}, b'{"1":2}'), ({"n": 10**30}, None)]:
        mine, sdk = _both(body)
        assert mine.content == sdk.content == (expected or sdk_json.openapi_dumps(body))
    assert used == [], "request_json refused both and did not write them"
    for cls in (request_json.OrjsonAsyncOpenAI, openai.AsyncOpenAI):
        with pytest.raises(UnicodeEncodeError):  # a lone surrogate: refused as before
            _sent(cls, {"s": "a\ud800b"})


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record the bodies request_json writes (it serves the gateway's thread too)."""
    used: list[Any] = []
    real: Callable[[Any], bytes] = request_json.request_json

    def spy(obj: Any) -> bytes:
        data = real(obj)  # a refused body raises before it is recorded
        used.append(obj)
        return data

    monkeypatch.setattr(request_json, "request_json", spy)
    return used


def test_one_client_per_deployment_and_loop_for_sdk_providers_only() -> None:
    settings = settings_from_dict({"model_list": [
        {"model_name": "a", "litellm_params": {"model": "openai/a", "api_base": "http://h:1/v1",
                                               "api_key": "sk-a", "organization": "org-a"}},
        {"model_name": "d", "litellm_params": {"model": "deepinfra/meta-llama/x",
                                               "api_key": "di"}},
        {"model_name": "c", "litellm_params": {"model": "anthropic/claude-haiku-4-5",
                                               "api_key": "sk-ant"}},
    ]})
    call = {name: settings.backend(name) for name in "adc"}

    def clients() -> dict[str, Any]:
        return {n: chat_kwargs(b, b.litellm_params, [], {}).get("client")
                for n, b in call.items()}

    assert clients() == {"a": None, "d": None, "c": None}  # no running loop: litellm's own

    async def twice() -> list[dict[str, Any]]:
        return [clients(), clients()]

    first, again = asyncio.run(twice())
    assert first == again  # reused within a loop
    a, d = first["a"], first["d"]
    assert isinstance(a, request_json.OrjsonAsyncOpenAI) and first["c"] is None  # not the SDK
    assert (a.api_key, str(a.base_url), a.organization, a.max_retries) == (
        "sk-a", "http://h:1/v1/", "org-a", 0)
    assert (d.api_key, str(d.base_url)) == ("di", "https://api.deepinfra.com/v1/openai/")
    assert a.user_agent == openai.AsyncOpenAI(api_key="k").user_agent
    other_loop, _ = asyncio.run(twice())
    assert other_loop["a"] is not a  # a loop's transport is not shared with another


def test_a_big_prompt_reaches_the_upstream_intact(gateway: Gateway, tenant: tuple[str, str],
                                                  upstream: FakeUpstream,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    used = _spy(monkeypatch)
    big = TEXT * 20_000  # ~1.3 MB of mixed scripts, quotes and control characters
    key, _ = tenant
    gateway.client(key).chat.completions.create(
        model="fake-cheap", messages=[{"role": "user", "content": big}], max_tokens=8)
    sent = upstream.requests_for("fake-cheap")[-1]
    assert sent["messages"] == [{"role": "user", "content": big}] and sent["max_tokens"] == 8
    assert [b["messages"][0]["content"] for b in used] == [big]  # written by request_json
    assert upstream.headers[-1]["content-type"] == "application/json"


@pytest.mark.parametrize("stream", [False, True])
def test_extra_body_and_streaming_through_the_gateway(
        gateway: Gateway, tenant: tuple[str, str], upstream: FakeUpstream,
        monkeypatch: pytest.MonkeyPatch, stream: bool) -> None:
    """A parameter litellm does not map rides in extra_body (litellm_transport.chat_kwargs), which the
    client merges into the body it writes; a stream's chunks come back as before."""
    used = _spy(monkeypatch)
    key, _ = tenant
    client = gateway.client(key)
    messages = [{"role": "user", "content": TEXT}]
    extra = {"user": "ü-1", "metadata": {"k": "v 漢"}, "verbosity": "low"}
    mapped = wire_params("openai/fake-cheap", upstream.base_url)
    assert mapped is not None and not set(extra) & mapped  # so _kwargs puts them in extra_body
    if stream:
        chunks = list(client.chat.completions.create(
            model="fake-cheap", messages=messages, stream=True, extra_body=extra))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        text = client.chat.completions.create(
            model="fake-cheap", messages=messages, extra_body=extra).choices[0].message.content
    assert text == REPLIES["fake-cheap"]
    sent = upstream.requests_for("fake-cheap")[-1]
    assert sent["messages"] == messages and sent.get("stream", False) is stream
    assert {k: sent[k] for k in extra} == extra
    assert len(used) == 1 and {k: used[0][k] for k in extra} == extra
