"""Run Alembic from code: `tollgate db upgrade` and the upgrade a store does on start."""

from __future__ import annotations

import importlib
import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, MetaData, inspect

from gateway.store.engine import normalize_url

# Alembic keeps the running migration in module globals (`alembic.context`), so two upgrades
# in one process (two stores starting in threads) must not overlap. This lock guards that
# library global; across processes and replicas the PostgreSQL advisory lock in env.py does.
_ALEMBIC_LOCK = threading.Lock()


# Modules whose tables are declared on `gateway.store.models.Base`: importing them registers
# the tables for Alembic (env.py's target metadata) and for the schema test. An area that
# adds tables in a later revision lists its models module here. They are imported only
# when migrating, so `import gateway.store` stays light (the CLI and every replica pay it).
MODEL_MODULES = ("gateway.store.models", "gateway.learning.tables")


def model_metadata() -> MetaData:
    """`Base.metadata` with every area's tables registered on it."""
    for name in MODEL_MODULES:
        importlib.import_module(name)
    from gateway.store.models import Base

    return Base.metadata


def migrations_dir() -> Path:
    """The `migrations` package directory, wherever it is installed."""
    import migrations

    return Path(migrations.__file__).resolve().parent


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("path_separator", "os")
    # ConfigParser interpolation: a literal % in a password must be doubled.
    rendered = normalize_url(url).render_as_string(hide_password=False)
    cfg.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` up to `revision` (idempotent)."""
    with _ALEMBIC_LOCK:
        command.upgrade(alembic_config(url), revision)


def upgrade_engine(engine: Engine, revision: str = "head") -> None:
    """Upgrade through an existing engine (one connection, released afterwards)."""
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with _ALEMBIC_LOCK, engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def head_revisions() -> tuple[str, ...]:
    """All heads of the revision graph; more than one means two revisions forked."""
    return tuple(ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads())


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when Alembic never ran there."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        row = conn.exec_driver_sql("SELECT version_num FROM alembic_version").first()
        return None if row is None else str(row[0])
