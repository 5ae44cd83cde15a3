"""A backend the learning loop adopts from a hot-swapped router version is explored like any
other: the explorer reads the pool it was swapped into, not the one it was built with.

Before the pool was one value, the explorer kept the settings and prices of startup; a shadow
call to an adopted backend failed on its missing config, the error was logged and dropped,
and exploration stopped for the route. Real parts: uvicorn, the OpenAI SDK, SQLite with the
gateway's migrations, the hot-swap poller, the fake upstream over HTTP.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from gateway.config import settings_from_dict
from gateway.learning import router_versions
from gateway.learning import tables as ldb
from gateway.pool.adopt import ARTIFACT_KEY
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import TIMEOUTS, Gateway, run_gateway
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES, REPLIES

NEW = "fake-adopted"


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    backends += [FakeBackend(NEW, reply="adopted answer", input_per_m=0.1, output_per_m=0.2),
                 FakeBackend("fake-judge", reply="Score: 7", input_per_m=1.0, output_per_m=2.0)]
    with FakeUpstream(backends) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('adopt') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    cfg["model_list"] = [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES]
    cfg["model_list"].append(up.model_entry("fake-judge"))
    cfg["routes"] = {"best": {"cost_weight": 0.0, "explore_share": 1.0}}
    cfg["retraining"] = {"poll_s": 0.2, "exploration": {
        "enabled": True, "epsilon": {"best": 1.0}, "candidates": 8, "budget_usd": 10.0,
        "period": "total", "max_tokens": 64, "judge": {"kind": "llm", "model": "fake-judge"},
        # every request explored from the first: no share-of-spend bound (its own test:
        # test_exploration_share.py)
        "max_share": None}}
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def _observed_models(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return {r[0] for r in conn.execute(sa.select(ldb.observations_t.c.model))}


def test_a_backend_adopted_on_hot_swap_is_explored(gw: Gateway, up: FakeUpstream) -> None:
    ctx = gw.app.state.ctx
    live = ctx.pool.current.router
    assert ctx.pool.current.backend(NEW) is None
    # `tollgate models add` records the new backend in the artifact it publishes
    carried = dataclasses.replace(
        live, version=f"{live.version}+adopt",
        config={**live.config, ARTIFACT_KEY: {NEW: up.model_entry(NEW)}})
    router_versions.record_version(gw.engine, carried, status="promoted", parent=live.version,
                                   metrics={}, n_observations=0, max_obs_id=0, activate=True)
    deadline = time.monotonic() + 60
    while ctx.pool.current.version != carried.version:
        assert time.monotonic() < deadline, "the gateway did not hot-swap"
        time.sleep(0.1)
    pool = ctx.pool.current
    assert pool.backend(NEW) is not None and pool.known[NEW].status == "prior (0 outcomes)"
    assert NEW in pool.deployable("best").values()

    key, _ = gw.tenant()
    client = gw.client(key)
    learning = ctx.learning
    for i in range(3):
        client.chat.completions.create(
            model="best", messages=[{"role": "user", "content": f"Explain topic {i}."}])
    deadline = time.monotonic() + 60
    while NEW not in _observed_models(gw.engine) or learning._tasks:
        assert time.monotonic() < deadline, "the adopted backend was never explored"
        time.sleep(0.1)
    assert len(up.requests_for(NEW)) >= 1  # shadow calls reached it over HTTP
