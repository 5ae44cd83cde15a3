"""Learning is on by default and bounded: with no ``exploration:`` section beyond ε and the
share, the pool's strongest priced backend judges (named in ``/v1/models``), and every
exploration call of a route, the judge's own included, is booked on ``max_share`` of what
the route's requests were charged before it is made: the allowance binds, is never exceeded,
and is shown in ``/metrics``.

Real parts: uvicorn, the OpenAI SDK, SQLite with the gateway's migrations, the fake upstream
(the frontier is the dearest backend, known by price only, so it is the default judge and the
route's reference). ε is 1 and the share 0.5 here so that the bound binds within a few dozen
requests (at the default 5% it takes hundreds); the rule is the same.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from gateway.config import settings_from_dict
from gateway.learning import exploration_ledger as xl
from gateway.learning import tables as ldb
from gateway.pricing import Price
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, Gateway, run_gateway
from tests.gateway.learning.conftest import FRONTIER, frontier_upstream, learning_config

SHARE = 0.5
REPLY = "Score: 8\nScore 1: 7\nScore 2: 9"  # the frontier's one reply (judge and answer)
REPLY_WORDS = len(REPLY.split())
REQUESTS = 100  # a pair the frontier judges needs a few dozen requests' share


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    with frontier_upstream(REPLY) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('share') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    cfg["model_list"].append(up.model_entry(FRONTIER))  # no judge named: the default picks
    cfg["routes"] = {"promised": {"max_drop": 0.01, "reference": FRONTIER}}
    cfg["retraining"] = {"refine_priors_s": None, "exploration": {
        "epsilon": {"promised": 1.0}, "max_share": SHARE, "max_tokens": 64}}
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


@pytest.fixture(scope="module")
def explored(gw: Gateway) -> str:
    """REQUESTS requests to the promised route, every exploration they started finished;
    the tenant's id. A fixture, not the first test's side effect: under xdist a module's
    tests may run on different workers, each with its own gateway."""
    key, tenant_id = gw.tenant()
    _ask_and_settle(gw, gw.client(key), "Explain topic", REQUESTS)
    return tenant_id


def _ask_and_settle(gw: Gateway, client, topic: str, n: int) -> None:
    """``n`` prompts to the promised route, then every exploration they started finished."""
    learning = gw.app.state.ctx.learning
    for i in range(n):
        client.chat.completions.create(
            model="promised", messages=[{"role": "user", "content": f"{topic} {i}."}])
    deadline = time.monotonic() + 120
    while learning._unrecorded or learning._recording or learning._tasks:
        assert time.monotonic() < deadline, "exploration did not finish"
        time.sleep(0.1)


def _share_row(engine: sa.Engine, route: str) -> dict:
    with engine.connect() as conn:
        row = conn.execute(sa.select(ldb.ledger_t).where(
            ldb.ledger_t.c.scope == xl.share_scope(route))).mappings().first()
    assert row is not None, "no share allowance credited"
    return dict(row)


def _judge_usd(up: FakeUpstream, price: Price) -> float:
    """What the judge's calls cost, from the requests the upstream saw with a rubric."""
    usd = 0.0
    for req in up.requests_for(FRONTIER):
        text = " ".join(str(m.get("content", "")) for m in req["messages"])
        if text.startswith(("You grade", "You compare")):
            usd += price.cost(len(text.split()), REPLY_WORDS)
    return usd


def test_the_default_judge_is_named_and_exploration_stays_within_its_share(
    gw: Gateway, up: FakeUpstream, explored: str
) -> None:
    ctx = gw.app.state.ctx
    explorer = ctx.learning.explorer
    assert explorer.judge is not None and explorer.judge.model == FRONTIER
    assert explorer.judge.chosen.startswith("by default")
    key, _ = gw.tenant()
    models = {m.id: m for m in gw.client(key).models.list().data}
    shown = models["promised"].model_extra["tollgate"]["learning"]
    assert shown["exploring"] is True and shown["judge"] == FRONTIER
    assert shown["max_share"] == SHARE and shown["judged_pair_usd"] > 0

    tenant_id = explored
    charged = gw.settled(tenant_id)["spent_usd"]
    row = _share_row(gw.engine, "promised")
    # the allowance is the share of what the route's requests were charged
    assert row["budget_nusd"] == pytest.approx(xl.nusd(SHARE * charged), abs=REQUESTS)
    assert row["reserved_nusd"] == 0  # every booking settled
    assert 0 < row["spent_nusd"] <= row["budget_nusd"]  # explored, never past the share
    assert explorer.bounds.skipped_share > 0  # with ε = 1 the share is what stopped exploring
    # the judge's own calls are in the exploration spend
    judge_usd = _judge_usd(up, ctx.pool.current.prices[FRONTIER])
    assert judge_usd > 0 and row["spent_nusd"] >= xl.nusd(judge_usd) - REQUESTS

    metrics = httpx.get(gw.base_url + "/metrics", timeout=30,
                        headers={"authorization": f"Bearer {ADMIN_KEY}"}).text
    assert "tollgate_exploration_max_share 0.5" in metrics
    spent = [ln for ln in metrics.splitlines()
             if ln.startswith('tollgate_exploration_spent_usd{route="promised"}')]
    assert spent and float(spent[0].split()[-1]) == pytest.approx(
        row["spent_nusd"] / 1e9, rel=1e-6)


