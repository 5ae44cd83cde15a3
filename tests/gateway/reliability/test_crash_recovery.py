"""Crashes with real processes: a `tollgate serve` replica killed with SIGKILL while it holds
reservations releases them when it starts again, with no `replica_id` configured (SQLite and
PostgreSQL); a master killed with SIGKILL takes its workers with it
(bench/serving/hostile/crash.py runs the same scenarios for the hostile bench)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.serving.cluster import pg_database
from bench.serving.hostile.crash import (
    BUDGET_USD,
    crash_cluster,
    orphans_after_master_kill,
    stale_after_kill,
)

pytestmark = [pytest.mark.slow]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tollgate.db'}"
        return
    with pg_database("tollgate_crash_") as url:
        yield url


@pytest.mark.parametrize("workers", [1, 2])
def test_a_replica_killed_with_sigkill_releases_its_reservations_on_restart(
        tmp_path: Path, db_url: str, workers: int) -> None:
    if workers == 2 and db_url.startswith("sqlite"):
        pytest.skip("two workers: PostgreSQL only (one per database here is enough)")
    cluster, upstream = crash_cluster(tmp_path, db_url)
    try:
        result = stale_after_kill(cluster, workers=workers)
    finally:
        cluster.stop()
        upstream.stop()
    assert result["killed_processes"] >= 1 + (workers if workers > 1 else 0)
    assert 0 < result["held_at_kill_usd"] <= BUDGET_USD  # the crash left them open
    assert result["stale_reservation_after_kill_usd"] == 0.0  # not an hour later: at start


def test_workers_die_with_their_master(tmp_path: Path) -> None:
    cluster, upstream = crash_cluster(tmp_path, f"sqlite:///{tmp_path / 'tollgate.db'}")
    try:
        result = orphans_after_master_kill(cluster)
    finally:
        cluster.stop()
        upstream.stop()
    assert result["workers"] == 2
    assert result["orphaned_workers"] == 0
