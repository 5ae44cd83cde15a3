"""Run Alembic from code: `tollgate db upgrade` and the upgrade a store does on start.

Alembic (with Mako, ~12 MB of every worker) is imported only to migrate: a store whose
database is already at the head revision (every worker of `serve --workers N` after the
parent upgraded, every restart) reads the heads from the revision files' own assignments.
"""

from __future__ import annotations

import ast
import importlib
import threading
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, MetaData, inspect

from gateway.store.engine import normalize_url

if TYPE_CHECKING:
    from alembic.config import Config

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
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("path_separator", "os")
    # ConfigParser interpolation: a literal % in a password must be doubled.
    rendered = normalize_url(url).render_as_string(hide_password=False)
    cfg.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` up to `revision` (idempotent)."""
    from alembic import command

    with _ALEMBIC_LOCK:
        command.upgrade(alembic_config(url), revision)


def upgrade_engine(engine: Engine, revision: str = "head") -> None:
    """Upgrade through an existing engine (one connection, released afterwards); nothing to
    import or run when the database is at the single head already."""
    heads = script_heads()
    if revision == "head" and len(heads) == 1 and current_revision(engine) == heads[0]:
        return
    from alembic import command

    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with _ALEMBIC_LOCK, engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def head_revisions() -> tuple[str, ...]:
    """All heads of the revision graph; more than one means two revisions forked."""
    from alembic.script import ScriptDirectory

    return tuple(ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads())


@cache
def script_heads() -> tuple[str, ...]:
    """The heads as the revision files declare them (``revision``, ``down_revision``),
    without importing Alembic; tested equal to ``head_revisions()``."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in sorted((migrations_dir() / "versions").glob("*.py")):
        values = {}
        for node in ast.parse(path.read_text()).body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                else None)
            if isinstance(target, ast.Name) and target.id in ("revision", "down_revision") \
                    and node.value is not None:
                values[target.id] = ast.literal_eval(node.value)
        if "revision" not in values:
            continue
        revisions.add(values["revision"])
        down = values.get("down_revision")
        parents.update([down] if isinstance(down, str) else (down or ()))
    return tuple(sorted(revisions - parents))


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when Alembic never ran there."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        row = conn.exec_driver_sql("SELECT version_num FROM alembic_version").first()
        return None if row is None else str(row[0])
