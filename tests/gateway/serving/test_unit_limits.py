"""A key's limits on every endpoint, and the body deadline (issue 48.5, 48.6, 48.10), through
a running gateway: the openai SDK (httpx for rerank and count_tokens; a raw socket for a slow
body) over HTTP to uvicorn, litellm to the fake upstream, SQLite.

- Images, speech, moderations, rerank, transcriptions, embeddings and ``count_tokens`` each
  take a slot of the key's ``max_parallel_requests`` (8 of 8 concurrent were answered with a
  limit of 1) and count against its requests and tokens per minute.
- A body trickled a byte at a time is answered 408 in the endpoint's error shape once
  ``reliability.body_timeout_s`` has passed, the connection closed and the key's slot given
  back (302 of 302 were still open after 90 s, holding the key's slots).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from gateway.config import settings_from_dict
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import Gateway, run_gateway
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES
from tests.gateway.serving.test_unit_endpoints import IMAGE_PRICE, entry, wav

BODY_TIMEOUT_S = 2.0
MSG = [{"role": "user", "content": "count these words please"}]


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    names = ["fake-image", "tts-1", "whisper-1", "omni-moderation-latest", "rerank-v3.5",
             "text-embedding-3-small"]
    with FakeUpstream([FakeBackend(n, reply="ok") for n in [*names, *PRICES]]) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('unit-limits') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url,
                          reliability={"body_timeout_s": BODY_TIMEOUT_S})
    cfg["model_list"] += [
        entry(up, "fake-image", "openai/fake-image", mode="image_generation",
              output_cost_per_image=IMAGE_PRICE),
        entry(up, "tts-1", "openai/tts-1"),
        entry(up, "whisper-1", "openai/whisper-1"),
        entry(up, "omni-moderation-latest", "openai/omni-moderation-latest"),
        entry(up, "rerank", "cohere/rerank-v3.5", root=True),
        entry(up, "text-embedding-3-small", "openai/text-embedding-3-small"),
    ]
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def _key(gw: Gateway, **limits: Any) -> str:
    _, tid = gw.tenant(budget_usd=5.0)
    r = gw.admin("POST", "/key/generate", json={"team_id": tid, **limits})
    assert r.status_code == 200, r.text
    return r.json()["key"]


CALLS = {  # endpoint → (path, how it is posted)
    "images": ("/v1/images/generations",
               {"json": {"model": "fake-image", "prompt": "a lighthouse", "n": 1}}),
    "speech": ("/v1/audio/speech", {"json": {"model": "tts-1", "voice": "alloy",
                                             "input": "hello there"}}),
    "moderations": ("/v1/moderations", {"json": {"model": "omni-moderation-latest",
                                                 "input": "hello"}}),
    "rerank": ("/v1/rerank", {"json": {"model": "rerank", "query": "capital",
                                       "documents": ["Paris", "Berlin"]}}),
    "transcriptions": ("/v1/audio/transcriptions",
                       {"data": {"model": "whisper-1"},
                        "files": {"file": ("a.wav", wav(1.0), "audio/wav")}}),
    "embeddings": ("/v1/embeddings", {"json": {"model": "text-embedding-3-small",
                                               "input": "hello"}}),
    "count_tokens": ("/v1/messages/count_tokens", {"json": {"model": "fake-cheap",
                                                            "messages": MSG}}),
}


def _post(gw: Gateway, key: str, name: str) -> httpx.Response:
    path, kw = CALLS[name]
    return httpx.post(gw.base_url + path, headers={"authorization": f"Bearer {key}"},
                      timeout=240, **kw)  # the first count_tokens spawns its process


def _refusal(r: httpx.Response) -> str:
    body = r.json()
    err = body["error"]
    return f"{err.get('code') or ''} {err['message']}"


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_endpoint_takes_the_keys_parallel_slot(gw: Gateway, name: str) -> None:
    """max_parallel_requests 0 refuses every request (LiteLLM's semantics) on every endpoint;
    a key without limits is served."""
    r = _post(gw, _key(gw, max_parallel_requests=0), name)
    assert r.status_code == 429, r.text
    assert "Max parallel request limit reached for this API key" in _refusal(r)
    ok = _post(gw, _key(gw), name)
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("name", ["images", "transcriptions", "rerank"])
def test_a_unit_request_holds_its_slot_while_in_flight(gw: Gateway, up: FakeUpstream,
                                                       name: str) -> None:
    """A key limited to 1 in flight, a slow upstream: of 6 concurrent requests exactly one
    is answered, the others are 429; the slot is given back when it has finished."""
    key = _key(gw, max_parallel_requests=1)
    backend = {"images": "fake-image", "transcriptions": "whisper-1",
               "rerank": "rerank-v3.5"}[name]
    up.backends[backend].delay_s = 1.0
    try:
        with ThreadPoolExecutor(6) as pool:
            codes = sorted(r.status_code for r in pool.map(lambda _: _post(gw, key, name),
                                                           range(6)))
    finally:
        up.backends[backend].delay_s = 0.0
    assert codes == [200] + [429] * 5, codes
    assert _post(gw, key, name).status_code == 200


def test_unit_inputs_count_against_tokens_per_minute(gw: Gateway) -> None:
    """Speech, images, moderations and rerank reserve their input's bytes in the key's TPM:
    an input past the limit alone is refused for good (``request_too_large``)."""
    key = _key(gw, tpm_limit=40)
    long = "x" * 60
    bodies = {
        "/v1/audio/speech": {"model": "tts-1", "voice": "alloy", "input": long},
        "/v1/images/generations": {"model": "fake-image", "prompt": long},
        "/v1/moderations": {"model": "omni-moderation-latest", "input": long},
        "/v1/rerank": {"model": "rerank", "query": "q", "documents": [long]},
    }
    for path, body in bodies.items():
        r = httpx.post(gw.base_url + path, json=body, timeout=60,
                       headers={"authorization": f"Bearer {key}"})
        assert r.status_code == 429 and r.json()["error"]["code"] == "request_too_large", \
            (path, r.text)


def test_count_tokens_counts_against_tokens_per_minute(gw: Gateway) -> None:
    """The tokens count_tokens counted fill the key's TPM window: past it, the next is 429."""
    key = _key(gw, tpm_limit=30)
    big = {"model": "fake-cheap", "messages": [{"role": "user", "content": "word " * 60}]}
    first = httpx.post(gw.base_url + "/v1/messages/count_tokens", json=big, timeout=240,
                       headers={"authorization": f"Bearer {key}"})
    assert first.status_code == 200 and first.json()["input_tokens"] > 30
    again = httpx.post(gw.base_url + "/v1/messages/count_tokens", json=big, timeout=240,
                       headers={"authorization": f"Bearer {key}"})
    assert again.status_code == 429, again.text
    assert again.json()["type"] == "error"  # Anthropic's error shape


def _trickle(gw: Gateway, key: str, path: str) -> tuple[float, bytes]:
    """Send a head declaring 1,000 bytes of body, then a byte every 0.5 s: (seconds until
    the gateway answered and closed, what it sent)."""
    host, port = gw.base_url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=30)
    head = (f"POST {path} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {key}\r\n"
            "content-type: application/json\r\ncontent-length: 1000\r\n\r\n{").encode()
    t0 = time.monotonic()
    s.sendall(head)
    s.settimeout(0.5)
    got = b""
    try:
        while time.monotonic() - t0 < 30:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                s.sendall(b" ")  # one more byte of whitespace
                continue
            if not chunk:
                break
            got += chunk
    finally:
        s.close()
    return time.monotonic() - t0, got


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/images/generations",
                                  "/v1/messages"])
