"""One publisher of router versions: compare-and-set on the parent, and an operator's rollback
that stands (issue 48, "One publisher of router versions, compare-and-set").

Two replicas (two gateway apps under uvicorn) share one database, SQLite and PostgreSQL. A
refinement is published; the operator rolls it back with ``tollgate router rollback``; the
outcomes that made the refinement are still there, so a refinement is due at the next poll on
every replica. Before this change one of them published it again within a second (the rollback
undone, nothing logged); now the rollback holds until ``tollgate router resume``, and the
refinement then published is built on the version the operator left active.

Real parts: uvicorn, the OpenAI SDK, the gateway's migrations on SQLite and PostgreSQL, the
CLI through click's runner, the fake upstream (its judge is a fake backend).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from gateway.cli import main
from gateway.config import settings_from_dict
from gateway.learning import router_versions
from gateway.learning.refine_priors import unchecked
from gateway.store import make_engine
from gateway.store.migrate import upgrade_engine
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway, _pg_database, run_gateway
from tests.gateway.learning.conftest import FRONTIER, promised_config

POLL_S = 0.2


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A database of its own: the operator's hold is the whole database's."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'publish.db'}"
    else:
        yield from _pg_database()


def _wait(what: str, ok, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_rollback_stands_while_a_refinement_is_due_on_two_replicas(
    fresh_url: str, frontier_up: FakeUpstream, test_router: Router, encoder
) -> None:
    cfg = promised_config(frontier_up, fresh_url, refine_priors_s=3600, poll_s=POLL_S)
    settings = settings_from_dict(cfg)
    with contextlib.ExitStack() as stack:
        replicas: list[Gateway] = [
            stack.enter_context(contextlib.contextmanager(run_gateway)(settings, test_router,
                                                                       encoder))
            for _ in range(2)]
        a = replicas[0]
        engine = a.engine
        _wait("no seed version", lambda: router_versions.active_version(engine) is not None)
        seed = router_versions.active_version(engine)["version"]

        def serving(version: str) -> bool:
            return all(r.app.state.ctx.pool.current.version == version for r in replicas)

        # 1. outcomes for the frontier (the shadow judge's), and their refinement, published
        key, _ = a.tenant()
        a.client(key).chat.completions.create(
            model="promised", messages=[{"role": "user", "content": "Explain topic 0."}],
            extra_body={"tollgate": {"cost_weight": 50.0}})
        _wait("the first outcomes were not refined",
              lambda: (router_versions.active_version(engine) or {}).get("version") != seed)
        refined = router_versions.active_version(engine)
        assert refined["parent"] == seed and refined["status"] == "learned"
        _wait("the replicas did not swap to the refinement", lambda: serving(refined["version"]))

        # 2. the operator rolls it back; a refinement is due again at once
        out = CliRunner().invoke(main, ["router", "rollback", seed, "--database-url", fresh_url])
        assert out.exit_code == 0, out.output
        assert "held until `tollgate router resume`" in out.output
        seed_router = router_versions.load_version(engine, seed)
        assert unchecked(engine, seed_router, settings) == [FRONTIER]
        n_versions = len(router_versions.history(engine))
        _wait("the replicas did not swap back", lambda: serving(seed))
        # 3. many polls of both replicas' refinement loops: the rollback stands
        deadline = time.monotonic() + 20 * POLL_S + 2.0
        while time.monotonic() < deadline:
            assert router_versions.active_version(engine)["version"] == seed
            time.sleep(0.05)
        assert len(router_versions.history(engine)) == n_versions  # nothing published
        assert serving(seed)
        history = CliRunner().invoke(main, ["router", "history", "--database-url", fresh_url])
        assert history.output.startswith("held: an operator's rollback")

        # 4. resume: the due refinement is published, built on the version left active
        out = CliRunner().invoke(main, ["router", "resume", "--database-url", fresh_url])
        assert out.exit_code == 0 and out.output.startswith("resumed"), out.output
        _wait("nothing refined after resume",
              lambda: router_versions.active_version(engine)["version"] not in (
                  seed, refined["version"]))
        again = router_versions.active_version(engine)
        assert again["parent"] == seed and again["status"] == "learned"
        assert not router_versions.held(engine)


def test_publish_is_compare_and_set_on_the_parent(fresh_url: str, test_router: Router) -> None:
    """The store alone: a stale parent is refused, a hold stops automatic publishers but not
    the operator's own, and nothing refused is stored."""
    engine = make_engine(fresh_url)
    upgrade_engine(engine)
    try:
        def record(version: str, parent: str | None, **kw) -> None:
            router = dataclasses.replace(test_router, version=version)
            router_versions.record_version(engine, router, status="learned", parent=parent,
                                           metrics={}, n_observations=0, max_obs_id=0,
                                           activate=True, **kw)

        def active() -> str:
            return router_versions.active_version(engine)["version"]

        record("v0", None)
        with pytest.raises(router_versions.StaleParent):
            record("v0-again", None)  # a seed where one is active already
        record("v1", "v0")
        with pytest.raises(router_versions.StaleParent) as e:
            record("v2-on-v0", "v0")  # built on v0 by a replica that had not swapped
        assert e.value.active == "v1" and active() == "v1"
        router_versions.activate(engine, "v0")  # the operator's rollback, with its hold
        assert router_versions.held(engine) and active() == "v0"
        with pytest.raises(router_versions.Held):
            record("v3", "v0")
        with pytest.raises(router_versions.StaleParent):
            record("v3-on-v1", "v1", operator=True)  # the operator's too is compare-and-set
        record("v4", "v0", operator=True)  # the operator's own publish passes the hold
        assert active() == "v4" and router_versions.held(engine)
        assert router_versions.release_hold(engine) and not router_versions.release_hold(engine)
        record("v5", "v4")
        versions = [h["version"] for h in router_versions.history(engine)]
        assert versions == ["v0", "v1", "v4", "v5"] and active() == "v5"
    finally:
        engine.dispose()


