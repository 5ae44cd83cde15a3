"""Crashes: a replica killed with SIGKILL, and a master killed under its workers; and the
dashboard's neighbour figure (issue 35 findings 10 and 12).

``stale_reservation_after_kill_usd``: a replica (no ``replica_id`` configured) holds a $0.05
tenant's reservations for requests to a backend that hangs; it is killed with SIGKILL and
started again on the same spool directory. The figure is what the tenant still has held
once the restarted replica is ready (target 0: released at once, not after the hour-long
reservation TTL).

``orphaned_workers``: ``serve --workers 2``; the master is killed with SIGKILL; the figure is
how many of its workers still run after a grace period (target 0).

``dashboard_neighbour_p50_ratio``: neighbours.dashboard_scenario's chat p50 of another tenant
while 12 summaries run over its p50 before (target ≤ 2).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from bench.serving.cluster import Cluster, Replica
from bench.serving.fake_router import write_artifact
from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream
from gateway.store.models import reservations

ADMIN = "tg-crash-admin-key"
HANG = "fake-hang"
BUDGET_USD = 0.05
PARALLEL = 6


def crash_cluster(workdir: Path, db_url: str) -> tuple[Cluster, FakeUpstream]:
    """A cluster serving the fake router over a backend that never answers in time (each
    request holds its reservation until the process dies) and the fake router's three."""
    backends = [FakeBackend(HANG, mode="hang", hang_s=120.0, input_per_m=10.0,
                            output_per_m=40.0)]
    backends += [FakeBackend(n, reply="ok") for n in ("fake-strong", "fake-mid", "fake-cheap")]
    up = FakeUpstream(backends).start()
    write_artifact(workdir / "router")
    config = {
        "model_list": [up.model_entry(b.name, timeout=300.0) for b in backends],
        "admin_key": ADMIN, "router_path": str(workdir / "router"),
        "reliability": {"spool_dir": str(workdir / "spool"), "shutdown_grace_s": 5},
    }
    return Cluster(workdir, config, db_url), up


def held_usd(db_url: str, tenant_id: str) -> float:
    """The tenant's open reservations, read from the database (no replica needed)."""
    engine = sa.create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            nusd = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(
                reservations.c.amount_nusd), 0)).where(
                reservations.c.tenant_id == tenant_id)).scalar()
    finally:
        engine.dispose()
    return int(nusd or 0) / 1e9


def _tenant(replica: Replica) -> tuple[str, str]:
    r = httpx.post(replica.base_url + "/admin/tenants", timeout=60,
                   headers={"authorization": f"Bearer {ADMIN}"},
                   json={"name": f"crash-{os.urandom(4).hex()}", "budget_usd": BUDGET_USD})
    r.raise_for_status()
    return r.json()["api_key"], r.json()["tenant"]["id"]


def _hold(replica: Replica, key: str) -> None:
    """Requests to the hanging backend, each holding a reservation (they die with it)."""
    def ask() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(replica.base_url + "/v1/chat/completions", timeout=300,
                       headers={"authorization": f"Bearer {key}"},
                       json={"model": HANG, "max_tokens": 200,
                             "messages": [{"role": "user", "content": "wait for it"}]})
    for _ in range(PARALLEL):
        threading.Thread(target=ask, daemon=True).start()


def _wait(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not seen within {timeout_s}s")
        time.sleep(0.1)


def stale_after_kill(cluster: Cluster, workers: int = 1) -> dict[str, float]:
    """Kill a replica holding reservations; start it again; what is still held."""
    replica = cluster.start_replica(workers=workers)
    key, tid = _tenant(replica)
    _hold(replica, key)
    _wait(lambda: held_usd(cluster.db_url, tid) > 0, 120, "reservations held")
    time.sleep(2.0)  # the others join the line or book theirs
    killed = _kill_tree(replica)
    held_at_kill = held_usd(cluster.db_url, tid)
    again = cluster.start_replica(workers=workers)
    stale = held_usd(cluster.db_url, tid)
    again.terminate()
    return {"held_at_kill_usd": round(held_at_kill, 6), "killed_processes": killed,
            "stale_reservation_after_kill_usd": round(stale, 6)}


def worker_pids(replica: Replica) -> list[int]:
    """The live children of a replica's master (its workers)."""
    path = Path(f"/proc/{replica.proc.pid}/task/{replica.proc.pid}/children")
    with contextlib.suppress(OSError):
        return [int(c) for c in path.read_text().split()
                if "spawn_main" in _cmdline(int(c))]
    return []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by its new parent, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _kill_tree(replica: Replica) -> int:
    """SIGKILL the master and, as a crash of the whole container would, every worker."""
    pids = [replica.proc.pid, *worker_pids(replica)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    replica.proc.wait(timeout=30)
    _wait(lambda: not any(alive(p) for p in pids), 30, "killed processes gone")
    return len(pids)


def orphans_after_master_kill(cluster: Cluster, grace_s: float = 120.0) -> dict[str, int]:
    """``--workers 2``; SIGKILL the master alone: how many workers still run after
    ``grace_s`` (a worker still starting finishes its start-up, then shuts down; they are
    killed afterwards either way)."""
    replica = cluster.start_replica(workers=2)
    workers = worker_pids(replica)
    os.kill(replica.proc.pid, signal.SIGKILL)
    replica.proc.wait(timeout=30)
    deadline = time.monotonic() + grace_s
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in workers if alive(p)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return {"workers": len(workers), "orphaned_workers": len(left)}


def crash_scenario(env: Any) -> dict[str, Any]:
    """Both crash figures on their own replicas of ``env``'s database (a replica_env.Env)."""
    workdir = env.cluster.workdir / "crash"
    workdir.mkdir(exist_ok=True)
    cluster, upstream = crash_cluster(workdir, env.db_url)
    cluster.env.update(env.cluster.env)  # the replicas' key secret
    try:
        return {**stale_after_kill(cluster), **orphans_after_master_kill(cluster)}
    finally:
        cluster.stop()
        upstream.stop()


def with_neighbour_ratio(result: dict[str, Any]) -> dict[str, Any]:
    """neighbours.dashboard_scenario's result with dashboard_neighbour_p50_ratio."""
    before, during = result["chat_p50_ms_before"], result["chat_p50_ms_during"]
    return {**result, "dashboard_neighbour_p50_ratio":
            round(during / before, 2) if before else None}