def test_a_slow_body_is_answered_408_and_its_slot_given_back(gw: Gateway, path: str) -> None:
    """A body trickled a byte every 0.5 s: 408 in the endpoint's error shape, the connection
    closed by the body deadline, and the key (max 1 in flight) is served right after."""
    key = _key(gw, max_parallel_requests=1)
    took, got = _trickle(gw, key, path)
    assert BODY_TIMEOUT_S <= took < BODY_TIMEOUT_S + 3, took
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), got[:200]
    err = json.loads(body)
    if path == "/v1/messages":  # Anthropic's shape: any other 4xx is invalid_request_error
        assert err["type"] == "error", err
        assert err["error"]["type"] == "invalid_request_error", err
        assert "did not arrive" in err["error"]["message"], err
    else:
        assert err["error"]["code"] == "request_timeout", err
    r = _post(gw, key, "images")
    assert r.status_code == 200, r.text


def test_a_refusal_before_the_body_is_read_closes_the_connection(gw: Gateway) -> None:
    """A trickling client refused before its body is read (its key's limit is full) is
    answered 429 and the connection closed at once: the server does not keep reading what
    it still sends (the bench saw such connections open for 90 s)."""
    key = _key(gw, max_parallel_requests=0)
    took, got = _trickle(gw, key, "/v1/images/generations")
    assert got.startswith(b"HTTP/1.1 429"), got[:200]
    assert took < BODY_TIMEOUT_S, took


def test_a_count_tokens_body_over_its_limit_is_a_413(gw: Gateway) -> None:
    """count_tokens bodies are bounded by ``reliability.count_tokens_max_bytes`` (2 MiB by
    default): a 3 MB one is refused in Anthropic's error shape, before it is counted."""
    key = _key(gw)
    big = {"model": "fake-cheap", "messages": [{"role": "user", "content": "word " * 600_000}]}
    r = httpx.post(gw.base_url + "/v1/messages/count_tokens", json=big, timeout=240,
                   headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 413, r.text
    assert r.json()["type"] == "error" and "count_tokens" in r.json()["error"]["message"]
    # its refusal waited on one of the replica's refusal slots (its body unread), given back
    waits = gw.app.state.ctx.reliability.refusal_waits
    assert waits.available_tokens == waits.total_tokens == 256
