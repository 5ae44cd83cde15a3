"""Alembic environment: migrates the database whose URL it is given.

The URL comes from the Alembic config (`sqlalchemy.url`, set by `gateway.store.migrate`), or
else `TOLLGATE_DATABASE_URL`, or else the SQLite default. A caller may instead pass an open
connection in `config.attributes["connection"]`. On PostgreSQL the run holds an advisory
lock, so replicas that all upgrade on start apply each revision exactly once.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text
from sqlalchemy.pool import NullPool

from gateway.store.engine import database_url_from_env, make_engine, normalize_url
from gateway.store.migrate import model_metadata

# Arbitrary constant: "tollgat" in ASCII, as a bigint advisory-lock key.
PG_MIGRATION_LOCK_KEY = 0x746F6C6C67617400

config = context.config
target_metadata = model_metadata()


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or database_url_from_env()


def _configure(**kwargs: object) -> None:
    # Batch mode lets later revisions ALTER tables on SQLite (copy-and-move).
    context.configure(target_metadata=target_metadata, render_as_batch=True,
                      compare_type=True, **kwargs)


def _migrate(conn: Connection) -> None:
    pg = conn.dialect.name == "postgresql"
    if pg:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": PG_MIGRATION_LOCK_KEY})
        conn.commit()
    try:
        _configure(connection=conn)
        with context.begin_transaction():
            context.run_migrations()
        conn.commit()
    finally:
        if pg:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": PG_MIGRATION_LOCK_KEY})
            conn.commit()


def run_offline() -> None:
    _configure(url=normalize_url(_url()), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    conn = config.attributes.get("connection")
    if conn is not None:
        _migrate(conn)
        return
    engine = make_engine(_url(), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            _migrate(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
