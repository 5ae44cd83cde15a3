"""A conversation stays on the backend that holds its prompt cache (issue 47, item 9).

Through a running gateway over HTTP (uvicorn, SQLite, MiniLM, the local OpenAI-compatible fake
upstream, the official anthropic and openai SDKs). The router is the tests' small artifact with
a calibration slope (p̂ depends on the prompt, so turns of one conversation rank backends
differently), ``auto-cheap`` keeps its promise (max_drop 0.06), and ``encoder_max_chars`` is
short so each turn is routed on its own last words, as a long agent context's window slides.
Each turn asked alone goes to more than one backend (turn 7 to fake-cheap, the rest to
fake-mid), and so did turn 7 of the session before this fix; now the 10-turn session stays on
one: in
Claude Code's wire format through the anthropic SDK (``x-claude-code-session-id``, system
blocks with ``cache_control``) and through the openai SDK with no session id at all (the
conversation named by its prefix).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import anthropic
import pytest

from bench.serving.fake_router import QUALITY, build_router
from gateway.config import settings_from_dict
from gateway.serving.plan.session_affinity import (
    SessionAffinity,
    cached_cost,
    conversation_key,
    earlier_share,
)
from router_core.runtime.router import Calibration
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, TIMEOUTS, Gateway, run_gateway
from tests.gateway.router_fixture import PRICES, REPLIES

TURNS = ["Prove sqrt(2) is irrational.", "What is the capital of Australia?",
         "Prove that there are infinitely many primes.", "Translate 'good morning' into French.",
         "Derive the closed form of the sum of the first n squares.",
         "Sort [3, 1, 2] in Python.", "Prove the AM-GM inequality for two numbers.",
         "Write a haiku about routers.", "Explain the CAP theorem with a proof sketch.",
         "What is 2 + 2?"]
SYSTEM = "You are a careful coding agent. " * 40
SLOPE = 8.0  # p̂_h = σ(8·s + logit(quality_h)): s = q·e_h moves p̂ by prompt


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    with FakeUpstream([FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                                   output_per_m=PRICES[n][1]) for n in PRICES]) as u:
        yield u


@pytest.fixture(scope="module")
def pasted(up: FakeUpstream, encoder, tmp_path_factory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("affinity")
    base = build_router()
    router = replace(base, calibration=Calibration(
        a=dict.fromkeys(QUALITY, SLOPE), b=dict(base.calibration.b), a0=0.0, b0=0.0))
    settings = settings_from_dict({
        "model_list": [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES],
        "routes": {"auto-cheap": {"max_drop": 0.06}}, "encoder_max_chars": 45,
        "database_url": f"sqlite:///{tmp / 'affinity.db'}", "admin_key": ADMIN_KEY,
        "reliability": {"spool_dir": str(tmp / "spool")}})
    yield from run_gateway(settings, router, encoder)


def _alone(gw: Gateway, key: str) -> set[str]:
    client = gw.client(key)
    return {client.chat.completions.create(
        model="auto-cheap", messages=[{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": t}]).model for t in TURNS}


def test_a_claude_code_session_stays_on_one_backend(pasted: Gateway) -> None:
    key, _ = pasted.tenant()
    assert len(_alone(pasted, key)) > 1  # each turn alone: the router spreads them
    session = str(uuid.uuid4())
    client = anthropic.Anthropic(
        base_url=pasted.base_url, api_key=key, max_retries=0,
        default_headers={"x-claude-code-session-id": session,
                         "anthropic-beta": "interleaved-thinking-2025-05-14"})
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    messages: list[dict] = []
    served = []
    for turn in TURNS:
        messages.append({"role": "user", "content": [{"type": "text", "text": turn}]})
        msg = client.messages.create(model="auto-cheap", max_tokens=64, system=system,
                                     messages=messages)
        served.append(msg.model)
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": msg.content[0].text}]})
    assert len(set(served)) == 1, served


def test_an_openai_conversation_stays_on_one_backend_by_its_prefix(pasted: Gateway) -> None:
    key, _ = pasted.tenant()
    client = pasted.client(key)
    messages: list[dict] = [{"role": "system", "content": SYSTEM}]
    served = []
    for turn in TURNS:
        messages.append({"role": "user", "content": turn})
        raw = client.chat.completions.with_raw_response.create(model="auto-cheap",
                                                               messages=messages)
        answer = raw.parse()
        served.append(answer.model)
        messages.append({"role": "assistant", "content": answer.choices[0].message.content})
    assert len(set(served)) == 1, served
    row = pasted.log_row(raw.headers["x-tollgate-request-id"])
    assert "holds this conversation's prompt cache" in row["reason"] or (
        row["candidates"][0]["backend"] == served[0])


def test_affinity_forgets_after_its_ttl_and_stays_bounded() -> None:
    now = [0.0]
    a = SessionAffinity(ttl_s=10, max_size=2, clock=lambda: now[0])
    a.hold("c1", "x")
    assert a.held("c1") == "x"
    now[0] = 11
    assert a.held("c1") is None
    for k in ("a", "b", "c"):
        a.hold(k, k)
    assert a.held("a") is None and a.held("c") == "c"


def test_a_conversation_is_named_by_its_session_or_its_prefix() -> None:
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"}]
    later = [*first, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]
    assert conversation_key("t", None, first) == conversation_key("t", None, later)
    assert conversation_key("t", None, first) != conversation_key("t2", None, first)
    assert conversation_key("t", "s1", first) != conversation_key("t", "s2", first)
    assert conversation_key("t", None, [{"role": "system", "content": "s"}]) is None


def test_the_cache_discount_counts_the_earlier_turns_at_the_cache_read_price() -> None:
    msgs = [{"role": "system", "content": "x" * 90}, {"role": "user", "content": "y" * 10}]
    assert earlier_share(msgs) == pytest.approx(0.9)
    # 1000 prompt tokens at $3/M = $0.003 in; 90% of them read at 0.1x: saves 0.9·0.003·0.9
    assert cached_cost(0.004, 0.003, 0.9, 0.1) == pytest.approx(0.004 - 0.00243)

