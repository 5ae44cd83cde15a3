"""The frontier is learned from traffic: on a route with a promise, a sampled request that did
not go to the reference is also answered by the reference, a judge compares the two answers in
both orders, and the grades refine the reference's prior into the published router version.

Real parts: uvicorn, the OpenAI SDK, SQLite with the gateway's migrations, the fake upstream
(the judge is a fake backend whose fixed reply grades answer 1 a 4 and answer 2 a 9, so only
the averaging over both orders can give each answer 0.65).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from gateway.learning import router_versions
from gateway.learning import tables as ldb
from gateway.learning.refine_priors import refine_due
from gateway.pool import build_pool
from gateway.pool.promise import BELIEFS_KEY
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.learning.conftest import FRONTIER, promised_gateway


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, frontier_up: FakeUpstream,
       test_router: Router, encoder) -> Iterator[Gateway]:
    yield from promised_gateway(tmp_path_factory, "paired", frontier_up, test_router, encoder,
                                refine_priors_s=None)


def _paired(engine: sa.Engine) -> list[dict]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ldb.observations_t)
                            .where(ldb.observations_t.c.source == "paired")).mappings().all()
    return [dict(r) for r in rows]


def test_the_reference_answers_beside_the_served_backend_and_refines_its_prior(
    gw: Gateway, frontier_up: FakeUpstream
) -> None:
    ctx = gw.app.state.ctx
    pool = ctx.pool.current
    assert pool.promises["promised"].reference == FRONTIER
    assert pool.how_known(FRONTIER) == "prior from price only"
    key, _ = gw.tenant()
    client = gw.client(key)
    served = set()
    for i in range(3):  # routed by λ on request (a cheap backend answers), the route keeps
        resp = client.chat.completions.create(  # its promise and so its reference
            model="promised", messages=[{"role": "user", "content": f"Explain topic {i}."}],
            extra_body={"tollgate": {"cost_weight": 50.0}})
        served.add(resp.model)
    assert FRONTIER not in served
    deadline = time.monotonic() + 60
    while len(_paired(gw.engine)) < 6 or ctx.learning._tasks:
        assert time.monotonic() < deadline, "the reference was never judged beside the answer"
        time.sleep(0.1)
    rows = _paired(gw.engine)
    assert {r["model"] for r in rows} == {FRONTIER} | served
    assert all(r["quality"] == pytest.approx(0.65) for r in rows)  # 4 and 9, both orders
    assert len(frontier_up.requests_for(FRONTIER)) == 3
    judged = frontier_up.requests_for("fake-judge")
    assert len(judged) == 6  # two orders per request
    assert all("[Answer 2]" in r["messages"][0]["content"] for r in judged)

    assert refine_due(gw.engine, pool) == [FRONTIER]
    live = router_versions.load_version(gw.engine,
                                        router_versions.active_version(gw.engine)["version"])
    assert live.config[BELIEFS_KEY][FRONTIER]["n_outcomes"] == 3
    again = build_pool(pool.settings, pool.prices, live)
    assert again.how_known(FRONTIER) == "prior from price only, refined by 3 outcomes"
