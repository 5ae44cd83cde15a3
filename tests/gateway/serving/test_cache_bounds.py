"""The response cache's bounds against a hostile tenant (issue 48.9, 48.13), through a running
gateway: the openai SDK over HTTP, the fake upstream, a real SQLite store and a real Redis
(127.0.0.1:6379, a key prefix of the test's own, deleted afterwards).

- A request's ``cache.ttl`` is cut to the operator's ``cache.max_ttl_s``: a client once pinned
  Redis entries for 31 years (``ttl: 1e9``) in the Redis that holds rate limits and revocations.
- A tenant (or key) whose budget is $0 gets no answer from the cache either: it pays for none.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import redis

from gateway.config import settings_from_dict
from router_core.encoders.minilm import Encoder
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway, gateway_config, run_gateway

REDIS = "redis://127.0.0.1:6379/0"
MAX_TTL_S = 120.0


@pytest.fixture
def gw(upstream: FakeUpstream, test_router: Router, encoder: Encoder,
       tmp_path: Path) -> Iterator[Gateway]:
    prefix = "tgtest-" + uuid.uuid4().hex[:12]
    cfg = gateway_config(upstream, tmp_path, database_url=f"sqlite:///{tmp_path / 'gw.db'}",
                         cache={"enabled": True, "type": "redis", "redis_url": REDIS,
                                "ttl_s": 60, "max_ttl_s": MAX_TTL_S})
    cfg["reliability"]["redis_prefix"] = prefix
    try:
        yield from run_gateway(settings_from_dict(cfg), test_router, encoder)
    finally:
        r = redis.Redis.from_url(REDIS)
        for k in r.scan_iter(match=f"{prefix}:*"):
            r.delete(k)
        r.close()


def _ask(gw: Gateway, key: str, content: str, **kw: Any) -> Any:
    return gw.client(key).chat.completions.with_raw_response.create(
        messages=[{"role": "user", "content": content}], model="fake-mid", max_tokens=16, **kw)


def _entry_ttls(gw: Gateway) -> list[float]:
    prefix = gw.settings.reliability.redis_prefix
    r = redis.Redis.from_url(REDIS)
    try:
        return [r.pttl(k) / 1000 for k in r.scan_iter(match=f"{prefix}:rc:*")]
    finally:
        r.close()


def test_a_clients_cache_ttl_is_cut_to_the_operators_maximum(gw: Gateway) -> None:
    """``cache.ttl`` of 1e9 - 1 s (accepted as a positive number) keeps the answer at most
    ``max_ttl_s``; a ttl below the maximum is kept as asked."""
    key, _ = gw.tenant(budget_usd=1.0)
    _ask(gw, key, "pin me " + uuid.uuid4().hex, extra_body={"cache": {"ttl": 1e9 - 1}})
    _ask(gw, key, "short " + uuid.uuid4().hex, extra_body={"cache": {"ttl": 30}})
    ttls = sorted(_entry_ttls(gw))
    assert len(ttls) == 2
    assert 0 < ttls[0] <= 30
    assert MAX_TTL_S - 10 < ttls[1] <= MAX_TTL_S


def test_the_configured_ttl_may_not_exceed_the_maximum() -> None:
    from gateway.config.cache import CacheSettings

    with pytest.raises(ValueError, match="max_ttl_s"):
        CacheSettings(enabled=True, ttl_s=7200, max_ttl_s=3600)
    assert CacheSettings(ttl_s=86400, max_ttl_s=86400).max_ttl_s == 86400


def test_a_zero_budget_gets_no_cached_answer(gw: Gateway, upstream: FakeUpstream) -> None:
    """A tenant's answer is cached; once the operator sets its budget to $0 the same request
    is refused (429 budget_exceeded), not replayed, and the upstream is not called."""
    key, tid = gw.tenant(budget_usd=1.0)
    prompt = "cached then cut " + uuid.uuid4().hex
    assert _ask(gw, key, prompt).headers["x-tollgate-cache"] == "miss"
    assert _ask(gw, key, prompt).headers["x-tollgate-cache"] == "hit"
    calls = upstream.backends["fake-mid"].calls
    r = gw.admin("PATCH", f"/admin/tenants/{tid}", json={"budget_usd": 0.0})
    assert r.status_code == 200, r.text
    with pytest.raises(openai.RateLimitError) as e:
        _ask(gw, key, prompt)
    assert e.value.body["code"] == "budget_exceeded"
    assert upstream.backends["fake-mid"].calls == calls
