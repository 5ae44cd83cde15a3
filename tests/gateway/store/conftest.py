"""Fixtures for the store tests: a real SQLite file and a real PostgreSQL database.

Every test parametrised on `db_url` runs twice. The PostgreSQL case creates its own database
on 127.0.0.1:5432 and drops it afterwards; if that server is not reachable the case is
skipped (and says so), the SQLite case still runs.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.store import Store

PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


class FakeClock:
    """An injectable clock: tests move time instead of sleeping."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 14, 12, 0, tzinfo=UTC))


def _pg_admin() -> psycopg.Connection:
    try:
        return psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):  # CI's machine runs PostgreSQL: a skip there would hide a failure
            raise
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432 not reachable: {exc}")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test; dropped afterwards."""
    name = f"tollgate_test_{uuid.uuid4().hex[:12]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tollgate.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


def set_allow_connections(url: str, allow: bool) -> None:
    """Take a PostgreSQL database offline (and kick its sessions) or back online: a real
    outage of that database while the server keeps running."""
    name = url.rsplit("/", 1)[1]
    with _pg_admin() as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allow).lower()}')
        if not allow:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))


@asynccontextmanager
async def started(url: str, **kwargs: Any) -> AsyncIterator[Store]:
    store = Store.from_url(url, **kwargs)
    await store.start()
    try:
        yield store
    finally:
        await store.close()
