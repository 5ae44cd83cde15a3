"""The `tollgate tenants|keys|db` commands, run as a user runs them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gateway.cli import main
from tests.gateway.store import conftest as store_fixtures
from tests.gateway.store.conftest import started

# the store tests' database fixtures: a fresh SQLite file or PostgreSQL database per test
db_url, pg_url, sqlite_url = store_fixtures.db_url, store_fixtures.pg_url, store_fixtures.sqlite_url
anyio_backend = store_fixtures.anyio_backend

KEY_RE = re.compile(r"^sk-tg-[A-Za-z0-9_-]{43}$")


def _made(db_url: str) -> list[str]:
    """``--database-url db_url``, once `tollgate db upgrade` made the database there (no
    other command creates one)."""
    out = CliRunner().invoke(main, ["db", "upgrade", "--database-url", db_url])
    assert out.exit_code == 0, out.output
    return ["--database-url", db_url]


def _tollgate(*args: str, cwd: Path, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).parent / "tollgate")  # the installed console script
    full_env = {**os.environ, **(env or {})}
    full_env.pop("TOLLGATE_SECRET", None)
    return subprocess.run([exe, *args], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.anyio
async def test_tenants_create_prints_the_key_alone_on_the_last_line(tmp_path: Path) -> None:
    """The embedded default: no URL given, the SQLite file in the working directory, made by
    `tollgate db upgrade` (the only command that creates a database)."""
    env = {"TOLLGATE_DATABASE_URL": "", "TOLLGATE_CONFIG": ""}
    made = _tollgate("db", "upgrade", cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    out = _tollgate("tenants", "create", "acme", "--budget-usd", "2.5", "--period", "weekly",
                    cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    key = lines[-1]
    assert KEY_RE.match(key), out.stdout
    assert out.stdout.count(key) == 1 and key not in out.stderr  # shown once
    assert (tmp_path / "tollgate.db").exists()
    assert key.encode() not in (tmp_path / "tollgate.db").read_bytes()
    async with started(f"sqlite:///{tmp_path / 'tollgate.db'}") as store:
        tenant = await store.authenticate(key)
    assert tenant is not None and tenant.name == "acme"
    assert tenant.budget_usd == 2.5 and tenant.period == "weekly"


@pytest.mark.anyio
async def test_keys_create_list_revoke(db_url: str) -> None:
    runner = CliRunner()
    db = _made(db_url)
    created = runner.invoke(main, ["tenants", "create", "acme", *db])
    assert created.exit_code == 0, created.output
    first = created.output.splitlines()[-1]
    made = runner.invoke(main, ["keys", "create", "acme", "--name", "ci", *db])
    assert made.exit_code == 0, made.output
    second = made.output.splitlines()[-1]
    assert KEY_RE.match(second) and second != first
    key_id = re.search(r"key id:\s+(key_\w+)", made.output).group(1)

    listed = runner.invoke(main, ["keys", "list", "--tenant", "acme", *db])
    assert listed.exit_code == 0 and key_id in listed.output
    assert first not in listed.output and second not in listed.output  # never the keys
    assert runner.invoke(main, ["keys", "revoke", key_id, *db]).exit_code == 0
    async with started(db_url) as store:
        assert await store.authenticate(second) is None
        assert (await store.authenticate(first)).name == "acme"

    missing = runner.invoke(main, ["keys", "revoke", "key_nope", *db])
    assert missing.exit_code == 1 and "no key" in missing.output
    dup = runner.invoke(main, ["tenants", "create", "acme", *db])
    assert dup.exit_code == 1 and "already exists" in dup.output


def test_tenants_list_and_budget(db_url: str) -> None:
    runner = CliRunner()
    db = _made(db_url)
    runner.invoke(main, ["tenants", "create", "acme", "--budget-usd", "5", *db])
    runner.invoke(main, ["tenants", "create", "globex", "--period", "monthly", *db])
    out = runner.invoke(main, ["tenants", "list", "--json", *db])
    assert out.exit_code == 0
    assert '"name": "acme"' in out.output and '"budget_usd": 5.0' in out.output
    assert '"name": "globex"' in out.output and '"budget_usd": null' in out.output
    changed = runner.invoke(main, ["tenants", "budget", "globex", "--budget-usd", "1.25",
                                   "--period", "daily", *db])
    assert changed.exit_code == 0 and "$1.250000 per daily period" in changed.output
    table = runner.invoke(main, ["tenants", "list", *db])
    assert re.search(r"globex\s+\w+\s+\$1\.250000\s+daily", table.output), table.output


@pytest.mark.parametrize(("policy", "names"), [
    ('{"allowed_models": "gpt-4o-mini"}', "policy.allowed_models"),  # a string, not a list
    ('{"max_cost_usd": "cheap"}', "policy.max_cost_usd"),
    ('{"tokens_per_minute": -5}', "policy.tokens_per_minute"),
    ('["gpt-4o-mini"]', "JSON object"),
])
def test_tenants_create_refuses_a_bad_policy_in_one_line(db_url: str, policy: str,
                                                         names: str) -> None:
    runner = CliRunner()
    db = _made(db_url)
    out = runner.invoke(main, ["tenants", "create", "acme", "--policy", policy, *db])
    assert out.exit_code == 2 and names in out.output
    assert [ln for ln in out.output.splitlines() if ln.startswith("Error:")] == [
        out.output.strip().splitlines()[-1]]
    good = runner.invoke(main, ["tenants", "create", "acme", *db, "--policy",
                                '{"allowed_models": ["gpt-4o-mini"], "max_cost_usd": 0.5}'])
    assert good.exit_code == 0, good.output
    listed = runner.invoke(main, ["tenants", "list", "--json", *db]).output
    assert '"policy": {"allowed_models": ["gpt-4o-mini"], "max_cost_usd": 0.5}' in listed


@pytest.mark.parametrize("command", [("tenants", "create", "acme"), ("keys", "list"),
                                     ("tenants", "list"), ("keys", "create", "acme"),
                                     ("db", "current")])
def test_no_command_but_db_upgrade_creates_a_database(tmp_path: Path,
                                                      command: tuple[str, ...]) -> None:
    """Run where no database is: one line saying so and where the URL came from, no file
    left behind, and no key printed for a database no gateway reads."""
    out = _tollgate(*command, cwd=tmp_path,
                    env={"TOLLGATE_DATABASE_URL": "", "TOLLGATE_CONFIG": ""})
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"no database at {tmp_path / 'tollgate.db'}" in lines[0]
    assert "tollgate db upgrade" in lines[0]
    assert not (tmp_path / "tollgate.db").exists()


@pytest.mark.anyio
async def test_commands_use_the_database_serve_would(tmp_path: Path, pg_url: str) -> None:
    """A gateway on PostgreSQL configured by ./config.yaml: `tenants create` and `keys list`
    run there without --config find the same database (the key authenticates on it), and
    leave no ./tollgate.db behind."""
    (tmp_path / "config.yaml").write_text(f"database_url: {pg_url}\n")
    env = {"TOLLGATE_DATABASE_URL": "", "TOLLGATE_CONFIG": ""}
    async with started(pg_url):  # the gateway's store: the schema exists
        pass
    out = _tollgate("tenants", "create", "acme", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    listed = _tollgate("keys", "list", cwd=tmp_path, env=env)
    assert listed.returncode == 0 and "acme" in listed.stdout, listed.stderr
    async with started(pg_url) as store:
        assert await store.authenticate(out.stdout.splitlines()[-1]) is not None
    assert not (tmp_path / "tollgate.db").exists()


@pytest.mark.anyio
async def test_a_database_without_the_schema_is_named_not_filled(pg_url: str) -> None:
    """An empty PostgreSQL database (created, never served): a command that only reads says
    it has no Tollgate tables and creates none."""
    from sqlalchemy import create_engine, inspect

    for read in (["keys", "list"], ["tenants", "list"]):
        out = CliRunner().invoke(main, [*read, "--database-url", pg_url])
        assert out.exit_code == 1 and "has no Tollgate tables" in out.output, out.output
    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
