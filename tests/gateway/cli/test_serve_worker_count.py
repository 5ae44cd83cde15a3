"""How many worker processes `tollgate serve` starts without ``--workers``: one per core on
PostgreSQL, one on SQLite; ``--workers`` always wins. The startup block says which and why."""

from __future__ import annotations

import os

from gateway.cli.serve import worker_count


def test_postgresql_gets_a_worker_per_core_and_sqlite_one() -> None:
    cores = len(os.sched_getaffinity(0))
    n, why = worker_count(None, "postgresql+psycopg://postgres@127.0.0.1:5432/tollgate")
    assert n == cores and "core" in why
    n, why = worker_count(None, "sqlite:///./tollgate.db")
    assert n == 1 and "SQLite" in why
    assert worker_count(None, "sqlite://")[0] == 1  # in memory: no process could share it


def test_workers_given_are_kept_on_any_database() -> None:
    assert worker_count(3, "sqlite:///./tollgate.db") == (3, "--workers")
    assert worker_count(1, "postgresql://postgres@127.0.0.1/x") == (1, "--workers")
