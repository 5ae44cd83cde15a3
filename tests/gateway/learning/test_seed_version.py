"""Replicas starting together on a fresh database all start (CI, stop 55: one of two replicas
exited with ``StaleParent`` at startup).

Each replica records the router it started with as the first version (``ensure_seed_version``).
The loser of that race either finds no version, inserts, and hits the unique version, or finds
the winner's version already active when its transaction reads it. Both must be a no-op, not a
failed startup. Real SQLite and PostgreSQL with the gateway's migrations; the second test
replaces ``router_versions.history`` with an empty answer to place the loser's read before the
winner's commit, since a thread race cannot be made to land there every time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gateway.learning import retrain, router_versions
from gateway.store.engine import make_engine
from gateway.store.migrate import upgrade_engine
from router_core.runtime.router import Router
from tests.gateway.conftest import _pg_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path) -> Iterator:
    urls = ([f"sqlite:///{tmp_path / 'seed.db'}"] if request.param == "sqlite"
            else _pg_database())
    for url in urls:
        eng = make_engine(url)
        upgrade_engine(eng)
        yield eng
        eng.dispose()


def test_the_loser_that_reads_before_the_winner_commits_starts(
    engine, test_router: Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    retrain.ensure_seed_version(engine, test_router)  # the winner
    monkeypatch.setattr(router_versions, "history", lambda _engine: [])  # read before it
    retrain.ensure_seed_version(engine, test_router)  # the loser: no exception
    monkeypatch.undo()
    rows = router_versions.history(engine)
    assert [r["version"] for r in rows] == [test_router.version]
    assert router_versions.active_version(engine)["version"] == test_router.version


def test_replicas_starting_together_record_one_seed(engine, test_router: Router) -> None:
    n = 4
    start = threading.Barrier(n)
    errors: list[BaseException] = []

    def replica() -> None:
        start.wait()
        try:
            retrain.ensure_seed_version(engine, test_router)
        except BaseException as e:  # noqa: BLE001 (collected and asserted below)
            errors.append(e)

    threads = [threading.Thread(target=replica) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(router_versions.history(engine)) == 1
