"""Real parts for the reliability benches (bench/serving/reliability.py, hostile/) and the
reliability tests: a TCP proxy that simulates a database outage, `tollgate serve` replicas as
separate processes, and the schemathesis fuzz.

The outage is simulated by putting a TCP proxy on 127.0.0.1 in front of PostgreSQL and
pointing the gateway at the proxy: stopping the proxy closes its listener and cuts every
relayed connection (the gateway sees connections reset, new connections refused), starting
it again restores service. The machine's PostgreSQL is never touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml

from gateway.sandbox.local_server import free_port

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"



class TcpProxy:
    """Relays 127.0.0.1:<port> to ``target``; ``stop()`` is an outage, ``start()`` the end of it.

    The listening port stays the same across stop/start, so clients reconnect to it."""

    def __init__(self, target: tuple[str, int], port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._running = False

    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> TcpProxy:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(128)
        self._listener, self._running = ls, True
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()
        return self

    def stop(self) -> None:
        """Refuse new connections and reset the open ones."""
        self._running = False
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def _accept(self, ls: socket.socket) -> None:
        while self._running:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def pg_database(prefix: str = "tollgate_rel_") -> Iterator[str]:
    """A fresh PostgreSQL database on 127.0.0.1:5432, dropped afterwards: its URL."""
    name = prefix + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def via_proxy(url: str, proxy: TcpProxy) -> str:
    return url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")


def redis_cleanup(prefix: str) -> None:
    import redis

    r = redis.Redis.from_url(REDIS_URL)
    keys = list(r.scan_iter(f"{prefix}:*"))
    if keys:
        r.delete(*keys)
    r.close()


@dataclass
class Replica:
    """One `tollgate serve` process."""

    port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 600.0, need_db: bool = True) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica exited ({self.proc.returncode}):\n{self.log()}")
            try:
                r = httpx.get(self.base_url + ("/ready" if need_db else "/health"), timeout=2)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"replica not ready in {timeout_s}s:\n{self.log()}")

    def terminate(self) -> int:
        """SIGTERM; wait for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=120)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def log(self) -> str:
        try:
            return self.log_path.read_text()[-6000:]
        except OSError:
            return ""


@dataclass
class Cluster:
    """Config file and replicas sharing one database (and Redis)."""

    workdir: Path
    config: dict[str, Any]
    db_url: str
    env: dict[str, str] = field(default_factory=dict)
    replicas: list[Replica] = field(default_factory=list)

    def write_config(self) -> Path:
        path = self.workdir / "config.yaml"
        path.write_text(yaml.safe_dump(self.config))
        return path

    def start_replica(self, db_url: str | None = None, wait: bool = True,
                      need_db: bool = True, workers: int = 1) -> Replica:
        cfg = self.write_config()
        port = free_port()
        log_path = self.workdir / f"replica-{port}.log"
        env = {**os.environ, **self.env, "TOLLGATE_DATABASE_URL": db_url or self.db_url}
        exe = Path(sys.executable).with_name("tollgate")
        with open(log_path, "w") as out:
            proc = subprocess.Popen(
                [str(exe), "serve", "--config", str(cfg), "--host", "127.0.0.1",
                 "--port", str(port), "--log-level", "warning", "--workers", str(workers)],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.workdir)
        rep = Replica(port, proc, log_path)
        self.replicas.append(rep)
        if wait:
            rep.wait_ready(need_db=need_db)
        return rep

    def stop(self) -> None:
        for r in self.replicas:
            with contextlib.suppress(Exception):
                r.terminate()
            r.kill()


def run_fuzz(base_url: str, tenant_key: str, admin_key: str, max_examples: int = 30,
             seed: int = 0) -> dict[str, Any]:
    """Schemathesis over the app's own OpenAPI schema (positive and negative cases), every
    operation, authenticated as a tenant (and as the admin for /admin). Returns counts and
    the first few 5xx cases."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hyp_seed
    from hypothesis.errors import InvalidArgument, Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(base_url + "/openapi.json")
    total, server_errors, failures = 0, 0, []
    statuses: dict[int, int] = {}
    skipped: list[str] = []
    def make_probe(op: Any, key: str, strategy: Any) -> Any:
        @hyp_seed(seed)
        @settings(max_examples=max_examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def probe(case: Any) -> None:
            nonlocal total, server_errors
            headers = {**(case.headers or {}), "authorization": f"Bearer {key}"}
            resp = case.call(base_url=base_url, headers=headers, timeout=60)
            total += 1
            statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1
            if resp.status_code >= 500:
                server_errors += 1
                if len(failures) < 5:
                    failures.append({"op": op.label, "status": resp.status_code,
                                     "body": case.body if not callable(case.body) else None,
                                     "response": resp.text[:300]})

        return probe

    for result in schema.get_all_operations():
        op = result.ok()
        key = admin_key if op.path.startswith("/admin") else tenant_key
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                make_probe(op, key, op.as_strategy(generation_mode=mode))()
            except (Unsatisfiable, InvalidArgument) as e:  # nothing to generate in this mode
                skipped.append(f"{op.label} {mode.value}: {type(e).__name__}")
    return {"cases": total, "server_errors": server_errors, "failures": failures,
            "statuses": statuses, "skipped": skipped}
