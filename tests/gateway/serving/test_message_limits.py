"""Requests with very many messages or content parts (issue 24): refused with a clear 400
before anything walks them, so litellm's per-message work never holds the event loop
(gateway/serving/validation.py ``check_counts``)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway


def _ticker_route(app: FastAPI) -> None:
    """A test-only route that starts a ticker on the gateway's own event loop: it ticks every
    5 ms and keeps the longest gap between two ticks (the longest the loop was held)."""
    state: dict[str, Any] = {"gaps": []}

    async def start() -> dict[str, bool]:
        async def tick() -> None:
            last = time.perf_counter()
            while True:
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                state["gaps"].append(now - last)
                last = now

        state["task"] = asyncio.get_running_loop().create_task(tick())
        return {"ok": True}

    async def gaps() -> dict[str, Any]:
        out, state["gaps"] = state["gaps"], []
        return {"gaps": out}

    app.add_api_route("/test-ticker/start", start, methods=["POST"])
    app.add_api_route("/test-ticker/gaps", gaps, methods=["GET"])


def _longest_hold(gateway: Gateway, key: str, messages: list[dict]) -> tuple[httpx.Response,
                                                                              float]:
    """The response to ``messages`` and the longest the gateway's loop was held meanwhile
    (the body is encoded before: the gateway shares this process, and its GIL)."""
    body = json.dumps({"model": "fake-cheap", "messages": messages, "max_tokens": 8}).encode()
    httpx.get(gateway.base_url + "/test-ticker/gaps", timeout=30)  # start afresh
    r = httpx.post(gateway.base_url + "/v1/chat/completions", timeout=120, content=body,
                   headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
    gaps = httpx.get(gateway.base_url + "/test-ticker/gaps", timeout=30).json()["gaps"]
    assert gaps  # the ticker ran
    return r, max(gaps)


def test_forty_thousand_messages_are_refused_without_holding_the_loop(
        gateway: Gateway, upstream: FakeUpstream) -> None:
    """40,000 messages: 400 array_above_max_length naming messages, nothing sent upstream,
    and the gateway's loop held no longer than while it serves a conversation at the bound
    (2,047 messages) (before: litellm's per-message walk held it ~0.2-0.6 s)."""
    if not any(getattr(r, "path", "") == "/test-ticker/gaps" for r in gateway.app.routes):
        _ticker_route(gateway.app)
    httpx.post(gateway.base_url + "/test-ticker/start", timeout=30)
    key, _ = gateway.tenant()
    at_bound, bound_hold = _longest_hold(gateway, key, [
        {"role": "user", "content": f"message number {i}"} for i in range(2047)])
    assert at_bound.status_code == 200, at_bound.text
    before = len(upstream.requests)
    r, hold = _longest_hold(gateway, key, [
        {"role": "user", "content": f"message number {i}"} for i in range(40_000)])
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "array_above_max_length" and err["param"] == "messages"
    assert "maximum length 2048" in err["message"]
    assert len(upstream.requests) == before  # refused before anything reached the upstream
    # relative to what serving a request at the bound holds it (a 20 ms floor: the
    # ticker's own jitter on a loaded machine)
    assert hold < 3 * max(bound_hold, 0.02), (hold, bound_hold)


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
