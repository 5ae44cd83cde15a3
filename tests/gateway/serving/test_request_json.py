"""Upstream request bodies are serialised with orjson (gateway/serving/request_json.py): the
same JSON the openai SDK writes, faster; what orjson refuses goes to the SDK's serialiser."""

from __future__ import annotations

import datetime
import json

import pydantic
import pytest
from openai import _base_client

from gateway.serving import request_json
from gateway.serving import upstream as _upstream  # noqa: F401 - installs request_json
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway

TEXT = 'héllo 漢字 😀 "quoted" \\ back\nslash\t\x01 ' * 3


class Part(pydantic.BaseModel):
    type: str = "text"
    text: str | None = None


def test_the_sdk_serialises_with_request_json() -> None:
    assert _base_client.openapi_dumps is request_json.request_json


@pytest.mark.parametrize("body", [
    {"model": "m", "messages": [{"role": "user", "content": TEXT}], "temperature": 0.7,
     "n": 1, "max_tokens": 8, "stop": None, "stream": True, "logit_bias": {"50256": -100},
     "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
    {"messages": [{"role": "user", "content": [Part(text=TEXT)]}]},
    {"when": datetime.datetime(2026, 12, 1, 9, 30, 5, 123, tzinfo=datetime.UTC)},
    {"ints": [0, -1, 2**63 - 1], "floats": [0.1, 2.5, 1e-05, 1e16], "nested": {"a": [[]]}},
])
def test_the_same_json_as_the_sdk(body: dict) -> None:
    sdk = request_json._sdk_dumps
    assert sdk is not None
    mine = request_json.request_json(body)
    assert json.loads(mine) == json.loads(sdk(body))
    if "floats" not in body:  # a float may be spelled differently (1e-05 as 0.00001)
        assert mine == sdk(body)  # byte for byte: UTF-8, compact, the same escapes


def test_what_orjson_refuses_goes_to_the_sdk() -> None:
    sdk = request_json._sdk_dumps
    assert sdk is not None
    assert request_json.request_json({1: 2}) == sdk({1: 2}) == b'{"1":2}'
    assert request_json.request_json({"n": 10**30}) == sdk({"n": 10**30})
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate: refused as before
        request_json.request_json({"s": "a\ud800b"})


def test_a_big_prompt_reaches_the_upstream_intact(gateway: Gateway, tenant: tuple[str, str],
                                                  upstream: FakeUpstream) -> None:
    big = TEXT * 20_000  # ~1.3 MB of mixed scripts, quotes and control characters
    key, _ = tenant
    gateway.client(key).chat.completions.create(
        model="fake-cheap", messages=[{"role": "user", "content": big}], max_tokens=8)
    sent = upstream.requests_for("fake-cheap")[-1]
    assert sent["messages"] == [{"role": "user", "content": big}] and sent["max_tokens"] == 8
