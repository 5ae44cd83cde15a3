"""`tollgate logs` reads the database of the config `serve` reads (--config, $TOLLGATE_CONFIG,
./config.yaml, ...), and reading never leaves an empty SQLite file behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gateway.cli import main
from gateway.store.migrate import upgrade


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("TOLLGATE_DATABASE_URL", "TOLLGATE_CONFIG", "TOLLGATE_HOME"):
        monkeypatch.delenv(var, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def _config_with_db(folder: Path) -> tuple[Path, Path]:
    db = folder / "gateway.db"
    upgrade(f"sqlite:///{db}")  # as a gateway starting on it leaves it
    cfg = folder / "config.yaml"
    cfg.write_text(yaml.safe_dump({"database_url": f"sqlite:///{db}"}))
    return cfg, db


def test_logs_reads_the_database_of_dot_config_yaml(clean_env: Path) -> None:
    _config_with_db(clean_env)
    res = CliRunner().invoke(main, ["logs"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("time (UTC)")  # the table header: the log was found, empty
    assert not (clean_env / "tollgate.db").exists()


def test_logs_reads_the_database_of_tollgate_config(clean_env: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cfg, _ = _config_with_db(elsewhere)
    monkeypatch.setenv("TOLLGATE_CONFIG", str(cfg))
    res = CliRunner().invoke(main, ["logs", "--format", "jsonl"])
    assert res.exit_code == 0, res.output
    assert not (clean_env / "tollgate.db").exists()


def test_logs_without_a_database_says_so_and_creates_none(clean_env: Path) -> None:
    res = CliRunner().invoke(main, ["logs"])  # the packaged config: sqlite:///./tollgate.db
    assert res.exit_code != 0
    assert "no database at" in res.output and "tollgate.db" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert list(clean_env.iterdir()) == []  # no tollgate.db, no -wal, no -shm


def test_logs_config_naming_a_missing_file_creates_none(clean_env: Path) -> None:
    cfg = clean_env / "c.yaml"
    cfg.write_text(yaml.safe_dump({"database_url": f"sqlite:///{clean_env / 'x.db'}"}))
    res = CliRunner().invoke(main, ["logs", "--config", str(cfg)])
    assert res.exit_code != 0 and "no database at" in res.output
    assert not (clean_env / "x.db").exists()
