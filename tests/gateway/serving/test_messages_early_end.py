"""A ``/v1/messages`` stream that ends early pays for what the provider generated (issue 48.1):
``message_start``'s ``output_tokens: 1`` is a placeholder, never the bill.

Two ways a stream ends early, on an Anthropic-wire backend: the upstream ends it cleanly half
way (no ``message_delta``, no ``message_stop``), and the client leaves mid-way. Either way the
output is counted from the text relayed, so the charge covers at least the words the fake
upstream sent (it counts one token a word; the gateway's tokenizer never counts fewer here).

Real parts: uvicorn, httpx reading the raw SSE, litellm's anthropic_messages over HTTP to the
fake upstream's /v1/messages, SQLite.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.config import settings_from_dict
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import Gateway, run_gateway
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES, REPLIES

LONG = "claude-long"  # a long answer, streamed slowly enough for a client to leave mid-way
BRIDGED = "long-bridged"  # the same on OpenAI's wire, reached through litellm's bridge
PRICE = (3.0, 15.0)  # USD per 1M tokens in and out
WORDS = [f"word{i}" for i in range(80)]


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    backends += [FakeBackend(n, reply=" ".join(WORDS), input_per_m=PRICE[0],
                             output_per_m=PRICE[1]) for n in (LONG, BRIDGED)]
    with FakeUpstream(backends) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('early') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    entry = up.model_entry(LONG)
    entry["litellm_params"].update(model=f"anthropic/{LONG}",
                                   api_base=up.base_url.removesuffix("/v1"))
    cfg["model_list"] += [entry, up.model_entry(BRIDGED)]
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def _ended(up: FakeUpstream, how: str, wait_s: float = 10.0):
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        ends = [e for e in up.streams if e.model == LONG and e.how == how]
        if ends:
            return ends[-1]
        time.sleep(0.02)
    raise AssertionError(f"no stream ended {how!r}: {up.streams}")


def _stream(gw: Gateway, key: str, stop_after: int | None = None,
            model: str = LONG) -> tuple[str, list[str]]:
    """The request id and the events read; the client leaves after ``stop_after`` deltas."""
    body = {"model": model, "max_tokens": 500, "stream": True,
            "messages": [{"role": "user", "content": "Count for me"}]}
    kinds: list[str] = []
    with httpx.stream("POST", gw.base_url + "/v1/messages", json=body, timeout=30,
                      headers={"x-api-key": key, "anthropic-version": "2023-06-01"}) as r:
        assert r.status_code == 200, r.read()
        rid = r.headers["x-tollgate-request-id"]
        for line in r.iter_lines():
            if line.startswith("event: "):
                kinds.append(line[7:])
                if stop_after is not None and kinds.count("content_block_delta") >= stop_after:
                    break
    return rid, kinds


def test_an_upstream_that_ends_cleanly_half_way_is_charged_for_the_text_it_sent(
        gw: Gateway, up: FakeUpstream) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    up.set_mode(LONG, "end_mid_stream", times=1)
    rid, kinds = _stream(gw, key)
    assert "message_delta" not in kinds and "message_stop" not in kinds
    sent = _ended(up, "ended_early").chunks
    assert sent == len(WORDS) // 2
    row = gw.log_row(rid)
    assert row["completion_tokens"] >= sent  # not message_start's placeholder of 1
    spent = gw.settled(tenant_id)["spent_usd"]
    assert spent >= (row["prompt_tokens"] * PRICE[0] + sent * PRICE[1]) / 1e6 - 1e-12
    assert spent == pytest.approx(row["cost_usd"], abs=1e-12)


def test_a_client_that_leaves_mid_stream_is_charged_for_what_was_relayed(
        gw: Gateway, up: FakeUpstream) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    up.backends[LONG].chunk_delay_s = 0.02
    try:
        rid, kinds = _stream(gw, key, stop_after=30)
        sent = _ended(up, "peer_closed").chunks
    finally:
        up.backends[LONG].chunk_delay_s = 0.0
    assert kinds.count("content_block_delta") == 30 and sent < len(WORDS)
    row = gw.log_row(rid)
    assert row["status"] == 499
    assert row["completion_tokens"] >= 30  # at least what the client read; never 1
    # the provider generated ``sent`` words; what the gateway read of them is counted (a
    # word may be in flight when the gateway closes the upstream)
    assert row["completion_tokens"] >= sent - 2
    spent = gw.settled(tenant_id)["spent_usd"]
    assert spent == pytest.approx(row["cost_usd"], abs=1e-12)
    assert spent >= (row["prompt_tokens"] * PRICE[0] + 30 * PRICE[1]) / 1e6 - 1e-12


def test_a_whole_stream_is_still_charged_at_the_reported_count(
        gw: Gateway, up: FakeUpstream) -> None:
    """The final ``message_delta``'s count is the bill (the placeholder rule changes only an
    early end)."""
    key, _ = gw.tenant(budget_usd=1.0)
    rid, kinds = _stream(gw, key)
    assert kinds[-1] == "message_stop"
    assert gw.log_row(rid)["completion_tokens"] == len(WORDS)


def test_a_client_that_leaves_a_bridged_stream_is_charged_for_what_was_relayed(
        gw: Gateway, up: FakeUpstream) -> None:
    """The same on an OpenAI-wire backend (litellm's bridge to the Responses API): the
    bridge's ``message_start`` count is no bill either."""
    key, tenant_id = gw.tenant(budget_usd=1.0)
    up.backends[BRIDGED].chunk_delay_s = 0.02
    try:
        rid, kinds = _stream(gw, key, stop_after=30, model=BRIDGED)
    finally:
        up.backends[BRIDGED].chunk_delay_s = 0.0
    assert kinds.count("content_block_delta") == 30
    row = gw.log_row(rid)
    assert row["status"] == 499 and row["completion_tokens"] >= 30
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(row["cost_usd"], abs=1e-12)
