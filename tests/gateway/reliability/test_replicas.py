"""The reliability report's scenarios, small, on two real `tollgate serve` processes sharing
PostgreSQL (through a TCP proxy the test cuts) and Redis: bench/serving/reliability.py at
--small sizes, with assertions on its figures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.serving.reliability import (
    SMALL,
    budget_scenario,
    faults_scenario,
    outage_scenario,
    sigterm_scenario,
)
from bench.serving.replica_env import Env, start_env, stop_env

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    e = start_env(Path(tmp_path_factory.mktemp("replicas")), replicas=2)
    yield e
    stop_env(e)


def test_concurrent_requests_on_two_replicas_never_overspend(env: Env) -> None:
    r = budget_scenario(env, SMALL["n"], SMALL["fits"])
    assert r["overspend_usd"] == 0.0 and r["spent_usd"] <= r["budget_usd"]
    assert r["reserved_usd"] == 0  # every reservation released
    assert r["ok"] >= 1 and r["ok"] + r["refused_429"] == r["requests"]


def test_every_upstream_fault_mode_falls_back(env: Env) -> None:
    r = faults_scenario(env, repeats=1)
    assert r["fallback_success"] == 1.0, r["per_mode"]


def test_database_outage_under_load_recovers_without_401s_or_lost_rows(env: Env) -> None:
    r = outage_scenario(env, outage_s=SMALL["outage_s"], rps=5.0)
    assert r["during_outage"] > 0 and r["during_401"] == 0
    assert r["recovered"], r
    assert r["lost_rows"] == 0 and r["errors_without_answer"] == 0


def test_sigterm_finishes_in_flight_requests_and_keeps_their_rows(env: Env) -> None:
    """Runs last: it stops one replica."""
    r = sigterm_scenario(env, in_flight=SMALL["in_flight"], delay_s=2.0)
    assert r["answered_200"] == r["in_flight"] and r["failed"] == 0
    assert r["new_connections_refused"]
    assert r["lost_rows"] == 0
