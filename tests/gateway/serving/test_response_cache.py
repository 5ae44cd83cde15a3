"""Response caching as LiteLLM configures it (``litellm_settings.cache`` + ``cache_params``),
through a running gateway: the openai SDK over HTTP, the fake upstream, a real SQLite store and
a real Redis (127.0.0.1:6379; each test its own key prefix, deleted afterwards).

A repeated request is answered from the cache: the upstream is called once, the tenant is
charged once, the response says ``x-tollgate-cache: hit`` and its log row says "cache hit".
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.config import settings_from_dict
from router_core.encoders.minilm import Encoder
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway, gateway_config, run_gateway

REDIS = "redis://127.0.0.1:6379/0"


def _cached_gateway(upstream: FakeUpstream, router: Router, encoder: Encoder, tmp: Path,
                    cache_params: dict[str, Any], db: str = "gw.db",
                    prefix: str = "tollgate") -> Iterator[Gateway]:
    cfg = gateway_config(upstream, tmp, database_url=f"sqlite:///{tmp / db}",
                         litellm_settings={"cache": True, "cache_params": cache_params})
    cfg["reliability"]["redis_prefix"] = prefix
    settings = settings_from_dict(cfg)
    assert not any(k.startswith("litellm_settings.cache") for k in settings.ignored_keys)
    yield from run_gateway(settings, router, encoder)


@pytest.fixture
def gw(upstream: FakeUpstream, test_router: Router, encoder: Encoder,
       tmp_path: Path) -> Iterator[Gateway]:
    yield from _cached_gateway(upstream, test_router, encoder, tmp_path,
                               {"type": "local", "ttl": 60})


def _ask(gw: Gateway, key: str, content: str, **kw: Any) -> Any:
    return gw.client(key).chat.completions.with_raw_response.create(
        messages=[{"role": "user", "content": content}], **{"model": "fake-mid", **kw})


def _calls(up: FakeUpstream) -> int:
    return sum(b.calls for b in up.backends.values())


def test_a_repeated_request_is_a_hit_charged_once(gw: Gateway, upstream: FakeUpstream) -> None:
    """The second identical request is answered from the cache: one upstream call, the
    tenant's spend is the first request's cost, the hit costs $0 and is logged as a hit with
    the answer's token counts (what the dashboard's saving prices)."""
    key, tid = gw.tenant(budget_usd=1.0)
    prompt = "cache me " + uuid.uuid4().hex
    first = _ask(gw, key, prompt, temperature=0.7, max_tokens=32)
    assert first.headers["x-tollgate-cache"] == "miss"
    spent = gw.settled(tid)["spent_usd"]
    assert spent > 0
    second = _ask(gw, key, prompt, temperature=0.7, max_tokens=32)
    assert second.headers["x-tollgate-cache"] == "hit"
    assert second.headers["x-litellm-cache-key"] == first.headers["x-litellm-cache-key"]
    assert float(second.headers["x-tollgate-cost-usd"]) == 0.0
    a, b = first.parse(), second.parse()
    assert b.choices[0].message.content == a.choices[0].message.content
    assert b.model == "fake-mid" and b.usage.completion_tokens == a.usage.completion_tokens
    assert upstream.backends["fake-mid"].calls == 1
    assert gw.settled(tid)["spent_usd"] == pytest.approx(spent)
    row = gw.log_row(second.headers["x-tollgate-request-id"])
    assert row["status"] == 200 and row["cost_usd"] == 0.0 and row["reserved_usd"] == 0.0
    assert row["reason"].endswith("cache hit") and row["chosen_model"] == "fake-mid"
    assert row["prompt_tokens"] == a.usage.prompt_tokens
    assert "cache hit" not in (gw.log_row(first.headers["x-tollgate-request-id"])["reason"])


def test_another_tenant_never_reads_the_answer(gw: Gateway, upstream: FakeUpstream) -> None:
    prompt = "tenant-scoped " + uuid.uuid4().hex
    k1, _ = gw.tenant()
    k2, _ = gw.tenant()
    assert _ask(gw, k1, prompt).headers["x-tollgate-cache"] == "miss"
    other = _ask(gw, k2, prompt)
    assert other.headers["x-tollgate-cache"] == "miss"
    assert upstream.backends["fake-mid"].calls == 2
    assert _ask(gw, k1, prompt).headers["x-tollgate-cache"] == "hit"


def test_what_is_sent_upstream_is_in_the_key(gw: Gateway, upstream: FakeUpstream) -> None:
    """Another parameter or another backend is another answer; ``user`` is not."""
    key, _ = gw.tenant()
    prompt = "params " + uuid.uuid4().hex
    assert _ask(gw, key, prompt, temperature=0.2).headers["x-tollgate-cache"] == "miss"
    assert _ask(gw, key, prompt, temperature=0.3).headers["x-tollgate-cache"] == "miss"
    assert _ask(gw, key, prompt, model="fake-cheap",
                temperature=0.2).headers["x-tollgate-cache"] == "miss"
    assert _ask(gw, key, prompt, temperature=0.2,
                user="someone").headers["x-tollgate-cache"] == "hit"
    assert _calls(upstream) == 3


def test_no_cache_no_store_and_ttl(gw: Gateway, upstream: FakeUpstream) -> None:
    """LiteLLM's per-request controls: no-cache does not read (but stores), no-store does
    not write, ttl bounds how long this answer is kept, s-maxage how old an answer may be."""
    key, _ = gw.tenant()
    p1, p2, p3 = (f"controls {i} " + uuid.uuid4().hex for i in range(3))
    assert _ask(gw, key, p1).headers["x-tollgate-cache"] == "miss"
    fresh = _ask(gw, key, p1, extra_body={"cache": {"no-cache": True}})
    assert fresh.headers["x-tollgate-cache"] == "miss" and _calls(upstream) == 2
    assert "cache" not in upstream.requests_for("fake-mid")[-1]  # never sent upstream
    assert _ask(gw, key, p1).headers["x-tollgate-cache"] == "hit"
    assert _ask(gw, key, p2, extra_body={"cache": {"no-store": True}}).headers[
        "x-tollgate-cache"] == "miss"
    assert _ask(gw, key, p2).headers["x-tollgate-cache"] == "miss"  # nothing was stored
    assert _calls(upstream) == 4
    assert _ask(gw, key, p3, extra_body={"cache": {"ttl": 1}}).headers[
        "x-tollgate-cache"] == "miss"
    assert _ask(gw, key, p3, extra_body={"cache": {"s-maxage": 30}}).headers[
        "x-tollgate-cache"] == "hit"
    time.sleep(1.2)
    assert _ask(gw, key, p3).headers["x-tollgate-cache"] == "miss"  # expired
    assert _calls(upstream) == 6


def test_a_bad_cache_control_is_a_400(gw: Gateway) -> None:
    key, _ = gw.tenant()
    import openai

    for bad in ({"ttl": -1}, {"no-cache": "yes"}, {"bogus": 1}, "on"):
        with pytest.raises(openai.BadRequestError) as e:
            _ask(gw, key, "bad", extra_body={"cache": bad})
        assert str(e.value.body["param"]).startswith("cache")  # type: ignore[index]


def test_auto_caches_by_the_backend_it_would_choose(gw: Gateway,
                                                    upstream: FakeUpstream) -> None:
    key, _ = gw.tenant()
    prompt = "route me " + uuid.uuid4().hex
    first = _ask(gw, key, prompt, model="auto")
    second = _ask(gw, key, prompt, model="auto")
    assert first.headers["x-tollgate-cache"] == "miss"
    assert second.headers["x-tollgate-cache"] == "hit"
    assert second.headers["x-tollgate-model"] == first.headers["x-tollgate-model"]
    assert _calls(upstream) == 1
    row = gw.log_row(second.headers["x-tollgate-request-id"])
    assert row["route"] == "auto" and row["reason"].endswith("cache hit")


def test_a_stream_is_cached_and_replayed(gw: Gateway, upstream: FakeUpstream) -> None:
    """A streamed miss is stored from the assembled stream; the next request, streamed or
    not, is answered from it (a streamed hit replays it as chunks, usage included)."""
    key, tid = gw.tenant(budget_usd=1.0)
    prompt = "stream me " + uuid.uuid4().hex
    client = gw.client(key)

    def streamed() -> tuple[str, str, Any]:
        with client.chat.completions.with_streaming_response.create(
                model="fake-mid", messages=[{"role": "user", "content": prompt}], stream=True,
                stream_options={"include_usage": True}) as resp:
            chunks = list(resp.parse())
            state = resp.headers["x-tollgate-cache"]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return state, text, chunks[-1].usage

    state, text, usage = streamed()
    assert state == "miss" and text
    spent = gw.settled(tid)["spent_usd"]
    state2, text2, usage2 = streamed()
    assert (state2, text2) == ("hit", text)
    assert usage2.completion_tokens == usage.completion_tokens
    plain = _ask(gw, key, prompt)
    assert plain.headers["x-tollgate-cache"] == "hit"
    assert plain.parse().choices[0].message.content == text
    assert upstream.backends["fake-mid"].calls == 1
    assert gw.settled(tid)["spent_usd"] == pytest.approx(spent)


def test_tool_call_answers_are_cached(gw: Gateway, upstream: FakeUpstream) -> None:
    key, _ = gw.tenant()
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    prompt = "weather " + uuid.uuid4().hex
    first = _ask(gw, key, prompt, tools=tools, stream=False)
    second = _ask(gw, key, prompt, tools=tools)
    assert second.headers["x-tollgate-cache"] == "hit"
    call = second.parse().choices[0].message.tool_calls[0]
    assert call.function.name == "weather"
    assert call.function.arguments == first.parse().choices[0].message.tool_calls[0].function.arguments
    assert _calls(upstream) == 1


@pytest.fixture
def prefix() -> Iterator[str]:
    p = "tgtest-" + uuid.uuid4().hex[:12]
    yield p
    r = redis.Redis.from_url(REDIS)
    for k in r.scan_iter(match=f"{p}:*"):
        r.delete(k)
    r.close()


def test_redis_is_shared_across_replicas(upstream: FakeUpstream, test_router: Router,
                                         encoder: Encoder, tmp_path: Path, prefix: str) -> None:
    """Two gateways on one database and one Redis: an answer one stored, the other serves."""
    params = {"type": "redis", "url": REDIS, "ttl": 60}
    a_gw = _cached_gateway(upstream, test_router, encoder, tmp_path, params, prefix=prefix)
    b_gw = _cached_gateway(upstream, test_router, encoder, tmp_path, params, prefix=prefix)
    a, b = next(a_gw), next(b_gw)
    try:
        key, _ = a.tenant()
        prompt = "shared " + uuid.uuid4().hex
        assert _ask(a, key, prompt).headers["x-tollgate-cache"] == "miss"
        deadline = time.monotonic() + 30  # stored after the body was sent
        while not list(redis.Redis.from_url(REDIS).scan_iter(match=f"{prefix}:rc:*")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert _ask(b, key, prompt).headers["x-tollgate-cache"] == "hit"
        assert _calls(upstream) == 1
    finally:
        for g in (a_gw, b_gw):
            g.close()


def test_redis_down_serves_uncached(upstream: FakeUpstream, test_router: Router,
                                    encoder: Encoder, tmp_path: Path) -> None:
    """An unreachable Redis never fails a request: served, said to be a miss, counted."""
    gen = _cached_gateway(upstream, test_router, encoder, tmp_path,
                          {"type": "redis", "host": "127.0.0.1", "port": 1})
    gw = next(gen)
    try:
        key, _ = gw.tenant()
        for _ in range(2):
            r = _ask(gw, key, "no redis here")
            assert r.status_code == 200 and r.headers["x-tollgate-cache"] == "miss"
        assert _calls(upstream) == 2
        assert gw.app.state.ctx.response_cache.errors >= 1
        metrics = gw.admin("GET", "/metrics").text
        assert 'tollgate_response_cache_total{result="error"}' in metrics
    finally:
        gen.close()


def test_a_hit_counts_as_saving_on_the_dashboard(gw: Gateway, upstream: FakeUpstream) -> None:
    """The hit's row costs $0 at its answer's token counts, so the dashboard's saving against
    the strongest backend counts its whole would-be cost (a route's traffic: the saving is
    measured on routed requests only)."""
    import httpx

    key, tid = gw.tenant(budget_usd=1.0)
    prompt = "dashboard " + uuid.uuid4().hex
    asked = [_ask(gw, key, prompt, model="auto") for _ in range(2)]
    assert [a.headers["x-tollgate-cache"] for a in asked] == ["miss", "hit"]
    for a in asked:
        gw.log_row(a.headers["x-tollgate-request-id"])
    spent = gw.settled(tid)["spent_usd"]
    r = httpx.get(gw.base_url + "/dashboard/api/summary",
                  headers={"authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 200, r.text
    saving = r.json()["saving"]
    assert saving["compared"] == 2 and saving["actual_usd"] == pytest.approx(spent)
    per_request = saving["comparator_usd"] / 2  # the same prompt and answer twice
    assert saving["saving_usd"] == pytest.approx(2 * per_request - spent)
    assert saving["saving_usd"] > per_request  # the hit saved all of its would-be cost


def test_an_answer_under_a_lowered_output_cap_is_not_cached(gw: Gateway,
                                                            upstream: FakeUpstream) -> None:
    """Without max_tokens, a small budget lowers the cap sent upstream (fake-mid's 4096
    output tokens cost $0.0082; the budget pays ~500): that answer depends on the budget, not
    only on the request, so it is not stored; with the client's own cap it is."""
    key, _ = gw.tenant(budget_usd=0.001)
    prompt = "lowered " + uuid.uuid4().hex
    for _ in range(2):
        assert _ask(gw, key, prompt).headers["x-tollgate-cache"] == "miss"
    assert upstream.requests_for("fake-mid")[-1]["max_tokens"] < 4096  # lowered indeed
    assert _calls(upstream) == 2
    assert _ask(gw, key, prompt, max_tokens=32).headers["x-tollgate-cache"] == "miss"
    assert _ask(gw, key, prompt, max_tokens=32).headers["x-tollgate-cache"] == "hit"
    assert _calls(upstream) == 3


