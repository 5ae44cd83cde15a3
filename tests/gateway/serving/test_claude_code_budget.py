"""Issue 47.4: a developer spends the whole budget with Claude Code's own ``max_tokens:
32000``, never past it, and parallel subagent streams start at once.

A request whose 32000-token hold does not fit the free room has its output cap lowered to what
half that room pays (gateway/serving/budget/budget_hold.py ``_share_cap``), announced in
``x-tollgate-output-cap``; ``budget: {lower_max_tokens: false}`` restores the refusal, which
says how many output tokens the budget still pays for.

Real parts: uvicorn, the official ``anthropic`` SDK streaming /v1/messages, litellm's
anthropic_messages over HTTP to the fake upstream's Anthropic wire (which stops at the
max_tokens it receives, as Anthropic does), SQLite. Each upstream answer waits at a
two-party barrier: both streams of a pair reach the upstream together, or the pair fails.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import pytest

from gateway.config import settings_from_dict
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, Gateway, run_gateway

CLAUDE = "fake-sonnet"
PRICE = (3.0, 15.0)  # USD per 1M tokens, Sonnet 4.5's list price
ANSWER_WORDS = 3000  # what one agent turn writes (the fake counts a word as a token)
MAX_TOKENS = 32000  # Claude Code's own max_tokens


class Pairing:
    """A barrier the upstream's answers wait at while ``on``: proof two streams overlap."""

    def __init__(self) -> None:
        self.on = False
        self.barrier = threading.Barrier(2, timeout=10)
        self.broken = 0
        self.caps: list[int] = []

    def reply(self, body: dict) -> str:
        if self.on:
            try:
                self.barrier.wait()
            except threading.BrokenBarrierError:
                self.broken += 1
                self.barrier.reset()
        return " ".join(["word"] * ANSWER_WORDS)


@pytest.fixture(scope="module")
def pairing() -> Pairing:
    return Pairing()


@pytest.fixture(scope="module")
def up(pairing: Pairing) -> Iterator[FakeUpstream]:
    with FakeUpstream([FakeBackend(CLAUDE, reply=pairing.reply, input_per_m=PRICE[0],
                                   output_per_m=PRICE[1])]) as u:
        yield u


def _config(up: FakeUpstream, url: str, **extra: Any) -> dict[str, Any]:
    entry = up.model_entry(CLAUDE, max_output_tokens=64000)  # litellm's map for Sonnet 4.5
    entry["litellm_params"].update(model=f"anthropic/{CLAUDE}",
                                   api_base=up.base_url.removesuffix("/v1"))
    return {"model_list": [entry], "admin_key": ADMIN_KEY, "database_url": url,
            "routes": {}, **extra}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('cc') / 'tollgate.db'}"
    yield from run_gateway(settings_from_dict(_config(up, url)), test_router, encoder)


def _stream(gw: Gateway, key: str) -> tuple[int, str, int | None]:
    """One Claude Code turn, streamed: (status, error code or stop reason, output cap)."""
    client = anthropic.Anthropic(base_url=gw.base_url, api_key=key, max_retries=0)
    try:
        with client.messages.with_streaming_response.create(
                model=CLAUDE, max_tokens=MAX_TOKENS, stream=True,
                messages=[{"role": "user", "content": "Refactor the module."}]) as raw:
            cap = raw.headers.get("x-tollgate-output-cap")
            stop = ""
            for line in raw.iter_lines():
                if '"stop_reason":"' in line.replace(" ", ""):
                    stop = line.replace(" ", "").split('"stop_reason":"')[1].split('"')[0]
            return raw.status_code, stop, int(cap) if cap else None
    except anthropic.APIStatusError as e:
        return e.status_code, (e.body or {}).get("error", {}).get("type", ""), None


def test_a_1_usd_key_is_spent_to_95_percent_by_parallel_32000_token_streams(
        gw: Gateway, pairing: Pairing) -> None:
    budget = 1.0
    key, tid = gw.tenant(budget_usd=budget)
    pairing.on = True
    pairs, lowered = 0, []
    try:
        with ThreadPoolExecutor(2) as pool:
            while pairs < 60:
                broken = pairing.broken
                got = list(pool.map(lambda _: _stream(gw, key), range(2)))
                if any(status != 200 for status, _, _ in got):
                    refused = got  # its partner waited at the barrier alone: not counted
                    break
                assert pairing.broken == broken, "a stream of the pair waited for the other"
                pairs += 1
                lowered += [cap for _, _, cap in got if cap is not None]
                assert gw.settled(tid)["spent_usd"] <= budget
    finally:
        pairing.on = False
    spent = gw.settled(tid)["spent_usd"]
    share = spent / budget
    print(f"pairs={pairs} burst_share={share:.4f} overspend_usd={max(0.0, spent - budget):.6f} "
          f"lowered_caps={lowered}")
    assert share >= 0.95 and spent <= budget
    # before: the second of each pair waited for the first; the budget stopped at $0.48
    assert lowered and all(0 < c < MAX_TOKENS for c in lowered)
    # the last refusal: the budget pays for less than min_output_tokens more (final)
    assert all(s == 429 or s == 200 for s, _, _ in refused), refused


def test_without_lowering_the_refusal_says_what_the_budget_still_pays(
        gw: Gateway) -> None:
    """``lower_max_tokens: false``: the client's cap is never lowered; the refusal (the
    README's earlier worst-case hold) names the output cap the budget pays for."""
    ctx = gw.app.state.ctx
    saved = ctx.settings
    ctx.settings = saved.model_copy(update={"budget": saved.budget.model_copy(
        update={"lower_max_tokens": False})})
    try:
        key, _ = gw.tenant(budget_usd=0.2)  # $0.48 of hold does not fit
        r = httpx.post(gw.base_url + "/v1/messages", timeout=30,
                       headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                       json={"model": CLAUDE, "max_tokens": MAX_TOKENS, "stream": True,
                             "messages": [{"role": "user", "content": "Refactor."}]})
        assert r.status_code == 429, r.text
        message = r.json()["error"]["message"]
        assert "the remaining budget pays for up to" in message, message
        assert "x-tollgate-output-cap" not in r.headers
    finally:
        ctx.settings = saved
