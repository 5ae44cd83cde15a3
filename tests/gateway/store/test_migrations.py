"""Schema through Alembic only: upgrades on empty databases, one linear chain, models that
match the migrations, concurrent upgrades by replicas."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from click.testing import CliRunner
from sqlalchemy import inspect

from gateway.cli import main
from gateway.store import make_engine
from gateway.store.migrate import (
    alembic_config,
    current_revision,
    head_revisions,
    model_metadata,
    script_heads,
    upgrade,
    upgrade_engine,
)

TABLES = {"tenants", "api_keys", "budget_reservations", "outage_charges", "settings",
          "request_logs", "alembic_version"}


def test_revisions_form_one_linear_chain() -> None:
    """Other areas add revisions on top: there must stay exactly one head and no merges."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(head_revisions()) == 1
    seen = []
    for rev in script.walk_revisions():  # head → base
        assert not isinstance(rev.down_revision, tuple | list), f"{rev.revision} is a merge"
        assert len(rev.revision) <= 32 and rev.revision[:4].isdigit(), rev.revision
        seen.append(rev.revision)
    assert seen[-1] == "0001_initial" and len(seen) == len(set(seen))


def test_the_heads_read_without_alembic_are_alembics(tmp_path: Path) -> None:
    """A store at the head skips Alembic (~12 MB a worker) on the heads read from the
    revision files; they must be Alembic's own, and a database behind them still upgrades."""
    assert script_heads() == head_revisions()
    engine = make_engine(f"sqlite:///{tmp_path / 'behind.db'}")
    try:
        upgrade_engine(engine, "0001_initial")
        upgrade_engine(engine)
        assert current_revision(engine) == script_heads()[0]
        upgrade_engine(engine)  # at the head: returns without migrating
        assert current_revision(engine) == script_heads()[0]
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_db_upgrade_cli_on_an_empty_postgres_database(pg_url: str) -> None:
    tollgate = str(Path(sys.executable).parent / "tollgate")  # the installed console script
    out = subprocess.run([tollgate, "db", "upgrade", "--database-url", pg_url], check=False,
                         capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"database at revision {head_revisions()[0]}"
    again = CliRunner().invoke(main, ["db", "upgrade", "--database-url", pg_url])  # a no-op
    assert again.exit_code == 0 and head_revisions()[0] in again.output
    engine = make_engine(pg_url)
    try:
        assert TABLES <= set(inspect(engine).get_table_names())
        assert current_revision(engine) == head_revisions()[0]
    finally:
        engine.dispose()


def test_models_match_the_migrations(db_url: str) -> None:
    """What the code queries (the models of every module in `MODEL_MODULES`) is exactly what
    Alembic creates; tables no model declares are left out of the comparison."""
    upgrade(db_url)
    engine = make_engine(db_url)
    metadata = model_metadata()
    mine = set(metadata.tables)

    def only_store_tables(name: str | None, type_: str, parent: object) -> bool:
        return type_ != "table" or name in mine

    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"include_name": only_store_tables})
            diffs = compare_metadata(ctx, metadata)
    finally:
        engine.dispose()
    assert diffs == []


@pytest.mark.postgres
def test_replicas_upgrading_at_once_apply_each_revision_once(pg_url: str) -> None:
    """Two processes (as replicas starting together) and two threads (as stores in one
    process) upgrade the same empty database at once: no error, one schema."""
    ctx = multiprocessing.get_context("spawn")
    errors: list[BaseException] = []

    def in_thread() -> None:
        try:
            upgrade(pg_url)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        futures = [pool.submit(upgrade, pg_url) for _ in range(2)]
        threads = [threading.Thread(target=in_thread) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for f in futures:
            f.result()  # re-raises a replica's error
    assert errors == []
    engine = make_engine(pg_url)
    try:
        assert current_revision(engine) == head_revisions()[0]
    finally:
        engine.dispose()
