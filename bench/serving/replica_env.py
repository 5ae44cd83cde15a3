"""The environment the reliability and hostile benches run on: the fake upstream (fake-strong,
fake-mid, fake-cheap with bench/serving/fake_router.py's router), a fresh PostgreSQL
database behind a TCP proxy the bench can cut, Redis, and `tollgate serve` replicas sharing
them; ``Env`` holds it and asks the admin API and the database what happened.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from bench.serving.cluster import (
    REDIS_URL,
    Cluster,
    TcpProxy,
    pg_database,
    redis_cleanup,
    via_proxy,
)
from bench.serving.fake_router import PRICES, REPLIES, write_artifact
from gateway.sandbox.local_upstream import FakeBackend, FakeUpstream
from gateway.store.models import request_logs

ADMIN_KEY = "tg-bench-admin-key"
MSG = [{"role": "user", "content": "Say hello to the reliability bench"}]


@dataclass
class Env:
    """A running bench: upstream, database (direct and proxied), cluster of replicas."""

    upstream: FakeUpstream
    proxy: TcpProxy
    db_url: str
    cluster: Cluster
    redis_prefix: str

    @property
    def replicas(self) -> list[Any]:
        return [r for r in self.cluster.replicas if r.proc.poll() is None]

    def admin(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return httpx.request(method, self.replicas[0].base_url + path, timeout=60,
                             headers={"authorization": f"Bearer {ADMIN_KEY}"}, **kw)

    def tenant(self, budget_usd: float | None = None, policy: dict | None = None
               ) -> tuple[str, str]:
        body = {"name": "bench-" + uuid.uuid4().hex[:8], "budget_usd": budget_usd,
                "policy": policy or {}}
        data = self.admin("POST", "/admin/tenants", json=body).json()
        return data["api_key"], data["tenant"]["id"]

    def ledger(self, tid: str) -> dict:
        return self.admin("GET", f"/admin/tenants/{tid}").json()

    def settled(self, tid: str, timeout_s: float = 60) -> dict:
        deadline = time.monotonic() + timeout_s
        info = self.ledger(tid)
        while info["reserved_usd"] > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
            info = self.ledger(tid)
        return info

    def reserved_usd(self, request_id: str, timeout_s: float = 60) -> float:
        """What request ``request_id`` held, from its log row."""
        engine = sa.create_engine(self.db_url.replace("postgresql://", "postgresql+psycopg://"))
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                with engine.connect() as conn:
                    held = conn.execute(sa.select(request_logs.c.reserved_usd)
                                        .where(request_logs.c.id == request_id)).scalar()
                if held is not None or time.monotonic() > deadline:
                    return float(held or 0.0)
                time.sleep(0.1)
        finally:
            engine.dispose()

    def missing_rows(self, ids: list[str], timeout_s: float = 60) -> int:
        """How many of ``ids`` have no log row (waiting up to ``timeout_s`` for the writers)."""
        engine = sa.create_engine(self.db_url.replace("postgresql://", "postgresql+psycopg://"))
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                with engine.connect() as conn:
                    found = set(conn.execute(sa.select(request_logs.c.id)
                                             .where(request_logs.c.id.in_(ids))).scalars())
                missing = len(set(ids) - found)
                if missing == 0 or time.monotonic() > deadline:
                    return missing
                time.sleep(0.2)
        finally:
            engine.dispose()


def start_env(workdir: Path, replicas: int = 2, extra_models: list[dict] | None = None,
              **config: Any) -> Env:
    """Fake upstream, a fresh PostgreSQL database behind a TCP proxy, Redis, replicas;
    ``extra_models`` join the model list, ``config`` keys replace the bench's own."""
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    upstream = FakeUpstream(backends).start()
    db_ctx = pg_database("tollgate_bench_")
    db_url = db_ctx.__enter__()
    proxy = TcpProxy(("127.0.0.1", 5432)).start()
    router_dir = workdir / "router"
    write_artifact(router_dir)
    prefix = "tg-bench-" + uuid.uuid4().hex[:8]
    config = {
        "model_list": [upstream.model_entry(n, timeout=1.0 if n == "fake-mid" else 30.0)
                       for n in PRICES] + list(extra_models or []),
        "routes": {"auto": {"cost_weight": 0.5}, "cheap": {"cost_weight": 5.0}},
        "admin_key": ADMIN_KEY,
        "router_path": str(router_dir),
        **config,
        # ``reliability`` keys given merge into the bench's own (Redis, spool, circuit)
        "reliability": {"redis_url": REDIS_URL, "redis_prefix": prefix,
                        "spool_dir": str(workdir / "spool"), "shutdown_grace_s": 60,
                        "circuit": {"failure_threshold": 5, "cooldown_s": 2.0},
                        **config.get("reliability", {})},
    }
    cluster = Cluster(workdir, config, via_proxy(db_url, proxy),
                      env={"TOLLGATE_SECRET": "bench-secret-" + uuid.uuid4().hex})
    threads = [threading.Thread(target=cluster.start_replica, kwargs={"wait": False})
               for _ in range(replicas)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in cluster.replicas:
        r.wait_ready()
    env = Env(upstream, proxy, db_url, cluster, prefix)
    env._db_ctx = db_ctx  # type: ignore[attr-defined]
    return env


def stop_env(env: Env) -> None:
    env.cluster.stop()
    env.proxy.stop()
    env.upstream.stop()
    env._db_ctx.__exit__(None, None, None)  # type: ignore[attr-defined]
    redis_cleanup(env.redis_prefix)
