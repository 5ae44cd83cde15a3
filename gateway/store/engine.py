"""Engine creation for the two supported databases.

SQLite (the embedded default) gets WAL so readers never block the single writer, a busy
timeout so concurrent writers queue instead of failing, foreign keys on, and a pool that keeps
as many connections as the store's thread limiter lets run at once (``SQLITE_POOL_SIZE``).
PostgreSQL gets a bounded pool with pre-ping of idle connections (see
`_install_idle_pre_ping`), so a connection that died while the database restarted is replaced
on checkout instead of failing a request.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import QueuePool, StaticPool

DEFAULT_DATABASE_URL = "sqlite:///./tollgate.db"
SQLITE_BUSY_TIMEOUT_S = 30.0
# SQLite file: connections kept open. SQLAlchemy's default (5 kept, 10 more opened and closed
# as needed) churned under load: the store runs up to 8 threads at once (``pool_capacity``)
# and the log and learning writers hold one more each, so every request past the fifth opened
# a new connection (its PRAGMAs, its first read of the schema) and closed it again: 19 opens for
# 160 reservations in waves of 32, against at most 8 kept (tests/gateway/store/test_engine_pool.py).
SQLITE_POOL_SIZE = 8
SQLITE_MAX_OVERFLOW = 8  # beyond the store's threads: the writers, the dashboard, admin
PG_POOL_SIZE = 10
PG_MAX_OVERFLOW = 10
PG_CONNECT_TIMEOUT_S = 5
PG_PING_AFTER_IDLE_S = 2.0
PG_TCP_USER_TIMEOUT_MS = 15_000


def _json_dumps(value: Any) -> str:
    """JSON columns: values json cannot encode (e.g. numpy scalars) are stored as text
    rather than failing the whole log batch."""
    return json.dumps(value, default=str)


def database_url_from_env(default: str = DEFAULT_DATABASE_URL) -> str:
    """`TOLLGATE_DATABASE_URL` or the SQLite file in the working directory."""
    return os.environ.get("TOLLGATE_DATABASE_URL") or default


def normalize_url(url: str | URL) -> URL:
    """Map `postgresql://` / `postgres://` (and psycopg2 spellings) to psycopg 3."""
    u = make_url(url) if isinstance(url, str) else url
    if u.drivername in ("postgresql", "postgres", "postgresql+psycopg2", "postgresql+psycopg"):
        u = u.set(drivername="postgresql+psycopg")
    elif u.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported database URL {u.render_as_string(hide_password=True)}: "
                         "use sqlite:///path or postgresql://user@host/db")
    return u


def pool_capacity(engine: Engine) -> int:
    """How many connections the engine can hand out at once (sizes the thread limiter)."""
    pool = engine.pool
    if isinstance(pool, StaticPool):
        return 1  # one shared connection (in-memory SQLite): one thread at a time
    if isinstance(pool, QueuePool):
        capacity = pool.size() + max(0, pool._max_overflow)  # no public getter for overflow
        return max(1, min(capacity, SQLITE_POOL_SIZE) if engine.dialect.name == "sqlite"
                   else capacity)
    return 8


def make_engine(url: str | URL, *, busy_timeout_s: float = SQLITE_BUSY_TIMEOUT_S,
                ping_after_idle_s: float = PG_PING_AFTER_IDLE_S, **kwargs: Any) -> Engine:
    """Create the engine for `url` with the settings this module's docstring explains."""
    u = normalize_url(url)
    kwargs.setdefault("json_serializer", _json_dumps)
    if u.get_backend_name() == "sqlite":
        if u.database in (None, "", ":memory:"):
            # In memory every connection would be its own empty database: share one.
            kwargs.setdefault("poolclass", StaticPool)
        elif "poolclass" not in kwargs:
            kwargs.setdefault("pool_size", SQLITE_POOL_SIZE)
            kwargs.setdefault("max_overflow", SQLITE_MAX_OVERFLOW)
        engine = create_engine(
            u,
            connect_args={"timeout": busy_timeout_s, "check_same_thread": False},
            **kwargs,
        )
        busy_ms = int(busy_timeout_s * 1000)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            if u.database and u.database != ":memory:":
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={busy_ms}")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    if "poolclass" not in kwargs:
        kwargs.setdefault("pool_size", PG_POOL_SIZE)
        kwargs.setdefault("max_overflow", PG_MAX_OVERFLOW)
        kwargs.setdefault("pool_timeout", 10)
        kwargs.setdefault("pool_recycle", 1800)
    connect_args = kwargs.pop("connect_args", {})
    connect_args.setdefault("connect_timeout", PG_CONNECT_TIMEOUT_S)
    # A database host that vanishes (network partition, VM gone) never closes the socket:
    # keepalives and a TCP user timeout turn a hang into an error within ~15 s.
    connect_args.setdefault("keepalives", 1)
    connect_args.setdefault("keepalives_idle", 5)
    connect_args.setdefault("keepalives_interval", 2)
    connect_args.setdefault("keepalives_count", 3)
    connect_args.setdefault("tcp_user_timeout", PG_TCP_USER_TIMEOUT_MS)
    engine = create_engine(u, connect_args=connect_args, **kwargs)
    _install_idle_pre_ping(engine, ping_after_idle_s)
    return engine


def _install_idle_pre_ping(engine: Engine, ping_after_idle_s: float) -> None:
    """Pre-ping, but only connections that sat idle in the pool for `ping_after_idle_s`.

    SQLAlchemy's `pool_pre_ping` pings on every checkout, and with psycopg that ping is
    BEGIN + SELECT 1 + ROLLBACK: three round trips before every reserve and settle. A
    connection checked in a moment ago is alive; one that idled may have been cut (database
    restart, failover, idle timeout), so only that one is pinged, in autocommit (one round
    trip). A failed ping raises DisconnectionError, on which the pool discards the connection
    and checks out a fresh one, as with `pool_pre_ping`.
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_conn: Any, record: Any) -> None:
        record.info["tollgate_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _maybe_ping(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("tollgate_idle_since")
        if since is None or time.monotonic() - since < ping_after_idle_s:
            return  # a brand-new connection (no checkin yet) or a recently used one
        try:
            autocommit = dbapi_conn.autocommit
            dbapi_conn.autocommit = True
            dbapi_conn.execute("SELECT 1")
            dbapi_conn.autocommit = autocommit
        except Exception as exc:
            raise DisconnectionError(f"pre-ping failed: {type(exc).__name__}") from exc


def describe_error(exc: BaseException) -> str:
    """One line saying why the database could not be used: the driver's own first line
    (e.g. ``database "x" does not exist``), not the SQLAlchemy wrapper or a traceback."""
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:  # the innermost driver error says most
        seen.add(id(err))
        orig = getattr(err, "orig", None)
        if orig is not None:
            err = orig
            break
        if err.__cause__ is None:
            break
        err = err.__cause__
    text = str(err or exc).strip().splitlines()
    line = " ".join(text[0].split()) if text else type(err or exc).__name__
    return line.removeprefix("connection failed: ")


def display_url(url: str | URL) -> str:
    """The URL with its password hidden, for messages."""
    u = make_url(url) if isinstance(url, str) else url
    return u.render_as_string(hide_password=True)
