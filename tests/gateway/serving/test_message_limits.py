"""Requests with very many messages or content parts (issue 24): refused with a clear 400
before anything walks them, so litellm's per-message work never holds the event loop
(gateway/serving/request/validation.py ``check_counts``)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway


def _post(gateway: Gateway, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gateway.base_url + "/v1/chat/completions", timeout=120, json=body,
                      headers={"authorization": f"Bearer {key}"})


def test_forty_thousand_messages_are_refused_before_anything_walks_them(
        gateway: Gateway, upstream: FakeUpstream) -> None:
    """36,000 messages (7.4 MB, as the bench's 40,000): 400 array_above_max_length naming
    messages, right after the body is parsed (in a worker thread), before validation,
    planning or litellm walk the messages on the event loop (before: served, litellm's
    per-message work held the loop); nothing is sent upstream. The loop stall itself is
    measured by bench/serving/hostile.py in separate processes: in this one, the GIL it shares
    with the fake upstream makes a loop-stall figure noise (measured here: ~0.2 s before,
    0.07-0.17 s after, on a loaded 2-core machine)."""
    key, _ = gateway.tenant()
    filler = "lorem ipsum dolor sit amet " * 7  # ~190 bytes a message, as the bench's
    many = [{"role": "user", "content": f"{filler} {i}"} for i in range(36_000)]
    before = len(upstream.requests)
    r = _post(gateway, key, {"model": "fake-cheap", "messages": many, "max_tokens": 8})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "array_above_max_length" and err["param"] == "messages"
    assert "maximum length 2048, but got an array with length 36000" in err["message"]
    assert len(upstream.requests) == before  # refused before anything reached the upstream
    row = gateway.log_row(r.headers["x-tollgate-request-id"])
    assert row["status"] == 400 and row["attempts"] == []  # refused and logged, not planned


def test_content_parts_are_bounded_and_real_conversations_pass(
        gateway: Gateway, upstream: FakeUpstream) -> None:
    key, _ = gateway.tenant()
    client = gateway.client(key)
    parts = [{"type": "text", "text": "x"} for _ in range(5000)]
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="fake-cheap", max_tokens=8,
                                       messages=[{"role": "user", "content": parts}])
    assert exc.value.body["code"] == "array_above_max_length"  # type: ignore[index]
    long_agent = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
                  for i in range(2047)]  # at the bound: served
    answer = client.chat.completions.create(model="fake-cheap", max_tokens=8,
                                            messages=long_agent)
    assert answer.choices[0].message.content


def _tool(i: int, properties: int = 2) -> dict:
    props = {f"p{j}": {"type": "string", "description": "a field"} for j in range(properties)}
    return {"type": "function", "function": {"name": f"tool_{i}", "description": "a tool",
                                             "parameters": {"type": "object",
                                                            "properties": props}}}


def test_tools_count_toward_the_limits_that_keep_the_loop_free(
        gateway: Gateway, upstream: FakeUpstream) -> None:
    """Issue 35: 15,000 tools (5.4 MB) took /health to 146-1,027 ms: litellm sanitises every
    tool schema on the event loop, and only messages and parts were counted. Now more than
    128 tools (OpenAI's own bound) or more than ``max_tool_values`` values in the tools and
    schemas are a 400 before anything walks them; a real agent's tools are served."""
    key, _ = gateway.tenant()
    client = gateway.client(key)
    msg = [{"role": "user", "content": "hi"}]
    before = len(upstream.requests)
    r = _post(gateway, key, {"model": "fake-cheap", "messages": msg, "max_tokens": 8,
                             "tools": [_tool(i) for i in range(15_000)]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "array_above_max_length" and err["param"] == "tools"
    with pytest.raises(openai.BadRequestError) as exc:  # few tools, each schema enormous
        client.chat.completions.create(model="fake-cheap", messages=msg, max_tokens=8,
                                       tools=[_tool(i, properties=400) for i in range(20)])
    assert exc.value.body["param"] == "tools"  # type: ignore[index]
    assert "max_tool_values" in exc.value.body["message"]  # type: ignore[index]
    assert len(upstream.requests) == before
    ok = client.chat.completions.create(model="fake-cheap", messages=msg, max_tokens=8,
                                        tools=[_tool(i, properties=8) for i in range(128)])
    assert ok.choices
