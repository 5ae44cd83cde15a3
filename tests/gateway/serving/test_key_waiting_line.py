"""Waiting in the budget line, per key (issue 35 finding 7): one key's waiting burst does not
hold a team-mate's request back, and a key deleted or expired while its requests wait gets
them answered 401, none served after the delete, none a 500. Real HTTP (the openai SDK, the
fake upstream), SQLite and PostgreSQL."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway

BIG = 4096  # fake-strong's max_output_tokens: a request asking for it carries no exposure


@pytest.fixture(autouse=True)
def waiting_not_lowering(gateway: Gateway) -> Iterator[None]:
    """The line these tests read is the one requests join with ``budget.lower_max_tokens``
    off. With it on (the default since issue 47.4) a request whose max_tokens the free budget
    cannot pay is served at once with a lowered cap instead of waiting
    (tests/gateway/serving/test_claude_code_budget.py), so nothing would wait here."""
    ctx = gateway.app.state.ctx
    saved = ctx.settings
    ctx.settings = saved.model_copy(update={"budget": saved.budget.model_copy(
        update={"lower_max_tokens": False})})
    yield
    ctx.settings = saved


@pytest.fixture
def slow_strong(upstream: FakeUpstream) -> Iterator[FakeUpstream]:
    upstream.backends["fake-strong"].delay_s = 1.0
    yield upstream
    upstream.backends["fake-strong"].delay_s = 0.0


def _ask(g: Gateway, key: str, marker: str, max_tokens: int) -> int:
    try:
        g.client(key, timeout=60).chat.completions.create(
            model="fake-strong", max_tokens=max_tokens,
            messages=[{"role": "user", "content": f"{marker} say hi"}])
    except openai.APIStatusError as e:
        return e.status_code
    return 200


def _generate(g: Gateway, **body: Any) -> str:
    r = g.admin("POST", "/key/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()["key"]


def _markers(up: FakeUpstream) -> list[str]:
    return [str(b["messages"][-1]["content"]).split()[0] for b in up.requests_for("fake-strong")]


def _burst(g: Gateway, key: str, marker: str, n: int, pool: ThreadPoolExecutor,
           up: FakeUpstream) -> list[Any]:
    """``n`` requests of ``key``; back once the first reached the upstream and the others had
    time to join the line (setup waits, not bounds: the asserts do not depend on them)."""
    out = [pool.submit(_ask, g, key, f"{marker}-{i}", BIG) for i in range(n)]
    while not any(m.startswith(marker) for m in _markers(up)) and not all(
            f.done() for f in out):
        time.sleep(0.02)
    time.sleep(0.3)
    return out


def test_a_team_mates_small_request_is_not_held_behind_a_keys_burst(
        gateway: Gateway, slow_strong: FakeUpstream) -> None:
    """Key A's requests each take most of the team's budget: one in flight, the rest wait.
    Team-mate B's small request fits beside it and is served at once, not after A's line."""
    _, tid = gateway.tenant(budget_usd=0.15)
    a, b = _generate(gateway, team_id=tid), _generate(gateway, team_id=tid)
    assert _ask(gateway, b, "warm", 16) == 200  # the backend answers within its bounds
    gateway.settled(tid)
    slow_strong.reset()
    with ThreadPoolExecutor(8) as pool:
        burst = _burst(gateway, a, "A", 5, pool, slow_strong)
        assert _ask(gateway, b, "B", 16) == 200
        codes = [f.result() for f in burst]
    order = _markers(slow_strong)
    assert order.index("B") == 1, order  # right after A's first, before A's waiting ones
    assert codes.count(200) >= 1 and 500 not in codes, codes


@pytest.mark.parametrize("team", [True, False])
def test_deleting_a_key_while_its_requests_wait_answers_them_401(
        gateway: Gateway, slow_strong: FakeUpstream, team: bool) -> None:
    """A team key without a budget of its own (its team's budget fits one request) and a
    key without a team (its max_budget fits one): six requests, one in flight, five
    waiting; the key is deleted: the five are 401, none reaches the upstream."""
    if team:
        _, tid = gateway.tenant(budget_usd=0.15)
        key = _generate(gateway, team_id=tid)
    else:
        key = _generate(gateway, max_budget=0.15)
    marker = "D" + uuid.uuid4().hex[:6]
    with ThreadPoolExecutor(6) as pool:
        burst = _burst(gateway, key, marker, 6, pool, slow_strong)
        r = gateway.admin("POST", "/key/delete", json={"keys": [key]})
        assert r.status_code == 200, r.text
        codes = sorted(f.result() for f in burst)
    assert codes == [200] + [401] * 5, codes
    assert sum(m.startswith(marker) for m in _markers(slow_strong)) == 1


def test_a_key_expiring_while_its_requests_wait_answers_them_401(
        gateway: Gateway, slow_strong: FakeUpstream) -> None:
    slow_strong.backends["fake-strong"].delay_s = 2.5
    key = _generate(gateway, max_budget=0.15, duration="2s")
    marker = "E" + uuid.uuid4().hex[:6]
    with ThreadPoolExecutor(4) as pool:
        codes = sorted(f.result() for f in _burst(gateway, key, marker, 4, pool,
                                                  slow_strong))
    assert codes == [200, 401, 401, 401], codes
    assert sum(m.startswith(marker) for m in _markers(slow_strong)) == 1
