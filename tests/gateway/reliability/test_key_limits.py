"""LiteLLM's per-key and per-team ``rpm_limit``, ``tpm_limit`` and ``max_parallel_requests``
through running gateways (the openai SDK as the client, the fake upstream over HTTP): set with
/key/generate and /team/new, enforced with LiteLLM's semantics (0 blocks; a key's limit and
its team's both apply), and across two replicas sharing Redis and PostgreSQL."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
import redis

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.reliability.conftest import MSG, MakeGateway
from tests.gateway.reliability.harness import REDIS_URL


def _key(gw: Gateway, **body: Any) -> str:
    r = gw.admin("POST", "/key/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()["key"]


def _call(gw: Gateway, key: str, **kw: Any) -> int | str:
    """1 when answered, else the refusal's error code."""
    try:
        gw.client(key).chat.completions.create(model="fake-cheap", messages=MSG,
                                               max_tokens=kw.pop("max_tokens", 16), **kw)
    except openai.RateLimitError as e:
        assert e.status_code == 429
        return f"{e.body['code']}: {e.body['message']}"  # type: ignore[index]
    return 1


def _fresh_minute(min_left_s: float = 15.0) -> None:
    """Windows are calendar minutes on Redis' clock: start a burst well inside one."""
    seconds, micros = redis.Redis.from_url(REDIS_URL).time()
    left = 60.0 - (seconds + micros / 1e6) % 60.0
    if left < min_left_s:
        time.sleep(left + 0.2)


def test_zero_limits_block_and_are_answered(make_gateway: MakeGateway) -> None:
    """rpm_limit, tpm_limit or max_parallel_requests 0 on a key refuses every request with
    a 429 naming the key (was: a 400 at /key/generate); /key/info answers the limits."""
    gw = make_gateway()
    for field in ("rpm_limit", "tpm_limit", "max_parallel_requests"):
        key = _key(gw, **{field: 0})
        got = _call(gw, key)
        assert isinstance(got, str) and got.startswith(("rate_limit_exceeded",
                                                        "request_too_large")), got
        assert "this API key" in got and "tenant" not in got, got
        info = gw.admin("GET", "/key/info", params={"key": key}).json()["info"]
        assert info[field] == 0
    assert _call(gw, _key(gw, rpm_limit=None, tpm_limit=None)) == 1  # null: no limit


def test_key_rpm_and_its_teams_both_apply(make_gateway: MakeGateway) -> None:
    """Key A rpm 2 in a team of rpm 3, key B of the same team without a limit: A gets two,
    then 429 on the key; B gets the team's third; then the team's limit refuses B too."""
    gw = make_gateway()
    r = gw.admin("POST", "/admin/tenants", json={"name": "team-rpm",
                                                  "policy": {"requests_per_minute": 3}})
    assert r.status_code in (200, 201), r.text
    a, b = _key(gw, team_id="team-rpm", rpm_limit=2), _key(gw, team_id="team-rpm")
    _fresh_minute()
    assert [_call(gw, a), _call(gw, a)] == [1, 1]
    refused = _call(gw, a)
    assert isinstance(refused, str) and "this API key." in refused, refused
    assert _call(gw, b) == 1
    refused = _call(gw, b)
    assert isinstance(refused, str) and "tenant (team)" in refused, refused
    # the response headers report the tightest limit that applies
    raw = gw.client(_key(gw, rpm_limit=5)).chat.completions.with_raw_response.create(
        model="fake-cheap", messages=MSG, max_tokens=8)
    assert raw.headers["x-ratelimit-limit-requests"] == "5"
    assert raw.headers["x-ratelimit-remaining-requests"] == "4"


@pytest.mark.redis
@pytest.mark.postgres
def test_key_limits_hold_across_two_replicas(pg_url: str, make_gateway: MakeGateway,
                                             upstream: FakeUpstream, redis_prefix: str
                                             ) -> None:
    """Two replicas sharing PostgreSQL and Redis. A key with rpm_limit 4: of 10 requests
    spread over both, exactly 4 pass. A key with max_parallel_requests 1 and a slow backend:
    two concurrent requests on different replicas, one is refused (429 naming the parallel
    limit) and after the first has finished the key is served again. A key with tpm_limit
    1,000 and requests of ~520 tokens: at most 1,000 tokens answered."""
    rel = {"redis_url": REDIS_URL, "redis_prefix": redis_prefix}
    gws = [make_gateway(db_url=pg_url, reliability=rel) for _ in range(2)]
    rpm_key = _key(gws[0], rpm_limit=4)
    _fresh_minute()
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda i: _call(gws[i % 2], rpm_key), range(10)))
    assert results.count(1) == 4, results

    par_key = _key(gws[0], max_parallel_requests=1)
    upstream.backends["fake-cheap"].delay_s = 1.5
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_call, gws[0], par_key)
        time.sleep(0.5)  # the first is in flight on replica 0
        second = pool.submit(_call, gws[1], par_key)
        outcomes = sorted([first.result(), second.result()], key=str)
    upstream.backends["fake-cheap"].delay_s = 0.0
    assert outcomes[0] == 1 and "Max parallel request limit" in str(outcomes[1]), outcomes
    assert _call(gws[1], par_key) == 1  # its slot was given back

    tpm_key = _key(gws[0], tpm_limit=1000)
    saved, upstream.count_tokens = upstream.count_tokens, (lambda text: len(text.encode()))
    prompt = [{"role": "user", "content": "word " * 100}]

    def one(i: int) -> int:
        try:
            r = gws[i % 2].client(tpm_key).chat.completions.create(
                model="fake-cheap", messages=prompt, max_tokens=20)
        except openai.RateLimitError:
            return 0
        assert r.usage is not None
        return r.usage.total_tokens

    _fresh_minute()
    try:
        with ThreadPoolExecutor(8) as pool:
            used = list(pool.map(one, range(8)))
    finally:
        upstream.count_tokens = saved
    assert any(used) and sum(used) <= 1000, used


def test_parallel_slot_is_given_back_after_a_stream(make_gateway: MakeGateway) -> None:
    """A streamed request holds its slot until it has ended, then the key is served again;
    a refused request (over the parallel limit) gives nothing back it did not take."""
    gw = make_gateway()
    key = _key(gw, max_parallel_requests=1)
    client = gw.client(key)
    for _ in range(3):
        stream = client.chat.completions.create(model="fake-cheap", messages=MSG,
                                                max_tokens=8, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
