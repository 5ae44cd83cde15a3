"""`tollgate serve` names what stops it: a port in use before any startup work; a PostgreSQL
database that does not exist in one line with its cause, no traceback storm while it stays
missing, and the gateway recovers by itself once it is created."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner

from gateway.cli import main, outage_log
from gateway.sandbox.local_server import free_port
from gateway.store.errors import StoreUnavailable
from tests.fakes.upstream import FakeBackend, FakeUpstream


def test_a_port_in_use_is_reported_before_startup(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.cli import serve

    def no_startup(settings: object) -> None:
        raise AssertionError("the app was built although the port is taken")

    monkeypatch.setattr(serve, "_build_app", no_startup)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        t0 = time.monotonic()
        res = CliRunner().invoke(main, ["serve", "--port", str(port)])
        took = time.monotonic() - t0
    assert res.exit_code != 0
    assert res.output.strip() == (f"Error: cannot listen on 127.0.0.1:{port}: already in use: "
                                  "another process listens there (stop it or pass --port)")
    assert took < 3


def test_a_free_port_passes_the_check() -> None:
    from gateway.cli.serve import check_port_free

    port = free_port()
    check_port_free("127.0.0.1", port)
    check_port_free("127.0.0.1", port)  # the check let go of it


def _outage() -> BaseException:
    import sqlalchemy.exc as sa_exc

    orig = Exception('connection failed: connection to server at "127.0.0.1", port 5432 '
                     'failed: FATAL:  database "nope" does not exist')
    try:
        try:
            raise sa_exc.OperationalError("SELECT 1", {}, orig)
        except sa_exc.OperationalError as e:
            raise StoreUnavailable("database unavailable (OperationalError)") from e
    except StoreUnavailable as e:
        return e


def test_the_outage_filter_logs_the_cause_once_a_minute() -> None:
    now = [0.0]
    filt = outage_log.DatabaseOutageFilter(every_s=60, clock=lambda: now[0])
    log = logging.getLogger("test.outage")

    def record(exc: BaseException | None) -> logging.LogRecord:
        info = (type(exc), exc, exc.__traceback__) if exc else None
        return log.makeRecord(log.name, logging.ERROR, __file__, 1, "poll failed", None, info)

    first = record(_outage())
    assert filt.filter(first)
    assert first.exc_info is None and first.getMessage() == (
        'poll failed: database unavailable: connection to server at "127.0.0.1", port 5432 '
        'failed: FATAL: database "nope" does not exist')
    for step in range(11):  # every 5 s for a minute: held back
        now[0] = 5.0 * (step + 1)
        assert not filt.filter(record(_outage()))
    now[0] = 61.0
    again = record(_outage())
    assert filt.filter(again) and again.getMessage().endswith("(11 more since, not shown)")
    other = record(ValueError("a bug"))  # not an outage: untouched, traceback kept
    assert filt.filter(other) and other.exc_info is not None


@pytest.mark.postgres
@pytest.mark.slow
def test_a_missing_database_is_one_line_and_the_gateway_recovers(tmp_path: Path) -> None:
    import psycopg

    from bench.serving.cluster import PG_ADMIN_URL

    name = "tollgate_missing_" + uuid.uuid4().hex[:10]
    with FakeUpstream([FakeBackend("fake-a", reply="hi")]) as up:
        cfg = tmp_path / "config.yaml"
        cfg.write_text(yaml.safe_dump({
            "model_list": [up.model_entry("fake-a")],
            "reliability": {"spool_dir": str(tmp_path / "spool")},
        }))
        port = free_port()
        env = {**os.environ,
               "TOLLGATE_DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{name}"}
        exe = shutil.which("tollgate", path=str(Path(sys.executable).parent)) or "tollgate"
        out = (tmp_path / "serve.log").open("w")
        proc = subprocess.Popen([exe, "serve", "--config", str(cfg), "--port", str(port)],
                                env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 300
            while True:  # started (alive) although the database is missing
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()
                try:
                    if httpx.get(url + "/health", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "tollgate serve never started"
                time.sleep(0.2)
            time.sleep(12)  # two router-version polls and several store retries
            r = httpx.get(url + "/ready", timeout=5)
            assert r.status_code == 503 and r.json()["database"] is False
            text = (tmp_path / "serve.log").read_text()
            assert "Traceback" not in text, text
            cause = [line for line in text.splitlines() if "does not exist" in line]
            # the startup block's line, then per worker (one per core on PostgreSQL): the
            # store's start line and each poller once (router version, cold-start refinement:
            # a fault is logged once while it lasts, not at every poll)
            workers = int(re.search(r"workers +(\d+)", text).group(1))
            assert 1 <= len(cause) <= 1 + 3 * workers, text
            start = next(line for line in cause if "unavailable at start" in line)
            assert f'database "{name}" does not exist' in start
            assert f"createdb {name}" in start and "retrying in the background" in start
            with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            deadline = time.monotonic() + 90
            while httpx.get(url + "/ready", timeout=5).status_code != 200:
                assert time.monotonic() < deadline, "the gateway did not recover"
                time.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            out.close()
            with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
