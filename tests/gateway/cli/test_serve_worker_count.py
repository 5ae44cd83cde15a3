"""How many worker processes `tollgate serve` starts without ``--workers``: one per core on
PostgreSQL, one on SQLite; ``--workers`` always wins. The startup block says which and why."""

from __future__ import annotations

import os
from pathlib import Path

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


def test_a_container_cpu_quota_caps_the_workers(tmp_path: Path) -> None:
    """cgroup v2's cpu.max (a container started with --cpus 1.5) and v1's cfs files, not the
    host's cores; no quota ("max") leaves one per core."""
    cores = len(os.sched_getaffinity(0))
    pg = "postgresql://postgres@127.0.0.1/x"
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")
    n, why = worker_count(None, pg, cgroup=v2)
    assert n == min(2, cores) and ("quota of 1.5 cores" in why or n == cores)
    (v2 / "cpu.max").write_text("max 100000\n")
    assert worker_count(None, pg, cgroup=v2)[0] == cores
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    n, why = worker_count(None, pg, cgroup=v1)
    assert n == 1 and (cores == 1 or why.startswith("the CPU quota of 1 cores (cgroup)"))
    assert worker_count(None, "sqlite:///x.db", cgroup=v1)[0] == 1
    assert worker_count(4, pg, cgroup=v1) == (4, "--workers")