def test_a_streamed_tool_call_is_cached_whole(gw: Gateway, upstream: FakeUpstream) -> None:
    """A streamed tool call is stored as the call it adds up to: a later request, streamed
    or not, gets the same call."""
    key, _ = gw.tenant()
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    messages = [{"role": "user", "content": "weather streamed " + uuid.uuid4().hex}]
    client = gw.client(key)
    chunks = list(client.chat.completions.create(model="fake-mid", messages=messages,
                                                 tools=tools, stream=True))
    args = "".join(c.choices[0].delta.tool_calls[0].function.arguments or ""
                   for c in chunks if c.choices and c.choices[0].delta.tool_calls)
    raw = client.chat.completions.with_raw_response.create(model="fake-mid",
                                                           messages=messages, tools=tools)
    assert raw.headers["x-tollgate-cache"] == "hit"
    msg = raw.parse().choices[0]
    assert msg.finish_reason == "tool_calls"
    assert msg.message.tool_calls[0].function.name == "weather"
    assert msg.message.tool_calls[0].function.arguments == args
    replay = list(client.chat.completions.create(model="fake-mid", messages=messages,
                                                 tools=tools, stream=True))
    assert replay[0].choices[0].delta.tool_calls[0].function.arguments == args
    assert _calls(upstream) == 1