def test_the_startup_block_names_the_judge_and_a_free_backend_never_judges_by_default(
    gw: Gateway,
) -> None:
    from dataclasses import replace
    from types import MappingProxyType

    from gateway.pool.exploring import default_judge, exploring

    pool = gw.app.state.ctx.pool.current
    lines = exploring(pool).lines(pool)
    assert lines[0].startswith("on:") and "≤ 50% of each route's spend" in lines[0]
    assert lines[1].startswith(f"judge: {FRONTIER} (by default")
    assert any(ln.startswith("promised: ε 1, a judged pair ≈") for ln in lines)
    # the frontier priced at $0 (unknown cost): the default judge is another backend
    free = replace(pool, prices=MappingProxyType({**pool.prices, FRONTIER: Price(0.0, 0.0)}))
    picked = default_judge(free)
    assert picked is not None and picked[0] != FRONTIER
    assert free.prices[picked[0]].output_per_token > 0
    # nothing priced above $0: exploration is off, and the block says why
    none = replace(pool, prices=MappingProxyType({n: Price(0.0, 0.0) for n in pool.prices}))
    assert default_judge(none) is None
    assert exploring(none).lines(none)[0].startswith("off: no chat backend priced above $0")


def test_the_dashboard_shows_each_routes_learning_to_the_operator(gw: Gateway,
                                                                  explored: str) -> None:
    """After the route's traffic (``explored``): it has judged outcomes and spend."""
    def summary(key: str) -> dict:
        r = httpx.get(gw.base_url + "/dashboard/api/summary", timeout=60,
                      headers={"authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
        return r.json()

    row = _share_row(gw.engine, "promised")
    with gw.engine.connect() as conn:
        judged = conn.execute(
            sa.select(sa.func.count()).select_from(ldb.observations_t.join(
                ldb.requests_t,
                ldb.observations_t.c.request_id == ldb.requests_t.c.request_id))
            .where(ldb.requests_t.c.route == "promised")).scalar_one()
    [shown] = [r for r in summary(ADMIN_KEY)["learning"] if r["route"] == "promised"]
    assert judged > 0 and shown["judged_outcomes"] == judged
    assert shown["judge"] == FRONTIER and shown["exploring"] is True
    assert shown["exploration_spent_usd"] == pytest.approx(row["spent_nusd"] / 1e9)
    assert shown["exploration_allowed_usd"] == pytest.approx(row["budget_nusd"] / 1e9)
    assert 0 < shown["exploration_share"] <= SHARE
    assert shown["saving_share"] is not None
    nxt = shown["next_saving"]
    pool = gw.app.state.ctx.pool.current
    assert nxt is not None and nxt["backend"] != FRONTIER and 0 < nxt["saving_if_certified"] < 1
    assert pool.prices[nxt["backend"]].output_per_token < pool.prices[FRONTIER].output_per_token
    key, _ = gw.tenant()
    assert "learning" not in summary(key)  # the operator's view only


def test_a_tenant_whose_policy_leaves_out_the_judge_is_never_explored(
    gw: Gateway, up: FakeUpstream
) -> None:
    """The default judge (and the reference) is the operator's choice, not the tenant's: a
    tenant whose allowed_models leave it out never has a prompt sent to it by exploration."""
    allowed = [n for n in gw.app.state.ctx.pool.current.backends if n != FRONTIER]
    key, _ = gw.tenant(policy={"allowed_models": allowed})
    client = gw.client(key)
    asked_before = len(up.requests_for(FRONTIER))
    _ask_and_settle(gw, client, "Private topic", 10)
    assert len(up.requests_for(FRONTIER)) == asked_before
    texts = [" ".join(str(m.get("content", "")) for m in r["messages"])
             for n in allowed for r in up.requests_for(n)]
    assert sum("Private topic" in t for t in texts) == 10  # only the tenant's own answers
