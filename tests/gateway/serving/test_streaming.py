"""Streaming (SSE) through the gateway: chunks, usage, [DONE], tool calls, broken streams,
a stream the client abandons (closed upstream, settled)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from gateway.prompt_tokens import count_text_tokens
from tests.fakes.upstream import FakeUpstream, StreamEnd
from tests.gateway.conftest import Gateway
from tests.gateway.router_fixture import PRICES, REPLIES, VERSION

HELLO = [{"role": "user", "content": "Stream a greeting please"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_stream_with_usage(gateway: Gateway, client: openai.OpenAI) -> None:
    with client.chat.completions.with_streaming_response.create(
        model="auto", messages=HELLO, stream=True, stream_options={"include_usage": True}
    ) as raw:
        rid = raw.headers["x-tollgate-request-id"]
        assert raw.headers["x-tollgate-model"] == "fake-mid"
        assert raw.headers["x-tollgate-router-version"] == VERSION
        assert "x-tollgate-cost-usd" not in raw.headers  # unknown until the stream ends
        chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REPLIES["fake-mid"]
    assert all(c.model == "fake-mid" for c in chunks)
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1]
    usage = usage_chunks[0].usage
    assert usage.completion_tokens == len(REPLIES["fake-mid"].split())

    row = gateway.log_row(rid)
    assert row["stream"] is True and row["status"] == 200
    assert row["ttft_ms"] is not None and 0 < row["ttft_ms"] <= row["latency_ms"]
    assert row["completion_tokens"] == usage.completion_tokens
    assert row["prompt_tokens"] == usage.prompt_tokens
    pin, pout = PRICES["fake-mid"]
    cost = (usage.prompt_tokens * pin + usage.completion_tokens * pout) / 1e6
    assert abs(row["cost_usd"] - cost) < 1e-12


def test_stream_ends_with_done_and_hides_usage_unless_asked(
    gateway: Gateway, tenant: tuple[str, str], upstream: FakeUpstream
) -> None:
    body = {"model": "cheap", "messages": HELLO, "stream": True}
    with httpx.stream(
        "POST", gateway.base_url + "/v1/chat/completions", json=body,
        headers={"authorization": f"Bearer {tenant[0]}"}, timeout=60,
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        rid = r.headers["x-tollgate-request-id"]
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    assert all(ln.startswith("data: ") for ln in lines)
    assert not any('"usage"' in ln for ln in lines)  # the client did not ask for usage
    # ... but the gateway asked upstream for it, and settles from it
    assert upstream.requests_for("fake-cheap")[-1]["stream_options"] == {"include_usage": True}
    row = gateway.log_row(rid)
    assert row["completion_tokens"] == len(REPLIES["fake-cheap"].split())


def test_stream_tool_call(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="best", messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[WEATHER_TOOL], tool_choice="auto", stream=True,
        )
    )
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls and calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == '{"city": "Paris"}'
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_stream_falls_back_before_the_first_byte(
    gateway: Gateway, client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    upstream.set_mode("fake-mid", "error_500")
    with client.chat.completions.with_streaming_response.create(
        model="auto", messages=HELLO, stream=True
    ) as raw:
        rid = raw.headers["x-tollgate-request-id"]
        assert raw.headers["x-tollgate-model"] == "fake-cheap"
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert text == REPLIES["fake-cheap"]
    row = gateway.log_row(rid)
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [
        ("fake-mid", 500), ("fake-cheap", 200)]


@pytest.mark.parametrize("mode", ["stall_mid_stream", "malformed_json"])
def test_broken_stream_ends_with_an_error_event(
    gateway: Gateway, client: openai.OpenAI, upstream: FakeUpstream, mode: str
) -> None:
    upstream.set_mode("fake-mid", mode)
    got: list[str] = []
    with client.chat.completions.with_streaming_response.create(
        model="auto", messages=HELLO, stream=True
    ) as raw:
        rid = raw.headers["x-tollgate-request-id"]
        with pytest.raises(openai.APIError) as exc:
            for c in raw.parse():
                got.extend(c.choices[0].delta.content or "" for _ in [0] if c.choices)
    assert "stream broken" in str(exc.value)
    assert "".join(got) and "".join(got) != REPLIES["fake-mid"]  # half an answer arrived
    row = gateway.log_row(rid)
    assert row["status"] in (502, 504) and "stream broken" in row["error"]
    assert row["completion_tokens"] > 0  # settled from what was streamed
    assert row["cost_usd"] > 0


def test_client_leaving_mid_stream_settles_what_was_streamed(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    key, tid = gateway.tenant(budget_usd=1.0)
    upstream.set_mode("fake-cheap", "stall_mid_stream")  # half the answer, then silence
    body = {"model": "cheap", "messages": HELLO, "stream": True}
    with httpx.stream("POST", gateway.base_url + "/v1/chat/completions", json=body,
                      headers={"authorization": f"Bearer {key}"}, timeout=60) as r:
        rid = r.headers["x-tollgate-request-id"]
        for line in r.iter_lines():
            if '"content": "Cheap"' in line or '"content":"Cheap"' in line:
                break  # got a piece of the answer: hang up while the upstream stalls
    assert _stream_end(upstream, "fake-cheap").how == "peer_closed"  # closed while stalled
    row = gateway.log_row(rid)
    assert row["status"] == 499 and row["error"] == "client disconnected"
    assert row["completion_tokens"] >= 1  # counted from the streamed text
    info = gateway.settled(tid)
    assert info["reserved_usd"] == 0
    assert info["spent_usd"] == pytest.approx(row["cost_usd"], abs=3e-9)
    assert row["cost_usd"] > 0


def _stream_end(upstream: FakeUpstream, model: str, wait_s: float = 120) -> StreamEnd:
    """How the fake upstream's one stream for ``model`` ended, once it has (a generous wait:
    a stream nobody closes runs a minute or more)."""
    deadline = time.monotonic() + wait_s
    while True:
        ends = [e for e in upstream.streams if e.model == model]
        if ends or time.monotonic() > deadline:
            assert len(ends) == 1, ends
            return ends[0]
        time.sleep(0.05)


@pytest.fixture
def slow_long_cheap(upstream: FakeUpstream) -> Iterator[int]:
    """fake-cheap streams a 200-word answer, a word every 0.3 s (a minute in all)."""
    b = upstream.backends["fake-cheap"]
    saved = b.reply, b.chunk_delay_s
    b.reply, b.chunk_delay_s = " ".join(["word"] * 200), 0.3
    yield 200
    b.reply, b.chunk_delay_s = saved


def test_a_stream_the_client_abandons_is_closed_upstream_and_settled(
    gateway: Gateway, upstream: FakeUpstream, slow_long_cheap: int
) -> None:
    """The SDK client reads two chunks of a long, slow stream and closes it: the gateway
    closes its upstream connection (the fake upstream sees the peer close mid-stream, long
    before the answer's end), charges what was relayed and logs the client as gone."""
    key, tid = gateway.tenant(budget_usd=1.0)
    stream = gateway.client(key).chat.completions.create(
        model="fake-cheap", messages=HELLO, stream=True)
    rid = stream.response.headers["x-tollgate-request-id"]
    got: list[str] = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            got.append(chunk.choices[0].delta.content)
        if len(got) == 2:
            break
    stream.close()
    assert "".join(got) == "word word"

    end = _stream_end(upstream, "fake-cheap")
    assert end.how == "peer_closed" and 2 <= end.chunks < slow_long_cheap

    row = gateway.log_row(rid)
    assert row["status"] == 499 and row["error"] == "client disconnected"
    backend = gateway.settings.backend("fake-cheap")
    relayed = " ".join(["word"] * end.chunks)  # at most what the upstream sent
    assert count_text_tokens(backend, "word word") <= row["completion_tokens"]
    assert row["completion_tokens"] <= count_text_tokens(backend, relayed)
    pin, pout = (p / 1e6 for p in PRICES["fake-cheap"])
    assert row["cost_usd"] == pytest.approx(
        row["prompt_tokens"] * pin + row["completion_tokens"] * pout)
    info = gateway.settled(tid)
    assert info["reserved_usd"] == 0
    assert info["spent_usd"] == pytest.approx(row["cost_usd"], abs=3e-9)