def test_refinement_builds_on_the_databases_active_version_not_the_replicas(tmp_path) -> None:
    """A replica that has not swapped yet refines on the version the database holds active
    (its parent is that version, not the replica's), and under a rollback's hold refines
    nothing (the store alone: SQLite, the learning tables, gateway/pool/test_priors' pool)."""
    import numpy as np

    from gateway.learning import tables as ldb
    from gateway.learning.refine_priors import refine_due
    from gateway.pool import build_pool
    from gateway.pool.priors import with_priors
    from tests.gateway.pool.test_priors import PRICES as PRICED
    from tests.gateway.pool.test_priors import SETTINGS, _router

    engine = make_engine(f"sqlite:///{tmp_path / 'refine.db'}")
    upgrade_engine(engine)
    try:
        router = with_priors(_router(), SETTINGS, PRICED)
        rng = np.random.default_rng(1)
        for i in range(30):  # the judge's grades of gpt-4o (a cold-start prior)
            phi = rng.normal(size=384).astype(np.float32)
            key = ldb.prompt_key(f"prompt {i}", b"test-prompt-secret")
            ldb.record_served(engine, request_id=f"r{i}", tenant_id=None, text=None, key=key,
                              embedding=phi, route="auto", model="gpt-4o", backend="gpt-4o",
                              cost_usd=0.001)
            ldb.add_observation(engine, key=key, model="gpt-4o", quality=float(phi[0] > 0),
                                cost_usd=0.001, source="shadow")

        def record(r, parent) -> None:
            router_versions.record_version(engine, r, status="promoted", parent=parent,
                                           metrics={}, n_observations=0, max_obs_id=0,
                                           activate=True)

        record(router, None)
        record(dataclasses.replace(router, version="v2"), router.version)  # another replica
        stale = build_pool(SETTINGS, PRICED, router)  # this replica still serves v1
        router_versions.activate(engine, "v2")  # ... and the operator holds v2
        assert refine_due(engine, stale) == []
        assert router_versions.active_version(engine)["version"] == "v2"
        assert router_versions.release_hold(engine)
        assert refine_due(engine, stale) == ["gpt-4o"]
        active = router_versions.active_version(engine)
        assert active["parent"] == "v2" and active["version"].startswith("v2@learn-gpt-4o-")
    finally:
        engine.dispose()
