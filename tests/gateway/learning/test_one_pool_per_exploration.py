"""One exploration runs on one pool, and its judge is resolved from that pool.

An exploration takes ``pools.current`` once and carries it: a hot swap in the middle of it
(here: from inside the reference's upstream call) changes nothing for the calls after it, so
one exploration never mixes two pools' names. And the judge is not kept from startup: an
exploration that starts after a swap asks the judge backend of the new pool.

The second pool is the first with every backend calling one other upstream model
(``swapped``), so any upstream call made on it shows in the fake upstream's log. Before, the
explorer re-read ``pools.current`` at each step (the shadow calls after the swap went to
``swapped``) and the judge kept the backend it was built with (an exploration after a swap
still asked the startup judge). Real parts: uvicorn, the OpenAI SDK, SQLite with the
gateway's migrations, the fake upstream over HTTP.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.config import settings_from_dict
from gateway.learning import tables as ldb
from gateway.pool import Pool, build_pool
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import TIMEOUTS, Gateway, run_gateway
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES, REPLIES

FRONTIER, JUDGE, SWAPPED = "fake-frontier", "fake-judge", "swapped"
VERDICT = "Score 1: 4\nScore 2: 9"
# filled by the fixture: the gateway's context and the pool the reference's call swaps in
HOOK: dict[str, Any] = {}


def _frontier_reply(body: dict) -> str:
    """The reference's answer; the first time, the pool is swapped while it is being asked."""
    second = HOOK.pop("swap_to", None)
    if second is not None:
        HOOK["ctx"].pool.swap(second)
    return "frontier answer"


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    backends += [FakeBackend(FRONTIER, reply=_frontier_reply, input_per_m=30.0,
                             output_per_m=60.0),
                 FakeBackend(JUDGE, reply=VERDICT, input_per_m=1.0, output_per_m=2.0),
                 FakeBackend(SWAPPED, reply=VERDICT)]
    with FakeUpstream(backends) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('onepool') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    cfg["model_list"] = [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES]
    cfg["model_list"] += [up.model_entry(FRONTIER), up.model_entry(JUDGE)]
    cfg["routes"] = {"promised": {"max_drop": 0.01, "reference": FRONTIER}}
    cfg["retraining"] = {"refine_priors_s": None, "poll_s": 3600, "exploration": {
        "enabled": True, "epsilon": {"promised": 1.0}, "candidates": 2, "budget_usd": 10.0,
        "period": "total", "max_tokens": 64, "judge": {"kind": "llm", "model": JUDGE},
        # every request explored from the first: no share-of-spend bound (its own test:
        # test_exploration_share.py)
        "max_share": None}}
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


@pytest.fixture
def pools(gw: Gateway, up: FakeUpstream, test_router: Router) -> Iterator[tuple[Pool, Pool]]:
    """(the startup pool, the same pool with every backend calling ``swapped``); the
    startup pool is current again after the test."""
    ctx = gw.app.state.ctx
    first = ctx.pool.current
    moved = [b.model_copy(update={"litellm_params": {**b.litellm_params,
                                                     "model": f"openai/{SWAPPED}"}})
             for b in first.settings.model_list]
    second = build_pool(first.settings.model_copy(update={"model_list": moved}),
                        first.prices, test_router)
    assert [b.model_name for b in second.settings.model_list] == list(first.backends)
    up.reset()
    yield first, second
    HOOK.clear()
    ctx.pool.swap(first)


def _observations(engine: sa.Engine) -> list[dict]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(ldb.observations_t)).mappings()]


def _explored(gw: Gateway, before: int, rows: int) -> list[dict]:
    """The observations stored after the first ``before``, once ``rows`` more are stored and
    the learning loop has nothing in flight (pytest's timeout bounds the wait)."""
    learning = gw.app.state.ctx.learning
    while len(_observations(gw.engine)) < before + rows or learning._tasks:
        time.sleep(0.05)
    return _observations(gw.engine)[before:]


def _ask(gw: Gateway) -> str:
    """One request on the promised route, routed by λ to a backend that is not its reference
    (so the exploration asks the reference beside it); the backend that answered."""
    key, _ = gw.tenant()
    resp = gw.client(key).chat.completions.create(
        model="promised", messages=[{"role": "user", "content": "Explain one topic."}],
        extra_body={"tollgate": {"cost_weight": 50.0}})
    assert resp.model != FRONTIER
    return resp.model


def test_a_swap_mid_exploration_keeps_the_exploration_on_its_first_pool(
        gw: Gateway, up: FakeUpstream, pools: tuple[Pool, Pool]) -> None:
    first, second = pools
    ctx = gw.app.state.ctx
    before = len(_observations(gw.engine))
    HOOK.update(ctx=ctx, swap_to=second)
    served = _ask(gw)
    rows = _explored(gw, before, 4)  # served and reference (paired), two shadow answers

    assert ctx.pool.current is second and "swap_to" not in HOOK  # swapped mid-exploration
    assert up.requests_for(SWAPPED) == []  # no call of the exploration went to the new pool
    assert len(up.requests_for(FRONTIER)) == 1
    shadowed = {n for n in PRICES if n != served and up.requests_for(n)}
    assert len(shadowed) == 2  # both candidates asked after the swap, on the first pool
    judged = up.requests_for(JUDGE)
    assert len(judged) == 2 + 2  # the pair in both orders, then each shadow answer
    assert "[Answer 2]" in judged[0]["messages"][0]["content"]
    assert sorted(r["source"] for r in rows) == ["paired", "paired", "shadow", "shadow"]
    shadow_models = {r["model"] for r in rows if r["source"] == "shadow"}
    assert shadow_models == {first.backends[n].router_model for n in shadowed}


def test_an_exploration_after_a_swap_asks_the_new_pools_judge(
        gw: Gateway, up: FakeUpstream, pools: tuple[Pool, Pool]) -> None:
    _, second = pools
    ctx = gw.app.state.ctx
    before = len(_observations(gw.engine))
    ctx.pool.swap(second)
    _ask(gw)
    _explored(gw, before, 4)

    assert up.requests_for(JUDGE) == []  # the judge built at startup names, never keeps
    assert up.requests_for(FRONTIER) == []
    # the request, the reference, two shadow calls, two paired and two single judgements
    assert len(up.requests_for(SWAPPED)) == 1 + 1 + 2 + 2 + 2
