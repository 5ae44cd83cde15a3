"""A backend whose belief no outcome has checked is refined at its first outcomes, not a whole
``refine_priors_s`` later.

Until then it routes on its prior, or on a published claim (bench/routing/wrong_prior_loop.py:
a cheap backend claimed to match the strongest), and a wrong one routes for the whole period:
at the packaged 600 s, every request of ten minutes. Here the schedule is an hour; the learning
loop's poll (``poll_s``) finds the reference's first paired outcomes and publishes its
refinement, and nothing else is refined between scheduled rounds.

Real parts: uvicorn, the OpenAI SDK, SQLite with the gateway's migrations, the fake upstream
(the judge is a fake backend that grades both answers).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gateway.learning import router_versions
from gateway.learning.refine_priors import unchecked
from gateway.pool.promise import BELIEFS_KEY
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.learning.conftest import FRONTIER, promised_gateway


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, frontier_up: FakeUpstream,
       test_router: Router, encoder) -> Iterator[Gateway]:
    yield from promised_gateway(tmp_path_factory, "first", frontier_up, test_router, encoder,
                                refine_priors_s=3600, poll_s=0.2)


def _published(gw: Gateway) -> dict:
    row = router_versions.active_version(gw.engine) or {}
    if not row:
        return {}
    live = router_versions.load_version(gw.engine, row["version"])
    return dict((live.config or {}).get(BELIEFS_KEY) or {})


def test_first_outcomes_refine_an_unchecked_prior_before_the_schedule(gw: Gateway) -> None:
    ctx = gw.app.state.ctx
    pool = ctx.pool.current
    assert pool.how_known(FRONTIER) == "prior from price only"
    assert unchecked(gw.engine, pool.router, pool.settings) == []  # no outcome yet
    assert FRONTIER not in _published(gw)
    key, _ = gw.tenant()
    client = gw.client(key)
    resp = client.chat.completions.create(
        model="promised", messages=[{"role": "user", "content": "Explain topic 0."}],
        extra_body={"tollgate": {"cost_weight": 50.0}})
    assert resp.model != FRONTIER  # a cheaper backend answered; the reference is shadowed
    deadline = time.monotonic() + 60  # the schedule's next round is an hour away
    while FRONTIER not in _published(gw) or ctx.pool.current.version == pool.version:
        assert time.monotonic() < deadline, "the first outcomes never refined the prior"
        time.sleep(0.1)
    assert _published(gw)[FRONTIER]["n_outcomes"] >= 1
    now = ctx.pool.current
    assert now.how_known(FRONTIER).startswith("prior from price only, refined by ")
    assert unchecked(gw.engine, now.router, now.settings) == []  # checked: the schedule's now
